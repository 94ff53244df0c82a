// SET_ROWS: dst[:, idx[i, i2 % c1, i3 % c2], i2, i3] = convert(src0[:, i, i2, i3]) for f32 source
// rows written as f32, f16, bf16 or q8_0/q4_0/q4_1/q5_0/q5_1 blocks. dst is a view of the cache
// tensor (the node's result aliases src2), so writing through dst updates the cache in place.
//
// Values: f32 rows are copied as bits; f16 and bf16 round to nearest even exactly like the CPU's
// `half` conversions (a NaN keeps its payload and becomes quiet); quantized blocks use the block
// quantizers of tandem_quant.h, so their bytes equal the CPU quantizer's.
//
// Semantics where the CPU and this kernel must agree without failing:
//   - An index outside 0..dst.ne1 writes nothing for that source row (the CPU rejects the whole
//     graph instead; a kernel cannot, so it skips the row and never writes out of bounds).
//   - When an index repeats within one source plane, only the last source row holding it is
//     written, as on the CPU; no two threads ever write one byte. The host enables this with a
//     hash table in scratch (`table` slots per index plane, a power of two >= 2n): the mark pass
//     records, per index value, the largest source row holding it (atomicMax), and the write pass
//     skips every row that is not that one. With n == 1 no index can repeat and table == 0.
//
// Layout of the write launch: one thread per unit (an element for float rows, a 32-value block
// for quantized rows), flat over [units of a row, n, ne2, ne3] with a grid-stride loop, so
// consecutive threads write consecutive elements or blocks of a row.
#include "tandem_hip.h"

// Compile units: the runtime builds this family a part at a time (-DTANDEM_UNIT=1 and
// TANDEM_UNIT_COMMON for the index checks, _FLOAT for f32/f16/bf16 rows, _<TYPE> for one
// quantized type); without TANDEM_UNIT every entry is defined (kernels-hip/src/fam/convert.rs).
#if !defined(TANDEM_UNIT)
#define TANDEM_UNIT_ALL 1
#endif
#include "tandem_quant.h"

// Mirrors `SetRowsShape` in backend/src/gpu/ops/setrows.rs (four blocks of four i64, four i64).
struct tandem_set_rows_shape {
    i64 ne[4];   // src0 extents: [dst.ne0, n, dst.ne2, dst.ne3]
    i64 nbs[4];  // src0 byte strides
    i64 nbi[4];  // index byte strides (dims 0..2)
    i64 nbd[4];  // dst byte strides (nbd[0] is the element or block size)
    i64 rows;    // dst.ne1: valid indices are 0..rows
    i64 idx_ne1; // index planes along dim 2 (c1 | ne2)
    i64 idx_ne2; // index planes along dim 3 (c2 | ne3)
    i64 table;   // dedup slots per index plane (a power of two), 0 when no index can repeat
};

#define TANDEM_SET_ROWS_EMPTY 0xffffffffffffffffull

// Index value of source row i in index plane (k2, k3), widened to i64.
template <typename I>
TANDEM_DEVICE i64 tandem_set_rows_index(const char* idx, const tandem_set_rows_shape& s, i64 i, i64 k2, i64 k3) {
    return (i64)*(const I*)(idx + i * s.nbi[0] + k2 * s.nbi[1] + k3 * s.nbi[2]);
}

// First probe slot of `key` in a table of `slots` (a power of two <= 2^32) slots.
TANDEM_DEVICE u64 tandem_set_rows_hash(u64 key, i64 slots) {
    return ((key * 0x9e3779b97f4a7c15ull) >> 32) & (u64)(slots - 1);
}

// Clears `slots` table entries: no key, no row.
#if TANDEM_UNIT_ALL || TANDEM_UNIT_COMMON
extern "C" __global__ void __launch_bounds__(256)
tandem_set_rows_clear(u64* keys, i32* lasts, i64 slots) {
    for (i64 k = (i64)blockIdx.x * blockDim.x + threadIdx.x; k < slots; k += (i64)gridDim.x * blockDim.x) {
        keys[k] = TANDEM_SET_ROWS_EMPTY;
        lasts[k] = -1;
    }
}
#endif

