//! Links the plugin `-z nodelete`: ggml may `dlclose` a backend library while tandem's worker
//! threads (and pointers it handed to ggml) are still alive; keeping the code mapped makes an
//! unload harmless.

fn main() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os == "linux" || os == "android" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
