// ggml's quantized block layouts, byte for byte (ggml 0.26.0; the Rust mirrors with const-asserted
// sizes are in graph/src/blocks.rs). Half-precision fields are kept as their u16 bits and read
// with tandem_f16_to_f32, so the structs have the same size and alignment under every compiler.
#pragma once
#include "tandem_hip.h"

#define TANDEM_QK4_0 32
#define TANDEM_QK8_0 32
#define TANDEM_QK_K 256

struct tandem_block_q4_0 {
    u16 d;
    u8 qs[16];
};
struct tandem_block_q4_1 {
    u16 d;
    u16 m;
    u8 qs[16];
};
struct tandem_block_q5_0 {
    u16 d;
    u8 qh[4];
    u8 qs[16];
};
struct tandem_block_q5_1 {
    u16 d;
    u16 m;
    u8 qh[4];
    u8 qs[16];
};
struct tandem_block_q8_0 {
    u16 d;
    i8 qs[32];
};
struct tandem_block_q8_1 {
    u16 d;
    u16 s;
    i8 qs[32];
};
struct tandem_block_q2_K {
    u8 scales[16];
    u8 qs[64];
    u16 d;
    u16 dmin;
};
struct tandem_block_q3_K {
    u8 hmask[32];
    u8 qs[64];
    u8 scales[12];
    u16 d;
};
struct tandem_block_q4_K {
    u16 d;
    u16 dmin;
    u8 scales[12];
    u8 qs[128];
};
struct tandem_block_q5_K {
    u16 d;
    u16 dmin;
    u8 scales[12];
    u8 qh[32];
    u8 qs[128];
};
struct tandem_block_q6_K {
    u8 ql[128];
    u8 qh[64];
    i8 scales[16];
    u16 d;
};
struct tandem_block_q8_K {
    float d;
    i8 qs[256];
    i16 bsums[16];
};
struct tandem_block_iq4_nl {
    u16 d;
    u8 qs[16];
};

static_assert(sizeof(tandem_block_q4_0) == 18, "q4_0 block");
static_assert(sizeof(tandem_block_q4_1) == 20, "q4_1 block");
static_assert(sizeof(tandem_block_q5_0) == 22, "q5_0 block");
static_assert(sizeof(tandem_block_q5_1) == 24, "q5_1 block");
static_assert(sizeof(tandem_block_q8_0) == 34, "q8_0 block");
static_assert(sizeof(tandem_block_q8_1) == 36, "q8_1 block");
static_assert(sizeof(tandem_block_q2_K) == 84, "q2_K block");
static_assert(sizeof(tandem_block_q3_K) == 110, "q3_K block");
static_assert(sizeof(tandem_block_q4_K) == 144, "q4_K block");
static_assert(sizeof(tandem_block_q5_K) == 176, "q5_K block");
static_assert(sizeof(tandem_block_q6_K) == 210, "q6_K block");
static_assert(sizeof(tandem_block_q8_K) == 292, "q8_K block");
static_assert(sizeof(tandem_block_iq4_nl) == 18, "iq4_nl block");

// ---------------------------------------------------------------------------------------------
// Dequantization, bit-exact with tandem's CPU dequantizers (ops/src/quant/*.rs).
//
// Every function below computes in the order the CPU code writes, so an element comes out with
// the same f32 bits. The compilers would otherwise fuse `a * b + c` into one FMA (NVRTC's default
// --fmad=true, clang's fast-honor-pragmas contraction for HIP), which rounds once instead of
// twice; the CPU never fuses, so the steps that pair a product with a sum go through
// tandem_mul_rn / tandem_add_rn / tandem_sub_rn, which neither compiler contracts. Products
// without a following sum need no guard.
//
// Element functions `tandem_dequant_<type>(block, j)` give element j (0 <= j < block size) of
// one block; they read only the bytes element j depends on, so a thread per element touches
// neighbouring bytes and loads coalesce. The `tandem_dequant_traits<BLOCK>` struct names the
// block size and the element function for templates (GET_ROWS, GEMV).
// ---------------------------------------------------------------------------------------------

