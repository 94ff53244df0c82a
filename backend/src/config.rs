//! Settings read from the environment once; `docs/env-vars.md` lists every variable.

use std::sync::OnceLock;

/// `TANDEM_F16_PREFILL`: `0` / `false` never, `1` / `true` at every prefill shape, unset or
/// `auto` only where it is much the faster ([`F16Prefill::Wide`]; other values warn and mean
/// that too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum F16Prefill {
    Never,
    /// More columns than one tile of the int8 GEMM holds (128): there it takes about half the
    /// time where its tiles fill the device, and no more where they are few (both split k),
    /// where with fewer columns it saves less than a tenth (docs/performance.md).
    Wide,
    Always,
}

/// `TANDEM_OFFLOAD_EXEC`: who computes the nodes whose weights a user (or llama.cpp, for the
/// layers it keeps off the GPU) placed in a GPU device's pinned host memory (`TANDEM<n>_Host`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OffloadExec {
    /// The host's CPU backend (ggml's), as llama.cpp's CUDA backend leaves its `CUDA_Host`
    /// weights: the GPU device does not claim that memory, so ggml's scheduler gives those nodes
    /// to the CPU and hands activations across at the layer's edges; batches of 32 and more
    /// still come to the GPU with their weights copied in (`offload_op`).
    Cpu,
    /// The GPU device's kernels, reading the weights over the bus.
    Gpu,
    /// Split nodes: the GPU computes a share of a GEMV's rows over the bus while the device's
    /// CPU threads compute the rest from the same bytes (`gpu::split`); nodes a split does not
    /// take run as with `Gpu`.
    Split,
}

/// Where a setting's value came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The variable was set to a value that parsed.
    Env,
    /// Unset, empty, or set to a value that did not parse (then with a warning).
    Default,
}

/// One variable as read, for `tandem info`: its value in words and where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Setting {
    pub name: &'static str,
    pub value: String,
    pub source: Source,
}

/// A boolean value: `1`/`true`/`on`/`yes` or `0`/`false`/`off`/`no`, any case, spaces around
/// ignored; `None` for anything else.
pub fn parse_bool(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "on" | "yes" => Some(true),
        "0" | "false" | "off" | "no" => Some(false),
        _ => None,
    }
}

/// The most CPU worker threads `TANDEM_THREADS` (and `ggml_backend_set_n_threads`) may ask for:
/// four per logical CPU, at most 1024. More only adds contention, and each thread reserves a
/// stack: 100000 of them aborted the process.
pub fn max_threads() -> usize {
    let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    (4 * cpus).min(1024)
}

#[derive(Clone, Debug, PartialEq)]
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
    /// `TANDEM_WEIGHTS_EVICT_FIRST` (off unless `1` or `true`): on NVIDIA sm_80+, the GEMVs'
    /// weight loads ask L2 to evict their lines first (the gemv family built with
    /// `-DTANDEM_WEIGHTS_EVICT_FIRST`, cached apart from the default build).
    pub weights_evict_first: bool,
    /// `TANDEM_OFFLOAD_EXEC`: see [`OffloadExec`].
    pub offload_exec: OffloadExec,
    /// `TANDEM_SPLIT_SHARE`: `None` (auto) learns each shape's GPU share online; `Some(x)` uses
    /// x in [0, 1] for every split node.
    pub split_share: Option<f64>,
    /// `TANDEM_TRACE_SPLIT`: print each split shape's share and rates at power-of-two calls.
    pub trace_split: bool,
    /// `TANDEM_PROFILE`: `Some(n)`: GPU devices run every graph launch by launch, time each step
    /// with events and print a table per plan after every n runs of it ([`crate::gpu::profile`]).
    pub profile: Option<usize>,
    /// `TANDEM_CPU_SCALAR` (read again by `tandem_ops::simd`, which cannot see this crate).
    pub cpu_scalar: bool,
    /// Every variable above as read, in the order of `docs/env-vars.md`.
    pub settings: Vec<Setting>,
    /// One line per variable whose value was not understood or was out of bounds.
    pub warnings: Vec<String>,
}

