// Elementwise ops on ggml-strided tensors: binary ADD/SUB/MUL/DIV with src1 broadcast by
// repetition (ggml_can_repeat), the GLU gates (act(x) * g, a binary op without broadcast), SCALE,
// CLAMP, every UNARY sub-op, and ADD_ID. Strides are in bytes, as in ggml, so views and permuted
// tensors need no copy. Layout of the launch: blockIdx.y walks rows (dims 1..3, row offsets
// computed once per row), x threads walk dim 0; both loops are grid-stride so any grid covers any
// shape. Wave-size independent: no cross-lane work.
//
// Each output element is computed from the inputs at its own index and written by the thread
// that read them, so a dst that is exactly src0 (same address and strides: ggml's in-place ops)
// is safe.
//
// The `_any` entries take the element types as ggml type ids (f32 0, f16 1, bf16 30) and the op
// as a code; they switch once per launch to a loop specialised for the op, and once more for the
// all-f32 case, so the per-element work is the op alone. The math follows tandem's CPU ops
// (ops/src/cpu/ew_math.rs): the sigmoid family is x / (1 + e^-t), GELU is the exact tanh form.
#include "tandem_hip.h"

// Compile units: the runtime builds this family in three parts (-DTANDEM_UNIT=1 and
// TANDEM_UNIT_BINARY for tandem_binary_any, TANDEM_UNIT_UNARY for tandem_unary_any, the two
// generic kernels that take most of its compile time, TANDEM_UNIT_COMMON for the rest); without
// TANDEM_UNIT every entry is defined. The units are listed in kernels-hip/src/fam/elementwise.rs.
#if !defined(TANDEM_UNIT)
#define TANDEM_UNIT_ALL 1
#endif

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

// Mirrors `AddIdShape` in backend/src/gpu/elementwise.rs.
struct tandem_add_id_shape {
    i64 ne[4];    // dst extents (= src0 extents)
    i64 nba[4];   // src0 byte strides
    i64 nbd[4];   // dst byte strides
    i64 nbb0;     // src1 element stride
    i64 nbb1;     // src1 row stride
    i64 nbi0;     // ids strides (dim 0: src0 dim 1, dim 1: src0 dim 2)
    i64 nbi1;
    i64 rows_b;   // src1 rows: valid ids are 0..rows_b
};

// ggml type ids of the element types the `_any` entries read and write.
#define TANDEM_EW_F32 0
#define TANDEM_EW_F16 1
#define TANDEM_EW_BF16 30

TANDEM_DEVICE float tandem_ew_load(const char* p, int ty) {
    if (ty == TANDEM_EW_F16) {
        return tandem_f16_to_f32(*(const u16*)p);
    }
    if (ty == TANDEM_EW_BF16) {
        return tandem_bf16_to_f32(*(const u16*)p);
    }
    return *(const float*)p;
}

TANDEM_DEVICE void tandem_ew_store(char* p, int ty, float v) {
    if (ty == TANDEM_EW_F16) {
        *(u16*)p = tandem_f32_to_f16(v);
    } else if (ty == TANDEM_EW_BF16) {
        *(u16*)p = tandem_f32_to_bf16(v);
    } else {
        *(float*)p = v;
    }
}

// Element access: the f32 flavour compiles to plain loads and stores.
// `f32`: every operand is f32, so rows whose elements are contiguous and 16-byte aligned may be
// read and written four elements at a time.
struct tandem_io_f32 {
    static constexpr bool f32 = true;
    __device__ float load(const char* p, int) const { return *(const float*)p; }
    __device__ void store(char* p, int, float v) const { *(float*)p = v; }
};
struct tandem_io_any {
    static constexpr bool f32 = false;
    __device__ float load(const char* p, int ty) const { return tandem_ew_load(p, ty); }
    __device__ void store(char* p, int ty, float v) const { tandem_ew_store(p, ty, v); }
};


// Whether a base address and the row strides (dims 1..3) keep every row 16-byte aligned.
TANDEM_DEVICE bool tandem_rows_aligned16(const char* p, const i64* nb) {
    return (((unsigned long long)p | (unsigned long long)nb[1] | (unsigned long long)nb[2] |
             (unsigned long long)nb[3]) & 15) == 0;
}

