#!/usr/bin/env bash
# tandem's TANDEM0 against llama.cpp's CUDA backend, same process, same weights and graphs
# (tests/src/bin/backend_matmul_peer.rs says how it measures).
#
# Two steps, because the GPU machine need not have Rust:
#
#   scripts/gpu-peer.sh pack DIR          # here: builds the harness and the plugin (release) and
#                                         # puts them in DIR with ggml's shared libraries and the
#                                         # ggml sources they were built from
#   DIR/gpu-peer.sh run DIR [ARGS...]     # on the GPU machine (cmake, nvcc, a C++ compiler):
#                                         # builds libggml-cuda.so from those sources once (as a
#                                         # llama.cpp user would: release, GGML_NATIVE, dynamic
#                                         # backend; FlashAttention kernels left out, this only
#                                         # runs MUL_MAT), then runs the harness on TANDEM0 and
#                                         # CUDA0; ARGS go to the harness (--filter, --runs, --json)
#   DIR/gpu-peer.sh bench DIR [ARGS...]   # the same with FlashAttention kernels built in (a longer
#                                         # build, kept apart in DIR/cuda-fa), then the model
#                                         # benchmark tests/src/bin/bench_model.rs with both
#                                         # libraries loaded; ARGS go to it (gen ... | run ...)
#
# PEER_TARGET_DIR: the cargo target folder of the pack step (default target/gpu-peer).
# PEER_CUDA_DIR: where the CUDA builds are kept (default DIR; a folder outside DIR survives
# replacing DIR with a newer pack).
# The CUDA library loads into the same ggml (libggml-base) as the plugin, so both backends see
# one ggml, version-matched to the plugin's tests (ggml from llama-cpp-sys-2).
set -euo pipefail

die() { echo "gpu-peer.sh: $*" >&2; exit 1; }

