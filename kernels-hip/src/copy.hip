// CPY / CONT / DUP: element k of src (flat order, i0 fastest) becomes element k of dst, whatever
// the two shapes and byte strides. Same type: a copy of the element's bits. f32/f16/bf16 among
// each other: through f32, rounding to nearest even like tandem's CPU (NaN -> quiet NaN). f32 into
// q8_0/q4_0/q4_1/q5_0/q5_1: each dst block gathers its 32 source values and is quantized with
// the same float steps as ops/src/quant/legacy.rs, so the bytes are identical.
//
// Float copies: blockIdx.y walks dst rows, x threads walk a row, so writes coalesce; when the
// shapes differ, each thread unravels its flat index in the src shape. Quantizing copies: one
// thread per dst block (the CPU's sequential scans of max and min give the exact tie-breaking
// for free); these copies are rare in inference, so simplicity wins over speed here.
//
// Also here: tandem_read_probe, the same-size read that `tandem perf-ops` times beside a case.
#include "tandem_hip.h"

// Compile units: the runtime builds this family a part at a time (-DTANDEM_UNIT=1 and
// TANDEM_UNIT_COMMON for byte copies and the read probe, _FLOAT for the float conversions,
// _<TYPE> for one quantized destination); without TANDEM_UNIT every entry is defined
// (kernels-hip/src/fam/convert.rs).
#if !defined(TANDEM_UNIT)
#define TANDEM_UNIT_ALL 1
#endif
#include "tandem_quant.h"

// Mirrors `CopyShape` in backend/src/gpu/ops/copy.rs (four blocks of four i64).
struct tandem_copy_shape {
    i64 ne[4];   // dst extents
    i64 nbd[4];  // dst byte strides
    i64 nes[4];  // src extents (same element count as dst)
    i64 nbs[4];  // src byte strides
};

// Byte offset in src of flat element k.
TANDEM_DEVICE i64 tandem_copy_src_offset(const tandem_copy_shape& s, i64 k) {
    const i64 j0 = k % s.nes[0];
    k /= s.nes[0];
    const i64 j1 = k % s.nes[1];
    k /= s.nes[1];
    const i64 j2 = k % s.nes[2];
    const i64 j3 = k / s.nes[2];
    return j0 * s.nbs[0] + j1 * s.nbs[1] + j2 * s.nbs[2] + j3 * s.nbs[3];
}

// Element formats: load to f32, store from f32 with the CPU's rounding.
struct tandem_fmt_f32 {
    static __device__ __forceinline__ float load(const char* p) { return *(const float*)p; }
    static __device__ __forceinline__ void store(char* p, float v) { *(float*)p = v; }
};
struct tandem_fmt_f16 {
    static __device__ __forceinline__ float load(const char* p) { return tandem_half_to_f32(*(const u16*)p); }
    static __device__ __forceinline__ void store(char* p, float v) { *(u16*)p = tandem_f32_to_half(v); }
};
struct tandem_fmt_bf16 {
    static __device__ __forceinline__ float load(const char* p) { return tandem_bf16_to_f32(*(const u16*)p); }
    static __device__ __forceinline__ void store(char* p, float v) { *(u16*)p = tandem_f32_to_bf16(v); }
};

// One element from `from` to `to`: a conversion between two formats, or a copy of bits.
template <typename S, typename D> struct tandem_convert {
    static __device__ __forceinline__ void apply(const char* from, char* to) { D::store(to, S::load(from)); }
};
template <typename W> struct tandem_bits {
    static __device__ __forceinline__ void apply(const char* from, char* to) { *(W*)to = *(const W*)from; }
};

template <typename C>
TANDEM_DEVICE void tandem_copy(const char* src, char* dst, const tandem_copy_shape& s) {
    const bool same = s.ne[0] == s.nes[0] && s.ne[1] == s.nes[1] && s.ne[2] == s.nes[2] && s.ne[3] == s.nes[3];
    const i64 rows = s.ne[1] * s.ne[2] * s.ne[3];
    const i64 step0 = (i64)gridDim.x * blockDim.x;
    for (i64 r = blockIdx.y; r < rows; r += gridDim.y) {
        const i64 i1 = r % s.ne[1];
        const i64 i2 = (r / s.ne[1]) % s.ne[2];
        const i64 i3 = r / (s.ne[1] * s.ne[2]);
        char* d = dst + i1 * s.nbd[1] + i2 * s.nbd[2] + i3 * s.nbd[3];
        const char* a = src + i1 * s.nbs[1] + i2 * s.nbs[2] + i3 * s.nbs[3];
        for (i64 i0 = (i64)blockIdx.x * blockDim.x + threadIdx.x; i0 < s.ne[0]; i0 += step0) {
            const char* from = same ? a + i0 * s.nbs[0] : src + tandem_copy_src_offset(s, r * s.ne[0] + i0);
            C::apply(from, d + i0 * s.nbd[0]);
        }
    }
}

