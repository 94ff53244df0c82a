//! The perf-ops cases: model-sized shapes (an 8B-class decoder: hidden 4096, FFN 14336, 32
//! heads of 128, 8 KV heads, 32000-token vocabulary).

use super::{Case, Fill, Setup};
use tandem_graph::params::RopeParams;
use tandem_graph::{ElemType, GluOp, Op};

fn mul_mat(ty: ElemType, m: i64, k: i64, n: i64) -> Case {
    let name = format!("MUL_MAT(type={ty},m={m},k={k},n={n})");
    Case::new(Op::MulMat, name, move |s: &mut Setup| {
        let a = s.input(ty, &[k, m])?;
        let b = s.input(ElemType::F32, &[k, n])?;
        s.g.mul_mat(a, b)
    })
    .with_flops(2.0 * (m * n * k) as f64)
}

fn flash_attn_decode(kv_ty: ElemType, n_kv: i64, n_q: i64) -> Case {
    let (d, h, h_kv) = (128, 32, 8);
    let name = format!("FLASH_ATTN_EXT(kv={kv_ty},d={d},n_kv={n_kv},n_q={n_q},heads={h}/{h_kv})");
    Case::new(Op::FlashAttnExt, name, move |s: &mut Setup| {
        let q = s.input(ElemType::F32, &[d, n_q, h])?;
        let k = s.input(kv_ty, &[d, n_kv, h_kv])?;
        let v = s.input(kv_ty, &[d, n_kv, h_kv])?;
        let mask = s.input_with(ElemType::F16, &[n_kv, n_q], Fill::Mask(0.0))?;
        s.g.flash_attn_ext(q, k, v, Some(mask), None, 1.0 / (d as f32).sqrt(), 0.0, 0.0)
    })
    .with_flops(4.0 * (d * n_kv * n_q * h) as f64)
}

/// Bytes of one row of `ne0` elements.
fn row(ty: ElemType, ne0: i64) -> usize {
    ty.row_size(ne0).unwrap_or(0)
}

pub fn cases() -> Vec<Case> {
    let mut v = Vec::new();
    for ty in [
        ElemType::F16,
        ElemType::Q8_0,
        ElemType::Q4_0,
        ElemType::Q4K,
        ElemType::Q6K,
    ] {
        v.push(mul_mat(ty, 14336, 4096, 1));
    }
    for ty in [ElemType::Q4_0, ElemType::Q4K] {
        v.push(mul_mat(ty, 14336, 4096, 8));
        v.push(mul_mat(ty, 4096, 14336, 1));
    }
    v.push(mul_mat(ElemType::Q6K, 32000, 4096, 1));
    v.push(
        Case::new(
            Op::MulMatId,
            "MUL_MAT_ID(type=q4_K,m=2048,k=4096,experts=32,used=4,tokens=1)".into(),
            |s| {
                let a = s.input(ElemType::Q4K, &[4096, 2048, 32])?;
                let b = s.input(ElemType::F32, &[4096, 1, 1])?;
                let ids = s.input_with(ElemType::I32, &[4, 1], Fill::DistinctIndex(32))?;
                s.g.mul_mat_id(a, b, ids)
            },
        )
        .with_flops(2.0 * (2048 * 4096 * 4) as f64)
        // Four of the 32 experts are read, plus the activations, ids and output.
        .with_bytes(4 * 2048 * row(ElemType::Q4K, 4096) + 4096 * 4 + 4 * 4 + 4 * 2048 * 4),
    );
    for kv in [ElemType::F16, ElemType::Q8_0] {
        v.push(flash_attn_decode(kv, 4096, 1));
    }
    v.push(flash_attn_decode(ElemType::F16, 1024, 16));
    v.push(Case::new(Op::RmsNorm, "RMS_NORM(ne=4096x1)".into(), |s| {
        let a = s.input(ElemType::F32, &[4096, 1])?;
        Ok(s.g.rms_norm(a, 1e-5))
    }));
    v.push(Case::new(
        Op::Rope,
        "ROPE(type=f32,mode=neox,head_dim=128,heads=32,tokens=1)".into(),
        |s| {
            let a = s.input(ElemType::F32, &[128, 32, 1])?;
            let pos = s.input_with(ElemType::I32, &[1], Fill::Index(4096))?;
            s.g.rope(a, pos, None, RopeParams::llama(128, true))
        },
    ));
    v.push(Case::new(Op::SoftMax, "SOFT_MAX(ne=4096x32,mask=f16)".into(), |s| {
        let a = s.input(ElemType::F32, &[4096, 32])?;
        let m = s.input_with(ElemType::F16, &[4096, 32], Fill::Mask(0.1))?;
        s.g.soft_max(a, Some(m), None, 0.088, 0.0)
    }));
    v.push(Case::new(
        Op::Glu,
        "GLU(op=SWIGLU,type=f32,ne=14336x1,split)".into(),
        |s| {
            let a = s.input(ElemType::F32, &[14336, 1])?;
            let b = s.input(ElemType::F32, &[14336, 1])?;
            s.g.glu_split(a, b, GluOp::Swiglu)
        },
    ));
    v.push(
        Case::new(Op::GetRows, "GET_ROWS(type=q4_K,ne0=4096,rows=32000,n=1)".into(), |s| {
            let a = s.input(ElemType::Q4K, &[4096, 32000])?;
            let i = s.input_with(ElemType::I32, &[1], Fill::Index(32000))?;
            s.g.get_rows(a, i)
        })
        // One row read, plus the index and the f32 row written.
        .with_bytes(row(ElemType::Q4K, 4096) + 4 + 4096 * 4),
    );
    v.push(
        Case::new(Op::SetRows, "SET_ROWS(type=f16,ne0=1024,rows=4096,n=1)".into(), |s| {
            let a = s.input(ElemType::F16, &[1024, 4096])?;
            let b = s.input(ElemType::F32, &[1024, 1])?;
            let i = s.input_with(ElemType::I64, &[1], Fill::Index(4096))?;
            s.g.set_rows(a, b, i)
        })
        // One f32 row read, the index, one f16 row written.
        .with_bytes(1024 * 4 + 8 + 1024 * 2),
    );
    v.push(Case::new(Op::Add, "ADD(type=f32,ne=4096x8)".into(), |s| {
        let a = s.input(ElemType::F32, &[4096, 8])?;
        let b = s.input(ElemType::F32, &[4096, 8])?;
        s.g.add(a, b)
    }));
    v.push(Case::new(Op::TopK, "TOP_K(ne=32000x1,k=40)".into(), |s| {
        let a = s.input_with(ElemType::F32, &[32000, 1], Fill::Distinct)?;
        s.g.top_k(a, 40)
    }));
    v
}
