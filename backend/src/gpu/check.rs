//! Compiling the whole catalog for one arch without a device (no cache): the CI compile check
//! (`scripts/check-kernels.sh`) and `tandem kernels` use it with the runtime's own compilers,
//! header and options, so what passes here is what the JIT will build.

use super::api::{CompileError, KernelCompiler};
use super::kernels::options_for;
use std::time::{Duration, Instant};
use tandem_kernels_hip::{catalog, HEADERS};

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
        .map(|k| {
            let t0 = Instant::now();
            let options = options_for(compiler, k, arch);
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
        })
        .collect()
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
        std::env::var(name).is_ok_and(|v| v == "1")
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
