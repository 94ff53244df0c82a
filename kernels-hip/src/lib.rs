//! The catalog of HIP C++ kernel sources. Each `*.hip` file holds one op family; the runtime
//! compiles them at first use (hiprtc on AMD, NVRTC through the portability header on NVIDIA).

/// One kernel source file and the entry points it defines.
#[derive(Clone, Copy, Debug)]
pub struct KernelSource {
    /// Op family, e.g. `elementwise`.
    pub family: &'static str,
    pub source: &'static str,
    pub entries: &'static [&'static str],
}

/// Every kernel source tandem ships (GPU kernels arrive with the GPU runtime).
pub const CATALOG: &[KernelSource] = &[];
