// FLASH_ATTN_EXT: out = softmax(scale · q·kᵀ (softcapped) + slope · mask, sink) · v for every
// (query, head), with an online softmax over tiles of K/V rows.
//
// A block owns `rows` (query, head) rows of one kv head of one sequence (row rr of the group is
// head group_base + rr / n_q, query rr % n_q: a decode step's GQA heads share a block, a prefill
// block holds consecutive queries of one head) and a range of kv rows (its *split*). For each tile
// of `kt` kv rows it
//   1. stages the mask's bias (slope · mask) for its rows; a tile masked out for every row is
//      skipped before any K/V byte is read (causal prefill skips half the tiles);
//   2. copies the tile's K and V rows into shared memory as stored (f16, bf16, f32 or ggml blocks:
//      nothing is dequantized in memory), in 16-, 4- or 2-byte words as the strides allow;
//   3. scores: a few adjacent threads per kv row, each dequantizing every few eight-value chunk
//      of the row in registers and dotting it with every row's q (held in shared memory as f32),
//      their partial dots added across the lanes;
//   4. updates each row's running max and sum (one wave per row);
//   5. accumulates p · V: a thread per (eight output columns, set of rows, set of kv rows).
// At the end the threads that shared a row's columns over kv rows add up their sums, and the block
// writes either the normalized output (one split) or its unnormalized sums with the row's max and
// sum (several splits: flash-decoding), which tandem_fa_reduce combines. Splits exist so that a
// decode step's few kv heads still fill every SM / CU.
//
// Everything is computed in f32 (ggml's precision setting only ever allows more rounding); q is
// not rounded to f16 as ggml's CUDA and CPU vector paths do. Wave size comes from warpSize.
#include "tandem_hip.h"

// Compile units: the runtime builds this family a part at a time (-DTANDEM_UNIT=1 and one of
// TANDEM_UNIT_F16 / _Q8_0 / _ANY for the f32 kernels of those K/V types, _REDUCE for the
// split reduction, _D64 / _D96 / _D128 / _D256 for the tensor-core kernels of a head size);
// without TANDEM_UNIT every entry is defined. The units are listed in kernels-hip/src/fam/rows.rs.
#if !defined(TANDEM_UNIT)
#define TANDEM_UNIT_ALL 1
#endif

// Mirrors `FaShape` in backend/src/gpu/ops/flash_attn.rs (312 bytes, no padding).
struct tandem_fa_shape {
    i64 nbq[4];   // q byte strides ([dk, n_q, n_head, n_seq], nbq[0] = 4)
    i64 nbk[4];   // k byte strides ([dk, n_kv, n_head_kv, n_seq_kv])
    i64 nbv[4];   // v byte strides ([dv, n_kv, n_head_kv, n_seq_kv])
    i64 nbm[4];   // mask byte strides ([>= n_kv, >= n_q, nem2, nem3] f16)
    i64 nbd[4];   // dst byte strides ([dv, n_head, n_q, n_seq], nbd[0] = 4)
    i64 nem2, nem3;
    i64 nbsink;
    i32 dk, dv, n_q, n_head_kv, n_kv, seq_per_kv;
    i32 group;       // q heads per kv head
    i32 rows;        // rows per block
    i32 row_blocks;  // blocks over one kv head's group * n_q rows
    i32 kt;          // kv rows per tile (a power of two, at most 64)
    i32 n_splits;
    i32 split_len;   // kv rows per split (a multiple of kt)
    i32 k_type, v_type;   // ggml type numbers
    i32 k_bytes, v_bytes; // bytes of one K / V row
    i32 k_ss, v_ss;       // shared-memory row strides (multiples of 16 for 16-byte words, else 4)
    i32 k_word, v_word;   // copy width in bytes: 16, 4 or 2
    i32 row_groups;  // output: thread groups over rows ...
    i32 kv_groups;   // ... and over kv rows (row_groups * kv_groups * dv / 8 <= threads)
    i32 kv_area;     // bytes before the q rows: the K and V tiles, or the output sums if larger
    i32 has_mask, has_sinks;
    float q_scale;   // scale, or scale / softcap with a softcap
    float softcap;
    float max_bias, m0, m1;
    i32 n_head_log2;
    i32 pipe;        // double-buffered tiles copied without waiting (cp.async; NVIDIA sm_80+)
};

// The shapes of the kernels: the decode ones hold exactly R4/R8/R16 rows a block (a GQA group
// of one to a few queries, padded) and keep five blocks on an SM (at most 102 registers on
// NVIDIA), so that enough copies are in flight; the large one holds up to 32 rows (prefill).
#define TANDEM_FA_SMALL_BLOCKS 5
#define TANDEM_FA_LARGE_ROWS 32

#define TANDEM_FA_THREADS 128
#define TANDEM_FA_F32 0
#define TANDEM_FA_F16 1
#define TANDEM_FA_Q4_0 2
#define TANDEM_FA_Q4_1 3
#define TANDEM_FA_Q5_0 6
#define TANDEM_FA_Q5_1 7
#define TANDEM_FA_Q8_0 8
#define TANDEM_FA_IQ4_NL 20
#define TANDEM_FA_BF16 30

// Two bytes of shared memory (every block field is 2-byte aligned in a row that starts 4-aligned).
TANDEM_DEVICE u32 tandem_fa_u16(const u8* p) {
    return *(const u16*)p;
}
// Four bytes at an even address.
TANDEM_DEVICE u32 tandem_fa_u32(const u8* p) {
    return tandem_fa_u16(p) | (tandem_fa_u16(p + 2) << 16);
}

// iq4_nl's 16 levels (ggml's kvalues_iq4nl).
TANDEM_DEVICE float tandem_fa_iq4nl(u32 q) {
    const u64 lo = 0xf6eaddcfbfad9881ull;  // -127 -104 -83 -65 -49 -35 -22 -10
    const u64 hi = 0x7159453526190d01ull;  // 1 13 25 38 53 69 89 113
    const u64 w = (q & 8u) ? hi : lo;
    return (float)(int)(i8)(u8)(w >> (8u * (q & 7u)));
}

// Elements d .. d + 7 (d a multiple of 8) of one row of type `ty` held in shared memory at `p`.
// With a constant `ty` (every call after inlining of a specialised kernel) the branches fold.
TANDEM_DEVICE void tandem_fa_row8(int ty, const u8* p, int d, float* o) {
    if (ty == TANDEM_FA_F16 || ty == TANDEM_FA_BF16) {
        const uint4 w = *(const uint4*)(p + 2 * d);
        const u32 u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            if (ty == TANDEM_FA_F16) {
                o[2 * i] = tandem_f16_to_f32((u16)(u[i] & 0xffffu));
                o[2 * i + 1] = tandem_f16_to_f32((u16)(u[i] >> 16));
            } else {
                o[2 * i] = __uint_as_float(u[i] << 16);
                o[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
            }
        }
        return;
    }
    if (ty == TANDEM_FA_F32) {
        const float4 a = *(const float4*)(p + 4 * d);
        const float4 b = *(const float4*)(p + 4 * d + 16);
        o[0] = a.x;
        o[1] = a.y;
        o[2] = a.z;
        o[3] = a.w;
        o[4] = b.x;
        o[5] = b.y;
        o[6] = b.z;
        o[7] = b.w;
        return;
    }
    const int blk = d >> 5, off = d & 31;
    if (ty == TANDEM_FA_Q8_0) {
        const u8* b = p + blk * 34;
        const float s = tandem_f16_to_f32((u16)tandem_fa_u16(b));
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const u32 w = tandem_fa_u16(b + 2 + off + 2 * i);
            o[2 * i] = s * (float)(int)(i8)(u8)(w & 0xffu);
            o[2 * i + 1] = s * (float)(int)(i8)(u8)(w >> 8);
        }
        return;
    }
    // 4- and 5-bit blocks: element j < 16 is the low nibble of byte j, element j >= 16 the high
    // nibble of byte j - 16; q5 types add bit j of qh as the fifth bit.
    int size = 18, qs_at = 2, qh_at = 0;
    if (ty == TANDEM_FA_Q4_1) {
        size = 20;
        qs_at = 4;
    } else if (ty == TANDEM_FA_Q5_0) {
        size = 22;
        qs_at = 6;
        qh_at = 2;
    } else if (ty == TANDEM_FA_Q5_1) {
        size = 24;
        qs_at = 8;
        qh_at = 4;
    }
    const u8* b = p + blk * size;
    const float s = tandem_f16_to_f32((u16)tandem_fa_u16(b));
    const float m = (ty == TANDEM_FA_Q4_1 || ty == TANDEM_FA_Q5_1) ? tandem_f16_to_f32((u16)tandem_fa_u16(b + 2)) : 0.0f;
    const int shift = off < 16 ? 0 : 4;
    const u32 q0 = tandem_fa_u32(b + qs_at + (off & 15));
    const u32 q1 = tandem_fa_u32(b + qs_at + (off & 15) + 4);
    const u32 qh = qh_at ? (tandem_fa_u32(b + qh_at) >> off) : 0u;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        u32 q = (((i < 4 ? q0 : q1) >> (8 * (i & 3) + shift)) & 0x0fu);
        if (ty == TANDEM_FA_IQ4_NL) {
            o[i] = s * tandem_fa_iq4nl(q);
        } else if (ty == TANDEM_FA_Q4_0) {
            o[i] = s * (float)((int)q - 8);
        } else if (ty == TANDEM_FA_Q4_1) {
            o[i] = s * (float)q + m;
        } else {
            q |= ((qh >> i) & 1u) << 4;
            o[i] = ty == TANDEM_FA_Q5_0 ? s * (float)((int)q - 16) : s * (float)q + m;
        }
    }
}

