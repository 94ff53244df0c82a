// Decode-shaped MUL_MAT (GEMV, 1..8 columns) and MUL_MAT_ID over every weight type, plus the
// quantizer that turns f32 activations into q8_1 for the integer dot products.
//
// Launch layout, quantized weights (block = TANDEM_MV_THREADS threads, any wave size): grid.y is
// the batch or expert slot; block x of grid.x takes row groups x, x + gridDim.x, ... (a group:
// one row per wave), the launcher sizing grid.x so that each wave gets at most rpw rows and the
// grid about fills the device. Each wave walks its rows alone, so no block barrier stands
// between a row's loads and its sum (a wave reduction). Rows go in chunks of 2048 weights
// through the wave's own slice of shared memory: the chunk is loaded with 16-byte loads when rows
// are 16-byte aligned (whole-superblock rows of every type are; quantized rows are otherwise
// only 2-byte aligned), and each wave keeps the loads of its next two chunks in flight (two
// register sets taking turns) while it dots the current one. Each lane dots whole 32-weight
// groups with every column. The multi-column kernels of the 32-value block types take a wave's
// rows in pairs instead: both rows' chunk staged side by side, one read of each column's
// activations for the two dots. Float weights: one block of 128 threads per TANDEM_MV_FLOAT_ROWS
// rows (one column) or per row (several), each thread loading TANDEM_MV_FLOAT_BATCH 16-byte
// vectors of every row before it uses any, block reduction. Every weight byte is read once for
// all columns.
//
// Quantized weights meet activations quantized to q8_1 (per 32 values: scale d and d * sum(q),
// kept as f32), dotted with 4-byte integer dot products; float weights meet the f32 activations
// directly. When a block's columns fit (gemv_act_bytes in matmul_launch.rs), the launcher passes
// aq = null and every block quantizes them itself into shared memory, behind its wave stages,
// while its first two chunks' loads are in flight: one launch per node. Otherwise
// tandem_quantize_q8_1 writes a q8_1 copy to scratch memory first (int8 values, `k` per column,
// then one float2 (d, d*sum) per group) and the GEMV reads it from there. Both round exactly as
// the CPU's q8_0 activation copy does.
//
// Every kernel here may be queued as a dependent launch (tandem_grid_wait in tandem_hip.h): it
// lets the next one start as soon as all its blocks run, and it reads nothing but weights before
// its wait. The GEMVs issue their first weight loads before it, so back to back (a decode step's
// layers) one GEMV's first loads overlap the last blocks of the kernel ahead; MUL_MAT_ID waits
// first, as the expert ids come from the kernels ahead.
#include "tandem_hip.h"

// Compile units: the runtime builds this family one weight type at a time (-DTANDEM_UNIT=1
// -DTANDEM_UNIT_<TYPE>=1 defines that type's GEMV and MUL_MAT_ID entries only; the activation
// quantizers are TANDEM_UNIT_COMMON), so a model pays ptxas for the types it holds; without
// TANDEM_UNIT every entry is defined. The units are listed in kernels-hip/src/fam/matmul.rs.
#if !defined(TANDEM_UNIT)
#define TANDEM_UNIT_ALL 1
#endif
#include "tandem_quant.h"

// Most threads of a GEMV block (mirrors GEMV_THREADS in backend/src/gpu/ops/matmul_launch.rs);
// float-weight blocks run with GEMV_FLOAT_THREADS = 128.
#define TANDEM_MV_THREADS 256
// 32-weight groups per staged chunk. 2048 weights are 8 superblocks, so every type's chunk is a
// multiple of 16 bytes and keeps the next chunk as aligned as the row.
#define TANDEM_MV_GROUPS 64

// Mirrors `MulMatShape` in backend/src/gpu/ops/matmul_launch.rs (eighteen i64, no padding);
// gemm.hip and mma.hip have the same struct.
struct tandem_mm_shape {
    i64 k, m, n;                 // row length, weight rows, columns per batch
    i64 ne12, ne13;              // src1 (and dst) batch extents
    i64 r2, r3;                  // batch broadcast ratios ne12/ne02, ne13/ne03
    i64 nb01, nb02, nb03;        // weight byte strides
    i64 nb10, nb11, nb12, nb13;  // src1 byte strides (f32 elements)
    i64 nb1, nb2, nb3;           // dst byte strides (dst elements are contiguous f32)
    i64 flags;                   // TANDEM_MM_ACT_EARLY (tandem_gemv_<t>_u1 only)
};

// tandem_mm_shape::flags: the activations are in place before the kernel starts (MM_ACT_EARLY of
// matmul_launch.rs), so tandem_gemv_<t>_u1 reads and quantizes its column, and dots its first
// TANDEM_SEGU_HELD steps, before tandem_grid_wait (writing only shared memory there).
#define TANDEM_MM_ACT_EARLY 1
// tandem_mm_shape::flags bits 8..15 (tandem_gemv_<t>_s1/_u1/_n1, one column): 0, or a GLU gate's
// ggml_glu_op + 1. The kernel's column is then that gate's result, computed as it is read:
// act(src1[i]) * gb[i] (GLU_FUSED in matmul_launch.rs: a GLU FFN's down projection reads its gate
// so, and the gate's own kernel and result go).
#define TANDEM_MM_GLU_SHIFT 8
TANDEM_DEVICE int tandem_mm_glu(i64 flags) {
    return (int)((flags >> TANDEM_MM_GLU_SHIFT) & 0xff);
}

// Mirrors `MulMatIdShape` in backend/src/gpu/ops/matmul_launch.rs (sixteen i64).
struct tandem_mmid_shape {
    i64 k, m, n_expert;
    i64 n_used, n_tokens, n_b;  // ids [n_used, n_tokens]; src1 [k, n_b, n_tokens]
    i64 nb01, nb02;             // expert weight byte strides
    i64 nb11, nb12;             // src1 byte strides
    i64 ids_nb0, ids_nb1;       // ids byte strides
    i64 nb1, nb2;               // dst byte strides
    i64 nb10;                   // src1 element stride
    i64 flags;                  // TANDEM_MMID_IDS_EARLY, TANDEM_MMID_ACT_EARLY
};

// tandem_mmid_shape::flags: the ids are in place before the kernel starts (MMID_IDS_EARLY of
// matmul_launch.rs), so the GEMV form reads them, and its experts' first weights, before
// tandem_grid_wait.
#define TANDEM_MMID_IDS_EARLY 1
// With it, the activations are in place too (MMID_ACT_EARLY): tandem_mmid_<t>_u1 reads and
// quantizes its slot's column, and dots its first steps, before the wait as well.
#define TANDEM_MMID_ACT_EARLY 2

// Mirrors `Q8Shape` in backend/src/gpu/ops/matmul_launch.rs: src1 as [k, ne1, ne2, ne3] with
// byte strides; column c = i1 + ne1 * (i2 + ne2 * i3) of the q8_1 copy.
struct tandem_q8_shape {
    i64 k, ne1, ne2, ne3;
    i64 nb0, nb1, nb2, nb3;
};

// ---------------------------------------------------------------- small helpers

// Sum of four signed-byte products added to c.
TANDEM_DEVICE int tandem_dp4a(int a, int b, int c) {
#if defined(TANDEM_NVIDIA)
    int r;
    asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
#elif defined(__gfx1100__) || defined(__gfx1101__) || defined(__gfx1102__) || defined(__gfx1103__) || \
    defined(__gfx1150__) || defined(__gfx1151__) || defined(__gfx1200__) || defined(__gfx1201__)
    return __builtin_amdgcn_sudot4(true, a, true, b, c, false);
#elif defined(__gfx906__) || defined(__gfx908__) || defined(__gfx90a__) || defined(__gfx942__) || \
    defined(__gfx1030__) || defined(__gfx1031__) || defined(__gfx1032__) || defined(__gfx1034__)
    return __builtin_amdgcn_sdot4(a, b, c, false);
#else
    for (int i = 0; i < 32; i += 8) {
        c += (int)(signed char)(a >> i) * (int)(signed char)(b >> i);
    }
    return c;
#endif
}

// 32 bits from a 4-byte-aligned address.
TANDEM_DEVICE u32 tandem_ld32_a4(const u8* p) {
    return *(const u32*)p;
}
TANDEM_DEVICE float tandem_ld_half(const u8* p) {
    return tandem_f16_to_f32(*(const u16*)p);
}

// Byte i of the result holds bit i of `bits` (i < 4) at bit 4: the fifth bit of q5 weights.
TANDEM_DEVICE u32 tandem_spread4(u32 bits) {
    return ((bits & 1u) << 4) | ((bits & 2u) << 11) | ((bits & 4u) << 18) | ((bits & 8u) << 25);
}

// Sum of the four signed bytes of a.
TANDEM_DEVICE int tandem_bsum4(int a, int c) {
    return tandem_dp4a(0x01010101, a, c);
}

// ---------------------------------------------------------------- weight types against q8_1
// Each type: QK weights per block of BYTES bytes; dot() takes the block (in shared memory, at a
// multiple of BYTES from a 16-byte-aligned base), the 32-weight group g within it, the group's
// activation values a[8] (four signed bytes each), their scale da and da * sum(a).

struct tandem_mv_q4_0 {
    static constexpr int QK = 32, BYTES = 18;
    static __device__ __forceinline__ float dot(const u8* b, int, const int* a, float da, float sa) {
        u32 q[4];
        const float d = tandem_half_words_a2<4>(b, q);
        int s = 0;
        for (int i = 0; i < 4; ++i) {
            s = tandem_dp4a((int)(q[i] & 0x0F0F0F0Fu), a[i], s);
            s = tandem_dp4a((int)((q[i] >> 4) & 0x0F0F0F0Fu), a[4 + i], s);
        }
        return d * (da * (float)s - 8.0f * sa);
    }
};

struct tandem_mv_q4_1 {
    static constexpr int QK = 32, BYTES = 20;
    static __device__ __forceinline__ float dot(const u8* b, int, const int* a, float da, float sa) {
        int s = 0;
        for (int i = 0; i < 4; ++i) {
            const u32 v = tandem_ld32_a4(b + 4 + 4 * i);
            s = tandem_dp4a((int)(v & 0x0F0F0F0Fu), a[i], s);
            s = tandem_dp4a((int)((v >> 4) & 0x0F0F0F0Fu), a[4 + i], s);
        }
        return tandem_ld_half(b) * da * (float)s + tandem_ld_half(b + 2) * sa;
    }
};

struct tandem_mv_q5_0 {
    static constexpr int QK = 32, BYTES = 22;
    static __device__ __forceinline__ float dot(const u8* b, int, const int* a, float da, float sa) {
        u32 q[5];
        const float d = tandem_half_words_a2<5>(b, q);
        const u32 qh = q[0];
        int s = 0;
        for (int i = 0; i < 4; ++i) {
            const u32 v = q[1 + i];
            const u32 lo = (v & 0x0F0F0F0Fu) | tandem_spread4(qh >> (4 * i));
            const u32 hi = ((v >> 4) & 0x0F0F0F0Fu) | tandem_spread4(qh >> (16 + 4 * i));
            s = tandem_dp4a((int)lo, a[i], s);
            s = tandem_dp4a((int)hi, a[4 + i], s);
        }
        return d * (da * (float)s - 16.0f * sa);
    }
};

struct tandem_mv_q5_1 {
    static constexpr int QK = 32, BYTES = 24;
    static __device__ __forceinline__ float dot(const u8* b, int, const int* a, float da, float sa) {
        const u32 qh = tandem_ld32_a4(b + 4);
        int s = 0;
        for (int i = 0; i < 4; ++i) {
            const u32 v = tandem_ld32_a4(b + 8 + 4 * i);
            const u32 lo = (v & 0x0F0F0F0Fu) | tandem_spread4(qh >> (4 * i));
            const u32 hi = ((v >> 4) & 0x0F0F0F0Fu) | tandem_spread4(qh >> (16 + 4 * i));
            s = tandem_dp4a((int)lo, a[i], s);
            s = tandem_dp4a((int)hi, a[4 + i], s);
        }
        return tandem_ld_half(b) * da * (float)s + tandem_ld_half(b + 2) * sa;
    }
};

struct tandem_mv_q8_0 {
    static constexpr int QK = 32, BYTES = 34;
    static __device__ __forceinline__ float dot(const u8* b, int, const int* a, float da, float) {
        u32 q[8];
        const float d = tandem_half_words_a2<8>(b, q);
        int s = 0;
        for (int i = 0; i < 8; ++i) s = tandem_dp4a((int)q[i], a[i], s);
        return d * da * (float)s;
    }
};

struct tandem_mv_iq4_nl {
    static constexpr int QK = 32, BYTES = 18;
    static __device__ __forceinline__ float dot(const u8* b, int, const int* a, float da, float) {
        u32 q[4];
        const float d = tandem_half_words_a2<4>(b, q);
        int s = 0;
        for (int i = 0; i < 4; ++i) {
            u32 lo, hi;
            tandem_iq4nl_levels8(q[i], lo, hi);
            s = tandem_dp4a((int)lo, a[i], s);
            s = tandem_dp4a((int)hi, a[4 + i], s);
        }
        return d * da * (float)s;
    }
};

// q2_K: scales[16] (low nibble scale, high nibble min), qs[64], d, dmin. Group g = 4n + j takes
// bits 2j of qs[32n .. 32n + 32], and scales 2g, 2g + 1 for its two halves of 16.
struct tandem_mv_q2_K {
    static constexpr int QK = 256, BYTES = 84;
    static __device__ __forceinline__ float dot(const u8* b, int g, const int* a, float da, float) {
        const u8* q = b + 16 + 32 * (g >> 2);
        const int shift = 2 * (g & 3);
        // Integer sums over both halves (at most 2 * 15 * 16 * 3 * 127 and 2 * 15 * 16 * 127 in
        // magnitude, exact as f32), converted once.
        int sd = 0, sm = 0;
        for (int h = 0; h < 2; ++h) {
            int s = 0, t = 0;
            for (int i = 0; i < 4; ++i) {
                const u32 v = (tandem_ld32_a4(q + 16 * h + 4 * i) >> shift) & 0x03030303u;
                s = tandem_dp4a((int)v, a[4 * h + i], s);
                t = tandem_bsum4(a[4 * h + i], t);
            }
            const int sc = b[2 * g + h];
            sd += (sc & 15) * s;
            sm += (sc >> 4) * t;
        }
        return da * (tandem_ld_half(b + 80) * (float)sd - tandem_ld_half(b + 82) * (float)sm);
    }
};

