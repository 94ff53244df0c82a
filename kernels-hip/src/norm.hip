// Row reductions on f32 with ggml byte strides: NORM, RMS_NORM (alone or with the following MUL
// folded in, so the normalized row is never written to memory) and SUM_ROWS.
//
// One block per row (grid-stride over rows). Each thread keeps a float partial over a strided
// part of the row; partials meet through a wave sum and one shared slot per wave, read back in
// wave order, so the result is deterministic. Float partials of a few elements each keep the
// relative error of a 5120-wide sum near 1e-7, far inside the 1e-7 NMSE allowed on the outputs.
//
// Rows of at most TANDEM_NORM_HELD elements a thread (a model's hidden rows with row_block's
// threads) are read into registers once, together with the fused MUL's weights, every load
// issued before the first is used: a decode step's norm is one such row, so the kernel's time is
// its chain of memory round trips, and the next GEMV's weight loads (a dependent launch) crowd
// the memory while it runs. The looping form, loading, using and storing one element at a time
// (a store the compiler cannot prove apart from the next load keeps that load waiting) paid one
// round trip per element, and one more per element for the weights after the reduction. Each
// thread adds its elements in the same order either way, so the results are the same to the bit.
//
// In place (dst sharing src's bytes with the same strides) is safe: every read of a row that
// feeds a reduction happens before the barrier of that reduction, and the final pass reads each
// element in the same thread that then writes it.
#include "tandem_hip.h"

// Mirrors `RowShape` in backend/src/gpu/ops/rows.rs (five blocks of four i64, no padding).
struct tandem_row_shape {
    i64 ne[4];   // src extents; dst has the same (SUM_ROWS: dst dim 0 is 1)
    i64 nbs[4];  // src byte strides
    i64 nbd[4];  // dst byte strides (the MUL's dst when fused)
    i64 new_[4]; // fused MUL: extents of the other operand, each dividing ne; else all 1
    i64 nbw[4];  // fused MUL: byte strides of the other operand
};

// Sum over the block; every thread gets the total. `slots` holds one float per wave; the leading
// barrier lets a block call this again right after a previous call.
TANDEM_DEVICE float tandem_norm_block_sum(float v, float* slots) {
    v = tandem_wave_sum(v);
    const int waves = (int)((blockDim.x + warpSize - 1) / warpSize);
    __syncthreads();
    if (threadIdx.x % warpSize == 0) {
        slots[threadIdx.x / warpSize] = v;
    }
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < waves; ++w) {
        total += slots[w];
    }
    return total;
}

// At most 1024 threads per block and waves of at least 32 lanes.
#define TANDEM_NORM_MAX_WAVES 32
// Elements a thread keeps in registers (above); longer rows take the looping form.
#define TANDEM_NORM_HELD 8

// The fused MUL's operand row for source row (i1, i2, i3), repeated as ggml_mul repeats it.
TANDEM_DEVICE const char* tandem_norm_other_row(const char* other, const tandem_row_shape& s, i64 i1, i64 i2, i64 i3) {
    return other + (i1 % s.new_[1]) * s.nbw[1] + (i2 % s.new_[2]) * s.nbw[2] + (i3 % s.new_[3]) * s.nbw[3];
}

// Element i of the fused MUL's operand row w (repeated along dim 0 where it is shorter).
TANDEM_DEVICE float tandem_norm_other(const char* w, const tandem_row_shape& s, i64 i) {
    const i64 j = s.new_[0] == s.ne[0] ? i : i % s.new_[0];
    return *(const float*)(w + j * s.nbw[0]);
}

