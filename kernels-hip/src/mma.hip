// Prefill-shaped MUL_MAT (more than 8 columns) on NVIDIA tensor cores (sm_80 and newer):
// int8 mma for the quantized weights (groups of 32 values with one scale, and an optional
// offset, per group or per 16 values), f16 mma for f16 weights; and, built as the "wmma" family
// (TANDEM_WMMA_ENTRIES), the same int8 and f16 tiles on AMD RDNA3 / RDNA4 WMMA (see "integer
// path, AMD WMMA"). The portable GEMM (gemm.hip) stays the path everywhere else.
//
// Integer path: activations are the q8_1 copy of tandem_quantize_q8_1 (int8 values, then one
// (d, d * sum) pair per 32 values), rounded exactly as the CPU's q8_0 activation copy. Each
// weight group is unpacked to 32 int8 values with a scale d and offset m such that its weights
// are d * q + m; a group's product with an activation group is then
//     d * d_a * sum(q * a) + m * (d_a * sum(a)),
// the integer sum from one m16n8k32 mma, the rest in f32: the CPU's block dot products up to
// the f32 summation order (q2_K, q3_K, q6_K: a scale, and q2_K an offset, per 16 values, so
// one m16n8k16 mma per half group).
//
// Launch layout of the integer path (every quantized type): block = 128 threads, one 64 x 64
// (rows x columns) output tile per block, k steps (four 32-value blocks, or one superblock)
// copied raw to shared memory with cp.async one step ahead of the mma work; see "integer path,
// 32-value blocks" below. Grids: x over columns (n),
// y over weight rows (m), z over batches (experts for MUL_MAT_ID).
//
// f16 path: 128 x 64 tiles, k steps of 32 with three in flight (cp.async); weights are copied
// as they are, activations come from an f16 copy of src1 (tandem_mma_f16_copy: rounded to f16,
// which is what the CPU's f16 dot products see), m16n8k16 mma with f32 accumulation.
//
// Hopper (sm_90a) paths: tandem_wgmma_f16 and tandem_wgmma_<type> for the 32-value block types,
// warpgroup mma on 128 x 256 tiles against the same f16 copy of src1 (see "f16 path, Hopper");
// tandem_wgmmq_<type>, int8 warpgroup mma for the 32-value block types, q4_K and q5_K against
// the q8_1 copy, the integer path's sums on 128 x 128 tiles (see "integer path, Hopper").
// tandem_wgmma_f16 and tandem_wgmmq_<type> run the tiles of all batches over a one-dimensional
// grid, those of the last, partial wave split in k ranges whose sums tandem_mm_split_sum adds up
// (see tandem_mm_split).
#include "tandem_hip.h"

// Compile units: the runtime builds the "mma" family one weight type at a time (-DTANDEM_UNIT=1
// -DTANDEM_UNIT_<TYPE>=1 defines that type's entries only; the activation copies and the
// MUL_MAT_ID routing are TANDEM_UNIT_COMMON); without TANDEM_UNIT (and in the "wmma" family)
// every entry is defined. The units are listed in kernels-hip/src/fam/matmul.rs.
#if !defined(TANDEM_UNIT)
#define TANDEM_UNIT_ALL 1
#endif
#include "tandem_quant.h"

// The f16 tiles (`tandem_mma_f16`): threads and output tile.
#define TANDEM_MMA_THREADS 256
#define TANDEM_MMA_BM 128
#define TANDEM_MMA_BN 64

// Mirrors `MulMatShape` in backend/src/gpu/ops/matmul_launch.rs; same as in gemv.hip.
struct tandem_mm_shape {
    i64 k, m, n;
    i64 ne12, ne13;
    i64 r2, r3;
    i64 nb01, nb02, nb03;
    i64 nb10, nb11, nb12, nb13;
    i64 nb1, nb2, nb3;
    i64 flags;  // used by gemv.hip only
};

#if defined(TANDEM_NVIDIA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define TANDEM_MMA_ENABLED 1
#endif

// ---------------------------------------------------------------- weight groups

TANDEM_DEVICE u32 tandem_mma_ld32(const u8* p) {
    const u16* q = (const u16*)p;
    return (u32)q[0] | ((u32)q[1] << 16);
}
TANDEM_DEVICE float tandem_mma_half(const u8* p) {
    return tandem_f16_to_f32(*(const u16*)p);
}
// Bytes 0..15 minus `bias` (8 or 16), as signed bytes (no borrow between bytes).
TANDEM_DEVICE u32 tandem_mma_unbias(u32 x, u32 bias4) {
    return ((x | 0x80808080u) - bias4) ^ 0x80808080u;
}
// Byte i of the result holds bit i of `bits` (i < 4) at bit 4: the fifth bit of q5 weights.
TANDEM_DEVICE u32 tandem_mma_spread4(u32 bits) {
    return ((bits & 1u) << 4) | ((bits & 2u) << 11) | ((bits & 4u) << 18) | ((bits & 8u) << 25);
}

// ---------------------------------------------------------------- helpers

// Every f32 of the accumulator array `acc` (any shape) set to NaN: what a kernel built for a
// device without its instructions writes (the launcher never picks it there).
template <typename A>
TANDEM_DEVICE void tandem_acc_nan(A& acc) {
    float* p = (float*)&acc;
#pragma unroll
    for (int i = 0; i < (int)(sizeof(A) / sizeof(float)); ++i) p[i] = __int_as_float(0x7fc00000);
}

// Writes the block's accumulators acc[mt][nt][e] (rows r0 + 16 mt + lane / 4 (+ 8 for e >= 2),
// tile columns c0 + 8 nt + 2 (lane % 4) (+ 1 for odd e)) for rows below m and the columns the
// map C has (C::out(c): the column's output base, or null for none).
template <typename C>
TANDEM_DEVICE void tandem_mma_store(float (&acc)[2][4][4], const C& cols, i64 m, i64 r0, int c0) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const i64 r = r0 + 16 * mt + lane / 4 + (e >= 2 ? 8 : 0);
                char* o = cols.out(c0 + 8 * nt + 2 * (lane % 4) + (e & 1));
                if (r < m && o != nullptr) *(float*)(o + r * 4) = acc[mt][nt][e];
            }
        }
    }
}

// Column maps of a block's 64 tile columns: act(c) is the column's index in the q8_1 copy (or
// -1 for none), out(c) its output base (dst column, rows at 4-byte steps) or null.
// MUL_MAT: columns col0 .. col0 + 64 of batch b, clipped at n.
struct tandem_mma_dense_cols {
    i64 first, col0, n, nb1;
    char* dst;
    __device__ i64 act(int c) const { return col0 + c < n ? first + col0 + c : -1; }
    __device__ char* out(int c) const { return col0 + c < n ? dst + (col0 + c) * nb1 : nullptr; }
};
// The map of batch b's tile at col0: the batch's first column of the q8_1 copy is b * n.
TANDEM_DEVICE tandem_mma_dense_cols tandem_mma_dense(char* dst, i64 b, const tandem_mm_shape& s, i64 col0) {
    tandem_mma_dense_cols cols;
    cols.first = b * s.n;
    cols.col0 = col0;
    cols.n = s.n;
    cols.nb1 = s.nb1;
    cols.dst = dst + (b % s.ne12) * s.nb2 + (b / s.ne12) * s.nb3;
    return cols;
}

// ---------------------------------------------------------------- MUL_MAT_ID, grouped by expert

// Mirrors `MulMatIdShape` in backend/src/gpu/ops/matmul_launch.rs (sixteen i64).
struct tandem_mmid_shape {
    i64 k, m, n_expert;
    i64 n_used, n_tokens, n_b;  // ids [n_used, n_tokens]; src1 [k, n_b, n_tokens]
    i64 nb01, nb02;             // expert weight byte strides
    i64 nb11, nb12;             // src1 byte strides
    i64 ids_nb0, ids_nb1;       // ids byte strides
    i64 nb1, nb2;               // dst byte strides
    i64 nb10;
    i64 flags;  // 0 for the grouped form
};

// Sorts the slots (u, t) of ids by expert: counts[e] slots of expert e at lists[e * slots ..]
// (slot = u + n_used * t, in no particular order). One block; experts <= 4096 (the launcher
// checks). A slot whose id is no valid expert gets NaN in all its m outputs here.
TANDEM_DEVICE void tandem_mmid_route_block(const char* ids, i32* counts, i32* lists, char* dst,
                                           const tandem_mmid_shape& s) {
    __shared__ i32 cnt[4096];
    const i64 slots = s.n_used * s.n_tokens;
    for (i64 e = threadIdx.x; e < s.n_expert; e += blockDim.x) cnt[e] = 0;
    __syncthreads();
    for (i64 q = threadIdx.x; q < slots; q += blockDim.x) {
        const i64 u = q % s.n_used, t = q / s.n_used;
        const i32 e = *(const i32*)(ids + u * s.ids_nb0 + t * s.ids_nb1);
        if (e >= 0 && (i64)e < s.n_expert) {
            const i32 pos = atomicAdd(&cnt[e], 1);
            lists[(i64)e * slots + pos] = (i32)q;
        } else {
            char* o = dst + u * s.nb1 + t * s.nb2;
            for (i64 r = 0; r < s.m; ++r) *(float*)(o + r * 4) = __int_as_float(0x7fc00000);
        }
    }
    __syncthreads();
    for (i64 e = threadIdx.x; e < s.n_expert; e += blockDim.x) counts[e] = cnt[e];
}
#if TANDEM_UNIT_ALL || TANDEM_UNIT_COMMON
extern "C" __global__ void __launch_bounds__(1024)
tandem_mmid_route(const char* ids, i32* counts, i32* lists, char* dst, tandem_mmid_shape s) {
    tandem_mmid_route_block(ids, counts, lists, dst, s);
}
#endif
#if defined(TANDEM_WMMA_ENTRIES)
// The same for the "wmma" family (entry names are unique across families).
extern "C" __global__ void __launch_bounds__(1024)
tandem_wmma_route(const char* ids, i32* counts, i32* lists, char* dst, tandem_mmid_shape s) {
    tandem_mmid_route_block(ids, counts, lists, dst, s);
}
#endif

// Columns of one expert: its slots lists[j0 .. j0 + 64) (of count), slot (u, t) reading q8_1
// column (u % n_b) + n_b * t and writing dst[., u, t].
struct tandem_mma_routed_cols {
    const i32* list;
    int count;
    i64 n_used, n_b, nb1, nb2;
    char* dst;
    __device__ i64 act(int c) const {
        if (c >= count) return -1;
        const i64 q = list[c];
        return (q % n_used) % n_b + n_b * (q / n_used);
    }
    __device__ char* out(int c) const {
        if (c >= count) return nullptr;
        const i64 q = list[c];
        return dst + (q % n_used) * nb1 + (q / n_used) * nb2;
    }
};

// ---------------------------------------------------------------- pipelined copies
// Global-to-shared copies that do not wait (cp.async, sm_80+), so a tile's next k step is in
// flight while the current one is multiplied. `bytes` (0..size) are copied and the rest of the
// `size` bytes zero-filled; `src` must be `size`-aligned (and valid even when bytes is 0).
// Elsewhere (the kernels are never picked there) plain copies keep the code compiling.

TANDEM_DEVICE u32 tandem_smem_addr(const void* p) {
#if defined(TANDEM_MMA_ENABLED)
    u32 a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
#else
    return (u32)(u64)p;
#endif
}
// The plain copy of SIZE bytes (8 or 16): one vector load and store when all are copied, else
// byte by byte with the rest zero.
template <int SIZE>
TANDEM_DEVICE void tandem_copy_plain(u8* dst, const void* src, int bytes) {
    if (bytes == SIZE) {
        if constexpr (SIZE == 16) {
            *(uint4*)dst = *(const uint4*)src;
        } else {
            *(uint2*)dst = *(const uint2*)src;
        }
        return;
    }
    for (int i = 0; i < SIZE; ++i) dst[i] = i < bytes ? ((const u8*)src)[i] : 0;
}
// The same with the shared-memory destination given as a shared address.
TANDEM_DEVICE void tandem_cp16s(u32 dst, const void* src, int bytes) {
#if defined(TANDEM_MMA_ENABLED)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(bytes));
#else
    tandem_copy_plain<16>((u8*)(u64)dst, src, bytes);
#endif
}
TANDEM_DEVICE void tandem_cp8(void* dst, const void* src, int bytes) {
#if defined(TANDEM_MMA_ENABLED)
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;" ::"r"(tandem_smem_addr(dst)), "l"(src), "r"(bytes));
#else
    tandem_copy_plain<8>((u8*)dst, src, bytes);
#endif
}
TANDEM_DEVICE void tandem_cp16(void* dst, const void* src, int bytes) {
#if defined(TANDEM_MMA_ENABLED)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(tandem_smem_addr(dst)), "l"(src), "r"(bytes));
#else
    tandem_copy_plain<16>((u8*)dst, src, bytes);
#endif
}
TANDEM_DEVICE void tandem_cp_commit() {
#if defined(TANDEM_MMA_ENABLED)
    asm volatile("cp.async.commit_group;");
#endif
}
// Waits until at most N committed groups of this thread are still in flight.
template <int N>
TANDEM_DEVICE void tandem_cp_wait() {
#if defined(TANDEM_MMA_ENABLED)
    asm volatile("cp.async.wait_group %0;" ::"n"(N));
#endif
}

// Four 8x8 matrices of 16-bit elements (rows of 16 bytes in shared memory, row addresses from
// lanes 0-7, 8-15, 16-23, 24-31): thread t gets row t / 4, bytes 4 (t % 4) .. of each.
TANDEM_DEVICE void tandem_ldsm4(u32 (&r)[4], const u8* p) {
#if defined(TANDEM_MMA_ENABLED)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(tandem_smem_addr(p)));
#else
    r[0] = r[1] = r[2] = r[3] = 0;
#endif
}

// The exact group sums of every int8 tile: an int32 sum that starts from TANDEM_SUM_BIAS, read as
// f32, is R = 12582912 + sum exactly (|sum| < 2^22), and fmaf(d, R, tandem_sum_unbias(d)) is
// d * sum rounded once (-12582912 d is exact for a d of at most 21 significant bits: an f16
// scale, or one times a 6-bit sub-scale).
#define TANDEM_SUM_BIAS 0x4B400000
TANDEM_DEVICE float tandem_sum_unbias(float d) { return -12582912.0f * d; }

#if defined(TANDEM_MMA_ENABLED)
// Int8 mma whose int32 sums start from TANDEM_SUM_BIAS (tandem_imma_f32 gives the sum):
// m16n8k32 over a 32-value group (A: rows r, r + 8 of values 4 c .. and 16 + 4 c ..; B: the two
// halves' registers) ...
TANDEM_DEVICE void tandem_imma32(int (&c)[4], u32 a0, u32 a1, u32 a2, u32 a3, u32 b0, u32 b1) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%10, %10, %10, %10};"
        : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(TANDEM_SUM_BIAS));
}
// ... and m16n8k16 over one half of a group (A: rows r, r + 8).
TANDEM_DEVICE void tandem_imma16(int (&c)[4], u32 a0, u32 a1, u32 b) {
    asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
        "{%7, %7, %7, %7};"
        : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
        : "r"(a0), "r"(a1), "r"(b), "r"(TANDEM_SUM_BIAS));
}
TANDEM_DEVICE float tandem_imma_f32(int c) { return __int_as_float(c) + tandem_sum_unbias(1.0f); }
// The sums of B's int8 values over one half group, for its columns 2 (lane % 4) and + 1: an
// m16n8k16 against ones (exact, as the others).
TANDEM_DEVICE void tandem_imma_sums16(u32 b, float& s0, float& s1) {
    int c[4];
    tandem_imma16(c, 0x01010101u, 0x01010101u, b);
    s0 = tandem_imma_f32(c[0]);
    s1 = tandem_imma_f32(c[1]);
}
#endif

// ---------------------------------------------------------------- integer path, 32-value blocks
// Weights whose blocks are single 32-value groups (q4_0, q4_1, q5_0, q5_1, q8_0, iq4_nl), and
// the superblock types (q2_K .. q6_K) a superblock at a time. Block = 128 threads (four warps),
// output tile 64 x 64; per k step (128 values: four blocks; 256: one superblock) the raw weights
// of the 64 rows (row r at r * PAD, zero past m and k), the 64 columns' int8 activations (rows
// of the step's values plus 16 bytes) and their (d, d * sum) pairs go to shared memory with
// cp.async, two steps in flight (dynamic shared memory, 37-74 KiB). Warp w takes rows 16 w ..
// 16 w + 16 against all 64 columns: per group it unpacks its A fragments straight from the raw
// weights (frag(): values 4 c .. 4 c + 3 and 16 + 4 c .. of the group, c = lane % 4), loads B
// fragments with ldmatrix, and does eight m16n8k32 mma (q2_K, q3_K, q6_K: sixteen m16n8k16, see
// tandem_mmq_halves). The mma starts from 0x4B400000 so its int32 sum, read as f32, is
// 12582912 + sum exactly.

#define TANDEM_MMQ_THREADS 128
#define TANDEM_MMQ_BM 64
#define TANDEM_MMQ_BN 64

// The weights of a k step as the tiles read them: KG of the eight 32-value groups a chunk of the
// tensor-core GEMV's reader R holds (R below: tandem_mmv_blocks<F> for the 32-value block types,
// four blocks per step; tandem_mmvw_q2_K .. q6_K, a superblock per step), STEP raw bytes of a
// row per step, and R's frag(r, g, c, lo, hi, d, m) (HALVES: frag16, mins16) for group g of the
// step's row at r.
// WINDOW: steps that start only 2- or 4-byte aligned (the 84-, 110- and 210-byte superblocks of
// q2_K, q3_K, q6_K, whose groups have a scale per 16 values: HALVES readers); each row's step is
// copied as the 16-byte units around it and starts (its address % 16) bytes into its staged row.
template <typename R, int G>
struct tandem_mmq_step : R {
    static constexpr int KG = G, STEP = R::CHUNK * G / 8;
    static constexpr bool WINDOW = STEP % 8 != 0;
    static_assert(STEP * 8 == R::CHUNK * G && (!R::HALVES || G == 8), "whole bytes per step; HALVES: superblocks");
};

// Shared rows of one k step: the raw weights (UNITS 16-byte units: with WINDOW up to 14 bytes
// before the step) padded to an odd number of 16-byte units (so the eight rows a fragment load
// touches start in distinct bank quads), the activations (ROW bytes).
template <typename T>
struct tandem_mmq_raw {
    static constexpr int UNITS = T::WINDOW ? (T::STEP + 14 + 15) / 16 : (T::STEP + 15) / 16;
    static constexpr int PAD = (UNITS | 1) * 16;
    static constexpr int ROW = T::KG * 32 + 16;
};

template <typename T>
struct tandem_mmq_smem {
    u8 w[2][TANDEM_MMQ_BM * tandem_mmq_raw<T>::PAD];
    u8 a[2][TANDEM_MMQ_BN * tandem_mmq_raw<T>::ROW];
    float2 ds[2][T::KG][TANDEM_MMQ_BN];
};

TANDEM_DEVICE u32 tandem_mma_lo4(u32 v) { return v & 0x0F0F0F0Fu; }
TANDEM_DEVICE u32 tandem_mma_hi4(u32 v) { return (v >> 4) & 0x0F0F0F0Fu; }

// frag(b, c, lo, hi, d, m): values 4c .. 4c + 3 (lo) and 16 + 4c .. 16 + 4c + 3 (hi) of the
// block at b as signed bytes; its weights are d * q + m. The blocks of an f16 d and WORDS 32-bit
// words (q4_0, q5_0, q8_0, iq4_nl; 2-byte aligned) also have frag_w(v, c, lo, hi): the same
// values from the words as tandem_half_words_a2 reads them (m = 0), for a thread that unpacks a
// whole block.
struct tandem_mmf_q4_0 {
    static constexpr int BYTES = 18;
    static constexpr bool MIN = false;
    static constexpr int WORDS = 4;
    static __device__ __forceinline__ void quad(u32 v, u32& lo, u32& hi) {
        lo = tandem_mma_unbias(tandem_mma_lo4(v), 0x08080808u);
        hi = tandem_mma_unbias(tandem_mma_hi4(v), 0x08080808u);
    }
    static __device__ __forceinline__ void frag(const u8* b, int c, u32& lo, u32& hi, float& d, float& m) {
        quad(tandem_mma_ld32(b + 2 + 4 * c), lo, hi);
        d = tandem_mma_half(b);
        m = 0.0f;
    }
    static __device__ __forceinline__ void frag_w(const u32 (&v)[WORDS], int c, u32& lo, u32& hi) {
        quad(v[c], lo, hi);
    }
};
struct tandem_mmf_q4_1 {
    static constexpr int BYTES = 20;
    static constexpr bool MIN = true;
    static __device__ __forceinline__ void frag(const u8* b, int c, u32& lo, u32& hi, float& d, float& m) {
        const u32 v = *(const u32*)(b + 4 + 4 * c);
        lo = tandem_mma_lo4(v);
        hi = tandem_mma_hi4(v);
        d = tandem_mma_half(b);
        m = tandem_mma_half(b + 2);
    }
};
struct tandem_mmf_q5_0 {
    static constexpr int BYTES = 22;
    static constexpr bool MIN = false;
    static constexpr int WORDS = 5;
    static __device__ __forceinline__ void quad(u32 qh, u32 v, int c, u32& lo, u32& hi) {
        lo = tandem_mma_unbias(tandem_mma_lo4(v) | tandem_mma_spread4(qh >> (4 * c)), 0x10101010u);
        hi = tandem_mma_unbias(tandem_mma_hi4(v) | tandem_mma_spread4(qh >> (16 + 4 * c)), 0x10101010u);
    }
    static __device__ __forceinline__ void frag(const u8* b, int c, u32& lo, u32& hi, float& d, float& m) {
        quad(tandem_mma_ld32(b + 2), tandem_mma_ld32(b + 6 + 4 * c), c, lo, hi);
        d = tandem_mma_half(b);
        m = 0.0f;
    }
    static __device__ __forceinline__ void frag_w(const u32 (&v)[WORDS], int c, u32& lo, u32& hi) {
        quad(v[0], v[1 + c], c, lo, hi);
    }
};
struct tandem_mmf_q5_1 {
    static constexpr int BYTES = 24;
    static constexpr bool MIN = true;
    static __device__ __forceinline__ void frag(const u8* b, int c, u32& lo, u32& hi, float& d, float& m) {
        const u32 qh = *(const u32*)(b + 4);
        const u32 v = *(const u32*)(b + 8 + 4 * c);
        lo = tandem_mma_lo4(v) | tandem_mma_spread4(qh >> (4 * c));
        hi = tandem_mma_hi4(v) | tandem_mma_spread4(qh >> (16 + 4 * c));
        d = tandem_mma_half(b);
        m = tandem_mma_half(b + 2);
    }
};
struct tandem_mmf_q8_0 {
    static constexpr int BYTES = 34;
    static constexpr bool MIN = false;
    static constexpr int WORDS = 8;
    static __device__ __forceinline__ void frag(const u8* b, int c, u32& lo, u32& hi, float& d, float& m) {
        lo = tandem_mma_ld32(b + 2 + 4 * c);
        hi = tandem_mma_ld32(b + 18 + 4 * c);
        d = tandem_mma_half(b);
        m = 0.0f;
    }
    static __device__ __forceinline__ void frag_w(const u32 (&v)[WORDS], int c, u32& lo, u32& hi) {
        lo = v[c];
        hi = v[4 + c];
    }
};
struct tandem_mmf_iq4_nl {
    static constexpr int BYTES = 18;
    static constexpr bool MIN = false;
    static constexpr int WORDS = 4;
    static __device__ __forceinline__ void quad(u32 v, u32& lo, u32& hi) { tandem_iq4nl_levels8(v, lo, hi); }
    static __device__ __forceinline__ void frag(const u8* b, int c, u32& lo, u32& hi, float& d, float& m) {
        quad(tandem_mma_ld32(b + 2 + 4 * c), lo, hi);
        d = tandem_mma_half(b);
        m = 0.0f;
    }
    static __device__ __forceinline__ void frag_w(const u32 (&v)[WORDS], int c, u32& lo, u32& hi) {
        quad(v[c], lo, hi);
    }
};

// Whether block type T has frag_w (see tandem_mmf_q4_0).
template <typename T, typename = void>
struct tandem_mma_has_words {
    static constexpr bool value = false;
};
template <typename T>
struct tandem_mma_has_words<T, decltype((void)T::WORDS)> {
    static constexpr bool value = true;
};

// A thread's share of a tile's copies: thread t copies half (t % 2) of weight row t / 2's raw
// step (8-byte units t % 2, t % 2 + 2, ...: the two threads of a row take adjacent units, so
// each copy instruction reads 16 bytes of a row), of activation column t / 2's int8 values (KG
// 16-byte units) and of its scale pairs (KG / 2). The pointers are at the current k step and
// advance by one step at a time; rows past m and columns the map lacks copy nothing
// (zero-filled), from valid addresses.
template <typename T>
struct tandem_mmq_plan {
    static constexpr int UNITS = T::STEP / 8;  // per weight row
    static constexpr int UH = (UNITS + 1) / 2;                    // per thread
    static constexpr int UN = UNITS - (UNITS + 1) / 2;            // for the second thread of a row
    const u8* w;
    const char* a;
    const char* d;
    int wn, an;        // bytes per weight / activation unit copied (8 or 0, 16 or 0)
    int units;         // this thread's weight units (UH or UN)
    u32 wdst, adst, ddst;  // their shared offsets within a stage buffer
};

template <typename T, typename C>
TANDEM_DEVICE tandem_mmq_plan<T> tandem_mmq_make_plan(const u8* wb, i64 nb01, i64 m, i64 k, i64 row0,
                                                     const char* aq, const char* ads, const C& cols) {
    constexpr int RP = tandem_mmq_raw<T>::PAD;
    tandem_mmq_plan<T> p;
    const int r = threadIdx.x / 2, half = threadIdx.x % 2;
    const int wu0 = T::WINDOW ? 0 : half;
    p.units = half == 0 ? tandem_mmq_plan<T>::UH : tandem_mmq_plan<T>::UN;
    const i64 row = row0 + r;
    p.wn = row < m ? 8 : 0;
    p.w = row < m ? wb + row * nb01 + 8 * wu0 : wb;
    const i64 col = cols.act(r);
    p.an = col >= 0 ? 16 : 0;
    p.a = col >= 0 ? aq + col * k + 16 * T::KG * half : aq;
    p.d = col >= 0 ? ads + (col * (k / 32) + T::KG / 2 * half) * 8 : ads;
    p.wdst = (u32)(r * RP + 8 * wu0);
    p.adst = (u32)(r * tandem_mmq_raw<T>::ROW + 16 * T::KG * half);
    p.ddst = (u32)((T::KG / 2 * half * TANDEM_MMQ_BN + r) * 8);
    return p;
}

// A whole step's activation values and pairs of the plan's column.
template <typename T>
TANDEM_DEVICE void tandem_mmq_stage_acts(u8* adst, u8* ddst, const tandem_mmq_plan<T>& p) {
#pragma unroll
    for (int j = 0; j < T::KG; ++j) tandem_cp16(adst + 16 * j, p.a + 16 * j, p.an);
#pragma unroll
    for (int j = 0; j < T::KG / 2; ++j) tandem_cp8(ddst + j * TANDEM_MMQ_BN * 8, p.d + 8 * j, p.an / 2);
}

