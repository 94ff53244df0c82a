//! Whether a graph with split nodes runs them split, or lets the GPU read their host weights
//! alone: the two ways tried in turn on the graph itself, the faster kept.
//!
//! The share scheduler ([`super::split`]) balances the rows of one split node between the two
//! sides, but a split also costs what no row count shows: the stream drains before the
//! activations come down, the GPU waits for the CPU's rows to come up, and the kernels between
//! split nodes run as several device graphs instead of one. Where those costs outweigh what the
//! CPU's rows save (a layer of small GEMVs, MoE experts of a few rows each), the whole graph runs
//! faster with every host weight read by the GPU (`TANDEM_OFFLOAD_EXEC=gpu`'s plan). So each
//! graph (by plan key) with split nodes is run both ways in blocks, and the way with the lower
//! median wall time per run is kept for a while, then both are tried again.
//!
//! A block is [`RUNS_PER_ADDRESS`] runs per distinct set of tensor addresses seen with the key
//! (a hybrid model's layers share one plan at different addresses, each replaying its own device
//! graph once it has come [`super::device`]'s few times), of which the first half warms up
//! (captures) and the second half is measured. The first block of a key runs split unmeasured,
//! so that the shares settle; then a split block and a whole-GPU block are measured, and the
//! faster way holds for [`HOLD_BLOCKS_FIRST`] blocks, doubling up to [`HOLD_BLOCKS_MAX`] while
//! the same way keeps winning.

use std::collections::{HashMap, HashSet};

/// The two ways of running a graph with split nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Way {
    /// Split nodes as planned: GPU and CPU rows side by side.
    Split,
    /// Every split node as a kernel reading its whole weight over the bus.
    Gpu,
}

impl std::fmt::Display for Way {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Way::Split => "split",
            Way::Gpu => "whole GPU",
        })
    }
}

/// Runs of a block per distinct address set of the key; the first half is not measured.
pub const RUNS_PER_ADDRESS: u64 = 8;
/// Address sets counted per key at most (a longer block would only delay the choice).
const MAX_ADDRESSES: usize = 16;
/// Blocks the winner holds after a first decision ...
pub const HOLD_BLOCKS_FIRST: u64 = 16;
/// ... doubling while the same way wins, up to this.
pub const HOLD_BLOCKS_MAX: u64 = 256;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Split, unmeasured: the shares settle.
    Learn,
    /// Measuring one way.
    Measure(Way),
    /// Running the winner until `runs_left` reaches 0.
    Hold(Way),
}

#[derive(Clone, Debug)]
struct KeyState {
    addresses: HashSet<u64>,
    phase: Phase,
    /// Runs done in the current phase.
    runs: u64,
    /// Runs left in a hold.
    runs_left: u64,
    split_s: Vec<f64>,
    gpu_s: Vec<f64>,
    /// The last decision and how long it holds.
    last: Option<Way>,
    hold_blocks: u64,
    decisions: u64,
}

impl KeyState {
    fn new() -> KeyState {
        KeyState {
            addresses: HashSet::new(),
            phase: Phase::Learn,
            runs: 0,
            runs_left: 0,
            split_s: Vec::new(),
            gpu_s: Vec::new(),
            last: None,
            hold_blocks: HOLD_BLOCKS_FIRST,
            decisions: 0,
        }
    }

    fn block(&self) -> u64 {
        RUNS_PER_ADDRESS * self.addresses.len().clamp(1, MAX_ADDRESSES) as u64
    }

    fn way(&self) -> Way {
        match self.phase {
            Phase::Learn => Way::Split,
            Phase::Measure(w) | Phase::Hold(w) => w,
        }
    }
}

/// One decision, for `TANDEM_TRACE_SPLIT`.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub key: u64,
    pub split_s: f64,
    pub gpu_s: f64,
    pub samples: usize,
    pub way: Way,
    pub hold_runs: u64,
}

impl std::fmt::Display for Decision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "graph {:016x}: split {:.1} us, whole GPU {:.1} us a run (medians of {}): {} for the next {} runs",
            self.key,
            self.split_s * 1e6,
            self.gpu_s * 1e6,
            self.samples,
            self.way,
            self.hold_runs
        )
    }
}

