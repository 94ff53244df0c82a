//! The host device's worker pool follows the thread count its host asks for.

use tandem_backend::HostDevice;

#[test]
fn set_threads_resizes_the_pool_and_keeps_old_pools_alive() {
    let h = HostDevice::new(1);
    let old = h.cpu();
    assert_eq!(old.n_threads(), 1);
    h.set_threads(3);
    assert_eq!(h.cpu().n_threads(), 3);
    // A graph that took the old pool before the resize still runs on it.
    let hits = std::sync::atomic::AtomicUsize::new(0);
    old.par_for(8, |_| {
        hits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    });
    assert_eq!(hits.into_inner(), 8);
    // The same count again keeps the same pool.
    let now = h.cpu();
    h.set_threads(3);
    assert!(std::sync::Arc::ptr_eq(&now, &h.cpu()));
    // 0 means one per core, as at creation.
    h.set_threads(0);
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    assert_eq!(h.cpu().n_threads(), cores);
}