// q3_K: hmask[32], qs[64], scales[12] (16 six-bit scales biased by 32), d. Group g = 4n + j takes
// bits 2j of qs[32n ..], bit g of hmask (clear means minus 4), scales 2g, 2g + 1. The block is
// 2-byte aligned: hmask and the group's 32 quant bytes are read as the aligned words around them.
// A value is its two bits minus 4 where the hmask bit is clear: the two bits OR 0xfc (-4 as a
// signed byte) in those bytes, so the dot needs no sum of the activations.
struct tandem_mv_q3_K {
    static constexpr int QK = 256, BYTES = 110;
    static __device__ __forceinline__ float dot(const u8* b, int g, const int* a, float da, float) {
        u32 hw[8], qw[8];
        tandem_words_a2<8>(b, hw);
        tandem_words_a2<8>(b + 32 + 32 * (g >> 2), qw);
        const int shift = 2 * (g & 3);
        int acc = 0;
        for (int h = 0; h < 2; ++h) {
            int s = 0;
            for (int i = 0; i < 4; ++i) {
                const u32 low = (qw[4 * h + i] >> shift) & 0x03030303u;
                const u32 minus4 = ((~hw[4 * h + i]) >> g) & 0x01010101u;
                s = tandem_dp4a((int)(low | (minus4 * 0xfcu)), a[4 * h + i], s);
            }
            acc += tandem_q3_K_scale(b + 96, 2 * g + h) * s;
        }
        return tandem_ld_half(b + 108) * da * (float)acc;
    }
};

// q4_K: d, dmin, scales[12] (eight 6-bit scale/min pairs), qs[128]. Group g takes nibble g & 1
// of qs[32 * (g / 2) ..] and scale/min pair g. The scale multiplies the integer sum before the
// one conversion (q5_K too: at most 63 * 32 * 31 * 127 < 2^24, exact as f32).
struct tandem_mv_q4_K {
    static constexpr int QK = 256, BYTES = 144;
    static __device__ __forceinline__ float dot(const u8* b, int g, const int* a, float da, float sa) {
        const u8* q = b + 16 + 32 * (g >> 1);
        const int shift = 4 * (g & 1);
        int s = 0;
        for (int i = 0; i < 8; ++i) {
            const u32 v = (tandem_ld32_a4(q + 4 * i) >> shift) & 0x0F0F0F0Fu;
            s = tandem_dp4a((int)v, a[i], s);
        }
        int sc, mn;
        float d, dmin;
        tandem_dscale_min_k4(b, g, d, dmin, sc, mn);
        return d * da * (float)(sc * s) - dmin * (float)mn * sa;
    }
};

// q5_K: q4_K plus qh[32] at 16 whose bit g is the group's fifth bit; qs at 48.
struct tandem_mv_q5_K {
    static constexpr int QK = 256, BYTES = 176;
    static __device__ __forceinline__ float dot(const u8* b, int g, const int* a, float da, float sa) {
        const u8* q = b + 48 + 32 * (g >> 1);
        const int shift = 4 * (g & 1);
        int s = 0;
        for (int i = 0; i < 8; ++i) {
            const u32 lo = (tandem_ld32_a4(q + 4 * i) >> shift) & 0x0F0F0F0Fu;
            const u32 hi = (tandem_ld32_a4(b + 16 + 4 * i) >> g) & 0x01010101u;
            s = tandem_dp4a((int)(lo | (hi << 4)), a[i], s);
        }
        int sc, mn;
        float d, dmin;
        tandem_dscale_min_k4(b, g, d, dmin, sc, mn);
        return d * da * (float)(sc * s) - dmin * (float)mn * sa;
    }
};

// q6_K: ql[128], qh[64], scales[16] (signed), d. Group g = 4n + j takes nibble j / 2 of
// ql[64n + 32 (j & 1) ..], bits 2j of qh[32n ..], scales 8n + 2j (+1); values are biased by 32.
struct tandem_mv_q6_K {
    static constexpr int QK = 256, BYTES = 210;
    static __device__ __forceinline__ float dot(const u8* b, int g, const int* a, float da, float) {
        const int n = g >> 2, j = g & 3;
        const u8* ql = b + 64 * n + 32 * (j & 1);
        const u8* qh = b + 128 + 32 * n;
        const int sl = 4 * (j >> 1), sh = 2 * j;
        int acc = 0;
        u32 l8[8], h8[8];
        tandem_words_a2<8>(ql, l8);
        tandem_words_a2<8>(qh, h8);
        for (int h = 0; h < 2; ++h) {
            int s = 0, t = 0;
            for (int i = 0; i < 4; ++i) {
                const u32 lo = (l8[4 * h + i] >> sl) & 0x0F0F0F0Fu;
                const u32 hi = (h8[4 * h + i] >> sh) & 0x03030303u;
                s = tandem_dp4a((int)(lo | (hi << 4)), a[4 * h + i], s);
                t = tandem_bsum4(a[4 * h + i], t);
            }
            acc += (int)(i8)b[192 + 2 * g + h] * (s - 32 * t);
        }
        return tandem_ld_half(b + 208) * da * (float)acc;
    }
};

// Whether the multi-column GEMV of a type walks its rows in pairs (tandem_mv_pair_rows): yes for
// the 32-value block types, whose small dots leave the activation reads the larger cost; the
// superblock types keep one row at a time (measured on an H200 at 14336 x 4096, n = 8: q4_0 65.2
// vs 75.6 us and q8_0 80.8 vs 92.3 in pairs, q4_K 73.0 vs 72.3, q6_K 124.2 vs 107.3).
template <typename T>
struct tandem_mv_pairs {
    static constexpr bool value = T::QK == 32;
};

// Whether the one-column walk of a type takes a whole chunk's groups without a bound test per
// group (tandem_mv_dot_chunk1). Measured on an H200 against the tested loop, back to back at
// 14336 x 4096 (us): q4_K 13.3 -> 13.0, q5_K 15.4 -> 15.1, q6_K 18.7 -> 18.3, q3_K 18.5 -> 18.4,
// q5_0 17.5 -> 17.0, q5_1 16.9 -> 16.4, iq4_nl 16.1 -> 15.7; q4_0, q4_1, q8_0 and q2_K did not
// move, and q4_0's narrow GEMVs lost (3072 x 4096: 5.5 -> 5.9), so those keep the tested loop.
template <typename T>
struct tandem_mv_whole {
    static constexpr bool value = true;
};
template <>
struct tandem_mv_whole<tandem_mv_q4_0> {
    static constexpr bool value = false;
};
template <>
struct tandem_mv_whole<tandem_mv_q4_1> {
    static constexpr bool value = false;
};
template <>
struct tandem_mv_whole<tandem_mv_q8_0> {
    static constexpr bool value = false;
};
template <>
struct tandem_mv_whole<tandem_mv_q2_K> {
    static constexpr bool value = false;
};

// ---------------------------------------------------------------- staging

// Bytes of one staged chunk (TANDEM_MV_GROUPS groups) of T, a multiple of 16 for every type;
// NV: 16-byte loads per lane that cover it with 32-lane waves.
template <typename T>
struct tandem_mv_chunk {
    static constexpr int BYTES = TANDEM_MV_GROUPS / (T::QK / 32) * T::BYTES;
    static constexpr int NV = (BYTES + 511) / 512;
};

// Issues the 16-byte loads of a chunk's whole 16-byte part (`al`: the chunk starts 16-byte
// aligned) into r; nothing waits for them until tandem_mv_put stores them.
template <int NV>
TANDEM_DEVICE void tandem_mv_fetch(uint4 (&r)[NV], const u8* src, int bytes, bool al, int lane, int ws) {
    if (!al) return;
    const int n16 = bytes >> 4;
    const uint4* s = (const uint4*)src;
#pragma unroll
    for (int q = 0; q < NV; ++q) {
        const int i = lane + q * ws;
        if (i < n16) r[q] = tandem_ld_stream16(s + i);
    }
}

// Stores what tandem_mv_fetch loaded into the wave's shared `dst` (16-byte aligned) and copies
// the rest of the chunk (all of it when unaligned, else a tail under 16 bytes) in 2-byte steps.
template <int NV>
TANDEM_DEVICE void tandem_mv_put(const uint4 (&r)[NV], u8* dst, const u8* src, int bytes, bool al, int lane,
                                 int ws) {
    int done = 0;
    if (al) {
        const int n16 = bytes >> 4;
        uint4* d = (uint4*)dst;
#pragma unroll
        for (int q = 0; q < NV; ++q) {
            const int i = lane + q * ws;
            if (i < n16) d[i] = r[q];
        }
        done = n16 << 4;
    }
    const u16* s = (const u16*)src;
    u16* d = (u16*)dst;
    for (int i = (done >> 1) + lane; i < (bytes >> 1); i += ws) d[i] = s[i];
}

// ---------------------------------------------------------------- activations in the block

// N consecutive values x (N = 4 or 16) of a 32-value group, held N to a thread by 32 / N
// consecutive lanes (aligned: the xor shuffles below 32 / N stay inside the group on any wave
// size), quantized as tandem's CPU (and ggml's) q8_0 activation copy is: q = round(x * (1/d)),
// d = amax / 127, and the scale used in the dot is d rounded to f16. Block dot products then
// equal the CPU's exactly and a model's tokens do not depend on the device (only the f32
// summation order differs). Writes the N q as bytes to q (value e in byte e % 4 of word e / 4);
// d and the sum of the group's 32 q come back to every thread of the group (the q8_1 pair is
// (f16(d), f16(d) * sum), tandem_q8_pair). One division and reciprocal per thread, so the block
// quantizer takes 16 values a thread. Every lane of the wave calls it.
template <int N>
TANDEM_DEVICE void tandem_q8_part(const float (&x)[N], u32 (&q)[N / 4], float& d, int& sum, int& part) {
    static_assert(N == 4 || N == 16, "a group's 32 values over 8 or 2 lanes");
    float amax = fabsf(x[0]);
#pragma unroll
    for (int e = 1; e < N; ++e) amax = fmaxf(amax, fabsf(x[e]));
#pragma unroll
    for (int o = 16 / N; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor(amax, o));
    d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    sum = 0;
#pragma unroll
    for (int w = 0; w < N / 4; ++w) {
        u32 packed = 0;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int v = (int)roundf(x[4 * w + e] * id);
            sum += v;
            packed |= (u32)(u8)(i8)v << (8 * e);
        }
        q[w] = packed;
    }
    part = sum;
#pragma unroll
    for (int o = 16 / N; o > 0; o >>= 1) sum += __shfl_xor(sum, o);
}
// The same without this thread's own sum (part: the sum of its N q).
template <int N>
TANDEM_DEVICE void tandem_q8_part(const float (&x)[N], u32 (&q)[N / 4], float& d, int& sum) {
    int part;
    tandem_q8_part<N>(x, q, d, sum, part);
}
// A group's q8_1 (d, d * sum) pair, d rounded to f16 first.
TANDEM_DEVICE float2 tandem_q8_pair(float d, int sum) {
    const float dh = tandem_f16_to_f32(tandem_f32_to_f16(d));
    return make_float2(dh, dh * (float)sum);
}

// Whether columns at base (nb1 bytes apart) are contiguous and 16-byte aligned f32 values, read
// with 16-byte loads by the block quantizer.
TANDEM_DEVICE bool tandem_mv_quant_vec(const char* base, i64 nb0, i64 nb1) {
    return nb0 == 4 && (((u64)base | (u64)nb1) & 15u) == 0;
}

// Where the segment walk (tandem_gemv_seg, G 32-value groups per segment) keeps a column's
// 16-byte unit u of int8 values (2G per segment) and the (d, d * sum) pair of group g (G per
// segment, two to a 16-byte unit) in shared memory: each segment's units swapped among
// themselves by an XOR with bits of the segment index, so that the lanes of a wave, each reading
// the same unit of its own segment, reach distinct banks. G = 0: in order (the row walks).
template <int G>
TANDEM_DEVICE int tandem_seg_act_at(int u) {
    if constexpr (G == 0) {
        return u;
    } else {
        return u ^ ((u / (2 * G)) & 7);
    }
}
// The XOR that segment seg's G / 2 pair units take (eight consecutive segments, read by the
// eight lanes of one pass of a 16-byte load, then reach distinct units of the 128-byte rows).
template <int G>
TANDEM_DEVICE int tandem_seg_pair_x(int seg) {
    static_assert(G == 8 || G == 4, "segments of eight or four groups");
    if constexpr (G == 8) {
        return (seg >> 1) & 3;
    } else {
        return (seg >> 2) & 1;
    }
}
// Where the segment walk keeps the sum of the int8 values of a column's 16-value half h (2G per
// segment, four to a 16-byte unit), for types whose scales cover 16 values (q6_K): swizzled as
// the pairs are.
template <int G>
TANDEM_DEVICE int tandem_seg_part_at(int h) {
    constexpr int P = G / 2;  // units per segment
    const int v = h / 4;
    return 4 * ((v & ~(P - 1)) | ((v & (P - 1)) ^ tandem_seg_pair_x<G>(v / P))) + (h & 3);
}
template <int G>
TANDEM_DEVICE int tandem_seg_pair_at(int g) {
    if constexpr (G == 0) {
        return g;
    } else {
        constexpr int P = G / 2;  // pair units per segment
        const int v = g / 2;
        return 2 * ((v & ~(P - 1)) | ((v & (P - 1)) ^ tandem_seg_pair_x<G>(v / P))) + (g & 1);
    }
}

#define TANDEM_MV_QUANT_UNROLL 2
// A GLU gate on four values and on one, out of line: inlined at every value of the column loads,
// the five gates' code made the segment GEMV's prologue some 17,000 instructions, and a q4_0
// 4096 x 14336 GEMV with the gate took 58.5 against 17.9 us without it (H100, one at a time).
TANDEM_NOINLINE float4 tandem_mv_gate4(int op, float4 x, float4 g) {
    return make_float4(tandem_glu_gate(op, x.x, g.x), tandem_glu_gate(op, x.y, g.y), tandem_glu_gate(op, x.z, g.z),
                       tandem_glu_gate(op, x.w, g.w));
}
TANDEM_NOINLINE float tandem_mv_gate1(int op, float x, float g) {
    return tandem_glu_gate(op, x, g);
}

