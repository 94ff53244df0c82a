// Prefill-shaped MUL_MAT (more than 8 columns) on NVIDIA tensor cores (sm_80 and newer):
// int8 mma for weights in 32-value groups with one scale (and an optional offset) per group,
// f16 mma for f16 weights. The portable GEMM (gemm.hip) stays the path everywhere else.
//
// Integer path: activations are the q8_1 copy of tandem_quantize_q8_1 (int8 values, then one
// (d, d * sum) pair per 32 values), rounded exactly as the CPU's q8_0 activation copy. Each
// weight group is unpacked to 32 int8 values with a scale d and offset m such that its weights
// are d * q + m; a group's product with an activation group is then
//     d * d_a * sum(q * a) + m * (d_a * sum(a)),
// the integer sum from one m16n8k32 mma, the rest in f32: the CPU's block dot products up to
// the f32 summation order.
//
// Launch layout: block = 256 threads (eight 32-lane warps), one 128 x 64 (rows x columns)
// output tile per block: grid.x over columns (n), grid.y over weight rows (m), grid.z over
// batches. Per step of 128 along k, each thread unpacks two (row, group) pairs of weights and
// copies one (column, group) pair of activations into shared memory (rows padded to 144 bytes:
// the fragment loads hit 32 distinct banks); each warp then computes a 32 x 32 part of the tile
// with 2 x 4 mma tiles per group.
//
// f16 path: the same tiling with k steps of 64; weights are copied as they are, activations
// come from an f16 copy of src1 (tandem_mma_f16_copy: rounded to f16, which is what the CPU's
// f16 dot products see), m16n8k16 mma with f32 accumulation.
#include "tandem_hip.h"
#include "tandem_quant.h"

#define TANDEM_MMA_THREADS 256
#define TANDEM_MMA_BM 128
#define TANDEM_MMA_BN 64
// 32-value groups per k step (integer path) and the padded shared row in bytes.
#define TANDEM_MMA_KG 4
#define TANDEM_MMA_ROW (TANDEM_MMA_KG * 32 + 16)

// Mirrors `MulMatShape` in backend/src/gpu/ops/matmul_launch.rs; same as in gemv.hip.
struct tandem_mm_shape {
    i64 k, m, n;
    i64 ne12, ne13;
    i64 r2, r3;
    i64 nb01, nb02, nb03;
    i64 nb10, nb11, nb12, nb13;
    i64 nb1, nb2, nb3;
    i64 pad;
};

#if defined(TANDEM_NVIDIA) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define TANDEM_MMA_ENABLED 1
#endif

// ---------------------------------------------------------------- weight groups
// unpack(b, g, q, d, m): group g (of QK / 32) of the block at b (2-byte aligned) as 32 int8
// values in q[0..8) (value i in byte i % 4 of word i / 4) with scale d and offset m.

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

struct tandem_mmw_q4_0 {
    static constexpr int QK = 32, BYTES = 18;
    static constexpr bool MIN = false;
    static __device__ __forceinline__ void unpack(const u8* b, int, u32* q, float& d, float& m) {
        for (int j = 0; j < 4; ++j) {
            const u32 v = tandem_mma_ld32(b + 2 + 4 * j);
            q[j] = tandem_mma_unbias(v & 0x0F0F0F0Fu, 0x08080808u);
            q[4 + j] = tandem_mma_unbias((v >> 4) & 0x0F0F0F0Fu, 0x08080808u);
        }
        d = tandem_mma_half(b);
        m = 0.0f;
    }
};

struct tandem_mmw_q4_1 {
    static constexpr int QK = 32, BYTES = 20;
    static constexpr bool MIN = true;
    static __device__ __forceinline__ void unpack(const u8* b, int, u32* q, float& d, float& m) {
        for (int j = 0; j < 4; ++j) {
            const u32 v = tandem_mma_ld32(b + 4 + 4 * j);
            q[j] = v & 0x0F0F0F0Fu;
            q[4 + j] = (v >> 4) & 0x0F0F0F0Fu;
        }
        d = tandem_mma_half(b);
        m = tandem_mma_half(b + 2);
    }
};

