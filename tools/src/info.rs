//! `tandem info`: devices, the GPU runtimes looked for and found, CPU features, threads, dispatch
//! registrations and the env config.

use tandem_backend::{devices, Config, DeviceKind, F16Prefill};

pub fn info() {
    let cfg = Config::get();
    let devs = devices();
    println!("devices: {}", devs.len());
    if devs.is_empty() {
        println!("  none (TANDEM_HOST_DEVICE=0 hides the host device and no GPU was found)");
    }
    for d in &devs {
        let kind = match d.kind() {
            DeviceKind::Gpu => "GPU",
            DeviceKind::Accel => "ACCEL",
        };
        println!("  {} [{kind}] {}", d.name(), d.description());
        if let tandem_backend::Device::Gpu(g) = &**d {
            let how = if g.context().dependent_launch() {
                "on (decode GEMVs and MUL_MAT_ID start while the kernel ahead ends)"
            } else {
                "off (needs NVIDIA sm_90+ with a CUDA 12 driver; TANDEM_DEPENDENT_LAUNCH=0 turns it off)"
            };
            println!("    dependent launches: {how}");
        }
    }
    println!("{}", tandem_backend::gpu::report());
    let features = tandem_ops::simd::features().names();
    println!(
        "cpu features: {}",
        if features.is_empty() {
            "none (scalar code paths)".to_string()
        } else {
            features.join(" ")
        }
    );
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let threads = if cfg.threads == 0 { cores } else { cfg.threads };
    println!("threads: {threads} CPU workers ({cores} available)");
    let regs = tandem_backend::gpu::registry::Registry::new(cfg);
    let enabled = regs.iter().filter(|(_, on)| *on).count();
    println!(
        "dispatch registrations: {} ({enabled} enabled; GPU devices only, the host device runs tandem's CPU code)",
        regs.len()
    );
    for (r, on) in regs.iter() {
        let fuses = r.fuses.map(|f| format!(" + {f}")).unwrap_or_default();
        println!(
            "  {:<28} {}{fuses}{}",
            r.name,
            r.op,
            if on { "" } else { "  [disabled]" }
        );
    }
    println!("environment:");
    let host = match cfg.host_device {
        None => "unset (host device offered only when no GPU is found)".to_string(),
        Some(true) => "1 (host device always offered)".to_string(),
        Some(false) => "0 (host device hidden)".to_string(),
    };
    println!("  TANDEM_HOST_DEVICE      {host}");
    println!(
        "  TANDEM_THREADS          {}",
        if cfg.threads == 0 {
            "unset (one per core)".to_string()
        } else {
            cfg.threads.to_string()
        }
    );
    println!(
        "  TANDEM_DISABLE_DISPATCH {}",
        if cfg.disable_dispatch.is_empty() {
            "unset".to_string()
        } else {
            cfg.disable_dispatch.join(",")
        }
    );
    println!("  TANDEM_LOG_DISPATCH     {}", on_off(cfg.log_dispatch));
    println!("  TANDEM_STATS            {}", on_off(cfg.stats));
    let f16_prefill = match cfg.f16_prefill {
        F16Prefill::Never => "never (0)",
        F16Prefill::Wide => "past 128 columns, tiles for half the compute units (default)",
        F16Prefill::Always => "every prefill shape (1)",
    };
    println!("  TANDEM_F16_PREFILL      {f16_prefill}");
    println!("  TANDEM_DEPENDENT_LAUNCH {}", on_off(cfg.dependent_launch));
    println!("  TANDEM_EARLY_ACTIVATIONS {}", on_off(cfg.early_activations));
    println!("  TANDEM_GRAPHS           {}", on_off(cfg.graphs));
    println!(
        "  TANDEM_WMMA_EMULATE     {}",
        cfg.wmma_emulate
            .map_or("unset".to_string(), |l| format!("gfx{l} layout"))
    );
    let scalar = std::env::var("TANDEM_CPU_SCALAR").is_ok_and(|v| v == "1");
    println!("  TANDEM_CPU_SCALAR       {}", on_off(scalar));
}

fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}