// Loads the values of the TANDEM_MV_QUANT_UNROLL halves (16 values each) this thread quantizes
// in the pass of column `col` that starts at wave offset w0 (zeros past the column's `halves`).
// With glu > 0 the column is a GLU gate's result computed here: value i is
// tandem_glu_gate(glu - 1, col[i], gb[i]), gb laid out as col (16-byte aligned too where vec).
TANDEM_DEVICE void tandem_mv_quant_load(float (&x)[TANDEM_MV_QUANT_UNROLL][16], const char* col, i64 nb0, bool vec,
                                        int halves, int w0, const char* gb = nullptr, int glu = 0) {
    const int lane = threadIdx.x % warpSize, bd = blockDim.x;
#pragma unroll
    for (int u = 0; u < TANDEM_MV_QUANT_UNROLL; ++u) {
        const int h = w0 + lane + u * bd;
#pragma unroll
        for (int e = 0; e < 16; ++e) x[u][e] = 0.0f;
        if (h < halves) {
            if (vec) {
#pragma unroll
                for (int v4 = 0; v4 < 4; ++v4) {
                    float4 v = ((const float4*)col)[4 * h + v4];
                    if (glu > 0) v = tandem_mv_gate4(glu - 1, v, ((const float4*)gb)[4 * h + v4]);
                    x[u][4 * v4] = v.x;
                    x[u][4 * v4 + 1] = v.y;
                    x[u][4 * v4 + 2] = v.z;
                    x[u][4 * v4 + 3] = v.w;
                }
            } else {
                for (int e = 0; e < 16; ++e) {
                    const i64 at = (i64)(16 * h + e) * nb0;
                    const float v = *(const float*)(col + at);
                    x[u][e] = glu > 0 ? tandem_mv_gate1(glu - 1, v, *(const float*)(gb + at)) : v;
                }
            }
        }
    }
}

// Whether a column and its GLU partner `gb` (null: none) load 16 bytes at a time.
TANDEM_DEVICE bool tandem_mv_quant_vec2(const char* base, const char* gb, i64 nb0, i64 nb1) {
    return tandem_mv_quant_vec(base, nb0, nb1) && ((u64)gb & 15u) == 0;
}

// Quantizes `ncols` columns of `k` f32 values (value i of column j at base + i * nb0 + j * nb1)
// to q8_1 in shared memory, as tandem_quantize_q8_1 does: int8 values at sq (k per column), one
// (d, d * sum) pair per 32 values at sd. Two threads per 32-value group, sixteen values each
// (four 16-byte loads where the columns are contiguous and aligned); a pass takes
// TANDEM_MV_QUANT_UNROLL such halves per thread, loaded before any is used. x holds the values
// of column 0's first pass: the caller loads them (tandem_mv_quant_load) before its weight
// loads, so the wait for them overlaps the wait for the weights. Every thread of the block calls
// it; the caller puts a block barrier after it. SEG > 0 (one column): the units go where
// tandem_seg_act_at<SEG> and tandem_seg_pair_at<SEG> say; PARTS: each half's sum to sp too, where
// tandem_seg_part_at<SEG> says.
template <int SEG = 0, bool PARTS = false>
TANDEM_DEVICE void tandem_mv_quantize_block(const char* base, i64 nb0, i64 nb1, i64 k, int ncols, i8* sq,
                                            float2* sd, float (&x)[TANDEM_MV_QUANT_UNROLL][16],
                                            int* sp = nullptr, const char* gb = nullptr, int glu = 0) {
    const int halves = (int)(k / 16);  // per column; even (k is of 32s, at most 32768)
    const int lane = threadIdx.x % warpSize;
    const int bd = blockDim.x;
    const bool vec = tandem_mv_quant_vec2(base, gb, nb0, nb1);
    const int first = (int)threadIdx.x - lane;
    for (int j = 0; j < ncols; ++j) {
        const char* col = base + j * nb1;
        uint4* cq = (uint4*)(sq + j * k);
        float2* cd = sd + j * (k / 32);
        // Whole waves iterate together (the shuffles below need every lane), so the bound is
        // tested on the wave's first thread; the two threads of a group are in or out together.
        for (int w0 = first; w0 < halves; w0 += TANDEM_MV_QUANT_UNROLL * bd) {
            if (j > 0 || w0 != first) tandem_mv_quant_load(x, col, nb0, vec, halves, w0, glu > 0 ? gb + j * nb1 : nullptr, glu);
#pragma unroll
            for (int u = 0; u < TANDEM_MV_QUANT_UNROLL; ++u) {
                if (w0 + u * bd >= halves) break;  // the same for the whole wave
                const int h = w0 + lane + u * bd;
                u32 q[4];
                float d;
                int sum, part;
                tandem_q8_part<16>(x[u], q, d, sum, part);
                if (h < halves) {
                    cq[tandem_seg_act_at<SEG>(h)] = make_uint4(q[0], q[1], q[2], q[3]);
                    if ((h & 1) == 0) cd[tandem_seg_pair_at<SEG>(h / 2)] = tandem_q8_pair(d, sum);
                    if constexpr (PARTS) sp[tandem_seg_part_at<SEG>(h)] = part;
                }
            }
        }
    }
}

// ---------------------------------------------------------------- the row walks

// Wave-wide sums of acc[0..ncols) written to out[j * out_stride] (bytes) by lane 0.
template <int MAXC>
TANDEM_DEVICE void tandem_mv_finish(float* acc, int ncols, char* out, i64 out_stride) {
    const int lane = threadIdx.x % warpSize;
#pragma unroll
    for (int j = 0; j < MAXC; ++j) {
        if (j < ncols) {
            const float v = tandem_wave_sum(acc[j]);
            if (lane == 0) *(float*)(out + j * out_stride) = v;
        }
    }
}

// Groups a lane takes per chunk with 32-lane waves (64-lane waves take half as many).
#define TANDEM_MV_LANE_GROUPS (TANDEM_MV_GROUPS / 32)

