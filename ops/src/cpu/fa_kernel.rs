//! The FLASH_ATTN_EXT CPU kernel: online softmax over tiles of K/V rows.
//!
//! Work is split into items of (sequence, kv head, block of queries, kv chunk). An item holds
//! every q head of its kv head's GQA group for each of its queries, so one K/V tile converted to
//! f32 serves `queries × group` rows. When the items are too few for the pool (decode: one query,
//! few kv heads) the kv range is split into chunks whose partial results (max, sum, V sum) are
//! merged afterwards, the way ggml's CPU backend splits a long decode.
//!
//! Quantized K is dequantized to f32 per tile rather than paired with a q8_0 copy of q (ggml's
//! way): the tile's conversion is shared by all rows of the item, q keeps full precision, and the
//! dot products run as plain f32 FMA. One decode step (32 heads, 8 kv heads, d 128, 4096 keys)
//! costs about the same CPU time for every K/V type: f16 3.8 ms, q4_0 3.8 ms, q8_0 4.5 ms,
//! f32 7.1 ms on one thread of an AMD EPYC VM (`attention::tests::decode_timing`, process CPU
//! time on a shared machine).

use super::fa_check::{alibi_slopes, FaShape};
use super::fa_simd::Simd;
use crate::pool::SendPtr;
use crate::{CpuContext, Srcs};
use tandem_graph::Tensor;

/// K/V rows converted to f32 at a time.
const TILE: usize = 32;
/// Most (query, head) rows an item holds; bounds the per-item accumulators.
const MAX_ROWS: usize = 32;
/// Shortest kv chunk worth its merge step.
const MIN_CHUNK: usize = 256;
/// Items per pool thread to aim for (load balance over uneven masks).
const ITEMS_PER_THREAD: usize = 4;

/// How the work is cut.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Split {
    /// Queries per item.
    pub q_block: usize,
    pub n_q_blocks: usize,
    /// kv rows per chunk and the number of chunks.
    pub chunk: usize,
    pub n_chunks: usize,
}

pub(super) fn plan(s: &FaShape, n_threads: usize) -> Split {
    let target = ITEMS_PER_THREAD * n_threads.max(1);
    let groups = s.n_seq * s.n_head_kv;
    let q_block_max = (MAX_ROWS / s.group()).max(1);
    let q_block = ((s.n_q * groups) / target).clamp(1, q_block_max).min(s.n_q.max(1));
    let n_q_blocks = s.n_q.div_ceil(q_block);
    let items = groups * n_q_blocks;
    let mut n_chunks = 1;
    if items > 0 && items < target && s.n_kv >= 2 * MIN_CHUNK {
        n_chunks = target.div_ceil(items).min(s.n_kv / MIN_CHUNK);
    }
    let chunk = s.n_kv.div_ceil(n_chunks).max(1);
    Split {
        q_block,
        n_q_blocks,
        chunk,
        n_chunks: s.n_kv.div_ceil(chunk).max(1),
    }
}

/// Everything an item reads, resolved once.
struct Job<'a> {
    s: FaShape,
    split: Split,
    q: &'a Tensor,
    k: &'a Tensor,
    v: &'a Tensor,
    mask: Option<&'a Tensor>,
    sinks: Option<&'a Tensor>,
    dst: &'a Tensor,
    dst_ptr: SendPtr,
    /// `[row][chunk][m, l, acc[dv]]` when the kv range is split.
    partials: SendPtr,
    slopes: Vec<f32>,
    /// ggml folds the scale into the softcap: `softcap · tanh(qk · scale / softcap)`.
    kq_scale: f32,
    softcap: f32,
    simd: Simd,
}

/// Running softmax state of one (query, head) row.
struct RowState<'b> {
    m: &'b mut f32,
    l: &'b mut f32,
    acc: &'b mut [f32],
}

