#!/usr/bin/env bash
# The full check of tandem: formatting, lints, the kernel compile check, every test (the
# integration tests build the real ggml from llama-cpp-sys-2) and the op harness on the best
# device. Exits non-zero on the first failure.
#
# What it may install or download, said again before it starts:
#   apt (root or sudo), only what is missing: cmake, build-essential (a C/C++ compiler),
#     libclang-dev (bindgen loads libclang for the ggml bindings), python3-pip (for the wheels);
#   the kernel check (scripts/check-kernels.sh): the PyPI wheels nvidia-cuda-nvrtc (58 MB) and
#     nvidia-cuda-nvdisasm into target/kernel-check/, and with apt clang-19 lld-19
#     libamdhip64-dev rocm-device-libs (about 230 MB of Debian packages) for the AMD half.
# TANDEM_SKIP_AMD_CHECK=1 skips the AMD half of the kernel check (no clang-19/ROCm packages, about
# ten minutes less on two cores); CI runs the full check.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

# Whether a libclang that bindgen (clang-sys) would load is present: a file named libclang.so,
# libclang-<n>.so, libclang.so.<n>[...] or libclang-<n>.so.<n>, in LIBCLANG_PATH when that is
# set, else in the LLVM and system library folders. libclang-cpp.so.<n> is another library and
# does not count.
libclang_found() {
    local re='^libclang(-[0-9.]+)?\.so(\.[0-9]+)*$'
    local dirs=() d f
    if [ -n "${LIBCLANG_PATH:-}" ]; then
        if [ -f "$LIBCLANG_PATH" ]; then
            [[ "$(basename "$LIBCLANG_PATH")" =~ $re ]]
            return
        fi
        dirs=("$LIBCLANG_PATH")
    else
        if command -v llvm-config >/dev/null 2>&1; then
            dirs+=("$(llvm-config --libdir 2>/dev/null || true)")
        fi
        dirs+=(/usr/lib/llvm-*/lib /usr/local/lib /usr/lib /usr/lib64 /usr/lib/*-linux-gnu)
    fi
    for d in "${dirs[@]}"; do
        for f in "$d"/libclang*.so*; do
            [ -e "$f" ] && [[ "$(basename "$f")" =~ $re ]] && return 0
        done
    done
    return 1
}

# System packages the ggml build and the kernel check need. Only what is missing is installed,
# so a prepared machine skips apt entirely.
missing=()
command -v cmake >/dev/null 2>&1 || missing+=(cmake)
{ command -v cc >/dev/null 2>&1 && command -v c++ >/dev/null 2>&1; } || missing+=(build-essential)
if ! libclang_found; then
    if [ -n "${LIBCLANG_PATH:-}" ]; then
        echo "test.sh: LIBCLANG_PATH=$LIBCLANG_PATH holds no libclang.so, libclang-<n>.so or" \
            "libclang.so.<n>; point it at the folder of one, or unset it to install libclang-dev" >&2
        exit 1
    fi
    missing+=(libclang-dev)
fi
python3 -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)

skip_amd=0
case "${TANDEM_SKIP_AMD_CHECK:-0}" in
    1 | true | yes | on) skip_amd=1 ;;
    0 | false | no | off | "") ;;
    *)
        echo "test.sh: TANDEM_SKIP_AMD_CHECK=$TANDEM_SKIP_AMD_CHECK is not 0/1/true/false/yes/no/on/off" >&2
        exit 1
        ;;
esac
amd_missing=()
if [ "$skip_amd" = 0 ]; then
    command -v clang++-19 >/dev/null 2>&1 || amd_missing+=(clang-19 lld-19)
    [ -f /usr/include/hip/hip_runtime.h ] || amd_missing+=(libamdhip64-dev)
    compgen -G '/usr/lib/x86_64-linux-gnu/amdgcn/bitcode/ockl.bc' >/dev/null || amd_missing+=(rocm-device-libs)
fi

step "what this run installs or downloads"
if [ "${#missing[@]}" -gt 0 ]; then
    echo "  apt: ${missing[*]} (the ggml build runs CMake, a C/C++ compiler and bindgen's libclang)"
else
    echo "  apt: nothing for the build (cmake, a C/C++ compiler, libclang, pip present)"
fi
nvrtc_stamp=(target/kernel-check/nvrtc-wheel/.installed-*)
if [ -e "${nvrtc_stamp[0]}" ]; then
    echo "  PyPI: nothing (the NVRTC and nvdisasm wheels are in target/kernel-check/)"
else
    echo "  PyPI: nvidia-cuda-nvrtc (58 MB) and nvidia-cuda-nvdisasm into target/kernel-check/" \
        "(the NVIDIA half of the kernel check compiles every kernel with NVRTC, no GPU needed)"
fi
if [ "$skip_amd" = 1 ]; then
    echo "  AMD kernel check skipped (TANDEM_SKIP_AMD_CHECK=1): no clang-19/ROCm packages"
elif [ "${#amd_missing[@]}" -gt 0 ]; then
    echo "  apt: ${amd_missing[*]} (about 230 MB with their dependencies; the AMD half of the" \
        "kernel check compiles every kernel with clang-19; TANDEM_SKIP_AMD_CHECK=1 skips it)"
else
    echo "  apt: nothing for the AMD kernel check (clang-19 and the ROCm headers present)"
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

if [ "$skip_amd" = 1 ]; then
    step "kernel compile check (NVRTC sm_90; AMD skipped: TANDEM_SKIP_AMD_CHECK=1)"
    CHECK_KERNELS_SKIP=amd bash scripts/check-kernels.sh
else
    step "kernel compile check (NVRTC sm_90, clang-19 gfx1100/gfx1151/gfx1201/gfx90a/gfx942)"
    CHECK_KERNELS_INSTALL=1 bash scripts/check-kernels.sh
fi

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