// ---- activation math: tandem_act_* in tandem_hip.h (the GEMVs apply GLU gates too) ----

// min(1, max(0, (x + 3) / 6)) with comparisons, so NaN stays NaN as on the CPU.
TANDEM_DEVICE float tandem_act_hard_gate(float x) {
    float g = (x + 3.0f) / 6.0f;
    g = g < 0.0f ? 0.0f : g;
    return g > 1.0f ? 1.0f : g;
}

// ---- binary ops and GLU gates ----

// Op codes of tandem_binary_any; mirror `BinaryOp::code` in backend/src/gpu/elementwise.rs.
#define TANDEM_BIN_ADD 0
#define TANDEM_BIN_SUB 1
#define TANDEM_BIN_MUL 2
#define TANDEM_BIN_DIV 3
#define TANDEM_BIN_REGLU 16
#define TANDEM_BIN_GEGLU 17
#define TANDEM_BIN_SWIGLU 18
#define TANDEM_BIN_GEGLU_ERF 19
#define TANDEM_BIN_GEGLU_QUICK 20

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
struct tandem_op_reglu {
    __device__ float operator()(float x, float g) const { return tandem_act_relu(x) * g; }
};
struct tandem_op_geglu {
    __device__ float operator()(float x, float g) const { return tandem_act_gelu(x) * g; }
};
struct tandem_op_swiglu {
    __device__ float operator()(float x, float g) const { return tandem_act_silu(x) * g; }
};
struct tandem_op_geglu_erf {
    __device__ float operator()(float x, float g) const { return tandem_act_gelu_erf(x) * g; }
};
struct tandem_op_geglu_quick {
    __device__ float operator()(float x, float g) const { return tandem_act_gelu_quick(x) * g; }
};

// The all-f32 binary loop on rows of contiguous, 16-byte-aligned elements (ne[0] a multiple of
// four), four elements a thread; src1's row is either as long as dst's or one value, repeated.
template <typename Op>
TANDEM_DEVICE void tandem_binary_rows4(const char* src0, const char* src1, char* dst,
                                       const tandem_binary_shape& s, Op op, bool scalar1) {
    const i64 rows = s.ne[1] * s.ne[2] * s.ne[3];
    const i64 n4 = s.ne[0] >> 2;
    const i64 step = (i64)gridDim.x * blockDim.x;
    for (i64 r = blockIdx.y; r < rows; r += gridDim.y) {
        i64 i1, i2, i3;
        tandem_row_index(r, s.ne, i1, i2, i3);
        const float4* a = (const float4*)(src0 + i1 * s.nb0[1] + i2 * s.nb0[2] + i3 * s.nb0[3]);
        const char* b = src1 + (i1 % s.ne1[1]) * s.nb1[1] + (i2 % s.ne1[2]) * s.nb1[2] +
                        (i3 % s.ne1[3]) * s.nb1[3];
        float4* d = (float4*)(dst + i1 * s.nbd[1] + i2 * s.nbd[2] + i3 * s.nbd[3]);
        for (i64 j = (i64)blockIdx.x * blockDim.x + threadIdx.x; j < n4; j += step) {
            const float4 x = a[j];
            float4 y;
            if (scalar1) {
                const float v = *(const float*)b;
                y = make_float4(v, v, v, v);
            } else {
                y = ((const float4*)b)[j];
            }
            d[j] = make_float4(op(x.x, y.x), op(x.y, y.y), op(x.z, y.z), op(x.w, y.w));
        }
    }
}