template <bool RMS, bool FUSED>
TANDEM_DEVICE void tandem_norm_rows(const char* src, const char* other, char* dst, const tandem_row_shape& s,
                                    float eps) {
    __shared__ float slots[TANDEM_NORM_MAX_WAVES];
    const i64 rows = s.ne[1] * s.ne[2] * s.ne[3];
    const i64 n = s.ne[0];
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        i64 i1, i2, i3;
        tandem_row_index(r, s.ne, i1, i2, i3);
        const char* x = src + i1 * s.nbs[1] + i2 * s.nbs[2] + i3 * s.nbs[3];
        char* d = dst + i1 * s.nbd[1] + i2 * s.nbd[2] + i3 * s.nbd[3];

        if (n <= (i64)TANDEM_NORM_HELD * blockDim.x) {
            const char* w = FUSED ? tandem_norm_other_row(other, s, i1, i2, i3) : nullptr;
            float v[TANDEM_NORM_HELD], g[TANDEM_NORM_HELD];
#pragma unroll
            for (int k = 0; k < TANDEM_NORM_HELD; ++k) {
                const i64 i = threadIdx.x + (i64)k * blockDim.x;
                v[k] = i < n ? *(const float*)(x + i * s.nbs[0]) : 0.0f;
                g[k] = FUSED && i < n ? tandem_norm_other(w, s, i) : 1.0f;
            }
            float mean = 0.0f;
            if (!RMS) {
                float part = 0.0f;
#pragma unroll
                for (int k = 0; k < TANDEM_NORM_HELD; ++k) {
                    if (threadIdx.x + (i64)k * blockDim.x < n) part += v[k];
                }
                mean = tandem_norm_block_sum(part, slots) / (float)n;
            }
            float part = 0.0f;
#pragma unroll
            for (int k = 0; k < TANDEM_NORM_HELD; ++k) {
                if (threadIdx.x + (i64)k * blockDim.x < n) {
                    const float c = v[k] - mean;
                    part += c * c;
                }
            }
            const float var = tandem_norm_block_sum(part, slots) / (float)n;
            const float scale = 1.0f / sqrtf(var + eps);
#pragma unroll
            for (int k = 0; k < TANDEM_NORM_HELD; ++k) {
                const i64 i = threadIdx.x + (i64)k * blockDim.x;
                if (i < n) {
                    const float y = (v[k] - mean) * scale;
                    *(float*)(d + i * s.nbd[0]) = FUSED ? y * g[k] : y;
                }
            }
            continue;
        }

        float mean = 0.0f;
        if (!RMS) {
            float part = 0.0f;
            for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
                part += *(const float*)(x + i * s.nbs[0]);
            }
            mean = tandem_norm_block_sum(part, slots) / (float)n;
        }
        float part = 0.0f;
        for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
            const float v = *(const float*)(x + i * s.nbs[0]) - mean;
            part += v * v;
        }
        const float var = tandem_norm_block_sum(part, slots) / (float)n;
        const float scale = 1.0f / sqrtf(var + eps);

        if (FUSED) {
            const char* w = tandem_norm_other_row(other, s, i1, i2, i3);
            for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
                const float y = (*(const float*)(x + i * s.nbs[0]) - mean) * scale;
                *(float*)(d + i * s.nbd[0]) = y * tandem_norm_other(w, s, i);
            }
        } else {
            for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
                *(float*)(d + i * s.nbd[0]) = (*(const float*)(x + i * s.nbs[0]) - mean) * scale;
            }
        }
        // The next row's first reduction starts with a barrier, so `slots` is free again.
    }
}

// ggml_rms_norm: x / sqrt(mean(x^2) + eps).
extern "C" __global__ void __launch_bounds__(1024)
tandem_rms_norm_f32(const char* src, char* dst, tandem_row_shape s, float eps) {
    tandem_grid_release();
    tandem_norm_rows<true, false>(src, nullptr, dst, s, eps);
}

// ggml_norm: (x - mean) / sqrt(var + eps).
extern "C" __global__ void __launch_bounds__(1024)
tandem_norm_f32(const char* src, char* dst, tandem_row_shape s, float eps) {
    tandem_grid_release();
    tandem_norm_rows<false, false>(src, nullptr, dst, s, eps);
}

// RMS_NORM then MUL by `other` (repeated over the rows as ggml_mul repeats its src1).
extern "C" __global__ void __launch_bounds__(1024)
tandem_rms_norm_mul_f32(const char* src, const char* other, char* dst, tandem_row_shape s, float eps) {
    tandem_grid_release();
    tandem_norm_rows<true, true>(src, other, dst, s, eps);
}

// NORM then MUL by `other`.
extern "C" __global__ void __launch_bounds__(1024)
tandem_norm_mul_f32(const char* src, const char* other, char* dst, tandem_row_shape s, float eps) {
    tandem_grid_release();
    tandem_norm_rows<false, true>(src, other, dst, s, eps);
}

// Byte strides of an ADD's two operands, of the extents of its result (mirrors `AddStrides` in
// backend/src/gpu/ops/rows.rs).
struct tandem_add_strides {
    i64 nba[4];
    i64 nbb[4];
};