#if defined(TANDEM_NVIDIA)
TANDEM_DEVICE float tandem_mul_rn(float a, float b) { return __fmul_rn(a, b); }
TANDEM_DEVICE float tandem_add_rn(float a, float b) { return __fadd_rn(a, b); }
TANDEM_DEVICE float tandem_sub_rn(float a, float b) { return __fsub_rn(a, b); }
#else
// The pragma drops the contract flag from these instructions; after inlining the backend only
// fuses instructions that both carry it, so the rounding steps stay separate.
TANDEM_DEVICE float tandem_mul_rn(float a, float b) {
#pragma clang fp contract(off)
    return a * b;
}
TANDEM_DEVICE float tandem_add_rn(float a, float b) {
#pragma clang fp contract(off)
    return a + b;
}
TANDEM_DEVICE float tandem_sub_rn(float a, float b) {
#pragma clang fp contract(off)
    return a - b;
}
#endif

// f16 bits -> f32 exactly as the CPU converts: NaNs keep their payload and become quiet (the
// hardware conversions may return a canonical NaN instead); everything else is exact anyway.
TANDEM_DEVICE float tandem_half_to_f32(u16 h) {
    if ((h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0) {
        return __uint_as_float((((u32)h & 0x8000u) << 16) | 0x7fc00000u | (((u32)h & 0x03ffu) << 13));
    }
    return tandem_f16_to_f32(h);
}

// f32 -> f16 bits as the CPU quantizers and copies round: to nearest even, infinities and
// overflow to +-inf, and every NaN to the quiet `sign | 0x7e00`.
TANDEM_DEVICE u16 tandem_f32_to_half(float x) {
    const u32 u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return (u16)(((u >> 16) & 0x8000u) | 0x7e00u);
    }
    return tandem_f32_to_f16(x);
}

// Blocks may start at any 2-byte boundary (e.g. 34-byte q8_0 blocks), so multi-byte fields other
// than the u16 scales are assembled from bytes.
TANDEM_DEVICE u32 tandem_load_u32_bytes(const u8* p) {
    return (u32)p[0] | ((u32)p[1] << 8) | ((u32)p[2] << 16) | ((u32)p[3] << 24);
}

// ---- block fields at 2-byte-aligned shared addresses, as aligned 32-bit words ----

// The m aligned 32-bit words from the 2-byte-aligned shared address `p` rounded down to 4 bytes
// (up to 2 bytes past the last word p needs: callers' buffers are padded or the bytes are the
// next block's); returns p's bit offset in the first. Fewer loads than two 16-bit halves per word, and no divergence between lanes whose
// blocks start on different halves of a word.
template <int M>
TANDEM_DEVICE int tandem_aligned_words(const u8* p, u32 (&w)[M]) {
    // p minus its offset, not an integer cast: the compiler keeps knowing it is shared memory.
    const int off = (int)((u64)p & 2);
    const u32* a = (const u32*)(p - off);
#pragma unroll
    for (int i = 0; i < M; ++i) w[i] = a[i];
    return off * 8;
}
// Bits sh .. sh + 31 of the 64-bit hi:lo (sh <= 32).
TANDEM_DEVICE u32 tandem_shr64(u32 lo, u32 hi, int sh) {
    return (u32)((((u64)hi << 32) | lo) >> sh);
}
// The n words at p (2-byte aligned): word i holds bytes 4i .. 4i + 3 of p.
template <int N>
TANDEM_DEVICE void tandem_words_a2(const u8* p, u32 (&v)[N]) {
    u32 w[N + 1];
    const int sh = tandem_aligned_words<N + 1>(p, w);
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = tandem_shr64(w[i], w[i + 1], sh);
}
// The f16 at p (2-byte aligned) and the n words after it (bytes 2 + 4i ..), from the same n + 1
// aligned loads.
template <int N>
TANDEM_DEVICE float tandem_half_words_a2(const u8* p, u32 (&v)[N]) {
    u32 w[N + 1];
    const int sh = tandem_aligned_words<N + 1>(p, w);
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = tandem_shr64(w[i], w[i + 1], 16 + sh);
    return tandem_f16_to_f32((u16)(w[0] >> sh));
}