pack() {
    local dir self
    dir="$(mkdir -p "$1" && cd "$1" && pwd)"
    self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
    cd "$(dirname "$self")/.."
    export CARGO_TARGET_DIR="${PEER_TARGET_DIR:-$PWD/target/gpu-peer}"
    # Two builds: with --bin, cargo would leave the plugin's library out (and a stale one in the
    # target folder would be packed).
    cargo build --release -p tandem-tests --bin backend_matmul_peer --bin bench_model >&2
    cargo build --release -p tandem-capi >&2
    local out="$CARGO_TARGET_DIR/release"
    local lib_dir
    lib_dir="$(dirname "$(find "$out/build" -path '*llama-cpp-sys-2-*/out/*' -name 'libggml-base.so.0' | head -n1)")"
    [ -f "$lib_dir/libggml-base.so.0" ] || die "ggml's shared libraries not found under $out/build"
    local src
    src="$(cargo metadata --format-version 1 | python3 -c '
import json, sys
m = json.load(sys.stdin)
print(next(p["manifest_path"] for p in m["packages"] if p["name"] == "llama-cpp-sys-2"))')"
    src="$(dirname "$src")/llama.cpp/ggml"
    [ -f "$src/src/ggml-cuda/ggml-cuda.cu" ] || die "ggml's CUDA sources not found at $src"
    mkdir -p "$dir/lib"
    cp "$out/backend_matmul_peer" "$out/bench_model" "$out/libggml_tandem.so" "$dir/"
    cp "$lib_dir"/libggml-base.so.0 "$lib_dir"/libggml-cpu.so.0 "$lib_dir"/libggml.so.0 "$lib_dir"/libllama.so.0 "$dir/lib/"
    strip "$dir/backend_matmul_peer" "$dir/bench_model" "$dir/libggml_tandem.so"
    strip --strip-debug "$dir"/lib/*.so.0
    # Only what a CUDA build reads: the build files, the headers, ggml-base, ggml-cuda and the
    # ggml-cpu headers ggml-base includes.
    (cd "$src" && tar -czf "$dir/ggml-src.tar.gz" CMakeLists.txt cmake include \
        $(cd src && find . -maxdepth 1 -type f -printf 'src/%P\n') src/ggml-cuda src/ggml-cpu)
    cp "$self" "$dir/gpu-peer.sh"
    echo "gpu-peer.sh: packed $(du -sh "$dir" | cut -f1) into $dir; on the GPU machine run: $dir/gpu-peer.sh run $dir" >&2
}

# build_cuda DIR FA: builds libggml-cuda.so (FlashAttention kernels on when FA is ON) once into
# DIR/cuda (DIR/cuda-fa with them; DIR is PEER_CUDA_DIR where set) and prints its path.
build_cuda() {
    local dir="$1" fa="$2"
    local out_dir="${PEER_CUDA_DIR:-$dir}/cuda"
    [ "$fa" = ON ] && out_dir="${PEER_CUDA_DIR:-$dir}/cuda-fa"
    local cuda="$out_dir/libggml-cuda.so"
    if [ ! -f "$cuda" ]; then
        for tool in cmake nvcc c++; do
            command -v "$tool" >/dev/null || die "$tool is needed to build libggml-cuda.so"
        done
        local b="$out_dir-build"
        rm -rf "$b" && mkdir -p "$b/src/ggml"
        tar -C "$b/src/ggml" -xzf "$dir/ggml-src.tar.gz"
        # ggml as a subproject, as llama.cpp includes it (no standalone tests, examples, .pc).
        printf '%s\n' 'cmake_minimum_required(VERSION 3.18)' 'project(ggml_peer C CXX)' \
            'add_subdirectory(ggml)' >"$b/src/CMakeLists.txt"
        local gen=()
        command -v ninja >/dev/null && gen=(-G Ninja)
        echo "gpu-peer.sh: building libggml-cuda.so (GGML_CUDA_FA=$fa; cmake + nvcc, minutes)" >&2
        local t0=$SECONDS
        cmake -S "$b/src" -B "$b/out" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
            -DGGML_BACKEND_DL=ON -DGGML_CPU=OFF -DGGML_CUDA=ON -DGGML_NATIVE=ON -DGGML_CUDA_FA="$fa" \
            -DGGML_CUDA_NCCL=OFF >"$b/configure.log" 2>&1 || { tail -30 "$b/configure.log" >&2; die "cmake configure failed"; }
        cmake --build "$b/out" --target ggml-cuda -j "$(nproc)" >"$b/build.log" 2>&1 ||
            { tail -30 "$b/build.log" >&2; die "building ggml-cuda failed"; }
        local built
        built="$(find "$b/out" -name 'libggml-cuda.so' | head -n1)"
        [ -n "$built" ] || die "the build made no libggml-cuda.so"
        mkdir -p "$out_dir" && cp "$built" "$cuda"
        echo "gpu-peer.sh: built libggml-cuda.so in $((SECONDS - t0)) s" >&2
    fi
    echo "$cuda"
}

run() {
    local dir cuda
    dir="$(cd "$1" && pwd)"
    shift
    cuda="$(build_cuda "$dir" OFF)"
    # The crate's libggml-base is loaded first, so the CUDA module binds to the same ggml.
    LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        "$dir/backend_matmul_peer" --load "$dir/libggml_tandem.so" --load "$cuda" \
        --devices TANDEM0,CUDA0 "$@"
}

bench() {
    local dir cuda
    dir="$(cd "$1" && pwd)"
    shift
    if [ "${1:-}" = gen ]; then
        LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$dir/bench_model" "$@"
        return
    fi
    cuda="$(build_cuda "$dir" ON)"
    LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
        "$dir/bench_model" "$@" --load "$dir/libggml_tandem.so" --load "$cuda"
}

case "${1:-}" in
    pack) [ $# -eq 2 ] || die "usage: scripts/gpu-peer.sh pack DIR"; pack "$2" ;;
    run) [ $# -ge 2 ] || die "usage: gpu-peer.sh run DIR [harness args]"; run "${@:2}" ;;
    bench) [ $# -ge 3 ] || die "usage: gpu-peer.sh bench DIR gen|run [bench_model args]"; bench "${@:2}" ;;
    cuda) [ $# -eq 3 ] || die "usage: gpu-peer.sh cuda DIR ON|OFF (builds libggml-cuda.so only)"; build_cuda "$2" "$3" ;;
    *) die "usage: scripts/gpu-peer.sh pack DIR | run DIR [harness args] | bench DIR gen|run [args]" ;;
esac
