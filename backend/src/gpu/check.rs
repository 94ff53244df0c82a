//! Compiling the whole catalog for one arch without a device (no cache): the CI compile check
//! (`scripts/check-kernels.sh`) and `tandem kernels` use it with the runtime's own compilers,
//! header and options, so what passes here is what the JIT will build.

use super::api::{CompileError, KernelCompiler};
use super::kernels::options_for;
use std::time::{Duration, Instant};
use tandem_kernels_hip::{catalog, KernelSource, HEADERS};

#[derive(Clone, Debug)]
pub struct CheckResult {
    pub family: &'static str,
    pub file: &'static str,
    pub arch: String,
    /// Code object size, or the compile error with its log.
    pub result: Result<usize, CompileError>,
    pub time: Duration,
}

/// Compiles every catalog family for `arch` and checks each entry point's name is in the output.
pub fn compile_catalog(compiler: &dyn KernelCompiler, arch: &str) -> Vec<CheckResult> {
    catalog()
        .iter()
        .map(|k| compile_family(compiler, k, arch, &[]))
        .collect()
}

/// Compiles family `k` for `arch` with its options and `extra` ones, and checks each entry
/// point's name is in the output.
fn compile_family(compiler: &dyn KernelCompiler, k: &KernelSource, arch: &str, extra: &[&str]) -> CheckResult {
    let t0 = Instant::now();
    let mut options = options_for(compiler, k, arch);
    options.extend(extra.iter().map(|o| o.to_string()));
    let result = compiler.compile(k.file, k.source, HEADERS, &options).and_then(|code| {
        let missing: Vec<&str> = k
            .entries
            .iter()
            .copied()
            .filter(|e| !contains(&code, e.as_bytes()))
            .collect();
        if missing.is_empty() {
            Ok(code.len())
        } else {
            Err(CompileError {
                program: k.file.to_string(),
                message: format!("entry points missing from the code object: {}", missing.join(", ")),
                log: String::new(),
            })
        }
    });
    CheckResult {
        family: k.family,
        file: k.file,
        arch: arch.to_string(),
        result,
        time: t0.elapsed(),
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::super::api::RuntimeKind;
    use super::super::rtc::RtcCompiler;
    use super::*;

    fn env_flag(name: &str) -> bool {
        std::env::var(name).is_ok_and(|v| crate::config::parse_bool(&v) == Some(true))
    }

    /// NVRTC, or `None` after printing why the caller skips (a failure under
    /// `TANDEM_REQUIRE_NVRTC=1`, which the compile-check script sets).
    fn nvrtc_or_skip(test: &str) -> Option<RtcCompiler> {
        let (c, report) = RtcCompiler::load(RuntimeKind::Cuda);
        if c.is_none() {
            assert!(!env_flag("TANDEM_REQUIRE_NVRTC"), "{test}: {}", report.summary());
            eprintln!(
                "SKIP {test}: {} (set TANDEM_NVRTC=/path/libnvrtc.so.13)",
                report.summary()
            );
        }
        c
    }

    #[test]
    fn catalog_compiles_with_nvrtc() {
        let Some(c) = nvrtc_or_skip("catalog_compiles_with_nvrtc") else {
            return;
        };
        let arch = std::env::var("TANDEM_CHECK_NVIDIA_ARCH").unwrap_or_else(|_| "sm_90".into());
        let results = compile_catalog(&c, &arch);
        assert_eq!(results.len(), catalog().len());
        let mut failed = 0;
        for r in &results {
            match &r.result {
                Ok(bytes) => eprintln!(
                    "check-kernels: ok   nvidia {arch} {} ({} bytes, {} ms, {})",
                    r.family,
                    bytes,
                    r.time.as_millis(),
                    c.id()
                ),
                Err(e) => {
                    failed += 1;
                    eprintln!("check-kernels: FAIL nvidia {arch} {}\n{e}", r.family);
                }
            }
        }
        assert_eq!(failed, 0, "{failed} kernel famil(ies) failed to compile for {arch}");
    }

    /// Each unit of a family compiled in units builds on its own with its entries, and without
    /// those of the other units (the runtime loads a unit for an entry: `Kernels::function`).
    #[test]
    fn kernel_units_compile_with_nvrtc() {
        let Some(c) = nvrtc_or_skip("kernel_units_compile_with_nvrtc") else {
            return;
        };
        let arch = std::env::var("TANDEM_CHECK_NVIDIA_ARCH").unwrap_or_else(|_| "sm_90".into());
        let mut failed = 0;
        for k in catalog() {
            for u in tandem_kernels_hip::units_of(k.family) {
                let t0 = Instant::now();
                let options = super::super::kernels::options_for_unit(&c, k, Some(u), &arch);
                let result = c.compile(k.file, k.source, HEADERS, &options).map(|code| {
                    // A symbol (cubin: NUL-terminated) or a PTX entry (name and parenthesis).
                    let defines = |e: &str| {
                        [format!("{e}\0"), format!("{e}(")]
                            .iter()
                            .any(|n| contains(&code, n.as_bytes()))
                    };
                    let missing: Vec<&str> = u.entries.iter().copied().filter(|e| !defines(e)).collect();
                    let foreign: Vec<&str> = k
                        .entries
                        .iter()
                        .copied()
                        .filter(|e| !u.entries.contains(e) && defines(e))
                        .collect();
                    (code.len(), missing, foreign)
                });
                match result {
                    Ok((bytes, missing, foreign)) if missing.is_empty() && foreign.is_empty() => eprintln!(
                        "check-kernels: ok   nvidia {arch} {}.{} ({bytes} bytes, {} ms)",
                        k.family,
                        u.name,
                        t0.elapsed().as_millis()
                    ),
                    Ok((_, missing, foreign)) => {
                        failed += 1;
                        eprintln!(
                            "check-kernels: FAIL nvidia {arch} {}.{}: missing {missing:?}, other units' {foreign:?}",
                            k.family, u.name
                        );
                    }
                    Err(e) => {
                        failed += 1;
                        eprintln!("check-kernels: FAIL nvidia {arch} {}.{}\n{e}", k.family, u.name);
                    }
                }
            }
        }
        assert_eq!(failed, 0, "{failed} kernel unit(s) failed for {arch}");
    }

    /// The runtime's build of a unit (`kernels::build`, as `Kernels::module` calls it): compiled
    /// once into the disk cache under a key of its own, then read back by a fresh cache object;
    /// another unit of the family is a second file, and what the first holds is its entries.
    #[test]
    fn kernel_units_build_and_cache_apart() {
        use super::super::jit::{KernelCache, Origin};
        use super::super::kernels::build;
        let Some(c) = nvrtc_or_skip("kernel_units_build_and_cache_apart") else {
            return;
        };
        let dir = std::env::temp_dir().join(format!("tandem-units-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let k = tandem_kernels_hip::find("gemv").expect("gemv");
        let unit = tandem_kernels_hip::unit_of("gemv", "tandem_quantize_q8_1").expect("a unit");
        let files = || std::fs::read_dir(&dir).map_or(0, |d| d.count());
        let (code, origin) = build(&c, &KernelCache::new(Some(dir.clone())), k, Some(unit), "sm_90").expect("build");
        assert_eq!(origin, Origin::Compiled);
        assert!(unit.entries.iter().all(|e| contains(&code, e.as_bytes())));
        assert!(!contains(&code, b"tandem_gemv_q4_0_u1"));
        assert_eq!(files(), 1);
        let (again, origin) = build(&c, &KernelCache::new(Some(dir.clone())), k, Some(unit), "sm_90").expect("load");
        assert_eq!((origin, again.len()), (Origin::Disk, code.len()));
        let other = tandem_kernels_hip::unit_of("gemv", "tandem_gemv_f32_c1").expect("a unit");
        build(&c, &KernelCache::new(Some(dir.clone())), k, Some(other), "sm_90").expect("build");
        assert_eq!(files(), 2);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Kernels queued as dependent launches whose weight loads must be issued before their
    /// `tandem_grid_wait` (so that back to back they overlap the kernel ahead): in each, some
    /// `griddepcontrol.wait` (`ACQBULK`) comes after a 16-byte weight load (`LDG.E.NA.128` or
    /// `LDGSTS`) in the SASS. ptxas has moved such a wait above every load when it stood
    /// unconditionally after them (the read probe's did, NVRTC 13.5); the kernels keep theirs in
    /// a block of its own.
    const LOAD_BEFORE_WAIT: [(&str, &str); 9] = [
        ("copy", "tandem_read_probe"),
        ("gemv", "tandem_gemv_q4_0_u1"),
        ("gemv", "tandem_gemv_q4_0_n1"),
        ("gemv", "tandem_gemv_q8_0_n1"),
        ("gemv", "tandem_gemv_q8_0_u1"),
        ("gemv", "tandem_gemv_q6_K_u1"),
        ("gemv", "tandem_gemv_q4_0_s1"),
        ("gemv", "tandem_gemv_q4_0_c1"),
        ("gemv", "tandem_gemv_f16_c1"),
    ];

    /// Whether the SASS of one function (nvdisasm's lines for it) has a wait after a weight load.
    fn wait_follows_a_load(sass: &[&str]) -> bool {
        let mut loaded = false;
        for line in sass {
            if line.contains("LDG.E.NA.128") || line.contains("LDGSTS") {
                loaded = true;
            } else if line.contains("ACQBULK") && loaded {
                return true;
            }
        }
        false
    }

    /// nvdisasm's text split by function (`.text.<name>:` labels).
    fn sass_functions(text: &str) -> std::collections::HashMap<String, Vec<&str>> {
        let mut out = std::collections::HashMap::new();
        let mut current: Option<String> = None;
        for line in text.lines() {
            if let Some(name) = line.strip_prefix(".text.").and_then(|l| l.strip_suffix(':')) {
                current = Some(name.to_string());
                out.insert(name.to_string(), Vec::new());
            } else if let Some(f) = &current {
                out.get_mut(f).expect("inserted with its label").push(line);
            }
        }
        out
    }

    #[test]
    fn sass_checks_see_a_sunk_wait() {
        let sunk = ["ACQBULK ;", "@!P2 LDG.E.NA.128.CONSTANT R12, desc[UR4][R20.64] ;"];
        let kept = [
            "LDGSTS.E.BYPASS.128 [R9], desc[UR6][R4.64] ;",
            "LDGDEPBAR ;",
            "ACQBULK ;",
        ];
        assert!(!wait_follows_a_load(&sunk) && wait_follows_a_load(&kept));
        let text = ".text.a:\n LDG.E.NA.128 ;\n ACQBULK ;\n.text.b:\n ACQBULK ;\n";
        let f = sass_functions(text);
        assert!(wait_follows_a_load(&f["a"]) && !wait_follows_a_load(&f["b"]));
    }

    #[test]
    fn dependent_kernels_load_before_their_wait() {
        let Some(c) = nvrtc_or_skip("dependent_kernels_load_before_their_wait") else {
            return;
        };
        // nvdisasm from the PyPI wheel `nvidia-cuda-nvdisasm` (the compile-check script installs
        // it and requires it with TANDEM_REQUIRE_NVDISASM=1).
        let Some(nvdisasm) = std::env::var_os("TANDEM_NVDISASM") else {
            assert!(
                !env_flag("TANDEM_REQUIRE_NVDISASM"),
                "dependent_kernels_load_before_their_wait: TANDEM_NVDISASM is not set"
            );
            eprintln!("SKIP dependent_kernels_load_before_their_wait: no TANDEM_NVDISASM (the path of nvdisasm)");
            return;
        };
        let dir = std::env::temp_dir().join(format!("tandem-sass-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary folder");
        for family in ["copy", "gemv"] {
            let k = catalog().iter().find(|k| k.family == family).expect("a catalog family");
            let code = c
                .compile(k.file, k.source, HEADERS, &options_for(&c, k, "sm_90"))
                .unwrap_or_else(|e| panic!("{e}"));
            let cubin = dir.join(format!("{family}.cubin"));
            std::fs::write(&cubin, &code).expect("the cubin written");
            let out = std::process::Command::new(&nvdisasm)
                .arg(&cubin)
                .output()
                .unwrap_or_else(|e| panic!("running {}: {e}", nvdisasm.to_string_lossy()));
            assert!(
                out.status.success(),
                "nvdisasm {}: {}",
                cubin.display(),
                String::from_utf8_lossy(&out.stderr)
            );
            let text = String::from_utf8_lossy(&out.stdout);
            let functions = sass_functions(&text);
            for (_, name) in LOAD_BEFORE_WAIT.iter().filter(|(f, _)| *f == family) {
                let sass = functions
                    .get(*name)
                    .unwrap_or_else(|| panic!("{name} is not in the SASS of {family}"));
                assert!(
                    wait_follows_a_load(sass),
                    "{name}: no griddepcontrol.wait (ACQBULK) after a weight load in its SASS: ptxas moved the wait above the loads, which then no longer overlap the kernel ahead"
                );
                eprintln!("check-kernels: ok   {name}: weight loads ahead of its wait");
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The gemv family as `TANDEM_WEIGHTS_EVICT_FIRST` builds it (weight loads with an L2
    /// policy) compiles and keeps every entry point.
    #[test]
    fn gemv_compiles_with_weights_evict_first() {
        let Some(c) = nvrtc_or_skip("gemv_compiles_with_weights_evict_first") else {
            return;
        };
        let k = catalog().iter().find(|k| k.family == "gemv").expect("the gemv family");
        let r = compile_family(&c, k, "sm_90", &["-DTANDEM_WEIGHTS_EVICT_FIRST"]);
        let bytes = r.result.unwrap_or_else(|e| panic!("{e}"));
        eprintln!(
            "check-kernels: ok   nvidia sm_90 gemv with TANDEM_WEIGHTS_EVICT_FIRST ({bytes} bytes, {} ms)",
            r.time.as_millis()
        );
    }

    #[test]
    fn compile_error_names_the_kernel_and_carries_the_log() {
        let Some(c) = nvrtc_or_skip("compile_error_names_the_kernel_and_carries_the_log") else {
            return;
        };
        let src = "#include \"tandem_hip.h\"\nextern \"C\" __global__ void k(float* p) { p[0] = undeclared_name; }\n";
        let err = c
            .compile("broken.hip", src, HEADERS, &c.arch_options("sm_90"))
            .unwrap_err();
        let text = err.to_string();
        assert!(text.contains("kernel broken.hip failed to compile"), "{text}");
        assert!(text.contains("undeclared_name"), "the compiler log is missing: {text}");
    }

    /// Uses every helper of the portability header, so its vendor branches (inline PTX for
    /// `__half`, the masked shuffles) are compiled, not just parsed.
    const HEADER_SELFTEST: &str = r#"#include "tandem_hip.h"
extern "C" __global__ void tandem_header_selftest(const __half* h, const u16* b, float* out) {
    const int i = threadIdx.x;
    float x = __half2float(h[i]) + tandem_bf16_to_f32(b[i]);
    x += __half2float(__float2half(x)) + tandem_bf16_to_f32(tandem_f32_to_bf16(x));
    x = tandem_wave_sum(x) + tandem_wave_max(x) + __shfl(x, 0) + __shfl_down(x, 1) + __shfl_up(x, 1);
    out[i] = x < TANDEM_INF ? x : 0.0f;
}
"#;

    #[test]
    fn header_helpers_compile_with_nvrtc() {
        let Some(c) = nvrtc_or_skip("header_helpers_compile_with_nvrtc") else {
            return;
        };
        let code = c
            .compile("selftest.hip", HEADER_SELFTEST, HEADERS, &c.arch_options("sm_90"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(contains(&code, b"tandem_header_selftest"));
    }

    /// hiprtc of ROCm 5 compiles gfx1030 but crashes on gfx11, so this runs only where asked
    /// (`TANDEM_CHECK_HIPRTC_ARCH=gfx1030`).
    #[test]
    fn catalog_compiles_with_hiprtc_when_asked() {
        let Ok(arch) = std::env::var("TANDEM_CHECK_HIPRTC_ARCH") else {
            eprintln!("SKIP catalog_compiles_with_hiprtc_when_asked: TANDEM_CHECK_HIPRTC_ARCH unset");
            return;
        };
        let (c, report) = RtcCompiler::load(RuntimeKind::Hip);
        let c = c.unwrap_or_else(|| panic!("{}", report.summary()));
        c.compile("selftest.hip", HEADER_SELFTEST, HEADERS, &c.arch_options(&arch))
            .unwrap_or_else(|e| panic!("{arch}: {e}"));
        for r in compile_catalog(&c, &arch) {
            match &r.result {
                Ok(bytes) => eprintln!(
                    "check-kernels: ok   amd {arch} {} via {} ({bytes} bytes)",
                    r.family,
                    c.id()
                ),
                Err(e) => panic!("{arch}: {e}"),
            }
        }
    }
}