template <typename Op, typename Io>
TANDEM_DEVICE void tandem_binary_loop(const char* src0, const char* src1, char* dst,
                                      const tandem_binary_shape& s, Op op, Io io,
                                      int t0, int t1, int td) {
    const i64 rows = s.ne[1] * s.ne[2] * s.ne[3];
    const i64 step0 = (i64)gridDim.x * blockDim.x;
    const bool same0 = s.ne1[0] == s.ne[0];
    if (Io::f32 && (s.ne[0] & 3) == 0 && s.nb0[0] == 4 && s.nbd[0] == 4 &&
        tandem_rows_aligned16(src0, s.nb0) && tandem_rows_aligned16(dst, s.nbd)) {
        if (s.ne1[0] == 1) {
            tandem_binary_rows4(src0, src1, dst, s, op, true);
            return;
        }
        if (same0 && s.nb1[0] == 4 && tandem_rows_aligned16(src1, s.nb1)) {
            tandem_binary_rows4(src0, src1, dst, s, op, false);
            return;
        }
    }
    for (i64 r = blockIdx.y; r < rows; r += gridDim.y) {
        i64 i1, i2, i3;
        tandem_row_index(r, s.ne, i1, i2, i3);
        const char* a = src0 + i1 * s.nb0[1] + i2 * s.nb0[2] + i3 * s.nb0[3];
        const char* b = src1 + (i1 % s.ne1[1]) * s.nb1[1] + (i2 % s.ne1[2]) * s.nb1[2] +
                        (i3 % s.ne1[3]) * s.nb1[3];
        char* d = dst + i1 * s.nbd[1] + i2 * s.nbd[2] + i3 * s.nbd[3];
        for (i64 i0 = (i64)blockIdx.x * blockDim.x + threadIdx.x; i0 < s.ne[0]; i0 += step0) {
            const i64 j0 = same0 ? i0 : i0 % s.ne1[0];
            const float x = io.load(a + i0 * s.nb0[0], t0);
            const float y = io.load(b + j0 * s.nb1[0], t1);
            io.store(d + i0 * s.nbd[0], td, op(x, y));
        }
    }
}

template <typename Op>
TANDEM_DEVICE void tandem_binary_f32(const char* src0, const char* src1, char* dst,
                                     const tandem_binary_shape& s, Op op) {
    tandem_binary_loop(src0, src1, dst, s, op, tandem_io_f32(), 0, 0, 0);
}

template <typename Op>
TANDEM_DEVICE void tandem_binary_typed(const char* src0, const char* src1, char* dst,
                                       const tandem_binary_shape& s, Op op,
                                       int t0, int t1, int td) {
    if (t0 == TANDEM_EW_F32 && t1 == TANDEM_EW_F32 && td == TANDEM_EW_F32) {
        tandem_binary_loop(src0, src1, dst, s, op, tandem_io_f32(), t0, t1, td);
    } else {
        tandem_binary_loop(src0, src1, dst, s, op, tandem_io_any(), t0, t1, td);
    }
}

#if TANDEM_UNIT_ALL || TANDEM_UNIT_COMMON
extern "C" __global__ void __launch_bounds__(256)
tandem_add_f32(const char* src0, const char* src1, char* dst, tandem_binary_shape s) {
    tandem_grid_release();
    tandem_binary_f32(src0, src1, dst, s, tandem_op_add());
}
#endif

#if TANDEM_UNIT_ALL || TANDEM_UNIT_COMMON
extern "C" __global__ void __launch_bounds__(256)
tandem_sub_f32(const char* src0, const char* src1, char* dst, tandem_binary_shape s) {
    tandem_binary_f32(src0, src1, dst, s, tandem_op_sub());
}
#endif

#if TANDEM_UNIT_ALL || TANDEM_UNIT_COMMON
extern "C" __global__ void __launch_bounds__(256)
tandem_mul_f32(const char* src0, const char* src1, char* dst, tandem_binary_shape s) {
    tandem_grid_release();
    tandem_binary_f32(src0, src1, dst, s, tandem_op_mul());
}
#endif

#if TANDEM_UNIT_ALL || TANDEM_UNIT_COMMON
extern "C" __global__ void __launch_bounds__(256)
tandem_div_f32(const char* src0, const char* src1, char* dst, tandem_binary_shape s) {
    tandem_binary_f32(src0, src1, dst, s, tandem_op_div());
}
#endif

