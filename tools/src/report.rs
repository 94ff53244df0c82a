//! `tandem perf-report`: turns the JSON of `perf-ops --json` (and, optionally, the JSON of
//! `scripts/torch-peer.py` from the same device command) into a markdown table and an SVG bar
//! chart of the GEMV cases' achieved bandwidth against the copy rate and torch.mv.

use crate::perf::{CaseResult, PerfReport};
use regex::Regex;
use serde::Deserialize;
use std::fmt::Write as _;
use std::path::Path;

/// What `scripts/torch-peer.py` prints.
#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
pub struct TorchReport {
    #[serde(default)]
    pub torch: String,
    #[serde(default)]
    pub device: String,
    pub copy: Option<TorchCopy>,
    #[serde(default)]
    pub cases: Vec<TorchCase>,
}

#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
pub struct TorchCopy {
    pub bytes: usize,
    pub us_median: f64,
    pub gbps: f64,
}

#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
pub struct TorchCase {
    pub name: String,
    /// "f16", ...
    pub dtype: String,
    pub m: i64,
    pub k: i64,
    pub n: i64,
    pub us_median: f64,
    #[serde(default)]
    pub us_min: f64,
    pub bytes: usize,
    pub gbps: f64,
    #[serde(default)]
    pub tflops: f64,
    /// Per call, the copies' calls queued back to back (absent in older files).
    #[serde(default)]
    pub chain_us_median: Option<f64>,
}

/// A MUL_MAT case's type and shape, read from its name.
#[derive(Clone, Debug, PartialEq, Eq)]
struct MatShape {
    ty: String,
    m: i64,
    k: i64,
    n: i64,
}

fn mat_shape(name: &str) -> Option<MatShape> {
    static RE: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    let re =
        RE.get_or_init(|| Regex::new(r"^MUL_MAT\(type=([^,]+),m=(\d+),k=(\d+),n=(\d+)\)$").expect("a valid pattern"));
    let c = re.captures(name)?;
    Some(MatShape {
        ty: c[1].to_string(),
        m: c[2].parse().ok()?,
        k: c[3].parse().ok()?,
        n: c[4].parse().ok()?,
    })
}

/// Reads the inputs and writes the markdown (to `md`, or stdout) and the SVG (when asked).
pub fn perf_report(perf: &Path, torch: Option<&Path>, md: Option<&Path>, svg: Option<&Path>) -> Result<bool, String> {
    let read = |p: &Path| std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()));
    let report: PerfReport = serde_json::from_str(&read(perf)?).map_err(|e| format!("{}: {e}", perf.display()))?;
    let torch: Option<TorchReport> = match torch {
        Some(p) => Some(serde_json::from_str(&read(p)?).map_err(|e| format!("{}: {e}", p.display()))?),
        None => None,
    };
    let text = markdown(&report, torch.as_ref());
    match md {
        Some(p) => std::fs::write(p, &text).map_err(|e| format!("{}: {e}", p.display()))?,
        None => print!("{text}"),
    }
    if let Some(p) = svg {
        std::fs::write(p, chart(&report, torch.as_ref())).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    Ok(report.cases.iter().all(|c| c.error.is_none()))
}

/// The bandwidth unit of a report: TB/s for a GPU, GB/s for the host; and GB/s per unit.
fn unit(r: &PerfReport) -> (&'static str, f64) {
    if r.kind == "gpu" {
        ("TB/s", 1e3)
    } else {
        ("GB/s", 1.0)
    }
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map(|x| format!("{x:.digits$}")).unwrap_or_else(|| "-".into())
}

fn mb(bytes: usize) -> String {
    format!("{:.2}", bytes as f64 / 1e6)
}