/// The way per graph key, and the trials that choose it.
#[derive(Debug, Default)]
pub struct WayChooser {
    keys: HashMap<u64, KeyState>,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

impl WayChooser {
    pub fn new() -> WayChooser {
        WayChooser::default()
    }

    /// The way the next run of the graph with plan key `key` at addresses `at` takes.
    pub fn way(&mut self, key: u64, at: u64) -> Way {
        let st = self.keys.entry(key).or_insert_with(KeyState::new);
        if st.addresses.len() < MAX_ADDRESSES {
            st.addresses.insert(at);
        }
        st.way()
    }

    /// Records that a run of `key` the way [`Self::way`] said took `secs`; returns the decision
    /// when this run completed a trial.
    pub fn record(&mut self, key: u64, way: Way, secs: f64) -> Option<Decision> {
        let st = self.keys.get_mut(&key)?;
        if st.way() != way {
            // A run of another way than the phase's (the phase moved on meanwhile): not counted.
            return None;
        }
        st.runs += 1;
        let block = st.block();
        match st.phase {
            Phase::Learn => {
                if st.runs >= block {
                    st.phase = Phase::Measure(Way::Split);
                    st.runs = 0;
                }
                None
            }
            Phase::Measure(w) => {
                if st.runs > block / 2 && secs.is_finite() && secs > 0.0 {
                    match w {
                        Way::Split => st.split_s.push(secs),
                        Way::Gpu => st.gpu_s.push(secs),
                    }
                }
                if st.runs < block {
                    return None;
                }
                st.runs = 0;
                if w == Way::Split {
                    st.phase = Phase::Measure(Way::Gpu);
                    return None;
                }
                let (split_s, gpu_s) = (median(&mut st.split_s), median(&mut st.gpu_s));
                let samples = st.split_s.len().min(st.gpu_s.len());
                st.split_s.clear();
                st.gpu_s.clear();
                // Ties (and a side without samples, NaN) stay split: the default way.
                let way = if gpu_s < split_s { Way::Gpu } else { Way::Split };
                st.hold_blocks = match st.last {
                    Some(l) if l == way => (st.hold_blocks * 2).min(HOLD_BLOCKS_MAX),
                    _ => HOLD_BLOCKS_FIRST,
                };
                st.last = Some(way);
                st.decisions += 1;
                st.runs_left = st.hold_blocks * block;
                st.phase = Phase::Hold(way);
                Some(Decision {
                    key,
                    split_s,
                    gpu_s,
                    samples,
                    way,
                    hold_runs: st.runs_left,
                })
            }
            Phase::Hold(_) => {
                st.runs_left = st.runs_left.saturating_sub(1);
                if st.runs_left == 0 {
                    st.phase = Phase::Measure(Way::Split);
                    st.runs = 0;
                }
                None
            }
        }
    }

    /// The way each key holds now (`None` while it is still learning or on trial).
    pub fn held(&self, key: u64) -> Option<Way> {
        match self.keys.get(&key)?.phase {
            Phase::Hold(w) => Some(w),
            _ => None,
        }
    }

