//! A fixed-seed corpus of random ggml graphs through the plugin's C ABI (the long runs use
//! the `fuzz_graphs` binary): no panic, no byte written outside a tensor, every refusal a
//! logged `GGML_STATUS_FAILED`.

use tandem_tests::fuzz_graphs::Fuzzer;

#[test]
fn fixed_seed_corpus_passes() {
    let fuzzer = Fuzzer::new().expect("plugin loads");
    let s = fuzzer.run(46, 3000, |_| {});
    assert_eq!(s.cases, 3000);
    assert!(s.failures.is_empty(), "{} failed: {:#?}", s.failed, s.failures);
    // The corpus reaches both outcomes: graphs tandem computes and graphs it refuses.
    assert!(s.computed > 300, "{s:?}");
    assert!(s.refusals.values().sum::<u64>() > 300, "{s:?}");
}
