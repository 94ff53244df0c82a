//! MUL_MAT and MUL_MAT_ID on the CPU.
//!
//! Every column of src1 is converted once into the weight type's activation format
//! ([`vecdot::vec_dot_type`]); then each output element is one [`vecdot::DotFn`] call on a
//! weight row and a converted column. Work is split over rows of src0, so in decode (one or a
//! few columns) all threads stream disjoint parts of the weights. A task owns a band of rows
//! small enough to stay in L2 and walks the columns in groups, so each weight row is read
//! from memory once and reused from cache by every column of a group.

use crate::error::{ensure, need};
use crate::pool::SendPtr;
use crate::vecdot::{self, DotFn};
use crate::{CpuContext, OpError, Srcs};
use half::f16;
use tandem_graph::{ElemType, Op, Tensor};

/// Weight bytes one task keeps hot while it walks the columns (the L2 of a Zen core is 512 KiB
/// to 1 MiB; half of the smaller leaves room for the activations).
const ROW_BAND_BYTES: usize = 256 << 10;
/// Columns per group: the group's activation rows (16 x 4.3 KiB for q8_0 at k = 4096) stay in L2
/// while the band's rows pass over them.
const COLUMN_GROUP: usize = 16;
/// Tasks per thread, so uneven rows (or a busy core) still balance.
const TASKS_PER_THREAD: usize = 8;

pub fn check(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    check_with(dst, srcs, vecdot::supports)
}

/// The shape and type rules of MUL_MAT / MUL_MAT_ID shared with the reference; `weight_ok` says
/// which src0 types the caller can read.
pub(crate) fn check_with(dst: &Tensor, srcs: &Srcs, weight_ok: impl Fn(ElemType) -> bool) -> Result<(), OpError> {
    let src0 = need(dst, srcs, 0)?;
    let src1 = need(dst, srcs, 1)?;
    let fail = |cond: bool, why: &str| ensure(cond, dst, srcs, || why.to_string());
    fail(matches!(dst.op, Op::MulMat | Op::MulMatId), "not a matmul")?;
    fail(weight_ok(src0.ty), "src0 type has no dot product here")?;
    fail(
        matches!(src1.ty, ElemType::F32 | ElemType::F16),
        "src1 must be f32 or f16",
    )?;
    fail(dst.ty == ElemType::F32, "dst must be f32")?;
    // ggml 0.26.0 keeps a hint in MUL_MAT's op_params[1]; 1 (GGML_HINT_SRC0_IS_HADAMARD) makes its CPU
    // backend compute a Walsh-Hadamard transform instead of the product. Decline any hint rather
    // than compute something else.
    if dst.op == Op::MulMat {
        let hint = dst.param_i32(1);
        ensure(hint == 0, dst, srcs, || {
            format!("MUL_MAT hint {hint} (op_params[1]) is not supported")
        })?;
    }
    fail(
        [src0, src1, dst].iter().all(|t| t.ne.iter().all(|&n| n >= 0)),
        "negative extent",
    )?;
    let k = src0.ne[0];
    fail(src1.ne[0] == k, "src0 and src1 rows differ in length")?;
    let act = vecdot::vec_dot_type(src0.ty);
    fail(
        src0.ty.row_size(k).is_some() && act.row_size(k).is_some(),
        "row length is not a whole number of blocks",
    )?;
    fail(src0.nb[0] == src0.ty.type_size(), "src0 rows are not contiguous")?;
    fail(dst.is_contiguous(), "dst is not contiguous")?;
    if dst.op == Op::MulMat {
        fail(src0.ne[2] > 0 && src0.ne[3] > 0, "src0 has an empty batch dimension")?;
        fail(
            src1.ne[2] % src0.ne[2] == 0 && src1.ne[3] % src0.ne[3] == 0,
            "src1's batches are not a multiple of src0's",
        )?;
        fail(
            dst.ne == [src0.ne[1], src1.ne[1], src1.ne[2], src1.ne[3]],
            "dst shape is not [src0.ne1, src1.ne1, src1.ne2, src1.ne3]",
        )?;
    } else {
        let ids = need(dst, srcs, 2)?;
        fail(ids.ty == ElemType::I32, "ids must be i32")?;
        fail(src0.ne[3] == 1 && src1.ne[3] == 1, "4-d experts or inputs")?;
        fail(ids.ne[2] == 1 && ids.ne[3] == 1, "ids must be 2-d")?;
        fail(ids.ne[1] == src1.ne[2], "ids and src1 differ in token count")?;
        fail(
            src1.ne[1] > 0 && ids.ne[0] % src1.ne[1] == 0,
            "ids.ne0 is not a multiple of src1.ne1",
        )?;
        fail(
            dst.ne == [src0.ne[1], ids.ne[0], ids.ne[1], 1],
            "dst shape is not [src0.ne1, ids.ne0, ids.ne1]",
        )?;
    }
    Ok(())
}

