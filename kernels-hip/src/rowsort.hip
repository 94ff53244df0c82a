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