/// The markdown tables: every case, the torch peer, tandem against torch per shape, and the
/// per-node overhead of the large graphs.
pub fn markdown(r: &PerfReport, torch: Option<&TorchReport>) -> String {
    let mut s = String::new();
    let c = &r.ceiling;
    let (un, per) = unit(r);
    let _ = writeln!(s, "# perf-ops on {} ({})\n", r.device, r.description);
    let _ = writeln!(
        s,
        "Ceiling: {}: {:.2} {un} ({:.1} µs).",
        c.what,
        c.gbps / per,
        c.us_median
    );
    if let Some(tc) = torch.and_then(|t| t.copy.as_ref()) {
        let _ = writeln!(
            s,
            "torch copy in the same command: {:.2} {un} ({} MiB read + write).",
            tc.gbps / per,
            tc.bytes >> 21
        );
    }
    let _ = writeln!(
        s,
        "\nBytes = weights with their scales + activations + outputs (MUL_MAT_ID: the experts \
         picked). µs = device time per run, median (events on a GPU). read µs (GPU) = one \
         streaming read of the same bytes from the same copies, timed the same way; of read = \
         read µs / µs. Back to back (GPU) = per node, when one graph holds the copies' nodes in \
         turn (b2b nodes of them: the copies repeated where the bytes read between two reads of \
         one copy span 512 MiB), as a decode step's layers run; b2b read µs = the read probe \
         over the same copies in the same order.\n"
    );
    let _ = writeln!(
        s,
        "| case | µs | µs min | wall µs | MB | {un} | of ceiling | read µs | of read | back to back µs | {un} back to back | b2b read µs | TFLOP/s | copies | b2b nodes | working set MB |"
    );
    let _ = writeln!(
        s,
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for k in &r.cases {
        if let Some(e) = &k.error {
            let _ = writeln!(
                s,
                "| {} | FAIL: {} | | | | | | | | | | | | | | |",
                k.name,
                e.replace('|', "/")
            );
            continue;
        }
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            k.name,
            opt(k.us_median, 1),
            opt(k.us_min, 1),
            opt(k.wall_us_median, 1),
            mb(k.bytes),
            opt(k.gbps.map(|g| g / per), 3),
            opt(k.ratio_to_ceiling.map(|x| x * 100.0), 1) + "%",
            opt(k.read_us_median, 1),
            k.ratio_to_read
                .map(|x| format!("{:.0}%", x * 100.0))
                .unwrap_or_else(|| "-".into()),
            opt(k.chain_us_median, 1),
            opt(k.chain_gbps.map(|g| g / per), 3),
            opt(k.chain_read_us_median, 1),
            opt(k.tflops, 2),
            k.copies,
            if k.chain_nodes > 0 {
                k.chain_nodes.to_string()
            } else {
                "-".into()
            },
            mb(k.working_set_bytes)
        );
    }
    if let Some(t) = torch {
        let _ = writeln!(s, "\n## torch peer (torch {}, {})\n", t.torch, t.device);
        let _ = writeln!(s, "| case | µs | µs min | MB | {un} | of ceiling | TFLOP/s |");
        let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|");
        for k in &t.cases {
            let _ = writeln!(
                s,
                "| {} | {:.1} | {:.1} | {} | {:.3} | {:.1}% | {:.2} |",
                k.name,
                k.us_median,
                k.us_min,
                mb(k.bytes),
                k.gbps / per,
                k.gbps / c.gbps * 100.0,
                k.tflops
            );
        }
        let pairs = pairs(r, t);
        if !pairs.is_empty() {
            let _ = writeln!(s, "\n## tandem against torch (same shape)\n");
            let _ = writeln!(
                s,
                "| tandem case | torch case | tandem µs | torch µs | torch µs / tandem µs | tandem back to back µs | torch back to back µs | ratio |"
            );
            let _ = writeln!(s, "|---|---|---:|---:|---:|---:|---:|---:|");
            for (k, p) in pairs {
                let us = k.us_median.unwrap_or(f64::NAN);
                let (kb, pb) = (k.chain_us_median, p.chain_us_median);
                let ratio = kb.zip(pb).map(|(a, b)| b / a);
                let _ = writeln!(
                    s,
                    "| {} | {} | {:.1} | {:.1} | {:.2} | {} | {} | {} |",
                    k.name,
                    p.name,
                    us,
                    p.us_median,
                    p.us_median / us,
                    opt(kb, 1),
                    opt(pb, 1),
                    opt(ratio, 2)
                );
            }
        }
    }
    let big: Vec<&CaseResult> = r
        .cases
        .iter()
        .filter(|k| k.graph.as_ref().is_some_and(|g| g.nodes >= 64))
        .collect();
    if !big.is_empty() {
        let _ = writeln!(s, "\n## Per-node overhead\n");
        let _ = writeln!(
            s,
            "| case | nodes | GPU dispatches | CPU nodes | wall µs/node | launch µs/node | device µs/node |"
        );
        let _ = writeln!(s, "|---|---:|---:|---:|---:|---:|---:|");
        for k in big {
            let g = k.graph.as_ref().expect("filtered above");
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {:.2} | {:.2} | {:.2} |",
                k.name,
                g.nodes,
                g.gpu_dispatches,
                g.cpu_fallback_nodes,
                g.wall_us_per_node,
                g.launch_us_per_node,
                g.device_us_per_node
            );
        }
    }
    s
}