// Records, for every valid index value of every index plane, the largest source row holding it.
// Open addressing with linear probing; a table of >= 2n slots always has a free slot.
template <typename I>
TANDEM_DEVICE void tandem_set_rows_mark(const char* idx, u64* keys, i32* lasts, const tandem_set_rows_shape& s) {
    const i64 n = s.ne[1];
    const i64 total = n * s.idx_ne1 * s.idx_ne2;
    const u64 wrap = (u64)(s.table - 1);
    for (i64 k = (i64)blockIdx.x * blockDim.x + threadIdx.x; k < total; k += (i64)gridDim.x * blockDim.x) {
        const i64 i = k % n;
        const i64 p = k / n;
        const i64 v = tandem_set_rows_index<I>(idx, s, i, p % s.idx_ne1, p / s.idx_ne1);
        if (v < 0 || v >= s.rows) {
            continue;  // this row is skipped by the write pass anyway
        }
        u64* pk = keys + p * s.table;
        i32* pl = lasts + p * s.table;
        u64 slot = tandem_set_rows_hash((u64)v, s.table);
        for (i64 probe = 0; probe < s.table; probe++) {
            const u64 prev = atomicCAS(pk + slot, TANDEM_SET_ROWS_EMPTY, (u64)v);
            if (prev == TANDEM_SET_ROWS_EMPTY || prev == (u64)v) {
                atomicMax(pl + slot, (i32)i);
                break;
            }
            slot = (slot + 1) & wrap;
        }
    }
}

#if TANDEM_UNIT_ALL || TANDEM_UNIT_COMMON
extern "C" __global__ void __launch_bounds__(256)
tandem_set_rows_mark_i32(const char* idx, u64* keys, i32* lasts, tandem_set_rows_shape s) {
    tandem_set_rows_mark<i32>(idx, keys, lasts, s);
}
#endif

#if TANDEM_UNIT_ALL || TANDEM_UNIT_COMMON
extern "C" __global__ void __launch_bounds__(256)
tandem_set_rows_mark_i64(const char* idx, u64* keys, i32* lasts, tandem_set_rows_shape s) {
    tandem_set_rows_mark<i64>(idx, keys, lasts, s);
}
#endif

// The dst row source row (i, i2, i3) writes, or -1 when it writes nothing (index out of range,
// or a later source row of the plane holds the same index).
template <typename I>
TANDEM_DEVICE i64 tandem_set_rows_target(const char* idx, const u64* keys, const i32* lasts,
                                         const tandem_set_rows_shape& s, i64 i, i64 i2, i64 i3) {
    const i64 k2 = i2 % s.idx_ne1;
    const i64 k3 = i3 % s.idx_ne2;
    const i64 v = tandem_set_rows_index<I>(idx, s, i, k2, k3);
    if (v < 0 || v >= s.rows) {
        return -1;
    }
    if (s.table == 0) {
        return v;
    }
    const i64 base = (k3 * s.idx_ne1 + k2) * s.table;
    const u64 wrap = (u64)(s.table - 1);
    u64 slot = tandem_set_rows_hash((u64)v, s.table);
    for (i64 probe = 0; probe < s.table; probe++) {
        const u64 key = keys[base + slot];
        if (key == (u64)v) {
            return lasts[base + slot] == (i32)i ? v : -1;
        }
        if (key == TANDEM_SET_ROWS_EMPTY) {
            return -1;  // not recorded: cannot happen for a valid index, write nothing
        }
        slot = (slot + 1) & wrap;
    }
    return -1;
}

// f32 -> f16 bits as the CPU's `half` conversion: a NaN stays a NaN with the top of its payload
// and the quiet bit set (the hardware conversion would return a canonical NaN); everything else
// rounds to nearest even, overflowing to +-inf.
TANDEM_DEVICE u16 tandem_set_rows_f16_bits(float x) {
    const u32 u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return (u16)(((u >> 16) & 0x8000u) | 0x7e00u | ((u & 0x007fffffu) >> 13));
    }
    return tandem_f32_to_f16(x);
}