// ---- 32-element formats: element j and j + 16 share quant byte j % 16 ----

TANDEM_DEVICE float tandem_dequant_q4_0(const tandem_block_q4_0* b, int j) {
    const int q = j < 16 ? (b->qs[j] & 0x0f) : (b->qs[j - 16] >> 4);
    return (float)(q - 8) * tandem_half_to_f32(b->d);
}

TANDEM_DEVICE float tandem_dequant_q4_1(const tandem_block_q4_1* b, int j) {
    const int q = j < 16 ? (b->qs[j] & 0x0f) : (b->qs[j - 16] >> 4);
    return tandem_add_rn(tandem_mul_rn((float)q, tandem_half_to_f32(b->d)), tandem_half_to_f32(b->m));
}

// The 5-bit value of element j of a q5_0/q5_1 block (high bit j of qh, little-endian u32).
TANDEM_DEVICE int tandem_q5_value(const u8* qs, const u8* qh, int j) {
    const u32 high = ((u32)qh[j >> 3] >> (j & 7)) & 1u;
    const u32 low = j < 16 ? (qs[j] & 0x0fu) : ((u32)qs[j - 16] >> 4);
    return (int)(low | (high << 4));
}

TANDEM_DEVICE float tandem_dequant_q5_0(const tandem_block_q5_0* b, int j) {
    return (float)(tandem_q5_value(b->qs, b->qh, j) - 16) * tandem_half_to_f32(b->d);
}

TANDEM_DEVICE float tandem_dequant_q5_1(const tandem_block_q5_1* b, int j) {
    const float q = (float)tandem_q5_value(b->qs, b->qh, j);
    return tandem_add_rn(tandem_mul_rn(q, tandem_half_to_f32(b->d)), tandem_half_to_f32(b->m));
}

TANDEM_DEVICE float tandem_dequant_q8_0(const tandem_block_q8_0* b, int j) {
    return (float)b->qs[j] * tandem_half_to_f32(b->d);
}

// iq4_nl's 16 levels (ggml's kvalues_iq4nl) packed as signed bytes into two words, so a lookup is
// a shift in registers rather than a table in memory.
#define TANDEM_IQ4NL_LOW 0xf6eaddcfbfad9881ull   // -127 -104 -83 -65 -49 -35 -22 -10 (byte 0 first)
#define TANDEM_IQ4NL_HIGH 0x7159453526190d01ull  // 1 13 25 38 53 69 89 113
TANDEM_DEVICE int tandem_iq4nl_level(u32 q) {
    const u64 w = (q & 8u) ? TANDEM_IQ4NL_HIGH : TANDEM_IQ4NL_LOW;
    return (int)(i8)(u8)(w >> (8u * (q & 7u)));
}