/// Computes `dst`; the node has passed `fa_check::validate`, which produced `s`.
///
/// # Safety
/// As [`crate::cpu::compute`]: every tensor's `data` covers `nbytes()`, dst is writable and
/// nothing else touches it meanwhile.
pub(super) unsafe fn run(ctx: &CpuContext, dst: &Tensor, srcs: &Srcs, s: FaShape) {
    let (Some(q), Some(k), Some(v)) = (srcs[0], srcs[1], srcs[2]) else {
        return;
    };
    let split = plan(&s, ctx.n_threads());
    let n_rows = s.n_seq * s.n_q * s.n_head;
    let mut partials = if split.n_chunks > 1 {
        vec![0f32; n_rows * split.n_chunks * (s.dv + 2)]
    } else {
        Vec::new()
    };
    let p = s.params;
    let job = Job {
        s,
        split,
        q,
        k,
        v,
        mask: srcs[3],
        sinks: srcs[4],
        dst,
        dst_ptr: SendPtr(dst.data as *mut u8),
        partials: SendPtr(partials.as_mut_ptr() as *mut u8),
        slopes: alibi_slopes(s.n_head, p.max_bias),
        kq_scale: if p.logit_softcap != 0.0 {
            p.scale / p.logit_softcap
        } else {
            p.scale
        },
        softcap: p.logit_softcap,
        simd: Simd::detect(),
    };
    let n_items = s.n_seq * s.n_head_kv * split.n_chunks * split.n_q_blocks;
    // A q·k and a weighted V row per (row, key) pair.
    let work = (n_rows * s.n_kv).saturating_mul(s.dk + s.dv);
    // SAFETY: each item writes only the dst rows (or partial slots) of its own (query, head,
    // chunk) triples, which no other item shares.
    ctx.par_for_work(n_items, work, |item| unsafe { job.item(item) });
    if split.n_chunks > 1 {
        // SAFETY: each task reads the partials of one row and writes that row of dst.
        ctx.par_for_work(n_rows, n_rows * split.n_chunks * s.dv, |row| unsafe {
            job.merge_row(row)
        });
    }
}