// Queues the plan's current k step into buffer `buf` and advances the plan. `ng`: groups of
// the step inside k (KG but at the end; always KG for the superblock types); `al`: weight rows
// 8-byte aligned (else plain 2-byte copies; WINDOW steps need only the 2 bytes every row has).
template <typename T>
TANDEM_DEVICE void tandem_mmq_stage(tandem_mmq_smem<T>& sm, int buf, tandem_mmq_plan<T>& p, int ng, bool al) {
    u8* wdst = sm.w[buf] + p.wdst;
    u8* adst = sm.a[buf] + p.adst;
    u8* ddst = (u8*)&sm.ds[buf][0][0] + p.ddst;
    if constexpr (T::WINDOW) {
        // Row t / 2's step as the 16-byte units around it, staged from the row's start: the step
        // begins p.w % 16 bytes in. Thread half h takes units h, h + 2, ... (the step's bytes
        // only: nothing past it is read; copies of no bytes name the activation pointer, valid
        // and 16-byte aligned where the weights may not be).
        constexpr int U = tandem_mmq_raw<T>::UNITS;
        const int half = threadIdx.x % 2;
        const int lead = (int)((u64)p.w & 15u);
        const u8* src = p.w - lead;
#pragma unroll
        for (int i = 0; i < (U + 1) / 2; ++i) {
            const int j = 2 * i + half;
            int n = p.wn != 0 ? T::STEP + lead - 16 * j : 0;
            n = n < 0 ? 0 : (n > 16 ? 16 : n);
            if (j < U) tandem_cp16(wdst + 16 * j, n > 0 ? src + 16 * j : (const u8*)p.a, n);
        }
        tandem_mmq_stage_acts<T>(adst, ddst, p);
    } else if (ng == T::KG && al) {
#pragma unroll
        for (int j = 0; j < tandem_mmq_plan<T>::UH; ++j) {
            if (j < p.units) tandem_cp8(wdst + 16 * j, p.w + 16 * j, p.wn);
        }
        tandem_mmq_stage_acts<T>(adst, ddst, p);
    } else {
        // The last, partial step, or unaligned weight rows: bytes past the step's groups are zero.
        const int half = threadIdx.x % 2;
        const int valid = ng * T::STEP / T::KG - 8 * half;
        for (int j = 0; j < p.units; ++j) {
            int n = p.wn != 0 ? valid - 16 * j : 0;
            n = n < 0 ? 0 : (n > 8 ? 8 : n);
            const u8* src = p.w + 16 * j;
            if (al) {
                tandem_cp8(wdst + 16 * j, n > 0 ? src : p.w, n);
            } else {
                for (int i = 0; i < 8; i += 2) *(u16*)(wdst + 16 * j + i) = i < n ? *(const u16*)(src + i) : (u16)0;
            }
        }
#pragma unroll
        for (int j = 0; j < T::KG; ++j) {
            const bool in = T::KG / 2 * half + j / 2 < ng;
            tandem_cp16(adst + 16 * j, in ? p.a + 16 * j : p.a, in ? p.an : 0);
        }
#pragma unroll
        for (int j = 0; j < T::KG / 2; ++j) {
            const bool in = T::KG / 2 * half + j < ng;
            tandem_cp8(ddst + j * TANDEM_MMQ_BN * 8, in ? p.d + 8 * j : p.d, in ? p.an / 2 : 0);
        }
    }
    p.w += p.wn != 0 ? T::STEP : 0;
    p.a += p.an != 0 ? T::KG * 32 : 0;
    p.d += p.an != 0 ? T::KG * 8 : 0;
}

#if defined(TANDEM_MMA_ENABLED)
// One superblock step of the HALVES types (a scale per 16 values) for a warp's 16 rows against
// the 64 columns: per group two m16n8k16 mma per column tile, one per half (the halves of the
// m16n8k32 B fragments), their sums scaled per row and half (the first straight from the mma's
// f32 form in one fma, the same value the tensor-core GEMV computes in two steps); q2_K's
// mins take each half's activation sums from one more mma against ones. `w0`, `w1`: the staged
// superblocks of rows lane / 4 and lane / 4 + 8, `arow`: this lane's ldmatrix row.
template <typename T>
TANDEM_DEVICE void tandem_mmq_halves(float (&acc)[8][4], const u8* w0, const u8* w1, const u8* arow,
                                     const float2 (&ds)[T::KG][TANDEM_MMQ_BN], int qc) {
    constexpr int AR = tandem_mmq_raw<T>::ROW;
#pragma unroll (T::MIN ? T::KG : 2)
    for (int gi = 0; gi < T::KG; ++gi) {
        u32 v0[2], v1[2];
        float ds0[2], ds1[2], ms0[2] = {0.0f, 0.0f}, ms1[2] = {0.0f, 0.0f};
        T::frag16(w0, gi, qc, v0, ds0);
        T::frag16(w1, gi, qc, v1, ds1);
        if constexpr (T::MIN) {
            T::mins16(w0, gi, ms0);
            T::mins16(w1, gi, ms1);
        }
        // -12582912 times the first half's scale of each row: exact (d * sc has at most 19
        // significant bits), so fmaf(scale, R, nm) is scale * sum rounded once.
        const float nm0 = tandem_sum_unbias(ds0[0]), nm1 = tandem_sum_unbias(ds1[0]);
#pragma unroll
        for (int np = 0; np < 4; ++np) {
            u32 fb[4];
            tandem_ldsm4(fb, arow + 16 * np * AR + 32 * gi);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int nt = 2 * np + h;
                const float4 sc = *(const float4*)&ds[gi][8 * nt + 2 * qc];
                int ci[2][4];
#pragma unroll
                for (int x = 0; x < 2; ++x) tandem_imma16(ci[x], v0[x], v1[x], fb[2 * h + x]);
                float as[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
                if constexpr (T::MIN) {
#pragma unroll
                    for (int x = 0; x < 2; ++x) tandem_imma_sums16(fb[2 * h + x], as[x][0], as[x][1]);
                }
                // Row r, column j: acc += d_a,j * (d sc0_r * sum0 + d sc1_r * sum1
                //                                  [- mn0_r * asum0_j - mn1_r * asum1_j]).
                float* a = acc[nt];
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const float* dr = e < 2 ? ds0 : ds1;
                    const float t0 = fmaf(dr[0], __int_as_float(ci[0][e]), e < 2 ? nm0 : nm1);
                    float in = fmaf(dr[1], tandem_imma_f32(ci[1][e]), t0);
                    if constexpr (T::MIN) {
                        const float* mr = e < 2 ? ms0 : ms1;
                        in = fmaf(-mr[1], as[1][e & 1], fmaf(-mr[0], as[0][e & 1], in));
                    }
                    a[e] = fmaf((e & 1) ? sc.z : sc.x, in, a[e]);
                }
            }
        }
    }
}
#endif

// ---------------------------------------------------------------- integer path, AMD WMMA
// The same tiles on AMD RDNA3 (gfx11) and RDNA4 (gfx12) wave32 matrix instructions: per 32-value
// group two int8 16x16x16 WMMA per 16-column tile (one per 16 values), the group's int32 sums
// scaled as the mma path scales them (HALVES types: each half's sums with its own scale). A wave takes the tile's 16 rows 16 w .. (w: its wave) as
// A (16 rows x 16 k) and the 64 columns as four B tiles (16 k x 16 columns). Register layouts,
// lane l, l16 = l % 16, h = l / 16 (from AMD's RDNA3 and RDNA4 ISA guides):
//   gfx11 (layout 11): A: row l16, k 0..15 (lanes 16-31 hold the same as 0-15); B: column l16,
//         k 0..15 (likewise); C/D: column l16, rows 2 i + h for element i = 0..7.
//   gfx12 (layout 12): A: row l16, k 8 h .. 8 h + 7; B: column l16, k 8 h ..; C/D: column l16,
//         rows 8 h + i.
// Built for gfx11 / gfx12 the builtins run; built for NVIDIA the same kernels (the "wmma" family,
// TANDEM_WMMA_ENTRIES) emulate the instruction with lane shuffles in the layout the launcher
// passes, which tests everything around it on a device tandem can reach; elsewhere they write
// NaN (the launcher never picks them there).
#if defined(__gfx1100__) || defined(__gfx1101__) || defined(__gfx1102__) || defined(__gfx1103__) || \
    defined(__gfx1150__) || defined(__gfx1151__) || defined(__gfx1152__) || defined(__gfx1153__)
#define TANDEM_WMMA_NATIVE 11
#elif defined(__gfx1200__) || defined(__gfx1201__)
#define TANDEM_WMMA_NATIVE 12
#endif
#if defined(TANDEM_WMMA_NATIVE) || defined(TANDEM_NVIDIA)
#define TANDEM_WMMA_RUNS 1
#endif

// Row of the tile's 16 that element i of a lane's C holds in layout `lay` (built for gfx11 or
// gfx12: that chip's layout, whatever `lay` says). (Templates, like the helpers below: only the
// "wmma" family's build references them.)
template <typename L = int>
TANDEM_DEVICE int tandem_wmma_row(L lay, int i) {
    const int h = (threadIdx.x % 32) / 16;
#if defined(TANDEM_WMMA_NATIVE)
    (void)lay;
    return TANDEM_WMMA_NATIVE == 12 ? 8 * h + i : 2 * i + h;
#else
    return lay == 12 ? 8 * h + i : 2 * i + h;
#endif
}

// x where h is false, else y, as a bit select: the AMD compiler turns a ternary between two
// elements of a register array into one load at a computed index, which puts the array in
// scratch memory.
template <typename L = int>
TANDEM_DEVICE u32 tandem_wmma_pick(bool h, u32 x, u32 y) {
    const u32 m = 0u - (u32)h;
    return (x & ~m) | (y & m);
}

// c += A x B over one 16x16x16 int8 tile (signed bytes). a, b: this lane's A row and B column
// (l16) as four words of k 0..15; in layout 12 the instruction takes words 2 h, 2 h + 1.
template <typename L = int>
TANDEM_DEVICE void tandem_wmma_i8(int (&c)[8], const u32 (&a)[4], const u32 (&b)[4], L lay) {
#if TANDEM_WMMA_NATIVE == 11
    typedef int v4i __attribute__((ext_vector_type(4)));
    typedef int v8i __attribute__((ext_vector_type(8)));
    const v4i va = {(int)a[0], (int)a[1], (int)a[2], (int)a[3]};
    const v4i vb = {(int)b[0], (int)b[1], (int)b[2], (int)b[3]};
    v8i vc = {c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]};
    vc = __builtin_amdgcn_wmma_i32_16x16x16_iu8_w32(true, va, true, vb, vc, false);
    for (int i = 0; i < 8; ++i) c[i] = vc[i];
    (void)lay;
#elif TANDEM_WMMA_NATIVE == 12
    typedef int v2i __attribute__((ext_vector_type(2)));
    typedef int v8i __attribute__((ext_vector_type(8)));
    const bool h = (threadIdx.x % 32) >= 16;
    const v2i va = {(int)tandem_wmma_pick(h, a[0], a[2]), (int)tandem_wmma_pick(h, a[1], a[3])};
    const v2i vb = {(int)tandem_wmma_pick(h, b[0], b[2]), (int)tandem_wmma_pick(h, b[1], b[3])};
    v8i vc = {c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]};
    vc = __builtin_amdgcn_wmma_i32_16x16x16_iu8_w32_gfx12(true, va, true, vb, vc, false);
    for (int i = 0; i < 8; ++i) c[i] = vc[i];
    (void)lay;
#elif defined(TANDEM_NVIDIA)
    // The instruction's arithmetic from the registers it reads in layout `lay`: element i is
    // row r = tandem_wmma_row(lay, i), column l16; layout 11 reads A and B from lanes 0-15,
    // layout 12 each 8-value half from the lanes that hold it (h = 0: lanes 0-15, 1: 16-31).
    const int l16 = threadIdx.x % 32 % 16;
    for (int i = 0; i < 8; ++i) {
        const int r = tandem_wmma_row(lay, i);
        int s = 0;
        for (int w = 0; w < 4; ++w) {
            const int src = lay == 12 ? w / 2 * 16 : 0;  // lanes of the half that holds word w
            const int aw = __shfl((int)a[w], r + src);
            const int bw = __shfl((int)b[w], l16 + src);
            asm("dp4a.s32.s32 %0, %1, %2, %0;" : "+r"(s) : "r"(aw), "r"(bw));
        }
        c[i] += s;
    }
#else
    for (int i = 0; i < 8; ++i) c[i] = 0;
    (void)a, (void)b, (void)lay;
#endif
}

// c += A x B over one 16x16x16 f16 tile with f32 sums. a, b: this lane's A row and B column (l16)
// as eight words (two f16 each) of k 0..15; in layout 12 the instruction takes words 4 h .. 4 h + 3.
template <typename L = int>
TANDEM_DEVICE void tandem_wmma_h16(float (&c)[8], const u32 (&a)[8], const u32 (&b)[8], L lay) {
#if TANDEM_WMMA_NATIVE == 11
    typedef unsigned int v8u __attribute__((ext_vector_type(8)));
    typedef _Float16 v16h __attribute__((ext_vector_type(16)));
    typedef float v8f __attribute__((ext_vector_type(8)));
    const v8u ua = {a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]};
    const v8u ub = {b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]};
    v8f vc = {c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]};
    vc = __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(__builtin_bit_cast(v16h, ua), __builtin_bit_cast(v16h, ub), vc);
    for (int i = 0; i < 8; ++i) c[i] = vc[i];
    (void)lay;
#elif TANDEM_WMMA_NATIVE == 12
    typedef unsigned int v4u __attribute__((ext_vector_type(4)));
    typedef _Float16 v8h __attribute__((ext_vector_type(8)));
    typedef float v8f __attribute__((ext_vector_type(8)));
    const bool h = (threadIdx.x % 32) >= 16;
    const v4u ua = {tandem_wmma_pick(h, a[0], a[4]), tandem_wmma_pick(h, a[1], a[5]), tandem_wmma_pick(h, a[2], a[6]),
                    tandem_wmma_pick(h, a[3], a[7])};
    const v4u ub = {tandem_wmma_pick(h, b[0], b[4]), tandem_wmma_pick(h, b[1], b[5]), tandem_wmma_pick(h, b[2], b[6]),
                    tandem_wmma_pick(h, b[3], b[7])};
    v8f vc = {c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]};
    vc = __builtin_amdgcn_wmma_f32_16x16x16_f16_w32_gfx12(__builtin_bit_cast(v8h, ua), __builtin_bit_cast(v8h, ub),
                                                           vc);
    for (int i = 0; i < 8; ++i) c[i] = vc[i];
    (void)lay;
#elif defined(TANDEM_NVIDIA)
    // As in tandem_wmma_i8: row r of element i, the words from the lanes the instruction reads.
    const int l16 = threadIdx.x % 32 % 16;
    for (int i = 0; i < 8; ++i) {
        const int r = tandem_wmma_row(lay, i);
        float s = 0.0f;
        for (int w = 0; w < 8; ++w) {
            const int src = lay == 12 ? w / 4 * 16 : 0;
            const u32 aw = (u32)__shfl((int)a[w], r + src);
            const u32 bw = (u32)__shfl((int)b[w], l16 + src);
            s = fmaf(tandem_f16_to_f32((u16)(aw & 0xffffu)), tandem_f16_to_f32((u16)(bw & 0xffffu)), s);
            s = fmaf(tandem_f16_to_f32((u16)(aw >> 16)), tandem_f16_to_f32((u16)(bw >> 16)), s);
        }
        c[i] += s;
    }
#else
    for (int i = 0; i < 8; ++i) c[i] = 0.0f;
    (void)a, (void)b, (void)lay;
#endif
}

// ---------------------------------------------------------------- AMD CDNA MFMA (layout 9)
// The same tiles on AMD CDNA (gfx908, gfx90a, gfx94x, gfx950) wave64 matrix instructions, run by
// the "wmma" family's entries when the launcher passes layout 9. A wave is 64 lanes, lane l,
// l16 = l % 16, q = l / 16; 16 x 16 tiles (AMD's CDNA3 ISA guide; ggml's CUDA/HIP backend reads
// them the same way):
//   int8, 16x16x32 (gfx94x, gfx950): A: row l16, 8 bytes of k; B: column l16, the same 8 k;
//         16x16x16 (gfx908, gfx90a, two per 32-value group): A: row l16, 4 bytes; B likewise;
//   f16 16x16x16: A: row l16, k 4 q .. 4 q + 3; B: column l16, the same k;
//   C/D: column l16, rows 4 q + i for element i = 0..3.
// Each lane holds a 32-value group's values 4 q .. 4 q + 3 and 16 + 4 q .. (frag()'s c = q): the
// 16x16x32 instruction takes them as its 8 bytes, the 16x16x16 ones as one half of the group
// each; A and B hold the same values, so either way the sums are the group's. Integer tiles: a
// wave takes 32 of the tile's 64 rows (two A tiles) against its 64 columns (four B tiles); f16
// tiles: 32 of the 128 rows against the 64 columns.
// On NVIDIA (TANDEM_WMMA_EMULATE=9) a wave is two warps: the instruction's and the lane
// shuffles' words go through shared memory between the wave's named barriers.
#if defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__) || defined(__gfx950__)
#define TANDEM_CDNA_NATIVE 3
#elif defined(__gfx908__) || defined(__gfx90a__)
#define TANDEM_CDNA_NATIVE 1
#endif
#if defined(TANDEM_CDNA_NATIVE) || defined(TANDEM_NVIDIA)
#define TANDEM_CDNA_RUNS 1
#endif
// The layout value that selects these tiles (`wmma_native_layout` in matmul_launch.rs).
#define TANDEM_CDNA_LAYOUT 9

#if defined(TANDEM_NVIDIA)
// Emulation: two words per lane of each of up to four waves (threads 64 w ..), and the barrier
// of the wave's two warps.
template <typename L = int>
TANDEM_DEVICE u32* tandem_cdna_words() {
    __shared__ u32 x[4 * 64 * 2];
    return x + (threadIdx.x / 64) * 128;
}
TANDEM_DEVICE void tandem_cdna_bar() {
    asm volatile("bar.sync %0, 64;" ::"r"(1 + (int)(threadIdx.x / 64)) : "memory");
}
#endif

// r[i] = v of lane 4 q + i of this lane's wave: the value of each row a lane's C holds, from the
// lanes (l16 = row) that computed it.
template <typename L = int>
TANDEM_DEVICE void tandem_cdna_rows(float v, float (&r)[4]) {
    const int q = threadIdx.x % 64 / 16;
#if defined(TANDEM_CDNA_NATIVE)
#pragma unroll
    for (int i = 0; i < 4; ++i) r[i] = __shfl(v, 4 * q + i);
#elif defined(TANDEM_NVIDIA)
    u32* x = tandem_cdna_words<L>();
    x[2 * (threadIdx.x % 64)] = __float_as_uint(v);
    tandem_cdna_bar();
#pragma unroll
    for (int i = 0; i < 4; ++i) r[i] = __uint_as_float(x[2 * (4 * q + i)]);
    tandem_cdna_bar();
#else
#pragma unroll
    for (int i = 0; i < 4; ++i) r[i] = v;
#endif
}

#if defined(TANDEM_NVIDIA) && !defined(TANDEM_CDNA_NATIVE)
// The emulated instruction's operands: a[i][p] the two A words of lane (4 q + i) + 16 p (row
// 4 q + i, values of lane group p), b[p] those of B from lane l16 + 16 p.
template <typename L = int>
TANDEM_DEVICE void tandem_cdna_gather(u32 a0, u32 a1, u32 b0, u32 b1, u32 (&a)[4][4][2], u32 (&b)[4][2]) {
    u32* x = tandem_cdna_words<L>();
    const int lane = threadIdx.x % 64, l16 = lane % 16, q = lane / 16;
    x[2 * lane] = a0;
    x[2 * lane + 1] = a1;
    tandem_cdna_bar();
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int p = 0; p < 4; ++p) {
            a[i][p][0] = x[2 * (4 * q + i + 16 * p)];
            a[i][p][1] = x[2 * (4 * q + i + 16 * p) + 1];
        }
    tandem_cdna_bar();
    x[2 * lane] = b0;
    x[2 * lane + 1] = b1;
    tandem_cdna_bar();
#pragma unroll
    for (int p = 0; p < 4; ++p) {
        b[p][0] = x[2 * (l16 + 16 * p)];
        b[p][1] = x[2 * (l16 + 16 * p) + 1];
    }
    tandem_cdna_bar();
}
#endif

// c += A x B over one 16 x 16 int8 tile and a 32-value group: a0, a1 this lane's A words (row
// l16: values 4 q .., 16 + 4 q ..), b0, b1 its B words (column l16, the same values).
template <typename L = int>
TANDEM_DEVICE void tandem_cdna_i8(int (&c)[4], u32 a0, u32 a1, u32 b0, u32 b1) {
#if defined(TANDEM_CDNA_NATIVE)
    typedef int v4i __attribute__((ext_vector_type(4)));
    v4i vc = {c[0], c[1], c[2], c[3]};
#if TANDEM_CDNA_NATIVE == 3
    const long va = (long)(((u64)a1 << 32) | a0), vb = (long)(((u64)b1 << 32) | b0);
    vc = __builtin_amdgcn_mfma_i32_16x16x32_i8(va, vb, vc, 0, 0, 0);
#else
    vc = __builtin_amdgcn_mfma_i32_16x16x16i8((int)a0, (int)b0, vc, 0, 0, 0);
    vc = __builtin_amdgcn_mfma_i32_16x16x16i8((int)a1, (int)b1, vc, 0, 0, 0);
#endif
#pragma unroll
    for (int i = 0; i < 4; ++i) c[i] = vc[i];
#elif defined(TANDEM_NVIDIA)
    u32 a[4][4][2], b[4][2];
    tandem_cdna_gather<L>(a0, a1, b0, b1, a, b);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        int s = 0;
#pragma unroll
        for (int p = 0; p < 4; ++p)
#pragma unroll
            for (int h = 0; h < 2; ++h) asm("dp4a.s32.s32 %0, %1, %2, %0;" : "+r"(s) : "r"(a[i][p][h]), "r"(b[p][h]));
        c[i] += s;
    }
#else
    (void)a0, (void)a1, (void)b0, (void)b1;
#pragma unroll
    for (int i = 0; i < 4; ++i) c[i] = 0;
#endif
}

// The same over 16 values (one word of A and of B per lane): one 16x16x16 on gfx908 / gfx90a,
// else the 32-value form with the other word zero.
template <typename L = int>
TANDEM_DEVICE void tandem_cdna_i8h(int (&c)[4], u32 a, u32 b) {
#if TANDEM_CDNA_NATIVE == 1
    typedef int v4i __attribute__((ext_vector_type(4)));
    v4i vc = {c[0], c[1], c[2], c[3]};
    vc = __builtin_amdgcn_mfma_i32_16x16x16i8((int)a, (int)b, vc, 0, 0, 0);
#pragma unroll
    for (int i = 0; i < 4; ++i) c[i] = vc[i];
#else
    tandem_cdna_i8<L>(c, a, 0u, b, 0u);
#endif
}

// c += A x B over one 16 x 16 f16 tile with f32 sums and 16 values of k: a0, a1 this lane's A
// row l16 at k 4 q .. 4 q + 3 (two f16 per word), b0, b1 its B column l16 at the same k.
template <typename L = int>
TANDEM_DEVICE void tandem_cdna_h16(float (&c)[4], u32 a0, u32 a1, u32 b0, u32 b1) {
#if defined(TANDEM_CDNA_NATIVE)
    typedef unsigned int v2u __attribute__((ext_vector_type(2)));
    typedef _Float16 v4h __attribute__((ext_vector_type(4)));
    typedef float v4f __attribute__((ext_vector_type(4)));
    const v2u ua = {a0, a1}, ub = {b0, b1};
    v4f vc = {c[0], c[1], c[2], c[3]};
    vc = __builtin_amdgcn_mfma_f32_16x16x16f16(__builtin_bit_cast(v4h, ua), __builtin_bit_cast(v4h, ub), vc, 0, 0,
                                               0);
#pragma unroll
    for (int i = 0; i < 4; ++i) c[i] = vc[i];
#elif defined(TANDEM_NVIDIA)
    u32 a[4][4][2], b[4][2];
    tandem_cdna_gather<L>(a0, a1, b0, b1, a, b);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        float s = 0.0f;
#pragma unroll
        for (int p = 0; p < 4; ++p)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const u32 x = a[i][p][h], y = b[p][h];
                s = fmaf(tandem_f16_to_f32((u16)(x & 0xffffu)), tandem_f16_to_f32((u16)(y & 0xffffu)), s);
                s = fmaf(tandem_f16_to_f32((u16)(x >> 16)), tandem_f16_to_f32((u16)(y >> 16)), s);
            }
        c[i] += s;
    }
#else
    (void)a0, (void)a1, (void)b0, (void)b1;
#pragma unroll
    for (int i = 0; i < 4; ++i) c[i] = 0.0f;
#endif
}

// One k step of the WMMA tiles (T: not HALVES) for this wave's 16 rows (row l16 staged at
// wrow + l16 * RP) against the 64 columns (column c's values at a + c * ROW, pairs ds[g][c]):
// acc[2 j + i / 4][i % 4] is row tandem_wmma_row(lay, i) of the wave's 16, column 16 j + l16.
// Per group: acc += d_a * (d * sum) [+ m * (d_a * sum(a))], as the mma path computes it (d * sum
// from sums that start from TANDEM_SUM_BIAS).
template <typename T>
TANDEM_DEVICE void tandem_wmma_step(float (&acc)[8][4], const u8* wrow, const u8* a,
                                    const float2 (*ds)[TANDEM_MMQ_BN], int lay) {
    static_assert(!T::HALVES, "a scale per 32 values");
#if defined(TANDEM_WMMA_RUNS)
    constexpr int AR = tandem_mmq_raw<T>::ROW;
    // The superblock types' eight groups two at a time: all eight at once outgrow gfx11 / gfx12's
    // 256 registers and spill to scratch (about 0.5 KiB per lane).
    constexpr int UNROLL = T::KG > 4 ? 2 : T::KG;
    const int l16 = threadIdx.x % 32 % 16;
#pragma unroll UNROLL
    for (int gi = 0; gi < T::KG; ++gi) {
        u32 lo[4], hi[4];
        float d, m;
#pragma unroll
        for (int c = 0; c < 4; ++c) T::frag(wrow, gi, c, lo[c], hi[c], d, m);
        // The d and m of the rows this lane's accumulators hold, from the lanes that unpacked them.
        float dr[8], nr[8], mr[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            dr[i] = __shfl(d, tandem_wmma_row(lay, i));
            nr[i] = tandem_sum_unbias(dr[i]);
            mr[i] = T::MIN ? __shfl(m, tandem_wmma_row(lay, i)) : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const u8* col = a + (16 * j + l16) * AR + 32 * gi;
            const uint4 v0 = *(const uint4*)col, v1 = *(const uint4*)(col + 16);
            const u32 b0[4] = {v0.x, v0.y, v0.z, v0.w}, b1[4] = {v1.x, v1.y, v1.z, v1.w};
            int c[8];
#pragma unroll
            for (int i = 0; i < 8; ++i) c[i] = TANDEM_SUM_BIAS;
            tandem_wmma_i8(c, lo, b0, lay);
            tandem_wmma_i8(c, hi, b1, lay);
            const float2 sc = ds[gi][16 * j + l16];
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                float& o = acc[2 * j + i / 4][i % 4];
                o = fmaf(sc.x, fmaf(dr[i], __int_as_float(c[i]), nr[i]), o);
                if (T::MIN) o = fmaf(mr[i], sc.y, o);
            }
        }
    }
#else
    // Built for a device without these instructions: never picked there; NaN if it were.
    (void)wrow, (void)a, (void)ds, (void)lay;
    tandem_acc_nan(acc);