// Copies `n` rows of `bytes` bytes (row i at src + i * stride) into shared memory rows `ss` apart,
// in words of WORD bytes; every thread of the block takes part.
template <typename W>
TANDEM_DEVICE void tandem_fa_stage(u8* dst, const char* src, i64 stride, int n, int bytes, int ss) {
    const int units = bytes / (int)sizeof(W);
    const int total = n * units;
    // Eight words in flight per thread before any is stored.
    for (int u0 = threadIdx.x; u0 < total; u0 += 8 * TANDEM_FA_THREADS) {
        W w[8] = {};
        int at[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int u = u0 + i * TANDEM_FA_THREADS;
            if (u < total) {
                const int r = u / units, c = u - r * units;
                w[i] = *(const W*)(src + r * stride + c * (int)sizeof(W));
                at[i] = r * ss + c * (int)sizeof(W);
            }
        }
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            if (at[i] >= 0) {
                *(W*)(dst + at[i]) = w[i];
            }
        }
    }
}

TANDEM_DEVICE void tandem_fa_stage_rows(u8* dst, const char* src, i64 stride, int n, int bytes, int ss, int word) {
    if (word == 16) {
        tandem_fa_stage<uint4>(dst, src, stride, n, bytes, ss);
    } else if (word == 4) {
        tandem_fa_stage<u32>(dst, src, stride, n, bytes, ss);
    } else {
        tandem_fa_stage<u16>(dst, src, stride, n, bytes, ss);
    }
}

#if defined(TANDEM_NVIDIA) && __CUDA_ARCH__ >= 800
#define TANDEM_FA_ASYNC 1
#endif

// The same rows copied without waiting (cp.async; 16- or 4-byte words). Only launched where
// TANDEM_FA_ASYNC is defined; elsewhere it copies synchronously.
TANDEM_DEVICE void tandem_fa_stage_async(u8* dst, const char* src, i64 stride, int n, int bytes, int ss, int word) {
#if defined(TANDEM_FA_ASYNC)
    const int units = bytes / word;
    // Row and word of this thread's copies, stepped without dividing.
    int r = (int)threadIdx.x / units, c = (int)threadIdx.x - r * units;
    const int dr = TANDEM_FA_THREADS / units, dc = TANDEM_FA_THREADS - dr * units;
    const u32 base = (u32)__cvta_generic_to_shared(dst);
    while (r < n) {
        const char* g = src + r * stride + c * word;
        const u32 d = base + r * ss + c * word;
        if (word == 16) {
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(g) : "memory");
        } else {
            asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(d), "l"(g) : "memory");
        }
        r += dr;
        c += dc;
        if (c >= units) {
            c -= units;
            ++r;
        }
    }
#else
    tandem_fa_stage_rows(dst, src, stride, n, bytes, ss, word);
#endif
}

TANDEM_DEVICE void tandem_fa_commit() {
#if defined(TANDEM_FA_ASYNC)
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}

// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
TANDEM_DEVICE void tandem_fa_wait() {
#if defined(TANDEM_FA_ASYNC)
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

// KTY / VTY: the K / V type when fixed at compile time, -1 for the shape's. MAXR: rows a block
// holds at most (the size of the per-thread score array); EXACT: the block holds exactly MAXR
// rows and ROW_GROUPS = MAXR / OROWS (the decode kernels), so no row loop has a bound known only
// at run time; OROWS: rows one thread accumulates output for at most.
template <int KTY, int VTY, int MAXR, bool EXACT, int OROWS>
TANDEM_DEVICE void tandem_fa_tile(const char* q, const char* k, const char* v, const char* mask, const char* sinks,
                                  char* dst, float* partial, const tandem_fa_shape& s) {
    extern __shared__ __align__(16) u8 tandem_fa_smem[];
    const int kty = KTY >= 0 ? KTY : s.k_type;
    const int vty = VTY >= 0 ? VTY : s.v_type;
    const int R = EXACT ? MAXR : s.rows;
    const int RG = EXACT ? MAXR / OROWS : s.row_groups;
    const int KT = s.kt, t = threadIdx.x;
#if defined(TANDEM_FA_ASYNC)
    const bool pipe = s.pipe != 0;
#else
    const bool pipe = false;
#endif

    // Shared memory: K and V tiles (two of each when pipelined; at the end the output sums) |
    // q rows (f32) | scores | row state.
    const int tile_bytes = KT * (s.k_ss + s.v_ss);
    float* qs = (float*)(tandem_fa_smem + s.kv_area);
    float* sc = qs + R * s.dk;          // [R][KT]
    float* m_s = sc + R * KT;           // running max
    float* l_s = m_s + R;               // running sum
    float* a_s = l_s + R;               // this tile's rescale factor
    float* slope_s = a_s + R;
    int* qi_s = (int*)(slope_s + R);    // query of each row, -1 past the group
    int* h_s = qi_s + R;                // head of each row
    // Byte offset of each row's mask row. 8-byte aligned: everything before it is a multiple of
    // 16 bytes plus R * (dk + kt + 6) floats, and dk + kt + 6 is even.
    i64* moff_s = (i64*)(h_s + R);

    const int kvh = blockIdx.y % s.n_head_kv;
    const int rb = blockIdx.y / s.n_head_kv;
    const int seq = blockIdx.z;
    const int kv_seq = seq / s.seq_per_kv;
    const int split = blockIdx.x;
    const int group_rows = s.group * s.n_q;
    const int row0 = rb * R;
    const char* kbase = k + kvh * s.nbk[2] + kv_seq * s.nbk[3];
    const char* vbase = v + kvh * s.nbv[2] + kv_seq * s.nbv[3];
    const int j_begin = split * s.split_len;
    const int j_end = min(s.n_kv, j_begin + s.split_len);

    // The first tile's copies go out before anything else.
    if (pipe && j_begin < j_end) {
        const int n = min(KT, j_end - j_begin);
        tandem_fa_stage_async(tandem_fa_smem, kbase + j_begin * s.nbk[1], s.nbk[1], n, s.k_bytes, s.k_ss, s.k_word);
        tandem_fa_stage_async(tandem_fa_smem + KT * s.k_ss, vbase + j_begin * s.nbv[1], s.nbv[1], n, s.v_bytes, s.v_ss,
                              s.v_word);
        tandem_fa_commit();
    }

    for (int r = t; r < R; r += TANDEM_FA_THREADS) {
        const int rr = row0 + r;
        const bool ok = rr < group_rows;
        const int h = kvh * s.group + (ok ? rr / s.n_q : 0);
        const int qi = ok ? rr % s.n_q : -1;
        qi_s[r] = qi;
        h_s[r] = h;
        float slope = 1.0f;
        if (s.max_bias > 0.0f) {
            slope = h < s.n_head_log2 ? powf(s.m0, (float)(h + 1)) : powf(s.m1, (float)(2 * (h - s.n_head_log2) + 1));
        }
        slope_s[r] = slope;
        moff_s[r] = (s.has_mask && ok) ? qi * s.nbm[1] + (h % s.nem2) * s.nbm[2] + (seq % s.nem3) * s.nbm[3] : -1;
        m_s[r] = -TANDEM_INF;
        l_s[r] = 0.0f;
    }
    __syncthreads();
    // q rows, scaled, as f32 (rows past the group read as zeros).
    for (int e = t; e < R * s.dk; e += TANDEM_FA_THREADS) {
        const int r = e / s.dk, d = e - r * s.dk;
        float x = 0.0f;
        if (qi_s[r] >= 0) {
            x = *(const float*)(q + (i64)d * 4 + qi_s[r] * s.nbq[1] + h_s[r] * s.nbq[2] + seq * s.nbq[3]);
        }
        qs[e] = x * s.q_scale;
    }

    // Output ownership: eight columns, a set of rows and a set of kv rows per thread.
    const int chunks = s.dv >> 3;
    const int oc = t % chunks;
    const int og = t / chunks;
    const int org = og % RG;
    const int okg = og / RG;
    const bool out_active = okg < s.kv_groups;
    float acc[OROWS][8];
#pragma unroll
    for (int i = 0; i < OROWS; ++i) {
#pragma unroll
        for (int c = 0; c < 8; ++c) {
            acc[i][c] = 0.0f;
        }
    }
    // Score ownership: TPK adjacent lanes per kv row, each taking every TPK-th chunk of 8 values.
    const int TPK = TANDEM_FA_THREADS / KT;
    const int sj = t / TPK;
    const int part = t & (TPK - 1);
    const int dk_chunks = s.dk >> 3;

    for (int j0 = j_begin; j0 < j_end; j0 += KT) {
        const int n = min(KT, j_end - j0);
        const int buf = pipe ? ((j0 - j_begin) / KT) & 1 : 0;
        u8* ks = tandem_fa_smem + buf * tile_bytes;
        u8* vs = ks + KT * s.k_ss;
        if (pipe) {
            // The next tile's copies go out now and land while this one is computed.
            const int j1 = j0 + KT;
            if (j1 < j_end) {
                const int n1 = min(KT, j_end - j1);
                u8* kn = tandem_fa_smem + (buf ^ 1) * tile_bytes;
                tandem_fa_stage_async(kn, kbase + j1 * s.nbk[1], s.nbk[1], n1, s.k_bytes, s.k_ss, s.k_word);
                tandem_fa_stage_async(kn + KT * s.k_ss, vbase + j1 * s.nbv[1], s.nbv[1], n1, s.v_bytes, s.v_ss,
                                      s.v_word);
                tandem_fa_commit();
                tandem_fa_wait<1>();
            } else {
                tandem_fa_wait<0>();
            }
        } else {
            // 1. Bias of the mask; skip a tile that no row sees before reading any of it.
            if (s.has_mask) {
                int live = 0;
                for (int e = t; e < R * KT; e += TANDEM_FA_THREADS) {
                    const int r = e / KT, j = e - r * KT;
                    float b = -TANDEM_INF;
                    if (j < n && moff_s[r] >= 0) {
                        const float mv = tandem_f16_to_f32(*(const u16*)(mask + moff_s[r] + (i64)(j0 + j) * 2));
                        b = mv == -TANDEM_INF ? -TANDEM_INF : slope_s[r] * mv;
                    }
                    live |= b != -TANDEM_INF;
                    sc[e] = b;
                }
                if (!__syncthreads_or(live)) {
                    continue;
                }
            }
            // 2. K and V rows as stored.
            tandem_fa_stage_rows(ks, kbase + j0 * s.nbk[1], s.nbk[1], n, s.k_bytes, s.k_ss, s.k_word);
            tandem_fa_stage_rows(vs, vbase + j0 * s.nbv[1], s.nbv[1], n, s.v_bytes, s.v_ss, s.v_word);
        }
        // Pipelined: the mask entries this thread writes, loaded ahead of the barrier and kept as
        // their bits, so nothing waits for them before the dot products are done.
        u16 mb[MAXR];
#pragma unroll
        for (int r = 0; r < MAXR; ++r) {
            mb[r] = 0;
            if (pipe && (EXACT || r < R) && (r & (TPK - 1)) == part && sj < n && moff_s[r] >= 0) {
                mb[r] = *(const u16*)(mask + moff_s[r] + (i64)(j0 + sj) * 2);
            }
        }
        __syncthreads();

        // 3. Scores.
        float dot[MAXR];
#pragma unroll
        for (int r = 0; r < MAXR; ++r) {
            dot[r] = 0.0f;
        }
        if (sj < n) {
            const u8* krow = ks + sj * s.k_ss;
            for (int c = part; c < dk_chunks; c += TPK) {
                float kv[8];
                tandem_fa_row8(kty, krow, c * 8, kv);
#pragma unroll
                for (int r = 0; r < MAXR; ++r) {
                    if (EXACT || r < R) {
                        const float4 a = *(const float4*)(qs + r * s.dk + c * 8);
                        const float4 b = *(const float4*)(qs + r * s.dk + c * 8 + 4);
                        dot[r] += a.x * kv[0] + a.y * kv[1] + a.z * kv[2] + a.w * kv[3] + b.x * kv[4] + b.y * kv[5] +
                                  b.z * kv[6] + b.w * kv[7];
                    }
                }
            }
        }
#pragma unroll
        for (int r = 0; r < MAXR; ++r) {
            if (EXACT || r < R) {
                for (int o = TPK >> 1; o > 0; o >>= 1) {
                    dot[r] += __shfl_xor(dot[r], o);
                }
                if ((r & (TPK - 1)) == part) {
                    float bias;
                    if (sj >= n) {
                        bias = -TANDEM_INF;
                    } else if (!pipe) {
                        bias = s.has_mask ? sc[r * KT + sj] : 0.0f;
                    } else if (qi_s[r] < 0) {
                        bias = -TANDEM_INF;
                    } else {
                        const float mv = tandem_f16_to_f32(mb[r]);
                        bias = mv == -TANDEM_INF ? -TANDEM_INF : slope_s[r] * mv;
                    }
                    float x = dot[r];
                    if (s.softcap != 0.0f) {
                        x = s.softcap * tanhf(x);
                    }
                    sc[r * KT + sj] = bias == -TANDEM_INF ? -TANDEM_INF : x + bias;
                }
            }
        }
        __syncthreads();

        // 4. Online softmax, one wave per row.
        const int lane = t % warpSize, wave = t / warpSize, waves = TANDEM_FA_THREADS / warpSize;
        for (int r = wave; r < R; r += waves) {
            float mx = -TANDEM_INF;
            for (int j = lane; j < KT; j += warpSize) {
                mx = fmaxf(mx, sc[r * KT + j]);
            }
            mx = tandem_wave_max(mx);
            const float m_old = m_s[r];
            const float m_new = fmaxf(m_old, mx);
            float sum = 0.0f;
            for (int j = lane; j < KT; j += warpSize) {
                const float x = sc[r * KT + j];
                const float p = (m_new == -TANDEM_INF || x == -TANDEM_INF) ? 0.0f : expf(x - m_new);
                sc[r * KT + j] = p;
                sum += p;
            }
            sum = tandem_wave_sum(sum);
            if (lane == 0) {
                const float alpha = m_old == -TANDEM_INF ? 0.0f : expf(m_old - m_new);
                l_s[r] = l_s[r] * alpha + sum;
                m_s[r] = m_new;
                a_s[r] = alpha;
            }
        }
        __syncthreads();

        // 5. p · V.
        if (out_active) {
#pragma unroll
            for (int i = 0; i < OROWS; ++i) {
                const int r = org + i * RG;
                if (EXACT || r < R) {
                    const float alpha = a_s[r];
#pragma unroll
                    for (int c = 0; c < 8; ++c) {
                        acc[i][c] *= alpha;
                    }
                }
            }
            for (int j = okg; j < n; j += s.kv_groups) {
                float vv[8];
                tandem_fa_row8(vty, vs + j * s.v_ss, oc * 8, vv);
#pragma unroll
                for (int i = 0; i < OROWS; ++i) {
                    const int r = org + i * RG;
                    if (EXACT || r < R) {
                        const float p = sc[r * KT + j];
#pragma unroll
                        for (int c = 0; c < 8; ++c) {
                            acc[i][c] += p * vv[c];
                        }
                    }
                }
            }
        }
        __syncthreads();
    }

    // The kv groups' sums of each row, added in a fixed order in the K/V area.
    float* o_s = (float*)tandem_fa_smem;  // [R][dv]
    for (int g = 0; g < s.kv_groups; ++g) {
        if (out_active && okg == g) {
#pragma unroll
            for (int i = 0; i < OROWS; ++i) {
                const int r = org + i * RG;
                if (EXACT || r < R) {
                    float* o = o_s + r * s.dv + oc * 8;
#pragma unroll
                    for (int c = 0; c < 8; ++c) {
                        o[c] = g == 0 ? acc[i][c] : o[c] + acc[i][c];
                    }
                }
            }
        }
        __syncthreads();
    }

    for (int e = t; e < R * s.dv; e += TANDEM_FA_THREADS) {
        const int r = e / s.dv, c = e - r * s.dv;
        const int qi = qi_s[r];
        if (qi < 0) {
            continue;
        }
        const int h = h_s[r];
        float o = o_s[e];
        if (s.n_splits == 1) {
            float m = m_s[r], l = l_s[r];
            if (s.has_sinks) {
                const float sink = *(const float*)(sinks + h * s.nbsink);
                const float mm = fmaxf(m, sink);
                const float w = m == -TANDEM_INF ? 0.0f : expf(m - mm);
                l = l * w + expf(sink - mm);
                o *= w;
            }
            *(float*)(dst + (i64)c * 4 + h * s.nbd[1] + qi * s.nbd[2] + seq * s.nbd[3]) = l > 0.0f ? o / l : 0.0f;
        } else {
            const i64 row = ((i64)seq * s.n_head_kv + kvh) * group_rows + row0 + r;
            float* part_out = partial + (row * s.n_splits + split) * (i64)(s.dv + 4);
            part_out[c] = o;
            if (c == 0) {
                part_out[s.dv] = m_s[r];
                part_out[s.dv + 1] = l_s[r];
            }
        }
    }
}

#define TANDEM_FA_PARAMS                                                                                   \
    const char *q, const char *k, const char *v, const char *mask, const char *sinks, char *dst, float *partial, \
        tandem_fa_shape s
#define TANDEM_FA_ARGS q, k, v, mask, sinks, dst, partial, s
#define TANDEM_FA_SMALL __launch_bounds__(TANDEM_FA_THREADS, TANDEM_FA_SMALL_BLOCKS)

// f16 K/V, q8_0 K/V, and any other pair (types read from the shape): decode (_r4, _r8, _r16: 4, 8
// or 16 rows), and prefill and every other shape (_l: up to 32 rows, as many as the shape's
// `rows`).
#if TANDEM_UNIT_ALL || TANDEM_UNIT_F16
extern "C" __global__ void TANDEM_FA_SMALL tandem_fa_f16_r4(TANDEM_FA_PARAMS) {
    tandem_fa_tile<TANDEM_FA_F16, TANDEM_FA_F16, 4, true, 4>(TANDEM_FA_ARGS);
}
extern "C" __global__ void TANDEM_FA_SMALL tandem_fa_f16_r8(TANDEM_FA_PARAMS) {
    tandem_fa_tile<TANDEM_FA_F16, TANDEM_FA_F16, 8, true, 4>(TANDEM_FA_ARGS);
}
extern "C" __global__ void TANDEM_FA_SMALL tandem_fa_f16_r16(TANDEM_FA_PARAMS) {
    tandem_fa_tile<TANDEM_FA_F16, TANDEM_FA_F16, 16, true, 4>(TANDEM_FA_ARGS);
}
extern "C" __global__ void __launch_bounds__(TANDEM_FA_THREADS) tandem_fa_f16_l(TANDEM_FA_PARAMS) {
    tandem_fa_tile<TANDEM_FA_F16, TANDEM_FA_F16, TANDEM_FA_LARGE_ROWS, false, 8>(TANDEM_FA_ARGS);
}
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_Q8_0
extern "C" __global__ void TANDEM_FA_SMALL tandem_fa_q8_0_r4(TANDEM_FA_PARAMS) {
    tandem_fa_tile<TANDEM_FA_Q8_0, TANDEM_FA_Q8_0, 4, true, 4>(TANDEM_FA_ARGS);
}
extern "C" __global__ void TANDEM_FA_SMALL tandem_fa_q8_0_r8(TANDEM_FA_PARAMS) {
    tandem_fa_tile<TANDEM_FA_Q8_0, TANDEM_FA_Q8_0, 8, true, 4>(TANDEM_FA_ARGS);
}
extern "C" __global__ void TANDEM_FA_SMALL tandem_fa_q8_0_r16(TANDEM_FA_PARAMS) {
    tandem_fa_tile<TANDEM_FA_Q8_0, TANDEM_FA_Q8_0, 16, true, 4>(TANDEM_FA_ARGS);
}
extern "C" __global__ void __launch_bounds__(TANDEM_FA_THREADS) tandem_fa_q8_0_l(TANDEM_FA_PARAMS) {
    tandem_fa_tile<TANDEM_FA_Q8_0, TANDEM_FA_Q8_0, TANDEM_FA_LARGE_ROWS, false, 8>(TANDEM_FA_ARGS);
}
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_ANY
extern "C" __global__ void TANDEM_FA_SMALL tandem_fa_any_r4(TANDEM_FA_PARAMS) {
    tandem_fa_tile<-1, -1, 4, true, 4>(TANDEM_FA_ARGS);
}
extern "C" __global__ void TANDEM_FA_SMALL tandem_fa_any_r8(TANDEM_FA_PARAMS) {
    tandem_fa_tile<-1, -1, 8, true, 4>(TANDEM_FA_ARGS);
}
extern "C" __global__ void TANDEM_FA_SMALL tandem_fa_any_r16(TANDEM_FA_PARAMS) {
    tandem_fa_tile<-1, -1, 16, true, 4>(TANDEM_FA_ARGS);
}
extern "C" __global__ void __launch_bounds__(TANDEM_FA_THREADS) tandem_fa_any_l(TANDEM_FA_PARAMS) {
    tandem_fa_tile<-1, -1, TANDEM_FA_LARGE_ROWS, false, 8>(TANDEM_FA_ARGS);
}
#endif

// Splits of a row whose loads tandem_fa_reduce issues all at once (16 groups of threads, each
// holding this many splits' output columns in registers); more go through the looping form.
#define TANDEM_FA_REDUCE_HELD 4

// Combines the splits of each row: weights exp(m_i - M) over the splits' maxima (and the sink),
// sum = Σ w_i l_i (+ exp(sink - M)), out = Σ w_i o_i / sum. A split's sums are dv + 4 floats (o,
// then m and l). Block (row, y) writes columns [32 y, 32 y + 32): eight lanes over four columns
// each, sixteen groups of them sharing the splits out and adding up their parts in shared memory.
#if TANDEM_UNIT_ALL || TANDEM_UNIT_REDUCE
extern "C" __global__ void __launch_bounds__(TANDEM_FA_THREADS)
tandem_fa_reduce(const float* partial, const char* sinks, char* dst, tandem_fa_shape s) {
    tandem_grid_release();
    __shared__ float w_s[1024];
    __shared__ __align__(16) float o_s[16][32];
    __shared__ float slots[TANDEM_FA_THREADS / 16 + 1];
    const int group_rows = s.group * s.n_q;
    const i64 row = blockIdx.x;
    const int rr = (int)(row % group_rows);
    const int kvh = (int)((row / group_rows) % s.n_head_kv);
    const int seq = (int)(row / ((i64)group_rows * s.n_head_kv));
    const int h = kvh * s.group + rr / s.n_q, qi = rr % s.n_q;
    const int stride = s.dv + 4;
    const float* part = partial + row * s.n_splits * (i64)stride;
    const int t = threadIdx.x, lane = t % warpSize, wave = t / warpSize;
    const int waves = TANDEM_FA_THREADS / warpSize;

    // Up to 16 * TANDEM_FA_REDUCE_HELD splits (a decode step's), every load of the block is
    // issued before the first is used: the splits' maxima and sums (one split a thread) and the
    // output columns' sums, so the kernel waits for memory once instead of three times.
    const int cq = t & 7, g = t >> 3;
    const int col = blockIdx.y * 32 + cq * 4;
    const bool held = s.n_splits <= 16 * TANDEM_FA_REDUCE_HELD;
    float4 ov[TANDEM_FA_REDUCE_HELD];
    float m_t = -TANDEM_INF, l_t = 0.0f;
    if (held) {
#pragma unroll
        for (int k = 0; k < TANDEM_FA_REDUCE_HELD; ++k) {
            const int i = g + 16 * k;
            ov[k] = i < s.n_splits && col < s.dv ? *(const float4*)(part + (i64)i * stride + col)
                                                 : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
        if (t < s.n_splits) {
            m_t = part[(i64)t * stride + s.dv];
            l_t = part[(i64)t * stride + s.dv + 1];
        }
    }

    float mx = -TANDEM_INF;
    if (held) {
        mx = m_t;
    } else {
        for (int i = t; i < s.n_splits; i += TANDEM_FA_THREADS) {
            mx = fmaxf(mx, part[(i64)i * stride + s.dv]);
        }
    }
    mx = tandem_wave_max(mx);
    if (lane == 0) {
        slots[wave] = mx;
    }
    __syncthreads();
    float big = -TANDEM_INF;
    for (int w = 0; w < waves; ++w) {
        big = fmaxf(big, slots[w]);
    }
    float sink = -TANDEM_INF;
    if (s.has_sinks) {
        sink = *(const float*)(sinks + h * s.nbsink);
        big = fmaxf(big, sink);
    }
    __syncthreads();
    float l = 0.0f;
    if (held) {
        if (t < s.n_splits) {
            const float w = m_t == -TANDEM_INF ? 0.0f : expf(m_t - big);
            w_s[t] = w;
            l = w * l_t;
        }
    } else {
        for (int i = t; i < s.n_splits; i += TANDEM_FA_THREADS) {
            const float m = part[(i64)i * stride + s.dv];
            const float w = m == -TANDEM_INF ? 0.0f : expf(m - big);
            w_s[i] = w;
            l += w * part[(i64)i * stride + s.dv + 1];
        }
    }
    l = tandem_wave_sum(l);
    if (lane == 0) {
        slots[wave] = l;
    }
    __syncthreads();
    float sum = s.has_sinks ? expf(sink - big) : 0.0f;
    for (int w = 0; w < waves; ++w) {
        sum += slots[w];
    }
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;

    float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (held) {
#pragma unroll
        for (int k = 0; k < TANDEM_FA_REDUCE_HELD; ++k) {
            const int i = g + 16 * k;
            if (i < s.n_splits) {
                const float w = w_s[i];
                o.x += w * ov[k].x;
                o.y += w * ov[k].y;
                o.z += w * ov[k].z;
                o.w += w * ov[k].w;
            }
        }
    } else if (col < s.dv) {
#pragma unroll 4
        for (int i = g; i < s.n_splits; i += 16) {
            const float4 x = *(const float4*)(part + (i64)i * stride + col);
            const float w = w_s[i];
            o.x += w * x.x;
            o.y += w * x.y;
            o.z += w * x.z;
            o.w += w * x.w;
        }
    }
    *(float4*)&o_s[g][cq * 4] = o;
    __syncthreads();
    if (t < 32 && blockIdx.y * 32 + t < s.dv) {
        float x = 0.0f;
        for (int i = 0; i < 16; ++i) {
            x += o_s[i][t];
        }
        const int c = blockIdx.y * 32 + t;
        *(float*)(dst + (i64)c * 4 + h * s.nbd[1] + qi * s.nbd[2] + seq * s.nbd[3]) = x * inv;
    }
}
#endif  // TANDEM_UNIT_REDUCE

// ---------------------------------------------------------------- prefill on tensor cores
// tandem_fa_mma_d<D>: FLASH_ATTN_EXT with f16 K and V of head size D (K and V alike) for many
// queries, on NVIDIA sm_80+ m16n8k16 f16 mma with f32 accumulation. A block of four warps owns
// 64 consecutive queries of one q head (16 a warp) and walks the kv rows in tiles of KT:
//   - q is rounded to f16 once (ggml's CUDA kernels do the same); scores, the online softmax
//     and the output sums stay f32, p is rounded to f16 for the p · V mma;
//   - K and V tiles go to shared memory as stored with cp.async, the next tile's copies in
//     flight while this one is multiplied (two stages where the shared memory allows);
//   - S = q · Kᵀ: A fragments of q (registers for D <= 128, ldmatrix from shared memory for
//     larger D), B fragments of K rows by ldmatrix; p · V: the score accumulators repacked as A
//     fragments, V by ldmatrix.trans;
//   - tiles outside the first and last ones with a finite mask value for some row of the block
//     are never read (causal prefill skips those past the diagonal), found by a scan of the mask
//     one tile a warp from both ends;
//   - each row's max and sum are kept in base-2 units (scores times log2 e), so every
//     exponential is one exp2f.
// Every other shape (few queries, other K/V types or head sizes, devices without mma) runs on
// the kernels above; the launcher picks (backend/src/gpu/ops/flash_attn.rs, `mma_plan`).
#if defined(TANDEM_NVIDIA) && __CUDA_ARCH__ >= 800
#define TANDEM_FA_MMA 1
#endif
#define TANDEM_FA_MMA_ROWS 64

#if defined(TANDEM_FA_MMA)
// Two floats as f16x2 (lo in the low half).
TANDEM_DEVICE u32 tandem_fa_pack2(float lo, float hi) {
    u32 r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
TANDEM_DEVICE void tandem_fa_ldsm4(u32 (&r)[4], u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
TANDEM_DEVICE void tandem_fa_ldsm4t(u32 (&r)[4], u32 addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
// c += a · b, m16n8k16, f16 inputs, f32 accumulators.
TANDEM_DEVICE void tandem_fa_hmma(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// Rows j0 .. j0 + ROWS of K or V (D halves each, 16-byte aligned) into shared rows SS bytes
// apart; rows at or past n_kv are zero-filled. THREADS copy: the whole block, or (32) one warp
// its own rows.
template <int D, int ROWS, int SS, int THREADS = TANDEM_FA_THREADS>
TANDEM_DEVICE void tandem_fa_mma_stage(u32 dst, const char* src, i64 stride, int j0, int n_kv) {
    constexpr int CH = D / 8;
    const int t = THREADS == TANDEM_FA_THREADS ? (int)threadIdx.x : (int)threadIdx.x % THREADS;
    for (int u = t; u < ROWS * CH; u += THREADS) {
        const int r = u / CH, c = u - r * CH;
        const bool in = j0 + r < n_kv;
        const char* g = src + (in ? (i64)(j0 + r) * stride + c * 16 : 0);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst + r * SS + c * 16), "l"(g),
                     "r"(in ? 16 : 0)
                     : "memory");
    }
}
// Whether some row of `rows` (mask rows `mrow` .. , nbm1 bytes apart) has a finite entry in kv
// columns j0 .. j0 + KT; one warp, every lane gets the answer.
template <int KT>
TANDEM_DEVICE bool tandem_fa_mma_live(const char* mrow, i64 nbm1, int rows, int j0, int n_kv) {
    const int lane = threadIdx.x % warpSize;
    const int n = min(KT, n_kv - j0);
    bool live = false;
    for (int r = lane; r < rows; r += warpSize) {
        const char* p = mrow + r * nbm1 + (i64)j0 * 2;
        int c = 0;
        for (; c + 8 <= n; c += 8) {
            const uint4 w = *(const uint4*)(p + 2 * c);
            const u32 x[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                live |= (x[i] & 0xFFFFu) != 0xFC00u || (x[i] >> 16) != 0xFC00u;
            }
        }
        for (; c < n; ++c) {
            live |= *(const u16*)(p + 2 * c) != 0xFC00u;
        }
    }
    return __any_sync(0xffffffffu, live);
}
// Mask entries j and j + 1 of a row (f16 bits, the first in the low half), -inf past `n` or for
// a row without one (null).
TANDEM_DEVICE u32 tandem_fa_mask2(const char* mrow, int j, int n) {
    if (mrow == nullptr || j >= n) return 0xFC00FC00u;
    if (j + 1 < n) return *(const u32*)(mrow + (i64)j * 2);
    return 0xFC000000u | *(const u16*)(mrow + (i64)j * 2);
}
// Narrows [lo, hi) to the tiles from the first to the last for which `live(tile)` (called by
// a whole warp, the same tile on every lane) holds, a tile a warp from each end; empty when none.
template <typename F>
TANDEM_DEVICE void tandem_fa_mma_bounds(int& lo, int& hi, int* found_s, F live) {
    constexpr int W = TANDEM_FA_THREADS / 32;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (;;) {
        const int ti = hi - 1 - warp;
        const bool l = ti >= lo && live(ti);
        if (lane == 0) found_s[warp] = l;
        __syncthreads();
        int last = -1;
        for (int w = W - 1; w >= 0; --w) {
            if (found_s[w]) last = hi - 1 - w;
        }
        __syncthreads();
        if (last >= 0) {
            hi = last + 1;
            break;
        }
        if (hi - W <= lo) {
            hi = lo;
            return;
        }
        hi -= W;
    }
    while (lo < hi) {
        const int ti = lo + warp;
        const bool l = ti < hi && live(ti);
        if (lane == 0) found_s[warp] = l;
        __syncthreads();
        int first = -1;
        for (int w = 0; w < W; ++w) {
            if (found_s[w] && first < 0) first = lo + w;
        }
        __syncthreads();
        if (first >= 0) {
            lo = first;
            return;
        }
        lo += W;
    }
}
// The same scan for decode blocks: the 16 rows' mask rows at byte offsets `moff` (-1: a row
// past the group), lanes 0-15 and 16-31 each taking half of the tile's columns.
template <int KT>
TANDEM_DEVICE bool tandem_fa_mmd_live(const char* mask, const i64* moff, int j0, int n_kv) {
    const int lane = threadIdx.x % 32, r = lane % 16;
    const int n = min(KT, n_kv - j0);
    bool live = false;
    if (moff[r] >= 0) {
        const char* p = mask + moff[r] + (i64)j0 * 2;
        int c = (lane / 16) * (KT / 2);
        const int ce = min(n, c + KT / 2);
        for (; c + 8 <= ce; c += 8) {
            const uint4 w = *(const uint4*)(p + 2 * c);
            const u32 x[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                live |= (x[i] & 0xFFFFu) != 0xFC00u || (x[i] >> 16) != 0xFC00u;
            }
        }
        for (; c < ce; ++c) {
            live |= *(const u16*)(p + 2 * c) != 0xFC00u;
        }
    }
    return __any_sync(0xffffffffu, live);
}
#endif

template <int D, int KT>
TANDEM_DEVICE void tandem_fa_mma(const char* q, const char* k, const char* v, const char* mask, const char* sinks,
                                 char* dst, const tandem_fa_shape& s) {
#if defined(TANDEM_FA_MMA)
    constexpr int SS = 2 * D + 16;  // shared row stride in bytes: ldmatrix rows on distinct banks
    constexpr int NT = KT / 8;      // score n-tiles of a warp
    constexpr int DT = D / 8;       // output n-tiles
    constexpr bool QREG = D <= 128;
    constexpr float LOG2E = 1.4426950408889634f;
    extern __shared__ __align__(16) u8 tandem_fa_smem[];
    __shared__ int found_s[TANDEM_FA_THREADS / 32];
    const int t = threadIdx.x, lane = t % 32, warp = t / 32;
    const int g = lane / 4, c4 = lane % 4;
    const int q0 = blockIdx.x * TANDEM_FA_MMA_ROWS;
    const int h = blockIdx.y, seq = blockIdx.z;
    const int kvh = h / s.group, kv_seq = seq / s.seq_per_kv;
    const int rows = min(TANDEM_FA_MMA_ROWS, s.n_q - q0);
    const int stages = s.pipe != 0 ? 2 : 1;
    const u32 qs = (u32)__cvta_generic_to_shared(tandem_fa_smem);
    const u32 ks0 = qs + TANDEM_FA_MMA_ROWS * SS;
    const u32 vs0 = ks0 + stages * KT * SS;
    const char* kbase = k + kvh * s.nbk[2] + kv_seq * s.nbk[3];
    const char* vbase = v + kvh * s.nbv[2] + kv_seq * s.nbv[3];
    const char* mrow0 = s.has_mask ? mask + (i64)q0 * s.nbm[1] + (h % s.nem2) * s.nbm[2] + (seq % s.nem3) * s.nbm[3]
                                   : nullptr;

    // The tiles with a finite mask entry for some row: [lo, hi).
    int lo = 0, hi = (s.n_kv + KT - 1) / KT;
    if (s.has_mask) {
        tandem_fa_mma_bounds(lo, hi, found_s, [&](int ti) {
            return tandem_fa_mma_live<KT>(mrow0, s.nbm[1], rows, ti * KT, s.n_kv);
        });
    }
    if (lo < hi) {
        tandem_fa_mma_stage<D, KT, SS>(ks0, kbase, s.nbk[1], lo * KT, s.n_kv);
        tandem_fa_mma_stage<D, KT, SS>(vs0, vbase, s.nbv[1], lo * KT, s.n_kv);
        asm volatile("cp.async.commit_group;" ::: "memory");
    }

    // q rows as f16 (rows past n_q as zeros).
    for (int e = t; e < TANDEM_FA_MMA_ROWS * (D / 2); e += TANDEM_FA_THREADS) {
        const int r = e / (D / 2), d = 2 * (e - r * (D / 2));
        float x0 = 0.0f, x1 = 0.0f;
        if (r < rows) {
            const char* p = q + (i64)d * 4 + (i64)(q0 + r) * s.nbq[1] + h * s.nbq[2] + seq * s.nbq[3];
            x0 = *(const float*)p;
            x1 = *(const float*)(p + 4);
        }
        *(u32*)(tandem_fa_smem + r * SS + d * 2) = tandem_fa_pack2(x0, x1);
    }
    __syncthreads();
    // This lane's ldmatrix row of the warp's q rows.
    const u32 qa_lane = qs + (16 * warp + lane % 16) * SS + 16 * (lane / 16);
    u32 qf[QREG ? D / 16 : 1][4];
    if constexpr (QREG) {
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) tandem_fa_ldsm4(qf[kk], qa_lane + 32 * kk);
    }

    const int r_a = q0 + 16 * warp + g, r_b = r_a + 8;  // this lane's two rows (queries)
    const bool in_a = r_a < s.n_q, in_b = r_b < s.n_q;
    float slope = 1.0f;
    if (s.max_bias > 0.0f) {
        slope = h < s.n_head_log2 ? powf(s.m0, (float)(h + 1)) : powf(s.m1, (float)(2 * (h - s.n_head_log2) + 1));
    }
    const float qscale2 = s.softcap != 0.0f ? s.q_scale : s.q_scale * LOG2E;
    const float cap2 = s.softcap * LOG2E;
    const float slope2 = slope * LOG2E;
    const char* mrow_a = s.has_mask && in_a ? mrow0 + (i64)(16 * warp + g) * s.nbm[1] : nullptr;
    const char* mrow_b = s.has_mask && in_b ? mrow0 + (i64)(16 * warp + g + 8) * s.nbm[1] : nullptr;

    float o[DT][4];
#pragma unroll
    for (int i = 0; i < DT; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m_a = -TANDEM_INF, m_b = -TANDEM_INF, l_a = 0.0f, l_b = 0.0f;

    for (int ti = lo; ti < hi; ++ti) {
        const int st = stages == 2 ? (ti - lo) & 1 : 0;
        // This lane's mask entries of the tile, loaded before waiting for the tile's copies.
        u32 mk[NT][2];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            const int j = ti * KT + nt * 8 + 2 * c4;
            mk[nt][0] = s.has_mask ? tandem_fa_mask2(mrow_a, j, s.n_kv) : 0u;
            mk[nt][1] = s.has_mask ? tandem_fa_mask2(mrow_b, j, s.n_kv) : 0u;
        }
        if (stages == 2 && ti + 1 < hi) {
            tandem_fa_mma_stage<D, KT, SS>(ks0 + (st ^ 1) * KT * SS, kbase, s.nbk[1], (ti + 1) * KT, s.n_kv);
            tandem_fa_mma_stage<D, KT, SS>(vs0 + (st ^ 1) * KT * SS, vbase, s.nbv[1], (ti + 1) * KT, s.n_kv);
            asm volatile("cp.async.commit_group;" ::: "memory");
            asm volatile("cp.async.wait_group 1;" ::: "memory");
        } else {
            asm volatile("cp.async.wait_group 0;" ::: "memory");
        }
        __syncthreads();
        const u32 ks = ks0 + st * KT * SS, vs = vs0 + st * KT * SS;
        const int j0 = ti * KT;

        // S = q · Kᵀ for the warp's 16 rows and the tile's KT kv rows.
        float sc[NT][4];
#pragma unroll
        for (int i = 0; i < NT; ++i) sc[i][0] = sc[i][1] = sc[i][2] = sc[i][3] = 0.0f;
#pragma unroll
        for (int k2 = 0; k2 < D / 32; ++k2) {
            u32 qa[4], qb[4];
            if constexpr (QREG) {
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    qa[i] = qf[QREG ? 2 * k2 : 0][i];
                    qb[i] = qf[QREG ? 2 * k2 + 1 : 0][i];
                }
            } else {
                tandem_fa_ldsm4(qa, qa_lane + 64 * k2);
                tandem_fa_ldsm4(qb, qa_lane + 64 * k2 + 32);
            }
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                u32 b[4];
                tandem_fa_ldsm4(b, ks + (nt * 8 + lane % 8) * SS + 64 * k2 + 16 * (lane / 8));
                tandem_fa_hmma(sc[nt], qa, b[0], b[1]);
                tandem_fa_hmma(sc[nt], qb, b[2], b[3]);
            }
        }

        // Scale, softcap, mask (base-2 units); the tile's row maxima.
        float mx_a = -TANDEM_INF, mx_b = -TANDEM_INF;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            const int j = j0 + nt * 8 + 2 * c4;
            const u32 wa = mk[nt][0], wb = mk[nt][1];
            const float ba[2] = {tandem_f16_to_f32((u16)(wa & 0xFFFFu)), tandem_f16_to_f32((u16)(wa >> 16))};
            const float bb[2] = {tandem_f16_to_f32((u16)(wb & 0xFFFFu)), tandem_f16_to_f32((u16)(wb >> 16))};
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int jj = j + (e & 1);
                const bool row_in = e < 2 ? in_a : in_b;
                const float bias = e < 2 ? ba[e & 1] : bb[e & 1];
                float x = sc[nt][e] * qscale2;
                if (s.softcap != 0.0f) x = cap2 * tanhf(x);
                x = (!row_in || jj >= s.n_kv || bias == -TANDEM_INF) ? -TANDEM_INF : x + slope2 * bias;
                sc[nt][e] = x;
                if (e < 2) {
                    mx_a = fmaxf(mx_a, x);
                } else {
                    mx_b = fmaxf(mx_b, x);
                }
            }
        }
        mx_a = fmaxf(mx_a, __shfl_xor(mx_a, 1));
        mx_a = fmaxf(mx_a, __shfl_xor(mx_a, 2));
        mx_b = fmaxf(mx_b, __shfl_xor(mx_b, 1));
        mx_b = fmaxf(mx_b, __shfl_xor(mx_b, 2));
        const float mn_a = fmaxf(m_a, mx_a), mn_b = fmaxf(m_b, mx_b);
        const float al_a = m_a == -TANDEM_INF ? 0.0f : exp2f(m_a - mn_a);
        const float al_b = m_b == -TANDEM_INF ? 0.0f : exp2f(m_b - mn_b);
        m_a = mn_a;
        m_b = mn_b;
        float sum_a = 0.0f, sum_b = 0.0f;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float x = sc[nt][e];
                const float p = x == -TANDEM_INF ? 0.0f : exp2f(x - (e < 2 ? mn_a : mn_b));
                sc[nt][e] = p;
                if (e < 2) {
                    sum_a += p;
                } else {
                    sum_b += p;
                }
            }
        }
        l_a = l_a * al_a + sum_a;
        l_b = l_b * al_b + sum_b;
