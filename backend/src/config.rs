//! Settings read from the environment once; `docs/env-vars.md` lists every variable.

use std::sync::OnceLock;

/// `TANDEM_F16_PREFILL`: `0` / `false` never, `1` / `true` at every prefill shape, unset (or
/// anything else) only where it is much the faster ([`F16Prefill::Wide`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum F16Prefill {
    Never,
    /// More columns than one tile of the int8 GEMM holds (128): there it takes about half the
    /// time where its tiles fill the device, and no more where they are few (both split k),
    /// where with fewer columns it saves less than a tenth (docs/performance.md).
    Wide,
    Always,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// `TANDEM_HOST_DEVICE`: `Some(true)` forces the host device, `Some(false)` hides it, `None`
    /// offers it only when no GPU is found.
    pub host_device: Option<bool>,
    /// `TANDEM_THREADS`: CPU worker threads (0 = one per core).
    pub threads: usize,
    /// `TANDEM_DISABLE_DISPATCH`: registration names or prefixes to skip.
    pub disable_dispatch: Vec<String>,
    /// `TANDEM_LOG_DISPATCH=1`: print each registration's name the first time it is chosen.
    pub log_dispatch: bool,
    /// `TANDEM_STATS=1`: print per-graph statistics.
    pub stats: bool,
    /// `TANDEM_F16_PREFILL`: which prefill widths of the 32-value block types take the Hopper
    /// f16 GEMM (f16 products of the q8-rounded activations) rather than the Hopper int8 GEMM
    /// (the CPU's integer group sums).
    pub f16_prefill: F16Prefill,
    /// `TANDEM_WMMA_EMULATE=9|11|12`: on NVIDIA, quantized prefill on the AMD matrix tiles with the
    /// instruction emulated in that register layout (CDNA's MFMA, gfx11's or gfx12's WMMA); a test
    /// of those tiles.
    pub wmma_emulate: Option<i32>,
    /// `TANDEM_DEPENDENT_LAUNCH` (on unless `0` or `false`): decode GEMVs and MUL_MAT_ID queued
    /// behind another kernel start before it finishes, where the device has programmatic
    /// dependent launch (NVIDIA sm_90+, CUDA 12 driver).
    pub dependent_launch: bool,
    /// `TANDEM_EARLY_ACTIVATIONS` (on unless `0` or `false`): a dependent decode GEMV or
    /// MUL_MAT_ID whose activations no kernel still running writes reads them before it waits for
    /// the kernels ahead; off, every one waits first, as when the kernel ahead writes them (how
    /// the benchmark's back-to-back figures look for a model's dense projections).
    pub early_activations: bool,
    /// A GPU device captures a graph it is asked to run again unchanged (the same tensors at the
    /// same addresses) into a device graph (a CUDA graph) and from then on replays it with one
    /// launch; off, every run queues its kernels one by one.
    pub graphs: bool,
}

impl Config {
    /// Reads the variables from `get` (the process environment in [`Config::get`]).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Config {
        let flag = |name: &str| get(name).is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("true"));
        let on_unless_off =
            |name: &str| get(name).is_none_or(|v| !(v.trim() == "0" || v.trim().eq_ignore_ascii_case("false")));
        Config {
            host_device: get("TANDEM_HOST_DEVICE").map(|v| v == "1" || v.eq_ignore_ascii_case("true")),
            threads: get("TANDEM_THREADS").and_then(|v| v.trim().parse().ok()).unwrap_or(0),
            disable_dispatch: get("TANDEM_DISABLE_DISPATCH")
                .map(|v| {
                    v.split(',')
                        .map(|s| s.trim().to_string())
                        .filter(|s| !s.is_empty())
                        .collect()
                })
                .unwrap_or_default(),
            log_dispatch: flag("TANDEM_LOG_DISPATCH"),
            stats: flag("TANDEM_STATS"),
            f16_prefill: match get("TANDEM_F16_PREFILL")
                .map(|v| v.trim().to_ascii_lowercase())
                .as_deref()
            {
                Some("0" | "false") => F16Prefill::Never,
                Some("1" | "true") => F16Prefill::Always,
                _ => F16Prefill::Wide,
            },
            wmma_emulate: get("TANDEM_WMMA_EMULATE").and_then(|v| match v.trim() {
                "9" => Some(9),
                "11" => Some(11),
                "12" => Some(12),
                _ => None,
            }),
            dependent_launch: on_unless_off("TANDEM_DEPENDENT_LAUNCH"),
            early_activations: on_unless_off("TANDEM_EARLY_ACTIVATIONS"),
            graphs: on_unless_off("TANDEM_GRAPHS"),
        }
    }

    /// The process-wide settings, read on first use.
    pub fn get() -> &'static Config {
        static C: OnceLock<Config> = OnceLock::new();
        C.get_or_init(|| Config::from_lookup(|k| std::env::var(k).ok()))
    }

    /// Whether registration `name` is disabled by exact name or prefix.
    pub fn is_disabled(&self, name: &str) -> bool {
        self.disable_dispatch
            .iter()
            .any(|d| name == d || name.starts_with(d.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lists_and_flags() {
        let c = Config::from_lookup(|k| match k {
            "TANDEM_DISABLE_DISPATCH" => Some("hip.gemv_q4_0, hip.rope".into()),
            "TANDEM_STATS" => Some("1".into()),
            "TANDEM_HOST_DEVICE" => Some("0".into()),
            _ => None,
        });
        assert!(c.stats && !c.log_dispatch && c.f16_prefill == F16Prefill::Wide);
        for (v, want) in [
            ("0", F16Prefill::Never),
            ("False", F16Prefill::Never),
            ("1", F16Prefill::Always),
            ("true", F16Prefill::Always),
            ("auto", F16Prefill::Wide),
        ] {
            let c = Config::from_lookup(|k| (k == "TANDEM_F16_PREFILL").then(|| v.into()));
            assert_eq!(c.f16_prefill, want, "{v}");
        }
        assert!(c.dependent_launch);
        for (v, on) in [("0", false), ("false", false), ("1", true), ("yes", true)] {
            let c = Config::from_lookup(|k| (k == "TANDEM_DEPENDENT_LAUNCH").then(|| v.into()));
            assert_eq!(c.dependent_launch, on, "{v}");
            let c = Config::from_lookup(|k| (k == "TANDEM_EARLY_ACTIVATIONS").then(|| v.into()));
            assert_eq!((c.early_activations, c.dependent_launch), (on, true), "{v}");
            let c = Config::from_lookup(|k| (k == "TANDEM_GRAPHS").then(|| v.into()));
            assert_eq!((c.graphs, c.early_activations), (on, true), "{v}");
        }
        assert!(c.early_activations);
        assert_eq!(c.wmma_emulate, None);
        let emu = |v: &str| Config::from_lookup(|k| (k == "TANDEM_WMMA_EMULATE").then(|| v.to_string())).wmma_emulate;
        assert_eq!(
            (emu("9"), emu("11"), emu("12"), emu("13")),
            (Some(9), Some(11), Some(12), None)
        );
        assert_eq!(c.host_device, Some(false));
        assert!(c.is_disabled("hip.rope"));
        assert!(c.is_disabled("hip.gemv_q4_0"));
        assert!(!c.is_disabled("hip.gemv_q8_0"));
        let all = Config::from_lookup(|k| (k == "TANDEM_DISABLE_DISPATCH").then(|| "hip.".into()));
        assert!(all.is_disabled("hip.softmax_f32"));
    }
}