// dst = op(src0, src1) for any mix of f32/f16/bf16 (t0, t1, td); GLU gates pass x as src0 and
// the gate as src1 with no broadcast. An unknown op writes nothing (launchers never pass one).
#if TANDEM_UNIT_ALL || TANDEM_UNIT_BINARY
extern "C" __global__ void __launch_bounds__(256)
tandem_binary_any(const char* src0, const char* src1, char* dst, tandem_binary_shape s,
                  int op, int t0, int t1, int td) {
    tandem_grid_release();
    switch (op) {
    case TANDEM_BIN_ADD: tandem_binary_typed(src0, src1, dst, s, tandem_op_add(), t0, t1, td); break;
    case TANDEM_BIN_SUB: tandem_binary_typed(src0, src1, dst, s, tandem_op_sub(), t0, t1, td); break;
    case TANDEM_BIN_MUL: tandem_binary_typed(src0, src1, dst, s, tandem_op_mul(), t0, t1, td); break;
    case TANDEM_BIN_DIV: tandem_binary_typed(src0, src1, dst, s, tandem_op_div(), t0, t1, td); break;
    case TANDEM_BIN_REGLU: tandem_binary_typed(src0, src1, dst, s, tandem_op_reglu(), t0, t1, td); break;
    case TANDEM_BIN_GEGLU: tandem_binary_typed(src0, src1, dst, s, tandem_op_geglu(), t0, t1, td); break;
    case TANDEM_BIN_SWIGLU: tandem_binary_typed(src0, src1, dst, s, tandem_op_swiglu(), t0, t1, td); break;
    case TANDEM_BIN_GEGLU_ERF:
        tandem_binary_typed(src0, src1, dst, s, tandem_op_geglu_erf(), t0, t1, td);
        break;
    case TANDEM_BIN_GEGLU_QUICK:
        tandem_binary_typed(src0, src1, dst, s, tandem_op_geglu_quick(), t0, t1, td);
        break;
    default: break;
    }
}
#endif

// GLU gates on f32 rows of contiguous, 16-byte-aligned elements (ne[0] a multiple of four, two
// dimensions: rows ne[1] nb0/nb1/nbd[1] bytes apart), four elements a thread, one entry per gate.
// A decode step runs one of these between GEMVs that stream the weights through L2: on sm_90 an
// entry is 72-288 instructions, where tandem_binary_any is 38 thousand (with a stack), which the
// SM fetches from memory again at each launch once the weights have pushed them out of L2; in a
// dense decode step's timeline the gate through tandem_binary_any took 6.3-6.9 us (H200).
template <typename Op>
TANDEM_DEVICE void tandem_gate4(const char* x, const char* g, char* d, const tandem_binary_shape& s, Op op) {
    tandem_grid_release();
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= (int)(s.ne[0] >> 2)) return;
    for (int r = blockIdx.y; r < (int)s.ne[1]; r += gridDim.y) {
        const float4 a = ((const float4*)(x + (i64)r * s.nb0[1]))[j];
        const float4 b = ((const float4*)(g + (i64)r * s.nb1[1]))[j];
        ((float4*)(d + (i64)r * s.nbd[1]))[j] = make_float4(op(a.x, b.x), op(a.y, b.y), op(a.z, b.z), op(a.w, b.w));
    }
}
#if TANDEM_UNIT_ALL || TANDEM_UNIT_COMMON
extern "C" __global__ void __launch_bounds__(256)
tandem_swiglu4_f32(const char* x, const char* g, char* d, tandem_binary_shape s) {
    tandem_gate4(x, g, d, s, tandem_op_swiglu());
}
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_COMMON
extern "C" __global__ void __launch_bounds__(256)
tandem_geglu4_f32(const char* x, const char* g, char* d, tandem_binary_shape s) {
    tandem_gate4(x, g, d, s, tandem_op_geglu());
}
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_COMMON
extern "C" __global__ void __launch_bounds__(256)
tandem_reglu4_f32(const char* x, const char* g, char* d, tandem_binary_shape s) {
    tandem_gate4(x, g, d, s, tandem_op_reglu());
}
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_COMMON
extern "C" __global__ void __launch_bounds__(256)
tandem_geglu_erf4_f32(const char* x, const char* g, char* d, tandem_binary_shape s) {
    tandem_gate4(x, g, d, s, tandem_op_geglu_erf());
}
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_COMMON
extern "C" __global__ void __launch_bounds__(256)
tandem_geglu_quick4_f32(const char* x, const char* g, char* d, tandem_binary_shape s) {
    tandem_gate4(x, g, d, s, tandem_op_geglu_quick());
}
#endif

