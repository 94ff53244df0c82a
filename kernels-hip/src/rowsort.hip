// ARGSORT of f32 rows (ggml byte strides) into i32 indices, ascending or descending, with the
// CPU's exact order: equal values keep the lower index first, NaN goes after every number in
// both orders, -0 equals +0.
//
// Each element becomes one u64 key, (order key of the value) << 32 | index, whose integer order
// is the wanted order; every key is distinct, so any correct sort gives the CPU's answer. One
// block sorts one row with a bitonic network in dynamic shared memory, padded to a power of two
// with keys above every real one; the launcher sizes the padding (rows up to 4096 fit the 48 KiB
// every device grants without opt-in).
#include "tandem_hip.h"

// Mirrors `SortShape` in backend/src/gpu/ops/argsort.rs (three blocks of four i64).
struct tandem_sort_shape {
    i64 ne[4];   // extents of src and dst
    i64 nbs[4];  // src byte strides
    i64 nbd[4];  // dst byte strides
};

// Unsigned key whose order is the ascending order of v; NaN maps to the largest key.
TANDEM_DEVICE u32 tandem_sort_ascending_key(float v) {
    u32 bits = __float_as_uint(v);
    if ((bits & 0x7fffffffu) > 0x7f800000u) {
        return 0xffffffffu;
    }
    if (bits == 0x80000000u) {
        bits = 0;  // -0 sorts as +0
    }
    return (bits >> 31) ? ~bits : (bits | 0x80000000u);
}

// Unsigned key for descending order, NaN still last. Numbers have ascending keys strictly
// between 0 and 0xffffffff, so their complements stay below the NaN key as well.
TANDEM_DEVICE u32 tandem_sort_descending_key(float v) {
    const u32 k = tandem_sort_ascending_key(v);
    return k == 0xffffffffu ? k : ~k;
}

// `padded` is a power of two >= ne[0]; dynamic shared memory holds `padded` u64 keys.
extern "C" __global__ void __launch_bounds__(1024)
tandem_argsort_f32(const char* src, char* dst, tandem_sort_shape s, i32 descending, i32 padded) {
    extern __shared__ u64 tandem_sort_keys[];
    const i64 rows = s.ne[1] * s.ne[2] * s.ne[3];
    const i32 n = (i32)s.ne[0];
    for (i64 r = blockIdx.x; r < rows; r += gridDim.x) {
        const i64 i1 = r % s.ne[1];
        const i64 i2 = (r / s.ne[1]) % s.ne[2];
        const i64 i3 = r / (s.ne[1] * s.ne[2]);
        const char* x = src + i1 * s.nbs[1] + i2 * s.nbs[2] + i3 * s.nbs[3];
        char* d = dst + i1 * s.nbd[1] + i2 * s.nbd[2] + i3 * s.nbd[3];

        for (i32 i = threadIdx.x; i < padded; i += blockDim.x) {
            u64 key = ~0ull;
            if (i < n) {
                const float v = *(const float*)(x + (i64)i * s.nbs[0]);
                const u32 k = descending ? tandem_sort_descending_key(v) : tandem_sort_ascending_key(v);
                key = ((u64)k << 32) | (u64)(u32)i;
            }
            tandem_sort_keys[i] = key;
        }
        __syncthreads();

        // Bitonic network: stage `size` merges runs of that length, `stride` is the distance of
        // the compared pair. The lower index of each pair does the compare-exchange.
        for (i32 size = 2; size <= padded; size <<= 1) {
            for (i32 stride = size >> 1; stride > 0; stride >>= 1) {
                for (i32 i = threadIdx.x; i < padded; i += blockDim.x) {
                    const i32 j = i ^ stride;
                    if (j > i) {
                        const u64 a = tandem_sort_keys[i];
                        const u64 b = tandem_sort_keys[j];
                        const bool up = (i & size) == 0;
                        if ((a > b) == up) {
                            tandem_sort_keys[i] = b;
                            tandem_sort_keys[j] = a;
                        }
                    }
                }
                __syncthreads();
            }
        }

        for (i32 i = threadIdx.x; i < n; i += blockDim.x) {
            *(i32*)(d + (i64)i * s.nbd[0]) = (i32)(u32)tandem_sort_keys[i];
        }
        __syncthreads();
    }
}

// ---- MoE routing: softmax, the top k by ARGSORT's order, their probabilities ----

// Mirrors `TopkMoeShape` in backend/src/gpu/ops/argsort.rs.
struct tandem_topk_moe_shape {
    i64 e, t, k;     // logits per token (experts), tokens, experts used
    i64 nbx1;        // logits row stride (elements contiguous f32)
    i64 nbi1;        // ids row stride (i32 contiguous: the ARGSORT result's first k columns)
    i64 nbw1, nbw2;  // weights byte strides per used expert and per token
};