// The one-column dots of a staged chunk (ng groups of the row from group g0, at `stage`) with
// q8_1 column col0 at qa/qd (shared memory, or global), added to acc; each lane takes whole
// 32-weight groups. A whole chunk (every chunk of a row but maybe its last) takes its groups
// without a bound test per group, so the compiler interleaves a lane's groups instead of running
// them one after the other behind a branch each.
template <typename T>
TANDEM_DEVICE void tandem_mv_dot_chunk1(const u8* stage, int ng, i64 g0, i64 k, i64 groups, const i8* qa,
                                        const float2* qd, i64 col0, float& acc) {
    constexpr int GPB = T::QK / 32;
    const int lane = threadIdx.x % warpSize, ws = warpSize;
    const i8* qa_c = qa + col0 * k + g0 * 32;
    const float2* qd_c = qd + col0 * groups + g0;
    const auto group = [&](int t) {
        const int4* ap = (const int4*)(qa_c + 32 * t);
        const int4 lo = ap[0], hi = ap[1];
        const int a[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
        const float2 ds = qd_c[t];
        acc += T::dot(stage + (t / GPB) * T::BYTES, t % GPB, a, ds.x, ds.y);
    };
    if (ng == TANDEM_MV_GROUPS) {
#pragma unroll
        for (int u = 0; u < TANDEM_MV_LANE_GROUPS; ++u) {
            // The same for every lane of the wave (64-lane waves take one group each).
            if (u * ws < TANDEM_MV_GROUPS) group(lane + u * ws);
        }
        return;
    }
#pragma unroll
    for (int u = 0; u < TANDEM_MV_LANE_GROUPS; ++u) {
        if (lane + u * ws < ng) group(lane + u * ws);
    }
}

// A place in a wave's walk: chunk c of the wave's row r (its rows are row0, row0 + step, ...).
struct tandem_mv_pos {
    int r, c;
};

// One wave's walk over its rows (nrows of them; row i at wbase + (row0 + i * step) * nb01) as a
// sequence of items, one per 2048-weight chunk of a row; positions advance one item at a time.
template <typename T>
struct tandem_mv_walk {
    const u8* wbase;
    i64 nb01, row0, step, groups;
    int nchunks, nrows;
    bool al;

    __device__ tandem_mv_walk(const u8* w, i64 nb01_, i64 row0_, i64 step_, int nrows_, i64 k, bool al_)
        : wbase(w), nb01(nb01_), row0(row0_), step(step_), groups(k / 32), nrows(nrows_), al(al_) {
        nchunks = (int)((groups + TANDEM_MV_GROUPS - 1) / TANDEM_MV_GROUPS);
    }
    __device__ void next(tandem_mv_pos& p) const {
        if (++p.c == nchunks) {
            p.c = 0;
            ++p.r;
        }
    }
    __device__ bool in(const tandem_mv_pos& p) const { return p.r < nrows; }
    __device__ bool last(const tandem_mv_pos& p) const { return p.c == nchunks - 1; }
    __device__ i64 row(const tandem_mv_pos& p) const { return row0 + (i64)p.r * step; }
    __device__ i64 g0(const tandem_mv_pos& p) const { return (i64)p.c * TANDEM_MV_GROUPS; }
    __device__ int ng(const tandem_mv_pos& p) const {
        const i64 left = groups - g0(p);
        return (int)(left < TANDEM_MV_GROUPS ? left : TANDEM_MV_GROUPS);
    }
    __device__ const u8* src(const tandem_mv_pos& p) const {
        return wbase + row(p) * nb01 + (i64)p.c * tandem_mv_chunk<T>::BYTES;
    }
    __device__ int bytes(const tandem_mv_pos& p) const { return ng(p) / (T::QK / 32) * T::BYTES; }
    // Issues the loads of the item at p into r (nothing when p is past the end).
    __device__ void fetch(uint4 (&r)[tandem_mv_chunk<T>::NV], const tandem_mv_pos& p, int lane, int ws) const {
        if (in(p)) tandem_mv_fetch<tandem_mv_chunk<T>::NV>(r, src(p), bytes(p), al, lane, ws);
    }
};

// The item at `p`: its loads (in r) stored to the wave's `stage`, the loads of the item at `f`
// (two ahead) issued into r, the chunk dotted with q8_1 columns col0 .. col0 + ncols at qa/qd
// (shared memory, or global), and at a row's last chunk its sums written to out + row * 4 +
// j * out_stride.
template <typename T, int MAXC>
TANDEM_DEVICE void tandem_mv_item(const tandem_mv_walk<T>& wk, uint4 (&r)[tandem_mv_chunk<T>::NV],
                                  const tandem_mv_pos& p, const tandem_mv_pos& f, float (&acc)[MAXC], u8* stage, i64 k,
                                  const i8* qa, const float2* qd, i64 col0, int ncols, char* out, i64 out_stride) {
    constexpr int GPB = T::QK / 32;
    const int lane = threadIdx.x % warpSize, ws = warpSize;
    const int ng = wk.ng(p);
    const i64 g0 = wk.g0(p);
    tandem_mv_put<tandem_mv_chunk<T>::NV>(r, stage, wk.src(p), wk.bytes(p), wk.al, lane, ws);
    tandem_wave_sync();
    wk.fetch(r, f, lane, ws);
    if constexpr (MAXC == 1 && tandem_mv_whole<T>::value) {
        tandem_mv_dot_chunk1<T>(stage, ng, g0, k, wk.groups, qa, qd, col0, acc[0]);
    } else {
        // This chunk's activations: column j's groups at qa_c + 32 * t, pairs at qd_c + t.
        const i8* qa_c = qa + col0 * k + g0 * 32;
        const float2* qd_c = qd + col0 * wk.groups + g0;
#pragma unroll
        for (int u = 0; u < TANDEM_MV_LANE_GROUPS; ++u) {
            const int t = lane + u * ws;
            if (t < ng) {
                const u8* blk = stage + (t / GPB) * T::BYTES;
#pragma unroll
                for (int j = 0; j < MAXC; ++j) {
                    if (j < ncols) {
                        const int4* ap = (const int4*)(qa_c + j * k + 32 * t);
                        const int4 lo = ap[0], hi = ap[1];
                        const int a[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
                        const float2 ds = qd_c[j * wk.groups + t];
                        acc[j] += T::dot(blk, t % GPB, a, ds.x, ds.y);
                    }
                }
            }
        }
    }
    tandem_wave_sync();
    if (wk.last(p)) {
        tandem_mv_finish<MAXC>(acc, ncols, out + wk.row(p) * 4, out_stride);
#pragma unroll
        for (int j = 0; j < MAXC; ++j) acc[j] = 0.0f;
    }
}

// The whole walk with two items in flight: ra and rb hold items 0 and 1 (issued by the caller)
// and take turns, each refilled two items ahead as soon as its chunk is in shared memory.
template <typename T, int MAXC>
TANDEM_DEVICE void tandem_mv_quant_rows(const tandem_mv_walk<T>& wk, uint4 (&ra)[tandem_mv_chunk<T>::NV],
                                        uint4 (&rb)[tandem_mv_chunk<T>::NV], u8* stage, i64 k, const i8* qa,
                                        const float2* qd, i64 col0, int ncols, char* out, i64 out_stride) {
    float acc[MAXC];
#pragma unroll
    for (int j = 0; j < MAXC; ++j) acc[j] = 0.0f;
    tandem_mv_pos p = {0, 0}, f = {0, 0};
    wk.next(f);
    wk.next(f);  // f: two items ahead of p
    while (wk.in(p)) {
        tandem_mv_item<T, MAXC>(wk, ra, p, f, acc, stage, k, qa, qd, col0, ncols, out, out_stride);
        wk.next(p);
        wk.next(f);
        if (!wk.in(p)) break;
        tandem_mv_item<T, MAXC>(wk, rb, p, f, acc, stage, k, qa, qd, col0, ncols, out, out_stride);
        wk.next(p);
        wk.next(f);
    }
}

// The multi-column walk: the wave's rows in pairs, both rows' chunk c staged side by side
// (stage0, stage1) and dotted with one read of each column's activations, which halves the
// activation reads per weight (eight columns read 17.8 activation bytes per q4_0 weight byte).
// ra and rb hold chunk 0 of rows 0 and 1 (issued by the caller); each is refilled with the next
// step's chunk as soon as its chunk is in shared memory. Columns col0 .. col0 + ncols of qa/qd
// (shared memory or global); row sums go to out + row * 4 + j * out_stride.
template <typename T, int MAXC>
TANDEM_DEVICE void tandem_mv_pair_rows(const tandem_mv_walk<T>& wk, uint4 (&ra)[tandem_mv_chunk<T>::NV],
                                       uint4 (&rb)[tandem_mv_chunk<T>::NV], u8* stage0, u8* stage1, i64 k,
                                       const i8* qa, const float2* qd, i64 col0, int ncols, char* out,
                                       i64 out_stride) {
    constexpr int GPB = T::QK / 32;
    constexpr int NV = tandem_mv_chunk<T>::NV;
    const int lane = threadIdx.x % warpSize, ws = warpSize;
    for (int r = 0; r < wk.nrows; r += 2) {
        // Whether the pair has a second row (the same on every lane): without one, stage1 keeps
        // stale bytes whose dots are dropped.
        const bool two = r + 1 < wk.nrows;
        float acc0[MAXC], acc1[MAXC];
#pragma unroll
        for (int j = 0; j < MAXC; ++j) acc0[j] = acc1[j] = 0.0f;
        for (int c = 0; c < wk.nchunks; ++c) {
            const tandem_mv_pos pa = {r, c}, pb = {r + 1, c};
            tandem_mv_put<NV>(ra, stage0, wk.src(pa), wk.bytes(pa), wk.al, lane, ws);
            if (two) tandem_mv_put<NV>(rb, stage1, wk.src(pb), wk.bytes(pb), wk.al, lane, ws);
            tandem_wave_sync();
            const tandem_mv_pos na = c + 1 < wk.nchunks ? tandem_mv_pos{r, c + 1} : tandem_mv_pos{r + 2, 0};
            wk.fetch(ra, na, lane, ws);
            wk.fetch(rb, tandem_mv_pos{na.r + 1, na.c}, lane, ws);
            const int ng = wk.ng(pa);
            const i64 g0 = wk.g0(pa);
            const i8* qa_c = qa + col0 * k + g0 * 32;
            const float2* qd_c = qd + col0 * wk.groups + g0;
#pragma unroll
            for (int u = 0; u < TANDEM_MV_LANE_GROUPS; ++u) {
                const int t = lane + u * ws;
                if (t < ng) {
                    const int off = (t / GPB) * T::BYTES;
#pragma unroll
                    for (int j = 0; j < MAXC; ++j) {
                        if (j < ncols) {
                            const int4* ap = (const int4*)(qa_c + j * k + 32 * t);
                            const int4 lo = ap[0], hi = ap[1];
                            const int a[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
                            const float2 ds = qd_c[j * wk.groups + t];
                            acc0[j] += T::dot(stage0 + off, t % GPB, a, ds.x, ds.y);
                            acc1[j] += T::dot(stage1 + off, t % GPB, a, ds.x, ds.y);
                        }
                    }
                }
            }
            tandem_wave_sync();
        }
        tandem_mv_finish<MAXC>(acc0, ncols, out + wk.row(tandem_mv_pos{r, 0}) * 4, out_stride);
        if (two) tandem_mv_finish<MAXC>(acc1, ncols, out + wk.row(tandem_mv_pos{r + 1, 0}) * 4, out_stride);
    }
}

// The rows of this wave: block x takes row group x (waves consecutive rows, one per wave), then
// x + gridDim.x, ... (grid-stride), so at any moment the whole grid works on one compact stretch
// of the matrix.
struct tandem_mv_rows {
    i64 row0, step;
    int n;
};
TANDEM_DEVICE tandem_mv_rows tandem_mv_wave_rows(i64 m) {
    const i64 nw = blockDim.x / warpSize;
    tandem_mv_rows r;
    r.step = nw * gridDim.x;
    r.row0 = (i64)blockIdx.x * nw + threadIdx.x / warpSize;
    // A 32-bit division where the rows fit 32 bits (every real weight), else the 64-bit one.
    const i64 left = m - 1 - r.row0;
    if (r.row0 >= m) {
        r.n = 0;
    } else if (m <= 0xffffffffll && r.step <= 0xffffffffll) {
        r.n = (int)((u32)left / (u32)r.step + 1);
    } else {
        r.n = (int)(left / r.step + 1);
    }
    return r;
}

// A quantized GEMV block: the first two chunks' loads issued, then (when aq is null) the block's
// columns quantized into shared memory behind the wave stages, then the row walk: one row at a
// time, or rows in pairs (two stages per wave, as gemv_stages in matmul_launch.rs counts) for
// several columns where tandem_mv_pairs says so.
template <typename T, int MAXC>
TANDEM_DEVICE void tandem_mv_quant_block(const u8* wbase, i64 nb01, i64 m, i64 k, const char* src1, i64 nb10,
                                         i64 nb11, const char* aq, const char* ads, i64 col0, int ncols, char* out,
                                         i64 out_stride) {
    extern __shared__ __align__(16) u8 tandem_mv_smem[];
    constexpr int NV = tandem_mv_chunk<T>::NV;
    constexpr bool PAIRS = MAXC > 1 && tandem_mv_pairs<T>::value;
    constexpr int STAGES = PAIRS ? 2 : 1;
    const int lane = threadIdx.x % warpSize, ws = warpSize;
    const int nw = blockDim.x / warpSize;
    u8* stage = tandem_mv_smem + (threadIdx.x / warpSize) * STAGES * tandem_mv_chunk<T>::BYTES;
    const tandem_mv_rows rows = tandem_mv_wave_rows(m);
    const tandem_mv_walk<T> wk(wbase, nb01, rows.row0, rows.step, rows.n, k, (((u64)wbase | (u64)nb01) & 15u) == 0);
    uint4 ra[NV], rb[NV];
    // The first two items: items 0 and 1 of the one-row walk, chunk 0 of rows 0 and 1 of the
    // pair walk. Only weights are read before tandem_grid_wait, so under a dependent launch these
    // loads overlap the end of the kernel ahead.
    tandem_mv_pos p = {0, 0};
    wk.fetch(ra, p, lane, ws);
    if constexpr (PAIRS) {
        p.r = 1;
    } else {
        wk.next(p);
    }
    wk.fetch(rb, p, lane, ws);
    tandem_grid_wait();
    // The activations of the block quantizer's first pass: they come from L2 and arrive while the
    // weights are still on their way from memory.
    float xa[TANDEM_MV_QUANT_UNROLL][16];
    if (aq == nullptr)
        tandem_mv_quant_load(xa, src1, nb10, tandem_mv_quant_vec(src1, nb10, nb11), (int)(k / 16), (int)threadIdx.x - lane);
    const i8* qa = (const i8*)aq;
    const float2* qd = (const float2*)ads;
    if (aq == nullptr) {
        i8* sq = (i8*)(tandem_mv_smem + nw * STAGES * tandem_mv_chunk<T>::BYTES);
        float2* sd = (float2*)(sq + ncols * k);
        tandem_mv_quantize_block(src1, nb10, nb11, k, ncols, sq, sd, xa);
        __syncthreads();
        if (MAXC == 1) {
            // Decode: a call of its own for shared columns, so it reads them with shared loads
            // (the multi-column kernels share one call and read through generic loads, which
            // keeps their compile time down).
            tandem_mv_quant_rows<T, MAXC>(wk, ra, rb, stage, k, sq, sd, 0, ncols, out, out_stride);
            return;
        }
        qa = sq;
        qd = sd;
        col0 = 0;
    }
    if constexpr (!PAIRS) {
        tandem_mv_quant_rows<T, MAXC>(wk, ra, rb, stage, k, qa, qd, col0, ncols, out, out_stride);
    } else {
        tandem_mv_pair_rows<T, MAXC>(wk, ra, rb, stage, stage + tandem_mv_chunk<T>::BYTES, k, qa, qd, col0, ncols,
                                     out, out_stride);
    }
}

// Float weights: element i of a row as f32, and V elements from one aligned 16-byte load.
struct tandem_mv_f32 {
    static constexpr int SIZE = 4, V = 4;
    static __device__ __forceinline__ float at(const u8* r, i64 i) { return ((const float*)r)[i]; }
    static __device__ __forceinline__ void vec(uint4 u, float* o) {
        o[0] = __uint_as_float(u.x);
        o[1] = __uint_as_float(u.y);
        o[2] = __uint_as_float(u.z);
        o[3] = __uint_as_float(u.w);
    }
};
struct tandem_mv_f16 {
    static constexpr int SIZE = 2, V = 8;
    static __device__ __forceinline__ float at(const u8* r, i64 i) {
        return tandem_f16_to_f32(((const u16*)r)[i]);
    }
    static __device__ __forceinline__ void vec(uint4 u, float* o) {
        const u32 w[4] = {u.x, u.y, u.z, u.w};
        for (int i = 0; i < 4; ++i) {
            o[2 * i] = tandem_f16_to_f32((u16)(w[i] & 0xffffu));
            o[2 * i + 1] = tandem_f16_to_f32((u16)(w[i] >> 16));
        }
    }
};
struct tandem_mv_bf16 {
    static constexpr int SIZE = 2, V = 8;
    static __device__ __forceinline__ float at(const u8* r, i64 i) {
        return tandem_bf16_to_f32(((const u16*)r)[i]);
    }
    static __device__ __forceinline__ void vec(uint4 u, float* o) {
        const u32 w[4] = {u.x, u.y, u.z, u.w};
        for (int i = 0; i < 4; ++i) {
#if defined(TANDEM_NVIDIA)
            // The low half moved up by a byte permute (bytes: zero, zero, w0, w1) rather than a
            // shift, which NVRTC mostly issues as an integer multiply, on the pipe of the fmas.
            o[2 * i] = __uint_as_float(tandem_prmt(w[i], 0u, 0x1044u));
#else
            o[2 * i] = __uint_as_float(w[i] << 16);
#endif
            o[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
        }
    }
};

// Block-wide sums of acc[r][0..ncols) for rows r < nrows, written to out + r * 4 + j * out_stride
// (bytes) by the first threads.
template <int MAXC, int R>
TANDEM_DEVICE void tandem_mv_block_finish(float (&acc)[R][MAXC], int nrows, int ncols, char* out, i64 out_stride) {
    __shared__ float part[TANDEM_MV_THREADS / 32][R * MAXC];
    const int lane = threadIdx.x % warpSize, wave = threadIdx.x / warpSize;
    const int nwaves = blockDim.x / warpSize;
#pragma unroll
    for (int r = 0; r < R; ++r) {
#pragma unroll
        for (int j = 0; j < MAXC; ++j) {
            if (j < ncols) {
                const float v = tandem_wave_sum(acc[r][j]);
                if (lane == 0) part[wave][r * MAXC + j] = v;
            }
        }
    }
    __syncthreads();
    const int e = threadIdx.x, r = e / ncols, j = e % ncols;
    if (r < nrows) {
        float v = 0.0f;
        for (int w = 0; w < nwaves; ++w) v += part[w][r * MAXC + j];
        *(float*)(out + r * 4 + j * out_stride) = v;
    }
}

// Vectors of float weights per row loaded together per thread by tandem_mv_float_rows (a loop
// that loads one vector and then waits for it keeps a single 16-byte load per thread in flight).
#define TANDEM_MV_FLOAT_BATCH 4
// Rows of a decode (one-column) float GEMV block (mirrors GEMV_FLOAT_ROWS in
// backend/src/gpu/ops/matmul_launch.rs).
#define TANDEM_MV_FLOAT_ROWS 2

// Adds the dots of the R weight vectors u[r] (vector i of each row) with columns 0 .. ncols to
// acc[r]; each activation vector is loaded once for all R rows.
template <typename T, int MAXC, int R>
TANDEM_DEVICE void tandem_mv_float_vecs(const uint4 (&u)[R], i64 i, const char* act, i64 act_stride, int ncols,
                                        float (&acc)[R][MAXC]) {
    float wv[R][T::V];
#pragma unroll
    for (int r = 0; r < R; ++r) T::vec(u[r], wv[r]);
#pragma unroll
    for (int j = 0; j < MAXC; ++j) {
        if (j < ncols) {
            const float4* ap = (const float4*)(act + j * act_stride) + i * (T::V / 4);
#pragma unroll
            for (int q = 0; q < T::V / 4; ++q) {
                const float4 x = ap[q];
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    acc[r][j] += wv[r][4 * q] * x.x + wv[r][4 * q + 1] * x.y + wv[r][4 * q + 2] * x.z +
                                 wv[r][4 * q + 3] * x.w;
                }
            }
        }
    }
}

// nrows (1 .. R) float weight rows, row r at w0 + r * nb01, against f32 columns at act + j *
// act_stride (contiguous rows), walked by the whole block (one block per R rows: one block per
// row was measured faster for f16 than one wave per row, 40 vs 47 us at 14336x4096 on an H200);
// the first threads write the sums.
template <typename T, int MAXC, int R>
TANDEM_DEVICE void tandem_mv_float_rows(const u8* w0, i64 nb01, int nrows, i64 k, const char* act, i64 act_stride,
                                        int ncols, char* out, i64 out_stride) {
    const int t = threadIdx.x, nt = blockDim.x;
    float acc[R][MAXC];
    const u8* wr[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
        // Rows past the last are read as the last one again and their sums dropped.
        wr[r] = w0 + (r < nrows ? r : nrows - 1) * nb01;
#pragma unroll
        for (int j = 0; j < MAXC; ++j) acc[r][j] = 0.0f;
    }
    const u64 align = (u64)w0 | (R > 1 ? (u64)nb01 : 0) | (u64)act | (ncols > 1 ? (u64)act_stride : 0);
    if ((align & 15u) == 0 && k % T::V == 0) {
        const i64 nv = k / T::V;
        i64 i = t;
        for (; i + (TANDEM_MV_FLOAT_BATCH - 1) * nt < nv; i += TANDEM_MV_FLOAT_BATCH * nt) {
            uint4 wq[TANDEM_MV_FLOAT_BATCH][R];
#pragma unroll
            for (int b = 0; b < TANDEM_MV_FLOAT_BATCH; ++b) {
#pragma unroll
                for (int r = 0; r < R; ++r) wq[b][r] = tandem_ld_stream16((const uint4*)wr[r] + i + b * nt);
            }
            // Weights only before it (a dependent launch's first batch overlaps the kernel ahead);
            // once passed, the wait returns at once. The test, always true here, puts the wait in
            // a block of its own: unconditional, ptxas moved these loads below it (NVRTC 13.5).
            if (nv > 0) tandem_grid_wait();
#pragma unroll
            for (int b = 0; b < TANDEM_MV_FLOAT_BATCH; ++b) {
                tandem_mv_float_vecs<T, MAXC, R>(wq[b], i + b * nt, act, act_stride, ncols, acc);
            }
        }
        tandem_grid_wait();
        for (; i < nv; i += nt) {
            uint4 wq[R];
#pragma unroll
            for (int r = 0; r < R; ++r) wq[r] = tandem_ld_stream16((const uint4*)wr[r] + i);
            tandem_mv_float_vecs<T, MAXC, R>(wq, i, act, act_stride, ncols, acc);
        }
    } else {
        tandem_grid_wait();
        for (i64 i = t; i < k; i += nt) {
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const float wv = T::at(wr[r], i);
#pragma unroll
                for (int j = 0; j < MAXC; ++j) {
                    if (j < ncols) acc[r][j] += wv * ((const float*)(act + j * act_stride))[i];
                }
            }
        }
    }
    tandem_mv_block_finish<MAXC, R>(acc, nrows, ncols, out, out_stride);
}

// ---------------------------------------------------------------- one column in segments

// The one-column GEMV of q4_0, iq4_nl and q4_K over contiguous, 16-byte-aligned rows with k a
// multiple of 256 (tandem_gemv_<t>_s1; the launcher's gemv_seg_fits). A segment is a run of
// whole 32-weight groups of a row, a lane's share of one step: eight blocks of q4_0 or iq4_nl,
// one q4_K superblock (144 bytes, 16-byte aligned); four q8_0 blocks (136 bytes, 8-byte
// aligned) or one q6_K superblock (210 bytes, 2-byte aligned), which only the units below take.
// Each wave takes a contiguous stretch of rows, so its weights are one run of bytes. It walks
// them a step (a segment per lane) at a time: the step's consecutive 16-byte loads (the next
// step's issued as soon as this one's are in shared memory) are stored to the wave's stage, from
// where each lane reads its own segment whole, its blocks at offsets the compiler knows (no
// shifts by run-time amounts).
// The lanes' sums are added per row across the wave (rows end anywhere in a step), a row that
// runs on into the next step carrying its sum there. The block quantizes its column into shared
// memory first, laid out as tandem_seg_act_at says.

// c plus 16 times the sum of the products of the high nibbles of q's bytes with b's signed bytes.
TANDEM_DEVICE int tandem_dp4a_hi16(u32 q, int b, int c) {
#if defined(TANDEM_NVIDIA)
    int r;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(q & 0xF0F0F0F0u), "r"(b), "r"(c));
    return r;
#elif defined(__gfx1100__) || defined(__gfx1101__) || defined(__gfx1102__) || defined(__gfx1103__) || \
    defined(__gfx1150__) || defined(__gfx1151__) || defined(__gfx1200__) || defined(__gfx1201__)
    return __builtin_amdgcn_sudot4(false, (int)(q & 0xF0F0F0F0u), true, b, c, false);
#else
    return c + 16 * tandem_dp4a((int)((q >> 4) & 0x0F0F0F0Fu), b, 0);
#endif
}

// The four activation words of unit u of a segment's units at a (swizzled by x).
TANDEM_DEVICE void tandem_seg_act(const uint4* a, int u, int x, int (&v)[4]) {
    const uint4 q = a[u ^ x];
    v[0] = (int)q.x;
    v[1] = (int)q.y;
    v[2] = (int)q.z;
    v[3] = (int)q.w;
}
// Group j's (d, d * sum) pair from a segment's pair units at p (swizzled by y).
TANDEM_DEVICE float2 tandem_seg_pair(const uint4* p, int j, int y) {
    const uint4 q = p[(j / 2) ^ y];
    return (j & 1) ? make_float2(__uint_as_float(q.z), __uint_as_float(q.w))
                   : make_float2(__uint_as_float(q.x), __uint_as_float(q.y));
}

// The f16 and the Q quant words of the 2-byte-aligned block j (2 + 4Q bytes: q4_0 and iq4_nl 18,
// q8_0 34) of words w: block j starts at byte (2 + 4Q) j, 4-byte aligned for even j (its quants
// are not), 2 bytes past a word for odd j (its quants are aligned).
template <int Q, int N>
TANDEM_DEVICE float tandem_seg_block(const u32 (&w)[N], int j, u32 (&q)[Q]) {
    const int b = (2 * Q + 1) * (j / 2) + Q * (j & 1);
    if ((j & 1) == 0) {
#pragma unroll
        for (int t = 0; t < Q; ++t) q[t] = tandem_shr64(w[b + t], w[b + t + 1], 16);
        return tandem_f16_to_f32((u16)(w[b] & 0xffffu));
    }
#pragma unroll
    for (int t = 0; t < Q; ++t) q[t] = w[b + 1 + t];
    return tandem_f16_to_f32((u16)(w[b] >> 16));
}

// Segment types: G groups in BYTES bytes; dot() takes the segment's words w, its 2G units of
// int8 activations at a (swizzled by x), its G / 2 units of pairs at p (swizzled by y).
struct tandem_seg_q4_0 {
    static constexpr int G = 8, BYTES = 144;
    static constexpr bool PARTS = false;
    static __device__ __forceinline__ float dot(const u32 (&w)[BYTES / 4], const uint4* a, const uint4* p, int x,
                                                int y, const uint4*) {
        float acc = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            u32 q[4];
            const float d = tandem_seg_block<4>(w, j, q);
            int lo[4], hi[4];
            tandem_seg_act(a, 2 * j, x, lo);
            tandem_seg_act(a, 2 * j + 1, x, hi);
            const float2 ds = tandem_seg_pair(p, j, y);
            int sl = 0, sh = 0;
#pragma unroll
            for (int t = 0; t < 4; ++t) {
                sl = tandem_dp4a((int)(q[t] & 0x0F0F0F0Fu), lo[t], sl);
                sh = tandem_dp4a_hi16(q[t], hi[t], sh);
            }
            acc += d * (ds.x * (float)(sl + (sh >> 4)) - 8.0f * ds.y);
        }
        return acc;
    }
};