// Unit writers: UNIT source elements become one dst unit (an element or a block).
struct tandem_set_rows_to_f32 {
    static constexpr int UNIT = 1;
    static __device__ __forceinline__ void write(const char* a, i64 nbs0, i64 u, char* d) {
        ((u32*)d)[u] = *(const u32*)(a + u * nbs0);
    }
};
struct tandem_set_rows_to_f16 {
    static constexpr int UNIT = 1;
    static __device__ __forceinline__ void write(const char* a, i64 nbs0, i64 u, char* d) {
        ((u16*)d)[u] = tandem_set_rows_f16_bits(*(const float*)(a + u * nbs0));
    }
};
struct tandem_set_rows_to_bf16 {
    static constexpr int UNIT = 1;
    static __device__ __forceinline__ void write(const char* a, i64 nbs0, i64 u, char* d) {
        ((u16*)d)[u] = tandem_f32_to_bf16(*(const float*)(a + u * nbs0));
    }
};
template <typename Q> struct tandem_set_rows_to_block {
    static constexpr int UNIT = 32;
    static __device__ __forceinline__ void write(const char* a, i64 nbs0, i64 u, char* d) {
        float x[32];
        const char* from = a + u * 32 * nbs0;
        for (int e = 0; e < 32; e++) {
            x[e] = *(const float*)(from + e * nbs0);
        }
        Q::run(x, (typename Q::block*)d + u);
    }
};

template <typename I, typename W>
TANDEM_DEVICE void tandem_set_rows(const char* src, const char* idx, char* dst, const u64* keys, const i32* lasts,
                                   const tandem_set_rows_shape& s) {
    const i64 units = s.ne[0] / W::UNIT;
    const i64 total = units * s.ne[1] * s.ne[2] * s.ne[3];
    for (i64 k = (i64)blockIdx.x * blockDim.x + threadIdx.x; k < total; k += (i64)gridDim.x * blockDim.x) {
        const i64 r = k / units;
        const i64 u = k - r * units;
        const i64 i = r % s.ne[1];
        const i64 i2 = (r / s.ne[1]) % s.ne[2];
        const i64 i3 = r / (s.ne[1] * s.ne[2]);
        const i64 row = tandem_set_rows_target<I>(idx, keys, lasts, s, i, i2, i3);
        if (row < 0) {
            continue;
        }
        const char* a = src + i * s.nbs[1] + i2 * s.nbs[2] + i3 * s.nbs[3];
        char* d = dst + row * s.nbd[1] + i2 * s.nbd[2] + i3 * s.nbd[3];
        W::write(a, s.nbs[0], u, d);
    }
}

// One entry per (dst type, index type); the names are listed in kernels-hip/src/fam/convert.rs.
#if TANDEM_UNIT_ALL || TANDEM_UNIT_FLOAT
extern "C" __global__ void __launch_bounds__(256)
tandem_set_rows_f32_i32(const char* src, const char* idx, char* dst, const u64* keys, const i32* lasts,
                        tandem_set_rows_shape s) {
    tandem_set_rows<i32, tandem_set_rows_to_f32>(src, idx, dst, keys, lasts, s);
}
#endif

#if TANDEM_UNIT_ALL || TANDEM_UNIT_FLOAT
extern "C" __global__ void __launch_bounds__(256)
tandem_set_rows_f32_i64(const char* src, const char* idx, char* dst, const u64* keys, const i32* lasts,
                        tandem_set_rows_shape s) {
    tandem_set_rows<i64, tandem_set_rows_to_f32>(src, idx, dst, keys, lasts, s);
}
#endif

#if TANDEM_UNIT_ALL || TANDEM_UNIT_FLOAT
extern "C" __global__ void __launch_bounds__(256)
tandem_set_rows_f16_i32(const char* src, const char* idx, char* dst, const u64* keys, const i32* lasts,
                        tandem_set_rows_shape s) {
    tandem_set_rows<i32, tandem_set_rows_to_f16>(src, idx, dst, keys, lasts, s);
}
#endif

#if TANDEM_UNIT_ALL || TANDEM_UNIT_FLOAT
extern "C" __global__ void __launch_bounds__(256)
tandem_set_rows_f16_i64(const char* src, const char* idx, char* dst, const u64* keys, const i32* lasts,
                        tandem_set_rows_shape s) {
    tandem_set_rows<i64, tandem_set_rows_to_f16>(src, idx, dst, keys, lasts, s);
}
#endif

#if TANDEM_UNIT_ALL || TANDEM_UNIT_FLOAT
extern "C" __global__ void __launch_bounds__(256)
tandem_set_rows_bf16_i32(const char* src, const char* idx, char* dst, const u64* keys, const i32* lasts,
                        tandem_set_rows_shape s) {
    tandem_set_rows<i32, tandem_set_rows_to_bf16>(src, idx, dst, keys, lasts, s);
}
#endif