#endif
}

// The sum of the four signed bytes of w.
template <typename L = int>
TANDEM_DEVICE int tandem_wmma_bsum(u32 w) {
    return (int)(i8)w + (int)(i8)(w >> 8) + (int)(i8)(w >> 16) + (int)(i8)(w >> 24);
}

// tandem_wmma_step for the HALVES types (q2_K, q3_K, q6_K: a scale per 16 values, q2_K an offset
// too): one WMMA per half group and 16-column tile, each half's sums scaled by its row's scale;
// q2_K's offsets take each half's activation sum, added up from the lane's own B bytes. The
// same arithmetic as tandem_mmq_halves: in = d sc0 sum0 + d sc1 sum1 [- mn0 asum0 - mn1 asum1],
// acc += d_a * in. `wrow`: this lane's row's staged superblock (past its lead).
template <typename T>
TANDEM_DEVICE void tandem_wmma_halves(float (&acc)[8][4], const u8* wrow, const u8* a,
                                      const float2 (*ds)[TANDEM_MMQ_BN], int lay) {
    static_assert(T::HALVES, "a scale per 16 values");
#if defined(TANDEM_WMMA_RUNS)
    constexpr int AR = tandem_mmq_raw<T>::ROW;
    const int l16 = threadIdx.x % 32 % 16;
#pragma unroll 2
    for (int gi = 0; gi < T::KG; ++gi) {
        u32 v[2][4];
        float sc[2], mn[2] = {0.0f, 0.0f};
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            u32 vc[2];
            T::frag16(wrow, gi, c, vc, sc);
            v[0][c] = vc[0];
            v[1][c] = vc[1];
        }
        if constexpr (T::MIN) T::mins16(wrow, gi, mn);
        // The scales (and offsets) of the rows this lane's accumulators hold.
        float sr[8][2], mr[8][2];
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int r = tandem_wmma_row(lay, i);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                sr[i][h] = __shfl(sc[h], r);
                mr[i][h] = T::MIN ? __shfl(mn[h], r) : 0.0f;
            }
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const u8* col = a + (16 * j + l16) * AR + 32 * gi;
            int c[2][8];
            float as[2] = {0.0f, 0.0f};
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const uint4 vb = *(const uint4*)(col + 16 * h);
                const u32 b[4] = {vb.x, vb.y, vb.z, vb.w};
#pragma unroll
                for (int i = 0; i < 8; ++i) c[h][i] = 0;
                tandem_wmma_i8(c[h], v[h], b, lay);
                if constexpr (T::MIN) {
                    as[h] = (float)(tandem_wmma_bsum(b[0]) + tandem_wmma_bsum(b[1]) + tandem_wmma_bsum(b[2]) +
                                    tandem_wmma_bsum(b[3]));
                }
            }
            const float da = ds[gi][16 * j + l16].x;
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                float in = fmaf(sr[i][1], (float)c[1][i], sr[i][0] * (float)c[0][i]);
                if constexpr (T::MIN) in = fmaf(-mr[i][1], as[1], fmaf(-mr[i][0], as[0], in));
                float& o = acc[2 * j + i / 4][i % 4];
                o = fmaf(da, in, o);
            }
        }
    }
#else
    (void)wrow, (void)a, (void)ds, (void)lay;
    tandem_acc_nan(acc);
#endif
}

// One k step of the CDNA tiles (T: not HALVES) for this wave's 32 rows (w0: the staged row l16 of
// its first 16, w1: of its second) against the 64 columns (column c's values at a + c * ROW,
// pairs ds[g][c]): acc[4 t + j][i] is row 16 t + 4 q + i of the wave's 32, column 16 j + l16.
// Per group: acc += d_a * (d * sum) [+ m * (d_a * sum(a))], as the WMMA tiles compute it.
template <typename T>
TANDEM_DEVICE void tandem_cdna_step(float (&acc)[8][4], const u8* w0, const u8* w1, const u8* a,
                                    const float2 (*ds)[TANDEM_MMQ_BN]) {
    static_assert(!T::HALVES, "a scale per 32 values");
#if defined(TANDEM_CDNA_RUNS)
    constexpr int AR = tandem_mmq_raw<T>::ROW;
    const int l16 = threadIdx.x % 16, q = threadIdx.x % 64 / 16;
    const u8* wr[2] = {w0, w1};
#pragma unroll
    for (int gi = 0; gi < T::KG; ++gi) {
        u32 lo[2], hi[2];
        float d[2], m[2], dr[2][4], nr[2][4], mr[2][4];
#pragma unroll
        for (int t = 0; t < 2; ++t) {
            T::frag(wr[t], gi, q, lo[t], hi[t], d[t], m[t]);
            tandem_cdna_rows(d[t], dr[t]);
#pragma unroll
            for (int i = 0; i < 4; ++i) nr[t][i] = tandem_sum_unbias(dr[t][i]);
            if constexpr (T::MIN) tandem_cdna_rows(m[t], mr[t]);
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const u8* col = a + (16 * j + l16) * AR + 32 * gi;
            const u32 b0 = *(const u32*)(col + 4 * q), b1 = *(const u32*)(col + 16 + 4 * q);
            const float2 sc = ds[gi][16 * j + l16];
#pragma unroll
            for (int t = 0; t < 2; ++t) {
                int c[4] = {TANDEM_SUM_BIAS, TANDEM_SUM_BIAS, TANDEM_SUM_BIAS, TANDEM_SUM_BIAS};
                tandem_cdna_i8(c, lo[t], hi[t], b0, b1);
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    float& o = acc[4 * t + j][i];
                    o = fmaf(sc.x, fmaf(dr[t][i], __int_as_float(c[i]), nr[t][i]), o);
                    if constexpr (T::MIN) o = fmaf(mr[t][i], sc.y, o);
                }
            }
        }
    }
#else
    // Built for a device without these instructions: never picked there; NaN if it were.
    (void)w0, (void)w1, (void)a, (void)ds;
    tandem_acc_nan(acc);
#endif
}

// tandem_cdna_step for the HALVES types, as tandem_wmma_halves computes them: one 16-value
// product per half group, row and column tile; q2_K's offsets take each half's activation sum
// from one more product against ones (every row of it is the column's sum). `w0`, `w1`: the
// staged superblocks (past their leads) of this lane's rows l16 and 16 + l16 of the wave's 32.
template <typename T>
TANDEM_DEVICE void tandem_cdna_halves(float (&acc)[8][4], const u8* w0, const u8* w1, const u8* a,
                                      const float2 (*ds)[TANDEM_MMQ_BN]) {
    static_assert(T::HALVES, "a scale per 16 values");
#if defined(TANDEM_CDNA_RUNS)
    constexpr int AR = tandem_mmq_raw<T>::ROW;
    const int l16 = threadIdx.x % 16, q = threadIdx.x % 64 / 16;
    const u8* wr[2] = {w0, w1};
#pragma unroll 2
    for (int gi = 0; gi < T::KG; ++gi) {
        u32 v[2][2];
        float sr[2][2][4], mr[2][2][4];
#pragma unroll
        for (int t = 0; t < 2; ++t) {
            float sc[2], mn[2] = {0.0f, 0.0f};
            T::frag16(wr[t], gi, q, v[t], sc);
            if constexpr (T::MIN) T::mins16(wr[t], gi, mn);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                tandem_cdna_rows(sc[h], sr[t][h]);
                if constexpr (T::MIN) tandem_cdna_rows(mn[h], mr[t][h]);
            }
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const u8* col = a + (16 * j + l16) * AR + 32 * gi;
            const u32 b[2] = {*(const u32*)(col + 4 * q), *(const u32*)(col + 16 + 4 * q)};
            float as[2] = {0.0f, 0.0f};
            if constexpr (T::MIN) {
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    int s[4] = {0, 0, 0, 0};
                    tandem_cdna_i8h(s, 0x01010101u, b[h]);
                    as[h] = (float)s[0];
                }
            }
            const float da = ds[gi][16 * j + l16].x;
#pragma unroll
            for (int t = 0; t < 2; ++t) {
                int c[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
#pragma unroll
                for (int h = 0; h < 2; ++h) tandem_cdna_i8h(c[h], v[t][h], b[h]);
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    float in = fmaf(sr[t][1][i], (float)c[1][i], sr[t][0][i] * (float)c[0][i]);
                    if constexpr (T::MIN) in = fmaf(-mr[t][1][i], as[1], fmaf(-mr[t][0][i], as[0], in));
                    float& o = acc[4 * t + j][i];
                    o = fmaf(da, in, o);
                }
            }
        }
    }
#else
    (void)w0, (void)w1, (void)a, (void)ds;
    tandem_acc_nan(acc);
#endif
}

// One 64 x 64 output tile: weight rows row0 .. row0 + 64 (row r at wb + r * nb01, m rows, k
// values) against the 64 q8_1 columns the map gives; with WM on the WMMA tiles in layout `lay`.
template <typename T, typename C, bool WM = false>
TANDEM_DEVICE void tandem_mmq_tile(tandem_mmq_smem<T>& sm, const u8* wb, i64 nb01, i64 m, i64 k, i64 row0,
                                   const char* aq, const char* ads, const C& cols, int lay = 0) {
    constexpr int RP = tandem_mmq_raw<T>::PAD;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int qr = lane / 4, qc = lane % 4;
    const bool al = (((u64)wb | (u64)nb01) & 7u) == 0;
    constexpr int AR = tandem_mmq_raw<T>::ROW;
    // WINDOW: where the step of this lane's rows (16 warp + qr and + 8) begins in their staged
    // windows, less st * STEP.
    const u64 r0 = (u64)wb + (u64)((row0 + 16 * warp + qr) * nb01);
    const int lead0 = (int)(r0 & 15u), lead1 = (int)((r0 + 8 * (u64)nb01) & 15u);
    // The same for the WMMA tiles' row of this lane (16 warp + lane % 16), and for the CDNA tiles'
    // two (32 wave + lane % 16 and + 16, wave = thread / 64).
    const int lead_w = (int)(((u64)wb + (u64)((row0 + 16 * warp + lane % 16) * nb01)) & 15u);
    const bool cdna = WM && lay == TANDEM_CDNA_LAYOUT;
    const int wave = threadIdx.x / 64;
    const u64 rc = (u64)wb + (u64)((row0 + 32 * wave + lane % 16) * nb01);
    const int lead_c0 = (int)(rc & 15u), lead_c1 = (int)((rc + 16 * (u64)nb01) & 15u);
    const i64 steps = (k / 32 + T::KG - 1) / T::KG;
    float acc[8][4];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[nt][e] = 0.0f;

    const i64 groups = k / 32;
    tandem_mmq_plan<T> plan = tandem_mmq_make_plan<T>(wb, nb01, m, k, row0, aq, ads, cols);
    auto ng = [&](i64 g0) { return (int)(groups - g0 < T::KG ? groups - g0 : T::KG); };
    tandem_mmq_stage<T>(sm, 0, plan, ng(0), al);
    tandem_cp_commit();
    for (i64 st = 0; st < steps; ++st) {
        const int buf = (int)(st & 1);
        if (st + 1 < steps) tandem_mmq_stage<T>(sm, buf ^ 1, plan, ng((st + 1) * T::KG), al);
        tandem_cp_commit();
        tandem_cp_wait<1>();
        __syncthreads();
        if constexpr (WM) {
            const u8* wr = sm.w[buf] + (16 * warp + lane % 16) * RP;
            const u8* wc = sm.w[buf] + (32 * wave + lane % 16) * RP;
            if (cdna) {
                if constexpr (T::HALVES) {
                    const int o = (int)((st * T::STEP) % 16);
                    tandem_cdna_halves<T>(acc, wc + ((lead_c0 + o) & 15), wc + 16 * RP + ((lead_c1 + o) & 15),
                                          sm.a[buf], sm.ds[buf]);
                } else {
                    tandem_cdna_step<T>(acc, wc, wc + 16 * RP, sm.a[buf], sm.ds[buf]);
                }
            } else if constexpr (T::HALVES) {
                const int o = (int)((st * T::STEP) % 16);
                tandem_wmma_halves<T>(acc, wr + ((lead_w + o) & 15), sm.a[buf], sm.ds[buf], lay);
            } else {
                tandem_wmma_step<T>(acc, wr, sm.a[buf], sm.ds[buf], lay);
            }
        } else {
#if defined(TANDEM_MMA_ENABLED)
        const u8* wrow = sm.w[buf] + (16 * warp + qr) * RP;
        // ldmatrix rows of this lane: column 16 np + (lane % 8) + 8 (lane / 16), byte 16 (lane / 8 % 2).
        const u8* arow = sm.a[buf] + ((lane % 8) + 8 * (lane / 16)) * AR + 16 * ((lane / 8) % 2);
        if constexpr (T::HALVES) {
            const int o = (int)((st * T::STEP) % 16);
            tandem_mmq_halves<T>(acc, wrow + ((lead0 + o) & 15), wrow + 8 * RP + ((lead1 + o) & 15), arow,
                                 sm.ds[buf], qc);
        } else {
#pragma unroll
        for (int gi = 0; gi < T::KG; ++gi) {
            u32 fa[4];
            float d0, d1, m0, m1;
            T::frag(wrow, gi, qc, fa[0], fa[2], d0, m0);
            T::frag(wrow + 8 * RP, gi, qc, fa[1], fa[3], d1, m1);
            // d * sum rounded once (TANDEM_SUM_BIAS), as the CPU's first product is; then acc +=
            // d_a * that. The constant is per row and group, so once for all 64 columns.
            const float n0 = tandem_sum_unbias(d0), n1 = tandem_sum_unbias(d1);
#pragma unroll
            for (int np = 0; np < 4; ++np) {
                u32 fb[4];
                tandem_ldsm4(fb, arow + 16 * np * AR + 32 * gi);
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int nt = 2 * np + h;
                    const float4 sc = *(const float4*)&sm.ds[buf][gi][8 * nt + 2 * qc];
                    int ci[4];
                    tandem_imma32(ci, fa[0], fa[1], fa[2], fa[3], fb[2 * h], fb[2 * h + 1]);
                    const float t0 = fmaf(d0, __int_as_float(ci[0]), n0);
                    const float t1 = fmaf(d0, __int_as_float(ci[1]), n0);
                    const float t2 = fmaf(d1, __int_as_float(ci[2]), n1);
                    const float t3 = fmaf(d1, __int_as_float(ci[3]), n1);
                    float* a = acc[nt];
                    a[0] = fmaf(sc.x, t0, a[0]);
                    a[1] = fmaf(sc.z, t1, a[1]);
                    a[2] = fmaf(sc.x, t2, a[2]);
                    a[3] = fmaf(sc.z, t3, a[3]);
                    if (T::MIN) {
                        a[0] = fmaf(m0, sc.y, a[0]);
                        a[1] = fmaf(m0, sc.w, a[1]);
                        a[2] = fmaf(m1, sc.y, a[2]);
                        a[3] = fmaf(m1, sc.w, a[3]);
                    }
                }
            }
        }
        }
#else
        // Built for a device without these instructions: never picked there; NaN if it were.
        tandem_acc_nan(acc);
#endif
        }
        __syncthreads();  // buffer `buf` is refilled by the next step's copies
    }
    if (cdna) {
        // acc[4 t + j][i]: row 32 wave + 16 t + 4 q + i, column 16 j + l16 (q = lane / 16 of 64).
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            char* o = cols.out(16 * j + lane % 16);
#pragma unroll
            for (int t = 0; t < 2; ++t)
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const i64 row = row0 + 32 * wave + 16 * t + 4 * (threadIdx.x % 64 / 16) + i;
                    if (row < m && o != nullptr) *(float*)(o + row * 4) = acc[4 * t + j][i];
                }
        }
        return;
    }
    if constexpr (WM) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            char* o = cols.out(16 * j + lane % 16);
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const i64 row = row0 + 16 * warp + tandem_wmma_row(lay, i);
                if (row < m && o != nullptr) *(float*)(o + row * 4) = acc[2 * j + i / 4][i % 4];
            }
        }
        return;
    }
    const i64 r = row0 + 16 * warp + qr;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const i64 row = r + (e >= 2 ? 8 : 0);
            char* o = cols.out(8 * nt + 2 * qc + (e & 1));
            if (row < m && o != nullptr) *(float*)(o + row * 4) = acc[nt][e];
        }
    }
}

// The tiles' shared memory, dynamic: a superblock per step outgrows the 48 KiB of static shared
// memory (`mmq_shared_bytes` in matmul_launch.rs).
template <typename T>
TANDEM_DEVICE tandem_mmq_smem<T>& tandem_mmq_shared() {
    extern __shared__ __align__(16) u8 tandem_mmq_dyn[];
    return *(tandem_mmq_smem<T>*)tandem_mmq_dyn;
}

// MUL_MAT: block (column tile, row tile, batch).
template <typename T, bool WM = false>
TANDEM_DEVICE void tandem_mmq_quant(const char* w, const char* aq, const char* ads, char* dst,
                                    const tandem_mm_shape& s, int lay = 0) {
    tandem_mmq_smem<T>& sm = tandem_mmq_shared<T>();
    const i64 b = blockIdx.z;
    if (b >= s.ne12 * s.ne13) return;
    const i64 i12 = b % s.ne12, i13 = b / s.ne12;
    const u8* wb = (const u8*)w + (i12 / s.r2) * s.nb02 + (i13 / s.r3) * s.nb03;
    const tandem_mma_dense_cols cols = tandem_mma_dense(dst, b, s, (i64)blockIdx.x * TANDEM_MMQ_BN);
    tandem_mmq_tile<T, tandem_mma_dense_cols, WM>(sm, wb, s.nb01, s.m, s.k, (i64)blockIdx.y * TANDEM_MMQ_BM, aq, ads,
                                                  cols, lay);
}

// MUL_MAT_ID grouped by expert: block (column tile, row tile, expert).
template <typename T, bool WM = false>
TANDEM_DEVICE void tandem_mmid_mmq(const char* w, const char* aq, const char* ads, const i32* counts,
                                   const i32* lists, char* dst, const tandem_mmid_shape& s, int lay = 0) {
    tandem_mmq_smem<T>& sm = tandem_mmq_shared<T>();
    const i64 e = blockIdx.z;
    if (e >= s.n_expert) return;
    const int count = counts[e];
    const u8* wb = (const u8*)w + e * s.nb02;
    for (int j0 = blockIdx.x * TANDEM_MMQ_BN; j0 < count; j0 += gridDim.x * TANDEM_MMQ_BN) {
        tandem_mma_routed_cols cols;
        cols.list = lists + e * s.n_used * s.n_tokens + j0;
        cols.count = count - j0;
        cols.n_used = s.n_used;
        cols.n_b = s.n_b;
        cols.nb1 = s.nb1;
        cols.nb2 = s.nb2;
        cols.dst = dst;
        tandem_mmq_tile<T, tandem_mma_routed_cols, WM>(sm, wb, s.nb01, s.m, s.k, (i64)blockIdx.y * TANDEM_MMQ_BM, aq,
                                                       ads, cols, lay);
    }
}

// ---------------------------------------------------------------- integer path, few columns
// MUL_MAT with a few columns (batched decode; the launcher sends 3..8) for the 32-value block
// types and q2_K .. q6_K: one m16n8k32 mma takes 16 weight rows x 32 values against all eight
// columns, where the GEMV's integer dot products would take one column at a time (q2_K, q3_K and
// q6_K, whose groups have a scale per 16 values: two m16n8k16 mma; q2_K's mins per 16 values
// take each half's activation sums from one more mma against ones). Block = TANDEM_MMV_THREADS
// (four warps) per TANDEM_MMV_ROWS (32) weight rows and batch; the warps split k: warp w takes
// chunks w, w + 4, ... of eight 32-value groups. A chunk, copied with cp.async into the warp's own
// ring of stages (two chunks in flight while one is multiplied, no block barrier), holds the 32
// rows' raw weight blocks (rows padded to an odd number of 16-byte units), the columns' int8
// activations (columns padded to 272 bytes) and their (d, d * sum) pairs by group. Per group each
// warp does two mma (rows 0..15 and 16..31) with A fragments unpacked straight from the raw blocks,
// then applies the scales as the int8 tiles do; at the end the four warps' partial sums meet in
// shared memory. Columns past n copy nothing (zero-filled), so their lanes add zeros.

#define TANDEM_MMV_THREADS 128
#define TANDEM_MMV_WARPS (TANDEM_MMV_THREADS / 32)
#define TANDEM_MMV_ROWS 32
#define TANDEM_MMV_COLS 8
// 32-value groups per chunk; a column's chunk of activations padded to TANDEM_MMV_AROW bytes.
#define TANDEM_MMV_GROUPS 8
#define TANDEM_MMV_AROW (TANDEM_MMV_GROUPS * 32 + 16)

// 32 bits at p, 2-byte aligned, or 4-byte aligned where `al` (known when the kernel is compiled:
// chunk rows start 16-byte aligned and groups are unrolled).
TANDEM_DEVICE u32 tandem_mmv_ld32(const u8* p, bool al) {
    return al ? *(const u32*)p : tandem_mma_ld32(p);
}

// A chunk's weights of one row: eight groups of a 32-value type (F: a tandem_mmf_* type), ...
template <typename F>
struct tandem_mmv_blocks {
    static constexpr int CHUNK = TANDEM_MMV_GROUPS * F::BYTES;
    static constexpr bool MIN = F::MIN;
    static constexpr float OFF = 0.0f;
    static constexpr bool HALVES = false;
    // Values 4c .. 4c + 3 and 16 + 4c .. of group g of the chunk row at r, and the group's d, m.
    static __device__ __forceinline__ void frag(const u8* r, int g, int c, u32& lo, u32& hi, float& d, float& m) {
        F::frag(r + g * F::BYTES, c, lo, hi, d, m);
    }
};
// ... or eight q4_0 / q5_0 blocks, their values kept unsigned (0..15, 0..31: still valid signed
// bytes) and the offset OFF (-8, -16) applied in f32 as OFF * d * (d_a * sum(a)): fewer
// instructions per group than biasing every byte ...
struct tandem_mmvw_q4_0 {
    static constexpr int CHUNK = TANDEM_MMV_GROUPS * 18;
    static constexpr bool MIN = false;
    static constexpr float OFF = -8.0f;
    static constexpr bool HALVES = false;
    static __device__ __forceinline__ void frag(const u8* r, int g, int c, u32& lo, u32& hi, float& d, float& m) {
        const u8* b = r + 18 * g;
        const u32 v = tandem_mmv_ld32(b + 2 + 4 * c, (18 * g + 2) % 4 == 0);
        lo = tandem_mma_lo4(v);
        hi = tandem_mma_hi4(v);
        d = tandem_mma_half(b);
        m = 0.0f;
    }
};
struct tandem_mmvw_q5_0 {
    static constexpr int CHUNK = TANDEM_MMV_GROUPS * 22;
    static constexpr bool MIN = false;
    static constexpr float OFF = -16.0f;
    static constexpr bool HALVES = false;
    static __device__ __forceinline__ void frag(const u8* r, int g, int c, u32& lo, u32& hi, float& d, float& m) {
        const u8* b = r + 22 * g;
        const u32 qh = tandem_mmv_ld32(b + 2, (22 * g + 2) % 4 == 0);
        const u32 v = tandem_mmv_ld32(b + 6 + 4 * c, (22 * g + 6) % 4 == 0);
        lo = tandem_mma_lo4(v) | tandem_mma_spread4(qh >> (4 * c));
        hi = tandem_mma_hi4(v) | tandem_mma_spread4(qh >> (16 + 4 * c));
        d = tandem_mma_half(b);
        m = 0.0f;
    }
};
// ... or eight q8_0 blocks ...
struct tandem_mmvw_q8_0 {
    static constexpr int CHUNK = TANDEM_MMV_GROUPS * 34;
    static constexpr bool MIN = false;
    static constexpr float OFF = 0.0f;
    static constexpr bool HALVES = false;
    static __device__ __forceinline__ void frag(const u8* r, int g, int c, u32& lo, u32& hi, float& d, float& m) {
        const u8* b = r + 34 * g;
        const bool al = (34 * g + 2) % 4 == 0;
        lo = tandem_mmv_ld32(b + 2 + 4 * c, al);
        hi = tandem_mmv_ld32(b + 18 + 4 * c, al);
        d = tandem_mma_half(b);
        m = 0.0f;
    }
};
// ... or one superblock of q4_K (d, dmin, scales[12], qs[128]: group g takes nibble g & 1 of
// qs[32 (g / 2) ..]) ...
struct tandem_mmvw_q4_K {
    static constexpr int CHUNK = 144;
    static constexpr bool MIN = true;
    static constexpr float OFF = 0.0f;
    static constexpr bool HALVES = false;
    static constexpr int QS = 16;
    static __device__ __forceinline__ void frag(const u8* r, int g, int c, u32& lo, u32& hi, float& d, float& m) {
        frag_at(r, r + QS + 32 * (g >> 1), g, c, lo, hi, d, m);
    }
    // The same with the 32 quant bytes of group pair g / 2 at qs (wherever they are staged).
    static __device__ __forceinline__ void frag_at(const u8* r, const u8* qs, int g, int c, u32& lo, u32& hi,
                                                   float& d, float& m) {
        const int shift = 4 * (g & 1);
        lo = (*(const u32*)(qs + 4 * c) >> shift) & 0x0F0F0F0Fu;
        hi = (*(const u32*)(qs + 16 + 4 * c) >> shift) & 0x0F0F0F0Fu;
        float dd, dmin;
        int sc, mn;
        tandem_dscale_min_k4(r, g, dd, dmin, sc, mn);
        d = dd * (float)sc;
        m = -dmin * (float)mn;
    }
};
// ... or of q5_K (q4_K plus qh[32] at 16 whose bit g is the group's fifth bit; qs at 48).
struct tandem_mmvw_q5_K {
    static constexpr int CHUNK = 176;
    static constexpr bool MIN = true;
    static constexpr float OFF = 0.0f;
    static constexpr bool HALVES = false;
    static constexpr int QS = 48;
    static __device__ __forceinline__ void frag(const u8* r, int g, int c, u32& lo, u32& hi, float& d, float& m) {
        frag_at(r, r + QS + 32 * (g >> 1), g, c, lo, hi, d, m);
    }
    static __device__ __forceinline__ void frag_at(const u8* r, const u8* qs, int g, int c, u32& lo, u32& hi,
                                                   float& d, float& m) {
        const int shift = 4 * (g & 1);
        const u32 h0 = (*(const u32*)(r + 16 + 4 * c) >> g) & 0x01010101u;
        const u32 h1 = (*(const u32*)(r + 32 + 4 * c) >> g) & 0x01010101u;
        lo = ((*(const u32*)(qs + 4 * c) >> shift) & 0x0F0F0F0Fu) | (h0 << 4);
        hi = ((*(const u32*)(qs + 16 + 4 * c) >> shift) & 0x0F0F0F0Fu) | (h1 << 4);
        float dd, dmin;
        int sc, mn;
        tandem_dscale_min_k4(r, g, dd, dmin, sc, mn);
        d = dd * (float)sc;
        m = -dmin * (float)mn;
    }
};