// ADD, then RMS_NORM of its result, then MUL by `other`, as a transformer's residual stream meets
// the next norm: sum = a + b is written (later nodes read it), dst = rms_norm(sum) * other. The
// rounding and the reduction order (for the same block size) are those of the ADD kernel and of
// tandem_rms_norm_mul_f32, so the results are theirs to the bit. s describes sum (nbs), dst (nbd)
// and other; a row of a and b is read before the row's first barrier and sum is read back only
// by the thread that wrote it, so sum may be a or b in place.
extern "C" __global__ void __launch_bounds__(1024)
tandem_add_rms_norm_mul_f32(const char* a, const char* b, char* sum, const char* other, char* dst,
                            tandem_row_shape s, tandem_add_strides t, float eps) {
    tandem_grid_release();
    __shared__ float slots[TANDEM_NORM_MAX_WAVES];
    const i64 rows = s.ne[1] * s.ne[2] * s.ne[3];
    const i64 n = s.ne[0];
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        i64 i1, i2, i3;
        tandem_row_index(r, s.ne, i1, i2, i3);
        const char* pa = a + i1 * t.nba[1] + i2 * t.nba[2] + i3 * t.nba[3];
        const char* pb = b + i1 * t.nbb[1] + i2 * t.nbb[2] + i3 * t.nbb[3];
        char* x = sum + i1 * s.nbs[1] + i2 * s.nbs[2] + i3 * s.nbs[3];
        char* d = dst + i1 * s.nbd[1] + i2 * s.nbd[2] + i3 * s.nbd[3];
        const char* w = tandem_norm_other_row(other, s, i1, i2, i3);
        if (n <= (i64)TANDEM_NORM_HELD * blockDim.x) {
            float va[TANDEM_NORM_HELD], vb[TANDEM_NORM_HELD], g[TANDEM_NORM_HELD];
#pragma unroll
            for (int k = 0; k < TANDEM_NORM_HELD; ++k) {
                const i64 i = threadIdx.x + (i64)k * blockDim.x;
                va[k] = i < n ? *(const float*)(pa + i * t.nba[0]) : 0.0f;
                vb[k] = i < n ? *(const float*)(pb + i * t.nbb[0]) : 0.0f;
                g[k] = i < n ? tandem_norm_other(w, s, i) : 0.0f;
            }
            float part = 0.0f;
#pragma unroll
            for (int k = 0; k < TANDEM_NORM_HELD; ++k) {
                const i64 i = threadIdx.x + (i64)k * blockDim.x;
                va[k] = __fadd_rn(va[k], vb[k]);
                if (i < n) {
                    *(float*)(x + i * s.nbs[0]) = va[k];
                    part += va[k] * va[k];
                }
            }
            const float var = tandem_norm_block_sum(part, slots) / (float)n;
            const float scale = 1.0f / sqrtf(var + eps);
#pragma unroll
            for (int k = 0; k < TANDEM_NORM_HELD; ++k) {
                const i64 i = threadIdx.x + (i64)k * blockDim.x;
                if (i < n) *(float*)(d + i * s.nbd[0]) = va[k] * scale * g[k];
            }
            continue;
        }
        float part = 0.0f;
        for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
            const float v = __fadd_rn(*(const float*)(pa + i * t.nba[0]), *(const float*)(pb + i * t.nbb[0]));
            *(float*)(x + i * s.nbs[0]) = v;
            part += v * v;
        }
        const float var = tandem_norm_block_sum(part, slots) / (float)n;
        const float scale = 1.0f / sqrtf(var + eps);
        for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
            const float y = *(const float*)(x + i * s.nbs[0]) * scale;
            *(float*)(d + i * s.nbd[0]) = y * tandem_norm_other(w, s, i);
        }
    }
}

// ggml_sum_rows: dst[0, i1, i2, i3] = sum of src row (i1, i2, i3).
extern "C" __global__ void __launch_bounds__(1024)
tandem_sum_rows_f32(const char* src, char* dst, tandem_row_shape s) {
    __shared__ float slots[TANDEM_NORM_MAX_WAVES];
    const i64 rows = s.ne[1] * s.ne[2] * s.ne[3];
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        i64 i1, i2, i3;
        tandem_row_index(r, s.ne, i1, i2, i3);
        const char* x = src + i1 * s.nbs[1] + i2 * s.nbs[2] + i3 * s.nbs[3];
        float part = 0.0f;
        for (i64 i = threadIdx.x; i < s.ne[0]; i += blockDim.x) {
            part += *(const float*)(x + i * s.nbs[0]);
        }
        const float total = tandem_norm_block_sum(part, slots);
        if (threadIdx.x == 0) {
            *(float*)(dst + i1 * s.nbd[1] + i2 * s.nbd[2] + i3 * s.nbd[3]) = total;
        }
    }
}

// SUM_ROWS, CLAMP and DIV as llama.cpp normalizes MoE routing weights: dst row = src row /
// clamp(sum of the src row, lo, hi). The sum is tandem_sum_rows_f32's (same reduction for the
// same block size), the clamp tandem_unary_any's, the division the binary kernels', so the
// result is the three nodes' to the bit. s.nbw holds dst's strides.
extern "C" __global__ void __launch_bounds__(1024)
tandem_sum_clamp_div_f32(const char* src, char* dst, tandem_row_shape s, float lo, float hi) {
    tandem_grid_release();
    __shared__ float slots[TANDEM_NORM_MAX_WAVES];
    const i64 rows = s.ne[1] * s.ne[2] * s.ne[3];
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        i64 i1, i2, i3;
        tandem_row_index(r, s.ne, i1, i2, i3);
        const char* x = src + i1 * s.nbs[1] + i2 * s.nbs[2] + i3 * s.nbs[3];
        char* d = dst + i1 * s.nbw[1] + i2 * s.nbw[2] + i3 * s.nbw[3];
        float part = 0.0f;
        for (i64 i = threadIdx.x; i < s.ne[0]; i += blockDim.x) {
            part += *(const float*)(x + i * s.nbs[0]);
        }
        float total = tandem_norm_block_sum(part, slots);
        total = total < hi ? total : hi;
        total = total > lo ? total : lo;
        for (i64 i = threadIdx.x; i < s.ne[0]; i += blockDim.x) {
            *(float*)(d + i * s.nbw[0]) = *(const float*)(x + i * s.nbs[0]) / total;
        }
    }
}