#define TANDEM_TOPK_PER_THREAD 8
#define TANDEM_TOPK_MAX_WAVES 32

// Smallest key over one wave; every lane gets it.
TANDEM_DEVICE u64 tandem_wave_min_u64(u64 v) {
    for (int offset = warpSize / 2; offset > 0; offset >>= 1) {
        const u32 hi = __shfl_xor((u32)(v >> 32), offset);
        const u32 lo = __shfl_xor((u32)v, offset);
        const u64 o = ((u64)hi << 32) | (u64)lo;
        v = o < v ? o : v;
    }
    return v;
}

// Block-wide max (MAX) or sum of v over `slots`, which no thread may still be reading from an
// earlier call; every thread gets the result.
template <bool MAX>
TANDEM_DEVICE float tandem_topk_block_reduce(float v, float* slots) {
    v = MAX ? tandem_wave_max(v) : tandem_wave_sum(v);
    const int waves = (int)((blockDim.x + warpSize - 1) / warpSize);
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

// What llama.cpp's MoE router computes from each token's logits, in one block per token:
// p = soft_max(logits) (scale 1, no mask: max, exponentials, their sum, times its inverse),
// ids = the first k columns of ARGSORT(p, descending) (the same keys as tandem_argsort_f32, so
// ties and NaN fall as the CPU orders them), weights = GET_ROWS(p, ids). The rest of the ARGSORT
// row and p itself are not written: the plan fuses these nodes only where nothing else reads
// them. Each thread holds up to TANDEM_TOPK_PER_THREAD logits; k rounds each take the block's
// smallest key, whose owner writes its index and probability.
extern "C" __global__ void __launch_bounds__(256)
tandem_topk_moe_f32(const char* logits, char* ids, char* weights, tandem_topk_moe_shape s) {
    tandem_grid_release();
    __shared__ float max_slots[TANDEM_TOPK_MAX_WAVES];
    __shared__ float sum_slots[TANDEM_TOPK_MAX_WAVES];
    __shared__ u64 key_slots[2][TANDEM_TOPK_MAX_WAVES];
    const int waves = (int)((blockDim.x + warpSize - 1) / warpSize);
    for (i64 r = blockIdx.x; r < s.t; r += gridDim.x) {
        const float* x = (const float*)(logits + r * s.nbx1);
        float v[TANDEM_TOPK_PER_THREAD];
        float mx = -TANDEM_INF;
#pragma unroll
        for (int j = 0; j < TANDEM_TOPK_PER_THREAD; ++j) {
            const i64 i = threadIdx.x + (i64)j * blockDim.x;
            v[j] = i < s.e ? x[i] : -TANDEM_INF;
            mx = fmaxf(mx, v[j]);
        }
        mx = tandem_topk_block_reduce<true>(mx, max_slots);
        float part = 0.0f;
#pragma unroll
        for (int j = 0; j < TANDEM_TOPK_PER_THREAD; ++j) {
            const i64 i = threadIdx.x + (i64)j * blockDim.x;
            if (i < s.e) {
                v[j] = expf(v[j] - mx);
                part += v[j];
            }
        }
        const float inv = 1.0f / tandem_topk_block_reduce<false>(part, sum_slots);
        u64 key[TANDEM_TOPK_PER_THREAD];
#pragma unroll
        for (int j = 0; j < TANDEM_TOPK_PER_THREAD; ++j) {
            const i64 i = threadIdx.x + (i64)j * blockDim.x;
            key[j] = ~0ull;
            if (i < s.e) {
                v[j] *= inv;
                key[j] = ((u64)tandem_sort_descending_key(v[j]) << 32) | (u64)(u32)i;
            }
        }
        for (i64 q = 0; q < s.k; ++q) {
            u64 best = ~0ull;
#pragma unroll
            for (int j = 0; j < TANDEM_TOPK_PER_THREAD; ++j) best = key[j] < best ? key[j] : best;
            best = tandem_wave_min_u64(best);
            // Alternate slots: a thread writing round q + 2's has passed round q + 1's barrier,
            // so every thread has read round q's by then.
            u64* slots = key_slots[q & 1];
            if (threadIdx.x % warpSize == 0) {
                slots[threadIdx.x / warpSize] = best;
            }
            __syncthreads();
            best = ~0ull;
            for (int w = 0; w < waves; ++w) best = slots[w] < best ? slots[w] : best;
#pragma unroll
            for (int j = 0; j < TANDEM_TOPK_PER_THREAD; ++j) {
                if (key[j] == best) {
                    *(i32*)(ids + r * s.nbi1 + q * 4) = (i32)(u32)best;
                    *(float*)(weights + q * s.nbw1 + r * s.nbw2) = v[j];
                    key[j] = ~0ull;
                }
            }
        }
        // The next token reuses every slot.
        __syncthreads();
    }
}
