//! The persistent worker pool every CPU op runs on (threads are made once, never per op).
//!
//! A parallel call runs on the calling thread plus `n_threads - 1` workers. Work is handed out
//! by an atomic counter that the caller draws from too, so the caller never sleeps waiting for
//! a worker to wake up: if the workers are slow to start (asleep, or the machine is busy), the
//! caller simply runs more of the items itself and only waits for items a worker has already
//! taken. Calls with little work run on the calling thread alone (see [`MIN_PARALLEL_WORK`]).

use crate::simd::{features, CpuFeatures};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// Below this many element operations (the caller's estimate of a call's total work) a
/// parallel call runs on the calling thread. Handing items to a worker costs ~0.6 µs a call even
/// when the caller ends up running them all (2 threads, 2-core machine, release); 16K operations
/// are several µs of work, so the hand-off stays under ~10% of a call that is offered.
pub const MIN_PARALLEL_WORK: usize = 1 << 14;

pub struct CpuContext {
    /// `n_threads - 1` workers; none with one thread.
    pool: Option<rayon::ThreadPool>,
    n_threads: usize,
}

/// The state one parallel call shares with its workers: which item is next, how many are done.
struct Shared {
    next: AtomicUsize,
    done: AtomicUsize,
    n: usize,
    panicked: AtomicBool,
}

/// The call's item function with its lifetime erased, so worker tasks (which must be
/// `'static`) can hold it. Dereferenced only by a task that has claimed an item, which the
/// caller waits for before it returns, so the function outlives every use.
#[derive(Clone, Copy)]
struct ItemFn(*const (dyn Fn(usize) + Sync));
// SAFETY: the function is `Sync`, and the pointer is only used while the caller keeps the
// function alive (see above).
unsafe impl Send for ItemFn {}

impl Shared {
    /// Claims and runs items until none is left.
    ///
    /// # Safety
    /// `f` is alive whenever an item is claimed (the caller of `par_for` waits for every
    /// claimed item to finish).
    unsafe fn drain(&self, f: ItemFn) {
        loop {
            let i = self.next.fetch_add(1, Ordering::Relaxed);
            if i >= self.n {
                return;
            }
            // SAFETY: item `i` was claimed, so the caller has not returned and `f` is alive.
            let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe { (*f.0)(i) }));
            if run.is_err() {
                self.panicked.store(true, Ordering::Relaxed);
            }
            self.done.fetch_add(1, Ordering::Release);
        }
    }
}

