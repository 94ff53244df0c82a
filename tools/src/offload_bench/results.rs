//! What offload-bench reports per case (the JSON's fields), the rates and ratios derived from
//! the timings, and the table's text.

use serde::Serialize;

/// The learnt share counts as good when its time is within this factor of the best fixed share's.
const AUTO_TOLERANCE: f64 = 1.05;

/// One fixed share's (or the learnt share's) calls.
#[derive(Serialize, Clone, Debug, Default, PartialEq)]
pub struct Point {
    /// GPU share: 0 = every row on the CPU, 1 = every row on the GPU.
    pub share: f64,
    /// Rows of `m` (of each expert) the GPU computed: the share in whole steps of the
    /// scheduler's row alignment.
    pub gpu_rows: usize,
    /// Host time around `compute`, median and least over the timed calls.
    pub us_median: f64,
    pub us_min: f64,
    /// Weight bytes read per call over `us_median`.
    pub gbps: f64,
    /// NMSE of the result against the CPU-only result (0 for that one).
    pub nmse: f64,
}

/// The learnt share's calls, and what the scheduler knew at their end.
#[derive(Serialize, Clone, Debug, Default, PartialEq)]
pub struct AutoPoint {
    #[serde(flatten)]
    pub point: Point,
    /// Calls until the share latched; null where it had not after [`AUTO_MAX_CALLS`].
    pub calls_to_latch: Option<usize>,
    /// Whether the share was latched after the timed calls.
    pub latched: bool,
    pub gpu_rows_per_s: Option<f64>,
    pub cpu_rows_per_s: Option<f64>,
}

#[derive(Serialize, Clone, Debug, Default, PartialEq)]
pub struct CaseResult {
    pub name: String,
    pub preset: String,
    pub projection: String,
    /// MUL_MAT or MUL_MAT_ID.
    pub op: String,
    #[serde(rename = "type")]
    pub ty: String,
    pub k: i64,
    pub m: i64,
    /// Columns of a MUL_MAT, tokens of a MUL_MAT_ID.
    pub n: i64,
    /// Experts in the weight and used per token; 0 for a MUL_MAT.
    pub experts: i64,
    pub used: i64,
    /// Bytes of one copy of the weight.
    pub weight_bytes: usize,
    /// Weight bytes one call reads (a MUL_MAT_ID's used experts only); the rates count these.
    pub read_bytes: usize,
    pub copies: usize,
    /// Rotation steps: weight copies times the expert sets used in each.
    pub variants: usize,
    /// Pinned host memory holding the copies.
    pub pinned_bytes: usize,
    /// Weight bytes the rotation reads before it comes back to the same bytes.
    pub working_set_bytes: usize,
    pub cpu_only: Option<Point>,
    pub gpu_only: Option<Point>,
    pub sweep: Vec<Point>,
    pub auto: Option<AutoPoint>,
    /// CPU-only rate plus GPU-only rate: what a split at the perfect share would reach with
    /// neither side slowed by the other.
    pub ideal_gbps: Option<f64>,
    pub ideal_us: Option<f64>,
    /// The fastest fixed share measured (the sweep's, CPU-only and GPU-only).
    pub best: Option<Point>,
    /// The best fixed share's rate over `ideal_gbps`.
    pub best_over_ideal: Option<f64>,
    /// The faster single side's time over the best fixed share's.
    pub best_speedup: Option<f64>,
    pub auto_over_ideal: Option<f64>,
    pub auto_speedup: Option<f64>,
    /// Whether the learnt share's time is within 5 % of the best fixed share's.
    pub auto_within_5pct: Option<bool>,
    pub error: Option<String>,
}

#[derive(Serialize, Clone, Debug, Default, PartialEq)]
pub struct BenchReport {
    pub device: String,
    pub description: String,
    /// Worker threads of the device's CPU pool (the split's CPU side).
    pub threads: usize,
    pub reps: usize,
    pub n: i64,
    pub types: Vec<String>,
    pub sweep: Vec<f64>,
    pub rotation_bytes: usize,
    pub cases: Vec<CaseResult>,
}