struct tandem_seg_iq4_nl {
    static constexpr int G = 8, BYTES = 144;
    static constexpr bool PARTS = false;
    static __device__ __forceinline__ float dot(const u32 (&w)[BYTES / 4], const uint4* a, const uint4* p, int x,
                                                int y, const uint4*) {
        float acc = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            u32 q[4];
            const float d = tandem_seg_block<4>(w, j, q);
            int lo[4], hi[4];
            tandem_seg_act(a, 2 * j, x, lo);
            tandem_seg_act(a, 2 * j + 1, x, hi);
            const float2 ds = tandem_seg_pair(p, j, y);
            int s = 0;
#pragma unroll
            for (int t = 0; t < 4; ++t) {
                u32 vl, vh;
                tandem_iq4nl_levels8(q[t], vl, vh);
                s = tandem_dp4a((int)vl, lo[t], s);
                s = tandem_dp4a((int)vh, hi[t], s);
            }
            acc += d * ds.x * (float)s;
        }
        return acc;
    }
};

// q8_0: four blocks (136 bytes, 8-byte aligned), whose quants meet the activations as they are.
struct tandem_seg_q8_0 {
    static constexpr int G = 4, BYTES = 136;
    static constexpr bool PARTS = false;
    static __device__ __forceinline__ float dot(const u32 (&w)[BYTES / 4], const uint4* a, const uint4* p, int x,
                                                int y, const uint4*) {
        float acc = 0.0f;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            u32 q[8];
            const float d = tandem_seg_block<8>(w, j, q);
            int lo[4], hi[4];
            tandem_seg_act(a, 2 * j, x, lo);
            tandem_seg_act(a, 2 * j + 1, x, hi);
            const float2 ds = tandem_seg_pair(p, j, y);
            int s = 0;
#pragma unroll
            for (int t = 0; t < 4; ++t) {
                s = tandem_dp4a((int)q[t], lo[t], s);
                s = tandem_dp4a((int)q[4 + t], hi[t], s);
            }
            acc += d * ds.x * (float)s;
        }
        return acc;
    }
};

// q6_K: one superblock (210 bytes, 2-byte aligned): the low nibbles in words 0..31 (group g =
// 4n + j: words 16n + 8 (j & 1) .., nibble j / 2), the high two bits in words 32..47 (words
// 32 + 8n .., bits 2j), the sixteen int8 scales (one per 16 values) in words 48..51, d in the
// low half of word 52. The 6-bit values q meet the activations as they are; each 16 values'
// (q - 32) a is their sum less 32 times the activations' sum, which the block quantizer keeps
// (PARTS; ps: the segment's four units of them) rather than each lane summing them again.
struct tandem_seg_q6_K {
    static constexpr int G = 8, BYTES = 210;
    static constexpr bool PARTS = true;
    static __device__ __forceinline__ float dot(const u32 (&w)[(BYTES + 3) / 4], const uint4* a, const uint4* p,
                                                int x, int y, const uint4* ps) {
        float acc = 0.0f;
#pragma unroll
        for (int g = 0; g < 8; ++g) {
            const int n = g >> 2, j = g & 3;
            const int lw = 16 * n + 8 * (j & 1), hw = 32 + 8 * n, ls = 4 * (j >> 1), hs = 2 * j;
            int lo[4], hi[4];
            tandem_seg_act(a, 2 * g, x, lo);
            tandem_seg_act(a, 2 * g + 1, x, hi);
            const uint4 pu = ps[(g / 2) ^ y];
            const int pt[4] = {(int)pu.x, (int)pu.y, (int)pu.z, (int)pu.w};
            int sum = 0;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                int sq = 0;
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const u32 l = (w[lw + 4 * h + i] >> ls) & 0x0F0F0F0Fu;
                    const u32 u = (w[hw + 4 * h + i] >> hs) & 0x03030303u;
                    const int av = h ? hi[i] : lo[i];
                    sq = tandem_dp4a((int)(l | (u << 4)), av, sq);
                }
                const int e = 2 * g + h;
                const int sc = (int)(i8)((w[48 + e / 4] >> (8 * (e % 4))) & 0xffu);
                sum += sc * (sq - 32 * pt[2 * (g & 1) + h]);
            }
            acc += tandem_seg_pair(p, g, y).x * (float)sum;
        }
        return tandem_f16_to_f32((u16)(w[52] & 0xffffu)) * acc;
    }
};

// q4_K: d and dmin in word 0, the twelve scale bytes in words 1..3 (group g < 4: scale byte g,
// min byte g + 4, six bits each; g >= 4: low four bits from byte g + 4, high two from the top
// bits of bytes g - 4 and g), quants in words 4..35 (groups 2i and 2i + 1: the low and high
// nibbles of words 4 + 8i ..).
struct tandem_seg_q4_K {
    static constexpr int G = 8, BYTES = 144;
    static constexpr bool PARTS = false;
    static __device__ __forceinline__ float dot(const u32 (&w)[BYTES / 4], const uint4* a, const uint4* p, int x,
                                                int y, const uint4*) {
        const float d = tandem_f16_to_f32((u16)(w[0] & 0xffffu)), dmin = tandem_f16_to_f32((u16)(w[0] >> 16));
        const u32 sc[2] = {w[1] & 0x3f3f3f3fu, (w[3] & 0x0f0f0f0fu) | ((w[1] >> 2) & 0x30303030u)};
        const u32 mn[2] = {w[2] & 0x3f3f3f3fu, ((w[3] >> 4) & 0x0f0f0f0fu) | ((w[2] >> 2) & 0x30303030u)};
        float acc = 0.0f, accm = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            int sl = 0, sh = 0;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                int lo[4], hi[4];
                tandem_seg_act(a, 4 * i + h, x, lo);
                tandem_seg_act(a, 4 * i + 2 + h, x, hi);
#pragma unroll
                for (int t = 0; t < 4; ++t) {
                    const u32 q = w[4 + 8 * i + 4 * h + t];
                    sl = tandem_dp4a((int)(q & 0x0F0F0F0Fu), lo[t], sl);
                    sh = tandem_dp4a_hi16(q, hi[t], sh);
                }
            }
            const float2 d0 = tandem_seg_pair(p, 2 * i, y), d1 = tandem_seg_pair(p, 2 * i + 1, y);
            const int g0 = 2 * i, g1 = 2 * i + 1;
            const int s0 = (int)((sc[g0 / 4] >> (8 * (g0 % 4))) & 0xffu), s1 = (int)((sc[g1 / 4] >> (8 * (g1 % 4))) & 0xffu);
            const int m0 = (int)((mn[g0 / 4] >> (8 * (g0 % 4))) & 0xffu), m1 = (int)((mn[g1 / 4] >> (8 * (g1 % 4))) & 0xffu);
            acc += d0.x * (float)(s0 * sl) + d1.x * (float)(s1 * (sh >> 4));
            accm += d0.y * (float)m0 + d1.y * (float)m1;
        }
        return d * acc - dmin * accm;
    }
};

// The words of a lane's segment in its wave's stage, with 16-byte loads (a wave's lanes reach
// distinct banks: consecutive segments start 144 bytes, nine 16-byte units, apart), or 8-byte
// loads for segments of 8-byte units (q8_0: 136 bytes, 34 words apart, so the sixteen lanes of
// one pass reach distinct banks), or for 2-byte-aligned segments (q6_K: 210 bytes) the aligned
// words that cover it, shifted into place (no load past the segment's last word).
template <int BYTES>
TANDEM_DEVICE void tandem_seg_words(const u8* seg, u32 (&w)[(BYTES + 3) / 4]) {
    static_assert(BYTES % 8 == 0 || BYTES % 4 == 2, "segments of 8-byte units, or 2-byte aligned");
    if constexpr (BYTES % 4 == 2) {
        constexpr int N = (BYTES + 3) / 4;
        u32 r[N];
        const int sh = tandem_aligned_words<N>(seg, r);
#pragma unroll
        for (int t = 0; t < N; ++t) w[t] = tandem_shr64(r[t], t + 1 < N ? r[t + 1] : 0u, sh);
    } else if constexpr (BYTES % 16 == 0) {
#pragma unroll
        for (int t = 0; t < BYTES / 16; ++t) {
            const uint4 q = ((const uint4*)seg)[t];
            w[4 * t] = q.x;
            w[4 * t + 1] = q.y;
            w[4 * t + 2] = q.z;
            w[4 * t + 3] = q.w;
        }
    } else {
#pragma unroll
        for (int t = 0; t < BYTES / 8; ++t) {
            const uint2 q = ((const uint2*)seg)[t];
            w[2 * t] = q.x;
            w[2 * t + 1] = q.y;
        }
    }
}

