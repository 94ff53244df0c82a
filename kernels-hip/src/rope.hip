// ROPE, normal (adjacent pairs) and neox (pairs half a rotation apart) modes, with frequency
// factors and YaRN, over f32 or f16 rows of [head_dim, n_head, n_tokens, n_seq] with any byte
// strides; elements outside [n_offs, n_offs + n_dims) are copied.
//
// Angles follow tandem's CPU op (ops/src/cpu/rope.rs): computed in f64 from the closed form
// pos * base^(-2k/n_dims), rounded to f32 only as cos and sin. ggml multiplies theta up in f32,
// whose error grows with the position; the f64 form keeps the result within the 1e-7 NMSE of the
// f64 reference. One block handles one token (one position) for a run of heads: its threads fill
// a cos/sin table in shared memory (n_dims/2 entries of each), then rotate every row of the run,
// so the f64 work is paid once per token and block, not per head. Blocks take about one row
// element a thread; where a token's run is no more than that (decode), each thread reads its
// element or pair before the table is built, so the loads and the f64 math overlap.
//
// Each pair is read and written by one thread, so dst == src (ggml's in-place rope) is safe.
// Wave-size independent: no cross-lane work, only block barriers reached by every thread.
#include "tandem_hip.h"

// Mirrors `RopeShape` in backend/src/gpu/ops/rope.rs (176 bytes, no padding).
struct tandem_rope_shape {
    i64 ne[4];          // src/dst extents
    i64 nbs[4];         // src byte strides
    i64 nbd[4];         // dst byte strides
    i64 nbp;            // byte stride of the i32 positions (one per token, dim 2)
    i64 nbf;            // byte stride of the f32 frequency factors
    double freq_base;
    double freq_scale;
    double ext_factor;
    double mscale;      // attn_factor, times YaRN's magnitude correction when ext_factor != 0
    float corr0;        // YaRN ramp: 1 below pair corr0, 0 above corr1 (host-computed)
    float corr1;
    i32 n_dims;         // rotated dims, even
    i32 n_offs;         // first rotated dim, even
    i32 neox;
    i32 has_ff;
    i32 ty;             // ggml type id of src and dst: 0 f32, 1 f16
    i32 cty;            // with a cache: its ggml type id (0 f32, 1 f16); -1: none
    // The SET_ROWS that stores the rotated rows of one token into a cache (a KV cache's K), fused:
    // element e of head i1 goes to row idx[0] of `cache` at element i1 * ne[0] + e.
    i64 cnb1;           // cache row stride in bytes
    i64 crows;          // cache rows (an index outside them writes nothing)
    i32 idx64;          // the index is i64 (else i32)
    i32 pad;
};

TANDEM_DEVICE float tandem_rope_load(const char* p, int ty) {
    return ty == 1 ? tandem_f16_to_f32(*(const u16*)p) : *(const float*)p;
}

TANDEM_DEVICE void tandem_rope_store(char* p, int ty, float v) {
    if (ty == 1) {
        *(u16*)p = tandem_f32_to_f16(v);
    } else {
        *(float*)p = v;
    }
}

// Unit w of a block's run of heads from h_begin (units per row: n_offs leading copies, `half`
// pairs, then the trailing copies): its element (x0) or pair (x0, x1) of token (i2, i3).
TANDEM_DEVICE void tandem_rope_read(const char* src, const tandem_rope_shape& s, i64 h_begin, i64 units, i64 half,
                                    i64 i2, i64 i3, i64 w, float& x0, float& x1) {
    i64 i1, u;
    tandem_divmod(w, units, i1, u);
    i1 += h_begin;
    const char* a = src + i1 * s.nbs[1] + i2 * s.nbs[2] + i3 * s.nbs[3];
    if (u < s.n_offs || u >= s.n_offs + half) {
        const i64 e = u < s.n_offs ? u : u + half;
        x0 = tandem_rope_load(a + e * s.nbs[0], s.ty);
        return;
    }
    const i64 k = u - s.n_offs;
    const i64 e0 = s.neox ? s.n_offs + k : s.n_offs + 2 * k;
    const i64 e1 = s.neox ? e0 + half : e0 + 1;
    x0 = tandem_rope_load(a + e0 * s.nbs[0], s.ty);
    x1 = tandem_rope_load(a + e1 * s.nbs[0], s.ty);
}

