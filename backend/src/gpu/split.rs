//! The split node's share scheduler: which fraction of a GEMV's rows the GPU computes (reading
//! the weight over the bus from pinned host memory) while CPU threads compute the rest from the
//! same bytes.
//!
//! One state per shape (weight type, k, m, columns, and the expert count of a MUL_MAT_ID, whose
//! experts split alike: the GPU takes the same first rows of every expert). Every split call
//! reports how long each side took for its rows: the GPU side from events around its kernel, the
//! CPU side from the host clock. Both are exact times of work done side by side, so neither is
//! censored by the other finishing first. The rates (rows per second) are smoothed, and the
//! share is set where both sides would finish together, `r_gpu / (r_gpu + r_cpu)`. The first
//! call of a shape is the probe (half the rows each). A share that stays within [`LATCH_BAND`]
//! of that target for [`LATCH_CALLS`] calls latches; a latched share reopens when the target
//! drifts beyond [`REOPEN_BAND`] for [`REOPEN_CALLS`] calls in a row. Shares that would leave
//! one side fewer than [`MIN_ROWS`] rows become 0 or 1, so all-GPU and all-CPU stay reachable; a
//! side that gets no rows keeps its last rate.

use std::collections::HashMap;
use tandem_graph::ElemType;

/// Rows are handed out in multiples of this (and at least this many to a side that gets any).
pub const ROW_ALIGN: usize = 64;
/// Fewer rows than this for one side and that side gets none.
pub const MIN_ROWS: usize = ROW_ALIGN;
/// Weight of a new observation in the smoothed rates.
const ALPHA: f64 = 0.3;
/// A share within this of its target counts toward latching.
const LATCH_BAND: f64 = 0.02;
const LATCH_CALLS: u32 = 8;
/// A latched share reopens when its target moves beyond this ...
const REOPEN_BAND: f64 = 0.08;
/// ... for this many calls in a row.
const REOPEN_CALLS: u32 = 3;

/// The shape a share belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SplitKey {
    pub ty: ElemType,
    pub k: i64,
    pub m: i64,
    /// Result columns: MUL_MAT's columns, MUL_MAT_ID's expert slots times tokens.
    pub n: i64,
    /// MUL_MAT_ID's number of experts in the weight; 0 for MUL_MAT.
    pub experts: i64,
}

/// How shares are chosen (`TANDEM_SPLIT_SHARE`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ShareMode {
    /// Online, per shape.
    Auto,
    /// This GPU fraction for every shape (0 = all CPU, 1 = all GPU).
    Fixed(f64),
}

/// One call's two timings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Observation {
    pub gpu_rows: usize,
    pub gpu_s: f64,
    pub cpu_rows: usize,
    pub cpu_s: f64,
}

#[derive(Clone, Debug, Default)]
struct ShapeState {
    share: f64,
    r_gpu: Option<f64>,
    r_cpu: Option<f64>,
    calls: u64,
    near: u32,
    far: u32,
    latched: bool,
}

impl ShapeState {
    fn target(&self) -> Option<f64> {
        match (self.r_gpu, self.r_cpu) {
            (Some(g), Some(c)) if g + c > 0.0 => Some(g / (g + c)),
            _ => None,
        }
    }
}

/// Shares per shape, and what the last calls measured.
#[derive(Debug)]
pub struct SplitScheduler {
    mode: ShareMode,
    trace: bool,
    shapes: HashMap<SplitKey, ShapeState>,
}

/// What `TANDEM_TRACE_SPLIT` prints about one shape.
#[derive(Clone, Debug, PartialEq)]
pub struct ShapeReport {
    pub key: SplitKey,
    pub calls: u64,
    pub share: f64,
    pub gpu_rows_per_s: Option<f64>,
    pub cpu_rows_per_s: Option<f64>,
    pub latched: bool,
}

impl std::fmt::Display for ShapeReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let rate = |r: Option<f64>| r.map_or("-".to_string(), |r| format!("{:.3e}", r));
        write!(
            f,
            "split {}{} k={} m={} n={}: call {} share={:.3}{} gpu_rows/s={} cpu_rows/s={}",
            self.key.ty,
            if self.key.experts > 0 {
                format!(" experts={}", self.key.experts)
            } else {
                String::new()
            },
            self.key.k,
            self.key.m,
            self.key.n,
            self.calls,
            self.share,
            if self.latched { " (latched)" } else { "" },
            rate(self.gpu_rows_per_s),
            rate(self.cpu_rows_per_s)
        )
    }
}

impl SplitScheduler {
    pub fn new(mode: ShareMode, trace: bool) -> SplitScheduler {
        SplitScheduler {
            mode,
            trace,
            shapes: HashMap::new(),
        }
    }

