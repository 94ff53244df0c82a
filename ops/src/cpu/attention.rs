//! FLASH_ATTN_EXT on the CPU: `ggml_flash_attn_ext` with mask, ALiBi, logit softcap and sinks.
//! Admission rules live in `fa_check`, the kernel in `fa_kernel`, its vector primitives in
//! `fa_simd`.

use super::fa_check::validate;
use super::fa_kernel;
use crate::{CpuContext, OpError, Srcs};
use tandem_graph::Tensor;

pub fn check(dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    validate(dst, srcs).map(|_| ())
}

/// # Safety
/// See [`super::compute`].
pub unsafe fn run(ctx: &CpuContext, dst: &Tensor, srcs: &Srcs) -> Result<(), OpError> {
    let shape = validate(dst, srcs)?;
    fa_kernel::run(ctx, dst, srcs, shape);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::fa_check::FaShape;
    use super::super::fa_kernel::plan;
    use super::*;
    use half::{bf16, f16};
    use rand::{Rng, SeedableRng};
    use rand_pcg::Pcg64;
    use tandem_graph::params::FlashAttnParams;
    use tandem_graph::{ElemType, Graph, GraphBuilder, TensorId};

    /// The harness budget for FLASH_ATTN_EXT.
    const NMSE_MAX: f64 = 5e-4;
    /// The kernel rounds nothing beyond f32 arithmetic (q stays f32, K/V expand exactly), so
    /// against the same K/V values in f64 it lands far inside the budget: at most 2.5e-13 over
    /// these tests. This bound catches small semantic slips the budget would let through.
    const NMSE_KERNEL: f64 = 1e-10;
    /// Guard bytes around every buffer, checked after each run.
    const GUARD: usize = 64;
    const SENTINEL: u8 = 0xA5;

    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Mask {
        None,
        /// [n_kv, n_q + 3, 1, 1]: causal -inf pattern plus small finite biases.
        Causal,
        /// [n_kv, n_q + 3, n_head, n_seq]: per head and sequence, random -inf entries.
        PerHead,
        /// Causal, and query row 0 has every entry at -inf.
        FullyMaskedRow,
    }

    #[derive(Clone, Copy, Debug, PartialEq)]
    enum QLayout {
        Plain,
        /// Stored [d, n_head, n_q, n_seq] and permuted (0, 2, 1, 3), as llama.cpp feeds it.
        Permuted,
        /// Stored [n_q, d, ...] and transposed: elements of a row are not adjacent.
        Transposed,
    }

    #[derive(Clone, Copy, Debug)]
    struct Case {
        dk: i64,
        dv: i64,
        n_q: i64,
        n_kv: i64,
        n_head: i64,
        n_head_kv: i64,
        n_seq: i64,
        kty: ElemType,
        vty: ElemType,
        mask: Mask,
        sinks: bool,
        scale: f32,
        max_bias: f32,
        softcap: f32,
        q_layout: QLayout,
        /// k/v are views into a longer cache (row offset, larger head stride).
        kv_view: bool,
        /// This key is masked for every query and its K/V bytes are all 0xff (NaN in every
        /// type), like unused cells of a KV cache: it must not reach the output.
        poison_key: Option<usize>,
    }

    fn case(kty: ElemType, d: i64, n_q: i64, n_kv: i64) -> Case {
        Case {
            dk: d,
            dv: d,
            n_q,
            n_kv,
            n_head: 4,
            n_head_kv: 4,
            n_seq: 1,
            kty,
            vty: kty,
            mask: Mask::None,
            sinks: false,
            scale: 1.0 / (d as f32).sqrt(),
            max_bias: 0.0,
            softcap: 0.0,
            q_layout: QLayout::Plain,
            kv_view: false,
            poison_key: None,
        }
    }

    /// A graph with its host memory: one guarded buffer per storage root.
    struct Built {
        g: Graph,
        dst: TensorId,
        _bufs: Vec<Vec<u8>>,
        guards: Vec<(usize, usize)>,
    }

    fn fill(t: &Tensor, rng: &mut Pcg64, amp: f32) {
        let n = t.nbytes();
        // SAFETY: `t.data` points at `n` writable bytes of its own buffer (roots only).
        let bytes = unsafe { std::slice::from_raw_parts_mut(t.data as *mut u8, n) };
        match t.ty {
            ElemType::F32 => bytes
                .chunks_exact_mut(4)
                .for_each(|c| c.copy_from_slice(&rng.random_range(-amp..amp).to_le_bytes())),
            ElemType::F16 => bytes
                .chunks_exact_mut(2)
                .for_each(|c| c.copy_from_slice(&f16::from_f32(rng.random_range(-amp..amp)).to_le_bytes())),
            ElemType::BF16 => bytes
                .chunks_exact_mut(2)
                .for_each(|c| c.copy_from_slice(&bf16::from_f32(rng.random_range(-amp..amp)).to_le_bytes())),
            ElemType::Q8_0 => bytes.chunks_exact_mut(34).for_each(|b| {
                b[..2].copy_from_slice(&f16::from_f32(rng.random_range(0.004..0.012)).to_le_bytes());
                b[2..]
                    .iter_mut()
                    .for_each(|x| *x = rng.random_range(-127i8..=127) as u8);
            }),
            ElemType::Q4_0 => bytes.chunks_exact_mut(18).for_each(|b| {
                b[..2].copy_from_slice(&f16::from_f32(rng.random_range(0.05..0.15)).to_le_bytes());
                b[2..].iter_mut().for_each(|x| *x = rng.random());
            }),
            other => panic!("no filler for {other}"),
        }
    }

    fn fill_mask(t: &Tensor, c: &Case, rng: &mut Pcg64) {
        let (n_kv, rows) = (t.ne[0] as usize, t.nrows() as usize);
        let mut vals = vec![0f32; n_kv * rows];
        for (r, row) in vals.chunks_exact_mut(n_kv).enumerate() {
            let qi = (r % t.ne[1] as usize) as i64;
            for (j, x) in row.iter_mut().enumerate() {
                let causal_cut = j as i64 > c.n_kv - c.n_q + qi;
                *x = match c.mask {
                    Mask::PerHead if rng.random_range(0..4) == 0 => f32::NEG_INFINITY,
                    Mask::Causal | Mask::FullyMaskedRow if causal_cut => f32::NEG_INFINITY,
                    Mask::FullyMaskedRow if qi == 0 => f32::NEG_INFINITY,
                    _ => rng.random_range(-1.0..0.5),
                };
            }
        }
        // SAFETY: the mask is a root of nbytes() == 2 · vals.len() bytes.
        let bytes = unsafe { std::slice::from_raw_parts_mut(t.data as *mut u8, t.nbytes()) };
        for (b, v) in bytes.chunks_exact_mut(2).zip(&vals) {
            b.copy_from_slice(&f16::from_f32(*v).to_le_bytes());
        }
    }

    fn build(c: &Case, seed: u64) -> Built {
        let mut b = GraphBuilder::new();
        let q = match c.q_layout {
            QLayout::Plain => b.new_tensor(ElemType::F32, &[c.dk, c.n_q, c.n_head, c.n_seq]),
            QLayout::Permuted => {
                let base = b.new_tensor(ElemType::F32, &[c.dk, c.n_head, c.n_q, c.n_seq]);
                b.permute(base, [0, 2, 1, 3]).unwrap()
            }
            QLayout::Transposed => {
                let base = b.new_tensor(ElemType::F32, &[c.n_q, c.dk, c.n_head, c.n_seq]);
                b.permute(base, [1, 0, 2, 3]).unwrap()
            }
        };
        let kv = |b: &mut GraphBuilder, ty: ElemType, d: i64| {
            if !c.kv_view {
                return b.new_tensor(ty, &[d, c.n_kv, c.n_head_kv, c.n_seq]);
            }
            let base = b.new_tensor(ty, &[d, c.n_kv + 7, c.n_head_kv, c.n_seq]);
            let nb = b.tensor(base).nb;
            b.view(base, &[d, c.n_kv, c.n_head_kv, c.n_seq], &nb[1..], 3 * nb[1])
                .unwrap()
        };
        let k = kv(&mut b, c.kty, c.dk);
        let v = kv(&mut b, c.vty, c.dv);
        let mask = match c.mask {
            Mask::None => None,
            Mask::PerHead => Some(b.new_tensor(ElemType::F16, &[c.n_kv, c.n_q + 3, c.n_head, c.n_seq])),
            _ => Some(b.new_tensor(ElemType::F16, &[c.n_kv, c.n_q + 3, 1, 1])),
        };
        let sinks = c.sinks.then(|| b.new_tensor(ElemType::F32, &[c.n_head]));
        let dst = b
            .flash_attn_ext(q, k, v, mask, sinks, c.scale, c.max_bias, c.softcap)
            .unwrap();
        let mut g = b.build();

        let mut rng = Pcg64::seed_from_u64(seed);
        let mut bufs = Vec::new();
        let mut guards = Vec::new();
        for i in 0..g.tensors.len() {
            if g.tensors[i].view_src.is_none() {
                let n = g.tensors[i].nbytes();
                let mut buf = vec![SENTINEL; n + 2 * GUARD];
                g.tensors[i].data = buf.as_mut_ptr() as usize + GUARD;
                guards.push((buf.as_ptr() as usize, n));
                bufs.push(buf);
            }
        }
        for i in 0..g.tensors.len() {
            if let Some(root) = g.tensors[i].view_src {
                g.tensors[i].data = g.tensors[root.index()].data + g.tensors[i].view_offs;
            }
        }
        let root = |id: TensorId| g.tensor(g.storage_root(id).0);
        fill(root(q), &mut rng, 3.0);
        fill(root(k), &mut rng, 1.0);
        fill(root(v), &mut rng, 1.0);
        if let Some(m) = mask {
            fill_mask(root(m), c, &mut rng);
        }
        if let Some(s) = sinks {
            // Sinks from below to well above the typical best score (about 3): some heads
            // follow their keys, some are mostly sink.
            let t = root(s);
            // SAFETY: the sinks root holds n_head f32.
            let vals = unsafe { std::slice::from_raw_parts_mut(t.data as *mut f32, c.n_head as usize) };
            vals.iter_mut().for_each(|x| *x = rng.random_range(-1.0..6.0));
        }
        if let (Some(j), Some(m)) = (c.poison_key, mask) {
            let mt = g.tensor(m);
            for r in crate::data::rows(mt.ne) {
                // SAFETY: column j < n_kv of mask row r.
                let p = unsafe { crate::data::elem_ptr(mt, [j as i64, r[1], r[2], r[3]]) };
                unsafe { (p as *mut u16).write_unaligned(f16::NEG_INFINITY.to_bits()) };
            }
            for t in [g.tensor(k), g.tensor(v)] {
                let n = t.ty.row_size(t.ne[0]).unwrap();
                for r in crate::data::rows([1, 1, t.ne[2], t.ne[3]]) {
                    // SAFETY: row j of head r[2], sequence r[3].
                    let p = unsafe { crate::data::elem_ptr(t, [0, j as i64, r[2], r[3]]) };
                    unsafe { std::ptr::write_bytes(p, 0xff, n) };
                }
            }
        }
        Built {
            g,
            dst,
            _bufs: bufs,
            guards,
        }
    }

    impl Built {
        fn dst(&self) -> &Tensor {
            self.g.tensor(self.dst)
        }

        fn srcs(&self) -> Srcs<'_> {
            self.g.srcs(self.dst)
        }

        fn output(&self) -> Vec<f32> {
            let d = self.dst();
            // SAFETY: dst is a contiguous f32 root of nelements() values.
            unsafe { std::slice::from_raw_parts(d.data as *const f32, d.nelements() as usize) }.to_vec()
        }

        fn assert_guards(&self) {
            for &(start, n) in &self.guards {
                // SAFETY: each guarded buffer is n + 2 · GUARD bytes long and still alive.
                let all = unsafe { std::slice::from_raw_parts(start as *const u8, n + 2 * GUARD) };
                assert!(all[..GUARD].iter().all(|&b| b == SENTINEL), "underrun");
                assert!(all[GUARD + n..].iter().all(|&b| b == SENTINEL), "overrun");
            }
        }

        fn run_cpu(&self, threads: usize) -> Vec<f32> {
            let ctx = CpuContext::new(threads);
            // SAFETY: every tensor has its buffer; nothing else runs on them.
            unsafe { crate::cpu::compute(&ctx, self.dst(), &self.srcs()) }.unwrap();
            self.assert_guards();
            self.output()
        }

        fn run_reference(&self, srcs: &Srcs) -> Result<Vec<f32>, OpError> {
            // SAFETY: as in `run_cpu`.
            unsafe { crate::reference::compute(self.dst(), srcs) }?;
            self.assert_guards();
            Ok(self.output())
        }
    }

    /// `t` expanded to a contiguous f32 tensor with the test's own block decoding, so quantized
    /// K/V can be checked against the reference before the shared dequantizers exist.
    fn expand_f32(t: &Tensor) -> (Tensor, Vec<f32>) {
        let mut out = Tensor::new(ElemType::F32, &t.ne);
        let mut vals = Vec::with_capacity(t.nelements() as usize);
        for r in crate::data::rows(t.ne) {
            // SAFETY: row r of t, inside its bytes.
            let p = unsafe { crate::data::elem_ptr(t, r) } as *const u8;
            let row = unsafe { std::slice::from_raw_parts(p, t.ty.row_size(t.ne[0]).unwrap()) };
            let half = |b: &[u8]| f16::from_le_bytes([b[0], b[1]]).to_f32();
            match t.ty {
                ElemType::F32 => vals.extend(row.chunks_exact(4).map(|b| f32::from_le_bytes(b.try_into().unwrap()))),
                ElemType::F16 => vals.extend(row.chunks_exact(2).map(half)),
                ElemType::BF16 => vals.extend(row.chunks_exact(2).map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f32())),
                ElemType::Q8_0 => row
                    .chunks_exact(34)
                    .for_each(|b| vals.extend(b[2..].iter().map(|&x| half(b) * x as i8 as f32))),
                ElemType::Q4_0 => row.chunks_exact(18).for_each(|b| {
                    vals.extend(b[2..].iter().map(|&x| half(b) * ((x & 15) as f32 - 8.0)));
                    vals.extend(b[2..].iter().map(|&x| half(b) * ((x >> 4) as f32 - 8.0)));
                }),
                other => panic!("no expansion for {other}"),
            }
        }
        out.data = vals.as_ptr() as usize;
        (out, vals)
    }

    fn nmse(got: &[f32], want: &[f32]) -> f64 {
        let num: f64 = got.iter().zip(want).map(|(a, b)| (*a as f64 - *b as f64).powi(2)).sum();
        let den: f64 = want.iter().map(|b| (*b as f64).powi(2)).sum();
        if den == 0.0 {
            num
        } else {
            num / den
        }
    }

    /// Runs `c` on the CPU and in the reference (on the original K/V where the reference can
    /// read them, and always on f32 expansions of them); returns the CPU output.
    fn check_case(c: &Case, threads: usize) -> Vec<f32> {
        let built = build(c, 0x5eed ^ (c.n_kv as u64) << 8 ^ c.dk as u64);
        let got = built.run_cpu(threads);
        assert!(got.iter().all(|x| x.is_finite()), "{c:?}: non-finite output");
        assert!(got.iter().any(|x| *x != 0.0), "{c:?}: all zeros");

        let srcs = built.srcs();
        let (k32, _kb) = expand_f32(srcs[1].unwrap());
        let (v32, _vb) = expand_f32(srcs[2].unwrap());
        let mut twin = srcs;
        twin[1] = Some(&k32);
        twin[2] = Some(&v32);
        let want = built.run_reference(&twin).unwrap();
        let e = nmse(&got, &want);
        assert!(e <= NMSE_MAX, "{c:?}: nmse {e:e} vs f32-expanded reference");
        assert!(
            e <= NMSE_KERNEL,
            "{c:?}: nmse {e:e}: more than f32 rounding vs f32-expanded reference"
        );

        let quant_ready = |t: ElemType| !t.is_quantized() || crate::quant::can_dequantize(t);
        if quant_ready(c.kty) && quant_ready(c.vty) {
            let want = built.run_reference(&srcs).unwrap();
            let e = nmse(&got, &want);
            assert!(e <= NMSE_MAX, "{c:?}: nmse {e:e} vs reference");
        }
        got
    }

    const TYPES: [ElemType; 5] = [
        ElemType::F16,
        ElemType::BF16,
        ElemType::Q8_0,
        ElemType::Q4_0,
        ElemType::F32,
    ];

    #[test]
    fn matches_reference_across_types_and_sizes() {
        for ty in TYPES {
            for d in [64, 128] {
                for (n_q, n_kv) in [(1, 77), (5, 133), (1, 1100)] {
                    check_case(&case(ty, d, n_q, n_kv), 3);
                }
            }
        }
    }

    #[test]
    fn gqa_mask_sinks_softcap_alibi() {
        for ty in TYPES {
            let mut c = case(ty, 64, 7, 151);
            c.n_head = 8;
            c.n_head_kv = 2;
            c.mask = Mask::Causal;
            check_case(&c, 2);
            c.sinks = true;
            check_case(&c, 2);
            c.softcap = 5.0;
            c.scale = 0.4;
            check_case(&c, 2);
            c.max_bias = 8.0;
            c.n_head = 6; // not a power of two: both ALiBi slope ranges
            c.n_head_kv = 3;
            check_case(&c, 4);
            c.mask = Mask::PerHead;
            c.n_seq = 2;
            check_case(&c, 4);
        }
    }

    #[test]
    fn decode_with_split_kv_and_mqa() {
        let mut c = case(ElemType::F16, 128, 1, 2000);
        c.n_head = 8;
        c.n_head_kv = 1;
        c.mask = Mask::Causal;
        c.sinks = true;
        c.q_layout = QLayout::Permuted;
        c.kv_view = true;
        let s = FaShape {
            dk: 128,
            dv: 128,
            n_q: 1,
            n_head: 8,
            n_head_kv: 1,
            n_seq: 1,
            n_kv: 2000,
            seq_per_kv: 1,
            params: FlashAttnParams {
                scale: 1.0,
                max_bias: 0.0,
                logit_softcap: 0.0,
                prec: 0,
            },
        };
        assert!(plan(&s, 4).n_chunks > 1, "decode must split the kv range");
        for ty in TYPES {
            c.kty = ty;
            c.vty = ty;
            let split = check_case(&c, 4);
            let single = build(&c, 0x5eed ^ (c.n_kv as u64) << 8 ^ c.dk as u64).run_cpu(1);
            assert!(
                nmse(&split, &single) < 1e-10,
                "{ty}: split and single-thread runs differ"
            );
        }
    }

    #[test]
    fn strided_q_mixed_kv_types_and_head_sizes() {
        let mut c = case(ElemType::Q8_0, 128, 3, 97);
        c.vty = ElemType::F16;
        c.dv = 64;
        c.q_layout = QLayout::Transposed;
        c.kv_view = true;
        c.mask = Mask::Causal;
        check_case(&c, 2);
        c.kty = ElemType::BF16;
        c.vty = ElemType::Q4_0;
        c.q_layout = QLayout::Permuted;
        c.n_seq = 2;
        c.mask = Mask::PerHead;
        check_case(&c, 3);
    }

    #[test]
    fn masked_nan_cells_do_not_leak() {
        for ty in TYPES {
            let mut c = case(ty, 64, 3, 70);
            c.mask = Mask::Causal;
            c.n_head_kv = 2;
            c.poison_key = Some(33);
            check_case(&c, 2);
        }
    }

    #[test]
    fn fully_masked_row_is_zero() {
        for sinks in [false, true] {
            let mut c = case(ElemType::F16, 64, 4, 40);
            c.mask = Mask::FullyMaskedRow;
            c.sinks = sinks;
            let out = check_case(&c, 2);
            // dst is [dv, n_head, n_q, 1]: query 0 is the first n_head · dv values.
            let first = (c.dv * c.n_head) as usize;
            assert!(out[..first].iter().all(|&x| x == 0.0), "sinks={sinks}");
            assert!(out[first..].iter().any(|&x| x != 0.0));
        }
    }

    #[test]
    fn rejects_bad_nodes() {
        let built = build(&case(ElemType::F16, 64, 2, 40), 1);
        let dst = built.dst().clone();
        let srcs = built.srcs();
        assert!(check(&dst, &srcs).is_ok());
        let expect_err = |d: &Tensor, s: &Srcs, what: &str| {
            let e = check(d, s).expect_err(what);
            assert!(!e.reason.is_empty(), "{what}");
            let ctx = CpuContext::new(1);
            // SAFETY: the check fails first, so nothing is read or written.
            assert!(unsafe { crate::cpu::compute(&ctx, d, s) }.is_err(), "{what}");
            assert!(unsafe { crate::reference::compute(d, s) }.is_err(), "{what}");
        };
        let with = |i: usize, t: &Tensor, f: &dyn Fn(&Tensor, &Srcs)| {
            let mut s = srcs;
            s[i] = Some(t);
            f(&dst, &s)
        };

        let mut s = srcs;
        s[2] = None;
        expect_err(&dst, &s, "missing v");
        let mut k = srcs[1].unwrap().clone();
        k.ty = ElemType::Q4K;
        k.nb = tandem_graph::tensor::contiguous_strides(k.ty, &k.ne);
        with(1, &k, &|d, s| expect_err(d, s, "q4_K k"));
        let mut k = srcs[1].unwrap().clone();
        k.nb[0] = 4;
        with(1, &k, &|d, s| expect_err(d, s, "k rows not contiguous"));
        let mut k = srcs[1].unwrap().clone();
        k.ne[0] = 32;
        with(1, &k, &|d, s| expect_err(d, s, "k head size"));
        let mut k = srcs[1].unwrap().clone();
        k.ne[2] = 3;
        with(1, &k, &|d, s| expect_err(d, s, "heads not a multiple"));
        let mut q = srcs[0].unwrap().clone();
        q.ty = ElemType::F16;
        with(0, &q, &|d, s| expect_err(d, s, "f16 q"));
        let mut q = srcs[0].unwrap().clone();
        q.ne[1] = -1;
        with(0, &q, &|d, s| expect_err(d, s, "negative size"));

        let mask = Tensor::new(ElemType::F16, &[40, 1]);
        with(3, &mask, &|d, s| expect_err(d, s, "mask shorter than n_q"));
        let mask = Tensor::new(ElemType::F32, &[40, 2]);
        with(3, &mask, &|d, s| expect_err(d, s, "f32 mask"));
        let mask = Tensor::new(ElemType::F16, &[40, 2, 3]);
        with(3, &mask, &|d, s| expect_err(d, s, "mask heads do not broadcast"));
        let sinks = Tensor::new(ElemType::F32, &[3]);
        with(4, &sinks, &|d, s| expect_err(d, s, "sinks size"));
        let sinks = Tensor::new(ElemType::F16, &[4]);
        with(4, &sinks, &|d, s| expect_err(d, s, "f16 sinks"));

        let mut d = dst.clone();
        d.ne[1] = 5;
        expect_err(&d, &srcs, "dst shape");
        let mut d = dst.clone();
        d.set_param_f32(1, 2.0);
        expect_err(&d, &srcs, "max_bias without a mask");
        let mut d = dst.clone();
        d.set_param_f32(0, f32::NAN);
        expect_err(&d, &srcs, "nan scale");
        let mut d = dst.clone();
        d.set_param_i32(3, 30);
        expect_err(&d, &srcs, "q8 precision");
        let mut d = dst.clone();
        d.set_param_i32(3, 10);
        assert!(check(&d, &srcs).is_ok(), "GGML_PREC_F32 is accepted");
    }

    /// Process CPU seconds (user + system) from /proc, for timing on a loaded machine.
    fn cpu_seconds() -> f64 {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        let after = stat.rsplit(')').next().unwrap_or("");
        let f: Vec<f64> = after.split_whitespace().map(|x| x.parse().unwrap_or(0.0)).collect();
        // Fields 14 and 15 (utime, stime) in clock ticks of 10 ms; `after` starts at field 3.
        (f.get(11).unwrap_or(&0.0) + f.get(12).unwrap_or(&0.0)) / 100.0
    }

    /// Decode timing (run with `--release -- --ignored --nocapture`): n_head 32, n_head_kv 8,
    /// d 128, n_kv 4096, causal mask, every K/V type; one thread and the whole pool.
    #[test]
    #[ignore]
    fn decode_timing() {
        for threads in [1, 0] {
            for ty in TYPES {
                let mut c = case(ty, 128, 1, 4096);
                c.n_head = 32;
                c.n_head_kv = 8;
                c.mask = Mask::Causal;
                let built = build(&c, 7);
                let ctx = CpuContext::new(threads);
                let run = || {
                    // SAFETY: as in `run_cpu`.
                    unsafe { crate::cpu::compute(&ctx, built.dst(), &built.srcs()) }.unwrap()
                };
                run();
                let iters = 100;
                let (t, cpu) = (std::time::Instant::now(), cpu_seconds());
                for _ in 0..iters {
                    run();
                }
                let wall = t.elapsed().as_secs_f64() * 1e6 / iters as f64;
                let cpu = (cpu_seconds() - cpu) * 1e6 / iters as f64;
                println!(
                    "decode {ty}: {wall:.0} us wall, {cpu:.0} us cpu ({} threads)",
                    ctx.n_threads()
                );
            }
        }
    }
}
