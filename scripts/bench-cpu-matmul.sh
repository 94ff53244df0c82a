#!/usr/bin/env bash
# Builds and runs the MUL_MAT decode benchmark: tandem's CPU fallback vs ggml's CPU backend.
#
# ggml is built from llama-cpp-sys-2, whose shared CPU backend targets baseline x86-64 unless told
# otherwise; its build script forces GGML_NATIVE=OFF unless rustc itself targets the native CPU,
# so the peer is built with the AVX2/FMA/F16C/BMI2 options named explicitly (cargo forwards GGML_*
# variables to CMake), in a target dir of its own so it never mixes with the baseline build.
# tandem picks its AVX2 kernels at run time either way.
#
# usage: scripts/bench-cpu-matmul.sh [--threads N] [--runs R] [--types f16,q8_0,q4_0,q4_K,q6_K] [--json]
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${BENCH_TARGET_DIR:-$PWD/target/bench-native}"
export GGML_NATIVE=ON GGML_AVX=ON GGML_AVX2=ON GGML_FMA=ON GGML_F16C=ON GGML_BMI2=ON
cargo build --release -p tandem-tests --bin matmul_vs_ggml >&2
lib_dir="$(dirname "$(find "$CARGO_TARGET_DIR/release/build" -path '*llama-cpp-sys-2-*/out/*' -name 'libggml-cpu.so' | head -n1)")"
export LD_LIBRARY_PATH="$lib_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
exec "$CARGO_TARGET_DIR/release/matmul_vs_ggml" "$@"
