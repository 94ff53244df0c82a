// Prefill-shaped MUL_MAT (more than 8 columns) over every weight type: a portable tiled GEMM.
//
// Launch layout: block = 256 threads (any wave size), one 64 x 64 output tile per block: grid.x
// over columns (n), grid.y over weight rows (m), grid.z over batches. Per step of 32 along k
// each thread dequantizes 8 weights of one row into shared memory (f32, k-major so the inner
// loop reads 4 rows with one 16-byte load) and copies 8 activations of one column; then every
// thread accumulates a 4 x 4 block of outputs in f32. Weights are read once per 64 columns.
//
// This is the portable path. On NVIDIA sm_80+ the launcher (backend/src/gpu/ops/matmul_launch.rs)
// takes the tensor-core GEMM of mma.hip instead for f16 and every quantized type, on AMD gfx11 /
// gfx12 the WMMA tiles of mma.hip (the "wmma" family) for f16 and every quantized type.
// This kernel stays the fallback (AMD CDNA's MFMA has no path yet).
#include "tandem_hip.h"
#include "tandem_quant.h"

#define TANDEM_MM_BM 64
#define TANDEM_MM_BN 64
#define TANDEM_MM_BK 32
#define TANDEM_MM_THREADS 256

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

TANDEM_DEVICE float tandem_mm_half(const u8* p) {
    return tandem_f16_to_f32(*(const u16*)p);
}

// ---------------------------------------------------------------- weight element decoders
// Quantized types: elem(b, j) is weight j (0 .. QK) of the block at b (2-byte aligned).

struct tandem_mm_q4_0 {
    static constexpr int QK = 32, BYTES = 18;
    static __device__ __forceinline__ float elem(const u8* b, int j) {
        const int q = j < 16 ? (b[2 + j] & 15) : (b[2 + j - 16] >> 4);
        return tandem_mm_half(b) * (float)(q - 8);
    }
};
struct tandem_mm_q4_1 {
    static constexpr int QK = 32, BYTES = 20;
    static __device__ __forceinline__ float elem(const u8* b, int j) {
        const int q = j < 16 ? (b[4 + j] & 15) : (b[4 + j - 16] >> 4);
        return tandem_mm_half(b) * (float)q + tandem_mm_half(b + 2);
    }
};
struct tandem_mm_q5_0 {
    static constexpr int QK = 32, BYTES = 22;
    static __device__ __forceinline__ float elem(const u8* b, int j) {
        const int lo = j < 16 ? (b[6 + j] & 15) : (b[6 + j - 16] >> 4);
        const int hi = (b[2 + (j >> 3)] >> (j & 7)) & 1;
        return tandem_mm_half(b) * (float)((lo | (hi << 4)) - 16);
    }
};
struct tandem_mm_q5_1 {
    static constexpr int QK = 32, BYTES = 24;
    static __device__ __forceinline__ float elem(const u8* b, int j) {
        const int lo = j < 16 ? (b[8 + j] & 15) : (b[8 + j - 16] >> 4);
        const int hi = (b[4 + (j >> 3)] >> (j & 7)) & 1;
        return tandem_mm_half(b) * (float)(lo | (hi << 4)) + tandem_mm_half(b + 2);
    }
};
struct tandem_mm_q8_0 {
    static constexpr int QK = 32, BYTES = 34;
    static __device__ __forceinline__ float elem(const u8* b, int j) {
        return tandem_mm_half(b) * (float)(i8)b[2 + j];
    }
};
struct tandem_mm_iq4_nl {
    static constexpr int QK = 32, BYTES = 18;
    static __device__ __forceinline__ float elem(const u8* b, int j) {
        const int q = j < 16 ? (b[2 + j] & 15) : (b[2 + j - 16] >> 4);
        return tandem_mm_half(b) * (float)tandem_iq4nl_level((u32)q);
    }
};
// Superblocks of 256: weight j is in 32-weight group g = j / 32 = 4n + jj at lane l = j % 32.
struct tandem_mm_q2_K {
    static constexpr int QK = 256, BYTES = 84;
    static __device__ __forceinline__ float elem(const u8* b, int j) {
        const int g = j >> 5, l = j & 31;
        const int q = (b[16 + 32 * (g >> 2) + l] >> (2 * (g & 3))) & 3;
        const int sc = b[2 * g + (l >> 4)];
        return tandem_mm_half(b + 80) * (float)((sc & 15) * q) - tandem_mm_half(b + 82) * (float)(sc >> 4);
    }
};
struct tandem_mm_q3_K {
    static constexpr int QK = 256, BYTES = 110;
    static __device__ __forceinline__ float elem(const u8* b, int j) {
        const int g = j >> 5, l = j & 31;
        const int q = (b[32 + 32 * (g >> 2) + l] >> (2 * (g & 3))) & 3;
        const int v = q - (((b[l] >> g) & 1) ? 0 : 4);
        const int sc = tandem_q3_K_scale(b + 96, 2 * g + (l >> 4));
        return tandem_mm_half(b + 108) * (float)(sc * v);
    }
};
struct tandem_mm_q4_K {
    static constexpr int QK = 256, BYTES = 144;
    static __device__ __forceinline__ float elem(const u8* b, int j) {
        const int g = j >> 5, l = j & 31;
        const int q = (b[16 + 32 * (g >> 1) + l] >> (4 * (g & 1))) & 15;
        int sc, mn;
        tandem_scale_min_k4(b + 4, g, &sc, &mn);
        return tandem_mm_half(b) * (float)(sc * q) - tandem_mm_half(b + 2) * (float)mn;
    }
};
struct tandem_mm_q5_K {
    static constexpr int QK = 256, BYTES = 176;
    static __device__ __forceinline__ float elem(const u8* b, int j) {
        const int g = j >> 5, l = j & 31;
        const int q = ((b[48 + 32 * (g >> 1) + l] >> (4 * (g & 1))) & 15) | (((b[16 + l] >> g) & 1) << 4);
        int sc, mn;
        tandem_scale_min_k4(b + 4, g, &sc, &mn);
        return tandem_mm_half(b) * (float)(sc * q) - tandem_mm_half(b + 2) * (float)mn;
    }
};
struct tandem_mm_q6_K {
    static constexpr int QK = 256, BYTES = 210;
    static __device__ __forceinline__ float elem(const u8* b, int j) {
        const int g = j >> 5, l = j & 31, n = g >> 2, jj = g & 3;
        const int lo = (b[64 * n + 32 * (jj & 1) + l] >> (4 * (jj >> 1))) & 15;
        const int hi = (b[128 + 32 * n + l] >> (2 * jj)) & 3;
        const int sc = (i8)b[192 + 2 * g + (l >> 4)];
        return tandem_mm_half(b + 208) * (float)(sc * ((lo | (hi << 4)) - 32));
    }
};

