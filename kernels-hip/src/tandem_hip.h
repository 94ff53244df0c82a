// Portability header: every tandem kernel is HIP C++ and includes this first. It lets one source
// compile under three compilers:
//   - hiprtc (AMD, at run time): hip_runtime and the fp16 types are pre-included;
//   - clang -x hip (AMD, the CI compile check): the HIP headers are included here;
//   - NVRTC (NVIDIA, at run time and in CI): no headers at all, so this file maps the HIP names
//     kernels use onto CUDA ones and supplies the few types NVRTC lacks without cuda_fp16.h.
// Kernels use warpSize for the wave size (32 on NVIDIA and RDNA, 64 on CDNA) and never assume it.
#pragma once

#if defined(__CUDACC_RTC__)
// ---- NVIDIA through NVRTC ----
#define TANDEM_NVIDIA 1

// IEEE binary16 as its bits; conversions are single PTX instructions (sm_53+), so kernels need
// no cuda_fp16.h and the runtime needs no CUDA include folder.
struct __align__(2) __half {
    unsigned short x;
};
static __device__ __forceinline__ float __half2float(__half h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h.x));
    return f;
}
static __device__ __forceinline__ __half __float2half(float f) {
    __half h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h.x) : "f"(f));
    return h;
}

// NVIDIA waves are 32 lanes on every architecture. As a constant, divisions and remainders by
// warpSize become shifts and masks; NVRTC emits a full integer division for the built-in.
#define warpSize 32

// HIP's shuffles act on the whole wave; CUDA's need the member mask. All lanes take part in every
// tandem shuffle, so the full mask is right.
#define __shfl(v, ...) __shfl_sync(0xffffffffu, (v), __VA_ARGS__)
#define __shfl_xor(v, ...) __shfl_xor_sync(0xffffffffu, (v), __VA_ARGS__)
#define __shfl_down(v, ...) __shfl_down_sync(0xffffffffu, (v), __VA_ARGS__)
#define __shfl_up(v, ...) __shfl_up_sync(0xffffffffu, (v), __VA_ARGS__)

#elif defined(__HIPCC_RTC__)
// ---- AMD through hiprtc: hip_runtime and hip_fp16 are already there ----
#define TANDEM_AMD 1

#else
// ---- AMD through clang/hipcc (offline compile check) ----
#define TANDEM_AMD 1
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#endif

// Fixed-width integers under tandem's own names: NVRTC has no <stdint.h> and hiprtc defines only
// some of its names (ROCm 5.2 lacks uint16_t), so kernels use these everywhere.
typedef signed char i8;
typedef unsigned char u8;
typedef short i16;
typedef unsigned short u16;
typedef int i32;
typedef unsigned int u32;
typedef long long i64;
typedef unsigned long long u64;

#define TANDEM_DEVICE static __device__ __forceinline__
// A device function kept out of line (a rarely taken path whose code, inlined at every use,
// would crowd a hot kernel out of the instruction cache).
#if defined(TANDEM_NVIDIA)
#define TANDEM_NOINLINE static __device__ __noinline__
#else
#define TANDEM_NOINLINE static __device__ __attribute__((noinline))
#endif

// +inf without <math.h> (NVRTC has no INFINITY macro).
#define TANDEM_INF __int_as_float(0x7f800000)

// bfloat16 as its bits: the same code on both vendors, no vendor header.
TANDEM_DEVICE float tandem_bf16_to_f32(u16 b) {
    return __uint_as_float(((u32)b) << 16);
}
TANDEM_DEVICE u16 tandem_f32_to_bf16(float f) {
    u32 u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return (u16)((u >> 16) | 0x40u);  // keep NaN a (quiet) NaN
    }
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
    return (u16)(u >> 16);
}

// IEEE binary16 stored as its bits (block scales, f16 tensors): conversions on both vendors.
TANDEM_DEVICE float tandem_f16_to_f32(u16 b) {
#if defined(TANDEM_NVIDIA)
    __half h;
    h.x = b;
    return __half2float(h);
#else
    return __half2float(__ushort_as_half(b));
#endif
}
TANDEM_DEVICE u16 tandem_f32_to_f16(float f) {
#if defined(TANDEM_NVIDIA)
    return __float2half(f).x;
#else
    return __half_as_ushort(__float2half(f));
#endif
}

#if defined(TANDEM_NVIDIA)
// PTX prmt in its default mode: byte i of the result is byte (s >> 4i) & 7 of b:a (a's bytes 0..3,
// b's 4..7), or with bit 3 of that nibble set the sign of that byte copied into all eight bits.
// (CUDA's __byte_perm documents only the three low bits of each nibble.)
TANDEM_DEVICE u32 tandem_prmt(u32 a, u32 b, u32 s) {
    u32 r;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(s));
    return r;
}
#endif

