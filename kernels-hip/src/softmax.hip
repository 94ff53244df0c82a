// SOFT_MAX on f32 rows with ggml byte strides: softmax(x * scale + slope * mask), with an
// optional f32/f16 mask (row i1 of plane (i2 % mask_ne2, i3 % mask_ne3)), ALiBi slopes per head
// i2 when max_bias > 0, and optional per-head sinks (one more logit that joins the max and the
// sum but has no output).
//
// One block per row (grid-stride over rows), three passes: max, sum of exponentials, scaled
// write. When the launcher gives dynamic shared memory for the row (`cached`), the logits and
// then their exponentials stay there; otherwise every pass reads the row again from memory, so
// any row length works. A row whose logits are all -inf (and no sink) comes out NaN, as on the
// CPU and in ggml.
#include "tandem_hip.h"

// Mirrors `SoftMaxShape` in backend/src/gpu/ops/softmax.rs (200 bytes, no padding).
struct tandem_soft_max_shape {
    i64 ne[4];    // src extents (= dst)
    i64 nbx[4];   // src byte strides
    i64 nbd[4];   // dst byte strides
    i64 nem[4];   // mask extents (dims 2 and 3 repeat over the src's)
    i64 nbm[4];   // mask byte strides
    i64 nbsink;   // byte stride of the sinks vector
    float scale;
    float max_bias;
    float m0;     // ALiBi base of the first n_head_log2 heads
    float m1;     // ALiBi base of the remaining heads
    i32 n_head_log2;
    i32 mask_type;  // 0 none, 1 f32, 2 f16
    i32 has_sinks;
    i32 cached;     // the row fits the dynamic shared memory
};

#define TANDEM_SOFTMAX_MAX_WAVES 32

// Block-wide maximum (NaN skipped, as fmaxf does) or sum; every thread gets the result.
template <bool MAX>
TANDEM_DEVICE float tandem_softmax_block_reduce(float v, float* slots) {
    v = MAX ? tandem_wave_max(v) : tandem_wave_sum(v);
    const int waves = (int)((blockDim.x + warpSize - 1) / warpSize);
    __syncthreads();
    if (threadIdx.x % warpSize == 0) {
        slots[threadIdx.x / warpSize] = v;
    }
    __syncthreads();
    float r = MAX ? -TANDEM_INF : 0.0f;
    for (int w = 0; w < waves; ++w) {
        r = MAX ? fmaxf(r, slots[w]) : r + slots[w];
    }
    return r;
}

// Logit i of a row: x * scale, plus slope * mask when there is a mask.
TANDEM_DEVICE float tandem_softmax_logit(const char* x, const char* m, float slope, i64 i,
                                         const tandem_soft_max_shape& s) {
    float v = *(const float*)(x + i * s.nbx[0]) * s.scale;
    if (s.mask_type == 1) {
        v += slope * *(const float*)(m + i * s.nbm[0]);
    } else if (s.mask_type == 2) {
        v += slope * tandem_f16_to_f32(*(const u16*)(m + i * s.nbm[0]));
    }
    return v;
}

extern "C" __global__ void __launch_bounds__(1024)
tandem_soft_max_f32(const char* src, const char* mask, const char* sinks, char* dst, tandem_soft_max_shape s) {
    extern __shared__ float tandem_softmax_row[];
    __shared__ float slots[TANDEM_SOFTMAX_MAX_WAVES];
    const i64 rows = s.ne[1] * s.ne[2] * s.ne[3];
    const i64 n = s.ne[0];
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const i64 i1 = r % s.ne[1];
        const i64 i2 = (r / s.ne[1]) % s.ne[2];
        const i64 i3 = r / (s.ne[1] * s.ne[2]);
        const char* x = src + i1 * s.nbx[1] + i2 * s.nbx[2] + i3 * s.nbx[3];
        char* d = dst + i1 * s.nbd[1] + i2 * s.nbd[2] + i3 * s.nbd[3];
        const char* m = nullptr;
        float slope = 1.0f;
        if (s.mask_type != 0) {
            m = mask + i1 * s.nbm[1] + (i2 % s.nem[2]) * s.nbm[2] + (i3 % s.nem[3]) * s.nbm[3];
            if (s.max_bias > 0.0f) {
                const i32 h = (i32)i2;
                slope = h < s.n_head_log2 ? powf(s.m0, (float)(h + 1))
                                          : powf(s.m1, (float)(2 * (h - s.n_head_log2) + 1));
            }
        }

        // Pass 1: logits (kept in shared memory when cached) and their maximum.
        float mx = -TANDEM_INF;
        for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
            const float v = tandem_softmax_logit(x, m, slope, i, s);
            if (s.cached) {
                tandem_softmax_row[i] = v;
            }
            mx = fmaxf(mx, v);
        }
        mx = tandem_softmax_block_reduce<true>(mx, slots);
        float sink = 0.0f;
        if (s.has_sinks) {
            sink = *(const float*)(sinks + i2 * s.nbsink);
            mx = fmaxf(mx, sink);
        }

        // Pass 2: exponentials and their sum. A cached entry is rewritten by the thread that
        // wrote it in pass 1, so no barrier is needed in between.
        float part = 0.0f;
        for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
            float v;
            if (s.cached) {
                v = tandem_softmax_row[i];
            } else {
                v = tandem_softmax_logit(x, m, slope, i, s);
            }
            const float e = expf(v - mx);
            if (s.cached) {
                tandem_softmax_row[i] = e;
            }
            part += e;
        }
        float sum = tandem_softmax_block_reduce<false>(part, slots);
        if (s.has_sinks) {
            sum += expf(sink - mx);
        }
        const float inv = 1.0f / sum;

        // Pass 3: normalized write (each element by the thread that computed it).
        for (i64 i = threadIdx.x; i < n; i += blockDim.x) {
            float e;
            if (s.cached) {
                e = tandem_softmax_row[i];
            } else {
                e = expf(tandem_softmax_logit(x, m, slope, i, s) - mx);
            }
            *(float*)(d + i * s.nbd[0]) = e * inv;
        }
        // The shared row is reused by the next row: wait until every thread is done with it.
        __syncthreads();
    }
}