// The segment GEMV of one column (a block per grid.x of each batch grid.y).
template <typename T>
TANDEM_DEVICE void tandem_gemv_seg(const char* w, const char* src1, const char* gb, char* dst,
                                   const tandem_mm_shape& s) {
    extern __shared__ __align__(16) u8 tandem_mv_smem[];
    constexpr int NV = (T::BYTES + 15) / 16;  // 16-byte loads per lane and step, at most
    tandem_grid_release();
    const i64 b = blockIdx.y;
    if (b >= s.ne12 * s.ne13) return;
    i64 i12 = 0, i13 = 0;
    const u8* wbase = (const u8*)w;
    if (b > 0) {
        i12 = b % s.ne12;
        i13 = b / s.ne12;
        wbase += (i12 / s.r2) * s.nb02 + (i13 / s.r3) * s.nb03;
    }
    const int lane = threadIdx.x % warpSize, ws = warpSize;
    const int wave = threadIdx.x / warpSize, nw = blockDim.x / warpSize;
    const int step16 = ws * T::BYTES / 16;  // 16-byte units of a step
    uint4* stage = (uint4*)tandem_mv_smem + wave * step16;
    // This wave's rows [ra, rb): the grid's waves split the rows evenly, the first m % nwt
    // waves taking one more (32-bit divisions where the rows fit them, as every real weight's do).
    const i64 nwt = (i64)gridDim.x * nw, gw = (i64)blockIdx.x * nw + wave;
    i64 per, extra;
    if (s.m <= 0xffffffffll) {
        per = (u32)s.m / (u32)nwt;
        extra = (u32)s.m % (u32)nwt;
    } else {
        per = s.m / nwt;
        extra = s.m % nwt;
    }
    const i64 ra = gw * per + (gw < extra ? gw : extra);
    const i64 rb = ra + per + (gw < extra ? 1 : 0);
    const int S = (int)(s.k / (32 * T::G));  // segments per row
    const i64 items = (rb - ra) * S;
    const i64 n16 = items * T::BYTES / 16;
    const uint4* src = (const uint4*)(wbase + ra * s.nb01);
    uint4 r[NV];
#pragma unroll
    for (int t = 0; t < NV; ++t) {
        const int u = lane + t * ws;
        if (u < step16 && u < n16) r[t] = tandem_ld_stream16(src + u);
    }
    // Weights only before it (under a dependent launch these loads overlap the kernel ahead).
    // The test, always true, puts the wait in a block of its own: unconditional, ptxas moved the
    // loads below it (NVRTC 13.5).
    if (gw < nwt) tandem_grid_wait();
    const char* act = src1 + i12 * s.nb12 + i13 * s.nb13;
    const int glu = tandem_mm_glu(s.flags);
    const char* gact = glu > 0 ? gb + i12 * s.nb12 + i13 * s.nb13 : nullptr;
    float xa[TANDEM_MV_QUANT_UNROLL][16];
    tandem_mv_quant_load(xa, act, s.nb10, tandem_mv_quant_vec2(act, gact, s.nb10, s.nb11), (int)(s.k / 16),
                         (int)threadIdx.x - lane, gact, glu);
    i8* sq = (i8*)(tandem_mv_smem + nw * step16 * 16);
    float2* sd = (float2*)(sq + s.k);
    int* sp = (int*)(sd + s.k / 32);  // PARTS: the halves' sums
    tandem_mv_quantize_block<T::G, T::PARTS>(act, s.nb10, s.nb11, s.k, 1, sq, sd, xa, sp, gact, glu);
    __syncthreads();
    char* out = dst + i12 * s.nb2 + i13 * s.nb3 + ra * 4;
    int rr = lane / S, sg = lane % S;  // the lane's item: segment sg of the wave's row rr
    float carry = 0.0f;
    for (i64 base = 0; base < items; base += ws) {
        const i64 b16 = base * T::BYTES / 16;
#pragma unroll
        for (int t = 0; t < NV; ++t) {
            const int u = lane + t * ws;
            if (u < step16 && b16 + u < n16) stage[u] = r[t];
        }
        tandem_wave_sync();
#pragma unroll
        for (int t = 0; t < NV; ++t) {
            const int u = lane + t * ws;
            if (u < step16 && b16 + step16 + u < n16) r[t] = tandem_ld_stream16(src + b16 + step16 + u);
        }
        const bool valid = base + lane < items;
        float v = 0.0f;
        if (valid) {
            u32 wv[(T::BYTES + 3) / 4];
            tandem_seg_words<T::BYTES>((const u8*)stage + lane * T::BYTES, wv);
            v = T::dot(wv, (const uint4*)sq + 2 * T::G * sg, (const uint4*)sd + T::G / 2 * sg, sg & 7,
                       tandem_seg_pair_x<T::G>(sg), (const uint4*)sp + T::G / 2 * sg);
        }
        tandem_wave_sync();
        // Each lane adds the lanes after it in its row (a lane o further on is in the same row
        // when sg + o < S), so the row's first lane in this step ends up with their sum.
        for (int o = 1; o < ws; o <<= 1) {
            const float t = __shfl_down(v, o);
            if (lane + o < ws && sg + o < S) v += t;
        }
        const float total = v + (lane == 0 ? carry : 0.0f);
        // The last lane's row runs on into the next step unless it ends there; its first lane in
        // this step is ws - 1 - (its segment), or lane 0.
        const int sl = __shfl(sg, ws - 1);
        const bool open = base + ws - 1 < items && sl < S - 1;
        const int head = ws - 1 - sl > 0 ? ws - 1 - sl : 0;
        const float tail = __shfl(total, head);
        if (valid && (sg == 0 || lane == 0) && lane + (S - 1 - sg) < ws) *(float*)(out + (i64)rr * 4) = total;
        carry = open ? tail : 0.0f;
        sg += ws;
        while (sg >= S) {
            sg -= S;
            ++rr;
        }
    }
}

// The segment GEMV in units copies its steps with cp.async (NVIDIA sm_80 and newer; seg_slots
// in matmul_launch.rs) into a ring of stage slots per wave, filling some while the lanes dot
// another.
#if defined(TANDEM_NVIDIA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define TANDEM_SEG_ASYNC 1
#endif

#if defined(TANDEM_SEG_ASYNC)
// The shared-memory address of p.
TANDEM_DEVICE u32 tandem_seg_smem(const void* p) {
    u32 a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}
// One 16-byte unit from global memory to shared address dst, not waiting (cp.async; kept out
// of L1).
TANDEM_DEVICE void tandem_seg_cp16(u32 dst, const uint4* src) {
#if defined(TANDEM_L2_HINT)
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(dst), "l"(src),
                 "l"(tandem_weight_policy())
                 : "memory");
#else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
#endif
}
#endif

// The segment GEMV of one column in units (tandem_gemv_<t>_u1, a block per grid.x of each batch
// grid.y; tandem_mmid_<t>_u1, of each MUL_MAT_ID slot). The rows go in units of R = ws / S whole
// rows of S segments, S dividing the wave (the launcher's seg_in_units), so a unit is one full
// step and every row's sum is complete within it. The grid's waves take units gw, gw + (waves of
// the grid), ... (at any moment the grid reads one compact stretch of the matrix, which streams
// from memory faster than one stretch per wave); lane l of a unit's step holds segment l % S of
// the unit's row l / S. Each wave copies its steps with cp.async into a ring of SLOTS stage
// slots, SLOTS - 1 steps ahead of the one its lanes dot (the first SLOTS - 1 before
// tandem_grid_wait, and with act_early all the steps up to HELD). With one slot
// (tandem_gemv_<t>_n1, for grids where no wave has more than one step) a wave copies its next
// step only once its lanes have dotted the last; the launcher gives that kernel only grids of at
// most one step a wave, where it takes half the shared memory and, with fewer registers, lets
// three blocks share an SM (two kernels' blocks beside one that ends).

// Steps whose sums a wave of the units walk holds until its tandem_grid_wait (act_early).
#define TANDEM_SEGU_HELD 2

#if defined(TANDEM_SEG_ASYNC)
// The units walk of m rows of k weights at wbase (back to back, 16-byte aligned) against the
// column at act (element stride nb10; nb11 only for the vector-load test), the row sums to the
// f32 run at out. With act_early the column is read and quantized before tandem_grid_wait (the
// launcher knows no kernel ahead still writes it); nothing but shared memory is written before
// the wait either way.
template <typename T, int SLOTS, int HELD = TANDEM_SEGU_HELD>
TANDEM_DEVICE void tandem_segu_rows(const u8* wbase, i64 m, i64 k, const char* act, i64 nb10, i64 nb11, char* out,
                                    bool act_early, const char* gb = nullptr, int glu = 0) {
    static_assert(SLOTS >= 1 && HELD >= 1, "a slot to copy into, a step to hold");
    // Steps copied before the first is dotted, and the cp.async groups a pass may leave pending.
    constexpr int AHEAD = SLOTS > 1 ? SLOTS - 1 : 1, PENDING = SLOTS > 1 ? SLOTS - 2 : 0;
    extern __shared__ __align__(16) u8 tandem_mv_smem[];
    constexpr int NV = (T::BYTES + 15) / 16;  // 16-byte loads per lane and step, at most
    const int lane = threadIdx.x % warpSize, ws = warpSize;
    const int wave = threadIdx.x / warpSize, nw = blockDim.x / warpSize;
    const int step16 = ws * T::BYTES / 16;  // 16-byte units of a step
    uint4* stage = (uint4*)tandem_mv_smem + wave * SLOTS * step16;
    const int S = (int)(k / (32 * T::G));  // segments per row, dividing ws
    const int R = (int)((u32)ws / (u32)S);
    // 32-bit divisions: the launcher keeps m (so the units and waves) below 2^31.
    const u32 nwt = gridDim.x * (u32)nw, gw = blockIdx.x * (u32)nw + (u32)wave;
    const u32 units = ((u32)m + (u32)R - 1) / (u32)R;
    const i64 unit_bytes = (i64)ws * T::BYTES;
    // This wave's steps: units gw, gw + nwt, ...
    const i64 nsteps = gw < units ? (i64)((units - 1 - gw) / nwt + 1) : 0;
    // Step i of this wave (unit gw + i nwt) into slot i % SLOTS; the last unit may hold fewer
    // rows, so fewer 16-byte units.
    const u32 stage_at = tandem_seg_smem(stage);
    const auto fetch = [&](i64 i) {
        const i64 u = gw + i * nwt;
        const uint4* src = (const uint4*)(wbase + u * unit_bytes);
        const i64 rows = m - u * R < R ? m - u * R : R;
        const i64 left = rows * S * T::BYTES / 16;
        const int n16 = (int)(left < step16 ? left : step16);
        const u32 at = stage_at + (u32)((int)(i % SLOTS) * step16 * 16);
#pragma unroll
        for (int t = 0; t < NV; ++t) {
            const int v = lane + t * ws;
            if (v < step16 && v < n16) tandem_seg_cp16(at + (u32)v * 16u, src + v);
        }
    };
    // With act_early, where all of the wave's steps are held until its wait, the column's first
    // values are asked for ahead of the weights: behind the wave's 16-byte weight copies they
    // came in after them, and its lanes dotted only once the column had come and been quantized.
    // (Waves of more steps ask for it after their first steps' weights, as before: first, q4_0
    // 14336 x 4096 took 8.41 against 8.21 µs back to back on an H200.)
    float xa[TANDEM_MV_QUANT_UNROLL][16];
    const bool vec = tandem_mv_quant_vec2(act, gb, nb10, nb11);
    const bool act_first = act_early && nsteps <= HELD;
    if (act_first) tandem_mv_quant_load(xa, act, nb10, vec, (int)(k / 16), (int)threadIdx.x - lane, gb, glu);
    // Every pass commits one group (empty past the last step), so that waiting for all but the
    // newest PENDING groups means this pass's step is in.
#pragma unroll
    for (int i = 0; i < AHEAD; ++i) {
        if (i < nsteps) fetch(i);
        asm volatile("cp.async.commit_group;" ::: "memory");
    }
    // Weights only before it (under a dependent launch these loads overlap the kernel ahead),
    // and the column with act_early. The test, always true, puts the wait in a block of its own:
    // unconditional, ptxas moved the loads below it (NVRTC 13.5).
    if (!act_early && gw < nwt) tandem_grid_wait();
    if (!act_first) tandem_mv_quant_load(xa, act, nb10, vec, (int)(k / 16), (int)threadIdx.x - lane, gb, glu);
    i8* sq = (i8*)(tandem_mv_smem + nw * SLOTS * step16 * 16);
    float2* sd = (float2*)(sq + k);
    int* sp = (int*)(sd + k / 32);  // PARTS: the halves' sums
    tandem_mv_quantize_block<T::G, T::PARTS>(act, nb10, nb11, k, 1, sq, sd, xa, sp, gb, glu);
    __syncthreads();
    const int rr = lane / S, sg = lane % S;  // the lane's segment sg of the unit's row rr
    // With act_early nothing ahead of the stores waits for the kernels ahead: the sums of the
    // wave's first HELD steps are held in registers (lanes of segment 0) and written
    // after tandem_grid_wait, at the step after them or after the last, so a dependent launch
    // reads, quantizes and dots while the kernel ahead still runs. Without it the wait came
    // before the column was read.
    bool waited = !act_early;
    float held[HELD];
    const auto row_of = [&](i64 i) { return (gw + i * nwt) * R + rr; };
    // The wait (wave-uniform: after step `upto` - 1, or with no step at all never needed), then
    // the held sums of steps 0 .. upto - 1.
    const auto release = [&](i64 upto) {
        tandem_grid_wait();
        waited = true;
#pragma unroll
        for (int h = 0; h < HELD; ++h) {
            if (h < upto && sg == 0 && row_of(h) < m) *(float*)(out + row_of(h) * 4) = held[h];
        }
    };
    for (i64 i = 0; i < nsteps; ++i) {
        const i64 u = gw + i * nwt;
        if (SLOTS == 1 && i > 0) {
            // One slot: step i goes where the lanes dotted step i - 1 in the last pass.
            tandem_wave_sync();
            fetch(i);
            asm volatile("cp.async.commit_group;" ::: "memory");
        }
        asm volatile("cp.async.wait_group %0;" ::"n"(PENDING) : "memory");
        tandem_wave_sync();
        // The slot of step i + SLOTS - 1 held step i - 1, dotted in the last pass by every lane
        // (the sync above).
        if (SLOTS > 1) {
            if (i + SLOTS - 1 < nsteps) fetch(i + SLOTS - 1);
            asm volatile("cp.async.commit_group;" ::: "memory");
        }
        const uint4* here = stage + (int)(i % SLOTS) * step16;
        const i64 rows = m - u * R < R ? m - u * R : R;
        const bool valid = rr < rows;
        float v = 0.0f;
        if (valid) {
            u32 wv[(T::BYTES + 3) / 4];
            tandem_seg_words<T::BYTES>((const u8*)here + lane * T::BYTES, wv);
            v = T::dot(wv, (const uint4*)sq + 2 * T::G * sg, (const uint4*)sd + T::G / 2 * sg, sg & 7,
                       tandem_seg_pair_x<T::G>(sg), (const uint4*)sp + T::G / 2 * sg);
        }
        // Each lane adds the lanes after it in its row (a lane o further on is in the same row
        // when sg + o < S), so the row's first lane ends up with the row's sum.
        for (int o = 1; o < S; o <<= 1) {
            const float t = __shfl_down(v, o);
            if (sg + o < S) v += t;
        }
        if (!waited && i < HELD) {
#pragma unroll
            for (int h = 0; h < HELD; ++h) {
                if (h == i) held[h] = v;
            }
            continue;
        }
        if (!waited) release(HELD);
        if (valid && sg == 0) *(float*)(out + (u * R + rr) * 4) = v;
    }
    if (!waited && nsteps > 0) release(nsteps);
    asm volatile("cp.async.wait_group 0;" ::: "memory");
}
#endif