#pragma unroll
        for (int i = 0; i < DT; ++i) {
            o[i][0] *= al_a;
            o[i][1] *= al_a;
            o[i][2] *= al_b;
            o[i][3] *= al_b;
        }

        // o += p · V.
#pragma unroll
        for (int kk = 0; kk < KT / 16; ++kk) {
            const u32 pa[4] = {tandem_fa_pack2(sc[2 * kk][0], sc[2 * kk][1]),
                               tandem_fa_pack2(sc[2 * kk][2], sc[2 * kk][3]),
                               tandem_fa_pack2(sc[2 * kk + 1][0], sc[2 * kk + 1][1]),
                               tandem_fa_pack2(sc[2 * kk + 1][2], sc[2 * kk + 1][3])};
            const u32 vrow = vs + (16 * kk + lane % 8 + 8 * ((lane / 8) % 2)) * SS + 16 * (lane / 16);
#pragma unroll
            for (int dp = 0; dp < D / 16; ++dp) {
                u32 b[4];
                tandem_fa_ldsm4t(b, vrow + 32 * dp);
                tandem_fa_hmma(o[2 * dp], pa, b[0], b[1]);
                tandem_fa_hmma(o[2 * dp + 1], pa, b[2], b[3]);
            }
        }
        __syncthreads();
        if (stages == 1 && ti + 1 < hi) {
            tandem_fa_mma_stage<D, KT, SS>(ks0, kbase, s.nbk[1], (ti + 1) * KT, s.n_kv);
            tandem_fa_mma_stage<D, KT, SS>(vs0, vbase, s.nbv[1], (ti + 1) * KT, s.n_kv);
            asm volatile("cp.async.commit_group;" ::: "memory");
        }
    }

    // Each row's sum over its four lanes, the sink, and the normalized output.
    l_a += __shfl_xor(l_a, 1);
    l_a += __shfl_xor(l_a, 2);
    l_b += __shfl_xor(l_b, 1);
    l_b += __shfl_xor(l_b, 2);
    float w_a = 1.0f, w_b = 1.0f;
    if (s.has_sinks) {
        const float sink = *(const float*)(sinks + h * s.nbsink) * LOG2E;
        const float mm_a = fmaxf(m_a, sink), mm_b = fmaxf(m_b, sink);
        w_a = m_a == -TANDEM_INF ? 0.0f : exp2f(m_a - mm_a);
        w_b = m_b == -TANDEM_INF ? 0.0f : exp2f(m_b - mm_b);
        l_a = l_a * w_a + exp2f(sink - mm_a);
        l_b = l_b * w_b + exp2f(sink - mm_b);
    }
    const float inv_a = l_a > 0.0f ? w_a / l_a : 0.0f;
    const float inv_b = l_b > 0.0f ? w_b / l_b : 0.0f;
    char* out = dst + h * s.nbd[1] + seq * s.nbd[3];
