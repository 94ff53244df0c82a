//! CPU features, detected once at start; kernels pick their code path from these.

use std::sync::OnceLock;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuFeatures {
    pub avx2: bool,
    pub fma: bool,
    pub f16c: bool,
    pub avx512f: bool,
    pub avx512bw: bool,
    pub avx512vnni: bool,
    pub avxvnni: bool,
}

impl CpuFeatures {
    fn detect() -> CpuFeatures {
        #[cfg(target_arch = "x86_64")]
        {
            // The booleans of tandem-backend's `parse_bool`; that crate's `Config` warns about
            // other values.
            let scalar_only = std::env::var("TANDEM_CPU_SCALAR")
                .is_ok_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "on" | "yes"));
            if scalar_only {
                return CpuFeatures::default();
            }
            CpuFeatures {
                avx2: is_x86_feature_detected!("avx2"),
                fma: is_x86_feature_detected!("fma"),
                f16c: is_x86_feature_detected!("f16c"),
                avx512f: is_x86_feature_detected!("avx512f"),
                avx512bw: is_x86_feature_detected!("avx512bw"),
                avx512vnni: is_x86_feature_detected!("avx512vnni"),
                avxvnni: is_x86_feature_detected!("avxvnni"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            CpuFeatures::default()
        }
    }

    /// The AVX2 kernels need AVX2, FMA and F16C together.
    pub fn has_avx2_fma(&self) -> bool {
        self.avx2 && self.fma && self.f16c
    }

    /// Names of the detected features, for `tandem info`.
    pub fn names(&self) -> Vec<&'static str> {
        let all = [
            (self.avx2, "avx2"),
            (self.fma, "fma"),
            (self.f16c, "f16c"),
            (self.avx512f, "avx512f"),
            (self.avx512bw, "avx512bw"),
            (self.avx512vnni, "avx512vnni"),
            (self.avxvnni, "avxvnni"),
        ];
        all.iter().filter(|(on, _)| *on).map(|(_, n)| *n).collect()
    }
}

/// The features of this CPU (`TANDEM_CPU_SCALAR=1` forces the scalar paths).
pub fn features() -> &'static CpuFeatures {
    static F: OnceLock<CpuFeatures> = OnceLock::new();
    F.get_or_init(CpuFeatures::detect)
}