#if TANDEM_UNIT_ALL || TANDEM_UNIT_COMMON
extern "C" __global__ void __launch_bounds__(256)
tandem_cpy_b32(const char* src, char* dst, tandem_copy_shape s) {
    tandem_copy<tandem_bits<u32> >(src, dst, s);
}
#endif

#if TANDEM_UNIT_ALL || TANDEM_UNIT_COMMON
extern "C" __global__ void __launch_bounds__(256)
tandem_cpy_b16(const char* src, char* dst, tandem_copy_shape s) {
    tandem_copy<tandem_bits<u16> >(src, dst, s);
}
#endif

#if TANDEM_UNIT_ALL || TANDEM_UNIT_FLOAT
extern "C" __global__ void __launch_bounds__(256)
tandem_cpy_f32_f16(const char* src, char* dst, tandem_copy_shape s) {
    tandem_copy<tandem_convert<tandem_fmt_f32, tandem_fmt_f16> >(src, dst, s);
}
#endif

#if TANDEM_UNIT_ALL || TANDEM_UNIT_FLOAT
extern "C" __global__ void __launch_bounds__(256)
tandem_cpy_f32_bf16(const char* src, char* dst, tandem_copy_shape s) {
    tandem_copy<tandem_convert<tandem_fmt_f32, tandem_fmt_bf16> >(src, dst, s);
}
#endif

#if TANDEM_UNIT_ALL || TANDEM_UNIT_FLOAT
extern "C" __global__ void __launch_bounds__(256)
tandem_cpy_f16_f32(const char* src, char* dst, tandem_copy_shape s) {
    tandem_copy<tandem_convert<tandem_fmt_f16, tandem_fmt_f32> >(src, dst, s);
}
#endif

#if TANDEM_UNIT_ALL || TANDEM_UNIT_FLOAT
extern "C" __global__ void __launch_bounds__(256)
tandem_cpy_bf16_f32(const char* src, char* dst, tandem_copy_shape s) {
    tandem_copy<tandem_convert<tandem_fmt_bf16, tandem_fmt_f32> >(src, dst, s);
}
#endif

#if TANDEM_UNIT_ALL || TANDEM_UNIT_FLOAT
extern "C" __global__ void __launch_bounds__(256)
tandem_cpy_f16_bf16(const char* src, char* dst, tandem_copy_shape s) {
    tandem_copy<tandem_convert<tandem_fmt_f16, tandem_fmt_bf16> >(src, dst, s);
}
#endif

#if TANDEM_UNIT_ALL || TANDEM_UNIT_FLOAT
extern "C" __global__ void __launch_bounds__(256)
tandem_cpy_bf16_f16(const char* src, char* dst, tandem_copy_shape s) {
    tandem_copy<tandem_convert<tandem_fmt_bf16, tandem_fmt_f16> >(src, dst, s);
}
#endif

// ---- f32 into 32-element quantized blocks (block quantizers: tandem_quant.h) ----