impl Config {
    /// Reads the variables from `get` (the process environment in [`Config::get`]). A value
    /// that does not parse, or lies out of bounds, leaves the default (or the bound) in effect
    /// and adds a line to `warnings` naming the variable, the value and what is used instead.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Config {
        let mut r = Reader {
            get: &get,
            settings: Vec::new(),
            warnings: Vec::new(),
        };
        let host_device = r.parse(
            "TANDEM_HOST_DEVICE",
            "a boolean (1/0, true/false, on/off, yes/no)",
            parse_bool,
            "unset: offered only when no GPU is found",
            |v| if *v { "on: always offered" } else { "off: hidden" }.to_string(),
        );
        let threads = r.threads();
        let disable_dispatch: Vec<String> = r
            .parse(
                "TANDEM_DISABLE_DISPATCH",
                "a comma-separated list of names",
                |v| {
                    let list: Vec<String> = v
                        .split(',')
                        .map(|s| s.trim().to_string())
                        .filter(|s| !s.is_empty())
                        .collect();
                    Some(list)
                },
                "none",
                |v: &Vec<String>| v.join(","),
            )
            .unwrap_or_default();
        let log_dispatch = r.flag("TANDEM_LOG_DISPATCH", false);
        let stats = r.flag("TANDEM_STATS", false);
        let f16_prefill = r
            .parse(
                "TANDEM_F16_PREFILL",
                "0/false/off/no, 1/true/on/yes or auto",
                |v| match v.trim().to_ascii_lowercase().as_str() {
                    "auto" => Some(F16Prefill::Wide),
                    other => parse_bool(other).map(|b| if b { F16Prefill::Always } else { F16Prefill::Never }),
                },
                "auto: past 128 columns",
                |v| {
                    match v {
                        F16Prefill::Never => "never",
                        F16Prefill::Wide => "auto: past 128 columns",
                        F16Prefill::Always => "every prefill shape",
                    }
                    .to_string()
                },
            )
            .unwrap_or(F16Prefill::Wide);
        let dependent_launch = r.flag("TANDEM_DEPENDENT_LAUNCH", true);
        let early_activations = r.flag("TANDEM_EARLY_ACTIVATIONS", true);
        let graphs = r.flag("TANDEM_GRAPHS", true);
        let weights_evict_first = r.flag("TANDEM_WEIGHTS_EVICT_FIRST", false);
        let wmma_emulate = r.parse(
            "TANDEM_WMMA_EMULATE",
            "9, 11 or 12",
            |v| match v.trim() {
                "9" => Some(9),
                "11" => Some(11),
                "12" => Some(12),
                _ => None,
            },
            "unset: native tiles only",
            |l| format!("gfx{l} layout"),
        );
        let offload_exec = r
            .parse(
                "TANDEM_OFFLOAD_EXEC",
                "cpu, gpu or split",
                |v| match v.trim().to_ascii_lowercase().as_str() {
                    "cpu" => Some(OffloadExec::Cpu),
                    "gpu" => Some(OffloadExec::Gpu),
                    "split" => Some(OffloadExec::Split),
                    _ => None,
                },
                "split: GPU and CPU together",
                |v| {
                    match v {
                        OffloadExec::Cpu => "cpu: ggml's CPU backend",
                        OffloadExec::Gpu => "gpu: kernels over the bus",
                        OffloadExec::Split => "split: GPU and CPU together",
                    }
                    .to_string()
                },
            )
            .unwrap_or(OffloadExec::Split);
        let split_share = r.parse(
            "TANDEM_SPLIT_SHARE",
            "auto or a number from 0 to 1",
            |v| match v.trim().to_ascii_lowercase().as_str() {
                "auto" => Some(None),
                x => x.parse::<f64>().ok().filter(|x| (0.0..=1.0).contains(x)).map(Some),
            },
            "auto: learnt per shape",
            |v| {
                v.map_or("auto: learnt per shape".to_string(), |x| {
                    format!("{x} of the rows on the GPU")
                })
            },
        );
        let split_share = split_share.flatten();
        let trace_split = r.flag("TANDEM_TRACE_SPLIT", false);
        let cpu_scalar = r.flag("TANDEM_CPU_SCALAR", false);
        let profile = r
            .parse(
                "TANDEM_PROFILE",
                "a whole number of runs (0: off)",
                |v| v.trim().parse::<usize>().ok(),
                "off",
                |n| {
                    if *n == 0 {
                        "off".to_string()
                    } else {
                        format!("a table every {n} runs of a graph")
                    }
                },
            )
            .filter(|n| *n > 0);
        Config {
            host_device,
            threads,
            disable_dispatch,
            log_dispatch,
            stats,
            f16_prefill,
            wmma_emulate,
            dependent_launch,
            early_activations,
            graphs,
            weights_evict_first,
            offload_exec,
            split_share,
            trace_split,
            cpu_scalar,
            profile,
            settings: r.settings,
            warnings: r.warnings,
        }
    }

    /// Warnings for `TANDEM_DISABLE_DISPATCH` entries that are no prefix of any of `names` (the
    /// registrations and the switches the launchers ask about): they disable nothing, which is
    /// most likely a typo.
    pub fn unmatched_disables(&self, names: &[&str]) -> Vec<String> {
        self.disable_dispatch
            .iter()
            .filter(|d| !names.iter().any(|n| n.starts_with(d.as_str())))
            .map(|d| {
                format!(
                    "TANDEM_DISABLE_DISPATCH entry '{d}' matches no registration or switch (`tandem info` lists them); it disables nothing"
                )
            })
            .collect()
    }

    /// The process-wide settings, read on first use.
    pub fn get() -> &'static Config {
        static C: OnceLock<Config> = OnceLock::new();
        C.get_or_init(|| {
            let c = Config::from_lookup(|k| std::env::var(k).ok());
            let names = crate::gpu::registry::disable_names();
            for w in c.warnings.iter().chain(&c.unmatched_disables(&names)) {
                eprintln!("tandem: warning: {w}");
            }
            c
        })
    }

    /// Whether registration `name` is disabled by exact name or prefix.
    pub fn is_disabled(&self, name: &str) -> bool {
        self.disable_dispatch
            .iter()
            .any(|d| name == d || name.starts_with(d.as_str()))
    }
}