#pragma unroll
    for (int i = 0; i < DT; ++i) {
        const int col = 8 * i + 2 * c4;
        if (in_a) {
            float* p = (float*)(out + (i64)col * 4 + (i64)r_a * s.nbd[2]);
            p[0] = o[i][0] * inv_a;
            p[1] = o[i][1] * inv_a;
        }
        if (in_b) {
            float* p = (float*)(out + (i64)col * 4 + (i64)r_b * s.nbd[2]);
            p[0] = o[i][2] * inv_b;
            p[1] = o[i][3] * inv_b;
        }
    }
#endif
}

// Decode and short batches on tensor cores (tandem_fa_mmd_d<D>): a block owns 16 (query, head)
// rows of one kv head (a GQA group of one to a few queries, padded, as the f32 decode kernels
// map them) and one split of the kv range (flash-decoding, combined by tandem_fa_reduce). The
// split is walked in tiles of 64 kv rows, warp w taking rows 16 w .. 16 w + 15 of each tile
// against all 16 q rows with its own running max, sum and output. Each warp copies its own
// rows (cp.async) into a ring of `s.pipe` stages of its own and waits only for its own copies,
// so no barrier holds the block inside the walk and each warp keeps stages - 1 copies in flight
// while it multiplies. Its first copies go out before q is read and before the mask scan that
// trims the split's dead tiles at both ends (they are copied again in the rare case the scan
// moves the start). The four warps' results are combined through shared memory at the end.
#if defined(TANDEM_FA_MMA)
// Waits until at most `n` (0 .. 3) of this thread's committed groups are still in flight.
TANDEM_DEVICE void tandem_fa_mmd_wait(int n) {
    if (n >= 3) {
        asm volatile("cp.async.wait_group 3;" ::: "memory");
    } else if (n == 2) {
        asm volatile("cp.async.wait_group 2;" ::: "memory");
    } else if (n == 1) {
        asm volatile("cp.async.wait_group 1;" ::: "memory");
    } else {
        asm volatile("cp.async.wait_group 0;" ::: "memory");
    }
}
#endif
template <int D>
TANDEM_DEVICE void tandem_fa_mmd(const char* q, const char* k, const char* v, const char* mask, const char* sinks,
                                 char* dst, float* partial, const tandem_fa_shape& s) {
    tandem_grid_release();
#if defined(TANDEM_FA_MMA)
    constexpr int KT = 64;
    constexpr int SS = 2 * D + 16;
    constexpr int DT = D / 8;
    constexpr int W = TANDEM_FA_THREADS / 32;
    constexpr bool QREG = D <= 128;
    constexpr float LOG2E = 1.4426950408889634f;
    extern __shared__ __align__(16) u8 tandem_fa_smem[];
    __shared__ int found_s[W];
    __shared__ i64 moff_s[16];
    const int t = threadIdx.x, lane = t % 32, warp = t / 32;
    const int g = lane / 4, c4 = lane % 4;
    const int kvh = blockIdx.y % s.n_head_kv, rb = blockIdx.y / s.n_head_kv;
    const int seq = blockIdx.z, kv_seq = seq / s.seq_per_kv, split = blockIdx.x;
    const int group_rows = s.group * s.n_q;
    const int row0 = rb * 16;
    const int stages = s.pipe < 1 ? 1 : (s.pipe > 4 ? 4 : s.pipe);
    const u32 qs = (u32)__cvta_generic_to_shared(tandem_fa_smem);
    // This warp's ring: stage st holds its 16 K rows, then its 16 V rows.
    const u32 ring = qs + 16 * SS + warp * stages * 32 * SS;
    const char* kbase = k + kvh * s.nbk[2] + kv_seq * s.nbk[3];
    const char* vbase = v + kvh * s.nbv[2] + kv_seq * s.nbv[3];
    const int j_begin = split * s.split_len;
    const int j_end = min(s.n_kv, j_begin + s.split_len);

    // The first stages - 1 tiles' rows of this warp, before anything else is read.
    int lo = j_begin / KT, hi = (j_end + KT - 1) / KT;
    const int lo0 = lo;
    auto issue = [&](int ti, int st) {
        const u32 dst_k = ring + st * 32 * SS;
        tandem_fa_mma_stage<D, 16, SS, 32>(dst_k, kbase, s.nbk[1], ti * KT + 16 * warp, s.n_kv);
        tandem_fa_mma_stage<D, 16, SS, 32>(dst_k + 16 * SS, vbase, s.nbv[1], ti * KT + 16 * warp, s.n_kv);
    };
    for (int i = 0; i + 1 < stages; ++i) {
        if (lo + i < hi) issue(lo + i, i);
        asm volatile("cp.async.commit_group;" ::: "memory");
    }

    if (t < 16) {
        const int rr = row0 + t;
        const bool ok = rr < group_rows;
        const int h = kvh * s.group + (ok ? rr / s.n_q : 0), qi = ok ? rr % s.n_q : 0;
        moff_s[t] = (s.has_mask && ok) ? qi * s.nbm[1] + (h % s.nem2) * s.nbm[2] + (seq % s.nem3) * s.nbm[3] : -1;
    }
    // q rows as f16 (rows past the group as zeros).
    for (int e = t; e < 16 * (D / 2); e += TANDEM_FA_THREADS) {
        const int r = e / (D / 2), d = 2 * (e - r * (D / 2));
        const int rr = row0 + r;
        float x0 = 0.0f, x1 = 0.0f;
        if (rr < group_rows) {
            const int h = kvh * s.group + rr / s.n_q, qi = rr % s.n_q;
            const char* p = q + (i64)d * 4 + qi * s.nbq[1] + h * s.nbq[2] + seq * s.nbq[3];
            x0 = *(const float*)p;
            x1 = *(const float*)(p + 4);
        }
        *(u32*)(tandem_fa_smem + r * SS + d * 2) = tandem_fa_pack2(x0, x1);
    }
    __syncthreads();

    if (s.has_mask && lo < hi) {
        tandem_fa_mma_bounds(lo, hi, found_s, [&](int ti) {
            return tandem_fa_mmd_live<KT>(mask, moff_s, ti * KT, j_end);
        });
    }
    if (lo != lo0) {
        // The scan moved the start: the copies in flight are of dead tiles.
        asm volatile("cp.async.wait_group 0;" ::: "memory");
        __syncwarp();
        for (int i = 0; i + 1 < stages; ++i) {
            if (lo + i < hi) issue(lo + i, i);
            asm volatile("cp.async.commit_group;" ::: "memory");
        }
    }
    const u32 qa_lane = qs + (lane % 16) * SS + 16 * (lane / 16);
    u32 qf[QREG ? D / 16 : 1][4];
    if constexpr (QREG) {
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) tandem_fa_ldsm4(qf[kk], qa_lane + 32 * kk);
    }

    // This lane's two rows: g and g + 8.
    const int ra = row0 + g, rb8 = row0 + g + 8;
    const bool in_a = ra < group_rows, in_b = rb8 < group_rows;
    float slope_a = 1.0f, slope_b = 1.0f;
    if (s.max_bias > 0.0f) {
        const int ha = kvh * s.group + (in_a ? ra / s.n_q : 0), hb = kvh * s.group + (in_b ? rb8 / s.n_q : 0);
        slope_a = ha < s.n_head_log2 ? powf(s.m0, (float)(ha + 1)) : powf(s.m1, (float)(2 * (ha - s.n_head_log2) + 1));
        slope_b = hb < s.n_head_log2 ? powf(s.m0, (float)(hb + 1)) : powf(s.m1, (float)(2 * (hb - s.n_head_log2) + 1));
    }
    slope_a *= LOG2E;
    slope_b *= LOG2E;
    const float qscale2 = s.softcap != 0.0f ? s.q_scale : s.q_scale * LOG2E;
    const float cap2 = s.softcap * LOG2E;
    const char* mrow_a = moff_s[g] >= 0 ? mask + moff_s[g] : nullptr;
    const char* mrow_b = moff_s[g + 8] >= 0 ? mask + moff_s[g + 8] : nullptr;

    float o[DT][4];