/// GB/s of `bytes` read in `us` microseconds.
pub fn gbps(bytes: usize, us: f64) -> f64 {
    bytes as f64 / us / 1e3
}

/// Time of the perfect split: both sides busy at their own rates until they finish together.
pub fn ideal_us(cpu_us: f64, gpu_us: f64) -> f64 {
    1.0 / (1.0 / cpu_us + 1.0 / gpu_us)
}

/// A split's rate over the sum of the single sides' rates (bytes cancel out).
pub fn over_ideal(split_us: f64, cpu_us: f64, gpu_us: f64) -> f64 {
    ideal_us(cpu_us, gpu_us) / split_us
}

/// The faster single side's time over the split's.
pub fn speedup(split_us: f64, cpu_us: f64, gpu_us: f64) -> f64 {
    cpu_us.min(gpu_us) / split_us
}

/// Fills the derived fields of `r` from its points.
pub fn summarize(r: &mut CaseResult) {
    let (Some(cpu), Some(gpu)) = (&r.cpu_only, &r.gpu_only) else {
        return;
    };
    let (c, g) = (cpu.us_median, gpu.us_median);
    r.ideal_us = Some(ideal_us(c, g));
    r.ideal_gbps = Some(gbps(r.read_bytes, ideal_us(c, g)));
    let best = [cpu, gpu]
        .into_iter()
        .chain(&r.sweep)
        .min_by(|a, b| a.us_median.total_cmp(&b.us_median))
        .cloned();
    if let Some(b) = &best {
        r.best_over_ideal = Some(over_ideal(b.us_median, c, g));
        r.best_speedup = Some(speedup(b.us_median, c, g));
        if let Some(a) = &r.auto {
            r.auto_over_ideal = Some(over_ideal(a.point.us_median, c, g));
            r.auto_speedup = Some(speedup(a.point.us_median, c, g));
            r.auto_within_5pct = Some(a.point.us_median <= b.us_median * AUTO_TOLERANCE);
        }
    }
    r.best = best;
}

/// The table's legend and column names.
pub fn header() -> String {
    let legend = "rates in GB/s of weight bytes read; ideal = cpu + gpu; best = the fastest fixed share; \
                  /ideal = rate over ideal; x1side = speedup over the faster side alone; \
                  <=5% = learnt share within 5 % of the best time";
    let columns = format!(
        "{:<40} {:>11} {:>7} {:>7} {:>7} {:>7} | {:>5} {:>7} {:>6} {:>6} | {:>5} {:>7} {:>6} {:>6} {:>5}",
        "case",
        "k x m",
        "MB/call",
        "cpu",
        "gpu",
        "ideal",
        "best",
        "GB/s",
        "/ideal",
        "x1side",
        "auto",
        "GB/s",
        "/ideal",
        "x1side",
        "<=5%"
    );
    format!("{legend}\n{columns}")
}