// Eight iq4_nl levels at once: the low nibbles of q's four bytes into lo's bytes and the high
// nibbles into hi's, as signed bytes (byte i from byte i of q), from the same two words held as
// four registers: byte permutes rather than eight table loads with per-lane addresses (which NVIDIA
// serialises in the constant cache and AMD turns into global loads).
//   NVIDIA (prmt, nibble selectors): each selector nibble picks one of eight bytes, and with its
//   top bit set copies that byte's sign bit instead. Lookups with q's nibbles, top bits cleared,
//   give the levels of nibbles 0..3 (levels 0..7 and 8..15 in two permutes) and of 4..7; a
//   nibble's bit 3 picks between them through a byte mask made by the sign mode: bit 3 of nibble
//   2 j sits at bit 7 of byte j of q << 4, that of nibble 2 j + 1 at bit 7 of byte j of q. The
//   results hold the levels in nibble order (lo, hi, lo, hi), which two more permutes sort.
//   AMD (v_perm_b32, byte selectors 0..7: bytes 0..3 of the second operand, then the first's):
//   the low nibbles masked to 0..7 select among levels 0..7 and 8..15; bit 3 of each then picks
//   byte i or byte i + 4 of those two results.
TANDEM_DEVICE void tandem_iq4nl_levels8(u32 q, u32& lo, u32& hi) {
    const u32 t0 = (u32)TANDEM_IQ4NL_LOW, t1 = (u32)(TANDEM_IQ4NL_LOW >> 32);
    const u32 t2 = (u32)TANDEM_IQ4NL_HIGH, t3 = (u32)(TANDEM_IQ4NL_HIGH >> 32);
#if defined(TANDEM_NVIDIA)
    const u32 s = q & 0x77777777u, s_hi = s >> 16, a = q << 4;
    const u32 l0 = tandem_prmt(t0, t1, s), h0 = tandem_prmt(t2, t3, s);
    const u32 l1 = tandem_prmt(t0, t1, s_hi), h1 = tandem_prmt(t2, t3, s_hi);
    // Byte masks of bit 3 of nibbles 0..3 and 4..7: the signs of bytes 0, 4, 1, 5 (2, 6, 3, 7) of
    // (a, q).
    const u32 m0 = tandem_prmt(a, q, 0xd9c8u), m1 = tandem_prmt(a, q, 0xfbeau);
    const u32 r0 = (l0 & ~m0) | (h0 & m0), r1 = (l1 & ~m1) | (h1 & m1);
    lo = tandem_prmt(r0, r1, 0x6420u);
    hi = tandem_prmt(r0, r1, 0x7531u);
#else
    const u32 s0 = q & 0x07070707u, s1 = (q >> 4) & 0x07070707u;
    lo = __builtin_amdgcn_perm(__builtin_amdgcn_perm(t3, t2, s0), __builtin_amdgcn_perm(t1, t0, s0),
                               ((q >> 1) & 0x04040404u) | 0x03020100u);
    hi = __builtin_amdgcn_perm(__builtin_amdgcn_perm(t3, t2, s1), __builtin_amdgcn_perm(t1, t0, s1),
                               ((q >> 5) & 0x04040404u) | 0x03020100u);
#endif
}

TANDEM_DEVICE float tandem_dequant_iq4_nl(const tandem_block_iq4_nl* b, int j) {
    const u32 q = j < 16 ? (b->qs[j] & 0x0fu) : ((u32)b->qs[j - 16] >> 4);
    return tandem_half_to_f32(b->d) * (float)tandem_iq4nl_level(q);
}

// ---- 256-element k-quants ----

// q2_K: 16 groups of 16; group g's values are 2-bit fields of qs[32 * (g / 8) + 16 * (g % 2) + l]
// at bit 2 * ((g % 8) / 2); scales[g] holds the 4-bit scale (low) and min (high).
TANDEM_DEVICE float tandem_dequant_q2_K(const tandem_block_q2_K* b, int j) {
    const int g = j >> 4, l = j & 15;
    const int part = g & 7;
    const int q = (b->qs[32 * (g >> 3) + 16 * (part & 1) + l] >> (2 * (part >> 1))) & 3;
    const u32 sc = b->scales[g];
    const float dl = tandem_half_to_f32(b->d) * (float)(sc & 0x0fu);
    const float ml = tandem_half_to_f32(b->dmin) * (float)(sc >> 4);
    return tandem_sub_rn(tandem_mul_rn(dl, (float)q), ml);
}