#pragma unroll
    for (int i = 0; i < DT; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m_a = -TANDEM_INF, m_b = -TANDEM_INF, l_a = 0.0f, l_b = 0.0f;

    for (int ti = lo; ti < hi; ++ti) {
        const int st = (ti - lo) % stages;
        // This lane's mask entries of its warp's 16 kv rows, loaded before the wait.
        u32 mk[2][2];
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
            const int j = ti * KT + 16 * warp + nt * 8 + 2 * c4;
            mk[nt][0] = s.has_mask ? tandem_fa_mask2(mrow_a, j, j_end) : 0u;
            mk[nt][1] = s.has_mask ? tandem_fa_mask2(mrow_b, j, j_end) : 0u;
        }
        // The tile stages - 1 ahead goes into the stage read last time round (every lane of
        // the warp was past its reads at the __syncwarp that ended that round).
        const int ahead = ti + stages - 1;
        if (ahead < hi) issue(ahead, (ahead - lo) % stages);
        asm volatile("cp.async.commit_group;" ::: "memory");
        tandem_fa_mmd_wait(stages - 1);
        __syncwarp();
        const u32 ks = ring + st * 32 * SS, vs = ks + 16 * SS;
        const int j0 = ti * KT + 16 * warp;

        float sc[2][4];
#pragma unroll
        for (int i = 0; i < 2; ++i) sc[i][0] = sc[i][1] = sc[i][2] = sc[i][3] = 0.0f;
#pragma unroll
        for (int k2 = 0; k2 < D / 32; ++k2) {
            u32 qa[4], qb[4];
            if constexpr (QREG) {
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    qa[i] = qf[QREG ? 2 * k2 : 0][i];
                    qb[i] = qf[QREG ? 2 * k2 + 1 : 0][i];
                }
            } else {
                tandem_fa_ldsm4(qa, qa_lane + 64 * k2);
                tandem_fa_ldsm4(qb, qa_lane + 64 * k2 + 32);
            }
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) {
                u32 b[4];
                tandem_fa_ldsm4(b, ks + (nt * 8 + lane % 8) * SS + 64 * k2 + 16 * (lane / 8));
                tandem_fa_hmma(sc[nt], qa, b[0], b[1]);
                tandem_fa_hmma(sc[nt], qb, b[2], b[3]);
            }
        }

        float mx_a = -TANDEM_INF, mx_b = -TANDEM_INF;
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
            const int j = j0 + nt * 8 + 2 * c4;
            const u32 wa = mk[nt][0], wb = mk[nt][1];
            const float ba[2] = {tandem_f16_to_f32((u16)(wa & 0xFFFFu)), tandem_f16_to_f32((u16)(wa >> 16))};
            const float bb[2] = {tandem_f16_to_f32((u16)(wb & 0xFFFFu)), tandem_f16_to_f32((u16)(wb >> 16))};
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int jj = j + (e & 1);
                const bool row_in = e < 2 ? in_a : in_b;
                const float bias = e < 2 ? ba[e & 1] : bb[e & 1];
                float x = sc[nt][e] * qscale2;
                if (s.softcap != 0.0f) x = cap2 * tanhf(x);
                x = (!row_in || jj >= j_end || bias == -TANDEM_INF) ? -TANDEM_INF : x + (e < 2 ? slope_a : slope_b) * bias;
                sc[nt][e] = x;
                if (e < 2) {
                    mx_a = fmaxf(mx_a, x);
                } else {
                    mx_b = fmaxf(mx_b, x);
                }
            }
        }
        mx_a = fmaxf(mx_a, __shfl_xor(mx_a, 1));
        mx_a = fmaxf(mx_a, __shfl_xor(mx_a, 2));
        mx_b = fmaxf(mx_b, __shfl_xor(mx_b, 1));
        mx_b = fmaxf(mx_b, __shfl_xor(mx_b, 2));
        const float mn_a = fmaxf(m_a, mx_a), mn_b = fmaxf(m_b, mx_b);
        const float al_a = m_a == -TANDEM_INF ? 0.0f : exp2f(m_a - mn_a);
        const float al_b = m_b == -TANDEM_INF ? 0.0f : exp2f(m_b - mn_b);
        m_a = mn_a;
        m_b = mn_b;
        float sum_a = 0.0f, sum_b = 0.0f;
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const float x = sc[nt][e];
                const float p = x == -TANDEM_INF ? 0.0f : exp2f(x - (e < 2 ? mn_a : mn_b));
                sc[nt][e] = p;
                if (e < 2) {
                    sum_a += p;
                } else {
                    sum_b += p;
                }
            }
        }
        l_a = l_a * al_a + sum_a;
        l_b = l_b * al_b + sum_b;
        const u32 pa[4] = {tandem_fa_pack2(sc[0][0], sc[0][1]), tandem_fa_pack2(sc[0][2], sc[0][3]),
                           tandem_fa_pack2(sc[1][0], sc[1][1]), tandem_fa_pack2(sc[1][2], sc[1][3])};
        const u32 vrow = vs + (lane % 8 + 8 * ((lane / 8) % 2)) * SS + 16 * (lane / 16);
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
            o[2 * dp][0] *= al_a;
            o[2 * dp][1] *= al_a;
            o[2 * dp][2] *= al_b;
            o[2 * dp][3] *= al_b;
            o[2 * dp + 1][0] *= al_a;
            o[2 * dp + 1][1] *= al_a;
            o[2 * dp + 1][2] *= al_b;
            o[2 * dp + 1][3] *= al_b;
            u32 b[4];
            tandem_fa_ldsm4t(b, vrow + 32 * dp);
            tandem_fa_hmma(o[2 * dp], pa, b[0], b[1]);
            tandem_fa_hmma(o[2 * dp + 1], pa, b[2], b[3]);
        }
        __syncwarp();
    }

    // The four warps' maxima, sums and outputs, combined per row in shared memory (the rings'
    // space: once every copy has landed and every warp is past its last read).
    l_a += __shfl_xor(l_a, 1);
    l_a += __shfl_xor(l_a, 2);
    l_b += __shfl_xor(l_b, 1);
    l_b += __shfl_xor(l_b, 2);
    asm volatile("cp.async.wait_group 0;" ::: "memory");
    __syncthreads();
    float* ow = (float*)tandem_fa_smem;  // [W][16][D]
    float* mw = ow + W * 16 * D;         // [W][16]
    float* lw = mw + W * 16;             // [W][16]