    /// Decisions taken for `key` so far.
    pub fn decisions(&self, key: u64) -> u64 {
        self.keys.get(&key).map_or(0, |s| s.decisions)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `runs` graphs of `key` over `addresses` address sets, each taking `split_s` or
    /// `gpu_s` seconds by way, the first few runs of a way after a switch (and of each address)
    /// taking 3× as long (launch by launch, then the capture). Returns the runs of each way and
    /// the decisions.
    fn drive(
        c: &mut WayChooser,
        key: u64,
        addresses: u64,
        runs: u64,
        split_s: f64,
        gpu_s: f64,
    ) -> (u64, u64, Vec<Decision>) {
        let (mut n_split, mut n_gpu, mut decisions) = (0, 0, Vec::new());
        let mut streak: HashMap<(u64, Way), u32> = HashMap::new();
        let mut prev = None;
        for i in 0..runs {
            let at = i % addresses;
            let way = c.way(key, at);
            if prev != Some(way) {
                streak.clear();
            }
            prev = Some(way);
            let s = streak.entry((at, way)).or_insert(0);
            *s += 1;
            let base = if way == Way::Split { split_s } else { gpu_s };
            let t = if *s <= 3 { 3.0 * base } else { base };
            match way {
                Way::Split => n_split += 1,
                Way::Gpu => n_gpu += 1,
            }
            decisions.extend(c.record(key, way, t));
        }
        (n_split, n_gpu, decisions)
    }

    #[test]
    fn the_faster_way_wins_and_holds() {
        for (split_s, gpu_s, want) in [(1.0e-3, 1.2e-3, Way::Split), (1.2e-3, 1.0e-3, Way::Gpu)] {
            let mut c = WayChooser::new();
            let (_, _, d) = drive(&mut c, 7, 1, 3 * RUNS_PER_ADDRESS, split_s, gpu_s);
            assert_eq!(d.len(), 1, "learn, then one block of each way: one decision");
            assert_eq!(d[0].way, want, "{}", d[0]);
            assert_eq!(d[0].samples, (RUNS_PER_ADDRESS / 2) as usize);
            // Medians of the measured half: the captures' slow runs are not in them.
            assert!((d[0].split_s - split_s).abs() < 1e-12 && (d[0].gpu_s - gpu_s).abs() < 1e-12);
            assert_eq!(c.held(7), Some(want));
            // The hold: the winner only.
            let (ns, ng, d) = drive(&mut c, 7, 1, HOLD_BLOCKS_FIRST * RUNS_PER_ADDRESS, split_s, gpu_s);
            assert!(d.is_empty());
            assert_eq!(if want == Way::Split { ng } else { ns }, 0);
        }
    }

    #[test]
    fn trials_come_back_and_the_hold_doubles_while_the_winner_stays() {
        let mut c = WayChooser::new();
        let b = RUNS_PER_ADDRESS;
        let (_, _, d) = drive(&mut c, 1, 1, 3 * b + HOLD_BLOCKS_FIRST * b + 2 * b, 2.0, 1.0);
        assert_eq!(d.len(), 2);
        assert_eq!(d[0].hold_runs, HOLD_BLOCKS_FIRST * b);
        assert_eq!(d[1].hold_runs, 2 * HOLD_BLOCKS_FIRST * b, "same winner: twice the hold");
        // Then the split way gets faster (say, the CPU was busy before): the next trial moves.
        let (_, _, d) = drive(&mut c, 1, 1, 2 * HOLD_BLOCKS_FIRST * b + 2 * b, 0.5, 1.0);
        assert_eq!(d.len(), 1);
        assert_eq!((d[0].way, d[0].hold_runs), (Way::Split, HOLD_BLOCKS_FIRST * b));
        assert_eq!(c.decisions(1), 3);
    }

    #[test]
    fn blocks_cover_every_address_set() {
        // A hybrid model's nine layers of one plan: a block is 8 runs of each, so each layer's
        // graph has replayed before it is measured.
        let mut c = WayChooser::new();
        let (ns, ng, d) = drive(&mut c, 3, 9, 27 * RUNS_PER_ADDRESS, 1.0, 0.9);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].samples, (9 * RUNS_PER_ADDRESS / 2) as usize);
        assert_eq!((d[0].split_s, d[0].gpu_s), (1.0, 0.9), "{}", d[0]);
        assert_eq!((ns, ng), (18 * RUNS_PER_ADDRESS, 9 * RUNS_PER_ADDRESS));
    }

    #[test]
    fn keys_are_independent_and_stray_runs_are_ignored() {
        let mut c = WayChooser::new();
        drive(&mut c, 1, 1, 3 * RUNS_PER_ADDRESS, 1.0, 2.0);
        drive(&mut c, 2, 1, 3 * RUNS_PER_ADDRESS, 2.0, 1.0);
        assert_eq!((c.held(1), c.held(2)), (Some(Way::Split), Some(Way::Gpu)));
        assert_eq!(c.record(3, Way::Split, 1.0), None, "an unknown key");
        assert_eq!(c.record(2, Way::Split, 1.0), None, "a way the key is not on");
        assert_eq!(c.held(9), None);
    }

    #[test]
    fn decisions_read_well() {
        let d = Decision {
            key: 0xabc,
            split_s: 1.5e-3,
            gpu_s: 1.25e-3,
            samples: 4,
            way: Way::Gpu,
            hold_runs: 128,
        };
        assert_eq!(
            d.to_string(),
            "graph 0000000000000abc: split 1500.0 us, whole GPU 1250.0 us a run (medians of 4): whole GPU for the next 128 runs"
        );
    }
}
