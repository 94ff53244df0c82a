// Elementwise f32 ops on ggml-strided tensors: binary ADD/SUB/MUL/DIV with src1 broadcast by
// repetition (ggml_can_repeat), and unary SCALE and SILU. Strides are in bytes, as in ggml, so
// views and permuted tensors need no copy. Layout of the launch: blockIdx.y walks rows
// (dims 1..3, row offsets computed once per row), x threads walk dim 0; both loops are
// grid-stride so any grid covers any shape. Wave-size independent: no cross-lane work.
#include "tandem_hip.h"

// Mirrors `BinaryShape` in backend/src/gpu/elementwise.rs (five blocks of four i64, no padding).
struct tandem_binary_shape {
    i64 ne[4];   // dst extents (= src0 extents)
    i64 ne1[4];  // src1 extents; each divides the matching dst extent
    i64 nb0[4];  // src0 byte strides
    i64 nb1[4];  // src1 byte strides
    i64 nbd[4];  // dst byte strides
};

// Mirrors `UnaryShape` in backend/src/gpu/elementwise.rs.
struct tandem_unary_shape {
    i64 ne[4];   // extents (src and dst alike)
    i64 nbs[4];  // src byte strides
    i64 nbd[4];  // dst byte strides
};

struct tandem_op_add {
    __device__ float operator()(float x, float y) const { return x + y; }
};
struct tandem_op_sub {
    __device__ float operator()(float x, float y) const { return x - y; }
};
struct tandem_op_mul {
    __device__ float operator()(float x, float y) const { return x * y; }
};
struct tandem_op_div {
    __device__ float operator()(float x, float y) const { return x / y; }
};

template <typename Op>
TANDEM_DEVICE void tandem_binary_f32(const char* src0, const char* src1,
                                     char* dst, const tandem_binary_shape& s, Op op) {
    const i64 rows = s.ne[1] * s.ne[2] * s.ne[3];
    const i64 step0 = (i64)gridDim.x * blockDim.x;
    const bool same0 = s.ne1[0] == s.ne[0];
    for (i64 r = blockIdx.y; r < rows; r += gridDim.y) {
        const i64 i1 = r % s.ne[1];
        const i64 i2 = (r / s.ne[1]) % s.ne[2];
        const i64 i3 = r / (s.ne[1] * s.ne[2]);
        const char* a = src0 + i1 * s.nb0[1] + i2 * s.nb0[2] + i3 * s.nb0[3];
        const char* b = src1 + (i1 % s.ne1[1]) * s.nb1[1] + (i2 % s.ne1[2]) * s.nb1[2] +
                        (i3 % s.ne1[3]) * s.nb1[3];
        char* d = dst + i1 * s.nbd[1] + i2 * s.nbd[2] + i3 * s.nbd[3];
        for (i64 i0 = (i64)blockIdx.x * blockDim.x + threadIdx.x; i0 < s.ne[0]; i0 += step0) {
            const i64 j0 = same0 ? i0 : i0 % s.ne1[0];
            const float x = *(const float*)(a + i0 * s.nb0[0]);
            const float y = *(const float*)(b + j0 * s.nb1[0]);
            *(float*)(d + i0 * s.nbd[0]) = op(x, y);
        }
    }
}

extern "C" __global__ void __launch_bounds__(256)
tandem_add_f32(const char* src0, const char* src1, char* dst, tandem_binary_shape s) {
    tandem_binary_f32(src0, src1, dst, s, tandem_op_add());
}

extern "C" __global__ void __launch_bounds__(256)
tandem_sub_f32(const char* src0, const char* src1, char* dst, tandem_binary_shape s) {
    tandem_binary_f32(src0, src1, dst, s, tandem_op_sub());
}

extern "C" __global__ void __launch_bounds__(256)
tandem_mul_f32(const char* src0, const char* src1, char* dst, tandem_binary_shape s) {
    tandem_binary_f32(src0, src1, dst, s, tandem_op_mul());
}

extern "C" __global__ void __launch_bounds__(256)
tandem_div_f32(const char* src0, const char* src1, char* dst, tandem_binary_shape s) {
    tandem_binary_f32(src0, src1, dst, s, tandem_op_div());
}

struct tandem_op_scale {
    float scale;
    float bias;
    __device__ float operator()(float x) const { return x * scale + bias; }
};
struct tandem_op_silu {
    __device__ float operator()(float x) const { return x / (1.0f + expf(-x)); }
};

template <typename Op>
TANDEM_DEVICE void tandem_unary_f32(const char* src, char* dst, const tandem_unary_shape& s, Op op) {
    const i64 rows = s.ne[1] * s.ne[2] * s.ne[3];
    const i64 step0 = (i64)gridDim.x * blockDim.x;
    for (i64 r = blockIdx.y; r < rows; r += gridDim.y) {
        const i64 i1 = r % s.ne[1];
        const i64 i2 = (r / s.ne[1]) % s.ne[2];
        const i64 i3 = r / (s.ne[1] * s.ne[2]);
        const char* a = src + i1 * s.nbs[1] + i2 * s.nbs[2] + i3 * s.nbs[3];
        char* d = dst + i1 * s.nbd[1] + i2 * s.nbd[2] + i3 * s.nbd[3];
        for (i64 i0 = (i64)blockIdx.x * blockDim.x + threadIdx.x; i0 < s.ne[0]; i0 += step0) {
            *(float*)(d + i0 * s.nbd[0]) = op(*(const float*)(a + i0 * s.nbs[0]));
        }
    }
}

// ggml_scale: dst = src * scale + bias.
extern "C" __global__ void __launch_bounds__(256)
tandem_scale_f32(const char* src, char* dst, tandem_unary_shape s, float scale, float bias) {
    tandem_op_scale op;
    op.scale = scale;
    op.bias = bias;
    tandem_unary_f32(src, dst, s, op);
}

// SiLU: x * sigmoid(x), written as x / (1 + e^-x) like ggml's CPU path.
extern "C" __global__ void __launch_bounds__(256)
tandem_silu_f32(const char* src, char* dst, tandem_unary_shape s) {
    tandem_unary_f32(src, dst, s, tandem_op_silu());
}