// One thread per dst block: gathers the block's 32 f32 source values by walking the src shape
// from the block's first flat index, then quantizes them.
template <typename Q>
TANDEM_DEVICE void tandem_quantize_copy(const char* src, char* dst, const tandem_copy_shape& s) {
    typedef typename Q::block B;
    const i64 per_row = s.ne[0] / 32;
    const i64 total = per_row * s.ne[1] * s.ne[2] * s.ne[3];
    for (i64 k = (i64)blockIdx.x * blockDim.x + threadIdx.x; k < total; k += (i64)gridDim.x * blockDim.x) {
        const i64 r = k / per_row;
        const i64 kb = k % per_row;
        const i64 i1 = r % s.ne[1];
        const i64 i2 = (r / s.ne[1]) % s.ne[2];
        const i64 i3 = r / (s.ne[1] * s.ne[2]);
        B* out = (B*)(dst + i1 * s.nbd[1] + i2 * s.nbd[2] + i3 * s.nbd[3]) + kb;
        i64 flat = r * s.ne[0] + kb * 32;
        i64 j0 = flat % s.nes[0];
        flat /= s.nes[0];
        i64 j1 = flat % s.nes[1];
        flat /= s.nes[1];
        i64 j2 = flat % s.nes[2];
        i64 j3 = flat / s.nes[2];
        float x[32];
        for (int e = 0; e < 32; e++) {
            x[e] = *(const float*)(src + j0 * s.nbs[0] + j1 * s.nbs[1] + j2 * s.nbs[2] + j3 * s.nbs[3]);
            // Next flat element: carry through the src extents.
            if (++j0 == s.nes[0]) {
                j0 = 0;
                if (++j1 == s.nes[1]) {
                    j1 = 0;
                    if (++j2 == s.nes[2]) {
                        j2 = 0;
                        ++j3;
                    }
                }
            }
        }
        Q::run(x, out);
    }
}

#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q8_0
extern "C" __global__ void __launch_bounds__(128)
tandem_cpy_f32_q8_0(const char* src, char* dst, tandem_copy_shape s) {
    tandem_quantize_copy<tandem_quantize_q8_0>(src, dst, s);
}
#endif

#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q4_0
extern "C" __global__ void __launch_bounds__(128)
tandem_cpy_f32_q4_0(const char* src, char* dst, tandem_copy_shape s) {
    tandem_quantize_copy<tandem_quantize_q4_0>(src, dst, s);
}
#endif

#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q4_1
extern "C" __global__ void __launch_bounds__(128)
tandem_cpy_f32_q4_1(const char* src, char* dst, tandem_copy_shape s) {
    tandem_quantize_copy<tandem_quantize_q4_1>(src, dst, s);
}
#endif

#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q5_0
extern "C" __global__ void __launch_bounds__(128)
tandem_cpy_f32_q5_0(const char* src, char* dst, tandem_copy_shape s) {
    tandem_quantize_copy<tandem_quantize_q5_0>(src, dst, s);
}
#endif

#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q5_1
extern "C" __global__ void __launch_bounds__(128)
tandem_cpy_f32_q5_1(const char* src, char* dst, tandem_copy_shape s) {
    tandem_quantize_copy<tandem_quantize_q5_1>(src, dst, s);
}
#endif

// The read probe of `tandem perf-ops`: reads the n16 16-byte words at src once, four in flight
// per thread (one 16 KiB stretch per block), as a weight-streaming kernel reads its weights.
// The words are folded into one value that is stored to `out` (scratch) only if it equals
// `never`: no load can be dropped, and a write happens for one data fold in 2^32.
#define TANDEM_READ_PROBE_THREADS 256
#define TANDEM_READ_PROBE_UNROLL 4
#if TANDEM_UNIT_ALL || TANDEM_UNIT_COMMON
extern "C" __global__ void __launch_bounds__(TANDEM_READ_PROBE_THREADS)
tandem_read_probe(const uint4* src, i64 n16, u32 never, u32* out) {
    // Back to back as dependent launches, each probe's loads overlap the end of the one ahead.
    tandem_grid_release();
    const i64 base = (i64)blockIdx.x * (TANDEM_READ_PROBE_THREADS * TANDEM_READ_PROBE_UNROLL) + threadIdx.x;
    uint4 v[TANDEM_READ_PROBE_UNROLL];
#pragma unroll
    for (int u = 0; u < TANDEM_READ_PROBE_UNROLL; ++u) {
        const i64 i = base + u * TANDEM_READ_PROBE_THREADS;
        v[u] = i < n16 ? tandem_ld_stream16(src + i) : make_uint4(0, 0, 0, 0);
    }
    // In a block of its own (n16 > 0 always, as launched): unconditional, ptxas moved the loads
    // below the wait, and the probe no longer overlapped the one ahead (NVRTC 13.5).
    if (n16 > 0) tandem_grid_wait();
    u32 x = 0;
#pragma unroll
    for (int u = 0; u < TANDEM_READ_PROBE_UNROLL; ++u) x += v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    if (x == never) out[0] = x;
}
#endif