// Eight weights e0 .. e0 + 8 of a quantized row (e0 a multiple of 8, inside one block).
template <typename T>
TANDEM_DEVICE void tandem_mm_load8_quant(const u8* row, i64, i64 e0, float* o) {
    const u8* b = row + (e0 / T::QK) * T::BYTES;
    const int j0 = (int)(e0 % T::QK);
#pragma unroll
    for (int i = 0; i < 8; ++i) o[i] = T::elem(b, j0 + i);
}

// Float types: any row length; weights past k read as zero.
struct tandem_mm_f32 {
    static __device__ __forceinline__ void load8(const u8* row, i64 k, i64 e0, float* o) {
#pragma unroll
        for (int i = 0; i < 8; ++i) o[i] = e0 + i < k ? ((const float*)row)[e0 + i] : 0.0f;
    }
};
struct tandem_mm_f16 {
    static __device__ __forceinline__ void load8(const u8* row, i64 k, i64 e0, float* o) {
#pragma unroll
        for (int i = 0; i < 8; ++i) o[i] = e0 + i < k ? tandem_f16_to_f32(((const u16*)row)[e0 + i]) : 0.0f;
    }
};
struct tandem_mm_bf16 {
    static __device__ __forceinline__ void load8(const u8* row, i64 k, i64 e0, float* o) {
#pragma unroll
        for (int i = 0; i < 8; ++i) o[i] = e0 + i < k ? tandem_bf16_to_f32(((const u16*)row)[e0 + i]) : 0.0f;
    }
};
template <typename T>
struct tandem_mm_quant {
    static __device__ __forceinline__ void load8(const u8* row, i64 k, i64 e0, float* o) {
        tandem_mm_load8_quant<T>(row, k, e0, o);
    }
};

// ---------------------------------------------------------------- the tiled kernel