#pragma unroll
    for (int i = 0; i < DT; ++i) {
        const int col = 8 * i + 2 * c4;
        ow[(warp * 16 + g) * D + col] = o[i][0];
        ow[(warp * 16 + g) * D + col + 1] = o[i][1];
        ow[(warp * 16 + g + 8) * D + col] = o[i][2];
        ow[(warp * 16 + g + 8) * D + col + 1] = o[i][3];
    }
    if (c4 == 0) {
        mw[warp * 16 + g] = m_a;
        mw[warp * 16 + g + 8] = m_b;
        lw[warp * 16 + g] = l_a;
        lw[warp * 16 + g + 8] = l_b;
    }
    __syncthreads();
    for (int e = t; e < 16 * D; e += TANDEM_FA_THREADS) {
        const int r = e / D, c = e - r * D;
        const int rr = row0 + r;
        if (rr >= group_rows) continue;
        float mx = -TANDEM_INF;
#pragma unroll
        for (int w = 0; w < W; ++w) mx = fmaxf(mx, mw[w * 16 + r]);
        float o_sum = 0.0f, l_sum = 0.0f;
#pragma unroll
        for (int w = 0; w < W; ++w) {
            const float mv = mw[w * 16 + r];
            const float wt = mv == -TANDEM_INF ? 0.0f : exp2f(mv - mx);
            o_sum += wt * ow[(w * 16 + r) * D + c];
            l_sum += wt * lw[w * 16 + r];
        }
        const int h = kvh * s.group + rr / s.n_q, qi = rr % s.n_q;
        if (s.n_splits == 1) {
            if (s.has_sinks) {
                const float sink = *(const float*)(sinks + h * s.nbsink) * LOG2E;
                const float mm = fmaxf(mx, sink);
                const float wsk = mx == -TANDEM_INF ? 0.0f : exp2f(mx - mm);
                l_sum = l_sum * wsk + exp2f(sink - mm);
                o_sum *= wsk;
            }
            *(float*)(dst + (i64)c * 4 + h * s.nbd[1] + qi * s.nbd[2] + seq * s.nbd[3]) = l_sum > 0.0f ? o_sum / l_sum : 0.0f;
        } else {
            // The reduce kernel's units: the max in natural units, sums relative to it.
            const i64 row = ((i64)seq * s.n_head_kv + kvh) * group_rows + rr;
            float* part_out = partial + (row * s.n_splits + split) * (i64)(s.dv + 4);
            part_out[c] = o_sum;
            if (c == 0) {
                part_out[s.dv] = mx == -TANDEM_INF ? -TANDEM_INF : mx / LOG2E;
                part_out[s.dv + 1] = l_sum;
            }
        }
    }
