// GET_ROWS: dst[:, i10, i11, i12] = src0[:, idx[i10, i11, i12], i11, i12] as f32, for f32 (and
// i32, copied as bits), f16, bf16 and the weight quantizations. Each value comes from the
// element functions of tandem_quant.h, so it has the same bits as tandem's CPU dequantizers.
//
// Layout of the launch: blockIdx.y walks dst rows (grid-stride), x threads walk the elements of
// a row, one element each, so consecutive threads write consecutive floats and read neighbouring
// quant bytes. Rows of src0 are contiguous blocks (the predicate checks it); every other stride
// is free, in bytes as ggml has them.
//
// An index outside 0..src0.ne[1] (the CPU rejects the whole graph for it) reads nothing: the
// kernel writes zeros into that dst row.
#include "tandem_hip.h"
#include "tandem_quant.h"

// Mirrors `GetRowsShape` in backend/src/gpu/ops/convert.rs (four blocks of four i64, one i64).
struct tandem_get_rows_shape {
    i64 ne[4];   // dst extents: [src0.ne0, n, src0.ne2, src0.ne3]
    i64 nbs[4];  // src0 byte strides (nbs[0] is unused: blocks are contiguous)
    i64 nbi[4];  // index byte strides (dims 0..2)
    i64 nbd[4];  // dst byte strides (nbd[0] is 4)
    i64 rows;    // src0.ne[1]: the valid indices are 0..rows
};

template <typename B>
TANDEM_DEVICE void tandem_get_rows(const char* src, const char* idx, char* dst, const tandem_get_rows_shape& s) {
    typedef tandem_dequant_traits<B> T;
    const i64 rows = s.ne[1] * s.ne[2] * s.ne[3];
    const i64 step0 = (i64)gridDim.x * blockDim.x;
    for (i64 r = blockIdx.y; r < rows; r += gridDim.y) {
        const i64 i10 = r % s.ne[1];
        const i64 i11 = (r / s.ne[1]) % s.ne[2];
        const i64 i12 = r / (s.ne[1] * s.ne[2]);
        const i64 row = *(const i32*)(idx + i10 * s.nbi[0] + i11 * s.nbi[1] + i12 * s.nbi[2]);
        float* d = (float*)(dst + i10 * s.nbd[1] + i11 * s.nbd[2] + i12 * s.nbd[3]);
        if (row < 0 || row >= s.rows) {
            for (i64 i0 = (i64)blockIdx.x * blockDim.x + threadIdx.x; i0 < s.ne[0]; i0 += step0) {
                d[i0] = 0.0f;
            }
            continue;
        }
        const B* a = (const B*)(src + row * s.nbs[1] + i11 * s.nbs[2] + i12 * s.nbs[3]);
        for (i64 i0 = (i64)blockIdx.x * blockDim.x + threadIdx.x; i0 < s.ne[0]; i0 += step0) {
            d[i0] = T::get(a + i0 / T::QK, (int)(i0 % T::QK));
        }
    }
}

// f32 and i32 rows: a 4-byte copy that keeps every bit (NaN payloads, integers).
extern "C" __global__ void __launch_bounds__(256)
tandem_get_rows_b32(const char* src, const char* idx, char* dst, tandem_get_rows_shape s) {
    const i64 rows = s.ne[1] * s.ne[2] * s.ne[3];
    const i64 step0 = (i64)gridDim.x * blockDim.x;
    for (i64 r = blockIdx.y; r < rows; r += gridDim.y) {
        const i64 i10 = r % s.ne[1];
        const i64 i11 = (r / s.ne[1]) % s.ne[2];
        const i64 i12 = r / (s.ne[1] * s.ne[2]);
        const i64 row = *(const i32*)(idx + i10 * s.nbi[0] + i11 * s.nbi[1] + i12 * s.nbi[2]);
        u32* d = (u32*)(dst + i10 * s.nbd[1] + i11 * s.nbd[2] + i12 * s.nbd[3]);
        const bool valid = row >= 0 && row < s.rows;
        const u32* a = (const u32*)(src + (valid ? row : 0) * s.nbs[1] + i11 * s.nbs[2] + i12 * s.nbs[3]);
        for (i64 i0 = (i64)blockIdx.x * blockDim.x + threadIdx.x; i0 < s.ne[0]; i0 += step0) {
            d[i0] = valid ? a[i0] : 0u;
        }
    }
}

