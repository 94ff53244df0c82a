#!/usr/bin/env bash
# Compile check of every HIP kernel without a GPU; exits non-zero on any compile failure.
#   NVIDIA sm_90: NVRTC from the PyPI wheel `nvidia-cuda-nvrtc`, loaded through tandem's own
#     runtime layer with the same header and options the JIT uses (the `catalog_compiles_with_nvrtc`
#     test of tandem-backend) and the gemv family as TANDEM_WEIGHTS_EVICT_FIRST=1 builds it; then the SASS of the kernels that load weights ahead of their wait
#     for the kernel ahead, through nvdisasm from the wheel `nvidia-cuda-nvdisasm`
#     (`dependent_kernels_load_before_their_wait`).
#   AMD gfx1100, gfx1151, gfx1201, gfx90a, gfx942: Debian's clang-19 HIP support, one object per kernel source
#     (and per family built with options of its own) and arch.
# Environment: CHECK_KERNELS_INSTALL=1 installs the Debian packages if missing (needs root);
# CHECK_KERNELS_SKIP=nvidia|amd skips one half with a printed reason; AMD_ARCHS / NVIDIA_ARCH
# override the targets; NVRTC_WHEEL and NVDISASM_WHEEL pin the wheels (cached under
# target/kernel-check/).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
work="$root/target/kernel-check"
src="$root/kernels-hip/src"
amd_archs="${AMD_ARCHS:-gfx1100 gfx1151 gfx1201 gfx90a gfx942}"
nvidia_arch="${NVIDIA_ARCH:-sm_90}"
nvrtc_wheel="${NVRTC_WHEEL:-nvidia-cuda-nvrtc==13.5.37}"
nvdisasm_wheel="${NVDISASM_WHEEL:-nvidia-cuda-nvdisasm==13.5.37}"
skip="${CHECK_KERNELS_SKIP:-}"
mkdir -p "$work"
failures=0

# ---------------------------------------------------------------- NVIDIA through NVRTC
# wheel_file WHEEL FOLDER FIND-ARGS...: installs the pinned PyPI wheel into $work/FOLDER once
# (a stamp names the wheel) and prints the first file `find` matches there; fails, saying which,
# if either step does.
wheel_file() {
    local wheel="$1" site="$work/$2"
    shift 2
    if [[ ! -f "$site/.installed-$wheel" ]]; then
        echo "check-kernels: nvidia: downloading $wheel from PyPI into $site" >&2
        rm -rf "$site"
        if ! python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps --target "$site" \
            "$wheel"; then
            echo "check-kernels: FAIL nvidia: could not install $wheel" >&2
            return 1
        fi
        touch "$site/.installed-$wheel"
    fi
    local file
    file="$(find "$site" "$@" | sort | head -n1)"
    if [[ -z "$file" ]]; then
        echo "check-kernels: FAIL nvidia: $* found nothing inside $wheel" >&2
        return 1
    fi
    echo "$file"
}

check_nvidia() {
    local lib
    lib="$(wheel_file "$nvrtc_wheel" nvrtc-wheel -name 'libnvrtc.so.*' ! -name '*builtins*')" || return 1
    echo "check-kernels: nvidia $nvidia_arch with $lib (builds tandem-backend's tests first)"
    # One check test by name; TANDEM_REQUIRE_NVRTC turns its "NVRTC not found" skip into a
    # failure; VAR=value arguments go to its environment.
    nvrtc_test() {
        local name=$1
        shift
        (cd "$root" && env TANDEM_NVRTC="$lib" TANDEM_REQUIRE_NVRTC=1 TANDEM_CHECK_NVIDIA_ARCH="$nvidia_arch" "$@" \
            cargo test --quiet -p tandem-backend --lib "gpu::check::tests::$name" -- --exact --nocapture)
    }
    nvrtc_test catalog_compiles_with_nvrtc || return 1
    # The gemv family as TANDEM_WEIGHTS_EVICT_FIRST=1 builds it.
    nvrtc_test gemv_compiles_with_weights_evict_first || return 1
    # Each unit of the families the runtime compiles in units, and the runtime's build of one.
    nvrtc_test kernel_units_compile_with_nvrtc || return 1
    nvrtc_test kernel_units_build_and_cache_apart || return 1
    # The SASS of the kernels that prefetch weights ahead of their wait for the kernel ahead:
    # nvdisasm from its PyPI wheel, required here.
    local dis
    dis="$(wheel_file "$nvdisasm_wheel" nvdisasm-wheel -name nvdisasm -type f)" || return 1
    nvrtc_test dependent_kernels_load_before_their_wait TANDEM_NVDISASM="$dis" TANDEM_REQUIRE_NVDISASM=1
}

# ---------------------------------------------------------------- AMD through clang-19
ensure_clang() {
    if command -v clang++-19 >/dev/null && [[ -f /usr/include/hip/hip_runtime.h ]] &&
        ls /usr/lib/x86_64-linux-gnu/amdgcn/bitcode/ockl.bc >/dev/null 2>&1; then
        return 0
    fi
    if [[ "${CHECK_KERNELS_INSTALL:-0}" == 1 ]]; then
        local sudo=""
        if [[ "$(id -u)" -ne 0 ]] && command -v sudo >/dev/null; then
            sudo=sudo
        fi
        echo "check-kernels: amd: installing clang-19 lld-19 libamdhip64-dev rocm-device-libs" \
            "(about 230 MB with their dependencies)"
        $sudo apt-get update -qq
        $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            clang-19 lld-19 libamdhip64-dev rocm-device-libs >/dev/null
        return 0
    fi
    return 1
}