// ... or one superblock of q6_K (ql[128], qh[64], scales[16] signed, d; 210 bytes, so chunks
// start only 2-byte aligned within a row): each 32-value group has two scales, one per 16
// values, so its dot takes two m16n8k16 mma (HALVES). frag16 gives values 16 h + 4c .. + 3 of
// group g (h = 0, 1) of the superblock at sb as signed bytes (q - 32) and d * scale of each half.
// Group g = 4n + j takes nibble j / 2 of ql[64n + 32 (j & 1) ..] and bits 2j of qh[32n ..].
struct tandem_mmvw_q6_K {
    static constexpr int CHUNK = 210;
    static constexpr bool MIN = false;
    static constexpr float OFF = 0.0f;
    static constexpr bool HALVES = true;
    static __device__ __forceinline__ void frag16(const u8* sb, int g, int c, u32 (&v)[2], float (&ds)[2]) {
        const int n = g >> 2, j = g & 3;
        const u8* ql = sb + 64 * n + 32 * (j & 1) + 4 * c;
        const u8* qh = sb + 128 + 32 * n + 4 * c;
        const int sl = 4 * (j >> 1), sh = 2 * j;
        const float d = tandem_mma_half(sb + 208);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const u32 lo = (tandem_mma_ld32(ql + 16 * h) >> sl) & 0x0F0F0F0Fu;
            const u32 hi = (tandem_mma_ld32(qh + 16 * h) >> sh) & 0x03030303u;
            v[h] = tandem_mma_unbias(lo | (hi << 4), 0x20202020u);
            ds[h] = d * (float)(i8)sb[192 + 2 * g + h];
        }
    }
};

// ... or one superblock of q2_K (scales[16]: a 4-bit scale and a 4-bit min per 16 values,
// qs[64], d, dmin; 84 bytes): group g = 4n + j takes bits 2j, 2j + 1 of qs[32n ..] (0..3), and
// each half's values are d * sc * q - dmin * mn (HALVES with MIN: mins16 gives dmin * mn).
struct tandem_mmvw_q2_K {
    static constexpr int CHUNK = 84;
    static constexpr bool MIN = true;
    static constexpr float OFF = 0.0f;
    static constexpr bool HALVES = true;
    static __device__ __forceinline__ void frag16(const u8* sb, int g, int c, u32 (&v)[2], float (&ds)[2]) {
        const u8* qs = sb + 16 + 32 * (g >> 2) + 4 * c;
        const int sl = 2 * (g & 3);
        const float d = tandem_mma_half(sb + 80);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            v[h] = (tandem_mma_ld32(qs + 16 * h) >> sl) & 0x03030303u;
            ds[h] = d * (float)(sb[2 * g + h] & 15);
        }
    }
    static __device__ __forceinline__ void mins16(const u8* sb, int g, float (&ms)[2]) {
        const float dmin = tandem_mma_half(sb + 82);
#pragma unroll
        for (int h = 0; h < 2; ++h) ms[h] = dmin * (float)(sb[2 * g + h] >> 4);
    }
};

// ... or one superblock of q3_K (hmask[32], qs[64], scales[12]: sixteen 6-bit scales, d; 110
// bytes, chunks start 2-byte aligned), a scale per 16 values as q6_K (HALVES): group g = 4n + j
// takes bits 2j, 2j + 1 of qs[32n ..] and bit g of hmask[..], less 4 where that bit is clear.
struct tandem_mmvw_q3_K {
    static constexpr int CHUNK = 110;
    static constexpr bool MIN = false;
    static constexpr float OFF = 0.0f;
    static constexpr bool HALVES = true;
    static __device__ __forceinline__ void frag16(const u8* sb, int g, int c, u32 (&v)[2], float (&ds)[2]) {
        const u8* qs = sb + 32 + 32 * (g >> 2) + 4 * c;
        const u8* hm = sb + 4 * c;
        const int sl = 2 * (g & 3);
        const float d = tandem_mma_half(sb + 108);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const u32 lo = (tandem_mma_ld32(qs + 16 * h) >> sl) & 0x03030303u;
            const u32 hi = (tandem_mma_ld32(hm + 16 * h) >> g) & 0x01010101u;
            v[h] = tandem_mma_unbias(lo | (hi << 2), 0x04040404u);
            ds[h] = d * (float)tandem_q3_K_scale(sb + 96, 2 * g + h);
        }
    }
};

// Shared layout of one warp's stage: PAD bytes per weight row (an odd number of 16-byte units,
// so the eight rows a fragment load touches start in distinct bank quads), then the activations,
// then the pairs [group][column]. STAGES per warp: three where two blocks of four warps fit an
// SM's shared memory, else two (q8_0).
template <typename T>
struct tandem_mmv_stage {
    // A chunk's row in 16-byte units: CHUNK / 16, or for chunks that start 2-byte aligned the
    // aligned window around them (up to 14 bytes before).
    static constexpr int UNITS = T::CHUNK % 16 == 0 ? T::CHUNK / 16 : (T::CHUNK + 14 + 15) / 16;
    static constexpr int PAD = (UNITS | 1) * 16;
    static constexpr int W = TANDEM_MMV_ROWS * PAD;
    static constexpr int A = TANDEM_MMV_COLS * TANDEM_MMV_AROW;
    static constexpr int D = TANDEM_MMV_GROUPS * TANDEM_MMV_COLS * 8;
    static constexpr int BYTES = W + A + D;
    static constexpr int STAGES = PAD > 208 ? 2 : 3;
};

// A lane's share of its warp's chunk copies, each copy instruction reading whole runs of
// contiguous bytes: 16-byte units lane % 4, lane % 4 + 4, ... of weight rows lane / 4 + 8 i (i <
// 4: eight rows of 64 bytes per instruction), unit lane % 16 of activation columns lane / 16 + 2 u
// (u < 4: two columns' 256 bytes per instruction) and the (d, d * sum) pair of group lane % 8 of
// columns lane / 8 + 4 h (h < 2). The pointers are at the warp's next chunk and advance by
// TANDEM_MMV_WARPS chunks per copy. Rows past m and columns past ncols copy nothing (zero-filled),
// from valid addresses.
template <typename T>
struct tandem_mmv_plan {
    const u8* w;        // row lane / 4, unit lane % 4
    const u8* wb;       // any valid 16-byte-aligned address (for copies of no bytes)
    const char* a;
    const char* d;
    i64 rstep;          // eight rows
    i64 wstep, astep, dstep;
    i64 acol, dcol;     // two activation columns, four columns of pairs
    int lead;           // bytes from the 16-byte unit below the next chunk to its start
    int rows;           // bit i: row lane / 4 + 8 i is below m
    int cols;           // bit u: activation column lane / 16 + 2 u is below ncols; bit 4 + h: pair column
    u32 wdst, adst, ddst;  // shared offsets within a stage
};

template <typename T>
TANDEM_DEVICE tandem_mmv_plan<T> tandem_mmv_make_plan(const u8* wb, i64 nb01, i64 m, i64 row0, const char* aq,
                                                    const char* ads, i64 k, i64 first, int ncols, i64 c0) {
    using S = tandem_mmv_stage<T>;
    const int lane = threadIdx.x % 32;
    const int col = lane / 4, q = lane % 4;
    tandem_mmv_plan<T> p;
    p.rows = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) p.rows |= row0 + col + 8 * i < m ? 1 << i : 0;
    p.w = wb + (row0 + col) * nb01 + c0 * T::CHUNK + 16 * q;
    // Chunks of whole 16-byte units start 16-byte aligned (the launcher sends only such rows).
    p.lead = T::CHUNK % 16 == 0 ? 0 : (int)((u64)p.w & 15u);
    // Valid and 16-byte aligned: the weights where their rows are (chunks of whole units), else
    // the q8_1 copy's start.
    p.wb = T::CHUNK % 16 == 0 ? wb : (const u8*)aq;
    p.rstep = 8 * nb01;
    const int ac = lane / 16, au = lane % 16, dc = lane / 8, dg = lane % 8;
    p.cols = 0;
#pragma unroll
    for (int u = 0; u < 4; ++u) p.cols |= ac + 2 * u < ncols ? 1 << u : 0;
#pragma unroll
    for (int h = 0; h < 2; ++h) p.cols |= dc + 4 * h < ncols ? 16 << h : 0;
    p.a = aq + (first + ac) * k + c0 * TANDEM_MMV_GROUPS * 32 + 16 * au;
    p.d = ads + ((first + dc) * (k / 32) + c0 * TANDEM_MMV_GROUPS + dg) * 8;
    p.acol = 2 * k;
    p.dcol = 4 * (k / 32) * 8;
    p.wstep = TANDEM_MMV_WARPS * T::CHUNK;
    p.astep = TANDEM_MMV_WARPS * TANDEM_MMV_GROUPS * 32;
    p.dstep = TANDEM_MMV_WARPS * TANDEM_MMV_GROUPS * 8;
    p.wdst = (u32)(col * S::PAD + 16 * q);
    p.adst = (u32)(S::W + ac * TANDEM_MMV_AROW + 16 * au);
    p.ddst = (u32)(S::W + S::A + (dg * TANDEM_MMV_COLS + dc) * 8);
    return p;
}

// Queues the plan's next chunk, of ng groups, into the stage at st and advances the plan. Bytes
// past a partial chunk's groups are zero-filled: zero weights with zero scales and zero
// activations add exactly nothing, so the dot needs no test per group.
template <typename T>
TANDEM_DEVICE void tandem_mmv_copy(u8* st, tandem_mmv_plan<T>& p, int ng) {
    using S = tandem_mmv_stage<T>;
    constexpr int J = (S::UNITS + 3) / 4;  // units per lane and row
    const int q = threadIdx.x % 4;
    const u32 base = tandem_smem_addr(st);
    // Valid bytes of this lane's unit j in a row: a whole chunk's units below UNITS, or the
    // part of a partial chunk's ng groups; copied from the 16-byte unit below the chunk's start
    // (lead bytes before it; only for chunks that start 2-byte aligned), nothing past its end.
    const int wbytes = p.lead + ng * T::CHUNK / TANDEM_MMV_GROUPS;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const u8* row = p.w - p.lead + i * p.rstep;
        const bool in = (p.rows >> i) & 1;
#pragma unroll
        for (int j = 0; j < J; ++j) {
            int n = wbytes - 16 * (q + 4 * j);
            n = in ? (n < 0 ? 0 : (n > 16 ? 16 : n)) : 0;
            if (4 * j + 3 < S::UNITS || q + 4 * j < S::UNITS) {
                tandem_cp16s(base + p.wdst + (u32)(8 * i * S::PAD + 64 * j), n > 0 ? row + 64 * j : p.wb, n);
            }
        }
    }
    const int lane = threadIdx.x % 32;
    const bool ag = (lane % 16) / 2 < ng, dg = lane % 8 < ng;
#pragma unroll
    for (int u = 0; u < 4; ++u) {
        const bool in = ag && ((p.cols >> u) & 1);
        tandem_cp16s(base + p.adst + (u32)(2 * u * TANDEM_MMV_AROW), in ? p.a + u * p.acol : (const char*)p.wb,
                     in ? 16 : 0);
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const bool in = dg && ((p.cols >> (4 + h)) & 1);
        tandem_cp8(st + p.ddst + 4 * h * 8, in ? p.d + h * p.dcol : (const char*)p.wb, in ? 8 : 0);
    }
    p.w += p.wstep;
    p.lead = (p.lead + TANDEM_MMV_WARPS * T::CHUNK) % 16;
    p.a += p.astep;
    p.d += p.dstep;
}

// The block's tiles of 32 rows (tile blockIdx.x, + gridDim.x, ...) against columns first ..
// first + ncols of the q8_1 copy; row r's sums go to out + j * nb1 + r * 4 for column j. The
// grid holds about as many blocks as fit the device at once, so each warp's copies run on from
// one tile into the next instead of every block starting with an empty pipeline.
template <typename T>
TANDEM_DEVICE void tandem_mmv_rows(const u8* wb, i64 nb01, i64 m, i64 k, const char* aq, const char* ads, i64 first,
                                   int ncols, char* out, i64 nb1) {
    using S = tandem_mmv_stage<T>;
    extern __shared__ __align__(16) u8 tandem_mmv_smem[];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int qr = lane / 4, qc = lane % 4;
    // Where the chunks of row qr begin in their 16-byte windows, less c * CHUNK; the same for every
    // row 8 apart (nb01 is even), so for all rows this lane copies and reads.
    const int lead_qr = (int)(((u64)wb + (u64)(qr * nb01)) & 15u);
    u8* ring = tandem_mmv_smem + warp * S::STAGES * S::BYTES;
    // Warps 1..'s partial sums of a tile ([warp - 1][row][column] floats), after the rings.
    float* part = (float*)(tandem_mmv_smem + TANDEM_MMV_WARPS * S::STAGES * S::BYTES);
    const i64 groups = k / 32;
    const i64 chunks = (groups + TANDEM_MMV_GROUPS - 1) / TANDEM_MMV_GROUPS;
    const i64 tiles = (m + TANDEM_MMV_ROWS - 1) / TANDEM_MMV_ROWS;
    // Chunks of each tile this warp takes: warp, warp + WARPS, ...
    const i64 nw = chunks > warp ? (chunks - warp + TANDEM_MMV_WARPS - 1) / TANDEM_MMV_WARPS : 0;
    float acc[2][4];
#pragma unroll
    for (int t = 0; t < 2; ++t)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[t][e] = 0.0f;
    auto ng = [&](i64 c) {
        const i64 left = groups - c * TANDEM_MMV_GROUPS;
        return (int)(left < TANDEM_MMV_GROUPS ? left : TANDEM_MMV_GROUPS);
    };
    // The copies run STAGES - 1 chunks ahead of the dot, on into the block's next tile: chunk
    // warp + WARPS * cn of tile ct is the next to queue.
    i64 ct = blockIdx.x, cn = 0;
    auto plan_of = [&](i64 t) {
        return tandem_mmv_make_plan<T>(wb, nb01, m, t * TANDEM_MMV_ROWS, aq, ads, k, first, ncols, warp);
    };
    tandem_mmv_plan<T> plan = plan_of(ct);
    auto queue = [&](u8* stage) {
        if (cn < nw && ct < tiles) {
            tandem_mmv_copy<T>(stage, plan, ng(warp + TANDEM_MMV_WARPS * cn));
            if (++cn == nw) {
                cn = 0;
                ct += gridDim.x;
                if (ct < tiles) plan = plan_of(ct);
            }
        }
        tandem_cp_commit();
    };
#pragma unroll
    for (int s = 0; s < S::STAGES - 1; ++s) queue(ring + s * S::BYTES);
    int buf = 0;
    for (i64 tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const i64 row0 = tile * TANDEM_MMV_ROWS;
        for (i64 c = warp; c < chunks; c += TANDEM_MMV_WARPS) {
            tandem_cp_wait<S::STAGES - 2>();
            tandem_wave_sync();
            // The stage the previous chunk used is free again: queue the chunk STAGES - 1 ahead.
            queue(ring + (buf == 0 ? S::STAGES - 1 : buf - 1) * S::BYTES);
            const u8* st = ring + buf * S::BYTES;
#if defined(TANDEM_MMA_ENABLED)
            const u8* arow = st + S::W + qr * TANDEM_MMV_AROW + 4 * qc;
            if constexpr (T::HALVES) {
                // The chunk's superblock starts `lead` bytes into each staged row (as copied).
                const int lead = (lead_qr + (int)(c % 16) * (T::CHUNK % 16)) % 16;
#pragma unroll
                for (int g = 0; g < TANDEM_MMV_GROUPS; ++g) {
                    // b0, b1: values 4 qc .. and 16 + 4 qc .. of column qr's group: the B
                    // fragments of the two halves.
                    const u32 b0 = *(const u32*)(arow + 32 * g), b1 = *(const u32*)(arow + 32 * g + 16);
                    const float4 sc = *(const float4*)(st + S::W + S::A + (g * TANDEM_MMV_COLS + 2 * qc) * 8);
                    // With mins: each half's sums of the int8 activations of columns 2 qc, 2 qc + 1
                    // (an mma against ones, exact as the others).
                    float as[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
                    if constexpr (T::MIN) {
#pragma unroll
                        for (int h = 0; h < 2; ++h) tandem_imma_sums16(h == 0 ? b0 : b1, as[h][0], as[h][1]);
                    }
#pragma unroll
                    for (int t = 0; t < 2; ++t) {
                        u32 v0[2], v1[2];
                        float ds0[2], ds1[2], ms0[2] = {0.0f, 0.0f}, ms1[2] = {0.0f, 0.0f};
                        T::frag16(st + (16 * t + qr) * S::PAD + lead, g, qc, v0, ds0);
                        T::frag16(st + (16 * t + qr + 8) * S::PAD + lead, g, qc, v1, ds1);
                        if constexpr (T::MIN) {
                            T::mins16(st + (16 * t + qr) * S::PAD + lead, g, ms0);
                            T::mins16(st + (16 * t + qr + 8) * S::PAD + lead, g, ms1);
                        }
                        int ci[2][4];
#pragma unroll
                        for (int h = 0; h < 2; ++h) tandem_imma16(ci[h], v0[h], v1[h], h == 0 ? b0 : b1);
                        // Row r, column j: acc += d_a,j * (d sc0_r * sum0 + d sc1_r * sum1
                        //                                  [- mn0_r * asum0_j - mn1_r * asum1_j]).
                        float* a = acc[t];
#pragma unroll
                        for (int e = 0; e < 4; ++e) {
                            const float* ds = e < 2 ? ds0 : ds1;
                            const float s0 = tandem_imma_f32(ci[0][e]), s1 = tandem_imma_f32(ci[1][e]);
                            float in = fmaf(ds[1], s1, ds[0] * s0);
                            if constexpr (T::MIN) {
                                const float* ms = e < 2 ? ms0 : ms1;
                                in = fmaf(-ms[1], as[1][e & 1], fmaf(-ms[0], as[0][e & 1], in));
                            }
                            a[e] = fmaf((e & 1) ? sc.z : sc.x, in, a[e]);
                        }
                    }
                }
            } else {
#pragma unroll
            for (int g = 0; g < TANDEM_MMV_GROUPS; ++g) {
                const u32 b0 = *(const u32*)(arow + 32 * g), b1 = *(const u32*)(arow + 32 * g + 16);
                // (d_a, d_a * sum) of columns 2 qc and 2 qc + 1.
                const float4 sc = *(const float4*)(st + S::W + S::A + (g * TANDEM_MMV_COLS + 2 * qc) * 8);
                const float o0 = T::OFF * sc.y, o1 = T::OFF * sc.w;
#pragma unroll
                for (int t = 0; t < 2; ++t) {
                    u32 fa[4];
                    float d0, d1, m0, m1;
                    T::frag(st + (16 * t + qr) * S::PAD, g, qc, fa[0], fa[2], d0, m0);
                    T::frag(st + (16 * t + qr + 8) * S::PAD, g, qc, fa[1], fa[3], d1, m1);
                    int ci[4];
                    tandem_imma32(ci, fa[0], fa[1], fa[2], fa[3], b0, b1);
                    // Row r, column j: acc += d_r * (d_a,j * sum + OFF * s_j) (+ m_r * s_j).
                    float* a = acc[t];
                    a[0] = fmaf(d0, fmaf(sc.x, tandem_imma_f32(ci[0]), o0), a[0]);
                    a[1] = fmaf(d0, fmaf(sc.z, tandem_imma_f32(ci[1]), o1), a[1]);
                    a[2] = fmaf(d1, fmaf(sc.x, tandem_imma_f32(ci[2]), o0), a[2]);
                    a[3] = fmaf(d1, fmaf(sc.z, tandem_imma_f32(ci[3]), o1), a[3]);
                    if (T::MIN) {
                        a[0] = fmaf(m0, sc.y, a[0]);
                        a[1] = fmaf(m0, sc.w, a[1]);
                        a[2] = fmaf(m1, sc.y, a[2]);
                        a[3] = fmaf(m1, sc.w, a[3]);
                    }
                }
            }
            }
#else
            // Built for a device without these instructions: never picked there; NaN if it were.
            tandem_acc_nan(acc);
#endif
            buf = buf == S::STAGES - 1 ? 0 : buf + 1;
        }
        // The tile's sums: warps 1.. put their partial sums in their parts, warp 0 adds them to
        // its own and writes the outputs (the copies of the next tile's chunks stay in flight).
        if (warp > 0) {
#pragma unroll
            for (int t = 0; t < 2; ++t)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int r = 16 * t + qr + (e >= 2 ? 8 : 0);
                    part[((warp - 1) * TANDEM_MMV_ROWS + r) * TANDEM_MMV_COLS + 2 * qc + (e & 1)] = acc[t][e];
                    acc[t][e] = 0.0f;
                }
        }
        __syncthreads();
        if (warp == 0) {
#pragma unroll
            for (int t = 0; t < 2; ++t)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int r = 16 * t + qr + (e >= 2 ? 8 : 0), j = 2 * qc + (e & 1);
                    float v = acc[t][e];
#pragma unroll
                    for (int w = 1; w < TANDEM_MMV_WARPS; ++w) {
                        v += part[((w - 1) * TANDEM_MMV_ROWS + r) * TANDEM_MMV_COLS + j];
                    }
                    acc[t][e] = 0.0f;
                    if (row0 + r < m && j < ncols) *(float*)(out + j * nb1 + (row0 + r) * 4) = v;
                }
        }
        __syncthreads();  // the parts are written again for the next tile
    }
    tandem_cp_wait<0>();
}

// MUL_MAT, 3..8 columns: block (first row tile, batch), taking every gridDim.x-th row tile; the
// q8_1 copy holds batch b's columns from b * n.
template <typename T>
TANDEM_DEVICE void tandem_mmv_quant(const char* w, const char* aq, const char* ads, char* dst,
                                    const tandem_mm_shape& s) {
    const i64 b = blockIdx.y;
    if (b >= s.ne12 * s.ne13) return;
    const i64 i12 = b % s.ne12, i13 = b / s.ne12;
    const u8* wb = (const u8*)w + (i12 / s.r2) * s.nb02 + (i13 / s.r3) * s.nb03;
    char* out = dst + i12 * s.nb2 + i13 * s.nb3;
    tandem_mmv_rows<T>(wb, s.nb01, s.m, s.k, aq, ads, b * s.n, (int)s.n, out, s.nb1);
}

// ---------------------------------------------------------------- f16 path
// f16 weights x the f16 copy of the activations (column c of batch b at xh + (b * n + c) * k
// halves). Block = 256 threads (eight warps, 4 x 2, each 32 x 32 of the 128 x 64 tile); k steps
// of 32 values, three in flight through cp.async (rows of 80 bytes: ldmatrix rows hit distinct
// bank quads), fragments loaded with ldmatrix, m16n8k16 mma with f32 accumulation. Rows that
// are not 16-byte aligned (or k not a multiple of 8) are copied with plain loads instead.

#define TANDEM_MMH_BK 32
#define TANDEM_MMH_ROW (TANDEM_MMH_BK * 2 + 16)
#define TANDEM_MMH_STAGES 3

struct tandem_mmh_smem {
    u8 a[TANDEM_MMH_STAGES][TANDEM_MMA_BM * TANDEM_MMH_ROW];
    u8 b[TANDEM_MMH_STAGES][TANDEM_MMA_BN * TANDEM_MMH_ROW];
};

// Eight halves of a row from k0 (zero past k), plain loads.
TANDEM_DEVICE uint4 tandem_mmh_piece(const u16* src, i64 k0, i64 k) {
    u32 e[4] = {0, 0, 0, 0};
    for (int i = 0; i < 8; ++i) {
        if (k0 + i < k) e[i / 2] |= (u32)src[i] << (16 * (i & 1));
    }
    return make_uint4(e[0], e[1], e[2], e[3]);
}

// Queues the k step at k0 into stage `buf`. Thread t copies two 16-byte pieces of weight row
// t / 2 (at wrow, null past m) and one of activation column t / 4 (at xcol, null past n);
// pieces past k are zero. With `al` false, plain loads.
TANDEM_DEVICE void tandem_mmh_stage(tandem_mmh_smem& sm, int buf, const u8* wrow, const u16* xcol, i64 k, i64 k0,
                                    bool al, const u8* wb, const u16* xb) {
    static_assert(TANDEM_MMA_BM * 2 == TANDEM_MMA_THREADS && TANDEM_MMA_BN * 4 == TANDEM_MMA_THREADS &&
                      TANDEM_MMH_BK == 32,
                  "one weight row per two threads, one column per four");
    const int t = threadIdx.x;
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        const int v = 2 * (t % 2) + j;
        const i64 kk = k0 + 8 * v;
        const bool in = wrow != nullptr && kk < k;
        const u8* src = in ? wrow + kk * 2 : wb;
        u8* dst = sm.a[buf] + (t / 2) * TANDEM_MMH_ROW + 16 * v;
        if (al) {
            tandem_cp16(dst, src, in ? 16 : 0);
        } else {
            *(uint4*)dst = in ? tandem_mmh_piece((const u16*)src, kk, k) : make_uint4(0, 0, 0, 0);
        }
    }
    const int v = t % 4;
    const i64 kk = k0 + 8 * v;
    const bool in = xcol != nullptr && kk < k;
    const u16* src = in ? xcol + kk : xb;
    u8* dst = sm.b[buf] + (t / 4) * TANDEM_MMH_ROW + 16 * v;
    if (al) {
        tandem_cp16(dst, src, in ? 16 : 0);
    } else {
        *(uint4*)dst = in ? tandem_mmh_piece(src, kk, k) : make_uint4(0, 0, 0, 0);
    }
}

// One k step (TANDEM_MMH_BK values) of the f16 tiles on WMMA for this warp's 32 rows (row l16 of
// its first 16 at sa) and 32 columns (column l16 of its first 16 at sb): two k16 slices, 2 x 2
// tiles of 16 x 16; acc[mt][2 nt + i / 4][i % 4] is row 16 mt + tandem_wmma_row(lay, i), column
// 16 nt + l16.
template <typename L = int>
TANDEM_DEVICE void tandem_wmma_f16_step(float (&acc)[2][4][4], const u8* sa, const u8* sb, L lay) {
#if defined(TANDEM_WMMA_RUNS)
#pragma unroll
    for (int ks = 0; ks < TANDEM_MMH_BK / 16; ++ks) {
        u32 fa[2][8], fb[2][8];
#pragma unroll
        for (int t = 0; t < 2; ++t) {
            const uint4* pa = (const uint4*)(sa + t * 16 * TANDEM_MMH_ROW + 32 * ks);
            const uint4* pb = (const uint4*)(sb + t * 16 * TANDEM_MMH_ROW + 32 * ks);
            const uint4 a0 = pa[0], a1 = pa[1], b0 = pb[0], b1 = pb[1];
            const u32 av[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
            const u32 bv[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
#pragma unroll
            for (int w = 0; w < 8; ++w) {
                fa[t][w] = av[w];
                fb[t][w] = bv[w];
            }
        }
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) {
                float c[8];
#pragma unroll
                for (int i = 0; i < 8; ++i) c[i] = acc[mt][2 * nt + i / 4][i % 4];
                tandem_wmma_h16(c, fa[mt], fb[nt], lay);
#pragma unroll
                for (int i = 0; i < 8; ++i) acc[mt][2 * nt + i / 4][i % 4] = c[i];
            }
        }
    }
#else
    (void)sa, (void)sb, (void)lay;
    tandem_acc_nan(acc);
#endif
}

// The same on the CDNA tiles for this wave's 32 rows (row l16 of its first 16 at sa) against the
// 64 columns (column l16 of the first 16 at sb): acc[mt][nt][i] is row 16 mt + 4 q + i of the
// wave's 32, column 16 nt + l16.
template <typename L = int>
TANDEM_DEVICE void tandem_cdna_f16_step(float (&acc)[2][4][4], const u8* sa, const u8* sb) {
#if defined(TANDEM_CDNA_RUNS)
    const int q = threadIdx.x % 64 / 16;
#pragma unroll
    for (int ks = 0; ks < TANDEM_MMH_BK / 16; ++ks) {
        uint2 fa[2], fb[4];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) fa[mt] = *(const uint2*)(sa + mt * 16 * TANDEM_MMH_ROW + 32 * ks + 8 * q);
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) fb[nt] = *(const uint2*)(sb + nt * 16 * TANDEM_MMH_ROW + 32 * ks + 8 * q);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) tandem_cdna_h16<L>(acc[mt][nt], fa[mt].x, fa[mt].y, fb[nt].x, fb[nt].y);
    }