// Computes the tile of batch b over k in [k_begin, k_end) (a whole-k tile: 0 and s.k) and stores
// it at out (rows at 4 bytes, columns at out_nb1); `out` null: in dst.
template <typename W>
TANDEM_DEVICE void tandem_gemm_tile(const char* w, const char* src1, char* dst, const tandem_mm_shape& s,
                                    i64 b, i64 k_begin, i64 k_end, char* out, i64 out_nb1) {
    // k-major tiles; rows padded to 68 floats keep the 16-byte reads aligned.
    __shared__ __align__(16) float wt[TANDEM_MM_BK][TANDEM_MM_BM + 4];
    __shared__ __align__(16) float at[TANDEM_MM_BK][TANDEM_MM_BN + 4];
    const int t = threadIdx.x;
    const i64 n0 = (i64)blockIdx.x * TANDEM_MM_BN, m0 = (i64)blockIdx.y * TANDEM_MM_BM;
    if (b >= s.ne12 * s.ne13) return;
    const i64 i12 = b % s.ne12, i13 = b / s.ne12;
    const char* wbase = w + (i12 / s.r2) * s.nb02 + (i13 / s.r3) * s.nb03;
    const char* abase = src1 + i12 * s.nb12 + i13 * s.nb13;
    // Loader role: row/column lr of the tile, eight consecutive k at 8 * lp.
    const int lr = t >> 2, lp = t & 3;
    const i64 wrow = m0 + lr, acol = n0 + lr;
    // Compute role: rows m0 + 4 * tr .., columns n0 + 4 * tc ..
    const int tr = t >> 4, tc = t & 15;
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;

    for (i64 k0 = k_begin; k0 < k_end; k0 += TANDEM_MM_BK) {
        const i64 e0 = k0 + 8 * lp;
        float v[8];
        if (wrow < s.m && e0 < k_end) {
            W::load8((const u8*)(wbase + wrow * s.nb01), k_end, e0, v);
        } else {
#pragma unroll
            for (int i = 0; i < 8; ++i) v[i] = 0.0f;
        }
#pragma unroll
        for (int i = 0; i < 8; ++i) wt[8 * lp + i][lr] = v[i];
        const char* acolp = abase + acol * s.nb11;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const bool in = acol < s.n && e0 + i < k_end;
            at[8 * lp + i][lr] = in ? *(const float*)(acolp + (e0 + i) * s.nb10) : 0.0f;
        }
        __syncthreads();
#pragma unroll 8
        for (int kk = 0; kk < TANDEM_MM_BK; ++kk) {
            const float4 a = *(const float4*)&wt[kk][4 * tr];
            const float4 x = *(const float4*)&at[kk][4 * tc];
            const float av[4] = {a.x, a.y, a.z, a.w};
            const float xv[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] += av[i] * xv[j];
        }
        __syncthreads();
    }
    if (out == nullptr) {
        out = dst + i12 * s.nb2 + i13 * s.nb3;
        out_nb1 = s.nb1;
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        const i64 col = n0 + 4 * tc + j;
        if (col >= s.n) continue;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const i64 row = m0 + 4 * tr + i;
            if (row < s.m) *(float*)(out + row * 4 + col * out_nb1) = acc[i][j];
        }
    }
}

#define TANDEM_MM_ARGS const char *w, const char *src1, char *dst, tandem_mm_shape s
#define TANDEM_MM_KERNEL extern "C" __global__ void __launch_bounds__(TANDEM_MM_THREADS)