// Programmatic dependent launch (NVIDIA sm_90+; nothing elsewhere). A kernel the host queues
// with `Stream::launch_dependent` may start while the kernel ahead of it on the stream is still
// running, so it calls tandem_grid_wait before it reads anything but its weights and before it
// writes anything: the wait returns once every grid ahead of it has finished and its writes are
// visible (at once for a kernel queued the ordinary way). tandem_grid_release lets the next such
// kernel start as soon as every block of this one has started, rather than at this one's end.
// The kernels a decode GEMV or MUL_MAT_ID follows (norms, GLU and binary ops, flash attention's
// decode and reduce, the MoE router and sums) release at their start, so that the matmul's
// blocks are resident and loading weights while they run; no kernel waits on them other than
// through its own tandem_grid_wait.
TANDEM_DEVICE void tandem_grid_release() {
#if defined(TANDEM_NVIDIA) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
TANDEM_DEVICE void tandem_grid_wait() {
#if defined(TANDEM_NVIDIA) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
// The wait orders later accesses only: ptxas may move loads written before it below it, which
// costs the overlap but not correctness; kernels check their SASS for the loads they prefetch.

// q = a / b and r = a % b (a >= 0, b > 0), in 32 bits where both fit, which is every index a
// model's tensors need (a 64-bit division is a subroutine of tens of instructions a thread).
TANDEM_DEVICE void tandem_divmod(i64 a, i64 b, i64& q, i64& r) {
    if (a <= 0x7fffffff && b <= 0x7fffffff) {
        const unsigned au = (unsigned)a, bu = (unsigned)b;
        const unsigned qu = au / bu;
        q = qu;
        r = au - qu * bu;
    } else {
        q = a / b;
        r = a % b;
    }
}

// Row r of extents ne (dims 1..3) as (i1, i2, i3).
TANDEM_DEVICE void tandem_row_index(i64 r, const i64* ne, i64& i1, i64& i2, i64& i3) {
    i64 q;
    tandem_divmod(r, ne[1], q, i1);
    tandem_divmod(q, ne[2], i3, i2);
}

// Sum over one wave, for any wave size; every lane gets the total.
TANDEM_DEVICE float tandem_wave_sum(float v) {
    for (int offset = warpSize / 2; offset > 0; offset >>= 1) {
        v += __shfl_xor(v, offset);
    }
    return v;
}

// Maximum over one wave; every lane gets it.
TANDEM_DEVICE float tandem_wave_max(float v) {
    for (int offset = warpSize / 2; offset > 0; offset >>= 1) {
        v = fmaxf(v, __shfl_xor(v, offset));
    }
    return v;
}

// Orders one wave's shared-memory writes before its own later reads (for data a wave stages and
// reads alone, where no block barrier is needed).
TANDEM_DEVICE void tandem_wave_sync() {
#if defined(TANDEM_NVIDIA)
    __syncwarp();
#else
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
    __builtin_amdgcn_wave_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
#endif
}

// Activation math, as ops/src/cpu/ew_math.rs and unary.rs compute it (the elementwise kernels
// and the GEMVs that apply a GLU gate to their column share it).
TANDEM_DEVICE float tandem_act_sigmoid(float x) {
    return 1.0f / (1.0f + expf(-x));
}
TANDEM_DEVICE float tandem_act_silu(float x) {
    return x / (1.0f + expf(-x));
}
// 0.5 x (1 + tanh u) written as x / (1 + e^(-2u)), u = sqrt(2/pi) x (1 + 0.044715 x^2).
TANDEM_DEVICE float tandem_act_gelu(float x) {
    const float u = 0.7978846f * x * (1.0f + 0.044715f * x * x);
    return x / (1.0f + expf(-2.0f * u));
}
TANDEM_DEVICE float tandem_act_gelu_quick(float x) {
    return x / (1.0f + expf(-1.702f * x));
}
TANDEM_DEVICE float tandem_act_gelu_erf(float x) {
    return 0.5f * x * (1.0f + erff(x * 0.70710678f));
}
TANDEM_DEVICE float tandem_act_relu(float x) {
    return x > 0.0f ? x : 0.0f;
}

// ggml's GLU gates act(x) * g, by ggml_glu_op (REGLU 0, GEGLU 1, SWIGLU 2, GEGLU_ERF 4,
// GEGLU_QUICK 5); the elementwise kernels' tandem_op_* structs compute the same.
TANDEM_DEVICE float tandem_glu_gate(int op, float x, float g) {
    switch (op) {
    case 0: return tandem_act_relu(x) * g;
    case 1: return tandem_act_gelu(x) * g;
    case 2: return tandem_act_silu(x) * g;
    case 4: return tandem_act_gelu_erf(x) * g;
    default: return tandem_act_gelu_quick(x) * g;
    }
}

// With TANDEM_WEIGHTS_EVICT_FIRST (NVIDIA sm_80+; TANDEM_WEIGHTS_EVICT_FIRST in the
// environment), weight loads carry an L2 policy that makes their lines the first to go, so a
// decode step's streamed weights do not push the small kernels' code, the activations and a short
// KV cache out of L2 between one layer and the next.
#if defined(TANDEM_NVIDIA) && defined(TANDEM_WEIGHTS_EVICT_FIRST) && __CUDA_ARCH__ >= 800
#define TANDEM_L2_HINT 1
TANDEM_DEVICE unsigned long long tandem_weight_policy() {
    unsigned long long p;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
    return p;
}
#endif

// A 16-byte load of data read once (weights): kept out of L1, so data read again (activations)
// stays cached there.
TANDEM_DEVICE uint4 tandem_ld_stream16(const uint4* p) {
#if defined(TANDEM_L2_HINT)
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p), "l"(tandem_weight_policy()));
    return v;
#elif defined(TANDEM_NVIDIA)
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
#else
    typedef unsigned int u32x4 __attribute__((ext_vector_type(4)));
    const u32x4 v = __builtin_nontemporal_load((const u32x4*)p);
    return make_uint4(v.x, v.y, v.z, v.w);
#endif
}