#else
    (void)sa, (void)sb;
    tandem_acc_nan(acc);
#endif
}

template <bool WM = false, bool BF = false>
TANDEM_DEVICE void tandem_mma_f16_tile(const char* w, const u16* xh, char* dst, const tandem_mm_shape& s,
                                       int lay = 0) {
    __shared__ __align__(16) tandem_mmh_smem sm;
    const i64 b = blockIdx.z;
    if (b >= s.ne12 * s.ne13) return;
    const i64 i12 = b % s.ne12, i13 = b / s.ne12;
    const i64 row0 = (i64)blockIdx.y * TANDEM_MMA_BM, col0 = (i64)blockIdx.x * TANDEM_MMA_BN;
    const u8* wb = (const u8*)w + (i12 / s.r2) * s.nb02 + (i13 / s.r3) * s.nb03;
    const u16* xb = xh + b * s.n * s.k;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int wm = warp / 2, wn = warp % 2;
    float acc[2][4][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;
    // 16-byte pieces when every row starts 16-byte aligned and k is whole pieces.
    const bool al = (((u64)wb | (u64)s.nb01 | (u64)xb) & 15u) == 0 && s.k % 8 == 0;
    const i64 steps = (s.k + TANDEM_MMH_BK - 1) / TANDEM_MMH_BK;
    const i64 myrow = row0 + threadIdx.x / 2, mycol = col0 + threadIdx.x / 4;
    const u8* wrow = myrow < s.m ? wb + myrow * s.nb01 : nullptr;
    const u16* xcol = mycol < s.n ? xb + mycol * s.k : nullptr;
#pragma unroll
    for (int st = 0; st < TANDEM_MMH_STAGES - 1; ++st) {
        if (st < steps) tandem_mmh_stage(sm, st, wrow, xcol, s.k, st * TANDEM_MMH_BK, al, wb, xb);
        tandem_cp_commit();
    }
    // ldmatrix rows of this lane: A row (lane % 8) + 8 (lane / 8 % 2), byte 16 (lane / 16);
    // B column (lane % 8) + 8 (lane / 16), byte 16 (lane / 8 % 2).
    const int ar = (lane % 8) + 8 * ((lane / 8) % 2), ab = 16 * (lane / 16);
    const int bc = (lane % 8) + 8 * (lane / 16), bb = 16 * ((lane / 8) % 2);
    for (i64 st = 0; st < steps; ++st) {
        const int buf = (int)(st % TANDEM_MMH_STAGES);
        tandem_cp_wait<TANDEM_MMH_STAGES - 2>();
        __syncthreads();  // step st is in; every warp is past step st - 1, whose stage is refilled next
        const i64 next = st + TANDEM_MMH_STAGES - 1;
        if (next < steps) {
            tandem_mmh_stage(sm, (int)(next % TANDEM_MMH_STAGES), wrow, xcol, s.k, next * TANDEM_MMH_BK, al, wb, xb);
        }
        tandem_cp_commit();
        if constexpr (WM) {
            if (lay == TANDEM_CDNA_LAYOUT) {
                tandem_cdna_f16_step(acc, sm.a[buf] + (threadIdx.x / 64 * 32 + lane % 16) * TANDEM_MMH_ROW,
                                     sm.b[buf] + (lane % 16) * TANDEM_MMH_ROW);
            } else {
                tandem_wmma_f16_step(acc, sm.a[buf] + (wm * 32 + lane % 16) * TANDEM_MMH_ROW,
                                     sm.b[buf] + (wn * 32 + lane % 16) * TANDEM_MMH_ROW, lay);
            }
            continue;
        }
#if defined(TANDEM_MMA_ENABLED)
        const u8* sa = sm.a[buf] + (wm * 32 + ar) * TANDEM_MMH_ROW + ab;
        const u8* sb = sm.b[buf] + (wn * 32 + bc) * TANDEM_MMH_ROW + bb;
#pragma unroll
        for (int ks = 0; ks < TANDEM_MMH_BK / 16; ++ks) {
            u32 fa[2][4], fb[2][4];
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) tandem_ldsm4(fa[mt], sa + mt * 16 * TANDEM_MMH_ROW + 32 * ks);
#pragma unroll
            for (int np = 0; np < 2; ++np) tandem_ldsm4(fb[np], sb + np * 16 * TANDEM_MMH_ROW + 32 * ks);
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) {
                const u32 b0 = fb[nt / 2][2 * (nt % 2)], b1 = fb[nt / 2][2 * (nt % 2) + 1];
#pragma unroll
                for (int mt = 0; mt < 2; ++mt) {
                    float* a = acc[mt][nt];
#define TANDEM_MMH_ASM(TY)                                                                                   \
    asm("mma.sync.aligned.m16n8k16.row.col.f32." TY "." TY ".f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "         \
        "{%8, %9}, {%0, %1, %2, %3};"                                                                        \
        : "+f"(a[0]), "+f"(a[1]), "+f"(a[2]), "+f"(a[3])                                                     \
        : "r"(fa[mt][0]), "r"(fa[mt][1]), "r"(fa[mt][2]), "r"(fa[mt][3]), "r"(b0), "r"(b1))
                    if constexpr (BF) {
                        TANDEM_MMH_ASM("bf16");
                    } else {
                        TANDEM_MMH_ASM("f16");
                    }
#undef TANDEM_MMH_ASM
                }
            }
        }
#else
        tandem_acc_nan(acc);
#endif
    }
    tandem_cp_wait<0>();
    const tandem_mma_dense_cols cols = tandem_mma_dense(dst, b, s, col0);
    if (WM && lay == TANDEM_CDNA_LAYOUT) {
        // acc[mt][nt][i]: row 16 mt + 4 q + i of the wave's 32 (wave = thread / 64, q = its lane
        // / 16), column 16 nt + lane % 16.
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
            char* o = cols.out(16 * nt + lane % 16);
#pragma unroll
            for (int mt = 0; mt < 2; ++mt)
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const i64 r = row0 + threadIdx.x / 64 * 32 + 16 * mt + 4 * (threadIdx.x % 64 / 16) + i;
                    if (r < s.m && o != nullptr) *(float*)(o + r * 4) = acc[mt][nt][i];
                }
        }
        return;
    }
    if constexpr (WM) {
        // acc[mt][2 nt + i / 4][i % 4]: row 16 mt + tandem_wmma_row(lay, i) of the warp's 32,
        // column 16 nt + lane % 16 of its 32.
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) {
                char* o = cols.out(wn * 32 + 16 * nt + lane % 16);
#pragma unroll
                for (int i = 0; i < 8; ++i) {
                    const i64 r = row0 + wm * 32 + 16 * mt + tandem_wmma_row(lay, i);
                    if (r < s.m && o != nullptr) *(float*)(o + r * 4) = acc[mt][2 * nt + i / 4][i % 4];
                }
            }
        }
        return;
    }
    tandem_mma_store(acc, cols, s.m, row0 + wm * 32, wn * 32);
}

// ---------------------------------------------------------------- f16 path, Hopper
// f16 weights x the f16 copy of the activations with warpgroup mma (sm_90a: wgmma reads both
// operands from shared memory through descriptors and runs asynchronously to the issuing
// threads). Block = 256 threads, two warpgroups; tile TANDEM_WGMMA_BM (128) rows x
// TANDEM_WGMMA_BN columns, warpgroup g taking rows 64 g .. 64 g + 64 against every column. k
// steps of 64 values: a step holds one 128-byte row per weight row and per activation column,
// stored with the 128-byte swizzle the descriptors name (16-byte piece j of row r at piece
// j ^ (r % 8), every tile 1024-byte aligned), so each k16 slice of the step is the same
// descriptor 32 bytes further on. TANDEM_WGMMA_STAGES steps live in dynamic shared memory:
// cp.async fills step s + STAGES - 2 while the mma of step s is issued and that of step s - 1
// may still be running. Weight rows and k must be whole 16-byte pieces (the host checks;
// tandem_mma_f16 takes the rest). Accumulators: thread i of warpgroup g holds, for each 8
// columns j, rows 64 g + 16 (i / 32) + (i % 32) / 4 (+ 8) x columns 8 j + 2 (i % 4) (+ 1).

#if defined(TANDEM_NVIDIA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TANDEM_WGMMA_ENABLED 1
#endif

#define TANDEM_WGMMA_THREADS 256
#define TANDEM_WGMMA_BM 128
#define TANDEM_WGMMA_BN 256
#define TANDEM_WGMMA_STAGES 4
#define TANDEM_WGMMA_QSTAGES 4
#define TANDEM_WGMMA_BK 64
// Bytes of one step's weight rows and of its activation columns. The launch gives the block
// the dynamic shared memory `wgmma_shared_bytes` in matmul_launch.rs computes (f16: STAGES *
// (A_BYTES + B_BYTES), plus 1024 bytes of room to align the first step to 1024 bytes).
#define TANDEM_WGMMA_A_BYTES (TANDEM_WGMMA_BM * TANDEM_WGMMA_BK * 2)
#define TANDEM_WGMMA_B_BYTES (TANDEM_WGMMA_BN * TANDEM_WGMMA_BK * 2)

// This thread's warpgroup (128 threads), taken from lane 0 by a shuffle: the compiler then knows
// it is the same on every lane of a warp and keeps what is made from it (the mma descriptors) in
// uniform registers, rather than making it per thread and moving it there before every mma.
TANDEM_DEVICE int tandem_warpgroup() { return __shfl((int)threadIdx.x / 128, 0); }

// Shared-memory matrix descriptor of a K-major tile with the 128-byte swizzle at p: start
// address / 16 (bits 0-13), leading offset 16 bytes (bits 16-29; unused by this layout), 1024
// bytes between groups of eight rows (bits 32-45), swizzle mode 1 = 128 bytes (bits 62-63).
TANDEM_DEVICE u64 tandem_wgmma_desc(const u8* p) {
    const u64 a = tandem_smem_addr(p);
    return ((a & 0x3ffffu) >> 4) | (1ull << 16) | ((u64)(1024 >> 4) << 32) | (1ull << 62);
}
TANDEM_DEVICE void tandem_wgmma_fence() {
#if defined(TANDEM_WGMMA_ENABLED)
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#endif
}
TANDEM_DEVICE void tandem_wgmma_commit() {
#if defined(TANDEM_WGMMA_ENABLED)
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#endif
}
// Waits until at most N committed wgmma groups of this warpgroup are still running.
template <int N>
TANDEM_DEVICE void tandem_wgmma_wait() {
#if defined(TANDEM_WGMMA_ENABLED)
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
#endif
}
// Makes this thread's finished cp.async writes visible to wgmma's (async proxy) reads.
TANDEM_DEVICE void tandem_wgmma_proxy_fence() {
#if defined(TANDEM_WGMMA_ENABLED)
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}
// Keeps the compiler from moving accumulator reads or writes across a wgmma issue or wait.
template <int N>
TANDEM_DEVICE void tandem_wgmma_hold(float (&d)[N]) {
#if defined(TANDEM_WGMMA_ENABLED)
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
#endif
}

template <int N>
TANDEM_DEVICE void tandem_wgmma_hold(int (&d)[N]) {
#if defined(TANDEM_WGMMA_ENABLED)
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+r"(d[i])::"memory");
#endif
}

// D (64 x 256, f32, 128 per thread) += A (64 x 16) * B (256 x 16)^T, both f16 (BF: bf16) in shared
// memory (descriptors), both K-major. TY: the operands' PTX type.
#define TANDEM_WGMMA_256_ASM(TY) \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n" \
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32." TY "." TY " {" \
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
                 "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
                 "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
                 "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
                 "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
                 "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
                 "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127" \
                 "}, %128, %129, p, 1, 1, 0, 0;\n}" \
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
                   "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
                   "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
                   "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
                   "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
                   "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
                   "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
                   "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
                   "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
                   "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), \
                   "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
                   "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), \
                   "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
                   "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127]) \
                 : "l"(da), "l"(db), "r"(1));
template <bool BF = false>
TANDEM_DEVICE void tandem_wgmma_256(float (&d)[128], u64 da, u64 db) {
#if defined(TANDEM_WGMMA_ENABLED)
    if constexpr (BF) {
        TANDEM_WGMMA_256_ASM("bf16");
    } else {
        TANDEM_WGMMA_256_ASM("f16");
    }
#endif
}

// D (64 x 32, s32, 16 per thread) = A (64 x 32) * B (32 x 32)^T, both s8 in shared memory
// (descriptors), both K-major. D is written only (scale-d false): code that reset accumulators
// between mma would let the register allocator move them, and ptxas then serializes the mma.
TANDEM_DEVICE void tandem_wgmma_s8_32(int (&d)[16], u64 da, u64 db) {
#if defined(TANDEM_WGMMA_ENABLED)
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k32.s32.s8.s8 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
                 "}, %16, %17, p;\n}"
                 : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3]), "=r"(d[4]), "=r"(d[5]), "=r"(d[6]), "=r"(d[7]),
                   "=r"(d[8]), "=r"(d[9]), "=r"(d[10]), "=r"(d[11]), "=r"(d[12]), "=r"(d[13]), "=r"(d[14]), "=r"(d[15])
                 : "l"(da), "l"(db), "r"(0));
#else
#pragma unroll
    for (int i = 0; i < 16; ++i) d[i] = 0;
#endif
}

// Shared-memory matrix descriptor of a K-major tile with the 64-byte swizzle at p (rows of 64
// bytes, 16-byte piece j of row r at piece j ^ ((r / 2) % 4), the tile 512-byte aligned): 512
// bytes between groups of eight rows, swizzle mode 2 = 64 bytes.
TANDEM_DEVICE u64 tandem_wgmma_desc64(const u8* p) {
    const u64 a = tandem_smem_addr(p);
    return ((a & 0x3ffffu) >> 4) | (1ull << 16) | ((u64)(512 >> 4) << 32) | (2ull << 62);
}

// x rounded to the nearest tf32 value (10 mantissa bits, the low 13 bits of the f32 zero).
TANDEM_DEVICE float tandem_tf32(float x) {
#if defined(TANDEM_WGMMA_ENABLED)
    u32 r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return __uint_as_float(r);
#else
    return x;
#endif
}

// D (64 x 32, f32, 16 per thread from d) += A (64 x 8, tf32, registers: rows i / 4 of the warp's
// 16 (+ 8) and k = i % 4 (+ 4), lane i) * B (32 x 8, tf32, shared memory, descriptor)^T.
TANDEM_DEVICE void tandem_wgmma_tf32_32(float* d, const u32 (&a)[4], u64 db) {
#if defined(TANDEM_WGMMA_ENABLED)
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k8.f32.tf32.tf32 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
                 "}, {%16, %17, %18, %19}, %20, p, 1, 1;\n}"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                   "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
#endif
}

// How many of a thread's `most` copy rows, 32 apart, lie among the `left` rows from its first.
TANDEM_DEVICE int tandem_wgmma_lim(i64 left, int most) {
    const i64 v = left <= 0 ? 0 : (left + 31) / 32;
    return v < most ? (int)v : most;
}

// Byte offset in a swizzled step tile of 16-byte piece `piece` of row `r`.
TANDEM_DEVICE int tandem_wgmma_at(int r, int piece) { return r * 128 + ((piece ^ (r % 8)) << 4); }

// Queues ROWS (a multiple of 32) rows of k step `st` into the swizzled tile at `tile`: thread t
// copies 16-byte piece t % 8 of rows t / 8 + 32 i (src + i * step; rows i >= lim are past the
// matrix); pieces past the matrix or past k are zero.
template <int ROWS>
TANDEM_DEVICE void tandem_wgmma_copy(u8* tile, const u8* src, i64 step, int lim, i64 k, i64 st, const u8* any) {
    const int t = threadIdx.x, piece = t % 8;
    const u32 at = tandem_smem_addr(tile) + tandem_wgmma_at(t / 8, piece);
    const i64 kk = st * TANDEM_WGMMA_BK + 8 * piece;
    const int n = kk < k ? 16 : 0;
    const u8* p = src + kk * 2;
#pragma unroll
    for (int i = 0; i < ROWS / 32; ++i) {
        tandem_cp16s(at + i * 32 * 128, i < lim ? p : any, i < lim ? n : 0);
        p += step;
    }
}

// The activation columns a thread copies: column col0 + t / 8 + 32 i of batch b in the f16 copy.
struct tandem_wgmma_cols {
    const u8* x;
    i64 step;
    int lim;
    __device__ tandem_wgmma_cols(const u16* xh, i64 b, const tandem_mm_shape& s, i64 col0) {
        const int r = threadIdx.x / 8;
        x = (const u8*)(xh + b * s.n * s.k) + (col0 + r) * s.k * 2;
        step = 32 * s.k * 2;
        lim = tandem_wgmma_lim(s.n - col0 - r, TANDEM_WGMMA_BN / 32);
    }
};

// Issues the mma of one k step (four k16 slices) of this warpgroup's 64 rows at sa against the
// step's columns at sb (BF: bf16 operands).
template <bool BF = false>
TANDEM_DEVICE void tandem_wgmma_issue(float (&acc)[TANDEM_WGMMA_BN / 2], const u8* sa, const u8* sb) {
    static_assert(TANDEM_WGMMA_BN == 256, "one m64n256k16 per k16 slice");
    tandem_wgmma_hold(acc);
    tandem_wgmma_fence();
    // Slice j starts 32 bytes (2 descriptor address units) after slice 0; the tiles lie in shared
    // memory below 228 KiB, so the start address field (14 bits of 16-byte units) cannot carry.
    const u64 da = tandem_wgmma_desc(sa), db = tandem_wgmma_desc(sb);
#pragma unroll
    for (int j = 0; j < TANDEM_WGMMA_BK / 16; ++j) {
        tandem_wgmma_256<BF>(acc, da + 2 * j, db + 2 * j);
    }
    tandem_wgmma_commit();
}

// Multiplies each accumulator by its column's scale cs[col] (none where cs is null; columns
// past n by 1), all scales read before anything is stored. Read between the stores (the compiler
// cannot tell cs and the output apart), each load waited behind the store ahead of it: on an
// H200 q4_0 14336 x 4096 x 512 took 160 us that way, 144 this way.
TANDEM_DEVICE void tandem_wgmma_scale(float (&acc)[TANDEM_WGMMA_BN / 2], const tandem_mm_shape& s, i64 col0,
                                      const float* cs) {
    if (cs == nullptr) return;
    const int i = threadIdx.x % 128;
#pragma unroll
    for (int j = 0; j < TANDEM_WGMMA_BN / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const i64 col = col0 + 8 * j + 2 * (i % 4) + e;
            const float c = col < s.n ? cs[col] : 1.0f;
            acc[4 * j + e] *= c;
            acc[4 * j + e + 2] *= c;
        }
    }
}

// Waits for the last mma and writes warpgroup g's part of the tile (rows and columns past m, n
// are skipped), each column's sums times its scale cs[col] where cs is given (the block types:
// tandem_mma_f16_q8_copy's powers of two).
TANDEM_DEVICE void tandem_wgmma_store(float (&acc)[TANDEM_WGMMA_BN / 2], char* out, const tandem_mm_shape& s, i64 row0,
                                      i64 col0, const float* cs = nullptr) {
    tandem_wgmma_wait<0>();
    tandem_wgmma_hold(acc);
    tandem_cp_wait<0>();
#if !defined(TANDEM_WGMMA_ENABLED)
    tandem_acc_nan(acc);
#endif
    const int g = threadIdx.x / 128, i = threadIdx.x % 128;
    const i64 rr = row0 + 64 * g + 16 * (i / 32) + (i % 32) / 4;
    tandem_wgmma_scale(acc, s, col0, cs);
#pragma unroll
    for (int j = 0; j < TANDEM_WGMMA_BN / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const i64 row = rr + (e >= 2 ? 8 : 0), col = col0 + 8 * j + 2 * (i % 4) + (e & 1);
            if (row < s.m && col < s.n) *(float*)(out + col * s.nb1 + row * 4) = acc[4 * j + e];
        }
    }
}

// The block's first step, 1024-byte aligned, in its dynamic shared memory.
TANDEM_DEVICE u8* tandem_wgmma_base(u8* smem) {
    return smem + ((1024u - (tandem_smem_addr(smem) & 1023u)) & 1023u);
}

// Mirrors `MmSplit` in backend/src/gpu/ops/matmul_launch.rs. The output tiles of a MUL_MAT, t
// = column tile + tiles_x * (row tile + tiles_y * batch), over a one-dimensional grid: tiles
// below `whole` take a block each; each of the others (the last, partial wave) is taken by
// `parts` blocks, part p summing the p-th of `parts` equal k ranges. Part 0 writes its sums to
// dst, part p > 0 all of its tile's to `partial` (tile t's at ((p - 1) * (tiles - whole) + t -
// whole) * BM * BN floats), and tandem_mm_split_sum adds them to dst in order.
struct tandem_mm_split {
    i64 tiles_x, tiles_y, tiles;
    i64 whole, parts;
    float* partial;
};
struct tandem_mm_split_tile {
    i64 x, y, b;   // column tile, row tile, batch
    i64 part, at;  // part; index of the tile among the split ones
};
// Tile counts fit 32 bits (the grid's x extent is under 2^31).
TANDEM_DEVICE tandem_mm_split_tile tandem_mm_split_at(const tandem_mm_split& sp, i64 block) {
    tandem_mm_split_tile r;
    u32 t = (u32)block;
    r.part = 0;
    r.at = 0;
    if (block >= sp.whole) {
        const u32 rest = (u32)(sp.tiles - sp.whole), j = (u32)(block - sp.whole);
        r.part = j / rest;
        r.at = j % rest;
        t = (u32)sp.whole + (u32)r.at;
    }
    const u32 tx = (u32)sp.tiles_x, ty = (u32)sp.tiles_y;
    r.x = t % tx;
    r.y = (t / tx) % ty;
    r.b = t / (tx * ty);
    return r;
}
// Where the block's part writes its sums (tiles of `values` floats): null for whole tiles and
// first parts.
TANDEM_DEVICE float* tandem_mm_split_part(const tandem_mm_split& sp, i64 block, i64 values) {
    const tandem_mm_split_tile at = tandem_mm_split_at(sp, block);
    return at.part > 0 ? sp.partial + ((at.part - 1) * (sp.tiles - sp.whole) + at.at) * values : nullptr;
}

// A split tile's part past the first: all 128 x 256 sums of the block, times their columns'
// scales cs (the block types' GEMM; none: null), to its place in sp.partial (row r of tile
// column c at c * 128 + r), for tandem_mm_split_sum to add to dst.
TANDEM_DEVICE void tandem_wgmma_part(float (&acc)[TANDEM_WGMMA_BN / 2], float* part, const tandem_mm_shape& s, i64 col0,
                                     const float* cs = nullptr) {
    tandem_wgmma_wait<0>();
    tandem_wgmma_hold(acc);
    tandem_cp_wait<0>();
    tandem_wgmma_scale(acc, s, col0, cs);
    // Accumulator 4 j + e: row 64 g + 16 (i / 32) + (i % 32) / 4 (+ 8 for e >= 2), column
    // 8 j + 2 (i % 4) + (e & 1), as tandem_wgmma_store has them.
    const int g = threadIdx.x / 128, i = threadIdx.x % 128;
    const int rr = 64 * g + 16 * (i / 32) + (i % 32) / 4;
#pragma unroll
    for (int j = 0; j < TANDEM_WGMMA_BN / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            part[(8 * j + 2 * (i % 4) + (e & 1)) * TANDEM_WGMMA_BM + rr + (e >= 2 ? 8 : 0)] = acc[4 * j + e];
        }
    }
}

// f16 weights (BF: bf16 weights against the bf16 copy), Hopper: blocks over tiles (and the last
// wave's parts) as tandem_mm_split says; a split tile's part sums its k range and, past the first
// part, writes all 128 x 256 sums to its place in sp.partial (row r of tile column c at c * 128 +
// r).
template <bool BF = false>
TANDEM_DEVICE void tandem_wgmma_f16_tile(const char* w, const u16* xh, char* dst, const tandem_mm_shape& s,
                                         const tandem_mm_split& sp) {
    extern __shared__ __align__(1024) u8 tandem_wgmma_smem[];
    static_assert(TANDEM_WGMMA_THREADS == 256 && TANDEM_WGMMA_BK == 64, "two warpgroups; 128-byte step rows");
    static_assert(TANDEM_WGMMA_STAGES >= 3, "a step in flight beside the one in use and the one draining");
    u8* base = tandem_wgmma_base(tandem_wgmma_smem);
    const tandem_mm_split_tile at = tandem_mm_split_at(sp, blockIdx.x);
    const i64 b = at.b;
    if (b >= s.ne12 * s.ne13) return;
    const i64 i12 = b % s.ne12, i13 = b / s.ne12;
    const i64 row0 = at.y * TANDEM_WGMMA_BM, col0 = at.x * TANDEM_WGMMA_BN;
    const u8* wb = (const u8*)w + (i12 / s.r2) * s.nb02 + (i13 / s.r3) * s.nb03;
    const int r = threadIdx.x / 8;
    const int alim = tandem_wgmma_lim(s.m - row0 - r, TANDEM_WGMMA_BM / 32);
    const u8* a = wb + (row0 + r) * s.nb01;
    const i64 astep = 32 * s.nb01;
    const tandem_wgmma_cols x(xh, b, s, col0);
    constexpr int STAGE = TANDEM_WGMMA_A_BYTES + TANDEM_WGMMA_B_BYTES;
    static_assert(STAGE % 1024 == 0 && TANDEM_WGMMA_A_BYTES % 1024 == 0, "swizzled tiles start 1024-byte aligned");
    // This block's k steps st0 .. st0 + steps.
    const i64 all = (s.k + TANDEM_WGMMA_BK - 1) / TANDEM_WGMMA_BK;
    const i64 parts = (i64)blockIdx.x >= sp.whole ? sp.parts : 1;
    const i64 st0 = all * at.part / parts, steps = all * (at.part + 1) / parts - st0;
#pragma unroll
    for (int st = 0; st < TANDEM_WGMMA_STAGES - 2; ++st) {
        if (st < steps) {
            tandem_wgmma_copy<TANDEM_WGMMA_BM>(base + st * STAGE, a, astep, alim, s.k, st0 + st, wb);
            tandem_wgmma_copy<TANDEM_WGMMA_BN>(base + st * STAGE + TANDEM_WGMMA_A_BYTES, x.x, x.step, x.lim, s.k,
                                               st0 + st, wb);
        }
        tandem_cp_commit();
    }
    float acc[TANDEM_WGMMA_BN / 2];
#pragma unroll
    for (int i = 0; i < TANDEM_WGMMA_BN / 2; ++i) acc[i] = 0.0f;
    const int g = tandem_warpgroup();
    for (i64 st = 0; st < steps; ++st) {
        tandem_cp_wait<TANDEM_WGMMA_STAGES - 3>();
        tandem_wgmma_proxy_fence();
        // Step st is in for every thread; every warpgroup's mma of step st - 2 has finished (the
        // wait in the step before), so its stage takes step st + STAGES - 2.
        __syncthreads();
        const u8* stage = base + (int)(st % TANDEM_WGMMA_STAGES) * STAGE;
        tandem_wgmma_issue<BF>(acc, stage + g * 64 * 128, stage + TANDEM_WGMMA_A_BYTES);
        const i64 next = st + TANDEM_WGMMA_STAGES - 2;
        if (next < steps) {
            u8* nstage = base + (int)(next % TANDEM_WGMMA_STAGES) * STAGE;
            tandem_wgmma_copy<TANDEM_WGMMA_BM>(nstage, a, astep, alim, s.k, st0 + next, wb);
            tandem_wgmma_copy<TANDEM_WGMMA_BN>(nstage + TANDEM_WGMMA_A_BYTES, x.x, x.step, x.lim, s.k, st0 + next, wb);
        }
        tandem_cp_commit();
        tandem_wgmma_wait<1>();
        tandem_wgmma_hold(acc);
    }
    if (float* part = tandem_mm_split_part(sp, blockIdx.x, TANDEM_WGMMA_BM * TANDEM_WGMMA_BN)) {
        tandem_wgmma_part(acc, part, s, col0);
        return;
    }
    tandem_wgmma_store(acc, dst + i12 * s.nb2 + i13 * s.nb3, s, row0, col0);
}