/// # Safety
/// See [`super::compute`].
pub unsafe fn run(ctx: &CpuContext, dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    check(dst, srcs)?;
    let (src0, src1) = (need(dst, srcs, 0)?, need(dst, srcs, 1)?);
    let dot = vecdot::dot_fn(src0.ty).ok_or_else(|| OpError::new(dst, srcs, "no dot kernel"))?;
    if dst.op == Op::MulMat {
        // SAFETY: forwarded from the caller; check() proved the shapes.
        unsafe { run_mul_mat(ctx, dst, srcs, src0, src1, dot) }
    } else {
        let ids = need(dst, srcs, 2)?;
        // SAFETY: as above.
        unsafe { run_mul_mat_id(ctx, dst, srcs, src0, src1, ids, dot) }
    }
}

/// All rows of `src1` converted into `act` (row `i1 + ne1 * (i2 + ne2 * i3)` at
/// `that * row_bytes`), in parallel over rows.
///
/// # Safety
/// `src1.data` points at its `nbytes()`; `act` can hold rows of `src1.ne[0]` elements.
pub(crate) unsafe fn convert_src1(ctx: &CpuContext, src1: &Tensor, act: ElemType) -> Result<Vec<u8>, String> {
    let k = src1.ne[0] as usize;
    let row_bytes = act.row_size(k as i64).ok_or("row is not whole blocks")?;
    let rows = src1.nrows() as usize;
    let mut out = vec![0u8; rows * row_bytes];
    let base = SendPtr(out.as_mut_ptr());
    let failed = std::sync::atomic::AtomicBool::new(false);
    ctx.par_chunks_work(rows, 2, rows * k * 4, |r0, r1| {
        let mut scratch = vec![0f32; k];
        for r in r0..r1 {
            let [_, i1, i2, i3] = crate::data::row_index(src1.ne, r as i64);
            let at = src1.data + i1 as usize * src1.nb[1] + i2 as usize * src1.nb[2] + i3 as usize * src1.nb[3];
            for (i, v) in scratch.iter_mut().enumerate() {
                let p = (at + i * src1.nb[0]) as *const u8;
                // SAFETY: element (i, i1, i2, i3) is inside src1 (caller contract); unaligned
                // reads need no alignment.
                *v = unsafe {
                    match src1.ty {
                        ElemType::F16 => f16::from_bits(p.cast::<u16>().read_unaligned()).to_f32(),
                        _ => p.cast::<f32>().read_unaligned(),
                    }
                };
            }
            // SAFETY: row r's bytes are written by this task only (par_chunks ranges are
            // disjoint) and lie inside `out`.
            let dst = unsafe { std::slice::from_raw_parts_mut(base.get().add(r * row_bytes), row_bytes) };
            if vecdot::quantize_activation(act, &scratch, dst).is_err() {
                failed.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
    });
    if failed.into_inner() {
        return Err(format!("cannot convert src1 rows to {act}"));
    }
    Ok(out)
}

/// How many rows of src0 one task owns: enough tasks to keep every thread busy, and a band
/// small enough to stay in cache while the columns pass over it.
fn rows_per_task(ctx: &CpuContext, m: usize, row_bytes: usize, units: usize, flops: usize) -> usize {
    // Below ~64K multiply-adds a task costs more to hand out than to run.
    let wanted = (flops >> 16).clamp(1, ctx.n_threads() * TASKS_PER_THREAD);
    let chunks = wanted.div_ceil(units.max(1)).max(1);
    let by_threads = m.div_ceil(chunks);
    let by_cache = (ROW_BAND_BYTES / row_bytes.max(1)).max(1);
    by_threads.min(by_cache).clamp(1, m.max(1))
}

/// One output column: the converted activation row it reads and the address of its row 0.
#[derive(Clone, Copy)]
struct Column {
    act: usize,
    out: usize,
}

/// One task: rows `rows` of the weight matrix at `w` against `columns`; output rows are f32
/// (4 bytes apart).
///
/// # Safety
/// Every row in `rows` of `w` (stride `w_stride`) holds `k` elements of the weight type, every
/// `columns[i].act` is a row of `act`, and every output slot `out + 4 * r` is writable and
/// written by no other task.
unsafe fn dot_band(
    dot: DotFn,
    k: usize,
    w: usize,
    w_stride: usize,
    rows: std::ops::Range<usize>,
    act: &[u8],
    act_row: usize,
    columns: &[Column],
) {
    for group in columns.chunks(COLUMN_GROUP) {
        for r in rows.clone() {
            let wr = (w + r * w_stride) as *const u8;
            for c in group {
                debug_assert!((c.act + 1) * act_row <= act.len());
                // SAFETY: the caller vouches for the weight row, the activation row and the
                // output slot.
                unsafe { *((c.out + 4 * r) as *mut f32) = dot(k, wr, act.as_ptr().add(c.act * act_row)) };
            }
        }
    }
}

/// # Safety
/// See [`super::compute`]; `check` has passed.
unsafe fn run_mul_mat(
    ctx: &CpuContext,
    dst: &Tensor,
    srcs: &Srcs,
    src0: &Tensor,
    src1: &Tensor,
    dot: DotFn,
) -> Result<(), OpError> {
    let k = src0.ne[0] as usize;
    let m = src0.ne[1] as usize;
    let n = src1.ne[1] as usize;
    let act_ty = vecdot::vec_dot_type(src0.ty);
    let act_row = act_ty.row_size(k as i64).unwrap_or(0);
    // SAFETY: src1 is readable (caller contract).
    let act = unsafe { convert_src1(ctx, src1, act_ty) }.map_err(|e| OpError::new(dst, srcs, e))?;
    let (ne12, ne13) = (src1.ne[2] as usize, src1.ne[3] as usize);
    let (r2, r3) = (ne12 / src0.ne[2] as usize, ne13 / src0.ne[3] as usize);
    let batches = ne12 * ne13;
    // Batch b = i12 + ne12 * i13 reads converted rows b * n .. b * n + n (convert_src1's order).
    let columns: Vec<Vec<Column>> = (0..batches)
        .map(|b| {
            let (i12, i13) = (b % ne12, b / ne12);
            let base = dst.data + i12 * dst.nb[2] + i13 * dst.nb[3];
            (0..n)
                .map(|j| Column {
                    act: b * n + j,
                    out: base + j * dst.nb[1],
                })
                .collect()
        })
        .collect();
    let row_bytes = src0.ty.row_size(k as i64).unwrap_or(0);
    let band = rows_per_task(ctx, m, row_bytes, batches, m * n * k * batches);
    let bands = m.div_ceil(band);
    ctx.par_for_work(batches * bands, (m * k).saturating_mul(n * batches), |task| {
        let (b, band_i) = (task / bands, task % bands);
        let (i12, i13) = (b % ne12, b / ne12);
        let w = src0.data + (i12 / r2) * src0.nb[2] + (i13 / r3) * src0.nb[3];
        let rows = band_i * band..((band_i + 1) * band).min(m);
        // SAFETY: rows of this batch's weight matrix and its converted columns exist (check);
        // the task writes rows `rows` of its own batch's columns, which no other task writes.
        unsafe { dot_band(dot, k, w, src0.nb[1], rows, &act, act_row, &columns[b]) };
    });
    Ok(())
}

/// Reads every expert index and checks it lies in `0..n_expert` before anything is written.
///
/// # Safety
/// `ids.data` points at its `nbytes()`.
unsafe fn read_ids(dst: &Tensor, srcs: &Srcs, ids: &Tensor, n_expert: i64) -> Result<Vec<usize>, OpError> {
    let (n_used, n_tokens) = (ids.ne[0] as usize, ids.ne[1] as usize);
    let mut out = Vec::with_capacity(n_used * n_tokens);
    for t in 0..n_tokens {
        for u in 0..n_used {
            let p = (ids.data + u * ids.nb[0] + t * ids.nb[1]) as *const i32;
            // SAFETY: (u, t) is inside ids (caller contract).
            let e = unsafe { p.read_unaligned() };
            if e < 0 || e as i64 >= n_expert {
                return Err(OpError::new(
                    dst,
                    srcs,
                    format!("ids[{u}, {t}] = {e} is not an expert index (0..{n_expert})"),
                ));
            }
            out.push(e as usize);
        }
    }
    Ok(out)
}

/// # Safety
/// See [`super::compute`]; `check` has passed.
unsafe fn run_mul_mat_id(
    ctx: &CpuContext,
    dst: &Tensor,
    srcs: &Srcs,
    src0: &Tensor,
    src1: &Tensor,
    ids: &Tensor,
    dot: DotFn,
) -> Result<(), OpError> {
    let (k, m, n_expert) = (src0.ne[0] as usize, src0.ne[1] as usize, src0.ne[2] as usize);
    let n_b = src1.ne[1] as usize;
    let (n_used, n_tokens) = (ids.ne[0] as usize, ids.ne[1] as usize);
    // SAFETY: ids is readable (caller contract).
    let experts = unsafe { read_ids(dst, srcs, ids, n_expert as i64) }?;
    let act_ty = vecdot::vec_dot_type(src0.ty);
    let act_row = act_ty.row_size(k as i64).unwrap_or(0);
    // SAFETY: src1 is readable (caller contract).
    let act = unsafe { convert_src1(ctx, src1, act_ty) }.map_err(|e| OpError::new(dst, srcs, e))?;
    // Slot (u, t) reads src1 row (u % n_b, t) and writes dst[:, u, t]; group slots by expert so
    // each expert's rows are streamed once for all tokens routed to it.
    let mut groups: Vec<Vec<Column>> = vec![Vec::new(); n_expert];
    for t in 0..n_tokens {
        for u in 0..n_used {
            groups[experts[t * n_used + u]].push(Column {
                act: (u % n_b) + n_b * t,
                out: dst.data + u * dst.nb[1] + t * dst.nb[2],
            });
        }
    }
    let active: Vec<usize> = (0..n_expert).filter(|&e| !groups[e].is_empty()).collect();
    let row_bytes = src0.ty.row_size(k as i64).unwrap_or(0);
    let band = rows_per_task(ctx, m, row_bytes, active.len(), m * k * n_used * n_tokens);
    let bands = m.div_ceil(band);
    let work = (m * k).saturating_mul(n_used * n_tokens);
    ctx.par_for_work(active.len() * bands, work, |task| {
        let e = active[task / bands];
        let band_i = task % bands;
        let rows = band_i * band..((band_i + 1) * band).min(m);
        // SAFETY: expert e < n_expert (read_ids) so its matrix exists; each slot belongs to one
        // expert and each band to one task, so the written slots are disjoint.
        unsafe {
            dot_band(
                dot,
                k,
                src0.data + e * src0.nb[2],
                src0.nb[1],
                rows,
                &act,
                act_row,
                &groups[e],
            )
        };
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vecdot::testgen::{random_f32, random_weight_row};
    use rand::{Rng, SeedableRng};
    use rand_pcg::Pcg64;
    use tandem_graph::MAX_SRC;

    const SENTINEL: u8 = 0xA5;
    const GUARD: usize = 64;

    /// Bytes a test tensor points into, with guard bytes on both sides.
    struct Storage(Vec<u8>);

    impl Storage {
        fn new(bytes: &[u8]) -> Storage {
            let mut v = vec![SENTINEL; bytes.len() + 2 * GUARD];
            v[GUARD..GUARD + bytes.len()].copy_from_slice(bytes);
            Storage(v)
        }
        fn attach(&mut self, t: &mut Tensor) {
            t.data = self.0.as_mut_ptr() as usize + GUARD;
        }
        fn guards_intact(&self) -> bool {
            let n = self.0.len();
            self.0[..GUARD]
                .iter()
                .chain(&self.0[n - GUARD..])
                .all(|&b| b == SENTINEL)
        }
        fn f32s(&self) -> Vec<f32> {
            self.0[GUARD..self.0.len() - GUARD]
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                .collect()
        }
    }

    fn nmse(got: &[f32], want: &[f32]) -> f64 {
        let err: f64 = got.iter().zip(want).map(|(a, b)| (*a as f64 - *b as f64).powi(2)).sum();
        let norm: f64 = want.iter().map(|b| (*b as f64).powi(2)).sum();
        err / norm.max(1e-30)
    }

    fn srcs<'a>(list: &[&'a Tensor]) -> Srcs<'a> {
        let mut s: Srcs<'a> = [None; MAX_SRC];
        for (i, t) in list.iter().enumerate() {
            s[i] = Some(t);
        }
        s
    }

    /// Runs `dst` on the CPU and the reference; returns (cpu, reference) outputs after checking
    /// for overruns and non-finite values.
    fn run_both(ctx: &CpuContext, dst: &Tensor, inputs: &[&Tensor]) -> (Vec<f32>, Vec<f32>) {
        let s = srcs(inputs);
        let mut outs = Vec::new();
        for on_cpu in [true, false] {
            let mut d = dst.clone();
            let mut mem = Storage::new(&vec![0u8; dst.nbytes()]);
            mem.attach(&mut d);
            // SAFETY: every input points into live storage of its nbytes(); d into mem.
            let r = unsafe {
                if on_cpu {
                    crate::cpu::compute(ctx, &d, &s)
                } else {
                    crate::reference::compute(&d, &s)
                }
            };
            r.unwrap_or_else(|e| panic!("{}: {e}", if on_cpu { "cpu" } else { "reference" }));
            assert!(mem.guards_intact(), "write outside dst");
            let v = mem.f32s();
            assert!(v.iter().all(|x| x.is_finite()), "non-finite output");
            outs.push(v);
        }
        let r = outs.pop().unwrap();
        (outs.pop().unwrap(), r)
    }

    fn weights(rng: &mut Pcg64, ty: ElemType, k: usize, rows: usize) -> Vec<u8> {
        (0..rows).flat_map(|_| random_weight_row(rng, ty, k)).collect()
    }

    fn f32_bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    fn reference_reads(ty: ElemType) -> bool {
        ty.is_float() || crate::quant::can_dequantize(ty)
    }

    /// A row length that exercises `ty`'s blocks (and the float kernels' tails).
    fn k_for(ty: ElemType) -> usize {
        match ty.block_size() {
            1 => 67,
            32 => 96,
            _ => 512,
        }
    }

    /// MUL_MAT of a random `ty` weight [k, m, b0[0], b0[1]] and f32 src1 [k, n, b1[0], b1[1]];
    /// `permuted` stores src1 transposed (element stride n * 4).
    fn mul_mat_case(
        ctx: &CpuContext,
        rng: &mut Pcg64,
        ty: ElemType,
        m: usize,
        n: usize,
        b0: [usize; 2],
        b1: [usize; 2],
        permuted: bool,
    ) -> f64 {
        let k = k_for(ty);
        let mut w = Tensor::new(ty, &[k as i64, m as i64, b0[0] as i64, b0[1] as i64]);
        let mut wmem = Storage::new(&weights(rng, ty, k, m * b0[0] * b0[1]));
        wmem.attach(&mut w);
        let mut x = Tensor::new(ElemType::F32, &[k as i64, n as i64, b1[0] as i64, b1[1] as i64]);
        if permuted {
            x.nb = [4 * n, 4, 4 * n * k, 4 * n * k * b1[0]];
        }
        let mut xmem = Storage::new(&f32_bytes(&random_f32(rng, k * n * b1[0] * b1[1])));
        xmem.attach(&mut x);
        let mut dst = Tensor::new(ElemType::F32, &[m as i64, n as i64, b1[0] as i64, b1[1] as i64]);
        dst.op = Op::MulMat;
        let (cpu, reference) = run_both(ctx, &dst, &[&w, &x]);
        assert!(wmem.guards_intact() && xmem.guards_intact());
        nmse(&cpu, &reference)
    }

    #[test]
    fn mul_mat_matches_reference_for_every_type() {
        let ctx = CpuContext::new(3);
        let mut rng = Pcg64::seed_from_u64(1);
        for ty in vecdot::WEIGHT_TYPES {
            if !reference_reads(ty) {
                eprintln!("reference cannot read {ty} yet; skipping");
                continue;
            }
            for n in (1..=8).chain([16, 19]) {
                let e = mul_mat_case(&ctx, &mut rng, ty, 13, n, [1, 1], [1, 1], false);
                assert!(e <= 5e-4, "{ty} n={n}: nmse {e}");
            }
            let e = mul_mat_case(&ctx, &mut rng, ty, 7, 3, [2, 1], [4, 3], false);
            assert!(e <= 5e-4, "{ty} broadcast: nmse {e}");
            let e = mul_mat_case(&ctx, &mut rng, ty, 9, 5, [1, 2], [3, 2], true);
            assert!(e <= 5e-4, "{ty} permuted: nmse {e}");
        }
    }

    #[test]
    fn mul_mat_large_rows_split_across_tasks() {
        // Enough rows and columns that rows_per_task makes many bands and several column groups.
        let ctx = CpuContext::new(4);
        let mut rng = Pcg64::seed_from_u64(2);
        let k = 4096;
        let (m, n) = (301, 37);
        let ty = ElemType::Q8_0;
        if !reference_reads(ty) {
            return;
        }
        let mut w = Tensor::new(ty, &[k, m]);
        let mut wmem = Storage::new(&weights(&mut rng, ty, k as usize, m as usize));
        wmem.attach(&mut w);
        let mut x = Tensor::new(ElemType::F32, &[k, n]);
        let mut xmem = Storage::new(&f32_bytes(&random_f32(&mut rng, (k * n) as usize)));
        xmem.attach(&mut x);
        let mut dst = Tensor::new(ElemType::F32, &[m, n]);
        dst.op = Op::MulMat;
        let (cpu, reference) = run_both(&ctx, &dst, &[&w, &x]);
        assert!(nmse(&cpu, &reference) <= 5e-4);
    }

    #[test]
    fn f16_src1_is_converted() {
        let ctx = CpuContext::new(2);
        let mut rng = Pcg64::seed_from_u64(3);
        let (k, m, n) = (64usize, 5usize, 3usize);
        let mut w = Tensor::new(ElemType::F32, &[k as i64, m as i64]);
        let mut wmem = Storage::new(&weights(&mut rng, ElemType::F32, k, m));
        wmem.attach(&mut w);
        let mut x = Tensor::new(ElemType::F16, &[k as i64, n as i64]);
        let xs: Vec<u8> = random_f32(&mut rng, k * n)
            .iter()
            .flat_map(|v| f16::from_f32(*v).to_bits().to_le_bytes())
            .collect();
        let mut xmem = Storage::new(&xs);
        xmem.attach(&mut x);
        let mut dst = Tensor::new(ElemType::F32, &[m as i64, n as i64]);
        dst.op = Op::MulMat;
        let (cpu, reference) = run_both(&ctx, &dst, &[&w, &x]);
        assert!(nmse(&cpu, &reference) <= 1e-10);
    }

    /// MUL_MAT_ID with `n_expert` experts of `ty`, src1 [k, n_b, n_tokens] and the given ids
    /// ([n_used, n_tokens], token-major). Returns the tensors' results or the CPU error.
    fn mul_mat_id_case(
        ctx: &CpuContext,
        rng: &mut Pcg64,
        ty: ElemType,
        n_expert: usize,
        n_b: usize,
        ids: &[i32],
        n_used: usize,
    ) -> Result<f64, Box<(OpError, OpError, bool)>> {
        let (k, m) = (k_for(ty), 11usize);
        let n_tokens = ids.len() / n_used;
        let mut w = Tensor::new(ty, &[k as i64, m as i64, n_expert as i64]);
        let mut wmem = Storage::new(&weights(rng, ty, k, m * n_expert));
        wmem.attach(&mut w);
        let mut x = Tensor::new(ElemType::F32, &[k as i64, n_b as i64, n_tokens as i64]);
        let mut xmem = Storage::new(&f32_bytes(&random_f32(rng, k * n_b * n_tokens)));
        xmem.attach(&mut x);
        let mut it = Tensor::new(ElemType::I32, &[n_used as i64, n_tokens as i64]);
        let mut imem = Storage::new(&ids.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>());
        imem.attach(&mut it);
        let mut dst = Tensor::new(ElemType::F32, &[m as i64, n_used as i64, n_tokens as i64]);
        dst.op = Op::MulMatId;
        let bad = ids.iter().any(|&e| e < 0 || e as usize >= n_expert);
        if !bad {
            let (cpu, reference) = run_both(ctx, &dst, &[&w, &x, &it]);
            return Ok(nmse(&cpu, &reference));
        }
        // A bad id fails both paths before anything is written.
        let s = srcs(&[&w, &x, &it]);
        let mut dmem = Storage::new(&vec![SENTINEL; dst.nbytes()]);
        dmem.attach(&mut dst);
        // SAFETY: all tensors point into live storage.
        let cpu = unsafe { crate::cpu::compute(ctx, &dst, &s) }.unwrap_err();
        // SAFETY: as above.
        let reference = unsafe { crate::reference::compute(&dst, &s) }.unwrap_err();
        let untouched = dmem.0.iter().all(|&b| b == SENTINEL);
        Err(Box::new((cpu, reference, untouched)))
    }

    #[test]
    fn mul_mat_id_matches_reference() {
        let ctx = CpuContext::new(3);
        let mut rng = Pcg64::seed_from_u64(4);
        for ty in [
            ElemType::F32,
            ElemType::F16,
            ElemType::Q4_0,
            ElemType::Q4K,
            ElemType::Q6K,
        ] {
            if !reference_reads(ty) {
                continue;
            }
            for (n_b, n_used, n_tokens) in [(1, 2, 5), (2, 2, 3), (4, 4, 1), (1, 1, 7)] {
                let ids: Vec<i32> = (0..n_used * n_tokens).map(|_| rng.random_range(0..6)).collect();
                let e = mul_mat_id_case(&ctx, &mut rng, ty, 6, n_b.min(n_used), &ids, n_used).unwrap();
                assert!(e <= 5e-4, "{ty} n_b={n_b} n_used={n_used}: nmse {e}");
            }
        }
    }

    #[test]
    fn bad_expert_ids_fail_before_writing() {
        let ctx = CpuContext::new(2);
        let mut rng = Pcg64::seed_from_u64(5);
        for bad in [4, -1, i32::MAX] {
            let ids = [0, 1, 3, bad, 2, 0];
            let (cpu, reference, untouched) =
                *mul_mat_id_case(&ctx, &mut rng, ElemType::F32, 4, 1, &ids, 2).unwrap_err();
            assert!(cpu.reason.contains(&format!("ids[1, 1] = {bad}")), "{}", cpu.reason);
            assert!(reference.reason.contains("ids[1, 1]"), "{}", reference.reason);
            assert!(untouched, "dst written despite a bad id");
        }
    }

    #[test]
    fn bad_shapes_and_types_are_errors() {
        let w = Tensor::new(ElemType::Q4_0, &[64, 8]);
        let x = Tensor::new(ElemType::F32, &[64, 3]);
        let mut dst = Tensor::new(ElemType::F32, &[8, 3]);
        dst.op = Op::MulMat;
        assert!(check(&dst, &srcs(&[&w, &x])).is_ok());
        let short = Tensor::new(ElemType::F32, &[32, 3]);
        assert!(check(&dst, &srcs(&[&w, &short])).is_err());
        let ints = Tensor::new(ElemType::I32, &[64, 3]);
        assert!(check(&dst, &srcs(&[&w, &ints])).is_err());
        let odd = Tensor::new(ElemType::Q4_0, &[48, 8]);
        let x48 = Tensor::new(ElemType::F32, &[48, 3]);
        assert!(check(&dst, &srcs(&[&odd, &x48])).is_err());
        let mut wrong = dst.clone();
        wrong.ne = [8, 4, 1, 1];
        assert!(check(&wrong, &srcs(&[&w, &x])).is_err());
        let mut transposed = w.clone();
        transposed.nb = [36, 18, 144, 144];
        assert!(check(&dst, &srcs(&[&transposed, &x])).is_err());
        assert!(check(&dst, &srcs(&[&w])).is_err());
        let q8k = Tensor::new(ElemType::Q8K, &[256, 8]);
        let x256 = Tensor::new(ElemType::F32, &[256, 3]);
        assert!(check(&dst, &srcs(&[&q8k, &x256])).is_err());
        // Batches that do not broadcast.
        let w3 = Tensor::new(ElemType::F32, &[64, 8, 3]);
        let x2 = Tensor::new(ElemType::F32, &[64, 3, 4]);
        let mut d2 = Tensor::new(ElemType::F32, &[8, 3, 4]);
        d2.op = Op::MulMat;
        assert!(check(&d2, &srcs(&[&w3, &x2])).is_err());
        // MUL_MAT_ID with float ids.
        let experts = Tensor::new(ElemType::F32, &[64, 8, 4]);
        let xb = Tensor::new(ElemType::F32, &[64, 1, 5]);
        let fids = Tensor::new(ElemType::F32, &[2, 5]);
        let mut did = Tensor::new(ElemType::F32, &[8, 2, 5]);
        did.op = Op::MulMatId;
        assert!(check(&did, &srcs(&[&experts, &xb, &fids])).is_err());
        let ids = Tensor::new(ElemType::I32, &[2, 5]);
        assert!(check(&did, &srcs(&[&experts, &xb, &ids])).is_ok());
        // A ggml hint that changes what MUL_MAT computes is declined, not ignored.
        let mut hinted = dst.clone();
        hinted.set_param_i32(1, 1);
        let e = check(&hinted, &srcs(&[&w, &x])).unwrap_err();
        assert!(e.reason.contains("hint 1"), "{}", e.reason);
    }
}
