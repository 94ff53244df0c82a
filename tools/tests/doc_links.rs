//! Every relative link of the user docs (README, docs/, bench/records/) points at a file that
//! exists: records and raw outputs moved once (docs/bench → bench/raw), and a moved file must
//! not leave a dead link behind.

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn markdown_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    v.sort();
    v
}

/// The targets of `[text](target)` links, without `#anchor`, leaving out web links.
fn relative_links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        let Some(end) = rest.find(')') else { break };
        let target = rest[..end].split('#').next().unwrap_or("").trim();
        if !target.is_empty() && !target.contains("://") && !target.starts_with("mailto:") {
            out.push(target.to_string());
        }
        rest = &rest[end..];
    }
    out
}

#[test]
fn link_parsing_keeps_files_and_drops_anchors_and_urls() {
    let links = relative_links("[a](x.md#top) [b](https://e.org) [c](../raw/y.json) [d](#here)");
    assert_eq!(links, ["x.md", "../raw/y.json"]);
}

#[test]
fn every_relative_link_resolves() {
    let root = repo();
    let mut files = vec![root.join("README.md")];
    files.extend(markdown_in(&root.join("docs")));
    files.extend(markdown_in(&root.join("bench/records")));
    let mut dead = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let dir = f.parent().unwrap();
        for link in relative_links(&text) {
            if !dir.join(&link).exists() {
                dead.push(format!("{}: {link}", f.strip_prefix(&root).unwrap_or(f).display()));
            }
        }
    }
    assert!(files.len() > 30, "only {} markdown files found", files.len());
    assert!(dead.is_empty(), "dead links:\n{}", dead.join("\n"));
}

#[test]
fn docs_hold_no_raw_benchmark_outputs() {
    let stray: Vec<_> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir() || p.extension().is_some_and(|x| x != "md"))
        .collect();
    assert!(stray.is_empty(), "docs/ should hold only the markdown pages: {stray:?}");
}