// Weights in 32-value blocks (the frag() types above) x the q8-rounded f16 copy of the
// activations (tandem_mma_f16_q8_copy): as the f16 tile, but each step's raw weight blocks (two
// per row, RAW_ROW = 2 * BYTES bytes, 4-byte aligned: the host asks for k % 64 == 0, 4-byte
// aligned rows less than 16 MiB apart and a 16-byte aligned base) are copied as the 16-byte units
// around them, one step ahead of the activations (group j holds the activations of step j and the
// raw blocks of step j + 1), and while the mma of step s runs every thread converts one (row,
// block) pair of step s + 1 to f16 (d * q + m, rounded once: tandem_wgmma_h4) into the next of
// three swizzled weight tiles; the barrier at the top of step s + 1 hands that tile to the mma.
// Shared memory: the three weight tiles, then TANDEM_WGMMA_QSTAGES stages of activations and raw
// weights (padded to 1024 bytes).
template <typename T>
struct tandem_wgmma_qlayout {
    static constexpr int RAW_ROW = 2 * T::BYTES;
    // A row's step starts `lead` (0, 4, 8 or 12) bytes into the 16-byte unit around its start; it
    // is staged as the UNITS units from there, WROW bytes per row.
    static constexpr int UNITS = (12 + RAW_ROW + 15) / 16;
    static constexpr int WROW = 16 * UNITS;
    static constexpr int ALL = TANDEM_WGMMA_BM * UNITS;
    // The raw units padded to 1024 bytes: every stage's activation tile stays 1024-byte aligned,
    // as the swizzled descriptors need.
    static constexpr int STAGE = TANDEM_WGMMA_B_BYTES + (TANDEM_WGMMA_BM * WROW + 1023) / 1024 * 1024;
    static constexpr int STAGES_AT = 3 * TANDEM_WGMMA_A_BYTES;
    static_assert(RAW_ROW % 4 == 0 && UNITS <= 15, "4-byte aligned steps; a unit index in four bits");
    static_assert(STAGE % 1024 == 0 && STAGES_AT % 1024 == 0, "swizzled tiles start 1024-byte aligned");
    static_assert(STAGES_AT + TANDEM_WGMMA_QSTAGES * STAGE + 1024 <= 227 * 1024, "a block's shared memory");
};

// The raw weight units a thread copies each step: unit c = t + 256 j of the step's (row after
// row, UNITS each: consecutive threads take consecutive units, so a warp's copies read the lines
// of a few rows and fill 512 contiguous bytes), unit c % UNITS of row c / UNITS, at offset off[j]
// from the row's step rounded down to 16 bytes. Units past the step's end (or its row past m)
// copy no bytes; the bytes before a step in its first unit are the row's previous step or the
// previous row's last (the base is 16-byte aligned, so never before the weights).
template <typename T>
struct tandem_wgmma_raw {
    using L = tandem_wgmma_qlayout<T>;
    static constexpr int J = (L::ALL + TANDEM_WGMMA_THREADS - 1) / TANDEM_WGMMA_THREADS;
    static_assert(J <= 4 && L::ALL % 32 == 0, "a byte per copy; whole warps past the last unit");
    static_assert(L::RAW_ROW <= 16 * 14, "a copy's byte count in eight bits");
    // r nb01 + 16 u of copy j (32-bit: the host keeps nb01 under 2^24, so r nb01 < 2^31).
    u32 off[J];
    // Byte j: 16 + RAW_ROW - 16 u for copy j's unit u (so that it copies min(16, ld + byte - 16)
    // bytes of the step, ld its lead), or 0 where its row is past m (no bytes).
    u32 rest;
    __device__ tandem_wgmma_raw(i64 nb01, i64 rows) {
        rest = 0;
#pragma unroll
        for (int j = 0; j < J; ++j) {
            const int c = threadIdx.x + j * TANDEM_WGMMA_THREADS;
            const int r = c / L::UNITS, u = c % L::UNITS;
            off[j] = (u32)r * (u32)nb01 + 16u * u;
            if (c < L::ALL && r < rows) rest |= (u32)(16 + L::RAW_ROW - 16 * u) << (8 * j);
        }
    }
    // Queues the raw blocks of step `st` (rows from row0p) into `raw`; `any`: a valid 16-byte
    // aligned address for the copies of no bytes.
    __device__ void copy(u8* raw, const u8* row0p, i64 st, const u8* any) const {
        const u32 dst = tandem_smem_addr(raw) + 16 * threadIdx.x;
        const u8* a = row0p + st * L::RAW_ROW;
#pragma unroll
        for (int j = 0; j < J; ++j) {
            if (L::ALL % TANDEM_WGMMA_THREADS != 0 && threadIdx.x + j * TANDEM_WGMMA_THREADS >= L::ALL) break;
            const u64 p = (u64)(a + off[j]);
            // The row's step starts ld bytes into its first unit; unit u holds ld + RAW_ROW - 16 u
            // of its bytes, at most 16.
            const int ld = (int)(p & 15u);
            const int n = max(0, min(16, ld + (int)((rest >> (8 * j)) & 0xffu) - 16));
            tandem_cp16s(dst + 16 * TANDEM_WGMMA_THREADS * j, n > 0 ? (const void*)(p & ~(u64)15) : (const void*)any, n);
        }
    }
};

// The activation rows a thread copies each step of the block types' GEMM: 16-byte piece t % 8 of
// tile columns t / 8 + 32 i. The q8-rounded copy is followed by a tile's columns of padding
// (`wgmma_acts_padding` in matmul_launch.rs) and k is whole steps, so every piece lies inside it
// and is copied whole: the tile columns past n get the padding's (or the next batch's) values,
// which reach only their own outputs, and those are not stored.
struct tandem_wgmma_qacts {
    const u8* x;
    i64 step;
    __device__ tandem_wgmma_qacts(const u16* xh, i64 b, const tandem_mm_shape& s, i64 col0) {
        const int t = threadIdx.x;
        x = (const u8*)(xh + b * s.n * s.k) + (col0 + t / 8) * s.k * 2 + 16 * (t % 8);
        step = 32 * s.k * 2;
    }
    // Queues the activation rows of step st into `tile`.
    __device__ void copy(u8* tile, i64 st) const {
        const u32 at = tandem_smem_addr(tile) + tandem_wgmma_at(threadIdx.x / 8, threadIdx.x % 8);
        const u8* p = x + st * TANDEM_WGMMA_BK * 2;
#pragma unroll
        for (int i = 0; i < TANDEM_WGMMA_BN / 32; ++i) {
            tandem_cp16s(at + i * 32 * 128, p, 16);
            p += step;
        }
    }
};

// Four signed bytes q as f16 d * q + m (one rounding each), two per word: the bytes are made
// unsigned (q + 128), put under the f16 exponent of 1024 (0x64XX = 1024 + byte, exact), less
// 1152 (exact: the small integer q), then d * q + m in one f16x2 fma.
TANDEM_DEVICE void tandem_wgmma_h4(u32 q, u32 d2, u32 m2, u32& h01, u32& h23) {
#if defined(TANDEM_WGMMA_ENABLED)
    const u32 u = q ^ 0x80808080u;
    u32 a = tandem_prmt(u, 0x64646464u, 0x5150u), b = tandem_prmt(u, 0x64646464u, 0x5352u);
    asm("sub.f16x2 %0, %1, %2;" : "=r"(a) : "r"(a), "r"(0x64806480u));
    asm("sub.f16x2 %0, %1, %2;" : "=r"(b) : "r"(b), "r"(0x64806480u));
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(h01) : "r"(a), "r"(d2), "r"(m2));
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(h23) : "r"(b), "r"(d2), "r"(m2));
#else
    const float d = tandem_f16_to_f32((u16)d2), m = tandem_f16_to_f32((u16)m2);
    u16 h[4];
    for (int e = 0; e < 4; ++e) h[e] = tandem_f32_to_f16(d * (float)(i8)(q >> (8 * e)) + m);
    h01 = (u32)h[0] | ((u32)h[1] << 16);
    h23 = (u32)h[2] | ((u32)h[3] << 16);
#endif
}

// Thread t: row t / 2, block t % 2 of the raw step at `raw` (`lead` bytes into the row's staged
// units), as f16 into the swizzled tile.
template <typename T>
TANDEM_DEVICE void tandem_wgmma_dequant(u8* tile, const u8* raw, int lead) {
    using L = tandem_wgmma_qlayout<T>;
    const int r = threadIdx.x / 2, blk = threadIdx.x % 2;
    const u8* b = raw + r * L::WROW + lead + blk * T::BYTES;
    u32 h[16];
    if constexpr (tandem_mma_has_words<T>::value) {
        // An f16 d and WORDS words: the block from aligned 32-bit loads (the words past its end
        // are the row's next bytes or the staged row's last unit), d kept as its f16 bits.
        u32 w[T::WORDS + 1];
        const int sh = tandem_aligned_words<T::WORDS + 1>(b, w);
        const u32 hd = (w[0] >> sh) & 0xffffu, d2 = hd | (hd << 16);
        u32 v[T::WORDS];
#pragma unroll
        for (int i = 0; i < T::WORDS; ++i) v[i] = tandem_shr64(w[i], w[i + 1], 16 + sh);
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            u32 lo, hi;
            T::frag_w(v, c, lo, hi);
            tandem_wgmma_h4(lo, d2, 0u, h[2 * c], h[2 * c + 1]);
            tandem_wgmma_h4(hi, d2, 0u, h[8 + 2 * c], h[8 + 2 * c + 1]);
        }
    } else {
#pragma unroll
        for (int c = 0; c < 4; ++c) {
            u32 lo, hi;
            float d, m;
            T::frag(b, c, lo, hi, d, m);
            const u32 hd = tandem_f32_to_f16(d), hm = tandem_f32_to_f16(m);
            const u32 d2 = hd | (hd << 16), m2 = hm | (hm << 16);
            tandem_wgmma_h4(lo, d2, m2, h[2 * c], h[2 * c + 1]);
            tandem_wgmma_h4(hi, d2, m2, h[8 + 2 * c], h[8 + 2 * c + 1]);
        }
    }
#pragma unroll
    for (int p = 0; p < 4; ++p) {
        *(uint4*)(tile + tandem_wgmma_at(r, 4 * blk + p)) = make_uint4(h[4 * p], h[4 * p + 1], h[4 * p + 2], h[4 * p + 3]);
    }
}

template <typename T>
TANDEM_DEVICE void tandem_wgmma_quant_tile(const char* w, const u16* xh, const float* cs, char* dst,
                                           const tandem_mm_shape& s, const tandem_mm_split& sp) {
    using L = tandem_wgmma_qlayout<T>;
    extern __shared__ __align__(1024) u8 tandem_wgmma_smem[];
    static_assert(TANDEM_WGMMA_QSTAGES >= 3, "a step in flight beside the one in use and the one draining");
    u8* base = tandem_wgmma_base(tandem_wgmma_smem);
    const tandem_mm_split_tile at = tandem_mm_split_at(sp, blockIdx.x);
    const i64 b = at.b;
    if (b >= s.ne12 * s.ne13) return;
    const i64 i12 = b % s.ne12, i13 = b / s.ne12;
    const i64 row0 = at.y * TANDEM_WGMMA_BM, col0 = at.x * TANDEM_WGMMA_BN;
    const u8* wb = (const u8*)w + (i12 / s.r2) * s.nb02 + (i13 / s.r3) * s.nb03;
    const u8* wrow0 = wb + row0 * s.nb01;
    const i64 rows = s.m - row0;
    const tandem_wgmma_qacts x(xh, b, s, col0);
    const tandem_wgmma_raw<T> rw(s.nb01, rows);
    // Where this thread's row's step 0 starts in its first unit; step st starts (phase + st *
    // RAW_ROW) % 16 bytes in.
    const int phase = (int)((u64)(wrow0 + (threadIdx.x / 2) * s.nb01) & 15u);
    auto lead = [&](i64 st) { return (int)((phase + st * L::RAW_ROW) & 15); };
    u8* stages = base + L::STAGES_AT;
    // This block's k steps st0 .. st0 + steps (at least one: k is a whole number of steps);
    // below, j and st count from st0.
    const i64 all = s.k / TANDEM_WGMMA_BK;
    const i64 parts = (i64)blockIdx.x >= sp.whole ? sp.parts : 1;
    const i64 st0 = all * at.part / parts, steps = all * (at.part + 1) / parts - st0;
    // Stage j % QSTAGES: activations of step j at its start, raw blocks of step j behind them.
    auto act = [&](i64 j) { return stages + (int)(j % TANDEM_WGMMA_QSTAGES) * L::STAGE; };
    auto raw = [&](i64 j) { return act(j) + TANDEM_WGMMA_B_BYTES; };
    auto tile = [&](i64 j) { return base + (int)(j % 3) * TANDEM_WGMMA_A_BYTES; };
    rw.copy(raw(0), wrow0, st0, wb);
#pragma unroll
    for (int j = 0; j < TANDEM_WGMMA_QSTAGES - 2; ++j) {
        if (j < steps) x.copy(act(j), st0 + j);
        if (j + 1 < steps) rw.copy(raw(j + 1), wrow0, st0 + j + 1, wb);
        tandem_cp_commit();
    }
    tandem_cp_wait<TANDEM_WGMMA_QSTAGES - 3>();
    __syncthreads();
    tandem_wgmma_dequant<T>(tile(0), raw(0), lead(st0));
    float acc[TANDEM_WGMMA_BN / 2];
#pragma unroll
    for (int i = 0; i < TANDEM_WGMMA_BN / 2; ++i) acc[i] = 0.0f;
    const int g = tandem_warpgroup();
    for (i64 st = 0; st < steps; ++st) {
        tandem_cp_wait<TANDEM_WGMMA_QSTAGES - 3>();
        tandem_wgmma_proxy_fence();
        // Group st is in for every thread (activations of step st, raw blocks of step st + 1) and
        // so is the weight tile of step st; the mma of step st - 2 has finished everywhere, so
        // its stage takes step st + QSTAGES - 2 (and the raw blocks of the step after).
        __syncthreads();
        tandem_wgmma_issue(acc, tile(st) + g * 64 * 128, act(st));
        const i64 next = st + TANDEM_WGMMA_QSTAGES - 2;
        if (next < steps) x.copy(act(next), st0 + next);
        if (next + 1 < steps) rw.copy(raw(next + 1), wrow0, st0 + next + 1, wb);
        tandem_cp_commit();
        if (st + 1 < steps) tandem_wgmma_dequant<T>(tile(st + 1), raw(st + 1), lead(st0 + st + 1));
        tandem_wgmma_wait<1>();
        tandem_wgmma_hold(acc);
    }
    if (float* part = tandem_mm_split_part(sp, blockIdx.x, TANDEM_WGMMA_BM * TANDEM_WGMMA_BN)) {
        tandem_wgmma_part(acc, part, s, col0, cs + b * s.n);
        return;
    }
    tandem_wgmma_store(acc, dst + i12 * s.nb2 + i13 * s.nb3, s, row0, col0, cs + b * s.n);
}

// ---------------------------------------------------------------- integer path, Hopper
// The 32-value block types (and q4_K, q5_K: tandem_wgmmq_super) against the q8_1 copy of the
// activations with int8 warpgroup mma (sm_90a): the exact integer group sums of the int8 tiles
// above, scaled in f32, so the results are theirs (the CPU's up to the f32 summation order).
// Block = TANDEM_WGMMQ_THREADS (512) threads, four warpgroups; tile TANDEM_WGMMQ_BM (128) weight
// rows x TANDEM_WGMMQ_BN (128) columns; k steps of 128 values (TANDEM_WGMMQ_KG groups): one
// 128-byte int8 row per weight row and activation column, swizzled as in the f16 path, each group
// the same descriptor 32 bytes further on. Warpgroup w takes tile columns 64 (w % 2) .. + 64 (the
// mma's A operand) against weight rows 64 (w / 2) .. + 64 (its B operand), as two halves of 32
// rows; so a thread's accumulators span two activation columns (64 (w % 2) + 16 (i / 32) + (i % 32)
// / 4, + 8; i = thread of the warpgroup) and 16 weight rows (64 (w / 2) + 32 h + 8 j + 2 (i % 4) +
// e): it keeps the activation scales in registers and reads one weight scale per row and group.
// Four warpgroups of modest register use (rather than two with twice the tile each) give every
// scheduler four warps to switch between while one waits.
//
// Per group and half, an m64n32k32 mma writes the int32 group sums; once it is done the threads
// fold them into their f32 accumulators: with R = sum + 0x4B400000 read as an f32 (12582912 +
// sum, exactly, as |sum| < 2^22),
//     acc += d_w * fma(d_a, R, n_a),  n_a = -12582912 d_a   (= d_w * (d_a * sum): d_a is an f16
//                                     value, so n_a and the fma's difference are exact),
// and issue the half's next mma, while the other half's mma runs: the tensor cores and the
// scaling overlap within each warpgroup.
//
// The offsets' terms of the types that have them (q4_1, q5_1, q4_K, q5_K: + m_w * s_a per
// output and group) go to the tensor cores rather than a fourth f32 instruction: per step and
// half, two tf32 mma m64n32k8 add sum_g m_w s_a of the step's four groups straight into the
// accumulators, with m_w (at most 17 significant bits: f16 dmin times a 6-bit min) split exactly
// into two tf32 values and s_a into two (dropping at most its lowest bits), so each offset is
// within about 2^-22 of its f32 product.
//
// Copies: cp.async group j holds the activation rows of step j and the (d, s) pairs and raw
// weight blocks of step j + 1, TANDEM_WGMMQ_STAGES - 1 groups ahead. During step s every thread
// unpacks one block of step s + 1 (frag()) into the other of two swizzled weight tiles with its
// d and m, and turns one pair of step s + 1 into (d_a, n_a, s_a). Shared memory (dynamic,
// `wgmmq_shared_bytes` in matmul_launch.rs): the two weight tiles, their scales, the two
// converted pair sets, then the stages (activation rows, pairs, each weight row's raw step as
// the 16-byte units around it, padded to 1024 bytes). Weight rows must be 8-byte aligned (q4_K,
// q5_K: 16), the weights' base 16-byte aligned and k a multiple of 128 (the host checks; the
// int8 tiles take the rest).

#define TANDEM_WGMMQ_THREADS 512
#define TANDEM_WGMMQ_BM 128
#define TANDEM_WGMMQ_BN 128
#define TANDEM_WGMMQ_KG 4
#define TANDEM_WGMMQ_STAGES 4
// Bytes of one step's int8 tile (weight rows or activation columns: 128 x 128 bytes).
#define TANDEM_WGMMQ_TILE (128 * 128)

// The superblock types on the same GEMM: a k step is half of a 256-value superblock (four of its
// eight groups); each step stages the bytes of its superblock (16-byte aligned) before the quants
// (d, dmin, scales; q5_K's high bits) and right after them the half of the 128 quant bytes with
// groups 4 h .. 4 h + 3, h = the step's half, and reads those groups (R: the reader of
// tandem_mmq_step, frag_at(r, qs, g, c, ...) with the group pair's quants at qs; a superblock's
// quants are its last 128 bytes).
template <typename R>
struct tandem_wgmmq_super : R {
    static constexpr bool SB = true;
    static constexpr int BYTES = R::CHUNK;
};
template <typename T, typename = void>
struct tandem_wgmmq_is_super {
    static constexpr bool value = false;
};
template <typename T>
struct tandem_wgmmq_is_super<T, decltype((void)T::SB)> {
    static constexpr bool value = T::SB;
};

template <typename T>
struct tandem_wgmmq_layout {
    static constexpr bool SB = tandem_wgmmq_is_super<T>::value;
    // Raw bytes of a row's step: four blocks, or its superblock (of which it copies CU units).
    static constexpr int RAW_ROW = SB ? T::BYTES : TANDEM_WGMMQ_KG * T::BYTES;
    // A row's raw step is 8-byte aligned (a superblock 16-byte); it is copied as the UNITS 16-byte
    // units around it (the first may hold 8 bytes before the step; superblocks: the CU of them
    // the step needs) into WROW bytes.
    static constexpr int UNITS = SB ? RAW_ROW / 16 : (RAW_ROW + 8 + 15) / 16;
    // Units a step copies per row (superblocks: HU before the quants, then four of quants).
    static constexpr int HU = SB ? (RAW_ROW - 128) / 16 : 0;
    static constexpr int CU = SB ? HU + 4 : UNITS;
    static constexpr int WROW = CU * 16;
    // Bytes of the last unit inside the step, less the lead: all the others are whole.
    static constexpr int TAIL = RAW_ROW - 16 * (UNITS - 1);
    // (d, s) f32 pairs of a step as copied, tile column-major: pair (c, g) at 8 (KG c + g).
    static constexpr int PAIRS = TANDEM_WGMMQ_KG * TANDEM_WGMMQ_BN * 8;
    static constexpr int STAGE = TANDEM_WGMMQ_TILE + PAIRS + (TANDEM_WGMMQ_BM * WROW + 1023) / 1024 * 1024;
    // Weight scales of a tile: d of row 8 j + 2 q + e (j < 16) and group g at (4 g + q) * SROW +
    // 2 j + e. A thread's 8 rows of a half and group are 8 floats in a row; the rows of the four q
    // lie 36 floats apart, so their 16-byte loads hit distinct banks.
    static constexpr int SROW = 36;
    static constexpr int SCALES = TANDEM_WGMMQ_KG * 4 * SROW * 4;
    // Activation scales of a step: d_a, n_a (and for the types with an offset s_a as two tf32, s1
    // and s2) of tile column c and group g at KG c + g, in arrays of ACT floats.
    static constexpr int ACT = TANDEM_WGMMQ_BN * TANDEM_WGMMQ_KG;
    static constexpr int ACTS = (T::MIN ? 4 : 2) * ACT * 4;
    // A tile's offsets as the tf32 B operand (types with an offset): row r's 16 values (m1 of
    // groups 0..3 twice, then m2 twice) in 64 bytes at 64 r, 64-byte swizzled.
    static constexpr int MINS = T::MIN ? TANDEM_WGMMQ_BM * 64 : 0;
    static constexpr int STAGES_AT = (2 * TANDEM_WGMMQ_TILE + 2 * MINS + 2 * SCALES + 2 * ACTS + 1023) / 1024 * 1024;
    static_assert(SB ? RAW_ROW % 16 == 0 && RAW_ROW >= 128 : (RAW_ROW % 8 == 0 && TAIL >= 0 && TAIL + 8 <= 16),
                  "raw steps are whole 8-byte units, superblocks whole 16-byte units");
    static_assert(STAGE % 1024 == 0 && TANDEM_WGMMQ_TILE % 1024 == 0 && MINS % 1024 == 0,
                  "swizzled tiles start 1024-byte aligned");
    static_assert(STAGES_AT + TANDEM_WGMMQ_STAGES * STAGE + 1024 <= 227 * 1024, "a block's shared memory");
};

// A thread's copies of each step: 16-byte piece t % 8 of the int8 rows of tile columns t / 8 +
// 64 i (bit i of `in`: the map has the column), the pair of group t % 4 of tile column t / 4
// (bit 2), and the 16-byte units c = t, t + 512, ... of the step's weight units, unit c % CU of
// row c / CU (rows past m copy zeros): the units around the row's step, from its address rounded
// down to 16 bytes (lead, 0 or 8 bytes) to its end, bytes past the end zero. Consecutive threads
// take consecutive units of a row and then the next row, so a warp's copy reads the few lines of
// about four rows, and writes 512 contiguous bytes: unit c lands at 16 c (the row's WROW bytes
// are its CU units). The weights' base must be 16-byte aligned (the host checks), so the bytes
// before a step are the row's previous step or the previous row's last (superblock types: the
// CU units tandem_wgmmq_super names, staged where they lie in the superblock). Offsets into the
// q8_1 copy are 32-bit (it is at most MAX_SCRATCH, 1 GiB); missing columns copy zeros.
template <typename T>
struct tandem_wgmmq_copies {
    using L = tandem_wgmmq_layout<T>;
    static_assert(TANDEM_WGMMQ_THREADS == 512 && TANDEM_WGMMQ_BN == 128 && TANDEM_WGMMQ_KG == 4,
                  "two row pieces and one pair per thread");
    // Weight units of a step, and the copies a thread makes of them.
    static constexpr int UNITS_ALL = TANDEM_WGMMQ_BM * L::CU;
    static constexpr int UQ = (UNITS_ALL + TANDEM_WGMMQ_THREADS - 1) / TANDEM_WGMMQ_THREADS;
    static_assert(UQ <= 8, "copy flags in bits 8.. and 16.. of `in`");
    const u8* aq;
    const u8* ads;
    // Step 0 of row 0 (superblocks: its superblock).
    const u8* w;
    u32 q[2];
    u32 d;
    // Bits 0, 1: activation rows; 2: pair; 8 + j: copy j's row is inside m; 16 + j: copy j is its
    // row's last unit (superblocks: a quant unit).
    u32 in;
    // Step 0's phase: where row t / 4's step 0 starts in its staged row (0 or 8), or for
    // superblocks which half of its superblock it is (0 or 1).
    int phase0;
    // Step 0 of the copies is step st0 of k.
    template <typename C>
    __device__ tandem_wgmmq_copies(const char* aq_, const char* ads_, i64 k, i64 st0, const C& cols,
                                   const u8* wrow0, i64 nb01, i64 rows)
        : aq((const u8*)aq_), ads((const u8*)ads_) {
        const int t = threadIdx.x;
        in = 0;
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const i64 c = cols.act(t / 8 + 64 * i);
            q[i] = c >= 0 ? (u32)(c * k + st0 * 128 + 16 * (t % 8)) : 0;
            if (c >= 0) in |= 1u << i;
        }
        const i64 c = cols.act(t / 4);
        d = c >= 0 ? (u32)((c * (k / 32) + st0 * TANDEM_WGMMQ_KG + t % 4) * 8) : 0;
        if (c >= 0) in |= 4u;
        w = wrow0 + (L::SB ? st0 / 2 : st0) * L::RAW_ROW;
#pragma unroll
        for (int j = 0; j < UQ; ++j) {
            const int cu = t + TANDEM_WGMMQ_THREADS * j, r = cu / L::CU, u = cu % L::CU;
            if (cu < UNITS_ALL && r < rows) in |= 1u << (8 + j);
            if (L::SB ? u >= L::HU : u == L::UNITS - 1) in |= 1u << (16 + j);
        }
        phase0 = L::SB ? (int)(st0 & 1) : (int)((u64)(w + (t / 4) * nb01) & 15u);
    }
    // The activation rows of step st into `act`.
    __device__ void acts(u8* act, int st) const {
        const int t = threadIdx.x;
        const u32 at = tandem_smem_addr(act) + tandem_wgmma_at(t / 8, t % 8);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const bool ok = (in >> i) & 1u;
            tandem_cp16s(at + i * 64 * 128, aq + (ok ? q[i] + (u32)st * 128 : 0), ok ? 16 : 0);
        }
    }
    // Where row t / 4's step st starts in its staged row: 0 or 8 (steps are 8-byte aligned;
    // superblocks 0).
    __device__ int lead(int st) const {
        if (L::SB) return 0;
        return L::RAW_ROW % 16 ? phase0 ^ ((st & 1) << 3) : phase0;
    }
    // Superblocks: the first of step st's four groups in its superblock (0 or 4).
    __device__ int group0(int st) const { return L::SB ? 4 * ((phase0 + st) & 1) : 0; }
    // The pairs and raw weight units of step st into `pairs` (tile column-major: pair (c, g) at
    // 8 (KG c + g)) and `raw`; nb01: the weights' row stride.
    __device__ void blocks(u8* pairs, u8* raw, int st, i64 nb01) const {
        const int t = threadIdx.x;
        const bool dok = (in >> 2) & 1u;
        tandem_cp8(pairs + 8 * t, ads + (dok ? d + (u32)st * TANDEM_WGMMQ_KG * 8 : 0), dok ? 8 : 0);
        const u32 dst = tandem_smem_addr(raw) + 16 * t;
        // Superblocks: the quant units of the step's half (64 bytes further on for the second)
        // are staged right after the HU units before the quants.
        const int skip = 16 * group0(st);
        const u8* a = w + (L::SB ? ((phase0 + st) >> 1) * L::RAW_ROW : st * L::RAW_ROW);
        // The types with an offset hold more through the k loop (the tf32 offsets' operands): they
        // read the thread index again where the compiler cannot hoist it, so the copies' row
        // offsets are made afresh each step rather than spilled; the others keep them in
        // registers, which is faster for them (performance.md, sixteenth record).
        int tr = t;
#if defined(TANDEM_NVIDIA)
        if constexpr (T::MIN) asm volatile("mov.u32 %0, %%tid.x;" : "=r"(tr));
#endif
#pragma unroll
        for (int j = 0; j < UQ; ++j) {
            // The last round's copies end at a warp boundary (UNITS_ALL is a multiple of BM).
            if (UNITS_ALL % TANDEM_WGMMQ_THREADS != 0 && t + TANDEM_WGMMQ_THREADS * j >= UNITS_ALL) break;
            const int cu = tr + TANDEM_WGMMQ_THREADS * j, r = cu / L::CU, u = cu % L::CU;
            // 32-bit: the host keeps nb01 under 2^24, so r nb01 < 2^31.
            const u8* p = a + ((u32)r * (u32)nb01 + 16 * u);
            const bool last = (in >> (16 + j)) & 1u;
            const u8* src;
            int n;
            if constexpr (L::SB) {
                src = p + (last ? skip : 0);
                n = 16;
            } else {
                // The row's step starts ld bytes into its first unit.
                const int ld = (int)((u64)p & 15u);
                src = p - ld;
                n = last ? ld + L::TAIL : 16;
            }
            if (!((in >> (8 + j)) & 1u)) n = 0;
            // Copies of no bytes name the activation copy (valid, 16-byte aligned).
            tandem_cp16s(dst + 16 * TANDEM_WGMMQ_THREADS * j, n > 0 ? (const void*)src : (const void*)aq, n);
        }
    }
};

