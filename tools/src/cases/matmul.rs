//! MUL_MAT over every weight type (odd m, n = 1..8, 9, 16, 65, 300 and 512, k at several block
//! multiples and one past 4096, broadcast batches, permuted src1, chains of products that each
//! read the one before's result) and MUL_MAT_ID (with ids given, and ids an in-graph ARGSORT picks,
//! right ahead of it or with another kernel between).

use super::{Case, Fill, Setup};
use tandem_graph::{ElemType, GluOp, Op};

/// The matmul cases cover every weight type that has a dot kernel.
use tandem_ops::vecdot::WEIGHT_TYPES;

/// Row lengths at several block multiples (and odd ones for the plain types).
fn ks(ty: ElemType) -> &'static [i64] {
    match ty.block_size() {
        1 => &[16, 67, 256, 1000],
        32 => &[32, 96, 544],
        _ => &[256, 512, 1280],
    }
}

/// A MUL_MAT case: weight `[k, m, b2, b3]`, activations `[k, n, b2*r2, b3*r3]`.
fn mul_mat(ty: ElemType, m: i64, k: i64, n: i64, batch: [i64; 2], bcast: [i64; 2]) -> Case {
    let mut name = format!("MUL_MAT(type={ty},m={m},k={k},n={n}");
    if batch != [1, 1] || bcast != [1, 1] {
        name += &format!(",b={}x{},bcast={}x{}", batch[0], batch[1], bcast[0], bcast[1]);
    }
    name.push(')');
    let flops = 2.0 * (m * n * k * batch[0] * bcast[0] * batch[1] * bcast[1]) as f64;
    Case::new(Op::MulMat, name, move |s: &mut Setup| {
        let a = s.input(ty, &[k, m, batch[0], batch[1]])?;
        let b = s.input(ElemType::F32, &[k, n, batch[0] * bcast[0], batch[1] * bcast[1]])?;
        s.g.mul_mat(a, b)
    })
    .with_flops(flops)
}

/// MUL_MAT of activations scaled by 10^5 (past f16's range, as a few models' are) in `batch`
/// batches: the CPU's q8 activations hold them, and so must any f16 copy a GPU GEMM makes.
fn mul_mat_large(ty: ElemType, m: i64, k: i64, n: i64, batch: i64) -> Case {
    let name = format!("MUL_MAT(type={ty},m={m},k={k},n={n},b={batch},x=large)");
    Case::new(Op::MulMat, name, move |s: &mut Setup| {
        let a = s.input(ty, &[k, m, batch])?;
        let b = s.input(ElemType::F32, &[k, n, batch])?;
        let b = s.g.scale(b, 1.0e5, 0.0);
        s.g.mul_mat(a, b)
    })
}

/// `depth` products in a row, each of a square `[k, k]` weight and the one before's result (the
/// first of `[k, n]` activations): on a GPU every GEMV but the first reads what the kernel just
/// ahead of it wrote, so one that started early (a dependent launch) and read its activations
/// before that kernel finished would give a wrong result.
fn mul_mat_chain(ty: ElemType, k: i64, n: i64, depth: usize) -> Case {
    let name = format!("MUL_MAT(type={ty},m={k},k={k},n={n},chain={depth})");
    Case::new(Op::MulMat, name, move |s: &mut Setup| {
        let mut x = s.input(ElemType::F32, &[k, n])?;
        for _ in 0..depth {
            let w = s.input(ty, &[k, k])?;
            x = s.g.mul_mat(w, x)?;
        }
        Ok(x)
    })
    .with_flops(2.0 * (k * k * n) as f64 * depth as f64)
}

/// src1 stored as `[k, batch, n]` and permuted to `[k, n, batch]` (rows stay contiguous).
fn mul_mat_permuted(ty: ElemType, m: i64, k: i64, n: i64, batch: i64) -> Case {
    let name = format!("MUL_MAT(type={ty},m={m},k={k},n={n},b={batch},src1=permuted)");
    Case::new(Op::MulMat, name, move |s: &mut Setup| {
        let a = s.input(ty, &[k, m, batch])?;
        let b0 = s.input(ElemType::F32, &[k, batch, n])?;
        let b = s.g.permute(b0, [0, 2, 1, 3])?;
        s.g.mul_mat(a, b)
    })
}