// ---- one-input ops: UNARY sub-ops, SCALE, CLAMP ----

// Codes of tandem_unary_any: 0..16 are ggml's unary op ids; SCALE and CLAMP follow. Mirror
// `UnaryKind::code` in backend/src/gpu/elementwise.rs.
#define TANDEM_UN_ABS 0
#define TANDEM_UN_SGN 1
#define TANDEM_UN_NEG 2
#define TANDEM_UN_STEP 3
#define TANDEM_UN_TANH 4
#define TANDEM_UN_ELU 5
#define TANDEM_UN_RELU 6
#define TANDEM_UN_SIGMOID 7
#define TANDEM_UN_GELU 8
#define TANDEM_UN_GELU_QUICK 9
#define TANDEM_UN_SILU 10
#define TANDEM_UN_HARDSWISH 11
#define TANDEM_UN_HARDSIGMOID 12
#define TANDEM_UN_EXP 13
#define TANDEM_UN_EXPM1 14
#define TANDEM_UN_SOFTPLUS 15
#define TANDEM_UN_GELU_ERF 16
#define TANDEM_UN_FLOOR 18
#define TANDEM_UN_CEIL 19
#define TANDEM_UN_ROUND 20
#define TANDEM_UN_TRUNC 21
#define TANDEM_UN_SCALE 64
#define TANDEM_UN_CLAMP 65

struct tandem_op_scale {
    float scale;
    float bias;
    __device__ float operator()(float x) const { return x * scale + bias; }
};
// ggml's max(min(x, hi), lo) with comparisons: lo wins when lo > hi, as on the CPU.
struct tandem_op_clamp {
    float lo;
    float hi;
    __device__ float operator()(float x) const {
        const float y = x < hi ? x : hi;
        return y > lo ? y : lo;
    }
};
struct tandem_op_silu {
    __device__ float operator()(float x) const { return tandem_act_silu(x); }
};
struct tandem_op_floor {
    __device__ float operator()(float x) const { return floorf(x); }
};
struct tandem_op_ceil {
    __device__ float operator()(float x) const { return ceilf(x); }
};
// Halves away from zero, as the CPU's roundf.
struct tandem_op_round {
    __device__ float operator()(float x) const { return roundf(x); }
};
struct tandem_op_trunc {
    __device__ float operator()(float x) const { return truncf(x); }
};
struct tandem_op_abs {
    __device__ float operator()(float x) const { return fabsf(x); }
};
struct tandem_op_sgn {
    __device__ float operator()(float x) const { return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : 0.0f); }
};
struct tandem_op_neg {
    __device__ float operator()(float x) const { return -x; }
};
struct tandem_op_step {
    __device__ float operator()(float x) const { return x > 0.0f ? 1.0f : 0.0f; }
};
struct tandem_op_tanh {
    __device__ float operator()(float x) const { return tanhf(x); }
};
struct tandem_op_elu {
    __device__ float operator()(float x) const { return x > 0.0f ? x : expm1f(x); }
};
struct tandem_op_relu {
    __device__ float operator()(float x) const { return tandem_act_relu(x); }
};
struct tandem_op_sigmoid {
    __device__ float operator()(float x) const { return tandem_act_sigmoid(x); }
};
struct tandem_op_gelu {
    __device__ float operator()(float x) const { return tandem_act_gelu(x); }
};
struct tandem_op_gelu_quick {
    __device__ float operator()(float x) const { return tandem_act_gelu_quick(x); }
};
struct tandem_op_hardswish {
    __device__ float operator()(float x) const { return x * tandem_act_hard_gate(x); }
};
struct tandem_op_hardsigmoid {
    __device__ float operator()(float x) const { return tandem_act_hard_gate(x); }
};
struct tandem_op_exp {
    __device__ float operator()(float x) const { return expf(x); }
};
struct tandem_op_expm1 {
    __device__ float operator()(float x) const { return expm1f(x); }
};
// Above 20, log(1 + e^x) equals x in f32.
struct tandem_op_softplus {
    __device__ float operator()(float x) const { return x > 20.0f ? x : log1pf(expf(x)); }
};
struct tandem_op_gelu_erf {
    __device__ float operator()(float x) const { return tandem_act_gelu_erf(x); }
};