// q3_K's 6-bit signed scale of group g (0..16), unpacked from the 12 scale bytes.
TANDEM_DEVICE int tandem_q3_K_scale(const u8* packed, int g) {
    const u32 low = g < 8 ? (packed[g] & 0x0fu) : ((u32)packed[g - 8] >> 4);
    const u32 high = ((u32)packed[8 + (g & 3)] >> (2 * (g >> 2))) & 3u;
    return (int)(low | (high << 4)) - 32;
}

// q3_K: q2_K's 2-bit layout plus a high bit in hmask; a clear high bit subtracts 4.
TANDEM_DEVICE float tandem_dequant_q3_K(const tandem_block_q3_K* b, int j) {
    const int g = j >> 4, l = j & 15;
    const int chunk = g >> 3, part = g & 7;
    const int offset = 16 * (part & 1);
    const int q = (b->qs[32 * chunk + offset + l] >> (2 * (part >> 1))) & 3;
    const u32 mask = 1u << (4 * chunk + (part >> 1));
    const int sub = (b->hmask[offset + l] & mask) ? 0 : 4;
    const float dl = tandem_half_to_f32(b->d) * (float)tandem_q3_K_scale(b->scales, g);
    return dl * (float)(q - sub);
}

// The 6-bit scale and min of group g (0..8) of q4_K/q5_K (ggml's get_scale_min_k4).
TANDEM_DEVICE void tandem_scale_min_k4(const u8* q, int g, int* sc, int* m) {
    if (g < 4) {
        *sc = q[g] & 63;
        *m = q[g + 4] & 63;
    } else {
        *sc = (q[g + 4] & 0x0f) | ((q[g - 4] >> 6) << 4);
        *m = (q[g + 4] >> 4) | ((q[g] >> 6) << 4);
    }
}

// d, dmin and the 6-bit scale and min of group j (0..7) of a q4_K / q5_K block at b (4-byte
// aligned), from its first 16 bytes read as four words: the same instructions on every lane
// whatever its j (a branch on j < 4 would split the wave in two).
TANDEM_DEVICE void tandem_dscale_min_k4(const u8* b, int j, float& d, float& dmin, int& sc, int& mn) {
    const u32* w = (const u32*)b;
    const u32 w0 = w[0], s2 = w[3];
    const u64 lo = ((u64)w[2] << 32) | w[1];  // scale bytes 0..7
    const int j4 = j & 3;
    const u32 a = (u32)(lo >> (8 * j4)) & 0xffu;       // byte j % 4
    const u32 c = (u32)(lo >> (8 * j4 + 32)) & 0xffu;  // byte j % 4 + 4
    const u32 e = (s2 >> (8 * j4)) & 0xffu;            // byte j % 4 + 8
    const bool hi = j >= 4;
    sc = (int)(hi ? ((e & 15u) | ((a >> 6) << 4)) : (a & 63u));
    mn = (int)(hi ? ((e >> 4) | ((c >> 6) << 4)) : (c & 63u));
    d = tandem_f16_to_f32((u16)(w0 & 0xffffu));
    dmin = tandem_f16_to_f32((u16)(w0 >> 16));
}

// q4_K: 8 groups of 32; groups 2p and 2p + 1 are the low and high nibbles of qs[32p .. 32p + 32].
TANDEM_DEVICE float tandem_dequant_q4_K(const tandem_block_q4_K* b, int j) {
    const int g = j >> 5, i = j & 31;
    const u32 byte = b->qs[32 * (g >> 1) + i];
    const int q = (g & 1) ? (int)(byte >> 4) : (int)(byte & 0x0fu);
    int sc, m;
    tandem_scale_min_k4(b->scales, g, &sc, &m);
    const float dl = tandem_half_to_f32(b->d) * (float)sc;
    const float ml = tandem_half_to_f32(b->dmin) * (float)m;
    return tandem_sub_rn(tandem_mul_rn(dl, (float)q), ml);
}