impl CpuContext {
    /// A pool of `n_threads` threads, the caller's included (0 = one per available core).
    pub fn new(n_threads: usize) -> CpuContext {
        let n = if n_threads == 0 {
            std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
        } else {
            n_threads
        };
        let pool = (n > 1).then(|| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(n - 1)
                .thread_name(|i| format!("tandem-cpu-{i}"))
                .build()
                .expect("building the CPU worker pool")
        });
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
        self.par_for_work(n, usize::MAX, f)
    }

    /// Splits `0..total` into about `n_threads * per_thread` contiguous chunks and runs
    /// `f(start, end)` on each.
    pub fn par_chunks<F: Fn(usize, usize) + Sync + Send>(&self, total: usize, per_thread: usize, f: F) {
        self.par_chunks_work(total, per_thread, usize::MAX, f)
    }

    /// [`Self::par_for`] for a call of about `work` element operations in all: below
    /// [`MIN_PARALLEL_WORK`] everything runs on the calling thread.
    pub fn par_for_work<F: Fn(usize) + Sync + Send>(&self, n: usize, work: usize, f: F) {
        if n == 0 {
            return;
        }
        let pool = match &self.pool {
            Some(p) if n > 1 && work >= MIN_PARALLEL_WORK => p,
            _ => {
                (0..n).for_each(f);
                return;
            }
        };
        let shared = Arc::new(Shared {
            next: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
            n,
            panicked: AtomicBool::new(false),
        });
        let dyn_f: &(dyn Fn(usize) + Sync) = &f;
        // SAFETY: erases the borrow's lifetime only; `f` outlives every dereference because this
        // function waits below until every claimed item is done.
        let item_fn = ItemFn(unsafe {
            std::mem::transmute::<*const (dyn Fn(usize) + Sync + '_), *const (dyn Fn(usize) + Sync + 'static)>(
                dyn_f as *const _,
            )
        });
        for _ in 0..(n - 1).min(self.n_threads - 1) {
            let s = Arc::clone(&shared);
            let g = item_fn;
            // SAFETY: `f` is alive while any item is claimed (see `drain`).
            pool.spawn(move || unsafe { s.drain(g) });
        }
        // SAFETY: `f` is alive for this whole call.
        unsafe { shared.drain(item_fn) };
        // Only items a worker already claimed are left: wait for them, briefly spinning (an
        // item is short) and then yielding the core to whoever runs it.
        let mut spins = 0u32;
        while shared.done.load(Ordering::Acquire) < n {
            if spins < 256 {
                std::hint::spin_loop();
                spins += 1;
            } else {
                std::thread::yield_now();
            }
        }
        if shared.panicked.load(Ordering::Relaxed) {
            panic!("a CPU worker task panicked");
        }
    }

    /// [`Self::par_chunks`] for a call of about `work` element operations in all: fewer chunks
    /// when the work is small, and none handed to the workers below [`MIN_PARALLEL_WORK`].
    pub fn par_chunks_work<F: Fn(usize, usize) + Sync + Send>(
        &self,
        total: usize,
        per_thread: usize,
        work: usize,
        f: F,
    ) {
        if total == 0 {
            return;
        }
        // Each chunk gets at least a quarter of the inline threshold's work.
        let by_work = work / (MIN_PARALLEL_WORK / 4);
        let chunks = (self.n_threads * per_thread.max(1)).min(by_work).clamp(1, total);
        let step = total.div_ceil(chunks);
        self.par_for_work(total.div_ceil(step), work, |c| {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn every_item_runs_once_on_any_thread_count() {
        for threads in [1, 2, 3, 8] {
            let ctx = CpuContext::new(threads);
            for n in [0usize, 1, 2, 7, 100, 1000] {
                let hits: Vec<AtomicU64> = (0..n).map(|_| AtomicU64::new(0)).collect();
                ctx.par_for(n, |i| {
                    hits[i].fetch_add(1, Ordering::Relaxed);
                });
                assert!(
                    hits.iter().all(|h| h.load(Ordering::Relaxed) == 1),
                    "{threads} threads, n {n}"
                );
            }
        }
    }

    #[test]
    fn chunks_cover_the_range_exactly() {
        let ctx = CpuContext::new(3);
        for (total, work) in [
            (1usize, 0usize),
            (5, 1 << 20),
            (1000, 1 << 20),
            (1000, 10),
            (17, 1 << 15),
        ] {
            let hits: Vec<AtomicU64> = (0..total).map(|_| AtomicU64::new(0)).collect();
            let calls = AtomicU64::new(0);
            ctx.par_chunks_work(total, 4, work, |s, e| {
                assert!(s < e && e <= total);
                calls.fetch_add(1, Ordering::Relaxed);
                for h in &hits[s..e] {
                    h.fetch_add(1, Ordering::Relaxed);
                }
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1), "total {total}");
            let calls = calls.into_inner();
            assert!(calls <= 12, "{calls} chunks for 3 threads x 4");
            if work < MIN_PARALLEL_WORK / 2 {
                assert_eq!(calls, 1, "little work stays in one chunk");
            }
        }
    }

    #[test]
    fn small_work_runs_on_the_calling_thread() {
        let ctx = CpuContext::new(4);
        let me = std::thread::current().id();
        ctx.par_for_work(64, MIN_PARALLEL_WORK - 1, |_| {
            assert_eq!(std::thread::current().id(), me)
        });
    }

    #[test]
    fn large_work_reaches_the_workers() {
        let ctx = CpuContext::new(2);
        let me = std::thread::current().id();
        let elsewhere = AtomicBool::new(false);
        // Items slow enough that the worker wakes up before the caller has drained them.
        for _ in 0..50 {
            ctx.par_for(64, |_| {
                if std::thread::current().id() != me {
                    elsewhere.store(true, Ordering::Relaxed);
                }
                std::thread::sleep(std::time::Duration::from_micros(200));
            });
            if elsewhere.load(Ordering::Relaxed) {
                break;
            }
        }
        assert!(elsewhere.into_inner(), "no item ran on the worker");
    }

    #[test]
    fn a_panicking_item_panics_the_caller_after_all_items() {
        let ctx = CpuContext::new(2);
        let ran = AtomicU64::new(0);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            ctx.par_for(16, |i| {
                ran.fetch_add(1, Ordering::Relaxed);
                assert!(i != 3, "item 3 fails");
            })
        }));
        assert!(r.is_err());
        assert_eq!(ran.into_inner(), 16);
    }
}