    pub fn mode(&self) -> ShareMode {
        self.mode
    }

    /// Replaces the mode (tests and tools pin shares this way); learnt shares are kept.
    pub fn set_mode(&mut self, mode: ShareMode) {
        self.mode = mode;
    }

    /// The GPU's fraction of the rows for the next call of `key`.
    pub fn share(&mut self, key: SplitKey) -> f64 {
        match self.mode {
            ShareMode::Fixed(s) => s,
            ShareMode::Auto => {
                self.shapes
                    .entry(key)
                    .or_insert_with(|| ShapeState {
                        share: 0.5,
                        ..Default::default()
                    })
                    .share
            }
        }
    }

    /// Records one call of `key`; returns the line to trace, at power-of-two call counts when
    /// tracing is on.
    pub fn observe(&mut self, key: SplitKey, o: Observation) -> Option<String> {
        let st = self.shapes.entry(key).or_insert_with(|| ShapeState {
            share: 0.5,
            ..Default::default()
        });
        st.calls += 1;
        let smooth = |old: Option<f64>, rows: usize, s: f64| -> Option<f64> {
            if rows == 0 || s <= 0.0 || !s.is_finite() {
                return old;
            }
            let r = rows as f64 / s;
            Some(old.map_or(r, |o| o + ALPHA * (r - o)))
        };
        st.r_gpu = smooth(st.r_gpu, o.gpu_rows, o.gpu_s);
        st.r_cpu = smooth(st.r_cpu, o.cpu_rows, o.cpu_s);
        if self.mode == ShareMode::Auto {
            if let Some(target) = st.target() {
                let off = (target - st.share).abs();
                if st.latched {
                    st.far = if off > REOPEN_BAND { st.far + 1 } else { 0 };
                    if st.far >= REOPEN_CALLS {
                        st.latched = false;
                        st.near = 0;
                        st.far = 0;
                    }
                }
                if !st.latched {
                    st.near = if off <= LATCH_BAND { st.near + 1 } else { 0 };
                    st.share = target;
                    if st.near >= LATCH_CALLS {
                        st.latched = true;
                    }
                }
            }
        }
        (self.trace && st.calls.is_power_of_two()).then(|| {
            ShapeReport {
                key,
                calls: st.calls,
                share: st.share,
                gpu_rows_per_s: st.r_gpu,
                cpu_rows_per_s: st.r_cpu,
                latched: st.latched,
            }
            .to_string()
        })
    }

    /// Every shape seen, for reports.
    pub fn report(&self) -> Vec<ShapeReport> {
        let mut v: Vec<ShapeReport> = self
            .shapes
            .iter()
            .map(|(k, s)| ShapeReport {
                key: *k,
                calls: s.calls,
                share: s.share,
                gpu_rows_per_s: s.r_gpu,
                cpu_rows_per_s: s.r_cpu,
                latched: s.latched,
            })
            .collect();
        v.sort_by_key(|r| (r.key.m, r.key.k, r.key.n));
        v
    }
}

