//! The catalog of HIP C++ kernel sources. Each `*.hip` file holds one op family and includes the
//! portability header [`HEADER`] by name; the runtime compiles them at first use (hiprtc on AMD,
//! NVRTC on NVIDIA), handing the header over in memory so no include folder is needed.

/// The name kernels `#include`, and the contents the compilers get for it.
pub const HEADER_NAME: &str = "tandem_hip.h";
pub const HEADER: &str = include_str!("tandem_hip.h");

/// Every header a kernel may include, by include name: handed to the run-time compilers in
/// memory (the offline AMD check finds them beside the sources).
pub const HEADERS: &[(&str, &str)] = &[
    (HEADER_NAME, HEADER),
    ("tandem_quant.h", include_str!("tandem_quant.h")),
];

/// One kernel source file and the entry points it defines.
#[derive(Clone, Copy, Debug)]
pub struct KernelSource {
    /// Op family, e.g. `elementwise`; also the program name the compilers see.
    pub family: &'static str,
    /// File name under `kernels-hip/src/`, for messages and the offline compile check.
    pub file: &'static str,
    pub source: &'static str,
    /// `extern "C"` kernels the family defines (unmangled, so these are the symbol names).
    pub entries: &'static [&'static str],
    /// Compiler options of this family on top of the runtime's own (arch, language standard).
    pub options: &'static [&'static str],
}

mod fam;

/// Every kernel source tandem ships, in a fixed order (one entry per `*.hip` family).
pub fn catalog() -> &'static [KernelSource] {
    static ALL: std::sync::OnceLock<Vec<KernelSource>> = std::sync::OnceLock::new();
    ALL.get_or_init(|| fam::PARTS.iter().flat_map(|p| p.iter().copied()).collect())
}

/// The catalog entry of `family`.
pub fn find(family: &str) -> Option<&'static KernelSource> {
    catalog().iter().find(|k| k.family == family)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_entry_is_defined_in_its_source() {
        for k in catalog() {
            assert!(k.source.contains(&format!("#include \"{HEADER_NAME}\"")), "{}", k.file);
            for e in k.entries {
                let def = format!("{e}(");
                assert!(k.source.contains(&def), "{} lacks {e}", k.file);
                assert_eq!(k.source.matches(&def).count(), 1, "{e} defined twice in {}", k.file);
            }
        }
        let mut names: Vec<_> = catalog().iter().flat_map(|k| k.entries.iter()).collect();
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), n, "entry names must be unique across families");
        assert!(find("elementwise").is_some() && find("nope").is_none());
    }
}