/// tandem MUL_MAT cases with a torch case of the same shape (torch's f16 against tandem's f16).
fn pairs<'a>(r: &'a PerfReport, t: &'a TorchReport) -> Vec<(&'a CaseResult, &'a TorchCase)> {
    let mut out = Vec::new();
    for k in r.cases.iter().filter(|k| k.error.is_none()) {
        let Some(sh) = mat_shape(&k.name) else { continue };
        if let Some(p) = t
            .cases
            .iter()
            .find(|p| p.dtype == sh.ty && p.m == sh.m && p.k == sh.k && p.n == sh.n)
        {
            out.push((k, p));
        }
    }
    out
}

/// One bar of the chart.
struct Bar {
    label: String,
    value: f64,
    peer: bool,
    /// The rate of one plain read of the same bytes (perf-ops' read probe), same unit.
    floor: Option<f64>,
}

/// Escapes text for SVG.
pub(crate) fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// A bar chart (hand-written SVG): achieved TB/s of every GEMV case (MUL_MAT with n=1), torch.mv
/// beside them, the copy rate as a dashed line, and over each tandem bar a tick at the rate of one
/// plain read of the same bytes (GPU records).
pub fn chart(r: &PerfReport, torch: Option<&TorchReport>) -> String {
    let (un, per) = unit(r);
    let mut bars: Vec<Bar> = Vec::new();
    for k in &r.cases {
        let (Some(sh), Some(g)) = (mat_shape(&k.name), k.gbps) else {
            continue;
        };
        if sh.n == 1 && k.error.is_none() {
            let floor = k
                .read_us_median
                .filter(|&us| us > 0.0)
                .map(|us| k.bytes as f64 / (us * 1e-6) / 1e9 / per);
            bars.push(Bar {
                label: format!("{} {}x{}", sh.ty, sh.m, sh.k),
                value: g / per,
                peer: false,
                floor,
            });
        }
    }
    for p in torch.map(|t| t.cases.as_slice()).unwrap_or(&[]) {
        if p.n == 1 {
            bars.push(Bar {
                label: format!("torch.mv {} {}x{}", p.dtype, p.m, p.k),
                value: p.gbps / per,
                peer: true,
                floor: None,
            });
        }
    }
    let ceiling = r.ceiling.gbps / per;
    let top = bars
        .iter()
        .flat_map(|b| [b.value, b.floor.unwrap_or(0.0)])
        .fold(ceiling, f64::max)
        * 1.1;
    let step = nice_step(top / 6.0);
    let top = (top / step).ceil() * step;
    let (left, right, up, down) = (70.0, 20.0, 50.0, 150.0);
    let slot = 56.0;
    let plot_w = slot * bars.len().max(1) as f64;
    let plot_h = 320.0;
    let (w, h) = (left + plot_w + right, up + plot_h + down);
    let y = |v: f64| up + plot_h * (1.0 - v / top);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w:.0}" height="{h:.0}" viewBox="0 0 {w:.0} {h:.0}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{left}" y="20" font-size="14">GEMV (n=1) achieved bandwidth on {} ({})</text>"#,
        esc(&r.device),
        esc(r.description.split(" (").next().unwrap_or(""))
    );
    let _ = writeln!(
        s,
        r##"<text x="{left}" y="36" fill="#555">bytes = weights incl. scales + activations + output; median device time</text>"##
    );
    let mut v = 0.0;
    while v <= top + 1e-9 {
        let yy = y(v);
        let _ = writeln!(
            s,
            r##"<line x1="{left}" x2="{:.1}" y1="{yy:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{v:.1}</text>"##,
            left + plot_w,
            left - 6.0,
            yy + 4.0
        );
        v += step;
    }
    let _ = writeln!(
        s,
        r#"<text transform="translate(18,{:.1}) rotate(-90)" text-anchor="middle">{un}</text>"#,
        up + plot_h / 2.0
    );
    for (i, b) in bars.iter().enumerate() {
        let x = left + slot * i as f64 + 8.0;
        let bw = slot - 16.0;
        let color = if b.peer { "#e07b39" } else { "#3a6fb0" };
        let _ = writeln!(
            s,
            r#"<rect x="{x:.1}" y="{:.1}" width="{bw:.1}" height="{:.1}" fill="{color}"/>"#,
            y(b.value),
            plot_h * b.value / top
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{:.2}</text>"#,
            x + bw / 2.0,
            y(b.value) - 4.0,
            b.value
        );
        if let Some(f) = b.floor {
            let _ = writeln!(
                s,
                r##"<line x1="{:.1}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="#111" stroke-width="2.5"/>"##,
                x - 3.0,
                x + bw + 3.0,
                y(f),
                y(f)
            );
        }
        let lx = x + bw / 2.0;
        let ly = up + plot_h + 12.0;
        let _ = writeln!(
            s,
            r#"<text transform="translate({lx:.1},{ly:.1}) rotate(-40)" text-anchor="end">{}</text>"#,
            esc(&b.label)
        );
    }
    let cy = y(ceiling);
    let _ = writeln!(
        s,
        r##"<line x1="{left}" x2="{:.1}" y1="{cy:.1}" y2="{cy:.1}" stroke="#c03030" stroke-dasharray="6 4" stroke-width="1.5"/>"##,
        left + plot_w
    );
    let _ = writeln!(
        s,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="end" fill="#c03030">{} {ceiling:.2} {un}</text>"##,
        left + plot_w - 4.0,
        cy - 5.0,
        if r.kind == "gpu" { "copy rate" } else { "stream read" }
    );
    let _ = writeln!(
        s,
        r##"<line x1="{left}" x2="{left}" y1="{up}" y2="{:.1}" stroke="#333"/><line x1="{left}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="#333"/>"##,
        up + plot_h,
        left + plot_w,
        up + plot_h,
        up + plot_h
    );
    let ly = h - 14.0;
    let _ = writeln!(
        s,
        r##"<rect x="{left}" y="{:.1}" width="10" height="10" fill="#3a6fb0"/><text x="{:.1}" y="{ly:.1}">tandem</text>"##,
        ly - 9.0,
        left + 14.0
    );
    if bars.iter().any(|b| b.peer) {
        let _ = writeln!(
            s,
            r##"<rect x="{:.1}" y="{:.1}" width="10" height="10" fill="#e07b39"/><text x="{:.1}" y="{ly:.1}">torch.mv (cuBLAS)</text>"##,
            left + 80.0,
            ly - 9.0,
            left + 94.0
        );
    }
    if bars.iter().any(|b| b.floor.is_some()) {
        let _ = writeln!(
            s,
            r##"<line x1="{:.1}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="#111" stroke-width="2.5"/><text x="{:.1}" y="{ly:.1}">a plain read of the same bytes</text>"##,
            left + 220.0,
            left + 236.0,
            ly - 4.0,
            ly - 4.0,
            left + 242.0
        );
    }
    s.push_str("</svg>\n");
    s
}