// q5_K: q4_K plus a fifth bit, bit g of qh[j % 32].
TANDEM_DEVICE float tandem_dequant_q5_K(const tandem_block_q5_K* b, int j) {
    const int g = j >> 5, i = j & 31;
    const u32 byte = b->qs[32 * (g >> 1) + i];
    const int low = (g & 1) ? (int)(byte >> 4) : (int)(byte & 0x0fu);
    const int q = low + (((b->qh[i] >> g) & 1) ? 16 : 0);
    int sc, m;
    tandem_scale_min_k4(b->scales, g, &sc, &m);
    const float dl = tandem_half_to_f32(b->d) * (float)sc;
    const float ml = tandem_half_to_f32(b->dmin) * (float)m;
    return tandem_sub_rn(tandem_mul_rn(dl, (float)q), ml);
}

// q6_K: two halves of 128; in a half, quarter k (32 values) takes nibble k / 2 of
// ql[32 * (k % 2) + i] and bits 2k..2k+1 of qh[i], with scale scales[8 * half + i / 16 + 2k].
// The CPU multiplies (d * scale) first, then the value.
TANDEM_DEVICE float tandem_dequant_q6_K(const tandem_block_q6_K* b, int j) {
    const int half = j >> 7, quarter = (j >> 5) & 3, i = j & 31;
    const u32 lo = (u32)b->ql[64 * half + 32 * (quarter & 1) + i] >> (4 * (quarter >> 1));
    const u32 hi = ((u32)b->qh[32 * half + i] >> (2 * quarter)) & 3u;
    const int q = (int)((lo & 0x0fu) | (hi << 4)) - 32;
    const int sc = b->scales[8 * half + (i >> 4) + 2 * quarter];
    return tandem_half_to_f32(b->d) * (float)sc * (float)q;
}

// Traits: `block` type, elements per block `QK`, and `get(block, j)`.
template <typename B> struct tandem_dequant_traits;

#define TANDEM_DEQUANT_TRAITS(BLOCK, N, FN)                                      \
    template <> struct tandem_dequant_traits<BLOCK> {                            \
        typedef BLOCK block;                                                     \
        static constexpr int QK = N;                                             \
        static __device__ __forceinline__ float get(const BLOCK* b, int j) {     \
            return FN(b, j);                                                     \
        }                                                                        \
    };

TANDEM_DEQUANT_TRAITS(tandem_block_q4_0, 32, tandem_dequant_q4_0)
TANDEM_DEQUANT_TRAITS(tandem_block_q4_1, 32, tandem_dequant_q4_1)
TANDEM_DEQUANT_TRAITS(tandem_block_q5_0, 32, tandem_dequant_q5_0)
TANDEM_DEQUANT_TRAITS(tandem_block_q5_1, 32, tandem_dequant_q5_1)
TANDEM_DEQUANT_TRAITS(tandem_block_q8_0, 32, tandem_dequant_q8_0)
TANDEM_DEQUANT_TRAITS(tandem_block_iq4_nl, 32, tandem_dequant_iq4_nl)
TANDEM_DEQUANT_TRAITS(tandem_block_q2_K, 256, tandem_dequant_q2_K)
TANDEM_DEQUANT_TRAITS(tandem_block_q3_K, 256, tandem_dequant_q3_K)
TANDEM_DEQUANT_TRAITS(tandem_block_q4_K, 256, tandem_dequant_q4_K)
TANDEM_DEQUANT_TRAITS(tandem_block_q5_K, 256, tandem_dequant_q5_K)
TANDEM_DEQUANT_TRAITS(tandem_block_q6_K, 256, tandem_dequant_q6_K)
#undef TANDEM_DEQUANT_TRAITS