/// One case's line of the table (on stderr as progress under `--json`).
pub fn row_text(r: &CaseResult) -> String {
    let shape = format!("{}x{}", r.k, r.m);
    if let Some(e) = &r.error {
        return format!("{:<40} {shape:>11} FAIL: {e}", r.name);
    }
    let (Some(cpu), Some(gpu), Some(ideal), Some(best), Some(auto)) =
        (&r.cpu_only, &r.gpu_only, r.ideal_gbps, &r.best, &r.auto)
    else {
        return format!("{:<40} {shape:>11} FAIL: incomplete measurement", r.name);
    };
    let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2}"));
    format!(
        "{:<40} {shape:>11} {:>7.1} {:>7.1} {:>7.1} {ideal:>7.1} | {:>5.2} {:>7.1} {:>6} {:>6} | {:>5.2} {:>7.1} {:>6} {:>6} {:>5}",
        r.name,
        r.read_bytes as f64 / 1e6,
        cpu.gbps,
        gpu.gbps,
        best.share,
        best.gbps,
        f(r.best_over_ideal),
        f(r.best_speedup),
        auto.point.share,
        auto.point.gbps,
        f(r.auto_over_ideal),
        f(r.auto_speedup),
        match r.auto_within_5pct {
            Some(true) => "yes",
            Some(false) => "NO",
            None => "-",
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(share: f64, us: f64) -> Point {
        Point {
            share,
            us_median: us,
            us_min: us,
            ..Default::default()
        }
    }

    #[test]
    fn rates_and_ratios() {
        assert_eq!(gbps(2_000_000, 100.0), 20.0);
        // 30 GB/s and 60 GB/s sides: 90 GB/s together.
        let (cpu, gpu) = (100.0, 50.0);
        assert!((ideal_us(cpu, gpu) - 100.0 / 3.0).abs() < 1e-9);
        assert!((over_ideal(100.0 / 3.0, cpu, gpu) - 1.0).abs() < 1e-12);
        assert!((over_ideal(40.0, cpu, gpu) - 2.5 / 3.0).abs() < 1e-12);
        assert!((speedup(40.0, cpu, gpu) - 1.25).abs() < 1e-12);
    }

    #[test]
    fn the_best_fixed_share_includes_the_single_sides_and_auto_is_judged_against_it() {
        let mut r = CaseResult {
            read_bytes: 3_000_000,
            cpu_only: Some(point(0.0, 100.0)),
            gpu_only: Some(point(1.0, 50.0)),
            sweep: vec![point(0.5, 60.0), point(0.7, 40.0), point(0.9, 45.0)],
            auto: Some(AutoPoint {
                point: point(0.68, 41.5),
                ..Default::default()
            }),
            ..Default::default()
        };
        summarize(&mut r);
        assert_eq!(r.best.as_ref().map(|b| b.share), Some(0.7));
        assert!((r.ideal_gbps.unwrap() - 90.0).abs() < 1e-9);
        assert!((r.best_speedup.unwrap() - 1.25).abs() < 1e-12);
        assert!((r.auto_over_ideal.unwrap() - (100.0 / 3.0) / 41.5).abs() < 1e-12);
        assert_eq!(r.auto_within_5pct, Some(true));
        r.auto.as_mut().unwrap().point.us_median = 42.5;
        summarize(&mut r);
        assert_eq!(r.auto_within_5pct, Some(false));
        // A sweep that loses to the GPU alone: the GPU alone is the best fixed share.
        r.sweep = vec![point(0.5, 60.0)];
        summarize(&mut r);
        assert_eq!(r.best.as_ref().map(|b| b.share), Some(1.0));
        assert!((r.best_speedup.unwrap() - 1.0).abs() < 1e-12);
    }

    #[test]
    fn an_unfinished_case_derives_nothing_and_its_row_says_why() {
        let mut r = CaseResult {
            name: "llama3-8b.attn_qo.f16.n1".into(),
            cpu_only: Some(point(0.0, 100.0)),
            error: Some("share 1: the node did not split".into()),
            ..Default::default()
        };
        summarize(&mut r);
        assert_eq!((r.ideal_gbps, r.best.clone(), r.auto_within_5pct), (None, None, None));
        assert!(row_text(&r).contains("FAIL: share 1: the node did not split"));
    }

    #[test]
    fn the_json_names_its_fields() {
        let mut r = CaseResult {
            ty: "q4_K".into(),
            auto: Some(AutoPoint {
                point: point(0.6, 1.0),
                latched: true,
                calls_to_latch: Some(12),
                ..Default::default()
            }),
            ..Default::default()
        };
        summarize(&mut r);
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["type"], "q4_K");
        assert_eq!(v["auto"]["share"], 0.6);
        assert_eq!(v["auto"]["calls_to_latch"], 12);
        for field in [
            "cpu_only",
            "gpu_only",
            "sweep",
            "best",
            "ideal_gbps",
            "auto_within_5pct",
            "error",
        ] {
            assert!(v.get(field).is_some(), "{field}");
        }
    }
}
