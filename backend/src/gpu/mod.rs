//! GPU runtimes loaded at run time (CUDA driver + NVRTC, HIP + hiprtc) behind one API table, the
//! owning handle types, the kernel JIT with its disk cache, and the elementwise launchers.
//!
//! Layers, as in cudarc: `cuda.rs`/`hip.rs`/`rtc.rs` hold the raw symbol tables (fallible at load
//! time) and turn each call into a `GpuResult`; `safe.rs` owns handles. Zero GPUs is a normal
//! state: a missing library or symbol only shows in the [`ProbeReport`].

pub mod api;
pub mod check;
pub mod cuda;
pub mod device;
pub mod elementwise;
pub mod exec;
pub mod hip;
pub mod jit;
pub mod kernels;
pub(crate) mod loader;
pub mod memory;
pub mod ops;
pub mod probe;
pub mod profile;
pub mod registry;
pub mod rtc;
pub mod safe;
pub mod split;
pub mod ways;

pub use api::{
    CompileError, DeviceInfo, DevicePtr, GpuError, GpuResult, GpuRuntime, KernelCompiler, LaunchConfig, RuntimeKind,
};
pub use device::{GpuDevice, Runway, Timed};
pub use jit::{KernelCache, Origin};
pub use kernels::{modules_of_catalog, program_name, KernelError, Kernels};
pub use loader::LibReport;
pub use memory::{DeviceAlloc, MemKind, PinnedAlloc};
pub use probe::{probe, ProbeReport, RuntimeChoice, RuntimeReport};
pub use safe::{Context, DeviceBuffer, Event, Function, KernelArgs, Module, PinnedHostBuffer, Stream};
pub use tandem_kernels_hip::{catalog, units_of, KernelSource, KernelUnit};

use std::sync::{Arc, OnceLock};

/// A vendor runtime with its compiler and devices, ready to use.
#[derive(Clone)]
pub struct GpuBackend {
    pub runtime: Arc<dyn GpuRuntime>,
    pub compiler: Arc<dyn KernelCompiler>,
    pub devices: Vec<DeviceInfo>,
}

struct Loaded {
    report: ProbeReport,
    backends: Vec<GpuBackend>,
}

fn loaded() -> &'static Loaded {
    static L: OnceLock<Loaded> = OnceLock::new();
    L.get_or_init(|| {
        let choice = RuntimeChoice::from_env();
        if let Some(note) = &choice.1 {
            eprintln!("tandem: warning: {note}");
        }
        let (report, backends) = probe::load(choice);
        Loaded { report, backends }
    })
}

/// The usable runtimes (those with a compiler and at least one device), loaded once per process
/// as `TANDEM_RUNTIME` says. Empty without a GPU.
pub fn backends() -> &'static [GpuBackend] {
    &loaded().backends
}

/// What loading found, for `tandem info` and the info line.
pub fn report() -> &'static ProbeReport {
    &loaded().report
}
