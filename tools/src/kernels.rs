//! `tandem kernels`: the kernel catalog, and `--build` to compile every family for the GPUs
//! present (through the JIT disk cache, so a later start loads them instead of compiling).

use crate::common::pick_device;
use crate::progress::Progress;
use std::sync::Arc;
use tandem_backend::{devices, Device};

pub fn kernels(build: bool, device: Option<&str>) -> Result<bool, String> {
    // A device that does not exist is an error even without --build: the listing would
    // otherwise suggest it was looked at.
    let picked = device.map(|name| pick_device(Some(name))).transpose()?;
    let catalog = tandem_backend::gpu::catalog();
    println!("kernel families: {}", catalog.len());
    for k in catalog {
        let units = tandem_backend::gpu::units_of(k.family);
        let parts = if units.is_empty() {
            String::new()
        } else {
            format!(", compiled in {} units", units.len())
        };
        println!("  {:<14} {:<18} {} entries{parts}", k.family, k.file, k.entries.len());
    }
    if !build {
        return Ok(true);
    }
    let gpus: Vec<Arc<Device>> = match picked {
        Some(d) => vec![d],
        None => devices()
            .into_iter()
            .filter(|d| matches!(**d, Device::Gpu(_)))
            .collect(),
    };
    let gpus: Vec<_> = gpus
        .iter()
        .filter_map(|d| match &**d {
            Device::Gpu(g) => Some(g),
            Device::Host(_) => None,
        })
        .collect();
    if gpus.is_empty() {
        println!("kernels --build: no GPU device, nothing built");
        println!("{}", tandem_backend::gpu::report());
        return Ok(false);
    }
    let cache = tandem_backend::gpu::KernelCache::global();
    let mut ok = true;
    for g in gpus {
        println!(
            "{} ({}), cache {}",
            g.name(),
            g.info().arch,
            cache
                .dir()
                .map(|d| d.display().to_string())
                .unwrap_or_else(|| "off".into())
        );
        // Families compile side by side (each NVRTC / hiprtc program on its own thread, up to
        // one per core and at most 8, as each compile takes up to a few hundred MB); the
        // progress line names each one as it finishes.
        // The AMD matrix-tile family runs on an NVIDIA device only as the emulation test
        // (`TANDEM_WMMA_EMULATE`); it is the slowest to compile (minutes), so it is left out there.
        let skip_wmma = g.info().arch.starts_with("sm_") && tandem_backend::Config::get().wmma_emulate.is_none();
        if skip_wmma {
            println!("  wmma: left out (AMD matrix tiles; on NVIDIA only with TANDEM_WMMA_EMULATE)");
        }
        // Every module: a family whole, or each unit of one compiled in units.
        let catalog: Vec<_> = tandem_backend::gpu::modules_of_catalog()
            .into_iter()
            .filter(|(k, _)| !(skip_wmma && k.family == "wmma"))
            .collect();
        let mut progress = Progress::new("kernels --build", "modules", catalog.len());
        let workers = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
            .clamp(1, 8)
            .min(catalog.len().max(1));
        let next = std::sync::atomic::AtomicUsize::new(0);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            for _ in 0..workers {
                let tx = tx.clone();
                let (next, catalog) = (&next, &catalog);
                s.spawn(move || loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(&(k, unit)) = catalog.get(i) else { break };
                    let r = g.kernels().module(k.family, unit).map(|_| ());
                    let name = tandem_backend::gpu::program_name(k.family, unit);
                    if tx.send((name, r)).is_err() {
                        break;
                    }
                });
            }
            drop(tx);
            for (family, r) in rx {
                if let Err(e) = r {
                    ok = false;
                    progress.println(&format!("  {family:<14} FAIL: {e}"));
                }
                progress.step(&family);
            }
        });
        progress.finish();
        for r in g.kernels().records() {
            println!(
                "  {:<14} {:<8} {:>9.1} ms {:>9} bytes",
                r.unit.map_or(r.family.to_string(), |u| format!("{}.{u}", r.family)),
                format!("{:?}", r.origin).to_lowercase(),
                r.time.as_secs_f64() * 1e3,
                r.bytes
            );
        }
    }
    println!("kernels --build: {}", if ok { "ok" } else { "FAILED" });
    Ok(ok)
}