// Plain element types, so templates treat every type alike; f16 and bf16 are both u16 bits, so
// they get tag types rather than traits on u16.
template <> struct tandem_dequant_traits<float> {
    typedef float block;
    static constexpr int QK = 1;
    static __device__ __forceinline__ float get(const float* b, int) { return *b; }
};
struct tandem_f16_tag { u16 bits; };
struct tandem_bf16_tag { u16 bits; };
template <> struct tandem_dequant_traits<tandem_f16_tag> {
    typedef tandem_f16_tag block;
    static constexpr int QK = 1;
    static __device__ __forceinline__ float get(const tandem_f16_tag* b, int) { return tandem_half_to_f32(b->bits); }
};
template <> struct tandem_dequant_traits<tandem_bf16_tag> {
    typedef tandem_bf16_tag block;
    static constexpr int QK = 1;
    static __device__ __forceinline__ float get(const tandem_bf16_tag* b, int) { return tandem_bf16_to_f32(b->bits); }
};

// ---------------------------------------------------------------------------------------------
// Quantization of 32 f32 values into one block, byte-exact with tandem's CPU quantizers
// (ops/src/quant/legacy.rs): the same sequential scans (so ties break alike) and the same float
// steps, kept unfused through tandem_mul_rn / tandem_add_rn / tandem_sub_rn. Used by the
// quantizing copies (copy.hip) and SET_ROWS (setrows.hip): `Q::run(x, block)`.
// ---------------------------------------------------------------------------------------------

// C's float-to-int cast as x86 performs it (what the CPU quantizers reproduce): truncation
// toward zero, INT_MIN for NaN and out-of-range values. Narrower casts keep the low bits.
TANDEM_DEVICE i32 tandem_c_cast_i32(float x) {
    return (x >= -2147483648.0f && x < 2147483648.0f) ? (i32)x : (i32)0x80000000u;
}
TANDEM_DEVICE i32 tandem_c_cast_i8(float x) {
    return (i32)(i8)tandem_c_cast_i32(x);
}

// `x * id + offset` with two roundings, as the CPU computes it.
TANDEM_DEVICE float tandem_scaled(float x, float id, float offset) {
    return tandem_add_rn(tandem_mul_rn(x, id), offset);
}

TANDEM_DEVICE float tandem_inverse_or_zero(float d) {
    return d != 0.0f ? 1.0f / d : 0.0f;
}

// The value of largest magnitude (the first on ties) and the largest magnitude.
TANDEM_DEVICE void tandem_signed_absmax(const float* x, float* max, float* amax) {
    float m = 0.0f, a = 0.0f;
    for (int e = 0; e < 32; e++) {
        if (a < fabsf(x[e])) {
            a = fabsf(x[e]);
            m = x[e];
        }
    }
    *max = m;
    *amax = a;
}

// Minimum and maximum, scanning from +-FLT_MAX like the CPU.
TANDEM_DEVICE void tandem_min_max(const float* x, float* min, float* max) {
    float lo = __int_as_float(0x7f7fffff), hi = -__int_as_float(0x7f7fffff);
    for (int e = 0; e < 32; e++) {
        if (x[e] < lo) lo = x[e];
        if (x[e] > hi) hi = x[e];
    }
    *min = lo;
    *max = hi;
}

TANDEM_DEVICE void tandem_store_qh(u8* qh, u32 bits) {
    qh[0] = (u8)bits;
    qh[1] = (u8)(bits >> 8);
    qh[2] = (u8)(bits >> 16);
    qh[3] = (u8)(bits >> 24);
}

struct tandem_quantize_q8_0 {
    typedef tandem_block_q8_0 block;
    static __device__ __forceinline__ void run(const float* x, block* b) {
        float amax = 0.0f;  // C's MAX(a, b) fold: a NaN magnitude wins, as on the CPU
        for (int e = 0; e < 32; e++) {
            const float a = fabsf(x[e]);
            amax = amax > a ? amax : a;
        }
        const float d = amax / 127.0f;
        const float id = tandem_inverse_or_zero(d);
        b->d = tandem_f32_to_half(d);
        for (int e = 0; e < 32; e++) {
            b->qs[e] = (i8)tandem_c_cast_i32(roundf(x[e] * id));  // roundf: halves away from 0
        }
    }
};