# Debian's rocm-device-libs predate some chips: its bitcode folder lacks their ISA-version file.
# Each one is a single constant; build it with the same clang into a folder that links the rest.
device_lib_dir() {
    local dir="$work/amd-device-libs"
    local bitcode=/usr/lib/x86_64-linux-gnu/amdgcn/bitcode
    mkdir -p "$dir"
    for f in "$bitcode"/*.bc; do
        ln -sf "$f" "$dir/$(basename "$f")"
    done
    for arch in $amd_archs; do
        local n="${arch#gfx}"
        local out="$dir/oclc_isa_version_$n.bc"
        [[ -e "$out" ]] && continue
        printf '%s\n' 'target triple = "amdgcn-amd-amdhsa"' \
            "@__oclc_ISA_version = linkonce_odr protected local_unnamed_addr addrspace(4) constant i32 ${n}0, align 4" \
            >"$dir/isa_$n.ll"
        clang-19 -target amdgcn-amd-amdhsa -nogpulib -c -emit-llvm "$dir/isa_$n.ll" -o "$out"
    done
    echo "$dir"
}

check_amd() {
    if ! ensure_clang; then
        echo "check-kernels: SKIP amd: clang-19 HIP support missing (apt-get install -y" \
            "--no-install-recommends clang-19 lld-19 libamdhip64-dev rocm-device-libs," \
            "or CHECK_KERNELS_INSTALL=1)"
        return 2
    fi
    local libs
    libs="$(device_lib_dir)"
    local bad=0
    # Each source once, plus the families built from a source with options of their own
    # (kernels-hip/src/fam: "wmma" is mma.hip with its WMMA entries).
    local units=()
    for k in "$src"/*.hip; do
        units+=("$(basename "$k" .hip)|$k|")
    done
    units+=("mma-wmma|$src/mma.hip|-DTANDEM_WMMA_ENTRIES")
    # shellcheck disable=SC2206 # the arch list is split on spaces on purpose
    local archs=($amd_archs)
    local total=$((${#archs[@]} * ${#units[@]})) n_done=0 t0=$SECONDS
    echo "check-kernels: amd: $total compiles (${#units[@]} units × ${#archs[@]} archs), about 0.5 s to a few s each"
    for arch in $amd_archs; do
        for unit in "${units[@]}"; do
            local name k opts
            IFS='|' read -r name k opts <<<"$unit"
            n_done=$((n_done + 1))
            # shellcheck disable=SC2086 # opts holds whole compiler options
            if clang++-19 -x hip -std=c++17 -O3 -Werror --offload-arch="$arch" --cuda-device-only \
                --no-gpu-bundle-output --rocm-path=/usr --rocm-device-lib-path="$libs" -I "$src" $opts \
                -c "$k" -o "$work/$name.$arch.o" 2>"$work/$name.$arch.log"; then
                echo "check-kernels: [$n_done/$total, $((SECONDS - t0)) s] ok   amd $arch $name"
            else
                echo "check-kernels: [$n_done/$total, $((SECONDS - t0)) s] FAIL amd $arch $name"
                sed 's/^/    /' "$work/$name.$arch.log"
                bad=1
            fi
        done
    done
    # The runtime path too: hiprtc through tandem's loader, with the runtime's header and options.
    # Debian's hiprtc (ROCm 5.2) crashes on gfx11, so it checks gfx1030 only.
    echo "check-kernels: amd gfx1030 through hiprtc (every family)"
    if (cd "$root" && TANDEM_CHECK_HIPRTC_ARCH=gfx1030 cargo test --quiet -p tandem-backend --lib \
        gpu::check::tests::catalog_compiles_with_hiprtc_when_asked -- --exact --nocapture \
        >"$work/hiprtc.log" 2>&1); then
        grep '^check-kernels' "$work/hiprtc.log" || true
    else
        echo "check-kernels: FAIL amd gfx1030 via hiprtc"
        sed 's/^/    /' "$work/hiprtc.log"
        bad=1
    fi
    return $bad
}

if [[ "$skip" == nvidia ]]; then
    echo "check-kernels: SKIP nvidia (CHECK_KERNELS_SKIP=nvidia)"
elif ! check_nvidia; then
    failures=$((failures + 1))
fi

if [[ "$skip" == amd ]]; then
    echo "check-kernels: SKIP amd (CHECK_KERNELS_SKIP=amd; scripts/test.sh sets it for TANDEM_SKIP_AMD_CHECK=1)"
else
    rc=0
    check_amd || rc=$?
    if [[ $rc == 1 ]]; then
        failures=$((failures + 1))
    fi
fi

if [[ $failures != 0 ]]; then
    echo "check-kernels: FAILED ($failures part(s))"
    exit 1
fi
echo "check-kernels: all kernels compile"