/// MUL_MAT_ID: experts `[k, m, n_expert]`, activations `[k, n_b, n_tokens]`, ids
/// `[n_used, n_tokens]` (distinct experts per token).
fn mul_mat_id(ty: ElemType, m: i64, k: i64, n_expert: i64, n_used: i64, n_tokens: i64, n_b: i64) -> Case {
    let name =
        format!("MUL_MAT_ID(type={ty},m={m},k={k},experts={n_expert},used={n_used},tokens={n_tokens},n_b={n_b})");
    Case::new(Op::MulMatId, name, move |s: &mut Setup| {
        let a = s.input(ty, &[k, m, n_expert])?;
        let b = s.input(ElemType::F32, &[k, n_b, n_tokens])?;
        let ids = s.input_with(ElemType::I32, &[n_used, n_tokens], Fill::DistinctIndex(n_expert))?;
        s.g.mul_mat_id(a, b, ids)
    })
}

/// MUL_MAT_ID whose ids come from the graph, as a MoE layer's do: the `n_used` largest of
/// `[n_expert, n_tokens]` logits (ARGSORT, descending, then a view of its first rows), with the
/// activations scaled in between (`scaled`) or not. On a GPU the kernel ahead of the MUL_MAT_ID
/// is then the SCALE (the ids were written before it, so the GEMV form may read them before it
/// waits) or the ARGSORT (it must wait first); a kernel that read them too early would see
/// another case's ids.
fn mul_mat_id_routed(ty: ElemType, m: i64, k: i64, n_expert: i64, n_used: i64, n_tokens: i64, scaled: bool) -> Case {
    let name = format!(
        "MUL_MAT_ID(type={ty},m={m},k={k},experts={n_expert},used={n_used},tokens={n_tokens},ids=argsort{})",
        if scaled { ",then=scale" } else { "" }
    );
    Case::new(Op::MulMatId, name, move |s: &mut Setup| {
        let a = s.input(ty, &[k, m, n_expert])?;
        let b = s.input(ElemType::F32, &[k, 1, n_tokens])?;
        let logits = s.input_with(ElemType::F32, &[n_expert, n_tokens], Fill::Distinct)?;
        let order = s.g.argsort(logits, tandem_graph::op::SortOrder::Desc);
        let ids = s.g.view(order, &[n_used, n_tokens], &[4, 4 * n_expert as usize], 0)?;
        let b = if scaled { s.g.scale(b, 0.5, 0.0) } else { b };
        s.g.mul_mat_id(a, b, ids)
    })
}

/// MUL_MAT_ID whose activations and ids are both computed in the graph and finished by the time
/// it can start: the activations scaled first, then the ids from an ARGSORT, then a SCALE of
/// something else (an ordinary launch after both writers). On a GPU a kernel that reads them
/// early (before it waits for the kernels ahead) must still see the written values.
fn mul_mat_id_computed_ahead(ty: ElemType, m: i64, k: i64, n_expert: i64, n_used: i64, n_tokens: i64) -> Case {
    let name = format!(
        "MUL_MAT_ID(type={ty},m={m},k={k},experts={n_expert},used={n_used},tokens={n_tokens},x=scale,ids=argsort,then=scale)"
    );
    Case::new(Op::MulMatId, name, move |s: &mut Setup| {
        let a = s.input(ty, &[k, m, n_expert])?;
        let b = s.input(ElemType::F32, &[k, 1, n_tokens])?;
        let logits = s.input_with(ElemType::F32, &[n_expert, n_tokens], Fill::Distinct)?;
        let b = s.g.scale(b, 0.5, 0.25);
        let order = s.g.argsort(logits, tandem_graph::op::SortOrder::Desc);
        let ids = s.g.view(order, &[n_used, n_tokens], &[4, 4 * n_expert as usize], 0)?;
        s.g.scale(logits, 2.0, 0.0);
        s.g.mul_mat_id(a, b, ids)
    })
}

/// One column whose activations are computed two kernels ahead (`after`: a SCALE of another
/// input between, an ordinary launch, so a GPU kernel may read them before it waits) or right
/// ahead of a first product of the same column (`after` false: that GEMV, a dependent launch,
/// stands between, so the second must wait before it reads them). The result is the second
/// product (or the only one).
fn mul_mat_computed_ahead(ty: ElemType, m: i64, k: i64, after: bool) -> Case {
    let name = format!(
        "MUL_MAT(type={ty},m={m},k={k},n=1,x=scale,{})",
        if after { "then=scale" } else { "then=mul_mat" }
    );
    Case::new(Op::MulMat, name, move |s: &mut Setup| {
        let a = s.input(ty, &[k, m])?;
        let b = s.input(ElemType::F32, &[k, 1])?;
        let b = s.g.scale(b, 0.5, 0.25);
        if after {
            let other = s.input(ElemType::F32, &[k, 1])?;
            s.g.scale(other, 2.0, 0.0);
        } else {
            let first = s.input(ty, &[k, m])?;
            s.g.mul_mat(first, b)?;
        }
        s.g.mul_mat(a, b)
    })
}

