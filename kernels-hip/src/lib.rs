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
    /// `extern "C"` kernels the family defines (unmangled, so these are the symbol names); for a
    /// family compiled in units, its units' entries in [`catalog`] (its own list is empty).
    pub entries: &'static [&'static str],
    /// Compiler options of this family on top of the runtime's own (arch, language standard).
    pub options: &'static [&'static str],
}

/// A part of a family compiled on its own: its source with `-DTANDEM_UNIT=1 -DTANDEM_UNIT_<NAME>=1`
/// holds `entries` only, so a model that needs one weight type's kernels compiles those alone
/// (the whole `gemv` family takes over a minute of ptxas; its q4_0 part a tenth of that).
#[derive(Clone, Copy, Debug)]
pub struct KernelUnit {
    /// Short name, e.g. `q4_0`; the program is named `<family>.<name>`.
    pub name: &'static str,
    pub entries: &'static [&'static str],
}

impl KernelUnit {
    pub const fn new(name: &'static str, entries: &'static [&'static str]) -> KernelUnit {
        KernelUnit { name, entries }
    }

    /// The macro the family's source tests for this unit's entries: `TANDEM_UNIT_<NAME>`.
    pub fn define(&self) -> String {
        format!("TANDEM_UNIT_{}", self.name.to_uppercase())
    }
}

mod fam;

/// The units `family` compiles in at run time; empty where it compiles whole.
pub fn units_of(family: &str) -> &'static [KernelUnit] {
    match family {
        "gemv" => fam::GEMV_UNITS,
        "flash_attn" => fam::FLASH_ATTN_UNITS,
        "mma" => fam::MMA_UNITS,
        "elementwise" => fam::ELEMENTWISE_UNITS,
        "copy" => fam::COPY_UNITS,
        "setrows" => fam::SETROWS_UNITS,
        _ => &[],
    }
}

/// The unit of `family` that defines `entry`, if the family compiles in units.
pub fn unit_of(family: &str, entry: &str) -> Option<&'static KernelUnit> {
    units_of(family).iter().find(|u| u.entries.contains(&entry))
}

/// Every kernel source tandem ships, in a fixed order (one entry per `*.hip` family).
pub fn catalog() -> &'static [KernelSource] {
    static ALL: std::sync::OnceLock<Vec<KernelSource>> = std::sync::OnceLock::new();
    ALL.get_or_init(|| {
        fam::PARTS
            .iter()
            .flat_map(|p| p.iter().copied())
            .map(|mut k| {
                // A family compiled in units lists its entries once, in its units.
                let units = units_of(k.family);
                if !units.is_empty() {
                    let all: Vec<&'static str> = units.iter().flat_map(|u| u.entries.iter().copied()).collect();
                    k.entries = Box::leak(all.into_boxed_slice());
                }
                k
            })
            .collect()
    })
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

    /// A family in units has each entry in exactly one unit, and its source tests every
    /// unit's macro and the whole-family default.
    #[test]
    fn every_entry_of_a_family_in_units_is_in_exactly_one() {
        for k in catalog() {
            let units = units_of(k.family);
            if units.is_empty() {
                continue;
            }
            for e in k.entries {
                let n = units.iter().filter(|u| u.entries.contains(e)).count();
                assert_eq!(n, 1, "{} is in {n} units of {}", e, k.family);
                assert!(unit_of(k.family, e).is_some());
            }
            for u in units {
                assert!(u.entries.iter().all(|e| k.entries.contains(e)), "unit {}", u.name);
                assert!(
                    k.source.contains(&format!("|| {}", u.define())),
                    "{} lacks {}",
                    k.file,
                    u.define()
                );
            }
            assert!(k.source.contains("TANDEM_UNIT_ALL"), "{}", k.file);
        }
        assert!(unit_of("gemv", "tandem_gemv_q4_0_u1").is_some_and(|u| u.name == "q4_0"));
        assert!(unit_of("gemv", "tandem_quantize_q8_1").is_some_and(|u| u.name == "common"));
        assert!(unit_of("flash_attn", "tandem_fa_mmd_d128").is_some_and(|u| u.name == "d128"));
        assert!(unit_of("gemv", "nope").is_none() && unit_of("norm", "tandem_rms_norm_f32").is_none());
    }
}
