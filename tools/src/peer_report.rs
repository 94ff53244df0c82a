//! `tandem peer-report`: turns the JSON of `backend_matmul_peer --json` (tandem's device against
//! another ggml backend, e.g. llama.cpp's CUDA, in one process; scripts/gpu-peer.sh) into a
//! markdown table and an SVG chart of each case's time ratio.

use serde::Deserialize;
use std::fmt::Write as _;
use std::path::Path;

/// What `backend_matmul_peer --json` prints.
#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
pub struct PeerReport {
    pub runs: usize,
    pub devices: Vec<String>,
    pub cases: Vec<PeerCase>,
}

#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
pub struct PeerCase {
    pub case: String,
    pub weight_bytes: usize,
    /// Weight bytes one node reads (MUL_MAT_ID: the experts its tokens use).
    pub read_bytes: usize,
    pub copies: usize,
    /// Nodes of each timed graph: the copies in turn, repeated where the cache cannot hold them
    /// (0 in files from before the harness repeated them: one node per copy).
    #[serde(default)]
    pub nodes: usize,
    pub results: Vec<PeerResult>,
}

#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
pub struct PeerResult {
    pub device: String,
    pub us_median: f64,
    pub us_min: f64,
    pub read_gbs: f64,
    /// Against ggml's CPU backend on the same node; null when not finite.
    #[serde(default)]
    pub nmse: Option<f64>,
}

/// Checks that every case has one result per device, in the devices' order, with a positive time.
fn check(r: &PeerReport) -> Result<(), String> {
    if r.devices.len() < 2 {
        return Err(format!(
            "the report compares {} device(s); it needs two or more",
            r.devices.len()
        ));
    }
    if r.cases.is_empty() {
        return Err("the report has no cases".into());
    }
    for c in &r.cases {
        let names: Vec<&str> = c.results.iter().map(|d| d.device.as_str()).collect();
        if names != r.devices.iter().map(String::as_str).collect::<Vec<_>>() {
            return Err(format!("{}: results for {names:?}, devices {:?}", c.case, r.devices));
        }
        if let Some(d) = c.results.iter().find(|d| d.us_median.is_nan() || d.us_median <= 0.0) {
            return Err(format!("{}: {} has time {}", c.case, d.device, d.us_median));
        }
    }
    Ok(())
}