template <typename Op, typename Io>
TANDEM_DEVICE void tandem_unary_loop(const char* src, char* dst, const tandem_unary_shape& s,
                                     Op op, Io io, int ts, int td) {
    const i64 rows = s.ne[1] * s.ne[2] * s.ne[3];
    const i64 step0 = (i64)gridDim.x * blockDim.x;
    const bool rows4 = Io::f32 && (s.ne[0] & 3) == 0 && s.nbs[0] == 4 && s.nbd[0] == 4 &&
                       tandem_rows_aligned16(src, s.nbs) && tandem_rows_aligned16(dst, s.nbd);
    for (i64 r = blockIdx.y; r < rows; r += gridDim.y) {
        i64 i1, i2, i3;
        tandem_row_index(r, s.ne, i1, i2, i3);
        const char* a = src + i1 * s.nbs[1] + i2 * s.nbs[2] + i3 * s.nbs[3];
        char* d = dst + i1 * s.nbd[1] + i2 * s.nbd[2] + i3 * s.nbd[3];
        if (rows4) {
            // Contiguous, aligned f32 rows: four elements a thread.
            for (i64 j = (i64)blockIdx.x * blockDim.x + threadIdx.x; j < (s.ne[0] >> 2); j += step0) {
                const float4 x = ((const float4*)a)[j];
                ((float4*)d)[j] = make_float4(op(x.x), op(x.y), op(x.z), op(x.w));
            }
            continue;
        }
        for (i64 i0 = (i64)blockIdx.x * blockDim.x + threadIdx.x; i0 < s.ne[0]; i0 += step0) {
            io.store(d + i0 * s.nbd[0], td, op(io.load(a + i0 * s.nbs[0], ts)));
        }
    }
}

template <typename Op>
TANDEM_DEVICE void tandem_unary_f32(const char* src, char* dst, const tandem_unary_shape& s, Op op) {
    tandem_unary_loop(src, dst, s, op, tandem_io_f32(), 0, 0);
}

template <typename Op>
TANDEM_DEVICE void tandem_unary_typed(const char* src, char* dst, const tandem_unary_shape& s,
                                      Op op, int ts, int td) {
    if (ts == TANDEM_EW_F32 && td == TANDEM_EW_F32) {
        tandem_unary_loop(src, dst, s, op, tandem_io_f32(), ts, td);
    } else {
        tandem_unary_loop(src, dst, s, op, tandem_io_any(), ts, td);
    }
}

// ggml_scale: dst = src * scale + bias.
#if TANDEM_UNIT_ALL || TANDEM_UNIT_COMMON
extern "C" __global__ void __launch_bounds__(256)
tandem_scale_f32(const char* src, char* dst, tandem_unary_shape s, float scale, float bias) {
    tandem_op_scale op;
    op.scale = scale;
    op.bias = bias;
    tandem_unary_f32(src, dst, s, op);
}
#endif

// SiLU: x * sigmoid(x), written as x / (1 + e^-x) like ggml's CPU path.
#if TANDEM_UNIT_ALL || TANDEM_UNIT_COMMON
extern "C" __global__ void __launch_bounds__(256)
tandem_silu_f32(const char* src, char* dst, tandem_unary_shape s) {
    tandem_unary_f32(src, dst, s, tandem_op_silu());
}
#endif