// One entry per source type; the names are listed in kernels-hip/src/fam/convert.rs.
extern "C" __global__ void __launch_bounds__(256)
tandem_get_rows_f16(const char* src, const char* idx, char* dst, tandem_get_rows_shape s) {
    tandem_get_rows<tandem_f16_tag>(src, idx, dst, s);
}

extern "C" __global__ void __launch_bounds__(256)
tandem_get_rows_bf16(const char* src, const char* idx, char* dst, tandem_get_rows_shape s) {
    tandem_get_rows<tandem_bf16_tag>(src, idx, dst, s);
}

extern "C" __global__ void __launch_bounds__(256)
tandem_get_rows_q4_0(const char* src, const char* idx, char* dst, tandem_get_rows_shape s) {
    tandem_get_rows<tandem_block_q4_0>(src, idx, dst, s);
}

extern "C" __global__ void __launch_bounds__(256)
tandem_get_rows_q4_1(const char* src, const char* idx, char* dst, tandem_get_rows_shape s) {
    tandem_get_rows<tandem_block_q4_1>(src, idx, dst, s);
}

extern "C" __global__ void __launch_bounds__(256)
tandem_get_rows_q5_0(const char* src, const char* idx, char* dst, tandem_get_rows_shape s) {
    tandem_get_rows<tandem_block_q5_0>(src, idx, dst, s);
}

extern "C" __global__ void __launch_bounds__(256)
tandem_get_rows_q5_1(const char* src, const char* idx, char* dst, tandem_get_rows_shape s) {
    tandem_get_rows<tandem_block_q5_1>(src, idx, dst, s);
}

extern "C" __global__ void __launch_bounds__(256)
tandem_get_rows_q8_0(const char* src, const char* idx, char* dst, tandem_get_rows_shape s) {
    tandem_get_rows<tandem_block_q8_0>(src, idx, dst, s);
}

extern "C" __global__ void __launch_bounds__(256)
tandem_get_rows_q2_K(const char* src, const char* idx, char* dst, tandem_get_rows_shape s) {
    tandem_get_rows<tandem_block_q2_K>(src, idx, dst, s);
}

extern "C" __global__ void __launch_bounds__(256)
tandem_get_rows_q3_K(const char* src, const char* idx, char* dst, tandem_get_rows_shape s) {
    tandem_get_rows<tandem_block_q3_K>(src, idx, dst, s);
}

extern "C" __global__ void __launch_bounds__(256)
tandem_get_rows_q4_K(const char* src, const char* idx, char* dst, tandem_get_rows_shape s) {
    tandem_get_rows<tandem_block_q4_K>(src, idx, dst, s);
}

extern "C" __global__ void __launch_bounds__(256)
tandem_get_rows_q5_K(const char* src, const char* idx, char* dst, tandem_get_rows_shape s) {
    tandem_get_rows<tandem_block_q5_K>(src, idx, dst, s);
}

extern "C" __global__ void __launch_bounds__(256)
tandem_get_rows_q6_K(const char* src, const char* idx, char* dst, tandem_get_rows_shape s) {
    tandem_get_rows<tandem_block_q6_K>(src, idx, dst, s);
}

extern "C" __global__ void __launch_bounds__(256)
tandem_get_rows_iq4_nl(const char* src, const char* idx, char* dst, tandem_get_rows_shape s) {
    tandem_get_rows<tandem_block_iq4_nl>(src, idx, dst, s);
}
