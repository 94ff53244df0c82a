#!/usr/bin/env bash
# Builds the ggml plugin in release mode and gives it ggml's file name:
#   target/release/libggml-tandem.so   (cargo names the cdylib libggml_tandem.so)
# Usage: scripts/build-plugin.sh [DEST_DIR]   -- DEST_DIR also receives a copy (e.g. next to
# llama.cpp's binaries, or a directory of your choice for GGML_BACKEND_PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
target_dir="${CARGO_TARGET_DIR:-target}"
cargo build --release -p tandem-capi
out="$target_dir/release/libggml-tandem.so"
cp -f "$target_dir/release/libggml_tandem.so" "$out"
if [ "$#" -ge 1 ]; then
    mkdir -p "$1"
    cp -f "$out" "$1/libggml-tandem.so"
    out="$1/libggml-tandem.so"
fi
echo "$out"
