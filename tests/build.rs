//! Compiles `c/layout.c` against the ggml headers shipped in the `llama-cpp-sys-2` crate source
//! (the same ggml the tests link), so `tests/layout.rs` can compare tandem's `#[repr(C)]`
//! mirrors with the C compiler's layout. `TANDEM_GGML_SRC=<.../llama.cpp/ggml>` overrides the
//! search. Without headers the layout test fails and says why; the other tests still build.

use std::path::{Path, PathBuf};

/// The `llama-cpp-sys-2` version the workspace pins (root Cargo.toml); docs/abi.md lists this
/// among the things to update with ggml.
const LLAMA_SYS_VERSION: &str = "0.1.161";

fn ggml_dir() -> Option<PathBuf> {
    println!("cargo:rerun-if-env-changed=TANDEM_GGML_SRC");
    if let Ok(p) = std::env::var("TANDEM_GGML_SRC") {
        return Some(PathBuf::from(p));
    }
    let crate_dir = format!("llama-cpp-sys-2-{LLAMA_SYS_VERSION}");
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").ok()?);
    let mut roots = vec![manifest.join("../vendor").join(&crate_dir)];
    let cargo_home = std::env::var("CARGO_HOME")
        .map(PathBuf::from)
        .ok()
        .or_else(|| std::env::var("HOME").ok().map(|h| Path::new(&h).join(".cargo")));
    if let Some(home) = cargo_home {
        if let Ok(entries) = std::fs::read_dir(home.join("registry/src")) {
            for e in entries.flatten() {
                roots.push(e.path().join(&crate_dir));
            }
        }
    }
    roots
        .into_iter()
        .map(|r| r.join("llama.cpp/ggml"))
        .find(|g| g.join("src/ggml-backend-impl.h").is_file())
}

fn main() {
    println!("cargo::rustc-check-cfg=cfg(tandem_layout_c)");
    println!("cargo:rerun-if-changed=c/layout.c");
    match ggml_dir() {
        Some(dir) => {
            cc::Build::new()
                .file("c/layout.c")
                .include(dir.join("include"))
                .include(dir.join("src"))
                .warnings(true)
                .compile("tandem_layout");
            println!("cargo:rustc-cfg=tandem_layout_c");
            println!("cargo:rustc-env=TANDEM_GGML_HEADERS={}", dir.display());
        }
        None => println!(
            "cargo:warning=ggml headers of llama-cpp-sys-2 {LLAMA_SYS_VERSION} not found; set TANDEM_GGML_SRC \
             (the layout test will fail)"
        ),
    }
}