/// Reads variables one by one, recording each as a [`Setting`] and each value it cannot use as
/// a warning.
struct Reader<'a, F: Fn(&str) -> Option<String>> {
    get: &'a F,
    settings: Vec<Setting>,
    warnings: Vec<String>,
}

impl<F: Fn(&str) -> Option<String>> Reader<'_, F> {
    /// The variable's value parsed by `parse`, or `None` (the default, described as
    /// `default`) when it is unset, empty or does not parse (`expected` says what would).
    fn parse<T>(
        &mut self,
        name: &'static str,
        expected: &str,
        parse: impl Fn(&str) -> Option<T>,
        default: &str,
        show: impl Fn(&T) -> String,
    ) -> Option<T> {
        let raw = (self.get)(name).filter(|v| !v.trim().is_empty());
        let parsed = raw.as_deref().map(|v| (v, parse(v)));
        let (value, source, out) = match parsed {
            None => (default.to_string(), Source::Default, None),
            Some((_, Some(t))) => (show(&t), Source::Env, Some(t)),
            Some((v, None)) => {
                self.warnings
                    .push(format!("{name}={v:?} is not {expected}; using the default ({default})"));
                (default.to_string(), Source::Default, None)
            }
        };
        self.settings.push(Setting { name, value, source });
        out
    }

    /// A boolean variable with its default.
    fn flag(&mut self, name: &'static str, default: bool) -> bool {
        let words = |b: bool| if b { "on" } else { "off" }.to_string();
        self.parse(
            name,
            "a boolean (1/0, true/false, on/off, yes/no)",
            parse_bool,
            &words(default),
            |b| words(*b),
        )
        .unwrap_or(default)
    }

    /// `TANDEM_THREADS`: a whole number, 0 for one per core, at most [`max_threads`] (a larger
    /// value is clamped with a warning).
    fn threads(&mut self) -> usize {
        let max = max_threads();
        let asked = self.parse(
            "TANDEM_THREADS",
            "a whole number",
            |v| v.trim().parse::<usize>().ok(),
            "0: one per core",
            |n| {
                if *n == 0 {
                    "0: one per core".to_string()
                } else {
                    n.to_string()
                }
            },
        );
        match asked {
            Some(n) if n > max => {
                self.warnings.push(format!(
                    "TANDEM_THREADS={n} is above {max} (four per logical CPU, at most 1024); using {max}"
                ));
                if let Some(s) = self.settings.last_mut() {
                    s.value = format!("{max} (clamped from {n})");
                }
                max
            }
            Some(n) => n,
            None => 0,
        }
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
            let c = Config::from_lookup(|k| (k == "TANDEM_WEIGHTS_EVICT_FIRST").then(|| v.into()));
            assert_eq!((c.weights_evict_first, c.graphs), (on, true), "{v}");
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

    fn with(name: &str, value: &str) -> Config {
        Config::from_lookup(|k| (k == name).then(|| value.to_string()))
    }

    fn setting<'a>(c: &'a Config, name: &str) -> &'a Setting {
        c.settings.iter().find(|s| s.name == name).unwrap()
    }

    #[test]
    fn booleans_take_the_usual_words_and_warn_on_others() {
        for (v, want) in [
            ("1", true),
            ("TRUE", true),
            ("on", true),
            (" yes ", true),
            ("0", false),
            ("Off", false),
            ("no", false),
        ] {
            assert_eq!(parse_bool(v), Some(want), "{v}");
            let c = with("TANDEM_STATS", v);
            assert_eq!(c.stats, want, "{v}");
            assert!(c.warnings.is_empty(), "{v}: {:?}", c.warnings);
            assert_eq!(setting(&c, "TANDEM_STATS").source, Source::Env);
        }
        for (name, v) in [
            ("TANDEM_STATS", "2"),
            ("TANDEM_GRAPHS", "nope"),
            ("TANDEM_HOST_DEVICE", "maybe"),
        ] {
            let c = with(name, v);
            assert_eq!(c.warnings.len(), 1, "{name}={v}");
            let w = &c.warnings[0];
            assert!(
                w.starts_with(name) && w.contains(v) && w.contains("using the default"),
                "{w}"
            );
            assert_eq!(setting(&c, name).source, Source::Default);
        }
        // The defaults stay in effect.
        assert!(!with("TANDEM_STATS", "2").stats);
        assert!(with("TANDEM_GRAPHS", "nope").graphs);
        assert_eq!(with("TANDEM_HOST_DEVICE", "maybe").host_device, None);
        assert_eq!(with("TANDEM_HOST_DEVICE", "yes").host_device, Some(true));
        // Empty counts as unset, without a warning.
        let c = with("TANDEM_GRAPHS", " ");
        assert!(c.graphs && c.warnings.is_empty());
    }

    #[test]
    fn other_bad_values_warn_and_keep_the_default() {
        let c = with("TANDEM_F16_PREFILL", "banana");
        assert_eq!(c.f16_prefill, F16Prefill::Wide);
        assert!(
            c.warnings[0].contains("TANDEM_F16_PREFILL=\"banana\""),
            "{:?}",
            c.warnings
        );
        assert_eq!(with("TANDEM_OFFLOAD_EXEC", "GPU").offload_exec, OffloadExec::Gpu);
        assert_eq!(with("TANDEM_OFFLOAD_EXEC", "cpu").offload_exec, OffloadExec::Cpu);
        assert_eq!(Config::from_lookup(|_| None).offload_exec, OffloadExec::Split);
        let c = with("TANDEM_OFFLOAD_EXEC", "both");
        assert_eq!((c.offload_exec, c.warnings.len()), (OffloadExec::Split, 1));
        assert!(c.warnings[0].contains("is not cpu, gpu or split"), "{:?}", c.warnings);
        assert_eq!(with("TANDEM_SPLIT_SHARE", "0.25").split_share, Some(0.25));
        assert_eq!(with("TANDEM_SPLIT_SHARE", "0").split_share, Some(0.0));
        assert_eq!(with("TANDEM_SPLIT_SHARE", "1").split_share, Some(1.0));
        assert_eq!(with("TANDEM_SPLIT_SHARE", "Auto").split_share, None);
        for bad in ["1.5", "-0.1", "half", "NaN"] {
            let c = with("TANDEM_SPLIT_SHARE", bad);
            assert_eq!((c.split_share, c.warnings.len()), (None, 1), "{bad}");
        }
        assert_eq!(with("TANDEM_PROFILE", "32").profile, Some(32));
        assert_eq!(with("TANDEM_PROFILE", "0").profile, None);
        assert_eq!(Config::from_lookup(|_| None).profile, None);
        for bad in ["-1", "on", "2.5"] {
            let c = with("TANDEM_PROFILE", bad);
            assert_eq!((c.profile, c.warnings.len()), (None, 1), "{bad}");
            assert!(c.warnings[0].contains("TANDEM_PROFILE"), "{:?}", c.warnings);
        }
        let c = with("TANDEM_WMMA_EMULATE", "13");
        assert_eq!((c.wmma_emulate, c.warnings.len()), (None, 1));
        let c = with("TANDEM_THREADS", "abc");
        assert_eq!(c.threads, 0);
        assert!(
            c.warnings[0].contains("TANDEM_THREADS=\"abc\" is not a whole number"),
            "{:?}",
            c.warnings
        );
        let c = with("TANDEM_THREADS", "3");
        assert_eq!(
            (c.threads, c.warnings.len()),
            (3.min(max_threads()), usize::from(3 > max_threads()))
        );
    }

    #[test]
    fn threads_are_clamped() {
        let max = max_threads();
        assert!((4..=1024).contains(&max));
        for asked in ["5000", "100000", "18446744073709551615"] {
            let c = with("TANDEM_THREADS", asked);
            assert_eq!(c.threads, max, "{asked}");
            assert!(c.warnings[0].contains(&format!("using {max}")), "{:?}", c.warnings);
            assert!(setting(&c, "TANDEM_THREADS").value.contains("clamped"));
        }
    }

    #[test]
    fn every_setting_is_recorded_with_its_source() {
        let c = Config::from_lookup(|_| None);
        assert!(c.warnings.is_empty());
        assert!(c.settings.iter().all(|s| s.source == Source::Default));
        assert_eq!(c.settings.len(), 16);
        let c = with("TANDEM_DISABLE_DISPATCH", "hip.rope, hip.mma");
        let s = setting(&c, "TANDEM_DISABLE_DISPATCH");
        assert_eq!((s.value.as_str(), s.source), ("hip.rope,hip.mma", Source::Env));
    }

    #[test]
    fn disable_entries_that_match_nothing_warn() {
        let c = with("TANDEM_DISABLE_DISPATCH", "hip.rope,zzz,hip.gemv.seg");
        let names = ["hip.rope_f32", "hip.gemv.seg.units"];
        let w = c.unmatched_disables(&names);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("'zzz'"), "{w:?}");
        // The real names: every switch the launchers ask about is one of them.
        let real = crate::gpu::registry::disable_names();
        let c = with(
            "TANDEM_DISABLE_DISPATCH",
            "hip.,hip.wmma,hip.mma.mmv,hip.mmid.units,hip.gemv_q4_0",
        );
        assert!(c.unmatched_disables(&real).is_empty());
    }
}