/// A GLU FFN on one column: `down * op(gate * x, up * x)` with every weight of type `ty`, the
/// gate's result read only by the down projection (the pair a GPU may fuse, the GEMV computing
/// the gate as it reads its column), `ffn` values between the projections.
fn glu_ffn(ty: ElemType, m: i64, k: i64, ffn: i64, op: GluOp) -> Case {
    let name = format!("MUL_MAT(type={ty},m={m},k={ffn},n=1,x=GLU(op={},k={k}))", op.name());
    Case::new(Op::MulMat, name, move |s: &mut Setup| {
        let x = s.input(ElemType::F32, &[k, 1])?;
        let wg = s.input(ty, &[k, ffn])?;
        let wu = s.input(ty, &[k, ffn])?;
        let wd = s.input(ty, &[ffn, m])?;
        let gate = s.g.mul_mat(wg, x)?;
        let up = s.g.mul_mat(wu, x)?;
        let h = s.g.glu_split(gate, up, op)?;
        s.g.mul_mat(wd, h)
    })
}

pub fn cases(v: &mut Vec<Case>) {
    // GLU FFNs on one column: down projections in units (4096 and 2048 values) and in stretches
    // (14336, q4_0, iq4_nl and q4_K), the gates the models use; rows no segment walk takes (k not
    // of 256s), where the gate runs apart.
    for ty in [
        ElemType::Q4_0,
        ElemType::Q4K,
        ElemType::Q8_0,
        ElemType::Q6K,
        ElemType::IQ4NL,
    ] {
        v.push(glu_ffn(ty, 1024, 256, 4096, GluOp::Swiglu));
        v.push(glu_ffn(ty, 512, 512, 2048, GluOp::Geglu));
        if matches!(ty, ElemType::Q4_0 | ElemType::Q4K | ElemType::IQ4NL) {
            v.push(glu_ffn(ty, 4096, 256, 14336, GluOp::Swiglu));
        }
    }
    v.push(glu_ffn(ElemType::Q4_0, 64, 64, 96, GluOp::Swiglu));
    v.push(glu_ffn(ElemType::Q8_0, 64, 64, 160, GluOp::Reglu));
    // A MoE router's shape (f32, 128 rows): few tiles, so a GPU may split k into parts; a k that
    // is no multiple of the parts, nor of 32.
    for (k, n) in [(2048, 512), (2048, 37), (1100, 100)] {
        v.push(mul_mat(ElemType::F32, 128, k, n, [1, 1], [1, 1]));
    }
    for ty in WEIGHT_TYPES {
        let k = ks(ty);
        for &kk in k {
            for n in [1, 2, 3, 4, 5, 6, 7, 8, 16] {
                v.push(mul_mat(ty, 67, kk, n, [1, 1], [1, 1]));
            }
        }
        // At least 16 outputs per case: NMSE over a handful of dot products is dominated by
        // whichever one happens to land near zero.
        for (m, n) in [(1, 16), (16, 1), (16, 5), (129, 1), (129, 5), (255, 2)] {
            v.push(mul_mat(ty, m, k[1], n, [1, 1], [1, 1]));
        }
        // Rows longer than one 2048-weight GPU staging chunk (16-byte-aligned rows for every type).
        for n in [1, 8] {
            v.push(mul_mat(ty, 64, 4608, n, [1, 1], [1, 1]));
        }
        // The tensor-core GEMV (3..8 columns) takes 16-byte-aligned rows in chunks of eight
        // 32-value groups, its four warps splitting k: a partial row tile with a last, partial
        // chunk (q4_1 and q5_1 rows of 36 groups are aligned), broadcast batches and permuted
        // activations with aligned rows.
        if ty.block_size() <= 32 {
            v.push(mul_mat(ty, 67, 1152, 5, [1, 1], [1, 1]));
        }
        v.push(mul_mat(ty, 33, 512, 3, [2, 2], [3, 2]));
        v.push(mul_mat_permuted(ty, 19, 512, 8, 3));
        // Rows of 2048 values: 16-byte aligned for q3_K and q6_K too, whose 110- and 210-byte
        // chunks start at every even offset within a 16-byte unit (eight chunks, two per warp);
        // for the superblock types also the fewest and most columns, with a partial row tile.
        v.push(mul_mat(ty, 67, 2048, 6, [2, 1], [2, 1]));
        if ty.block_size() == 256 {
            for n in [3, 8] {
                v.push(mul_mat(ty, 67, 2048, n, [1, 1], [1, 1]));
            }
        }
        // Prefill widths: partial GEMM tiles (64 x 64, and 128 x 64 on tensor cores) in both
        // dimensions, and 9 columns.
        for (m, n) in [(129, 65), (64, 9)] {
            v.push(mul_mat(ty, m, k[1], n, [1, 1], [1, 1]));
        }
        // The Hopper GEMMs take k in whole steps of 64 (f16 tiles) or 128 values (int8): partial
        // 128 x 256 and 128 x 128 tiles in both dimensions over several steps, one and two steps
        // (fewer than the pipelines hold), more steps than their shared memory holds (the stages
        // reused), broadcast batches and permuted activations at prefill width.
        v.push(mul_mat(ty, 129, 256, 300, [1, 1], [1, 1]));
        v.push(mul_mat(ty, 129, 1024, 40, [1, 1], [1, 1]));
        // A prompt of 512 tokens: whole 128- and 256-column tiles, odd rows.
        v.push(mul_mat(ty, 129, 1024, 512, [1, 1], [1, 1]));
        // Activations past f16's range: the block types' Hopper GEMM stores its q8-rounded copy
        // as f16 times a power of two per column (the last batch's second tile partial). Not
        // for the types whose CPU dot takes q8_1 activations (q4_1, q5_1): their f16 block sums
        // overflow there as in ggml.
        if ty.is_quantized() && tandem_ops::vecdot::vec_dot_type(ty) != ElemType::Q8_1 {
            v.push(mul_mat_large(ty, 129, 1024, 300, 2));
        }
        // 400 output tiles (broadcast batches of one tile each): more than three waves of the
        // Hopper GEMMs (int8, and f16 for f16 weights) on a 132-SM device, whose last wave's 4
        // tiles are each summed in four k ranges by four blocks (the cases above with fewer
        // tiles than SMs split every tile).
        v.push(mul_mat(ty, 33, 2048, 9, [8, 1], [1, 50]));
        // One tile of 2304-long rows, split in four k ranges whose later ones start at odd steps
        // (int8: 18 steps from 0, 4, 9, 13; f16: 36 from 0, 9, 18, 27), in the middle of a
        // superblock for q4_K and q5_K.
        v.push(mul_mat(ty, 33, 2304, 16, [1, 1], [1, 1]));
        // The int8 tiles copy each row's 84-, 110- or 210-byte superblock of q2_K, q3_K and q6_K
        // as the 16-byte units around it, where it starts at any even offset (rows of 256, 512,
        // 1024 and 1280 values above: rows 2-, 4-, 8-byte aligned); rows of 2048 values are
        // 16-byte aligned: partial tiles, broadcast batches, and grouped MUL_MAT_ID.
        if ty.block_size() == 256 {
            v.push(mul_mat(ty, 129, 2048, 65, [1, 1], [1, 1]));
            v.push(mul_mat(ty, 33, 2048, 16, [2, 2], [3, 2]));
            v.push(mul_mat_id(ty, 33, 2048, 8, 4, 72, 4));
        }
        if ty.block_size() <= 64 {
            for kk in [64, 128] {
                v.push(mul_mat(ty, 67, kk, 16, [1, 1], [1, 1]));
            }
        }
        v.push(mul_mat(ty, 33, 256, 16, [2, 2], [3, 2]));
        v.push(mul_mat_permuted(ty, 19, 256, 16, 3));
        for (batch, bcast) in [
            ([2, 3], [1, 1]),
            ([1, 1], [2, 1]),
            ([2, 1], [2, 1]),
            ([1, 2], [1, 2]),
            ([2, 2], [3, 2]),
        ] {
            for n in [1, 4] {
                v.push(mul_mat(ty, 33, k[0], n, batch, bcast));
            }
        }
        for n in [1, 3, 8] {
            v.push(mul_mat_permuted(ty, 19, k[0], n, 3));
        }
        for n in [1, 2] {
            v.push(mul_mat_chain(ty, 1024, n, 4));
        }
        // The segment GEMV (q4_0, iq4_nl, q4_K; one column, rows enough for every wave of a
        // 132-SM grid to fill a step). In stretches: rows ending mid-step (nine segments a
        // row), rows over several steps (70 segments), a chain whose later products read the
        // earlier ones' results. In units (q4_0 and q4_K on NVIDIA sm_80+; iq4_nl in stretches
        // there too): one row a unit (32 segments) with broadcast batches, two, four and 32 rows
        // a unit with a last unit of fewer, and a chain.
        if matches!(ty, ElemType::Q4_0 | ElemType::IQ4NL | ElemType::Q4K) {
            v.push(mul_mat(ty, 4611, 2304, 1, [1, 1], [1, 1]));
            v.push(mul_mat(ty, 517, 17920, 1, [1, 1], [1, 1]));
            v.push(mul_mat_chain(ty, 4608, 1, 3));
            v.push(mul_mat(ty, 1100, 8192, 1, [2, 1], [2, 1]));
            v.push(mul_mat(ty, 2113, 4096, 1, [1, 1], [1, 1]));
            v.push(mul_mat(ty, 4227, 2048, 1, [2, 1], [2, 1]));
            v.push(mul_mat(ty, 33793, 256, 1, [1, 1], [1, 1]));
            v.push(mul_mat_chain(ty, 4096, 1, 3));
        }
        // Activations computed ahead: read before the wait where an ordinary launch came after
        // their writer (NVIDIA sm_90 with dependent launches, the one-column GEMV in units), not
        // where a dependent GEMV stands between.
        for after in [true, false] {
            v.push(mul_mat_computed_ahead(ty, 2113, 4096, after));
        }
        // q8_0 takes segments (four blocks) only in units (NVIDIA sm_80+, 2 .. 32 segments a
        // row): one row a unit with broadcast batches, two, four and sixteen rows a unit with a
        // last unit of fewer, and a chain.
        if ty == ElemType::Q8_0 {
            v.push(mul_mat(ty, 1057, 4096, 1, [2, 1], [2, 1]));
            v.push(mul_mat(ty, 2113, 2048, 1, [1, 1], [1, 1]));
            v.push(mul_mat(ty, 4227, 1024, 1, [1, 1], [1, 1]));
            v.push(mul_mat(ty, 16901, 256, 1, [1, 1], [1, 1]));
            v.push(mul_mat_chain(ty, 4096, 1, 3));
        }
        // q6_K likewise (one superblock a lane, 2-byte aligned in the stage): rows of 16 and 8
        // segments (two and four rows a unit, a shorter last unit) and a chain.
        if ty == ElemType::Q6K {
            v.push(mul_mat(ty, 2113, 4096, 1, [2, 1], [2, 1]));
            v.push(mul_mat(ty, 4227, 2048, 1, [1, 1], [1, 1]));
            v.push(mul_mat_chain(ty, 4096, 1, 3));
        }
        // Units walks that two steps a wave cover on at most one block per SM take as few
        // blocks as give every wave two (NVIDIA sm_90 with dependent launches): 1024 units of
        // two rows (q8_0: k = 2048), the last of one row, where one step a wave would have done
        // on 128 blocks; 1541 units on 97 blocks of 8 waves, whose last waves take one step.
        if matches!(ty, ElemType::Q4_0 | ElemType::Q4K | ElemType::Q8_0 | ElemType::Q6K) {
            let kk = if ty == ElemType::Q8_0 { 2048 } else { 4096 };
            v.push(mul_mat(ty, 2047, kk, 1, [1, 1], [1, 1]));
            v.push(mul_mat(ty, 3081, kk, 1, [1, 1], [1, 1]));
        }
        // One column of more than 8192 values: the GEMV reads a q8_1 copy made by a launch of
        // its own (rows 16-byte aligned for every type, so on NVIDIA the async walk reads it).
        v.push(mul_mat(ty, 67, 10240, 1, [1, 1], [1, 1]));
        v.push(mul_mat_id(ty, 33, 10240, 4, 2, 2, 1));
        for (n_tokens, scaled) in [(1, false), (1, true), (3, true)] {
            v.push(mul_mat_id_routed(ty, 64, 2048, 16, 4, n_tokens, scaled));
        }
        v.push(mul_mat_id_computed_ahead(ty, 64, 2048, 16, 4, 1));
        let kid = if ty.block_size() == 1 { 64 } else { 256 };
        for (n_expert, n_used, n_tokens, n_b) in [
            (4, 2, 1, 1),
            (4, 2, 1, 2),
            (8, 2, 3, 1),
            (8, 4, 5, 4),
            (4, 4, 8, 4),
            (16, 2, 16, 2),
            // More than 64 tokens on one expert (the grouped GPU path's second column tile).
            (4, 2, 130, 1),
            (8, 4, 72, 4),
            // A prompt of 512 tokens, about 128 on each expert.
            (8, 2, 512, 1),
        ] {
            v.push(mul_mat_id(ty, 33, kid, n_expert, n_used, n_tokens, n_b));
        }
    }
}