struct tandem_mmw_q5_0 {
    static constexpr int QK = 32, BYTES = 22;
    static constexpr bool MIN = false;
    static __device__ __forceinline__ void unpack(const u8* b, int, u32* q, float& d, float& m) {
        const u32 qh = tandem_mma_ld32(b + 2);
        for (int j = 0; j < 4; ++j) {
            const u32 v = tandem_mma_ld32(b + 6 + 4 * j);
            q[j] = tandem_mma_unbias((v & 0x0F0F0F0Fu) | tandem_mma_spread4(qh >> (4 * j)), 0x10101010u);
            q[4 + j] = tandem_mma_unbias(((v >> 4) & 0x0F0F0F0Fu) | tandem_mma_spread4(qh >> (16 + 4 * j)), 0x10101010u);
        }
        d = tandem_mma_half(b);
        m = 0.0f;
    }
};

struct tandem_mmw_q5_1 {
    static constexpr int QK = 32, BYTES = 24;
    static constexpr bool MIN = true;
    static __device__ __forceinline__ void unpack(const u8* b, int, u32* q, float& d, float& m) {
        const u32 qh = tandem_mma_ld32(b + 4);
        for (int j = 0; j < 4; ++j) {
            const u32 v = tandem_mma_ld32(b + 8 + 4 * j);
            q[j] = (v & 0x0F0F0F0Fu) | tandem_mma_spread4(qh >> (4 * j));
            q[4 + j] = ((v >> 4) & 0x0F0F0F0Fu) | tandem_mma_spread4(qh >> (16 + 4 * j));
        }
        d = tandem_mma_half(b);
        m = tandem_mma_half(b + 2);
    }
};

struct tandem_mmw_q8_0 {
    static constexpr int QK = 32, BYTES = 34;
    static constexpr bool MIN = false;
    static __device__ __forceinline__ void unpack(const u8* b, int, u32* q, float& d, float& m) {
        for (int j = 0; j < 8; ++j) q[j] = tandem_mma_ld32(b + 2 + 4 * j);
        d = tandem_mma_half(b);
        m = 0.0f;
    }
};

__constant__ i8 tandem_mma_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                               1,    13,   25,  38,  53,  69,  89,  113};

struct tandem_mmw_iq4_nl {
    static constexpr int QK = 32, BYTES = 18;
    static constexpr bool MIN = false;
    static __device__ __forceinline__ u32 lookup4(u32 x) {
        u32 r = 0;
        for (int i = 0; i < 4; ++i) r |= (u32)(u8)tandem_mma_iq4nl_values[(x >> (8 * i)) & 15u] << (8 * i);
        return r;
    }
    static __device__ __forceinline__ void unpack(const u8* b, int, u32* q, float& d, float& m) {
        for (int j = 0; j < 4; ++j) {
            const u32 v = tandem_mma_ld32(b + 2 + 4 * j);
            q[j] = lookup4(v);
            q[4 + j] = lookup4(v >> 4);
        }
        d = tandem_mma_half(b);
        m = 0.0f;
    }
};

