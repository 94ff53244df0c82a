//! `tandem info`: devices, the GPU runtimes looked for and found, CPU features, threads, dispatch
//! registrations and the env config.

use tandem_backend::{devices, Config, DeviceKind, Source};

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
    println!(
        "  switches (TANDEM_DISABLE_DISPATCH names that pick among a registration's kernels): {}",
        tandem_backend::gpu::registry::SWITCHES.join(" ")
    );
    println!("environment (value: source; docs/env-vars.md):");
    for st in &cfg.settings {
        let source = match st.source {
            Source::Env => "env",
            Source::Default => "default",
        };
        println!("  {:<26} {} ({source})", st.name, st.value);
    }
    // The GPU runtime's variables, read where the runtimes load.
    let from = |name: &str| {
        if std::env::var_os(name).is_some() {
            "env"
        } else {
            "default"
        }
    };
    let report = tandem_backend::gpu::report();
    println!(
        "  {:<26} {} ({})",
        "TANDEM_RUNTIME",
        report.choice.name(),
        if report.note.is_some() {
            "default"
        } else {
            from("TANDEM_RUNTIME")
        }
    );
    let cache = tandem_backend::gpu::KernelCache::global()
        .dir()
        .map_or("off".to_string(), |d| d.display().to_string());
    println!(
        "  {:<26} {cache} ({})",
        "TANDEM_KERNEL_CACHE",
        from("TANDEM_KERNEL_CACHE")
    );
    for name in ["TANDEM_NVRTC", "TANDEM_HIPRTC"] {
        let v = std::env::var(name).unwrap_or_else(|_| "unset: the usual locations".into());
        println!("  {name:<26} {v} ({})", from(name));
    }
    for w in &cfg.warnings {
        println!("  warning: {w}");
    }
    for w in cfg.unmatched_disables(&tandem_backend::gpu::registry::disable_names()) {
        println!("  warning: {w}");
    }
}