TANDEM_MM_KERNEL tandem_gemm_f32(TANDEM_MM_ARGS) { tandem_gemm_tile<tandem_mm_f32>(w, src1, dst, s, blockIdx.z, 0, s.k, nullptr, 0); }
TANDEM_MM_KERNEL tandem_gemm_f16(TANDEM_MM_ARGS) { tandem_gemm_tile<tandem_mm_f16>(w, src1, dst, s, blockIdx.z, 0, s.k, nullptr, 0); }
TANDEM_MM_KERNEL tandem_gemm_bf16(TANDEM_MM_ARGS) { tandem_gemm_tile<tandem_mm_bf16>(w, src1, dst, s, blockIdx.z, 0, s.k, nullptr, 0); }
TANDEM_MM_KERNEL tandem_gemm_q4_0(TANDEM_MM_ARGS) { tandem_gemm_tile<tandem_mm_quant<tandem_mm_q4_0>>(w, src1, dst, s, blockIdx.z, 0, s.k, nullptr, 0); }
TANDEM_MM_KERNEL tandem_gemm_q4_1(TANDEM_MM_ARGS) { tandem_gemm_tile<tandem_mm_quant<tandem_mm_q4_1>>(w, src1, dst, s, blockIdx.z, 0, s.k, nullptr, 0); }
TANDEM_MM_KERNEL tandem_gemm_q5_0(TANDEM_MM_ARGS) { tandem_gemm_tile<tandem_mm_quant<tandem_mm_q5_0>>(w, src1, dst, s, blockIdx.z, 0, s.k, nullptr, 0); }
TANDEM_MM_KERNEL tandem_gemm_q5_1(TANDEM_MM_ARGS) { tandem_gemm_tile<tandem_mm_quant<tandem_mm_q5_1>>(w, src1, dst, s, blockIdx.z, 0, s.k, nullptr, 0); }
TANDEM_MM_KERNEL tandem_gemm_q8_0(TANDEM_MM_ARGS) { tandem_gemm_tile<tandem_mm_quant<tandem_mm_q8_0>>(w, src1, dst, s, blockIdx.z, 0, s.k, nullptr, 0); }
TANDEM_MM_KERNEL tandem_gemm_q2_K(TANDEM_MM_ARGS) { tandem_gemm_tile<tandem_mm_quant<tandem_mm_q2_K>>(w, src1, dst, s, blockIdx.z, 0, s.k, nullptr, 0); }
TANDEM_MM_KERNEL tandem_gemm_q3_K(TANDEM_MM_ARGS) { tandem_gemm_tile<tandem_mm_quant<tandem_mm_q3_K>>(w, src1, dst, s, blockIdx.z, 0, s.k, nullptr, 0); }
TANDEM_MM_KERNEL tandem_gemm_q4_K(TANDEM_MM_ARGS) { tandem_gemm_tile<tandem_mm_quant<tandem_mm_q4_K>>(w, src1, dst, s, blockIdx.z, 0, s.k, nullptr, 0); }
TANDEM_MM_KERNEL tandem_gemm_q5_K(TANDEM_MM_ARGS) { tandem_gemm_tile<tandem_mm_quant<tandem_mm_q5_K>>(w, src1, dst, s, blockIdx.z, 0, s.k, nullptr, 0); }
TANDEM_MM_KERNEL tandem_gemm_q6_K(TANDEM_MM_ARGS) { tandem_gemm_tile<tandem_mm_quant<tandem_mm_q6_K>>(w, src1, dst, s, blockIdx.z, 0, s.k, nullptr, 0); }
TANDEM_MM_KERNEL tandem_gemm_iq4_nl(TANDEM_MM_ARGS) { tandem_gemm_tile<tandem_mm_quant<tandem_mm_iq4_nl>>(w, src1, dst, s, blockIdx.z, 0, s.k, nullptr, 0); }

// Split-k for f32 weights when the tiles alone leave most of the device idle (a MoE router: 128
// rows): a single batch, blockIdx.z the k part, each part taking `chunk` values of k (a multiple
// of TANDEM_MM_BK) and storing its sums in partial + part * m * n (column c at c * m); then
// tandem_gemm_sum_parts adds the parts in order, so the result does not depend on which block
// finishes first.
extern "C" __global__ void __launch_bounds__(TANDEM_MM_THREADS)
tandem_gemm_f32_parts(TANDEM_MM_ARGS, char* partial, i64 chunk) {
    const i64 k_begin = (i64)blockIdx.z * chunk;
    const i64 k_end = k_begin + chunk < s.k ? k_begin + chunk : s.k;
    char* out = partial + (i64)blockIdx.z * s.m * s.n * 4;
    tandem_gemm_tile<tandem_mm_f32>(w, src1, dst, s, 0, k_begin, k_end, out, s.m * 4);
}

// dst[row, col] = sum over parts, in order, of partial[part][col * m + row]; one thread per
// output, x over rows.
extern "C" __global__ void __launch_bounds__(256)
tandem_gemm_sum_parts(const char* partial, char* dst, tandem_mm_shape s, i64 parts) {
    const i64 row = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= s.m) return;
    for (i64 col = blockIdx.y; col < s.n; col += gridDim.y) {
        const float* p = (const float*)partial + col * s.m + row;
        float acc = p[0];
        for (i64 q = 1; q < parts; ++q) acc += p[q * s.m * s.n];
        *(float*)(dst + row * 4 + col * s.nb1) = acc;
    }
}