#if TANDEM_UNIT_ALL || TANDEM_UNIT_FLOAT
extern "C" __global__ void __launch_bounds__(256)
tandem_set_rows_bf16_i64(const char* src, const char* idx, char* dst, const u64* keys, const i32* lasts,
                        tandem_set_rows_shape s) {
    tandem_set_rows<i64, tandem_set_rows_to_bf16>(src, idx, dst, keys, lasts, s);
}
#endif

#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q8_0
extern "C" __global__ void __launch_bounds__(256)
tandem_set_rows_q8_0_i32(const char* src, const char* idx, char* dst, const u64* keys, const i32* lasts,
                        tandem_set_rows_shape s) {
    tandem_set_rows<i32, tandem_set_rows_to_block<tandem_quantize_q8_0> >(src, idx, dst, keys, lasts, s);
}
#endif

#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q8_0
extern "C" __global__ void __launch_bounds__(256)
tandem_set_rows_q8_0_i64(const char* src, const char* idx, char* dst, const u64* keys, const i32* lasts,
                        tandem_set_rows_shape s) {
    tandem_set_rows<i64, tandem_set_rows_to_block<tandem_quantize_q8_0> >(src, idx, dst, keys, lasts, s);
}
#endif

#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q4_0
extern "C" __global__ void __launch_bounds__(256)
tandem_set_rows_q4_0_i32(const char* src, const char* idx, char* dst, const u64* keys, const i32* lasts,
                        tandem_set_rows_shape s) {
    tandem_set_rows<i32, tandem_set_rows_to_block<tandem_quantize_q4_0> >(src, idx, dst, keys, lasts, s);
}
#endif

#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q4_0
extern "C" __global__ void __launch_bounds__(256)
tandem_set_rows_q4_0_i64(const char* src, const char* idx, char* dst, const u64* keys, const i32* lasts,
                        tandem_set_rows_shape s) {
    tandem_set_rows<i64, tandem_set_rows_to_block<tandem_quantize_q4_0> >(src, idx, dst, keys, lasts, s);
}
#endif

#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q4_1
extern "C" __global__ void __launch_bounds__(256)
tandem_set_rows_q4_1_i32(const char* src, const char* idx, char* dst, const u64* keys, const i32* lasts,
                        tandem_set_rows_shape s) {
    tandem_set_rows<i32, tandem_set_rows_to_block<tandem_quantize_q4_1> >(src, idx, dst, keys, lasts, s);
}
#endif

#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q4_1
extern "C" __global__ void __launch_bounds__(256)
tandem_set_rows_q4_1_i64(const char* src, const char* idx, char* dst, const u64* keys, const i32* lasts,
                        tandem_set_rows_shape s) {
    tandem_set_rows<i64, tandem_set_rows_to_block<tandem_quantize_q4_1> >(src, idx, dst, keys, lasts, s);
}
#endif

#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q5_0
extern "C" __global__ void __launch_bounds__(256)
tandem_set_rows_q5_0_i32(const char* src, const char* idx, char* dst, const u64* keys, const i32* lasts,
                        tandem_set_rows_shape s) {
    tandem_set_rows<i32, tandem_set_rows_to_block<tandem_quantize_q5_0> >(src, idx, dst, keys, lasts, s);
}
#endif

#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q5_0
extern "C" __global__ void __launch_bounds__(256)
tandem_set_rows_q5_0_i64(const char* src, const char* idx, char* dst, const u64* keys, const i32* lasts,
                        tandem_set_rows_shape s) {
    tandem_set_rows<i64, tandem_set_rows_to_block<tandem_quantize_q5_0> >(src, idx, dst, keys, lasts, s);
}
#endif

#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q5_1
extern "C" __global__ void __launch_bounds__(256)
tandem_set_rows_q5_1_i32(const char* src, const char* idx, char* dst, const u64* keys, const i32* lasts,
                        tandem_set_rows_shape s) {
    tandem_set_rows<i32, tandem_set_rows_to_block<tandem_quantize_q5_1> >(src, idx, dst, keys, lasts, s);
}
#endif

#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q5_1
extern "C" __global__ void __launch_bounds__(256)
tandem_set_rows_q5_1_i64(const char* src, const char* idx, char* dst, const u64* keys, const i32* lasts,
                        tandem_set_rows_shape s) {
    tandem_set_rows<i64, tandem_set_rows_to_block<tandem_quantize_q5_1> >(src, idx, dst, keys, lasts, s);
}
#endif