/// Reads the peer JSON and writes the markdown (to `md`, or stdout) and the SVG (when asked).
pub fn peer_report(peer: &Path, md: Option<&Path>, svg: Option<&Path>) -> Result<bool, String> {
    let text = std::fs::read_to_string(peer).map_err(|e| format!("{}: {e}", peer.display()))?;
    let r: PeerReport = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", peer.display()))?;
    check(&r).map_err(|e| format!("{}: {e}", peer.display()))?;
    let table = markdown(&r);
    match md {
        Some(p) => std::fs::write(p, &table).map_err(|e| format!("{}: {e}", p.display()))?,
        None => print!("{table}"),
    }
    if let Some(p) = svg {
        std::fs::write(p, chart(&r)).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    Ok(true)
}

fn nmse(v: Option<f64>) -> String {
    v.map_or("–".into(), |x| format!("{x:.1e}"))
}

/// One row per case: each device's median µs, the others' time over the first's, NMSE against
/// ggml's CPU backend.
pub fn markdown(r: &PeerReport) -> String {
    let first = &r.devices[0];
    let mut s = String::new();
    let _ = writeln!(
        s,
        "µs per node, median of {} graphs, each holding the nodes of the weight copies in turn (the bytes the nodes read span ≥ 512 MiB; nodes (copies): the copies repeated where the bytes read between two reads of one copy span 512 MiB); a ratio above 1 means {first} is faster.\n",
        r.runs
    );
    let mut head = String::from("| case | weights read | nodes (copies) |");
    let mut rule = String::from("|---|---:|---:|");
    for d in &r.devices {
        let _ = write!(head, " {d} µs |");
        rule.push_str("---:|");
    }
    for d in &r.devices[1..] {
        let _ = write!(head, " {d} / {first} |");
        rule.push_str("---:|");
    }
    for d in &r.devices {
        let _ = write!(head, " {d} NMSE |");
        rule.push_str("---:|");
    }
    let _ = writeln!(s, "{head}\n{rule}");
    for c in &r.cases {
        let base = c.results[0].us_median;
        let nodes = if c.nodes > 0 { c.nodes } else { c.copies };
        let mut row = format!(
            "| {} | {:.1} MB | {nodes} ({}) |",
            c.case,
            c.read_bytes as f64 / 1e6,
            c.copies
        );
        for d in &c.results {
            let _ = write!(row, " {:.1} |", d.us_median);
        }
        for d in &c.results[1..] {
            let _ = write!(row, " {:.2} |", d.us_median / base);
        }
        for d in &c.results {
            let _ = write!(row, " {} |", nmse(d.nmse));
        }
        let _ = writeln!(s, "{row}");
    }
    s
}

/// Escapes text for SVG.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// A horizontal bar chart (hand-written SVG): per case, the second device's time over the
/// first's, a line at 1 (as fast), bars past it where the first device is faster.
pub fn chart(r: &PeerReport) -> String {
    let (first, peer) = (&r.devices[0], &r.devices[1]);
    let ratios: Vec<f64> = r
        .cases
        .iter()
        .map(|c| c.results[1].us_median / c.results[0].us_median)
        .collect();
    let top = (ratios.iter().copied().fold(1.0, f64::max) * 1.15 * 4.0).ceil() / 4.0;
    let (left, right, up, down) = (360.0, 40.0, 56.0, 40.0);
    let row = 22.0;
    let plot_w = 420.0;
    let plot_h = row * r.cases.len() as f64;
    let (w, h) = (left + plot_w + right, up + plot_h + down);
    let x = |v: f64| left + plot_w * v / top;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w:.0}" height="{h:.0}" viewBox="0 0 {w:.0} {h:.0}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="10" y="20" font-size="14">{} time / {} time, same process, same graphs</text>"#,
        esc(peer),
        esc(first)
    );
    let _ = writeln!(
        s,
        r##"<text x="10" y="38" fill="#555">right of the line: {} is faster; labels: µs per node, {} vs {} (median of {})</text>"##,
        esc(first),
        esc(first),
        esc(peer),
        r.runs
    );
    let mut v = 0.0;
    while v <= top + 1e-9 {
        let xx = x(v);
        let _ = writeln!(
            s,
            r##"<line x1="{xx:.1}" x2="{xx:.1}" y1="{up}" y2="{:.1}" stroke="#ddd"/><text x="{xx:.1}" y="{:.1}" text-anchor="middle">{v:.2}</text>"##,
            up + plot_h,
            up + plot_h + 14.0
        );
        v += 0.25;
    }
    for (i, (c, ratio)) in r.cases.iter().zip(&ratios).enumerate() {
        let y = up + row * i as f64;
        let color = if *ratio >= 1.0 { "#3a6fb0" } else { "#e07b39" };
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            left - 6.0,
            y + 15.0,
            esc(&c.case)
        );
        let _ = writeln!(
            s,
            r#"<rect x="{left}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{color}"/>"#,
            y + 4.0,
            x(*ratio) - left,
            row - 8.0
        );
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}">{ratio:.2} ({:.1} vs {:.1})</text>"#,
            x(*ratio) + 4.0,
            y + 15.0,
            c.results[0].us_median,
            c.results[1].us_median
        );
    }
    let one = x(1.0);
    let _ = writeln!(
        s,
        r##"<line x1="{one:.1}" x2="{one:.1}" y1="{:.1}" y2="{:.1}" stroke="#111" stroke-width="1.5"/>"##,
        up - 4.0,
        up + plot_h
    );
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> PeerReport {
        let case = |name: &str, a: f64, b: f64| PeerCase {
            case: name.into(),
            weight_bytes: 33_030_144,
            read_bytes: 33_030_144,
            copies: 17,
            nodes: 51,
            results: vec![
                PeerResult {
                    device: "TANDEM0".into(),
                    us_median: a,
                    us_min: a,
                    read_gbs: 1.0,
                    nmse: Some(4.8e-14),
                },
                PeerResult {
                    device: "CUDA0".into(),
                    us_median: b,
                    us_min: b,
                    read_gbs: 1.0,
                    nmse: Some(4.3e-5),
                },
            ],
        };
        PeerReport {
            runs: 15,
            devices: vec!["TANDEM0".into(), "CUDA0".into()],
            cases: vec![
                case("MUL_MAT q4_0 m=14336 k=4096 n=1", 17.0, 18.0),
                case("MUL_MAT q4_0 m=14336 k=4096 n=512", 328.0, 313.0),
            ],
        }
    }

    #[test]
    fn the_tool_output_parses() {
        let json = r#"{"tool":"backend_matmul_peer","runs":15,"devices":["TANDEM0","CUDA0"],"cases":[{"case":"MUL_MAT q4_0 m=14336 k=4096 n=1","weight_bytes":33030144,"read_bytes":33030144,"copies":17,"results":[{"device":"TANDEM0","us_median":17.000,"us_min":16.800,"read_gbs":1943.0,"nmse":4.800e-14},{"device":"CUDA0","us_median":18.000,"us_min":17.900,"read_gbs":1835.0,"nmse":4.300e-5}]}]}"#;
        let r: PeerReport = serde_json::from_str(json).unwrap();
        assert_eq!(r.cases[0].results[1].nmse, Some(4.3e-5));
        // Files from before the graphs repeated the copies have no node count: one per copy.
        assert_eq!(r.cases[0].nodes, 0);
        assert!(markdown(&r).contains("| 33.0 MB | 17 (17) |"));
        assert!(check(&r).is_ok());
    }

    #[test]
    fn markdown_has_each_time_and_ratio() {
        let md = markdown(&sample());
        assert!(
            md.contains("| case | weights read | nodes (copies) | TANDEM0 µs | CUDA0 µs | CUDA0 / TANDEM0 |"),
            "{md}"
        );
        // 18 / 17 = 1.06; 313 / 328 = 0.95.
        assert!(
            md.contains(
                "| MUL_MAT q4_0 m=14336 k=4096 n=1 | 33.0 MB | 51 (17) | 17.0 | 18.0 | 1.06 | 4.8e-14 | 4.3e-5 |"
            ),
            "{md}"
        );
        assert!(md.contains("| 328.0 | 313.0 | 0.95 |"), "{md}");
    }

    #[test]
    fn chart_has_a_bar_per_case_coloured_by_the_winner() {
        let svg = chart(&sample());
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        // The background and one bar per case.
        assert_eq!(svg.matches("<rect").count(), 3, "{svg}");
        assert_eq!(svg.matches("#3a6fb0").count(), 1, "{svg}");
        assert_eq!(svg.matches("#e07b39").count(), 1, "{svg}");
        assert!(svg.contains("1.06 (17.0 vs 18.0)"), "{svg}");
    }

    #[test]
    fn mismatched_or_empty_reports_are_refused() {
        let mut r = sample();
        r.cases[1].results.pop();
        assert!(check(&r).unwrap_err().contains("n=512"));
        let mut r = sample();
        r.cases.clear();
        assert!(check(&r).is_err());
        let mut r = sample();
        r.devices.pop();
        assert!(check(&r).is_err());
        let mut r = sample();
        r.cases[0].results[0].us_median = 0.0;
        assert!(check(&r).is_err());
    }
}
