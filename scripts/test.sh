#!/usr/bin/env bash
# The full check of tandem: formatting, lints, every test (the integration tests build the real
# ggml from llama-cpp-sys-2) and the op harness on the best device. Exits non-zero on the first
# failure.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

# System packages the ggml build needs (cmake, a C/C++ compiler, libclang for bindgen). Only
# what is missing is installed, so a prepared machine skips apt entirely.
missing=()
command -v cmake >/dev/null 2>&1 || missing+=(cmake)
{ command -v cc >/dev/null 2>&1 && command -v c++ >/dev/null 2>&1; } || missing+=(build-essential)
if ! { ldconfig -p 2>/dev/null | grep -q 'libclang[-.0-9]*\.so'; } \
    && ! compgen -G '/usr/lib/llvm-*/lib/libclang*.so*' >/dev/null \
    && [ -z "${LIBCLANG_PATH:-}" ]; then
    missing+=(libclang-dev)
fi
if [ "${#missing[@]}" -gt 0 ]; then
    step "installing ${missing[*]}"
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1; then
            sudo="sudo"
        else
            echo "test.sh: need root (or sudo) to install: ${missing[*]}" >&2
            exit 1
        fi
    fi
    $sudo apt-get update
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
fi

# rustfmt and clippy come with most toolchains; add them where rustup can.
for comp in rustfmt clippy; do
    sub=${comp/rustfmt/fmt}
    if ! cargo "$sub" --version >/dev/null 2>&1 && command -v rustup >/dev/null 2>&1; then
        rustup component add "$comp"
    fi
done

step "cargo fmt --all -- --check"
cargo fmt --all -- --check

# clippy gets a target dir of its own: under clippy's wrapper llama-cpp-sys-2's build script
# runs under a different hash, and a second run in the same target dir fails on the library
# links the first one left ("File exists").
step "cargo clippy --workspace --all-targets -- -D warnings"
cargo clippy --workspace --all-targets --target-dir target/clippy -- -D warnings

step "kernel compile check (NVRTC sm_90, clang-19 gfx1100/gfx1151/gfx1201/gfx90a/gfx942)"
CHECK_KERNELS_INSTALL=1 bash scripts/check-kernels.sh

step "cargo test --workspace"
cargo test --workspace

# cargo test hides a passing test's output; the GPU-only tests run again here, uncaptured, so
# each prints that it ran or why it skipped (no GPU on this machine). Same feature set as the
# step above, so nothing is rebuilt.
step "GPU-only tests (each prints SKIP and the reason without a GPU)"
cargo test -q --workspace -- --nocapture --exact gpu_smoke \
    gpu::ops::binary::gpu_tests::elementwise_and_rope_kernels_match_the_reference_on_gpu \
    bad_expert_ids_give_nan_slots_on_the_gpu repeated_graphs_replay_and_match_the_host \
    tiny_models_on_tandem_gpu_match_cpu 2>&1 | grep -E "^SKIP|^test result: .* [1-9][0-9]* passed"

step "tandem test-ops (release)"
cargo run --release -p tandem-tools --bin tandem -- test-ops

step "all checks passed"