// 6-bit scale and min j (0..7) of q4_K / q5_K.
TANDEM_DEVICE void tandem_mma_scale_min_k4(const u8* s, int j, int& sc, int& mn) {
    if (j < 4) {
        sc = s[j] & 63;
        mn = s[j + 4] & 63;
    } else {
        sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

// q4_K: d, dmin, scales[12], qs[128]; group g takes nibble g & 1 of qs[32 * (g / 2) ..]; its
// weights are d * sc * q - dmin * mn.
struct tandem_mmw_q4_K {
    static constexpr int QK = 256, BYTES = 144;
    static constexpr bool MIN = true;
    static __device__ __forceinline__ void unpack(const u8* b, int g, u32* q, float& d, float& m) {
        const u8* qs = b + 16 + 32 * (g >> 1);
        const int shift = 4 * (g & 1);
        for (int j = 0; j < 8; ++j) q[j] = (tandem_mma_ld32(qs + 4 * j) >> shift) & 0x0F0F0F0Fu;
        int sc, mn;
        tandem_mma_scale_min_k4(b + 4, g, sc, mn);
        d = tandem_mma_half(b) * (float)sc;
        m = -tandem_mma_half(b + 2) * (float)mn;
    }
};

// q5_K: q4_K plus qh[32] at 16 whose bit g is the group's fifth bit; qs at 48.
struct tandem_mmw_q5_K {
    static constexpr int QK = 256, BYTES = 176;
    static constexpr bool MIN = true;
    static __device__ __forceinline__ void unpack(const u8* b, int g, u32* q, float& d, float& m) {
        const u8* qs = b + 48 + 32 * (g >> 1);
        const int shift = 4 * (g & 1);
        for (int j = 0; j < 8; ++j) {
            const u32 lo = (tandem_mma_ld32(qs + 4 * j) >> shift) & 0x0F0F0F0Fu;
            const u32 hi = (tandem_mma_ld32(b + 16 + 4 * j) >> g) & 0x01010101u;
            q[j] = lo | (hi << 4);
        }
        int sc, mn;
        tandem_mma_scale_min_k4(b + 4, g, sc, mn);
        d = tandem_mma_half(b) * (float)sc;
        m = -tandem_mma_half(b + 2) * (float)mn;
    }
};

// ---------------------------------------------------------------- helpers

// int32 to f32 for |v| < 2^22 with two full-rate instructions (an mma group sum is at most
// 32 * 128 * 128 = 2^19 in magnitude).
TANDEM_DEVICE float tandem_mma_i2f(int v) {
    return __int_as_float(v + 0x4B400000) - 12582912.0f;
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

// ---------------------------------------------------------------- integer path

// Shared memory of one integer tile.
struct tandem_mma_qsmem {
    u8 a[TANDEM_MMA_BM * TANDEM_MMA_ROW];
    u8 b[TANDEM_MMA_BN * TANDEM_MMA_ROW];
    float da[TANDEM_MMA_BM][TANDEM_MMA_KG], ma[TANDEM_MMA_BM][TANDEM_MMA_KG];
    float db[TANDEM_MMA_BN][TANDEM_MMA_KG], sb[TANDEM_MMA_BN][TANDEM_MMA_KG];
};

// One 128 x 64 output tile: weight rows row0 .. row0 + 128 (row r at wb + r * nb01, m rows, k
// values each) against the 64 q8_1 columns the map gives.
template <typename T, typename C>
TANDEM_DEVICE void tandem_mma_quant_tile(tandem_mma_qsmem& sm, const u8* wb, i64 nb01, i64 m, i64 k, i64 row0,
                                         const char* aq, const char* ads, const C& cols) {
    u8* sa = sm.a;
    u8* sb = sm.b;
    auto& sda = sm.da;
    auto& sma = sm.ma;
    auto& sdb = sm.db;
    auto& ssb = sm.sb;
    const i64 groups = k / 32;
    constexpr int GPB = T::QK / 32;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int wm = warp / 2, wn = warp % 2;  // this warp's 32 x 32 part of the tile
    float acc[2][4][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;

    for (i64 g0 = 0; g0 < groups; g0 += TANDEM_MMA_KG) {
        // Weights: (row, group) pairs p = tid, tid + 256 of the 128 x 4 tile.
#pragma unroll
        for (int h = 0; h < TANDEM_MMA_BM * TANDEM_MMA_KG / TANDEM_MMA_THREADS; ++h) {
            const int p = tid + h * TANDEM_MMA_THREADS;
            const int r = p / TANDEM_MMA_KG, gi = p % TANDEM_MMA_KG;
            const i64 row = row0 + r, g = g0 + gi;
            u32 q[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            float d = 0.0f, mm = 0.0f;
            if (row < m && g < groups) {
                T::unpack(wb + row * nb01 + (g / GPB) * T::BYTES, (int)(g % GPB), q, d, mm);
            }
            uint4* dq = (uint4*)(sa + r * TANDEM_MMA_ROW + gi * 32);
            dq[0] = make_uint4(q[0], q[1], q[2], q[3]);
            dq[1] = make_uint4(q[4], q[5], q[6], q[7]);
            sda[r][gi] = d;
            sma[r][gi] = mm;
        }
        // Activations: (column, group) pairs of the 64 x 4 tile.
#pragma unroll
        for (int h = 0; h < TANDEM_MMA_BN * TANDEM_MMA_KG / TANDEM_MMA_THREADS; ++h) {
            const int p = tid + h * TANDEM_MMA_THREADS;
            const int c = p / TANDEM_MMA_KG, gi = p % TANDEM_MMA_KG;
            const i64 col = cols.act(c), g = g0 + gi;
            uint4 lo = make_uint4(0, 0, 0, 0), hi = lo;
            float2 ds = make_float2(0.0f, 0.0f);
            if (col >= 0 && g < groups) {
                const uint4* src = (const uint4*)(aq + col * k + g * 32);
                lo = src[0];
                hi = src[1];
                ds = ((const float2*)ads)[col * groups + g];
            }
            uint4* dq = (uint4*)(sb + c * TANDEM_MMA_ROW + gi * 32);
            dq[0] = lo;
            dq[1] = hi;
            sdb[c][gi] = ds.x;
            ssb[c][gi] = ds.y;
        }
        __syncthreads();
#if defined(TANDEM_MMA_ENABLED)
        const int qr = lane / 4, qc = lane % 4;
#pragma unroll
        for (int gi = 0; gi < TANDEM_MMA_KG; ++gi) {
            u32 fa[2][4];
            float da[2][2], ma[2][2];
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) {
                const int r = wm * 32 + mt * 16 + qr;
                const u8* p = sa + r * TANDEM_MMA_ROW + gi * 32 + 4 * qc;
                fa[mt][0] = *(const u32*)p;
                fa[mt][1] = *(const u32*)(p + 8 * TANDEM_MMA_ROW);
                fa[mt][2] = *(const u32*)(p + 16);
                fa[mt][3] = *(const u32*)(p + 8 * TANDEM_MMA_ROW + 16);
                da[mt][0] = sda[r][gi];
                da[mt][1] = sda[r + 8][gi];
                if (T::MIN) {
                    ma[mt][0] = sma[r][gi];
                    ma[mt][1] = sma[r + 8][gi];
                }
            }
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) {
                const int cb = wn * 32 + nt * 8;
                const u8* p = sb + (cb + qr) * TANDEM_MMA_ROW + gi * 32 + 4 * qc;
                const u32 fb0 = *(const u32*)p, fb1 = *(const u32*)(p + 16);
                const int c = cb + 2 * qc;
                const float db0 = sdb[c][gi], db1 = sdb[c + 1][gi];
                float sb0 = 0.0f, sb1 = 0.0f;
                if (T::MIN) {
                    sb0 = ssb[c][gi];
                    sb1 = ssb[c + 1][gi];
                }
#pragma unroll
                for (int mt = 0; mt < 2; ++mt) {
                    int ci[4];
                    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                        "{%8, %9}, {%10, %11, %12, %13};"
                        : "=r"(ci[0]), "=r"(ci[1]), "=r"(ci[2]), "=r"(ci[3])
                        : "r"(fa[mt][0]), "r"(fa[mt][1]), "r"(fa[mt][2]), "r"(fa[mt][3]), "r"(fb0), "r"(fb1),
                          "r"(0), "r"(0), "r"(0), "r"(0));
                    float* a = acc[mt][nt];
                    a[0] += da[mt][0] * db0 * tandem_mma_i2f(ci[0]);
                    a[1] += da[mt][0] * db1 * tandem_mma_i2f(ci[1]);
                    a[2] += da[mt][1] * db0 * tandem_mma_i2f(ci[2]);
                    a[3] += da[mt][1] * db1 * tandem_mma_i2f(ci[3]);
                    if (T::MIN) {
                        a[0] += ma[mt][0] * sb0;
                        a[1] += ma[mt][0] * sb1;
                        a[2] += ma[mt][1] * sb0;
                        a[3] += ma[mt][1] * sb1;
                    }
                }
            }
        }
#else
        // Built for a device without these instructions: the launcher never picks this
        // kernel there; if it ever did, the output says so (NaN) instead of looking valid.
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int nt = 0; nt < 4; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[mt][nt][e] = __int_as_float(0x7fc00000);
#endif
        __syncthreads();
    }
    tandem_mma_store(acc, cols, m, row0 + wm * 32, wn * 32);
}

// MUL_MAT: block (column tile, row tile, batch).
template <typename T>
TANDEM_DEVICE void tandem_mma_quant(const char* w, const char* aq, const char* ads, char* dst,
                                    const tandem_mm_shape& s) {
    __shared__ __align__(16) tandem_mma_qsmem sm;
    const i64 b = blockIdx.z;
    if (b >= s.ne12 * s.ne13) return;
    const i64 i12 = b % s.ne12, i13 = b / s.ne12;
    const u8* wb = (const u8*)w + (i12 / s.r2) * s.nb02 + (i13 / s.r3) * s.nb03;
    tandem_mma_dense_cols cols;
    cols.first = b * s.n;  // this batch's first column of the q8_1 copy
    cols.col0 = (i64)blockIdx.x * TANDEM_MMA_BN;
    cols.n = s.n;
    cols.nb1 = s.nb1;
    cols.dst = dst + i12 * s.nb2 + i13 * s.nb3;
    tandem_mma_quant_tile<T>(sm, wb, s.nb01, s.m, s.k, (i64)blockIdx.y * TANDEM_MMA_BM, aq, ads, cols);
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
    i64 pad;
};

// Sorts the slots (u, t) of ids by expert: counts[e] slots of expert e at lists[e * slots ..]
// (slot = u + n_used * t, in no particular order). One block; experts <= 4096 (the launcher
// checks). A slot whose id is no valid expert gets NaN in all its m outputs here.
extern "C" __global__ void __launch_bounds__(1024)
tandem_mmid_route(const char* ids, i32* counts, i32* lists, char* dst, tandem_mmid_shape s) {
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

// MUL_MAT_ID with tokens grouped by expert: block (column tile, row tile, expert); a block
// strides over its expert's column tiles by gridDim.x.
template <typename T>
TANDEM_DEVICE void tandem_mmid_mma(const char* w, const char* aq, const char* ads, const i32* counts,
                                   const i32* lists, char* dst, const tandem_mmid_shape& s) {
    __shared__ __align__(16) tandem_mma_qsmem sm;
    const i64 e = blockIdx.z;
    if (e >= s.n_expert) return;
    const int count = counts[e];
    const u8* wb = (const u8*)w + e * s.nb02;
    for (int j0 = blockIdx.x * TANDEM_MMA_BN; j0 < count; j0 += gridDim.x * TANDEM_MMA_BN) {
        tandem_mma_routed_cols cols;
        cols.list = lists + e * s.n_used * s.n_tokens + j0;
        cols.count = count - j0;
        cols.n_used = s.n_used;
        cols.n_b = s.n_b;
        cols.nb1 = s.nb1;
        cols.nb2 = s.nb2;
        cols.dst = dst;
        tandem_mma_quant_tile<T>(sm, wb, s.nb01, s.m, s.k, (i64)blockIdx.y * TANDEM_MMA_BM, aq, ads, cols);
        __syncthreads();  // the tile's shared memory is reused by the next column tile
    }
}

// ---------------------------------------------------------------- f16 path

// f16 weights x the f16 copy of the activations (column c of batch b at xh + (b * n + c) * k
// halves); k steps of 64 (128 bytes per padded row).
TANDEM_DEVICE void tandem_mma_f16_tile(const char* w, const u16* xh, char* dst, const tandem_mm_shape& s) {
    __shared__ __align__(16) u8 sa[TANDEM_MMA_BM * TANDEM_MMA_ROW];
    __shared__ __align__(16) u8 sb[TANDEM_MMA_BN * TANDEM_MMA_ROW];
    const i64 b = blockIdx.z;
    if (b >= s.ne12 * s.ne13) return;
    const i64 i12 = b % s.ne12, i13 = b / s.ne12;
    const i64 row0 = (i64)blockIdx.y * TANDEM_MMA_BM, col0 = (i64)blockIdx.x * TANDEM_MMA_BN;
    const u8* wb = (const u8*)w + (i12 / s.r2) * s.nb02 + (i13 / s.r3) * s.nb03;
    const u16* xb = xh + b * s.n * s.k;
    char* out = dst + i12 * s.nb2 + i13 * s.nb3;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int wm = warp / 2, wn = warp % 2;
    float acc[2][4][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;
    // Rows are 16-byte aligned when the bases and strides are (else 2-byte steps).
    const bool wal = (((u64)wb | (u64)s.nb01) & 15u) == 0;
    const bool xal = (((u64)xb) & 15u) == 0 && s.k % 8 == 0;
    for (i64 k0 = 0; k0 < s.k; k0 += 64) {
        // Weights: 128 rows x 64 values = 1024 pieces of 8 values; four per thread.
#pragma unroll
        for (int h = 0; h < TANDEM_MMA_BM * 8 / TANDEM_MMA_THREADS; ++h) {
            const int p = tid + h * TANDEM_MMA_THREADS;
            const int r = p / 8, v = p % 8;
            const i64 row = row0 + r, kk = k0 + 8 * v;
            uint4 x = make_uint4(0, 0, 0, 0);
            if (row < s.m) {
                const u8* src = wb + row * s.nb01 + kk * 2;
                if (wal && kk + 8 <= s.k) {
                    x = *(const uint4*)src;
                } else {
                    u32 e[4] = {0, 0, 0, 0};
                    for (int i = 0; i < 8; ++i) {
                        if (kk + i < s.k) e[i / 2] |= (u32)((const u16*)src)[i] << (16 * (i & 1));
                    }
                    x = make_uint4(e[0], e[1], e[2], e[3]);
                }
            }
            *(uint4*)(sa + r * TANDEM_MMA_ROW + 16 * v) = x;
        }
        // Activations: 64 columns x 64 values, two pieces of 8 per thread.
#pragma unroll
        for (int h = 0; h < TANDEM_MMA_BN * 8 / TANDEM_MMA_THREADS; ++h) {
            const int p = tid + h * TANDEM_MMA_THREADS;
            const int c = p / 8, v = p % 8;
            const i64 col = col0 + c, kk = k0 + 8 * v;
            uint4 x = make_uint4(0, 0, 0, 0);
            if (col < s.n) {
                const u16* src = xb + col * s.k + kk;
                if (xal && kk + 8 <= s.k) {
                    x = *(const uint4*)src;
                } else {
                    u32 e[4] = {0, 0, 0, 0};
                    for (int i = 0; i < 8; ++i) {
                        if (kk + i < s.k) e[i / 2] |= (u32)src[i] << (16 * (i & 1));
                    }
                    x = make_uint4(e[0], e[1], e[2], e[3]);
                }
            }
            *(uint4*)(sb + c * TANDEM_MMA_ROW + 16 * v) = x;
        }
        __syncthreads();
#if defined(TANDEM_MMA_ENABLED)
        const int qr = lane / 4, qc = lane % 4;
#pragma unroll
        for (int ks = 0; ks < 4; ++ks) {  // four k16 slices of the 64
            u32 fa[2][4];
#pragma unroll
            for (int mt = 0; mt < 2; ++mt) {
                const u8* p = sa + (wm * 32 + mt * 16 + qr) * TANDEM_MMA_ROW + ks * 32 + 4 * qc;
                fa[mt][0] = *(const u32*)p;
                fa[mt][1] = *(const u32*)(p + 8 * TANDEM_MMA_ROW);
                fa[mt][2] = *(const u32*)(p + 16);
                fa[mt][3] = *(const u32*)(p + 8 * TANDEM_MMA_ROW + 16);
            }
#pragma unroll
            for (int nt = 0; nt < 4; ++nt) {
                const u8* p = sb + (wn * 32 + nt * 8 + qr) * TANDEM_MMA_ROW + ks * 32 + 4 * qc;
                const u32 fb0 = *(const u32*)p, fb1 = *(const u32*)(p + 16);
#pragma unroll
                for (int mt = 0; mt < 2; ++mt) {
                    float* a = acc[mt][nt];
                    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                        "{%8, %9}, {%0, %1, %2, %3};"
                        : "+f"(a[0]), "+f"(a[1]), "+f"(a[2]), "+f"(a[3])
                        : "r"(fa[mt][0]), "r"(fa[mt][1]), "r"(fa[mt][2]), "r"(fa[mt][3]), "r"(fb0), "r"(fb1));
                }
            }
        }
#else
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
            for (int nt = 0; nt < 4; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) acc[mt][nt][e] = __int_as_float(0x7fc00000);
#endif
        __syncthreads();
    }
    tandem_mma_dense_cols cols;
    cols.first = 0;
    cols.col0 = col0;
    cols.n = s.n;
    cols.nb1 = s.nb1;
    cols.dst = out;
    tandem_mma_store(acc, cols, s.m, row0 + wm * 32, wn * 32);
}

#define TANDEM_MMA_KERNEL extern "C" __global__ void __launch_bounds__(TANDEM_MMA_THREADS, 2)
#define TANDEM_MMA_ARGS_Q const char *w, const char *aq, const char *ads, char *dst, tandem_mm_shape s

TANDEM_MMA_KERNEL tandem_mma_q4_0(TANDEM_MMA_ARGS_Q) { tandem_mma_quant<tandem_mmw_q4_0>(w, aq, ads, dst, s); }
TANDEM_MMA_KERNEL tandem_mma_q4_1(TANDEM_MMA_ARGS_Q) { tandem_mma_quant<tandem_mmw_q4_1>(w, aq, ads, dst, s); }
TANDEM_MMA_KERNEL tandem_mma_q5_0(TANDEM_MMA_ARGS_Q) { tandem_mma_quant<tandem_mmw_q5_0>(w, aq, ads, dst, s); }
TANDEM_MMA_KERNEL tandem_mma_q5_1(TANDEM_MMA_ARGS_Q) { tandem_mma_quant<tandem_mmw_q5_1>(w, aq, ads, dst, s); }
TANDEM_MMA_KERNEL tandem_mma_q8_0(TANDEM_MMA_ARGS_Q) { tandem_mma_quant<tandem_mmw_q8_0>(w, aq, ads, dst, s); }
TANDEM_MMA_KERNEL tandem_mma_iq4_nl(TANDEM_MMA_ARGS_Q) { tandem_mma_quant<tandem_mmw_iq4_nl>(w, aq, ads, dst, s); }
TANDEM_MMA_KERNEL tandem_mma_q4_K(TANDEM_MMA_ARGS_Q) { tandem_mma_quant<tandem_mmw_q4_K>(w, aq, ads, dst, s); }
TANDEM_MMA_KERNEL tandem_mma_q5_K(TANDEM_MMA_ARGS_Q) { tandem_mma_quant<tandem_mmw_q5_K>(w, aq, ads, dst, s); }
#define TANDEM_MMID_ARGS const char *w, const char *aq, const char *ads, const i32 *counts, const i32 *lists, \
                         char *dst, tandem_mmid_shape s
TANDEM_MMA_KERNEL tandem_mmid_mma_q4_0(TANDEM_MMID_ARGS) {
    tandem_mmid_mma<tandem_mmw_q4_0>(w, aq, ads, counts, lists, dst, s);
}
TANDEM_MMA_KERNEL tandem_mmid_mma_q4_1(TANDEM_MMID_ARGS) {
    tandem_mmid_mma<tandem_mmw_q4_1>(w, aq, ads, counts, lists, dst, s);
}
TANDEM_MMA_KERNEL tandem_mmid_mma_q5_0(TANDEM_MMID_ARGS) {
    tandem_mmid_mma<tandem_mmw_q5_0>(w, aq, ads, counts, lists, dst, s);
}
TANDEM_MMA_KERNEL tandem_mmid_mma_q5_1(TANDEM_MMID_ARGS) {
    tandem_mmid_mma<tandem_mmw_q5_1>(w, aq, ads, counts, lists, dst, s);
}
TANDEM_MMA_KERNEL tandem_mmid_mma_q8_0(TANDEM_MMID_ARGS) {
    tandem_mmid_mma<tandem_mmw_q8_0>(w, aq, ads, counts, lists, dst, s);
}
TANDEM_MMA_KERNEL tandem_mmid_mma_iq4_nl(TANDEM_MMID_ARGS) {
    tandem_mmid_mma<tandem_mmw_iq4_nl>(w, aq, ads, counts, lists, dst, s);
}
TANDEM_MMA_KERNEL tandem_mmid_mma_q4_K(TANDEM_MMID_ARGS) {
    tandem_mmid_mma<tandem_mmw_q4_K>(w, aq, ads, counts, lists, dst, s);
}
TANDEM_MMA_KERNEL tandem_mmid_mma_q5_K(TANDEM_MMID_ARGS) {
    tandem_mmid_mma<tandem_mmw_q5_K>(w, aq, ads, counts, lists, dst, s);
}
TANDEM_MMA_KERNEL tandem_mma_f16(const char* w, const u16* xh, char* dst, tandem_mm_shape s) {
    tandem_mma_f16_tile(w, xh, dst, s);
}

// src1 (f32, [k, ne1, ne2, ne3] with byte strides, as tandem_q8_shape in gemv.hip) rounded to
// f16 into xh, contiguous: column c = i1 + ne1 * (i2 + ne2 * i3) at xh + c * k. Grid: x over k
// in 256s, y over columns (looping past 65535).
struct tandem_mma_src_shape {
    i64 k, ne1, ne2, ne3;
    i64 nb0, nb1, nb2, nb3;
};
extern "C" __global__ void __launch_bounds__(256)
tandem_mma_f16_copy(const char* src, u16* xh, tandem_mma_src_shape s) {
    const i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= s.k) return;
    const i64 cols = s.ne1 * s.ne2 * s.ne3;
    for (i64 c = blockIdx.y; c < cols; c += gridDim.y) {
        const i64 i1 = c % s.ne1, i2 = (c / s.ne1) % s.ne2, i3 = c / (s.ne1 * s.ne2);
        const float x = *(const float*)(src + i * s.nb0 + i1 * s.nb1 + i2 * s.nb2 + i3 * s.nb3);
        xh[c * s.k + i] = tandem_f32_to_f16(x);
    }
}