struct tandem_quantize_q4_0 {
    typedef tandem_block_q4_0 block;
    static __device__ __forceinline__ void run(const float* x, block* b) {
        float max, amax;
        tandem_signed_absmax(x, &max, &amax);
        const float d = max / -8.0f;
        const float id = tandem_inverse_or_zero(d);
        b->d = tandem_f32_to_half(d);
        for (int j = 0; j < 16; j++) {
            const u32 lo = (u8)min(15, tandem_c_cast_i8(tandem_scaled(x[j], id, 8.5f)));
            const u32 hi = (u8)min(15, tandem_c_cast_i8(tandem_scaled(x[j + 16], id, 8.5f)));
            b->qs[j] = (u8)(lo | (hi << 4));
        }
    }
};

struct tandem_quantize_q4_1 {
    typedef tandem_block_q4_1 block;
    static __device__ __forceinline__ void run(const float* x, block* b) {
        float lo_v, hi_v;
        tandem_min_max(x, &lo_v, &hi_v);
        const float d = (hi_v - lo_v) / 15.0f;
        const float id = tandem_inverse_or_zero(d);
        b->d = tandem_f32_to_half(d);
        b->m = tandem_f32_to_half(lo_v);
        for (int j = 0; j < 16; j++) {
            const u32 lo = (u8)min(15, tandem_c_cast_i8(tandem_scaled(tandem_sub_rn(x[j], lo_v), id, 0.5f)));
            const u32 hi = (u8)min(15, tandem_c_cast_i8(tandem_scaled(tandem_sub_rn(x[j + 16], lo_v), id, 0.5f)));
            b->qs[j] = (u8)(lo | (hi << 4));
        }
    }
};

struct tandem_quantize_q5_0 {
    typedef tandem_block_q5_0 block;
    static __device__ __forceinline__ void run(const float* x, block* b) {
        float max, amax;
        tandem_signed_absmax(x, &max, &amax);
        const float d = max / -16.0f;
        const float id = tandem_inverse_or_zero(d);
        b->d = tandem_f32_to_half(d);
        u32 high = 0;
        for (int j = 0; j < 16; j++) {
            const u32 lo = (u8)min(31, tandem_c_cast_i8(tandem_scaled(x[j], id, 16.5f)));
            const u32 hi = (u8)min(31, tandem_c_cast_i8(tandem_scaled(x[j + 16], id, 16.5f)));
            b->qs[j] = (u8)((lo & 0x0fu) | ((hi & 0x0fu) << 4));
            high |= ((lo & 0x10u) >> 4) << j;
            high |= ((hi & 0x10u) >> 4) << (j + 16);
        }
        tandem_store_qh(b->qh, high);
    }
};

struct tandem_quantize_q5_1 {
    typedef tandem_block_q5_1 block;
    static __device__ __forceinline__ void run(const float* x, block* b) {
        float lo_v, hi_v;
        tandem_min_max(x, &lo_v, &hi_v);
        const float d = (hi_v - lo_v) / 31.0f;
        const float id = tandem_inverse_or_zero(d);
        b->d = tandem_f32_to_half(d);
        b->m = tandem_f32_to_half(lo_v);
        u32 high = 0;
        for (int j = 0; j < 16; j++) {
            // No clamp to 31 here: the CPU (like ggml) keeps the cast's low byte as it is.
            const u32 lo = (u8)tandem_c_cast_i32(tandem_scaled(tandem_sub_rn(x[j], lo_v), id, 0.5f));
            const u32 hi = (u8)tandem_c_cast_i32(tandem_scaled(tandem_sub_rn(x[j + 16], lo_v), id, 0.5f));
            b->qs[j] = (u8)((lo & 0x0fu) | ((hi & 0x0fu) << 4));
            high |= ((lo & 0x10u) >> 4) << j;
            high |= ((hi & 0x10u) >> 4) << (j + 16);
        }
        tandem_store_qh(b->qh, high);
    }
};