impl Job<'_> {
    /// Runs item `item` = ((seq · n_head_kv + kv head) · n_chunks + chunk) · n_q_blocks + block.
    ///
    /// # Safety
    /// As [`run`]; no two calls share an item.
    unsafe fn item(&self, item: usize) {
        let (s, sp) = (&self.s, &self.split);
        let block = item % sp.n_q_blocks;
        let rest = item / sp.n_q_blocks;
        let chunk = rest % sp.n_chunks;
        let rest = rest / sp.n_chunks;
        let (kv_head, seq) = (rest % s.n_head_kv, rest / s.n_head_kv);
        let kv_seq = seq / s.seq_per_kv.max(1);
        let q0 = block * sp.q_block;
        let q1 = (q0 + sp.q_block).min(s.n_q);
        let c0 = chunk * sp.chunk;
        let c1 = (c0 + sp.chunk).min(s.n_kv);
        let group = s.group();
        let n_rows = (q1 - q0) * group;
        let (dk, dv) = (s.dk, s.dv);

        // Row r = (query q0 + r / group, head kv_head · group + r % group).
        let head_of = |r: usize| kv_head * group + r % group;
        let query_of = |r: usize| q0 + r / group;
        let mut qrows = vec![0f32; n_rows * dk];
        for r in 0..n_rows {
            self.load_q(&mut qrows[r * dk..(r + 1) * dk], query_of(r), head_of(r), seq);
        }
        let mut acc = vec![0f32; n_rows * dv];
        let mut m = vec![f32::NEG_INFINITY; n_rows];
        let mut l = vec![0f32; n_rows];
        let mut kt = vec![0f32; TILE * dk];
        let mut vt = vec![0f32; TILE * dv];
        let mut bias = vec![0f32; n_rows * TILE];
        let mut sc = [0f32; TILE];
        let (k_rb, v_rb) = (
            self.k.ty.row_size(dk as i64).unwrap_or(0),
            self.v.ty.row_size(dv as i64).unwrap_or(0),
        );

        let mut t0 = c0;
        while t0 < c1 {
            let tn = TILE.min(c1 - t0);
            let live = match self.mask {
                None => true,
                Some(mask) => {
                    let mut any = false;
                    for r in 0..n_rows {
                        let (h, qi) = (head_of(r), query_of(r));
                        let off = qi * mask.nb[1]
                            + (h % mask.ne[2] as usize) * mask.nb[2]
                            + (seq % mask.ne[3] as usize) * mask.nb[3]
                            + 2 * t0;
                        // SAFETY: row qi < n_q <= mask.ne[1], columns t0..t0+tn < n_kv <= mask.ne[0].
                        let raw = std::slice::from_raw_parts((mask.data + off) as *const u8, 2 * tn);
                        let b = &mut bias[r * TILE..r * TILE + tn];
                        self.simd.f16_to_f32(raw, b);
                        let slope = self.slopes[h];
                        for x in b.iter_mut() {
                            *x *= slope;
                            any |= *x != f32::NEG_INFINITY;
                        }
                    }
                    any
                }
            };
            if live {
                for j in 0..tn {
                    let kp = self.k.data + (t0 + j) * self.k.nb[1] + kv_head * self.k.nb[2] + kv_seq * self.k.nb[3];
                    let vp = self.v.data + (t0 + j) * self.v.nb[1] + kv_head * self.v.nb[2] + kv_seq * self.v.nb[3];
                    // SAFETY: row t0 + j < n_kv of kv head kv_head < ne[2] and sequence
                    // kv_seq < ne[3]; rows are contiguous (`nb[0]` is the type size).
                    let (kr, vr) = (
                        std::slice::from_raw_parts(kp as *const u8, k_rb),
                        std::slice::from_raw_parts(vp as *const u8, v_rb),
                    );
                    self.simd.row_to_f32(self.k.ty, kr, &mut kt[j * dk..(j + 1) * dk]);
                    self.simd.row_to_f32(self.v.ty, vr, &mut vt[j * dv..(j + 1) * dv]);
                }
                for r in 0..n_rows {
                    let row_bias = self.mask.map(|_| &bias[r * TILE..r * TILE + tn]);
                    let state = RowState {
                        m: &mut m[r],
                        l: &mut l[r],
                        acc: &mut acc[r * dv..(r + 1) * dv],
                    };
                    let qr = &qrows[r * dk..(r + 1) * dk];
                    self.tile_row(qr, &kt[..tn * dk], &vt[..tn * dv], row_bias, &mut sc[..tn], state);
                }
            }
            t0 += tn;
        }

        for r in 0..n_rows {
            let (h, qi) = (head_of(r), query_of(r));
            let row = (seq * s.n_q + qi) * s.n_head + h;
            let a = &mut acc[r * dv..(r + 1) * dv];
            if sp.n_chunks > 1 {
                let slot = (row * sp.n_chunks + chunk) * (dv + 2);
                // SAFETY: the partials buffer holds n_rows · n_chunks slots of dv + 2 floats;
                // this (row, chunk) slot belongs to this item alone.
                let p = std::slice::from_raw_parts_mut((self.partials.get() as *mut f32).add(slot), dv + 2);
                p[0] = m[r];
                p[1] = l[r];
                p[2..].copy_from_slice(a);
            } else {
                self.finish(h, qi, seq, m[r], l[r], a);
            }
        }
    }

    /// Copies q row (query, head, seq) into `out` as f32.
    ///
    /// # Safety
    /// As [`run`]; indices within q's shape.
    unsafe fn load_q(&self, out: &mut [f32], query: usize, head: usize, seq: usize) {
        let q = self.q;
        let base = q.data + query * q.nb[1] + head * q.nb[2] + seq * q.nb[3];
        if q.nb[0] == 4 {
            // SAFETY: the row holds out.len() contiguous f32 inside q's bytes.
            std::ptr::copy_nonoverlapping(base as *const u8, out.as_mut_ptr() as *mut u8, 4 * out.len());
        } else {
            for (i, o) in out.iter_mut().enumerate() {
                // SAFETY: element i < ne[0] of the row.
                *o = ((base + i * q.nb[0]) as *const f32).read_unaligned();
            }
        }
    }

    /// One row against one tile: scores, running max/sum update, V accumulation.
    fn tile_row(&self, q: &[f32], kt: &[f32], vt: &[f32], bias: Option<&[f32]>, sc: &mut [f32], st: RowState) {
        let mut tile_max = f32::NEG_INFINITY;
        // Masked keys get a dot too (their score becomes -inf below, so a NaN in an unused
        // cache cell cannot leak); this keeps the four-row kernel on whole tiles.
        self.simd.dots(q, kt, sc);
        for (j, sj) in sc.iter_mut().enumerate() {
            let b = bias.map_or(0.0, |b| b[j]);
            if b == f32::NEG_INFINITY {
                *sj = f32::NEG_INFINITY;
                continue;
            }
            let mut x = *sj * self.kq_scale;
            if self.softcap != 0.0 {
                x = self.softcap * x.tanh();
            }
            x += b;
            *sj = x;
            tile_max = tile_max.max(x);
        }
        if tile_max == f32::NEG_INFINITY {
            return;
        }
        let m_new = st.m.max(tile_max);
        if m_new > *st.m {
            let f = (*st.m - m_new).exp();
            self.simd.scale(st.acc, f);
            *st.l *= f;
            *st.m = m_new;
        }
        for x in sc.iter_mut() {
            *x -= m_new;
        }
        self.simd.exp_in_place(sc);
        *st.l += sc.iter().sum::<f32>();
        self.simd.weighted_sum(st.acc, vt, sc);
    }

    /// Merges the chunk partials of dst row `row` and writes it.
    ///
    /// # Safety
    /// As [`run`]; called once per row after every item finished.
    unsafe fn merge_row(&self, row: usize) {
        let (s, n_chunks, dv) = (&self.s, self.split.n_chunks, self.s.dv);
        let (h, qi, seq) = (row % s.n_head, (row / s.n_head) % s.n_q, row / (s.n_head * s.n_q));
        // SAFETY: the slots of this row, written by finished items; nothing writes them now.
        let parts = std::slice::from_raw_parts(
            (self.partials.get() as *const f32).add(row * n_chunks * (dv + 2)),
            n_chunks * (dv + 2),
        );
        let mut acc = vec![0f32; dv];
        let (mut m, mut l) = (f32::NEG_INFINITY, 0f32);
        for p in parts.chunks_exact(dv + 2) {
            if p[1] == 0.0 {
                continue;
            }
            let m_new = m.max(p[0]);
            let (fa, fp) = ((m - m_new).exp(), (p[0] - m_new).exp());
            for (a, x) in acc.iter_mut().zip(&p[2..]) {
                *a = *a * fa + x * fp;
            }
            l = l * fa + p[1] * fp;
            m = m_new;
        }
        self.finish(h, qi, seq, m, l, &mut acc);
    }

    /// Adds the head's sink logit (a softmax term with no V row), normalises and writes the row.
    ///
    /// # Safety
    /// As [`run`]; the dst row (head, query, seq) is this caller's alone.
    unsafe fn finish(&self, head: usize, query: usize, seq: usize, m: f32, mut l: f32, acc: &mut [f32]) {
        if let Some(sinks) = self.sinks {
            // SAFETY: head < n_head == sinks.ne[0].
            let sv = ((sinks.data + head * sinks.nb[0]) as *const f32).read_unaligned();
            if sv > m {
                let f = (m - sv).exp();
                self.simd.scale(acc, f);
                l = l * f + 1.0;
            } else {
                l += (sv - m).exp();
            }
        }
        // A row with every score masked and no sink has l == 0: ggml writes zeros.
        let inv = if l == 0.0 { 0.0 } else { 1.0 / l };
        self.simd.scale(acc, inv);
        let d = self.dst;
        let off = head * d.nb[1] + query * d.nb[2] + seq * d.nb[3];
        // SAFETY: dst row of dv contiguous f32 (nb[0] == 4) within dst's bytes; see `run`.
        std::ptr::copy_nonoverlapping(acc.as_ptr() as *const u8, self.dst_ptr.get().add(off), 4 * acc.len());
    }
}
