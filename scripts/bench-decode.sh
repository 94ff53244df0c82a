#!/usr/bin/env bash
# Builds and runs the decode benchmark: tiny models through the real libllama on ggml's CPU
# backend and on tandem's TANDEM_HOST device, plus the split of TANDEM_HOST's per-graph time.
#
# Same build as scripts/bench-cpu-matmul.sh (release, ggml's CPU backend built with the
# AVX2/FMA/F16C/BMI2 options named explicitly, in a target dir of its own): keep the GGML_*
# variables identical across both scripts or ggml rebuilds.
#
# usage: scripts/bench-decode.sh [--threads N] [--runs R] [--tokens T]
#                                [--models llama,qwen3moe,llama-large] [--types f16,q8_0,q4_0]
#                                [--attention flash|split] [--json]
#
# Each side runs in processes of its own (the ggml side's never loads the plugin); see the
# binary's doc comment (tests/src/bin/decode_bench.rs). Set BENCH_TARGET_DIR to reuse a build.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${BENCH_TARGET_DIR:-$PWD/target/bench-native}"
export GGML_NATIVE=ON GGML_AVX=ON GGML_AVX2=ON GGML_FMA=ON GGML_F16C=ON GGML_BMI2=ON
# The plugin cdylib is built as a dependency of the tests crate and found beside the binary.
cargo build --release -p tandem-tests --bin decode_bench >&2
lib_dir="$(dirname "$(find "$CARGO_TARGET_DIR/release/build" -path '*llama-cpp-sys-2-*/out/*' -name 'libggml-cpu.so' | head -n1)")"
export LD_LIBRARY_PATH="$lib_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
exec "$CARGO_TARGET_DIR/release/decode_bench" "$@"