/// 1, 2 or 5 times a power of ten, at least `raw`.
pub(crate) fn nice_step(raw: f64) -> f64 {
    if !raw.is_finite() || raw <= 0.0 {
        return 1.0;
    }
    let p = 10f64.powf(raw.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if m * p >= raw {
            return m * p;
        }
    }
    10.0 * p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::perf::{Ceiling, GraphSummary};

    fn sample() -> PerfReport {
        let case = |name: &str, us: f64, gbps: f64| CaseResult {
            name: name.into(),
            op: "MUL_MAT".into(),
            us_median: Some(us),
            us_min: Some(us),
            wall_us_median: Some(us + 5.0),
            gbps: Some(gbps),
            ratio_to_ceiling: Some(gbps / 4000.0),
            bytes: 1_000_000,
            ..Default::default()
        };
        let mut chain = case("DECODE_CHAIN(layers=64,nodes=512,ne=4096x1)", 900.0, 10.0);
        chain.graph = Some(GraphSummary {
            nodes: 512,
            gpu_dispatches: 384,
            wall_us_per_node: 2.0,
            ..Default::default()
        });
        PerfReport {
            device: "TANDEM0".into(),
            description: "NVIDIA H200 (sm_90, 132 CUs, 143000 MiB)".into(),
            kind: "gpu".into(),
            cpu_features: vec![],
            ceiling: Ceiling {
                what: "copy".into(),
                bytes: 2 << 30,
                us_median: 500.0,
                gbps: 4000.0,
            },
            cases: vec![
                CaseResult {
                    chain_us_median: Some(32.0),
                    chain_gbps: Some(3600.0),
                    chain_read_us_median: Some(30.5),
                    ..case("MUL_MAT(type=f16,m=14336,k=4096,n=1)", 40.0, 2950.0)
                },
                case("MUL_MAT(type=q4_0,m=14336,k=4096,n=1)", 12.0, 2750.0),
                case("MUL_MAT(type=f16,m=14336,k=4096,n=512)", 300.0, 500.0),
                chain,
            ],
        }
    }

    fn torch() -> TorchReport {
        TorchReport {
            torch: "2.11".into(),
            device: "NVIDIA H200".into(),
            copy: Some(TorchCopy {
                bytes: 2 << 30,
                us_median: 520.0,
                gbps: 3900.0,
            }),
            cases: vec![TorchCase {
                name: "torch.mv(f16,m=14336,k=4096)".into(),
                dtype: "f16".into(),
                m: 14336,
                k: 4096,
                n: 1,
                us_median: 36.0,
                bytes: 117_000_000,
                gbps: 3250.0,
                chain_us_median: Some(34.0),
                ..Default::default()
            }],
        }
    }

    #[test]
    fn names_parse_into_shapes() {
        assert_eq!(
            mat_shape("MUL_MAT(type=q4_K,m=14336,k=4096,n=8)"),
            Some(MatShape {
                ty: "q4_K".into(),
                m: 14336,
                k: 4096,
                n: 8
            })
        );
        assert_eq!(
            mat_shape("MUL_MAT_ID(type=q4_0,m=768,k=2048,experts=128,used=8,tokens=1)"),
            None
        );
    }

    #[test]
    fn markdown_has_every_case_the_pairing_and_the_overhead() {
        let md = markdown(&sample(), Some(&torch()));
        assert!(md.contains("| MUL_MAT(type=q4_0,m=14336,k=4096,n=1) | 12.0 |"), "{md}");
        assert!(md.contains("4.00 TB/s"), "{md}");
        assert!(md.contains("| torch.mv(f16,m=14336,k=4096) | 36.0 |"), "{md}");
        // 36 / 40 = 0.90 one at a time, 34 / 32 = 1.06 back to back: the f16 GEMV pairs with
        // torch.mv, nothing else does.
        assert!(
            md.contains(
                "| MUL_MAT(type=f16,m=14336,k=4096,n=1) | torch.mv(f16,m=14336,k=4096) | 40.0 | 36.0 | 0.90 | 32.0 | 34.0 | 1.06 |"
            ),
            "{md}"
        );
        assert!(md.contains("| 32.0 | 3.600 | 30.5 |"), "{md}");
        assert_eq!(md.matches("| torch.mv(f16,m=14336,k=4096) |").count(), 2, "{md}");
        assert!(
            md.contains("| DECODE_CHAIN(layers=64,nodes=512,ne=4096x1) | 512 | 384 | 0 | 2.00 |"),
            "{md}"
        );
    }

    #[test]
    fn chart_has_a_bar_per_gemv_and_the_copy_line() {
        let svg = chart(&sample(), Some(&torch()));
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        // Two tandem GEMVs + torch.mv + two legend squares + the background.
        assert_eq!(svg.matches("<rect").count(), 6, "{svg}");
        // No read floors in the sample: no ticks, no legend entry.
        assert!(!svg.contains("plain read"));
        let mut with_floor = sample();
        // 1 MB read in 0.4 us: 2.5 TB/s, drawn as one tick (and its legend line).
        with_floor.cases[1].read_us_median = Some(0.4);
        let floored = chart(&with_floor, None);
        assert!(floored.contains("a plain read of the same bytes"));
        assert_eq!(floored.matches(r##"stroke="#111""##).count(), 2, "{floored}");
        assert!(svg.contains("q4_0 14336x4096"));
        assert!(!svg.contains("n=512") && !svg.contains("DECODE"));
        assert!(svg.contains("copy rate 4.00 TB/s"));
        assert!(svg.contains("torch.mv f16 14336x4096"));
    }

    #[test]
    fn steps_are_round() {
        assert_eq!(nice_step(0.7), 1.0);
        assert_eq!(nice_step(0.13), 0.2);
        assert_eq!(nice_step(3.0), 5.0);
        assert_eq!(nice_step(0.0), 1.0);
    }
}