// Thread t: block t % 4 of row t / 4 of the raw step at `raw` (`lead` bytes into its staged row,
// as tandem_wgmmq_copies::lead says; superblocks: group g0 + t % 4 of the staged half), as
// int8 into the swizzled tile (values 0-15 in piece 2 (t % 4), 16-31 in the next) and its d into
// `scales` and its m, if the type has one, as m1 = tf32(m), m2 = m - m1 into `mins` (exact, as m
// has at most 17 significant bits); and pair t of the copied step at `pairs` into `act`.
template <typename T>
TANDEM_DEVICE void tandem_wgmmq_prepare(u8* tile, float* scales, u8* mins, float* act, const u8* raw,
                                         const u8* pairs, int lead, int g0) {
    using L = tandem_wgmmq_layout<T>;
    // The pair first: read after the stores below, it would wait out its latency there.
    const int p = threadIdx.x;
    const float2 ds = ((const float2*)pairs)[p];
    const int r = threadIdx.x / 4, blk = threadIdx.x % 4;
    const int at = blk * 4 * L::SROW + ((r % 8) / 2) * L::SROW + 2 * (r / 8) + r % 2;  // row r = 8 j + 2 q + e
    u32 lo[4], hi[4];
    float d, m;
    if constexpr (L::SB) {
        const u8* b = raw + r * L::WROW;
        const u8* qs = b + 16 * L::HU + 32 * (blk >> 1);
#pragma unroll
        for (int c = 0; c < 4; ++c) T::frag_at(b, qs, g0 + blk, c, lo[c], hi[c], d, m);
    } else if constexpr (tandem_mma_has_words<T>::value) {
        // The whole block from aligned 32-bit loads: about half the shared loads of frag()'s
        // 16-bit pieces (2-byte-aligned blocks; the last of a row ends a word, so no read passes
        // the staged row).
        u32 v[T::WORDS];
        d = tandem_half_words_a2<T::WORDS>(raw + r * L::WROW + lead + blk * T::BYTES, v);
        m = 0.0f;
#pragma unroll
        for (int c = 0; c < 4; ++c) T::frag_w(v, c, lo[c], hi[c]);
    } else {
        const u8* b = raw + r * L::WROW + lead + blk * T::BYTES;
#pragma unroll
        for (int c = 0; c < 4; ++c) T::frag(b, c, lo[c], hi[c], d, m);
    }
    *(uint4*)(tile + tandem_wgmma_at(r, 2 * blk)) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
    *(uint4*)(tile + tandem_wgmma_at(r, 2 * blk + 1)) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
    scales[at] = d;
    if (T::MIN) {
        const float m1 = tandem_tf32(m), m2 = tandem_tf32(m - m1);
        u8* row = mins + 64 * r + 4 * blk;
        const int sw = (r / 2) % 4;
#pragma unroll
        for (int u = 0; u < 4; ++u) *(float*)(row + 16 * (u ^ sw)) = u < 2 ? m1 : m2;
    }
    // Pair p is group p % KG of tile column p / KG, which its arrays hold at KG c + g = p.
    act[p] = ds.x;
    act[L::ACT + p] = tandem_sum_unbias(ds.x);
    if (T::MIN) {
        // s_a as s1 + s2, both tf32: s1 rounded to nearest, s2 the rest rounded again (which may
        // drop s_a's lowest bits: a relative error below 2^-22).
        const float s1 = tandem_tf32(ds.y);
        act[2 * L::ACT + p] = s1;
        act[3 * L::ACT + p] = tandem_tf32(ds.y - s1);
    }
}

// Adds this step's offsets to the accumulators on the tensor cores: for each half, two
// tf32 mma m64n32k8 against the half's 32 rows of `mins` (descriptor dm): k 0..7 of the first
// pairs (s1, s2) of the four groups with m1, the second the same with m2, so the sums are
// (s1 + s2)(m1 + m2) = m s_a up to s2's last bit. a: s1 and s2 of columns a0, a0 + 8 and group
// i % 4 (the A fragment's rows and k). Issued as one commit group.
TANDEM_DEVICE void tandem_wgmmq_mins(float* acc, const u32 (&a)[4], u64 dm) {
    tandem_wgmma_fence();
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        // Half h's rows 32 h ..: 32 rows of 64 bytes further on (units of 16 bytes); its second
        // k8 slice 32 bytes on.
        tandem_wgmma_tf32_32(acc + 16 * h, a, dm + h * (32 * 64 / 16));
        tandem_wgmma_tf32_32(acc + 16 * h, a, dm + h * (32 * 64 / 16) + 2);
    }
    tandem_wgmma_commit();
}

// Issues the mma of group `gi` of a step: this warpgroup's 64 activation columns (descriptor
// da) against 32 weight rows (db), into ia. Group gi starts 32 bytes (2 descriptor address
// units) after group 0.
TANDEM_DEVICE void tandem_wgmmq_issue(int (&ia)[16], u64 da, u64 db, int gi) {
    tandem_wgmma_fence();
    tandem_wgmma_s8_32(ia, da + 2 * gi, db + 2 * gi);
    tandem_wgmma_commit();
}

TANDEM_DEVICE float tandem_wgmmq_pick(const float4& v, int g) {
    return g == 0 ? v.x : (g == 1 ? v.y : (g == 2 ? v.z : v.w));
}

// The weight scales one half of a group needs: d of this thread's 8 rows (row 8 j + 2 q + e of
// the half at 2 j + e).
struct tandem_wgmmq_wscales {
    float4 d[2];
    __device__ tandem_wgmmq_wscales(const float* w) {
#pragma unroll
        for (int k = 0; k < 2; ++k) d[k] = *(const float4*)(w + 4 * k);
    }
};

// Folds one half's finished group sums into its f32 accumulators: accumulator 4 j + e is
// activation column a0 (e < 2) or a1 and weight row 8 j + 2 q + (e & 1) of the half. (dk, nk):
// the group's d_a and n_a of column ak.
TANDEM_DEVICE void tandem_wgmmq_scale(const int (&ia)[16], float* acc, const tandem_wgmmq_wscales& w, float d0,
                                      float n0, float d1, float n1) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const float4& wd = w.d[j / 2];
        const float dw[2] = {j % 2 ? wd.z : wd.x, j % 2 ? wd.w : wd.y};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const float r = __int_as_float(ia[4 * j + e] + TANDEM_SUM_BIAS);
            const float t = e < 2 ? fmaf(d0, r, n0) : fmaf(d1, r, n1);
            acc[4 * j + e] = fmaf(dw[e & 1], t, acc[4 * j + e]);
        }
    }
}

// One 128 x 128 output tile, or its sums over k steps st0 .. st1 only (steps of 128 values):
// weight rows row0 .. row0 + 128 (row r at wb + r * nb01, m rows, k values) against the 128 q8_1
// columns of the map cols() makes (made again for the store rather than kept in registers
// through the k loop); `base`: the 1024-byte aligned dynamic shared memory. With `part` null the
// sums go to the columns' outputs (rows past m and missing columns left out), else all 128 x 128
// to part[c * 128 + r] for tile column c and row r.
template <typename T, typename F>
TANDEM_DEVICE void tandem_wgmmq_tile(u8* base, const u8* wb, i64 nb01, i64 m, i64 k, i64 st0, i64 st1, i64 row0,
                                     const char* aq, const char* ads, const F& cols, float* part) {
    using L = tandem_wgmmq_layout<T>;
    static_assert(TANDEM_WGMMQ_THREADS == 512 && TANDEM_WGMMQ_KG * 32 == 128 && TANDEM_WGMMQ_BN == 128 &&
                      TANDEM_WGMMQ_BM == 128,
                  "four warpgroups of 64 columns x 64 weight rows; 128-byte step rows");
    static_assert(TANDEM_WGMMQ_STAGES >= 3, "steps in flight beside the one in use");
    const tandem_wgmmq_copies<T> cp(aq, ads, k, st0, cols(), wb + row0 * nb01, nb01, m - row0);
    u8* stages = base + L::STAGES_AT;
    const int steps = (int)(st1 - st0);
    // Stage j % STAGES: activation rows, pairs and raw blocks of step j.
    auto act = [&](int j) { return stages + (j % TANDEM_WGMMQ_STAGES) * L::STAGE; };
    auto pairs = [&](int j) { return act(j) + TANDEM_WGMMQ_TILE; };
    auto raw = [&](int j) { return pairs(j) + L::PAIRS; };
    auto tile = [&](int j) { return base + (j & 1) * TANDEM_WGMMQ_TILE; };
    u8* const fixed = base + 2 * TANDEM_WGMMQ_TILE + 2 * L::MINS;
    auto mins = [&](int j) { return base + 2 * TANDEM_WGMMQ_TILE + (j & 1) * L::MINS; };
    auto scales = [&](int j) { return (float*)(fixed + (j & 1) * L::SCALES); };
    auto acts = [&](int j) { return (float*)(fixed + 2 * L::SCALES + (j & 1) * L::ACTS); };
    cp.blocks(pairs(0), raw(0), 0, nb01);
#pragma unroll
    for (int j = 0; j < TANDEM_WGMMQ_STAGES - 1; ++j) {
        if (j < steps) cp.acts(act(j), j);
        if (j + 1 < steps) cp.blocks(pairs(j + 1), raw(j + 1), j + 1, nb01);
        tandem_cp_commit();
    }
    tandem_cp_wait<TANDEM_WGMMQ_STAGES - 2>();
    __syncthreads();
    tandem_wgmmq_prepare<T>(tile(0), scales(0), mins(0), acts(0), raw(0), pairs(0), cp.lead(0), cp.group0(0));
    float acc[32];
    int lo[16], hi[16];
#pragma unroll
    for (int i = 0; i < 32; ++i) acc[i] = 0.0f;
    const int wg = tandem_warpgroup(), i = threadIdx.x % 128;
    const int a0 = 64 * (wg % 2) + 16 * (i / 32) + (i % 32) / 4, q = i % 4;
    for (int st = 0; st < steps; ++st) {
        tandem_cp_wait<TANDEM_WGMMQ_STAGES - 2>();
        tandem_wgmma_proxy_fence();
        // Group st is in for every thread (activation rows of step st; pairs and raw blocks of
        // step st + 1) and so are step st's weight tile and scales; every mma of step st - 1 has
        // finished, so its stage takes the rows of step st + STAGES - 1, this step's stage (whose
        // pairs and raw blocks were prepared during step st - 1) the blocks of step st + STAGES,
        // and step st - 1's tile and scales step st + 1's.
        __syncthreads();
        const u64 da = tandem_wgmma_desc(act(st) + (wg % 2) * 64 * 128);
        const u64 dlo = tandem_wgmma_desc(tile(st) + (wg / 2) * 64 * 128), dhi = dlo + 32 * 128 / 16;
        const float* av = acts(st);
        if constexpr (T::MIN) {
            // The step's offsets first: their commit group is done once the first group's lo mma
            // is (groups finish in order), before any fma below touches the accumulators.
            const u32 sa[4] = {__float_as_uint(av[2 * L::ACT + 4 * a0 + q]),
                               __float_as_uint(av[2 * L::ACT + 4 * (a0 + 8) + q]),
                               __float_as_uint(av[3 * L::ACT + 4 * a0 + q]),
                               __float_as_uint(av[3 * L::ACT + 4 * (a0 + 8) + q])};
            tandem_wgmmq_mins(acc, sa, tandem_wgmma_desc64(mins(st) + (wg / 2) * 64 * 64));
        }
        tandem_wgmmq_issue(lo, da, dlo, 0);
        tandem_wgmmq_issue(hi, da, dhi, 0);
        // This step's activation scales, read before the stores of the next step's preparation
        // (the offsets' sums after them: registers).
        const float4 d0 = *(const float4*)(av + 4 * a0), d1 = *(const float4*)(av + 4 * (a0 + 8));
        const float4 n0 = *(const float4*)(av + L::ACT + 4 * a0), n1 = *(const float4*)(av + L::ACT + 4 * (a0 + 8));
        const int next = st + TANDEM_WGMMQ_STAGES - 1;
        if (next < steps) cp.acts(act(next), next);
        if (next + 1 < steps) cp.blocks(pairs(next + 1), raw(next + 1), next + 1, nb01);
        tandem_cp_commit();
        if (st + 1 < steps)
            tandem_wgmmq_prepare<T>(tile(st + 1), scales(st + 1), mins(st + 1), acts(st + 1), raw(st + 1),
                                    pairs(st + 1), cp.lead(st + 1), cp.group0(st + 1));
        // This thread's rows of the warpgroup's 64 (2 j + e of group g at 16 (wg / 2) + ...).
        const float* sc = scales(st) + q * L::SROW + 16 * (wg / 2);
#pragma unroll
        for (int gi = 0; gi < TANDEM_WGMMQ_KG; ++gi) {
            const float gd0 = tandem_wgmmq_pick(d0, gi), gn0 = tandem_wgmmq_pick(n0, gi);
            const float gd1 = tandem_wgmmq_pick(d1, gi), gn1 = tandem_wgmmq_pick(n1, gi);
            const float* w = sc + 4 * L::SROW * gi;
            // In flight: this group's lo and hi mma. Once lo's is done, fold it and issue its
            // next group's mma; then the same for hi. Each half's weight scales are read before
            // its wait.
            {
                const tandem_wgmmq_wscales ws(w);
                tandem_wgmma_wait<1>();
                tandem_wgmma_hold(lo);
                if (T::MIN && gi == 0) tandem_wgmma_hold(acc);
                tandem_wgmmq_scale(lo, acc, ws, gd0, gn0, gd1, gn1);
                if (gi + 1 < TANDEM_WGMMQ_KG) tandem_wgmmq_issue(lo, da, dlo, gi + 1);
            }
            {
                const tandem_wgmmq_wscales ws(w + 8);
                if (gi + 1 < TANDEM_WGMMQ_KG) {
                    tandem_wgmma_wait<1>();
                } else {
                    tandem_wgmma_wait<0>();
                }
                tandem_wgmma_hold(hi);
                tandem_wgmmq_scale(hi, acc + 16, ws, gd0, gn0, gd1, gn1);
                if (gi + 1 < TANDEM_WGMMQ_KG) tandem_wgmmq_issue(hi, da, dhi, gi + 1);
            }
        }
    }
    tandem_cp_wait<0>();
#if !defined(TANDEM_WGMMA_ENABLED)
    tandem_acc_nan(acc);
#endif
    // Accumulator 16 h + 4 j + e: activation column a0 (+ 8 for e >= 2), weight row
    // 64 (wg / 2) + 32 h + 8 j + 2 q + (e & 1).
    if (part != nullptr) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int r = 64 * (wg / 2) + 32 * h + 8 * j + 2 * q + (e & 1);
                    part[(a0 + 8 * (e / 2)) * TANDEM_WGMMQ_BM + r] = acc[16 * h + 4 * j + e];
                }
            }
        }
        return;
    }
    const auto c = cols();
    char* out[2] = {c.out(a0), c.out(a0 + 8)};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const i64 row = row0 + 64 * (wg / 2) + 32 * h + 8 * j + 2 * q + (e & 1);
                char* o = out[e / 2];
                if (row < m && o != nullptr) *(float*)(o + row * 4) = acc[16 * h + 4 * j + e];
            }
        }
    }
}

// MUL_MAT, 32-value blocks, Hopper: blocks over tiles (and the last wave's parts) as
// tandem_mm_split says.
template <typename T>
TANDEM_DEVICE void tandem_wgmmq_quant(const char* w, const char* aq, const char* ads, char* dst,
                                      const tandem_mm_shape& s, const tandem_mm_split& sp) {
    extern __shared__ __align__(1024) u8 tandem_wgmma_smem[];
    const tandem_mm_split_tile at = tandem_mm_split_at(sp, blockIdx.x);
    const i64 b = at.b;
    if (b >= s.ne12 * s.ne13) return;
    const u8* wb = (const u8*)w + ((b % s.ne12) / s.r2) * s.nb02 + ((b / s.ne12) / s.r3) * s.nb03;
    auto cols = [&] { return tandem_mma_dense(dst, b, s, at.x * TANDEM_WGMMQ_BN); };
    const i64 steps = s.k / 128, parts = (i64)blockIdx.x >= sp.whole ? sp.parts : 1;
    float* part = tandem_mm_split_part(sp, blockIdx.x, TANDEM_WGMMQ_BM * TANDEM_WGMMQ_BN);
    tandem_wgmmq_tile<T>(tandem_wgmma_base(tandem_wgmma_smem), wb, s.nb01, s.m, s.k, steps * at.part / parts,
                         steps * (at.part + 1) / parts, at.y * TANDEM_WGMMQ_BM, aq, ads, cols, part);
}

// Adds parts 1 .. of the split tiles (see tandem_mm_split) to dst, in part order, for tiles of
// bm rows x bn columns: block (i, g) takes columns TANDEM_SPLIT_SUM_COLS g .. of split tile i,
// thread r their row r (all its loads issued before the first add).
#define TANDEM_SPLIT_SUM_THREADS 128
#define TANDEM_SPLIT_SUM_COLS 8
extern "C" __global__ void __launch_bounds__(TANDEM_SPLIT_SUM_THREADS)
tandem_mm_split_sum(char* dst, tandem_mm_shape s, tandem_mm_split sp, i64 bm, i64 bn) {
    const i64 i = blockIdx.x, c0 = (i64)blockIdx.y * TANDEM_SPLIT_SUM_COLS, rest = sp.tiles - sp.whole;
    if (i >= rest || c0 >= bn) return;
    const tandem_mm_split_tile at = tandem_mm_split_at(sp, sp.whole + i);
    const tandem_mma_dense_cols cols = tandem_mma_dense(dst, at.b, s, at.x * bn);
    for (i64 r = threadIdx.x; r < bm; r += blockDim.x) {
        const i64 row = at.y * bm + r;
        if (row >= s.m) return;
        float* o[TANDEM_SPLIT_SUM_COLS];
        float v[TANDEM_SPLIT_SUM_COLS];
#pragma unroll
        for (int e = 0; e < TANDEM_SPLIT_SUM_COLS; ++e) {
            char* base = c0 + e < bn ? cols.out((int)(c0 + e)) : nullptr;
            o[e] = base != nullptr ? (float*)(base + row * 4) : nullptr;
            v[e] = o[e] != nullptr ? *o[e] : 0.0f;
        }
        for (i64 p = 1; p < sp.parts; ++p) {
            const float* part = sp.partial + ((p - 1) * rest + i) * bm * bn + c0 * bm + r;
            float add[TANDEM_SPLIT_SUM_COLS];
#pragma unroll
            for (int e = 0; e < TANDEM_SPLIT_SUM_COLS; ++e) add[e] = o[e] != nullptr ? part[e * bm] : 0.0f;
#pragma unroll
            for (int e = 0; e < TANDEM_SPLIT_SUM_COLS; ++e) v[e] += add[e];
        }
#pragma unroll
        for (int e = 0; e < TANDEM_SPLIT_SUM_COLS; ++e) {
            if (o[e] != nullptr) *o[e] = v[e];
        }
    }
}

#define TANDEM_MMA_KERNEL extern "C" __global__ void __launch_bounds__(TANDEM_MMA_THREADS, 2)
#define TANDEM_MMQ_KERNEL extern "C" __global__ void __launch_bounds__(TANDEM_MMQ_THREADS, 4)
// The superblock types' tiles: three blocks fill an SM's shared memory (61-74 KiB each), so the
// registers of a fourth would go unused.
#define TANDEM_MMQ_SB_KERNEL extern "C" __global__ void __launch_bounds__(TANDEM_MMQ_THREADS, 3)
#define TANDEM_MMA_ARGS_Q const char *w, const char *aq, const char *ads, char *dst, tandem_mm_shape s
#define TANDEM_MMID_ARGS const char *w, const char *aq, const char *ads, const i32 *counts, const i32 *lists, \
                         char *dst, tandem_mmid_shape s

