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
        println!("  {:<14} {:<18} {} entries", k.family, k.file, k.entries.len());
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
        // One family at a time, so the progress shows which one is compiling (some take a
        // minute on first use).
        let mut progress = Progress::new("kernels --build", "families", catalog.len());
        for k in catalog {
            if let Err(e) = g.kernels().module(k.family) {
                ok = false;
                progress.println(&format!("  {:<14} FAIL: {e}", k.family));
            }
            progress.step(k.family);
        }
        progress.finish();
        for r in g.kernels().records() {
            println!(
                "  {:<14} {:<8} {:>9.1} ms {:>9} bytes",
                r.family,
                format!("{:?}", r.origin).to_lowercase(),
                r.time.as_secs_f64() * 1e3,
                r.bytes
            );
        }
    }
    println!("kernels --build: {}", if ok { "ok" } else { "FAILED" });
    Ok(ok)
}