/// The GPU's rows of `m` at `share`: a multiple of [`ROW_ALIGN`] (or `m`), 0 or `m` where a side
/// would get fewer than [`MIN_ROWS`].
pub fn gpu_rows(m: usize, share: f64) -> usize {
    let share = if share.is_finite() { share.clamp(0.0, 1.0) } else { 1.0 };
    let g = ((share * m as f64 / ROW_ALIGN as f64).round() as usize * ROW_ALIGN).min(m);
    if g < MIN_ROWS {
        0
    } else if m - g < MIN_ROWS {
        m
    } else {
        g
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(m: i64) -> SplitKey {
        SplitKey {
            ty: ElemType::Q4_0,
            k: 4096,
            m,
            n: 1,
            experts: 0,
        }
    }

    /// A simulated pair: the GPU computes `rg` rows a second, the CPU `rc`, each plus a fixed
    /// start cost; `stall` makes one call of one side take 50 times as long.
    fn run(s: &mut SplitScheduler, k: SplitKey, rg: f64, rc: f64, calls: usize, stall: Option<(usize, bool)>) -> f64 {
        let m = k.m as usize;
        let mut share = 0.0;
        for i in 0..calls {
            share = s.share(k);
            let g = gpu_rows(m, share);
            let c = m - g;
            let mut gs = if g > 0 { 5e-6 + g as f64 / rg } else { 0.0 };
            let mut cs = if c > 0 { 5e-6 + c as f64 / rc } else { 0.0 };
            if let Some((at, gpu)) = stall {
                if at == i {
                    if gpu {
                        gs *= 50.0;
                    } else {
                        cs *= 50.0;
                    }
                }
            }
            s.observe(
                k,
                Observation {
                    gpu_rows: g,
                    gpu_s: gs,
                    cpu_rows: c,
                    cpu_s: cs,
                },
            );
        }
        share
    }

    /// The wall time of one call at `share` on the simulated pair.
    fn wall(m: usize, share: f64, rg: f64, rc: f64) -> f64 {
        let g = gpu_rows(m, share);
        let c = m - g;
        let t = |rows: usize, r: f64| if rows > 0 { 5e-6 + rows as f64 / r } else { 0.0 };
        t(g, rg).max(t(c, rc))
    }

    #[test]
    fn the_online_share_finds_the_sweeps_best_time() {
        for (rg, rc) in [(1e7, 1e7), (3e7, 1e7), (1e7, 4e7), (5e6, 6e6)] {
            let mut s = SplitScheduler::new(ShareMode::Auto, false);
            let k = key(14336);
            let share = run(&mut s, k, rg, rc, 40, None);
            let best = (0..=1000)
                .map(|i| wall(14336, i as f64 / 1000.0, rg, rc))
                .fold(f64::INFINITY, f64::min);
            let got = wall(14336, share, rg, rc);
            assert!(
                got <= best * 1.05,
                "rg {rg} rc {rc}: share {share:.3} {got:.3e} s, best {best:.3e}"
            );
            assert!(s.report()[0].latched, "a steady pair latches");
        }
    }

    #[test]
    fn one_stalled_call_does_not_move_a_latched_share() {
        let mut s = SplitScheduler::new(ShareMode::Auto, false);
        let k = key(4096);
        let before = run(&mut s, k, 2e7, 1e7, 30, None);
        // A stall on either side, then the same pair again.
        let after = run(&mut s, k, 2e7, 1e7, 10, Some((3, true)));
        assert!((after - before).abs() < 0.02, "{before} -> {after}");
        let after = run(&mut s, k, 2e7, 1e7, 10, Some((3, false)));
        assert!((after - before).abs() < 0.02, "{before} -> {after}");
    }

    #[test]
    fn a_lasting_drift_reopens_the_share() {
        let mut s = SplitScheduler::new(ShareMode::Auto, false);
        let k = key(8192);
        let before = run(&mut s, k, 1e7, 1e7, 30, None);
        assert!((before - 0.5).abs() < 0.03, "{before}");
        // The CPU gets three times slower (say, other work took its cores).
        let after = run(&mut s, k, 1e7, 1e7 / 3.0, 40, None);
        assert!((after - 0.75).abs() < 0.03, "{after}");
    }

    #[test]
    fn all_gpu_and_all_cpu_stay_reachable() {
        let mut s = SplitScheduler::new(ShareMode::Auto, false);
        assert_eq!(gpu_rows(4096, run(&mut s, key(4096), 1e9, 1e6, 20, None)), 4096);
        let mut s = SplitScheduler::new(ShareMode::Auto, false);
        assert_eq!(gpu_rows(4096, run(&mut s, key(4096), 1e6, 1e9, 20, None)), 0);
    }

    #[test]
    fn fixed_shares_are_used_as_given() {
        let mut s = SplitScheduler::new(ShareMode::Fixed(0.25), false);
        assert_eq!(run(&mut s, key(4096), 1e7, 1e7, 5, None), 0.25);
        assert_eq!(gpu_rows(4096, 0.25), 1024);
        assert_eq!(gpu_rows(4096, 0.0), 0);
        assert_eq!(gpu_rows(4096, 1.0), 4096);
        assert_eq!(gpu_rows(100, 0.5), 100, "the CPU would get fewer than MIN_ROWS");
        assert_eq!(gpu_rows(100, 0.3), 0, "the GPU would get fewer than MIN_ROWS");
        assert_eq!(gpu_rows(4096, 0.999), 4096);
        assert_eq!(gpu_rows(4096, f64::NAN), 4096);
    }

    #[test]
    fn tracing_reports_at_powers_of_two() {
        let mut s = SplitScheduler::new(ShareMode::Auto, true);
        let o = Observation {
            gpu_rows: 2048,
            gpu_s: 1e-4,
            cpu_rows: 2048,
            cpu_s: 2e-4,
        };
        let lines: Vec<u64> = (1..=9).filter(|_| s.observe(key(4096), o).is_some()).collect();
        assert_eq!(lines.len(), 4, "calls 1, 2, 4 and 8");
        let r = &s.report()[0];
        assert!(r.to_string().contains("share=0.667"), "{r}");
    }
}