#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q4_0
TANDEM_MMQ_KERNEL tandem_mma_q4_0(TANDEM_MMA_ARGS_Q) {
    tandem_mmq_quant<tandem_mmq_step<tandem_mmv_blocks<tandem_mmf_q4_0>, 4>>(w, aq, ads, dst, s);
}
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q4_1
TANDEM_MMQ_KERNEL tandem_mma_q4_1(TANDEM_MMA_ARGS_Q) {
    tandem_mmq_quant<tandem_mmq_step<tandem_mmv_blocks<tandem_mmf_q4_1>, 4>>(w, aq, ads, dst, s);
}
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q5_0
TANDEM_MMQ_KERNEL tandem_mma_q5_0(TANDEM_MMA_ARGS_Q) {
    tandem_mmq_quant<tandem_mmq_step<tandem_mmv_blocks<tandem_mmf_q5_0>, 4>>(w, aq, ads, dst, s);
}
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q5_1
TANDEM_MMQ_KERNEL tandem_mma_q5_1(TANDEM_MMA_ARGS_Q) {
    tandem_mmq_quant<tandem_mmq_step<tandem_mmv_blocks<tandem_mmf_q5_1>, 4>>(w, aq, ads, dst, s);
}
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q8_0
TANDEM_MMQ_KERNEL tandem_mma_q8_0(TANDEM_MMA_ARGS_Q) {
    tandem_mmq_quant<tandem_mmq_step<tandem_mmv_blocks<tandem_mmf_q8_0>, 4>>(w, aq, ads, dst, s);
}
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_IQ4_NL
TANDEM_MMQ_KERNEL tandem_mma_iq4_nl(TANDEM_MMA_ARGS_Q) {
    tandem_mmq_quant<tandem_mmq_step<tandem_mmv_blocks<tandem_mmf_iq4_nl>, 4>>(w, aq, ads, dst, s);
}
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q4_K
TANDEM_MMQ_SB_KERNEL tandem_mma_q4_K(TANDEM_MMA_ARGS_Q) {
    tandem_mmq_quant<tandem_mmq_step<tandem_mmvw_q4_K, 8>>(w, aq, ads, dst, s);
}
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q5_K
TANDEM_MMQ_SB_KERNEL tandem_mma_q5_K(TANDEM_MMA_ARGS_Q) {
    tandem_mmq_quant<tandem_mmq_step<tandem_mmvw_q5_K, 8>>(w, aq, ads, dst, s);
}
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q2_K
TANDEM_MMQ_SB_KERNEL tandem_mma_q2_K(TANDEM_MMA_ARGS_Q) {
    tandem_mmq_quant<tandem_mmq_step<tandem_mmvw_q2_K, 8>>(w, aq, ads, dst, s);
}
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q3_K
TANDEM_MMQ_SB_KERNEL tandem_mma_q3_K(TANDEM_MMA_ARGS_Q) {
    tandem_mmq_quant<tandem_mmq_step<tandem_mmvw_q3_K, 8>>(w, aq, ads, dst, s);
}
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q6_K
TANDEM_MMQ_SB_KERNEL tandem_mma_q6_K(TANDEM_MMA_ARGS_Q) {
    tandem_mmq_quant<tandem_mmq_step<tandem_mmvw_q6_K, 8>>(w, aq, ads, dst, s);
}
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q4_0
TANDEM_MMQ_KERNEL tandem_mmid_mma_q4_0(TANDEM_MMID_ARGS) {
    tandem_mmid_mmq<tandem_mmq_step<tandem_mmv_blocks<tandem_mmf_q4_0>, 4>>(w, aq, ads, counts, lists, dst, s);
}
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q4_1
TANDEM_MMQ_KERNEL tandem_mmid_mma_q4_1(TANDEM_MMID_ARGS) {
    tandem_mmid_mmq<tandem_mmq_step<tandem_mmv_blocks<tandem_mmf_q4_1>, 4>>(w, aq, ads, counts, lists, dst, s);
}
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q5_0
TANDEM_MMQ_KERNEL tandem_mmid_mma_q5_0(TANDEM_MMID_ARGS) {
    tandem_mmid_mmq<tandem_mmq_step<tandem_mmv_blocks<tandem_mmf_q5_0>, 4>>(w, aq, ads, counts, lists, dst, s);
}
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q5_1
TANDEM_MMQ_KERNEL tandem_mmid_mma_q5_1(TANDEM_MMID_ARGS) {
    tandem_mmid_mmq<tandem_mmq_step<tandem_mmv_blocks<tandem_mmf_q5_1>, 4>>(w, aq, ads, counts, lists, dst, s);
}
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q8_0
TANDEM_MMQ_KERNEL tandem_mmid_mma_q8_0(TANDEM_MMID_ARGS) {
    tandem_mmid_mmq<tandem_mmq_step<tandem_mmv_blocks<tandem_mmf_q8_0>, 4>>(w, aq, ads, counts, lists, dst, s);
}
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_IQ4_NL
TANDEM_MMQ_KERNEL tandem_mmid_mma_iq4_nl(TANDEM_MMID_ARGS) {
    tandem_mmid_mmq<tandem_mmq_step<tandem_mmv_blocks<tandem_mmf_iq4_nl>, 4>>(w, aq, ads, counts, lists, dst, s);
}
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q4_K
TANDEM_MMQ_SB_KERNEL tandem_mmid_mma_q4_K(TANDEM_MMID_ARGS) {
    tandem_mmid_mmq<tandem_mmq_step<tandem_mmvw_q4_K, 8>>(w, aq, ads, counts, lists, dst, s);
}
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q5_K
TANDEM_MMQ_SB_KERNEL tandem_mmid_mma_q5_K(TANDEM_MMID_ARGS) {
    tandem_mmid_mmq<tandem_mmq_step<tandem_mmvw_q5_K, 8>>(w, aq, ads, counts, lists, dst, s);
}
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q2_K
TANDEM_MMQ_SB_KERNEL tandem_mmid_mma_q2_K(TANDEM_MMID_ARGS) {
    tandem_mmid_mmq<tandem_mmq_step<tandem_mmvw_q2_K, 8>>(w, aq, ads, counts, lists, dst, s);
}
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q3_K
TANDEM_MMQ_SB_KERNEL tandem_mmid_mma_q3_K(TANDEM_MMID_ARGS) {
    tandem_mmid_mmq<tandem_mmq_step<tandem_mmvw_q3_K, 8>>(w, aq, ads, counts, lists, dst, s);
}
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q6_K
TANDEM_MMQ_SB_KERNEL tandem_mmid_mma_q6_K(TANDEM_MMID_ARGS) {
    tandem_mmid_mmq<tandem_mmq_step<tandem_mmvw_q6_K, 8>>(w, aq, ads, counts, lists, dst, s);
}
#endif
// The WMMA tiles (AMD gfx11 / gfx12), and in layout 9 the CDNA tiles (gfx908 .. gfx950); both
// emulated on NVIDIA: only in the "wmma" family's build.
#if defined(TANDEM_WMMA_ENTRIES)
#define TANDEM_WMMA_ARGS TANDEM_MMA_ARGS_Q, int lay
#define TANDEM_MMID_WMMA_ARGS TANDEM_MMID_ARGS, int lay
#if defined(TANDEM_CDNA_NATIVE)
// A CDNA compute unit's 64 KiB of LDS hold one block of the f16 tiles (45 KiB) and at most two of
// the integer ones (32-64 KiB): at most one wave per SIMD, so each may take its registers.
#define TANDEM_WMMA_F16_KERNEL extern "C" __global__ void __launch_bounds__(TANDEM_MMA_THREADS, 1)
#define TANDEM_WMMA_Q_KERNEL extern "C" __global__ void __launch_bounds__(TANDEM_MMQ_THREADS, 1)
#define TANDEM_WMMA_SB_KERNEL TANDEM_WMMA_Q_KERNEL
#else
#define TANDEM_WMMA_F16_KERNEL TANDEM_MMA_KERNEL
#define TANDEM_WMMA_Q_KERNEL TANDEM_MMQ_KERNEL
#define TANDEM_WMMA_SB_KERNEL TANDEM_MMQ_SB_KERNEL
#endif
TANDEM_WMMA_F16_KERNEL tandem_wmma_f16(const char* w, const u16* xh, char* dst, tandem_mm_shape s, int lay) {
    tandem_mma_f16_tile<true>(w, xh, dst, s, lay);
}
TANDEM_WMMA_Q_KERNEL tandem_wmma_q4_0(TANDEM_WMMA_ARGS) {
    tandem_mmq_quant<tandem_mmq_step<tandem_mmv_blocks<tandem_mmf_q4_0>, 4>, true>(w, aq, ads, dst, s, lay);
}
TANDEM_WMMA_Q_KERNEL tandem_wmma_q4_1(TANDEM_WMMA_ARGS) {
    tandem_mmq_quant<tandem_mmq_step<tandem_mmv_blocks<tandem_mmf_q4_1>, 4>, true>(w, aq, ads, dst, s, lay);
}
TANDEM_WMMA_Q_KERNEL tandem_wmma_q5_0(TANDEM_WMMA_ARGS) {
    tandem_mmq_quant<tandem_mmq_step<tandem_mmv_blocks<tandem_mmf_q5_0>, 4>, true>(w, aq, ads, dst, s, lay);
}
TANDEM_WMMA_Q_KERNEL tandem_wmma_q5_1(TANDEM_WMMA_ARGS) {
    tandem_mmq_quant<tandem_mmq_step<tandem_mmv_blocks<tandem_mmf_q5_1>, 4>, true>(w, aq, ads, dst, s, lay);
}
TANDEM_WMMA_Q_KERNEL tandem_wmma_q8_0(TANDEM_WMMA_ARGS) {
    tandem_mmq_quant<tandem_mmq_step<tandem_mmv_blocks<tandem_mmf_q8_0>, 4>, true>(w, aq, ads, dst, s, lay);
}
TANDEM_WMMA_Q_KERNEL tandem_wmma_iq4_nl(TANDEM_WMMA_ARGS) {
    tandem_mmq_quant<tandem_mmq_step<tandem_mmv_blocks<tandem_mmf_iq4_nl>, 4>, true>(w, aq, ads, dst, s, lay);
}
TANDEM_WMMA_SB_KERNEL tandem_wmma_q4_K(TANDEM_WMMA_ARGS) {
    tandem_mmq_quant<tandem_mmq_step<tandem_mmvw_q4_K, 8>, true>(w, aq, ads, dst, s, lay);
}
TANDEM_WMMA_SB_KERNEL tandem_wmma_q5_K(TANDEM_WMMA_ARGS) {
    tandem_mmq_quant<tandem_mmq_step<tandem_mmvw_q5_K, 8>, true>(w, aq, ads, dst, s, lay);
}
TANDEM_WMMA_SB_KERNEL tandem_wmma_q2_K(TANDEM_WMMA_ARGS) {
    tandem_mmq_quant<tandem_mmq_step<tandem_mmvw_q2_K, 8>, true>(w, aq, ads, dst, s, lay);
}
TANDEM_WMMA_SB_KERNEL tandem_wmma_q3_K(TANDEM_WMMA_ARGS) {
    tandem_mmq_quant<tandem_mmq_step<tandem_mmvw_q3_K, 8>, true>(w, aq, ads, dst, s, lay);
}
TANDEM_WMMA_SB_KERNEL tandem_wmma_q6_K(TANDEM_WMMA_ARGS) {
    tandem_mmq_quant<tandem_mmq_step<tandem_mmvw_q6_K, 8>, true>(w, aq, ads, dst, s, lay);
}
TANDEM_WMMA_Q_KERNEL tandem_mmid_wmma_q4_0(TANDEM_MMID_WMMA_ARGS) {
    tandem_mmid_mmq<tandem_mmq_step<tandem_mmv_blocks<tandem_mmf_q4_0>, 4>, true>(w, aq, ads, counts, lists, dst, s, lay);
}
TANDEM_WMMA_Q_KERNEL tandem_mmid_wmma_q4_1(TANDEM_MMID_WMMA_ARGS) {
    tandem_mmid_mmq<tandem_mmq_step<tandem_mmv_blocks<tandem_mmf_q4_1>, 4>, true>(w, aq, ads, counts, lists, dst, s, lay);
}
TANDEM_WMMA_Q_KERNEL tandem_mmid_wmma_q5_0(TANDEM_MMID_WMMA_ARGS) {
    tandem_mmid_mmq<tandem_mmq_step<tandem_mmv_blocks<tandem_mmf_q5_0>, 4>, true>(w, aq, ads, counts, lists, dst, s, lay);
}
TANDEM_WMMA_Q_KERNEL tandem_mmid_wmma_q5_1(TANDEM_MMID_WMMA_ARGS) {
    tandem_mmid_mmq<tandem_mmq_step<tandem_mmv_blocks<tandem_mmf_q5_1>, 4>, true>(w, aq, ads, counts, lists, dst, s, lay);
}
TANDEM_WMMA_Q_KERNEL tandem_mmid_wmma_q8_0(TANDEM_MMID_WMMA_ARGS) {
    tandem_mmid_mmq<tandem_mmq_step<tandem_mmv_blocks<tandem_mmf_q8_0>, 4>, true>(w, aq, ads, counts, lists, dst, s, lay);
}
TANDEM_WMMA_Q_KERNEL tandem_mmid_wmma_iq4_nl(TANDEM_MMID_WMMA_ARGS) {
    tandem_mmid_mmq<tandem_mmq_step<tandem_mmv_blocks<tandem_mmf_iq4_nl>, 4>, true>(w, aq, ads, counts, lists, dst, s, lay);
}
TANDEM_WMMA_SB_KERNEL tandem_mmid_wmma_q4_K(TANDEM_MMID_WMMA_ARGS) {
    tandem_mmid_mmq<tandem_mmq_step<tandem_mmvw_q4_K, 8>, true>(w, aq, ads, counts, lists, dst, s, lay);
}
TANDEM_WMMA_SB_KERNEL tandem_mmid_wmma_q5_K(TANDEM_MMID_WMMA_ARGS) {
    tandem_mmid_mmq<tandem_mmq_step<tandem_mmvw_q5_K, 8>, true>(w, aq, ads, counts, lists, dst, s, lay);
}
TANDEM_WMMA_SB_KERNEL tandem_mmid_wmma_q2_K(TANDEM_MMID_WMMA_ARGS) {
    tandem_mmid_mmq<tandem_mmq_step<tandem_mmvw_q2_K, 8>, true>(w, aq, ads, counts, lists, dst, s, lay);
}
TANDEM_WMMA_SB_KERNEL tandem_mmid_wmma_q3_K(TANDEM_MMID_WMMA_ARGS) {
    tandem_mmid_mmq<tandem_mmq_step<tandem_mmvw_q3_K, 8>, true>(w, aq, ads, counts, lists, dst, s, lay);
}
TANDEM_WMMA_SB_KERNEL tandem_mmid_wmma_q6_K(TANDEM_MMID_WMMA_ARGS) {
    tandem_mmid_mmq<tandem_mmq_step<tandem_mmvw_q6_K, 8>, true>(w, aq, ads, counts, lists, dst, s, lay);
}
#endif
#define TANDEM_MMV_KERNEL extern "C" __global__ void __launch_bounds__(TANDEM_MMV_THREADS)
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q4_0
TANDEM_MMV_KERNEL tandem_mmv_q4_0(TANDEM_MMA_ARGS_Q) { tandem_mmv_quant<tandem_mmvw_q4_0>(w, aq, ads, dst, s); }
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q4_1
TANDEM_MMV_KERNEL tandem_mmv_q4_1(TANDEM_MMA_ARGS_Q) { tandem_mmv_quant<tandem_mmv_blocks<tandem_mmf_q4_1>>(w, aq, ads, dst, s); }
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q5_0
TANDEM_MMV_KERNEL tandem_mmv_q5_0(TANDEM_MMA_ARGS_Q) { tandem_mmv_quant<tandem_mmvw_q5_0>(w, aq, ads, dst, s); }
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q5_1
TANDEM_MMV_KERNEL tandem_mmv_q5_1(TANDEM_MMA_ARGS_Q) { tandem_mmv_quant<tandem_mmv_blocks<tandem_mmf_q5_1>>(w, aq, ads, dst, s); }
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q8_0
TANDEM_MMV_KERNEL tandem_mmv_q8_0(TANDEM_MMA_ARGS_Q) { tandem_mmv_quant<tandem_mmvw_q8_0>(w, aq, ads, dst, s); }
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_IQ4_NL
TANDEM_MMV_KERNEL tandem_mmv_iq4_nl(TANDEM_MMA_ARGS_Q) {
    tandem_mmv_quant<tandem_mmv_blocks<tandem_mmf_iq4_nl>>(w, aq, ads, dst, s);
}
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q4_K
TANDEM_MMV_KERNEL tandem_mmv_q4_K(TANDEM_MMA_ARGS_Q) { tandem_mmv_quant<tandem_mmvw_q4_K>(w, aq, ads, dst, s); }
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q5_K
TANDEM_MMV_KERNEL tandem_mmv_q5_K(TANDEM_MMA_ARGS_Q) { tandem_mmv_quant<tandem_mmvw_q5_K>(w, aq, ads, dst, s); }
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q2_K
TANDEM_MMV_KERNEL tandem_mmv_q2_K(TANDEM_MMA_ARGS_Q) { tandem_mmv_quant<tandem_mmvw_q2_K>(w, aq, ads, dst, s); }
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q3_K
TANDEM_MMV_KERNEL tandem_mmv_q3_K(TANDEM_MMA_ARGS_Q) { tandem_mmv_quant<tandem_mmvw_q3_K>(w, aq, ads, dst, s); }
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q6_K
TANDEM_MMV_KERNEL tandem_mmv_q6_K(TANDEM_MMA_ARGS_Q) { tandem_mmv_quant<tandem_mmvw_q6_K>(w, aq, ads, dst, s); }
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_F16
TANDEM_MMA_KERNEL tandem_mma_f16(const char* w, const u16* xh, char* dst, tandem_mm_shape s) {
    tandem_mma_f16_tile(w, xh, dst, s);
}
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_BF16
TANDEM_MMA_KERNEL tandem_mma_bf16(const char* w, const u16* xh, char* dst, tandem_mm_shape s) {
    tandem_mma_f16_tile<false, true>(w, xh, dst, s);
}
#endif

#define TANDEM_WGMMA_KERNEL extern "C" __global__ void __launch_bounds__(TANDEM_WGMMA_THREADS, 1)
#define TANDEM_WGMMA_ARGS const char *w, const u16 *xh, char *dst, tandem_mm_shape s
// The block types: their activations' column scales (tandem_mma_f16_q8_copy) after the copy.
#define TANDEM_WGMMA_QARGS const char *w, const u16 *xh, const float *cs, char *dst, tandem_mm_shape s, tandem_mm_split sp
#define TANDEM_WGMMQ_KERNEL extern "C" __global__ void __launch_bounds__(TANDEM_WGMMQ_THREADS, 1)
#define TANDEM_WGMMQ_ARGS TANDEM_MMA_ARGS_Q, tandem_mm_split sp
#if TANDEM_UNIT_ALL || TANDEM_UNIT_F16
TANDEM_WGMMA_KERNEL tandem_wgmma_f16(TANDEM_WGMMA_ARGS, tandem_mm_split sp) { tandem_wgmma_f16_tile(w, xh, dst, s, sp); }
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_BF16
TANDEM_WGMMA_KERNEL tandem_wgmma_bf16(TANDEM_WGMMA_ARGS, tandem_mm_split sp) {
    tandem_wgmma_f16_tile<true>(w, xh, dst, s, sp);
}
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q4_0
TANDEM_WGMMA_KERNEL tandem_wgmma_q4_0(TANDEM_WGMMA_QARGS) { tandem_wgmma_quant_tile<tandem_mmf_q4_0>(w, xh, cs, dst, s, sp); }
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q4_1
TANDEM_WGMMA_KERNEL tandem_wgmma_q4_1(TANDEM_WGMMA_QARGS) { tandem_wgmma_quant_tile<tandem_mmf_q4_1>(w, xh, cs, dst, s, sp); }
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q5_0
TANDEM_WGMMA_KERNEL tandem_wgmma_q5_0(TANDEM_WGMMA_QARGS) { tandem_wgmma_quant_tile<tandem_mmf_q5_0>(w, xh, cs, dst, s, sp); }
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q5_1
TANDEM_WGMMA_KERNEL tandem_wgmma_q5_1(TANDEM_WGMMA_QARGS) { tandem_wgmma_quant_tile<tandem_mmf_q5_1>(w, xh, cs, dst, s, sp); }
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q8_0
TANDEM_WGMMA_KERNEL tandem_wgmma_q8_0(TANDEM_WGMMA_QARGS) { tandem_wgmma_quant_tile<tandem_mmf_q8_0>(w, xh, cs, dst, s, sp); }
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_IQ4_NL
TANDEM_WGMMA_KERNEL tandem_wgmma_iq4_nl(TANDEM_WGMMA_QARGS) {
    tandem_wgmma_quant_tile<tandem_mmf_iq4_nl>(w, xh, cs, dst, s, sp);
}
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q4_0
TANDEM_WGMMQ_KERNEL tandem_wgmmq_q4_0(TANDEM_WGMMQ_ARGS) { tandem_wgmmq_quant<tandem_mmf_q4_0>(w, aq, ads, dst, s, sp); }
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q4_1
TANDEM_WGMMQ_KERNEL tandem_wgmmq_q4_1(TANDEM_WGMMQ_ARGS) { tandem_wgmmq_quant<tandem_mmf_q4_1>(w, aq, ads, dst, s, sp); }
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q5_0
TANDEM_WGMMQ_KERNEL tandem_wgmmq_q5_0(TANDEM_WGMMQ_ARGS) { tandem_wgmmq_quant<tandem_mmf_q5_0>(w, aq, ads, dst, s, sp); }
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q5_1
TANDEM_WGMMQ_KERNEL tandem_wgmmq_q5_1(TANDEM_WGMMQ_ARGS) { tandem_wgmmq_quant<tandem_mmf_q5_1>(w, aq, ads, dst, s, sp); }
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q8_0
TANDEM_WGMMQ_KERNEL tandem_wgmmq_q8_0(TANDEM_WGMMQ_ARGS) { tandem_wgmmq_quant<tandem_mmf_q8_0>(w, aq, ads, dst, s, sp); }
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_IQ4_NL
TANDEM_WGMMQ_KERNEL tandem_wgmmq_iq4_nl(TANDEM_WGMMQ_ARGS) {
    tandem_wgmmq_quant<tandem_mmf_iq4_nl>(w, aq, ads, dst, s, sp);
}
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q4_K
TANDEM_WGMMQ_KERNEL tandem_wgmmq_q4_K(TANDEM_WGMMQ_ARGS) {
    tandem_wgmmq_quant<tandem_wgmmq_super<tandem_mmvw_q4_K>>(w, aq, ads, dst, s, sp);
}
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q5_K
TANDEM_WGMMQ_KERNEL tandem_wgmmq_q5_K(TANDEM_WGMMQ_ARGS) {
    tandem_wgmmq_quant<tandem_wgmmq_super<tandem_mmvw_q5_K>>(w, aq, ads, dst, s, sp);
}
#endif

// src1 (f32, [k, ne1, ne2, ne3] with byte strides, as tandem_q8_shape in gemv.hip) rounded to
// f16 into xh, contiguous: column c = i1 + ne1 * (i2 + ne2 * i3) at xh + c * k. Each thread
// converts TANDEM_MMA_COPY_VALUES (4) consecutive values of a column, with one 16-byte load
// where the column is contiguous and aligned. Grid: x over k in 1024s, y over columns (looping
// past 65535).
#define TANDEM_MMA_COPY_VALUES 4
struct tandem_mma_src_shape {
    i64 k, ne1, ne2, ne3;
    i64 nb0, nb1, nb2, nb3;
};
// Column c of src: c = i1 + ne1 * (i2 + ne2 * i3).
TANDEM_DEVICE const char* tandem_mma_src_column(const char* src, i64 c, const tandem_mma_src_shape& s) {
    const i64 i1 = c % s.ne1, i2 = (c / s.ne1) % s.ne2, i3 = c / (s.ne1 * s.ne2);
    return src + i1 * s.nb1 + i2 * s.nb2 + i3 * s.nb3;
}
// One activation value as f16 (BF: bf16, rounded to nearest even as ggml's CPU rounds the
// activations of its bf16 dot).
template <bool BF = false>
TANDEM_DEVICE u16 tandem_mma_half_of(float v) {
    return BF ? tandem_f32_to_bf16(v) : tandem_f32_to_f16(v);
}
template <bool BF = false>
TANDEM_DEVICE void tandem_mma_f16_copy_block(const char* src, u16* xh, tandem_mma_src_shape s) {
    const i64 i = TANDEM_MMA_COPY_VALUES * ((i64)blockIdx.x * blockDim.x + threadIdx.x);
    if (i >= s.k) return;
    const i64 cols = s.ne1 * s.ne2 * s.ne3;
    for (i64 c = blockIdx.y; c < cols; c += gridDim.y) {
        const char* col = tandem_mma_src_column(src, c, s) + i * s.nb0;
        u16* out = xh + c * s.k + i;
        if (i + 4 <= s.k && s.nb0 == 4 && (((u64)col & 15) | ((u64)out & 7)) == 0) {
            const float4 v = *(const float4*)col;
            *(uint2*)out = make_uint2((u32)tandem_mma_half_of<BF>(v.x) | ((u32)tandem_mma_half_of<BF>(v.y) << 16),
                                      (u32)tandem_mma_half_of<BF>(v.z) | ((u32)tandem_mma_half_of<BF>(v.w) << 16));
        } else {
            for (int e = 0; e < 4 && i + e < s.k; ++e) {
                out[e] = tandem_mma_half_of<BF>(*(const float*)(col + e * s.nb0));
            }
        }
    }
}
#if TANDEM_UNIT_ALL || TANDEM_UNIT_COMMON
extern "C" __global__ void __launch_bounds__(256)
tandem_mma_f16_copy(const char* src, u16* xh, tandem_mma_src_shape s) {
    tandem_mma_f16_copy_block(src, xh, s);
}
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_COMMON
extern "C" __global__ void __launch_bounds__(256)
tandem_mma_bf16_copy(const char* src, u16* xh, tandem_mma_src_shape s) {
    tandem_mma_f16_copy_block<true>(src, xh, s);
}
#endif
#if defined(TANDEM_WMMA_ENTRIES)
// The same for the "wmma" family's f16 tiles.
extern "C" __global__ void __launch_bounds__(256)
tandem_wmma_f16_copy(const char* src, u16* xh, tandem_mma_src_shape s) {
    tandem_mma_f16_copy_block(src, xh, s);
}
#endif

// The q8-rounded f16 copy the block types' Hopper GEMM reads: each 32 values of a column rounded
// as the CPU's q8_0 activation copy rounds them (q * f16(d), exactly as tandem_q8_round_f32 in
// gemv.hip), then times the column's scale and stored as f16. The scale is 1 unless the column's
// largest magnitude passes 2^15; then it is the power of two that brings that into [2^14, 2^15),
// so no value overflows f16 (the CPU's q8 values reach 127 * 65504), and each value is its f16
// rounding times that power (below f16's normal range it loses bits). cs[c] receives the scale's
// inverse, which the GEMM multiplies column c's sums by (exactly: a power of two). One block of
// 256 threads per column (grid.y, striding), each thread four values of every 1024: the first
// TANDEM_F16Q8_HELD chunks of 1024 are read once and held in registers for the second pass (the
// column's largest magnitude first, then the values), the rest (k past 16384) read again. Eight
// threads share a group; threads past k take part in the group maximum with zeros.
#define TANDEM_F16Q8_HELD 16
TANDEM_DEVICE void tandem_f16q8_load(const char* col, i64 i, const tandem_mma_src_shape& s, float (&x)[4]) {
    if (s.nb0 == 4 && i + 4 <= s.k && ((u64)(col + i * 4) & 15) == 0) {
        const float4 v = *(const float4*)(col + i * 4);
        x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
        return;
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) x[e] = i + e < s.k ? *(const float*)(col + (i + e) * s.nb0) : 0.0f;
}
// Rounds four values (at i of column c, eight threads to a group) and stores them in xh.
TANDEM_DEVICE void tandem_f16q8_store(const float (&x)[4], u16* xh, i64 c, i64 i, const tandem_mma_src_shape& s,
                                      float scale) {
    float gmax = 0.0f;
#pragma unroll
    for (int e = 0; e < 4; ++e) gmax = fmaxf(gmax, fabsf(x[e]));
    for (int o = 4; o > 0; o >>= 1) gmax = fmaxf(gmax, __shfl_xor(gmax, o));
    const float d = gmax / 127.0f;
    const float id = tandem_inverse_or_zero(d);
    const float dh = tandem_f16_to_f32(tandem_f32_to_f16(d)) * scale;
    u16 h[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) h[e] = tandem_f32_to_f16((float)(int)roundf(x[e] * id) * dh);
    u16* out = xh + c * s.k + i;
    if (i + 4 <= s.k && ((u64)out & 7) == 0) {
        *(uint2*)out = make_uint2((u32)h[0] | ((u32)h[1] << 16), (u32)h[2] | ((u32)h[3] << 16));
    } else {
        for (int e = 0; e < 4 && i + e < s.k; ++e) out[e] = h[e];
    }
}
#if TANDEM_UNIT_ALL || TANDEM_UNIT_COMMON
extern "C" __global__ void __launch_bounds__(256)
tandem_mma_f16_q8_copy(const char* src, u16* xh, float* cs, tandem_mma_src_shape s) {
    __shared__ float most[256 / 32];
    const i64 cols = s.ne1 * s.ne2 * s.ne3;
    const int t = threadIdx.x;
    for (i64 c = blockIdx.y; c < cols; c += gridDim.y) {
        const char* col = tandem_mma_src_column(src, c, s);
        float x[TANDEM_F16Q8_HELD][4];
        float amax = 0.0f;
#pragma unroll
        for (int j = 0; j < TANDEM_F16Q8_HELD; ++j) {
            const i64 i = 1024 * j + 4 * t;
            if (1024 * j < s.k) tandem_f16q8_load(col, i, s, x[j]);
#pragma unroll
            for (int e = 0; e < 4; ++e) amax = 1024 * j < s.k ? fmaxf(amax, fabsf(x[j][e])) : amax;
        }
        for (i64 base = 1024 * TANDEM_F16Q8_HELD; base < s.k; base += 1024) {
            float y[4];
            tandem_f16q8_load(col, base + 4 * t, s, y);
#pragma unroll
            for (int e = 0; e < 4; ++e) amax = fmaxf(amax, fabsf(y[e]));
        }
        for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor(amax, o));
        if (t % 32 == 0) most[t / 32] = amax;
        __syncthreads();
#pragma unroll
        for (int w = 0; w < 256 / 32; ++w) amax = fmaxf(amax, most[w]);
        // Every thread has read `most` before the next column writes it.
        __syncthreads();
        float scale = 1.0f, inverse = 1.0f;
        if (amax > 32768.0f && amax <= 3.4028235e38f) {
            // amax in [2^e, 2^(e + 1)), e >= 15: scale 2^(14 - e).
            const int e = ((__float_as_int(amax) >> 23) & 0xff) - 127;
            scale = __int_as_float((127 + 14 - e) << 23);
            inverse = __int_as_float((127 - 14 + e) << 23);
        }
        if (t == 0) cs[c] = inverse;
        // Whole chunks, so that the group shuffles see every lane.
#pragma unroll
        for (int j = 0; j < TANDEM_F16Q8_HELD; ++j) {
            if (1024 * j < s.k) tandem_f16q8_store(x[j], xh, c, 1024 * j + 4 * t, s, scale);
        }
        for (i64 base = 1024 * TANDEM_F16Q8_HELD; base < s.k; base += 1024) {
            float y[4];
            tandem_f16q8_load(col, base + 4 * t, s, y);
            tandem_f16q8_store(y, xh, c, base + 4 * t, s, scale);
        }
    }
}
#endif