// Writes unit w as tandem_rope_read read it: a copied element as it is, a pair rotated by the
// table's angle; to the cache row crow too where there is one.
TANDEM_DEVICE void tandem_rope_write(char* dst, const tandem_rope_shape& s, char* crow, int csize, i64 h_begin,
                                     i64 units, i64 half, i64 i2, i64 i3, i64 w, float x0, float x1,
                                     const float* cos_t, const float* sin_t) {
    i64 i1, u;
    tandem_divmod(w, units, i1, u);
    i1 += h_begin;
    char* d = dst + i1 * s.nbd[1] + i2 * s.nbd[2] + i3 * s.nbd[3];
    char* c = crow ? crow + i1 * s.ne[0] * csize : nullptr;
    if (u < s.n_offs || u >= s.n_offs + half) {
        const i64 e = u < s.n_offs ? u : u + half;
        tandem_rope_store(d + e * s.nbd[0], s.ty, x0);
        if (c) tandem_rope_store(c + e * csize, s.cty, x0);
        return;
    }
    const i64 k = u - s.n_offs;
    const i64 e0 = s.neox ? s.n_offs + k : s.n_offs + 2 * k;
    const i64 e1 = s.neox ? e0 + half : e0 + 1;
    const float cs = cos_t[k];
    const float sn = sin_t[k];
    const float y0 = x0 * cs - x1 * sn, y1 = x0 * sn + x1 * cs;
    tandem_rope_store(d + e0 * s.nbd[0], s.ty, y0);
    tandem_rope_store(d + e1 * s.nbd[0], s.ty, y1);
    if (c) {
        tandem_rope_store(c + e0 * csize, s.cty, y0);
        tandem_rope_store(c + e1 * csize, s.cty, y1);
    }
}

// Dynamic shared memory: 2 * (n_dims / 2) floats (cos table, then sin table). With s.cty >= 0
// (one token), every value written to dst is written to the cache row idx[0] as well.
extern "C" __global__ void __launch_bounds__(256)
tandem_rope(const char* src, const char* pos, const char* ff, char* dst, tandem_rope_shape s, char* cache,
            const char* idx) {
    extern __shared__ float tandem_rope_table[];
    const i64 half = s.n_dims / 2;
    float* cos_t = tandem_rope_table;
    float* sin_t = tandem_rope_table + half;
    // Per row: n_offs leading copies, `half` pairs, then the trailing copies.
    const i64 units = s.ne[0] - half;
    i64 heads_per_block, unused;
    tandem_divmod(s.ne[1] + gridDim.x - 1, gridDim.x, heads_per_block, unused);
    const i64 h_begin = (i64)blockIdx.x * heads_per_block;
    const i64 h_left = s.ne[1] - h_begin;
    const i64 h_count = h_left <= 0 ? 0 : (h_left < heads_per_block ? h_left : heads_per_block);
    const i64 work = h_count * units;
    const i64 tokens = s.ne[2] * s.ne[3];
    const float ramp_width = fmaxf(s.corr1 - s.corr0, 0.001f);
    // The cache row the fused SET_ROWS writes, null where none (or its index is out of range).
    char* crow = nullptr;
    if (s.cty >= 0) {
        const i64 r = s.idx64 ? *(const i64*)idx : (i64)*(const i32*)idx;
        if (r >= 0 && r < s.crows) crow = cache + r * s.cnb1;
    }
    const int csize = s.cty == 1 ? 2 : 4;
    // Where the block's work for a token is at most one unit a thread (the launcher's decode
    // grids), each thread reads its unit before the table is built, so the loads and the f64
    // math overlap instead of following each other.
    const bool one = work <= (i64)blockDim.x;
    for (i64 t = blockIdx.y; t < tokens; t += gridDim.y) {
        i64 i3, i2;
        tandem_divmod(t, s.ne[2], i3, i2);
        float x0 = 0.0f, x1 = 0.0f;
        if (one && (i64)threadIdx.x < work) tandem_rope_read(src, s, h_begin, units, half, i2, i3, threadIdx.x, x0, x1);
        const double p = (double)*(const i32*)(pos + i2 * s.nbp);
        for (i64 k = threadIdx.x; k < half; k += blockDim.x) {
            double extrap = p * pow(s.freq_base, -2.0 * (double)k / (double)s.n_dims);
            if (s.has_ff) {
                extrap *= 1.0 / (double)*(const float*)(ff + k * s.nbf);
            }
            const double interp = s.freq_scale * extrap;
            double theta = interp;
            if (s.ext_factor != 0.0) {
                float y = ((float)k - s.corr0) / ramp_width;
                y = y < 0.0f ? 0.0f : (y > 1.0f ? 1.0f : y);
                const double mix = (double)(1.0f - y) * s.ext_factor;
                theta = interp * (1.0 - mix) + extrap * mix;
            }
            double sn, cs;
            sincos(theta, &sn, &cs);
            cos_t[k] = (float)(cs * s.mscale);
            sin_t[k] = (float)(sn * s.mscale);
        }
        __syncthreads();
        if (one) {
            if ((i64)threadIdx.x < work) {
                tandem_rope_write(dst, s, crow, csize, h_begin, units, half, i2, i3, threadIdx.x, x0, x1, cos_t, sin_t);
            }
        } else {
            for (i64 w = threadIdx.x; w < work; w += blockDim.x) {
                tandem_rope_read(src, s, h_begin, units, half, i2, i3, w, x0, x1);
                tandem_rope_write(dst, s, crow, csize, h_begin, units, half, i2, i3, w, x0, x1, cos_t, sin_t);
            }
        }
        // The next token rewrites the table.
        __syncthreads();
    }
}