template <typename T, int SLOTS, int HELD = TANDEM_SEGU_HELD>
TANDEM_DEVICE void tandem_gemv_segu(const char* w, const char* src1, const char* gb, char* dst,
                                    const tandem_mm_shape& s) {
#if !defined(TANDEM_SEG_ASYNC)
    // Never launched without cp.async (seg_in_units); the stretch walk keeps the entry whole.
    tandem_gemv_seg<T>(w, src1, gb, dst, s);
#else
    tandem_grid_release();
    const i64 b = blockIdx.y;
    if (b >= s.ne12 * s.ne13) return;
    i64 i12 = 0, i13 = 0;
    const u8* wbase = (const u8*)w;
    if (b > 0) {
        i12 = b % s.ne12;
        i13 = b / s.ne12;
        wbase += (i12 / s.r2) * s.nb02 + (i13 / s.r3) * s.nb03;
    }
    const int glu = tandem_mm_glu(s.flags);
    tandem_segu_rows<T, SLOTS, HELD>(wbase, s.m, s.k, src1 + i12 * s.nb12 + i13 * s.nb13, s.nb10, s.nb11,
                                     dst + i12 * s.nb2 + i13 * s.nb3, (s.flags & TANDEM_MM_ACT_EARLY) != 0,
                                     glu > 0 ? gb + i12 * s.nb12 + i13 * s.nb13 : nullptr, glu);
#endif
}

// ---------------------------------------------------------------- kernels

// MUL_MAT, quantized weights: block (row groups, batch); with aq null the block quantizes
// its batch's columns itself, else columns of batch b are q8_1 columns b * n ...
template <typename T, int MAXC>
TANDEM_DEVICE void tandem_gemv_quant(const char* w, const char* src1, const char* aq, const char* ads, char* dst,
                                     const tandem_mm_shape& s) {
    tandem_grid_release();
    const i64 b = blockIdx.y;
    if (b >= s.ne12 * s.ne13) return;
    // Batch 0 (every batch of a 2-D product) needs none of the divisions, which would stand
    // between the block's start and its first weight loads.
    i64 i12 = 0, i13 = 0;
    const u8* wbase = (const u8*)w;
    if (b > 0) {
        i12 = b % s.ne12;
        i13 = b / s.ne12;
        wbase += (i12 / s.r2) * s.nb02 + (i13 / s.r3) * s.nb03;
    }
    tandem_mv_quant_block<T, MAXC>(wbase, s.nb01, s.m, s.k, src1 + i12 * s.nb12 + i13 * s.nb13, s.nb10,
                                   s.nb11, aq, ads, b * s.n, (int)s.n, dst + i12 * s.nb2 + i13 * s.nb3, s.nb1);
}

// MUL_MAT, float weights: block (R rows, batch); src1 is read directly.
template <typename T, int MAXC, int R>
TANDEM_DEVICE void tandem_gemv_float(const char* w, const char* src1, char* dst, const tandem_mm_shape& s) {
    tandem_grid_release();
    const i64 b = blockIdx.y;
    if (b >= s.ne12 * s.ne13) return;
    const i64 i12 = b % s.ne12, i13 = b / s.ne12;
    const char* act = src1 + i12 * s.nb12 + i13 * s.nb13;
    const i64 row = (i64)blockIdx.x * R;
    if (row >= s.m) return;
    const int nrows = (int)(s.m - row < R ? s.m - row : R);
    const u8* wrow = (const u8*)w + row * s.nb01 + (i12 / s.r2) * s.nb02 + (i13 / s.r3) * s.nb03;
    char* out = dst + row * 4 + i12 * s.nb2 + i13 * s.nb3;
    tandem_mv_float_rows<T, MAXC, R>(wrow, s.nb01, nrows, s.k, act, s.nb11, (int)s.n, out, s.nb1);
}

// The expert of slot (u, t), or -1 when ids holds no valid expert index there.
TANDEM_DEVICE i64 tandem_mmid_expert(const char* ids, const tandem_mmid_shape& s, i64 u, i64 t) {
    const i32 e = *(const i32*)(ids + u * s.ids_nb0 + t * s.ids_nb1);
    return (e >= 0 && (i64)e < s.n_expert) ? (i64)e : -1;
}

// Writes NaN to this wave's rows of a slot whose expert index is bad (no weight is read).
TANDEM_DEVICE void tandem_mmid_poison(char* out, i64 m) {
    const tandem_mv_rows rows = tandem_mv_wave_rows(m);
    if (threadIdx.x % warpSize != 0) return;
    for (int ri = 0; ri < rows.n; ++ri) *(float*)(out + (rows.row0 + ri * rows.step) * 4) = __int_as_float(0x7fc00000);
}

// MUL_MAT_ID: block (row groups, slot u + n_used * t); slot (u, t) reads src1 row
// (u % n_b, t) and writes dst[row, u, t]. A bad expert index yields NaN, never a read outside
// the experts. With aq null the block quantizes its slot's column itself.
template <typename T>
TANDEM_DEVICE void tandem_mmid_quant(const char* w, const char* src1, const char* aq, const char* ads,
                                     const char* ids, char* dst, const tandem_mmid_shape& s) {
    // The expert ids may come from the kernels ahead: unless the launcher knows they are in
    // place (TANDEM_MMID_IDS_EARLY), nothing is read before the wait. Otherwise the ids and the
    // first weights are read before it (tandem_mv_quant_block waits after its first loads).
    tandem_grid_release();
    if ((s.flags & TANDEM_MMID_IDS_EARLY) == 0) tandem_grid_wait();
    const i64 slot = blockIdx.y;
    if (slot >= s.n_used * s.n_tokens) return;
    const i64 u = slot % s.n_used, t = slot / s.n_used;
    const i64 e = tandem_mmid_expert(ids, s, u, t);
    char* out = dst + u * s.nb1 + t * s.nb2;
    if (e < 0) {
        tandem_grid_wait();
        tandem_mmid_poison(out, s.m);
        return;
    }
    const i64 b1 = u % s.n_b;
    tandem_mv_quant_block<T, 1>((const u8*)w + e * s.nb02, s.nb01, s.m, s.k, src1 + b1 * s.nb11 + t * s.nb12,
                                s.nb10, 0, aq, ads, b1 + s.n_b * t, 1, out, 0);
}

// MUL_MAT_ID, float weights: block (row, slot).
template <typename T>
TANDEM_DEVICE void tandem_mmid_float(const char* w, const char* src1, const char* ids, char* dst,
                                     const tandem_mmid_shape& s) {
    tandem_grid_release();
    tandem_grid_wait();
    const i64 slot = blockIdx.y;
    if (slot >= s.n_used * s.n_tokens) return;
    const i64 u = slot % s.n_used, t = slot / s.n_used;
    const i64 e = tandem_mmid_expert(ids, s, u, t);
    const char* act = src1 + (u % s.n_b) * s.nb11 + t * s.nb12;
    const i64 row = blockIdx.x;
    if (row >= s.m) return;
    char* out = dst + row * 4 + u * s.nb1 + t * s.nb2;
    if (e < 0) {
        if (threadIdx.x == 0) *(float*)out = __int_as_float(0x7fc00000);
        return;
    }
    const u8* wrow = (const u8*)w + row * s.nb01 + e * s.nb02;
    tandem_mv_float_rows<T, 1, 1>(wrow, s.nb01, 1, s.k, act, 0, 1, out, 0);
}

// MUL_MAT_ID in units (tandem_mmid_<t>_u1): block (units of the slot's expert, slot u + n_used * t),
// as the GEMV form's tandem_mmid_quant but the expert's rows walked as tandem_gemv_<t>_u1 walks
// a batch's. With TANDEM_MMID_IDS_EARLY the ids and the first steps are read before the wait. A
// bad expert index gives NaN rows (this block's units), no weight read.
template <typename T, int SLOTS>
TANDEM_DEVICE void tandem_mmid_segu(const char* w, const char* src1, const char* ids, char* dst,
                                    const tandem_mmid_shape& s) {
    tandem_grid_release();
    if ((s.flags & TANDEM_MMID_IDS_EARLY) == 0) tandem_grid_wait();
    const i64 slot = blockIdx.y;
    if (slot >= s.n_used * s.n_tokens) return;
    const i64 u = slot % s.n_used, t = slot / s.n_used;
    const i64 e = tandem_mmid_expert(ids, s, u, t);
    char* out = dst + u * s.nb1 + t * s.nb2;
#if defined(TANDEM_SEG_ASYNC)
    if (e >= 0) {
        tandem_segu_rows<T, SLOTS>((const u8*)w + e * s.nb02, s.m, s.k, src1 + (u % s.n_b) * s.nb11 + t * s.nb12,
                                   s.nb10, 0, out,
                                   (s.flags & TANDEM_MMID_ACT_EARLY) != 0);
        return;
    }
#endif
    // A bad index (or, never launched so, a device without cp.async): NaN in this block's share
    // of the rows, the units of its waves.
    tandem_grid_wait();
    const int S = (int)(s.k / (32 * T::G)), R = warpSize / S;
    const i64 units = (s.m + R - 1) / R, nwt = (i64)gridDim.x * (blockDim.x / warpSize);
    const int lane = threadIdx.x % warpSize;
    for (i64 un = (i64)blockIdx.x * (blockDim.x / warpSize) + threadIdx.x / warpSize; un < units; un += nwt) {
        if (un * R + lane < s.m && lane < R) *(float*)(out + (un * R + lane) * 4) = __int_as_float(0x7fc00000);
    }
}

// f32 activations to q8_1: four consecutive values per thread (one 16-byte load where the
// column is contiguous and aligned), eight threads per 32-value group (tandem_q8_part). Grid: x
// over k in 1024s, y over columns. k is a multiple of 32, so a group's threads are all inside k
// or all past it.
#define TANDEM_Q8_VALUES 4
#if TANDEM_UNIT_ALL || TANDEM_UNIT_COMMON
extern "C" __global__ void __launch_bounds__(256)
tandem_quantize_q8_1(const char* src, i8* aq, float2* ads, tandem_q8_shape s) {
    const i64 i = TANDEM_Q8_VALUES * ((i64)blockIdx.x * blockDim.x + threadIdx.x);
    const i64 cols = s.ne1 * s.ne2 * s.ne3;
    const i64 groups = s.k / 32;
    for (i64 c = blockIdx.y; c < cols; c += gridDim.y) {
        // Column indices in 32 bits: the copy has at most 2^30 columns (it fits MAX_SCRATCH).
        const u32 cc = (u32)c, n1 = (u32)s.ne1, n2 = (u32)s.ne2;
        const char* col = src + (i64)(cc % n1) * s.nb1 + (i64)((cc / n1) % n2) * s.nb2 + (i64)(cc / (n1 * n2)) * s.nb3;
        const bool in = i < s.k;
        float x[TANDEM_Q8_VALUES];
        if (in && s.nb0 == 4 && ((u64)(col + i * 4) & 15u) == 0) {
            const float4 v = *(const float4*)(col + i * 4);
            x[0] = v.x;
            x[1] = v.y;
            x[2] = v.z;
            x[3] = v.w;
        } else {
#pragma unroll
            for (int e = 0; e < TANDEM_Q8_VALUES; ++e) x[e] = in ? *(const float*)(col + (i + e) * s.nb0) : 0.0f;
        }
        u32 packed[1];
        float d;
        int sum;
        tandem_q8_part<TANDEM_Q8_VALUES>(x, packed, d, sum);
        if (in) {
            *(u32*)(aq + c * s.k + i) = packed[0];
            if ((i & 31) == 0) ads[c * groups + i / 32] = tandem_q8_pair(d, sum);
        }
    }
}

// The activations of a prefill MUL_MAT with quantized weights, rounded as the CPU's q8_0
// activation copy is (q * f16(d), per 32 values, exactly as tandem_quantize_q8_1 quantizes) and
// written back as contiguous f32 [k, columns], so the f32 GEMM sees the values the CPU's integer
// dot products see. Grid as tandem_quantize_q8_1.
extern "C" __global__ void __launch_bounds__(256)
tandem_q8_round_f32(const char* src, float* out, tandem_q8_shape s) {
    const i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    const i64 cols = s.ne1 * s.ne2 * s.ne3;
    for (i64 c = blockIdx.y; c < cols; c += gridDim.y) {
        const i64 i1 = c % s.ne1, i2 = (c / s.ne1) % s.ne2, i3 = c / (s.ne1 * s.ne2);
        const bool in = i < s.k;
        const float x = in ? *(const float*)(src + i * s.nb0 + i1 * s.nb1 + i2 * s.nb2 + i3 * s.nb3) : 0.0f;
        float amax = fabsf(x);
        for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor(amax, o));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        const int q = (int)roundf(x * id);
        const float dh = tandem_f16_to_f32(tandem_f32_to_f16(d));
        if (in) {
            out[c * s.k + i] = (float)q * dh;
        }
    }
}
#endif  // TANDEM_UNIT_COMMON