// dst = f(src) for the op code `op` (p0, p1: SCALE's scale and bias, CLAMP's min and max), any
// mix of f32/f16/bf16. An unknown op writes nothing (launchers never pass one).
#if TANDEM_UNIT_ALL || TANDEM_UNIT_UNARY
extern "C" __global__ void __launch_bounds__(256)
tandem_unary_any(const char* src, char* dst, tandem_unary_shape s, int op, int ts, int td,
                 float p0, float p1) {
    switch (op) {
    case TANDEM_UN_SCALE: {
        tandem_op_scale f;
        f.scale = p0;
        f.bias = p1;
        tandem_unary_typed(src, dst, s, f, ts, td);
        break;
    }
    case TANDEM_UN_CLAMP: {
        tandem_op_clamp f;
        f.lo = p0;
        f.hi = p1;
        tandem_unary_typed(src, dst, s, f, ts, td);
        break;
    }
    case TANDEM_UN_ABS: tandem_unary_typed(src, dst, s, tandem_op_abs(), ts, td); break;
    case TANDEM_UN_SGN: tandem_unary_typed(src, dst, s, tandem_op_sgn(), ts, td); break;
    case TANDEM_UN_NEG: tandem_unary_typed(src, dst, s, tandem_op_neg(), ts, td); break;
    case TANDEM_UN_STEP: tandem_unary_typed(src, dst, s, tandem_op_step(), ts, td); break;
    case TANDEM_UN_TANH: tandem_unary_typed(src, dst, s, tandem_op_tanh(), ts, td); break;
    case TANDEM_UN_ELU: tandem_unary_typed(src, dst, s, tandem_op_elu(), ts, td); break;
    case TANDEM_UN_RELU: tandem_unary_typed(src, dst, s, tandem_op_relu(), ts, td); break;
    case TANDEM_UN_SIGMOID: tandem_unary_typed(src, dst, s, tandem_op_sigmoid(), ts, td); break;
    case TANDEM_UN_GELU: tandem_unary_typed(src, dst, s, tandem_op_gelu(), ts, td); break;
    case TANDEM_UN_GELU_QUICK: tandem_unary_typed(src, dst, s, tandem_op_gelu_quick(), ts, td); break;
    case TANDEM_UN_SILU: tandem_unary_typed(src, dst, s, tandem_op_silu(), ts, td); break;
    case TANDEM_UN_HARDSWISH: tandem_unary_typed(src, dst, s, tandem_op_hardswish(), ts, td); break;
    case TANDEM_UN_HARDSIGMOID: tandem_unary_typed(src, dst, s, tandem_op_hardsigmoid(), ts, td); break;
    case TANDEM_UN_EXP: tandem_unary_typed(src, dst, s, tandem_op_exp(), ts, td); break;
    case TANDEM_UN_EXPM1: tandem_unary_typed(src, dst, s, tandem_op_expm1(), ts, td); break;
    case TANDEM_UN_SOFTPLUS: tandem_unary_typed(src, dst, s, tandem_op_softplus(), ts, td); break;
    case TANDEM_UN_GELU_ERF: tandem_unary_typed(src, dst, s, tandem_op_gelu_erf(), ts, td); break;
    case TANDEM_UN_FLOOR: tandem_unary_typed(src, dst, s, tandem_op_floor(), ts, td); break;
    case TANDEM_UN_CEIL: tandem_unary_typed(src, dst, s, tandem_op_ceil(), ts, td); break;
    case TANDEM_UN_ROUND: tandem_unary_typed(src, dst, s, tandem_op_round(), ts, td); break;
    case TANDEM_UN_TRUNC: tandem_unary_typed(src, dst, s, tandem_op_trunc(), ts, td); break;
    default: break;
    }
}
#endif

// ---- ADD_ID ----

// dst[:, i1, i2, i3] = src0[:, i1, i2, i3] + src1[:, ids[i1, i2]] (f32). An id outside
// 0..rows_b never reads src1: its row becomes NaN, so the bad input shows in the result rather
// than leaving stale memory (the CPU path refuses the whole node instead).
#if TANDEM_UNIT_ALL || TANDEM_UNIT_COMMON
extern "C" __global__ void __launch_bounds__(256)
tandem_add_id_f32(const char* src0, const char* src1, const char* ids, char* dst,
                  tandem_add_id_shape s) {
    const i64 rows = s.ne[1] * s.ne[2] * s.ne[3];
    const i64 step0 = (i64)gridDim.x * blockDim.x;
    for (i64 r = blockIdx.y; r < rows; r += gridDim.y) {
        const i64 i1 = r % s.ne[1];
        const i64 i2 = (r / s.ne[1]) % s.ne[2];
        const i64 i3 = r / (s.ne[1] * s.ne[2]);
        const i64 id = *(const i32*)(ids + i1 * s.nbi0 + i2 * s.nbi1);
        const bool valid = id >= 0 && id < s.rows_b;
        const char* a = src0 + i1 * s.nba[1] + i2 * s.nba[2] + i3 * s.nba[3];
        const char* b = src1 + (valid ? id : 0) * s.nbb1;
        char* d = dst + i1 * s.nbd[1] + i2 * s.nbd[2] + i3 * s.nbd[3];
        for (i64 i0 = (i64)blockIdx.x * blockDim.x + threadIdx.x; i0 < s.ne[0]; i0 += step0) {
            const float x = *(const float*)(a + i0 * s.nba[0]);
            const float y = valid ? *(const float*)(b + i0 * s.nbb0) : __int_as_float(0x7fc00000);
            *(float*)(d + i0 * s.nbd[0]) = x + y;
        }
    }
}
#endif

