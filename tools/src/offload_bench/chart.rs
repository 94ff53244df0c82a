//! The chart of `offload-bench --svg` (hand-written SVG): per case the weight read rate of the CPU
//! alone, the GPU alone, the best fixed share and the learnt share, with the sum of the two single
//! sides' rates (what a perfect split would reach) as a line across the case's bars.

use super::results::{BenchReport, CaseResult};
use crate::report::{esc, nice_step};
use std::fmt::Write;

/// The bars of a case, in order, with their colours and legend names.
const SERIES: [(&str, &str); 4] = [
    ("CPU only", "#8c8c8c"),
    ("GPU only", "#3a6fb0"),
    ("best fixed share", "#2e8b57"),
    ("learnt share", "#e07b39"),
];

/// A case's four rates and its ideal, in GB/s; `None` for a case that did not finish.
fn rates(c: &CaseResult) -> Option<([f64; 4], f64)> {
    if c.error.is_some() {
        return None;
    }
    let bars = [
        c.cpu_only.as_ref()?.gbps,
        c.gpu_only.as_ref()?.gbps,
        c.best.as_ref()?.gbps,
        c.auto.as_ref()?.point.gbps,
    ];
    Some((bars, c.ideal_gbps?))
}

pub fn chart(r: &BenchReport) -> String {
    let cases: Vec<(&CaseResult, [f64; 4], f64)> = r
        .cases
        .iter()
        .filter_map(|c| rates(c).map(|(b, i)| (c, b, i)))
        .collect();
    let top = cases
        .iter()
        .flat_map(|(_, b, i)| b.iter().copied().chain([*i]))
        .fold(1.0, f64::max)
        * 1.1;
    let step = nice_step(top / 6.0);
    let top = (top / step).ceil() * step;
    let (left, right, up, down) = (60.0, 20.0, 50.0, 190.0);
    let (bar_w, gap) = (11.0, 14.0);
    let slot = bar_w * SERIES.len() as f64 + gap;
    let plot_w = slot * cases.len().max(1) as f64;
    let plot_h = 320.0;
    let (w, h) = ((left + plot_w + right).max(560.0), up + plot_h + down);
    let y = |v: f64| up + plot_h * (1.0 - v / top);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w:.0}" height="{h:.0}" viewBox="0 0 {w:.0} {h:.0}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{left}" y="20" font-size="14">Split node on {} ({}), {} CPU threads, n={}</text>"#,
        esc(&r.device),
        esc(r.description.split(" (").next().unwrap_or("")),
        r.threads,
        r.n
    );
    let _ = writeln!(
        s,
        r##"<text x="{left}" y="36" fill="#555">weight in pinned host memory; GB/s of weight bytes read, median host time per call; line: CPU + GPU rates</text>"##
    );
    let mut v = 0.0;
    while v <= top + 1e-9 {
        let yy = y(v);
        let _ = writeln!(
            s,
            r##"<line x1="{left}" x2="{:.1}" y1="{yy:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{v}</text>"##,
            left + plot_w,
            left - 6.0,
            yy + 4.0
        );
        v += step;
    }
    let _ = writeln!(
        s,
        r#"<text transform="translate(16,{:.1}) rotate(-90)" text-anchor="middle">GB/s</text>"#,
        up + plot_h / 2.0
    );
    for (i, (c, bars, ideal)) in cases.iter().enumerate() {
        let x0 = left + slot * i as f64 + gap / 2.0;
        for (j, value) in bars.iter().enumerate() {
            let _ = writeln!(
                s,
                r#"<rect x="{:.1}" y="{:.1}" width="{bar_w}" height="{:.1}" fill="{}"><title>{} {}: {value:.1} GB/s</title></rect>"#,
                x0 + bar_w * j as f64,
                y(*value),
                plot_h * value / top,
                SERIES[j].1,
                esc(&c.name),
                SERIES[j].0
            );
        }
        let yi = y(*ideal);
        let _ = writeln!(
            s,
            r##"<line x1="{:.1}" x2="{:.1}" y1="{yi:.1}" y2="{yi:.1}" stroke="#111" stroke-width="2" stroke-dasharray="4 2"><title>{} ideal: {ideal:.1} GB/s</title></line>"##,
            x0 - 2.0,
            x0 + bar_w * SERIES.len() as f64 + 2.0,
            esc(&c.name)
        );
        let lx = x0 + bar_w * SERIES.len() as f64 / 2.0;
        let ly = up + plot_h + 12.0;
        let _ = writeln!(
            s,
            r#"<text transform="translate({lx:.1},{ly:.1}) rotate(-40)" text-anchor="end">{}</text>"#,
            esc(&c.name)
        );
    }
    let _ = writeln!(
        s,
        r##"<line x1="{left}" x2="{left}" y1="{up}" y2="{:.1}" stroke="#333"/><line x1="{left}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="#333"/>"##,
        up + plot_h,
        left + plot_w,
        up + plot_h,
        up + plot_h
    );
    let ly = h - 14.0;
    let mut lx = left;
    for (name, color) in SERIES {
        let _ = writeln!(
            s,
            r#"<rect x="{lx:.1}" y="{:.1}" width="10" height="10" fill="{color}"/><text x="{:.1}" y="{ly:.1}">{name}</text>"#,
            ly - 9.0,
            lx + 14.0
        );
        lx += 24.0 + 6.5 * name.len() as f64;
    }
    let _ = writeln!(
        s,
        r##"<line x1="{lx:.1}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="#111" stroke-width="2" stroke-dasharray="4 2"/><text x="{:.1}" y="{ly:.1}">CPU + GPU (ideal)</text>"##,
        lx + 16.0,
        ly - 4.0,
        ly - 4.0,
        lx + 22.0
    );
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::offload_bench::results::{summarize, AutoPoint, Point};

    fn point(share: f64, us: f64) -> Point {
        Point {
            share,
            us_median: us,
            us_min: us,
            gbps: 100.0 / us,
            ..Default::default()
        }
    }

    #[test]
    fn a_group_of_four_bars_and_an_ideal_line_per_finished_case() {
        let mut done = CaseResult {
            name: "llama3-8b.ffn_down.q4_K.n1".into(),
            read_bytes: 100_000,
            cpu_only: Some(point(0.0, 4.0)),
            gpu_only: Some(point(1.0, 2.0)),
            sweep: vec![point(0.6, 1.5)],
            auto: Some(AutoPoint {
                point: point(0.62, 1.45),
                ..Default::default()
            }),
            ..Default::default()
        };
        summarize(&mut done);
        let failed = CaseResult {
            name: "qwen3-30b-a3b.ffn_down_exps.q4_K.n1".into(),
            error: Some("the node did not split".into()),
            ..Default::default()
        };
        let report = BenchReport {
            device: "TANDEM0".into(),
            description: "NVIDIA H200 (sm_90, 132 CUs, 143000 MiB)".into(),
            threads: 16,
            cases: vec![done, failed],
            ..Default::default()
        };
        let svg = chart(&report);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        // Background, four bars, four legend swatches.
        assert_eq!(svg.matches("<rect").count(), 1 + 4 + 4, "{svg}");
        assert!(svg.contains("llama3-8b.ffn_down.q4_K.n1 ideal: 75.0 GB/s"), "{svg}");
        assert!(!svg.contains("qwen3"), "a failed case has no bars: {svg}");
        assert!(svg.contains("NVIDIA H200") && !svg.contains("sm_90"));
    }
}