#endif
}

// On tensor cores, per head size: prefill (tandem_fa_mma_d<D>; kv tiles of 64 rows, 32 at 256)
// and decode and short batches (tandem_fa_mmd_d<D>; kv tiles of 64 rows).
#if TANDEM_UNIT_ALL || TANDEM_UNIT_D64
extern "C" __global__ void __launch_bounds__(TANDEM_FA_THREADS) tandem_fa_mma_d64(TANDEM_FA_PARAMS) {
    tandem_fa_mma<64, 64>(q, k, v, mask, sinks, dst, s);
}
extern "C" __global__ void __launch_bounds__(TANDEM_FA_THREADS) tandem_fa_mmd_d64(TANDEM_FA_PARAMS) {
    tandem_fa_mmd<64>(q, k, v, mask, sinks, dst, partial, s);
}
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_D96
extern "C" __global__ void __launch_bounds__(TANDEM_FA_THREADS) tandem_fa_mma_d96(TANDEM_FA_PARAMS) {
    tandem_fa_mma<96, 64>(q, k, v, mask, sinks, dst, s);
}
extern "C" __global__ void __launch_bounds__(TANDEM_FA_THREADS) tandem_fa_mmd_d96(TANDEM_FA_PARAMS) {
    tandem_fa_mmd<96>(q, k, v, mask, sinks, dst, partial, s);
}
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_D128
extern "C" __global__ void __launch_bounds__(TANDEM_FA_THREADS) tandem_fa_mma_d128(TANDEM_FA_PARAMS) {
    tandem_fa_mma<128, 64>(q, k, v, mask, sinks, dst, s);
}
extern "C" __global__ void __launch_bounds__(TANDEM_FA_THREADS) tandem_fa_mmd_d128(TANDEM_FA_PARAMS) {
    tandem_fa_mmd<128>(q, k, v, mask, sinks, dst, partial, s);
}
#endif
#if TANDEM_UNIT_ALL || TANDEM_UNIT_D256
extern "C" __global__ void __launch_bounds__(TANDEM_FA_THREADS) tandem_fa_mma_d256(TANDEM_FA_PARAMS) {
    tandem_fa_mma<256, 32>(q, k, v, mask, sinks, dst, s);
}
extern "C" __global__ void __launch_bounds__(TANDEM_FA_THREADS) tandem_fa_mmd_d256(TANDEM_FA_PARAMS) {
    tandem_fa_mmd<256>(q, k, v, mask, sinks, dst, partial, s);
}
#endif