// ---- weighted sum of MoE expert outputs: MUL by the routing weights, then the ADD chain ----

// Mirrors `MoeSumShape` in backend/src/gpu/elementwise.rs.
struct tandem_moe_sum_shape {
    i64 e, k, t;           // x extents: values per expert row, experts used, tokens
    i64 nbx1, nbx2;        // x byte strides of dims 1 and 2 (dim 0 contiguous f32)
    i64 nbw0, nbw1, nbw2;  // w byte strides (nbw0 = 0 when w repeats over dim 0)
    i64 nbd1;              // dst byte stride of dim 1 (dim 0 contiguous)
};

// dst[:, t] = ((x[:, 0, t] * w[0, t] + x[:, 1, t] * w[1, t]) + ...) + x[:, k-1, t] * w[k-1, t]:
// what llama.cpp's MoE output is, a MUL of the experts' rows by their weights (src1 repeating
// over dim 0), k views of the product and k - 1 ADDs summing them in order. Each product and
// each sum is rounded to f32 on its own (no fused multiply-add), so the result is the unfused
// nodes' to the bit. blockIdx.y walks tokens; x threads walk dim 0, four values each where the
// rows are 16-byte aligned.
#if TANDEM_UNIT_ALL || TANDEM_UNIT_COMMON
extern "C" __global__ void __launch_bounds__(256)
tandem_moe_sum_f32(const char* x, const char* w, char* dst, tandem_moe_sum_shape s) {
    tandem_grid_release();
    const bool vec = (s.e & 3) == 0 && s.nbw0 == 0 &&
                     (((unsigned long long)x | (unsigned long long)dst | (unsigned long long)s.nbx1 |
                       (unsigned long long)s.nbx2 | (unsigned long long)s.nbd1) & 15) == 0;
    const i64 step = (i64)gridDim.x * blockDim.x;
    for (i64 t = blockIdx.y; t < s.t; t += gridDim.y) {
        const char* xt = x + t * s.nbx2;
        const char* wt = w + t * s.nbw2;
        char* d = dst + t * s.nbd1;
        if (vec) {
            for (i64 j = (i64)blockIdx.x * blockDim.x + threadIdx.x; j < (s.e >> 2); j += step) {
                float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                for (i64 k = 0; k < s.k; ++k) {
                    const float4 v = ((const float4*)(xt + k * s.nbx1))[j];
                    const float g = *(const float*)(wt + k * s.nbw1);
                    const float4 p = make_float4(__fmul_rn(v.x, g), __fmul_rn(v.y, g), __fmul_rn(v.z, g),
                                                 __fmul_rn(v.w, g));
                    if (k == 0) {
                        acc = p;
                    } else {
                        acc = make_float4(__fadd_rn(acc.x, p.x), __fadd_rn(acc.y, p.y), __fadd_rn(acc.z, p.z),
                                          __fadd_rn(acc.w, p.w));
                    }
                }
                ((float4*)d)[j] = acc;
            }
            continue;
        }
        for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < s.e; i += step) {
            float acc = 0.0f;
            for (i64 k = 0; k < s.k; ++k) {
                const float p = __fmul_rn(((const float*)(xt + k * s.nbx1))[i],
                                          *(const float*)(wt + i * s.nbw0 + k * s.nbw1));
                acc = k == 0 ? p : __fadd_rn(acc, p);
            }
            ((float*)d)[i] = acc;
        }
    }
}
#endif
