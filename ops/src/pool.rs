//! The persistent worker pool every CPU op runs on (threads are made once, never per op).

use crate::simd::{features, CpuFeatures};

pub struct CpuContext {
    pool: rayon::ThreadPool,
    n_threads: usize,
}

impl CpuContext {
    /// A pool of `n_threads` workers (0 = one per available core).
    pub fn new(n_threads: usize) -> CpuContext {
        let n = if n_threads == 0 {
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
        } else {
            n_threads
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .thread_name(|i| format!("tandem-cpu-{i}"))
            .build()
            .expect("building the CPU worker pool");
        CpuContext { pool, n_threads: n }
    }

    pub fn n_threads(&self) -> usize {
        self.n_threads
    }

    pub fn features(&self) -> &'static CpuFeatures {
        features()
    }

    /// Runs `f(i)` for every `i` in `0..n` on the pool and returns when all are done.
    pub fn par_for<F: Fn(usize) + Sync + Send>(&self, n: usize, f: F) {
        use rayon::prelude::*;
        if n == 0 {
            return;
        }
        if n == 1 || self.n_threads == 1 {
            (0..n).for_each(f);
            return;
        }
        self.pool.install(|| (0..n).into_par_iter().for_each(f));
    }

    /// Splits `0..total` into about `n_threads * per_thread` contiguous chunks and runs
    /// `f(start, end)` on each.
    pub fn par_chunks<F: Fn(usize, usize) + Sync + Send>(&self, total: usize, per_thread: usize, f: F) {
        if total == 0 {
            return;
        }
        let chunks = (self.n_threads * per_thread.max(1)).clamp(1, total);
        let step = total.div_ceil(chunks);
        self.par_for(total.div_ceil(step), |c| {
            let s = c * step;
            f(s, (s + step).min(total));
        });
    }
}

/// A raw pointer that may cross to worker threads. Ops hand out disjoint ranges of the
/// destination to different tasks; that disjointness is what makes sharing it sound.
#[derive(Clone, Copy)]
pub struct SendPtr(pub *mut u8);
// SAFETY: the pointer is only dereferenced by tasks writing disjoint byte ranges, as each op
// documents where it splits work.
unsafe impl Send for SendPtr {}
// SAFETY: as above.
unsafe impl Sync for SendPtr {}

impl SendPtr {
    pub fn get(self) -> *mut u8 {
        self.0
    }
}