#define TANDEM_MV_ARGS_Q const char *w, const char *src1, const char *aq, const char *ads, char *dst, tandem_mm_shape s
#define TANDEM_MV_ARGS_F const char *w, const char *src1, char *dst, tandem_mm_shape s
// The segment walks (_s1, _u1, _n1): gb is a GLU gate's second operand (TANDEM_MM_GLU_SHIFT), or null.
#define TANDEM_MV_ARGS_S const char *w, const char *src1, const char *gb, char *dst, tandem_mm_shape s
#define TANDEM_MMID_ARGS_Q const char *w, const char *src1, const char *aq, const char *ads, const char *ids, char *dst, tandem_mmid_shape s
#define TANDEM_MMID_ARGS_F const char *w, const char *src1, const char *ids, char *dst, tandem_mmid_shape s
#define TANDEM_MV_KERNEL extern "C" __global__ void __launch_bounds__(TANDEM_MV_THREADS)

// _c1: one column (decode); _c8: up to eight columns from one pass over the weights; _s1: one
// column in segments, each wave a stretch of rows (tandem_gemv_seg); _u1: one column in
// segments, units of rows taken in turn across the grid (tandem_gemv_segu); _n1: as _u1 with one
// stage slot a wave, for grids of at most one step a wave, three blocks to an SM.
#define TANDEM_MV_KERNEL_N1 extern "C" __global__ void __launch_bounds__(TANDEM_MV_THREADS, 3)
#if TANDEM_UNIT_ALL || TANDEM_UNIT_F32
TANDEM_MV_KERNEL tandem_gemv_f32_c1(TANDEM_MV_ARGS_F) { tandem_gemv_float<tandem_mv_f32, 1, TANDEM_MV_FLOAT_ROWS>(w, src1, dst, s); }
TANDEM_MV_KERNEL tandem_gemv_f32_c8(TANDEM_MV_ARGS_F) { tandem_gemv_float<tandem_mv_f32, 8, 1>(w, src1, dst, s); }
TANDEM_MV_KERNEL tandem_mul_mat_id_f32(TANDEM_MMID_ARGS_F) { tandem_mmid_float<tandem_mv_f32>(w, src1, ids, dst, s); }
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_F16
TANDEM_MV_KERNEL tandem_gemv_f16_c1(TANDEM_MV_ARGS_F) { tandem_gemv_float<tandem_mv_f16, 1, TANDEM_MV_FLOAT_ROWS>(w, src1, dst, s); }
TANDEM_MV_KERNEL tandem_gemv_f16_c8(TANDEM_MV_ARGS_F) { tandem_gemv_float<tandem_mv_f16, 8, 1>(w, src1, dst, s); }
TANDEM_MV_KERNEL tandem_mul_mat_id_f16(TANDEM_MMID_ARGS_F) { tandem_mmid_float<tandem_mv_f16>(w, src1, ids, dst, s); }
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_BF16
TANDEM_MV_KERNEL tandem_gemv_bf16_c1(TANDEM_MV_ARGS_F) { tandem_gemv_float<tandem_mv_bf16, 1, TANDEM_MV_FLOAT_ROWS>(w, src1, dst, s); }
TANDEM_MV_KERNEL tandem_gemv_bf16_c8(TANDEM_MV_ARGS_F) { tandem_gemv_float<tandem_mv_bf16, 8, 1>(w, src1, dst, s); }
TANDEM_MV_KERNEL tandem_mul_mat_id_bf16(TANDEM_MMID_ARGS_F) { tandem_mmid_float<tandem_mv_bf16>(w, src1, ids, dst, s); }
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q4_0
TANDEM_MV_KERNEL tandem_gemv_q4_0_c1(TANDEM_MV_ARGS_Q) { tandem_gemv_quant<tandem_mv_q4_0, 1>(w, src1, aq, ads, dst, s); }
TANDEM_MV_KERNEL tandem_gemv_q4_0_c8(TANDEM_MV_ARGS_Q) { tandem_gemv_quant<tandem_mv_q4_0, 8>(w, src1, aq, ads, dst, s); }
TANDEM_MV_KERNEL tandem_gemv_q4_0_s1(TANDEM_MV_ARGS_S) { tandem_gemv_seg<tandem_seg_q4_0>(w, src1, gb, dst, s); }
TANDEM_MV_KERNEL tandem_gemv_q4_0_u1(TANDEM_MV_ARGS_S) { tandem_gemv_segu<tandem_seg_q4_0, 2>(w, src1, gb, dst, s); }
TANDEM_MV_KERNEL_N1 tandem_gemv_q4_0_n1(TANDEM_MV_ARGS_S) { tandem_gemv_segu<tandem_seg_q4_0, 1, 1>(w, src1, gb, dst, s); }
TANDEM_MV_KERNEL tandem_mul_mat_id_q4_0(TANDEM_MMID_ARGS_Q) { tandem_mmid_quant<tandem_mv_q4_0>(w, src1, aq, ads, ids, dst, s); }
TANDEM_MV_KERNEL tandem_mmid_q4_0_u1(TANDEM_MMID_ARGS_F) { tandem_mmid_segu<tandem_seg_q4_0, 2>(w, src1, ids, dst, s); }
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q4_1
TANDEM_MV_KERNEL tandem_gemv_q4_1_c1(TANDEM_MV_ARGS_Q) { tandem_gemv_quant<tandem_mv_q4_1, 1>(w, src1, aq, ads, dst, s); }
TANDEM_MV_KERNEL tandem_gemv_q4_1_c8(TANDEM_MV_ARGS_Q) { tandem_gemv_quant<tandem_mv_q4_1, 8>(w, src1, aq, ads, dst, s); }
TANDEM_MV_KERNEL tandem_mul_mat_id_q4_1(TANDEM_MMID_ARGS_Q) { tandem_mmid_quant<tandem_mv_q4_1>(w, src1, aq, ads, ids, dst, s); }
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q5_0
TANDEM_MV_KERNEL tandem_gemv_q5_0_c1(TANDEM_MV_ARGS_Q) { tandem_gemv_quant<tandem_mv_q5_0, 1>(w, src1, aq, ads, dst, s); }
TANDEM_MV_KERNEL tandem_gemv_q5_0_c8(TANDEM_MV_ARGS_Q) { tandem_gemv_quant<tandem_mv_q5_0, 8>(w, src1, aq, ads, dst, s); }
TANDEM_MV_KERNEL tandem_mul_mat_id_q5_0(TANDEM_MMID_ARGS_Q) { tandem_mmid_quant<tandem_mv_q5_0>(w, src1, aq, ads, ids, dst, s); }
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q5_1
TANDEM_MV_KERNEL tandem_gemv_q5_1_c1(TANDEM_MV_ARGS_Q) { tandem_gemv_quant<tandem_mv_q5_1, 1>(w, src1, aq, ads, dst, s); }
TANDEM_MV_KERNEL tandem_gemv_q5_1_c8(TANDEM_MV_ARGS_Q) { tandem_gemv_quant<tandem_mv_q5_1, 8>(w, src1, aq, ads, dst, s); }
TANDEM_MV_KERNEL tandem_mul_mat_id_q5_1(TANDEM_MMID_ARGS_Q) { tandem_mmid_quant<tandem_mv_q5_1>(w, src1, aq, ads, ids, dst, s); }
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q8_0
TANDEM_MV_KERNEL tandem_gemv_q8_0_c1(TANDEM_MV_ARGS_Q) { tandem_gemv_quant<tandem_mv_q8_0, 1>(w, src1, aq, ads, dst, s); }
TANDEM_MV_KERNEL tandem_gemv_q8_0_c8(TANDEM_MV_ARGS_Q) { tandem_gemv_quant<tandem_mv_q8_0, 8>(w, src1, aq, ads, dst, s); }
TANDEM_MV_KERNEL tandem_gemv_q8_0_u1(TANDEM_MV_ARGS_S) { tandem_gemv_segu<tandem_seg_q8_0, 3>(w, src1, gb, dst, s); }
TANDEM_MV_KERNEL_N1 tandem_gemv_q8_0_n1(TANDEM_MV_ARGS_S) { tandem_gemv_segu<tandem_seg_q8_0, 1, 1>(w, src1, gb, dst, s); }
TANDEM_MV_KERNEL tandem_mul_mat_id_q8_0(TANDEM_MMID_ARGS_Q) { tandem_mmid_quant<tandem_mv_q8_0>(w, src1, aq, ads, ids, dst, s); }
TANDEM_MV_KERNEL tandem_mmid_q8_0_u1(TANDEM_MMID_ARGS_F) { tandem_mmid_segu<tandem_seg_q8_0, 3>(w, src1, ids, dst, s); }
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q2_K
TANDEM_MV_KERNEL tandem_gemv_q2_K_c1(TANDEM_MV_ARGS_Q) { tandem_gemv_quant<tandem_mv_q2_K, 1>(w, src1, aq, ads, dst, s); }
TANDEM_MV_KERNEL tandem_gemv_q2_K_c8(TANDEM_MV_ARGS_Q) { tandem_gemv_quant<tandem_mv_q2_K, 8>(w, src1, aq, ads, dst, s); }
TANDEM_MV_KERNEL tandem_mul_mat_id_q2_K(TANDEM_MMID_ARGS_Q) { tandem_mmid_quant<tandem_mv_q2_K>(w, src1, aq, ads, ids, dst, s); }
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q3_K
TANDEM_MV_KERNEL tandem_gemv_q3_K_c1(TANDEM_MV_ARGS_Q) { tandem_gemv_quant<tandem_mv_q3_K, 1>(w, src1, aq, ads, dst, s); }
TANDEM_MV_KERNEL tandem_gemv_q3_K_c8(TANDEM_MV_ARGS_Q) { tandem_gemv_quant<tandem_mv_q3_K, 8>(w, src1, aq, ads, dst, s); }
TANDEM_MV_KERNEL tandem_mul_mat_id_q3_K(TANDEM_MMID_ARGS_Q) { tandem_mmid_quant<tandem_mv_q3_K>(w, src1, aq, ads, ids, dst, s); }
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q4_K
TANDEM_MV_KERNEL tandem_gemv_q4_K_c1(TANDEM_MV_ARGS_Q) { tandem_gemv_quant<tandem_mv_q4_K, 1>(w, src1, aq, ads, dst, s); }
TANDEM_MV_KERNEL tandem_gemv_q4_K_c8(TANDEM_MV_ARGS_Q) { tandem_gemv_quant<tandem_mv_q4_K, 8>(w, src1, aq, ads, dst, s); }
TANDEM_MV_KERNEL tandem_gemv_q4_K_s1(TANDEM_MV_ARGS_S) { tandem_gemv_seg<tandem_seg_q4_K>(w, src1, gb, dst, s); }
TANDEM_MV_KERNEL tandem_gemv_q4_K_u1(TANDEM_MV_ARGS_S) { tandem_gemv_segu<tandem_seg_q4_K, 2>(w, src1, gb, dst, s); }
TANDEM_MV_KERNEL_N1 tandem_gemv_q4_K_n1(TANDEM_MV_ARGS_S) { tandem_gemv_segu<tandem_seg_q4_K, 1, 1>(w, src1, gb, dst, s); }
TANDEM_MV_KERNEL tandem_mul_mat_id_q4_K(TANDEM_MMID_ARGS_Q) { tandem_mmid_quant<tandem_mv_q4_K>(w, src1, aq, ads, ids, dst, s); }
TANDEM_MV_KERNEL tandem_mmid_q4_K_u1(TANDEM_MMID_ARGS_F) { tandem_mmid_segu<tandem_seg_q4_K, 2>(w, src1, ids, dst, s); }
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q5_K
TANDEM_MV_KERNEL tandem_gemv_q5_K_c1(TANDEM_MV_ARGS_Q) { tandem_gemv_quant<tandem_mv_q5_K, 1>(w, src1, aq, ads, dst, s); }
TANDEM_MV_KERNEL tandem_gemv_q5_K_c8(TANDEM_MV_ARGS_Q) { tandem_gemv_quant<tandem_mv_q5_K, 8>(w, src1, aq, ads, dst, s); }
TANDEM_MV_KERNEL tandem_mul_mat_id_q5_K(TANDEM_MMID_ARGS_Q) { tandem_mmid_quant<tandem_mv_q5_K>(w, src1, aq, ads, ids, dst, s); }
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q6_K
TANDEM_MV_KERNEL tandem_gemv_q6_K_c1(TANDEM_MV_ARGS_Q) { tandem_gemv_quant<tandem_mv_q6_K, 1>(w, src1, aq, ads, dst, s); }
TANDEM_MV_KERNEL tandem_gemv_q6_K_c8(TANDEM_MV_ARGS_Q) { tandem_gemv_quant<tandem_mv_q6_K, 8>(w, src1, aq, ads, dst, s); }
TANDEM_MV_KERNEL tandem_gemv_q6_K_u1(TANDEM_MV_ARGS_S) { tandem_gemv_segu<tandem_seg_q6_K, 2>(w, src1, gb, dst, s); }
TANDEM_MV_KERNEL_N1 tandem_gemv_q6_K_n1(TANDEM_MV_ARGS_S) { tandem_gemv_segu<tandem_seg_q6_K, 1, 1>(w, src1, gb, dst, s); }
TANDEM_MV_KERNEL tandem_mul_mat_id_q6_K(TANDEM_MMID_ARGS_Q) { tandem_mmid_quant<tandem_mv_q6_K>(w, src1, aq, ads, ids, dst, s); }
TANDEM_MV_KERNEL tandem_mmid_q6_K_u1(TANDEM_MMID_ARGS_F) { tandem_mmid_segu<tandem_seg_q6_K, 2>(w, src1, ids, dst, s); }
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_IQ4_NL
TANDEM_MV_KERNEL tandem_gemv_iq4_nl_c1(TANDEM_MV_ARGS_Q) { tandem_gemv_quant<tandem_mv_iq4_nl, 1>(w, src1, aq, ads, dst, s); }
TANDEM_MV_KERNEL tandem_gemv_iq4_nl_c8(TANDEM_MV_ARGS_Q) { tandem_gemv_quant<tandem_mv_iq4_nl, 8>(w, src1, aq, ads, dst, s); }
TANDEM_MV_KERNEL tandem_gemv_iq4_nl_s1(TANDEM_MV_ARGS_S) { tandem_gemv_seg<tandem_seg_iq4_nl>(w, src1, gb, dst, s); }
TANDEM_MV_KERNEL tandem_mul_mat_id_iq4_nl(TANDEM_MMID_ARGS_Q) { tandem_mmid_quant<tandem_mv_iq4_nl>(w, src1, aq, ads, ids, dst, s); }
#endif

