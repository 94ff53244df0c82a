//! `tandem support`: which op × type combinations the device claims (`Device::supports`).

use crate::cases::Setup;
use tandem_backend::Device;
use tandem_graph::op::SortOrder;
use tandem_graph::params::RopeParams;
use tandem_graph::{ElemType, GluOp, GraphError, Op, TensorId, UnaryOp};

/// Columns of the support table: every matmul weight type, then i32 (GET_ROWS).
fn columns() -> impl Iterator<Item = ElemType> {
    tandem_ops::vecdot::WEIGHT_TYPES.into_iter().chain([ElemType::I32])
}

type RowFn = Box<dyn Fn(&mut Setup, ElemType) -> Result<TensorId, GraphError>>;

struct Row {
    label: String,
    op: Op,
    build: RowFn,
}

fn row(label: &str, op: Op, f: impl Fn(&mut Setup, ElemType) -> Result<TensorId, GraphError> + 'static) -> Row {
    Row {
        label: label.to_string(),
        op,
        build: Box::new(f),
    }
}

const F32: ElemType = ElemType::F32;

fn rows() -> Vec<Row> {
    let mut v = vec![
        row("MUL_MAT src0 (src1 f32)", Op::MulMat, |s, t| {
            let a = s.input(t, &[256, 16])?;
            let b = s.input(F32, &[256, 4])?;
            s.g.mul_mat(a, b)
        }),
        row("MUL_MAT_ID experts", Op::MulMatId, |s, t| {
            let a = s.input(t, &[256, 16, 4])?;
            let b = s.input(F32, &[256, 1, 2])?;
            let ids = s.input(ElemType::I32, &[2, 2])?;
            s.g.mul_mat_id(a, b, ids)
        }),
        row("GET_ROWS src0", Op::GetRows, |s, t| {
            let a = s.input(t, &[256, 8])?;
            let i = s.input(ElemType::I32, &[2])?;
            s.g.get_rows(a, i)
        }),
    ];
    for idx in [ElemType::I32, ElemType::I64] {
        v.push(row(&format!("SET_ROWS dst ({idx} idx)"), Op::SetRows, move |s, t| {
            let a = s.input(t, &[256, 8])?;
            let b = s.input(F32, &[256, 2])?;
            let i = s.input(idx, &[2])?;
            s.g.set_rows(a, b, i)
        }));
    }
    v.push(row("CPY f32 -> type", Op::Cpy, |s, t| {
        let a = s.input(F32, &[256, 2])?;
        let b = s.input(t, &[256, 2])?;
        s.g.cpy(a, b)
    }));
    v.push(row("CPY type -> f32", Op::Cpy, |s, t| {
        let a = s.input(t, &[256, 2])?;
        let b = s.input(F32, &[256, 2])?;
        s.g.cpy(a, b)
    }));
    v.push(row("CONT", Op::Cont, |s, t| {
        let a = s.input(t, &[256, 2])?;
        Ok(s.g.cont(a))
    }));
    for op in [Op::Add, Op::Sub, Op::Mul, Op::Div] {
        for src1_f32 in [false, true] {
            let label = format!("{op} {}", if src1_f32 { "(src1 f32)" } else { "(same types)" });
            v.push(row(&label, op, move |s, t| {
                let a = s.input(t, &[256, 2])?;
                let b = s.input(if src1_f32 { F32 } else { t }, &[256, 2])?;
                match op {
                    Op::Add => s.g.add(a, b),
                    Op::Sub => s.g.sub(a, b),
                    Op::Mul => s.g.mul(a, b),
                    _ => s.g.div(a, b),
                }
            }));
        }
    }
    v.push(row("ADD_ID", Op::AddId, |s, t| {
        let a = s.input(t, &[256, 2, 1])?;
        let b = s.input(t, &[256, 4])?;
        let i = s.input(ElemType::I32, &[2, 1])?;
        s.g.add_id(a, b, i)
    }));
    v.push(row("SCALE", Op::Scale, |s, t| {
        let a = s.input(t, &[256, 2])?;
        Ok(s.g.scale(a, 2.0, 0.0))
    }));
    v.push(row("CLAMP", Op::Clamp, |s, t| {
        let a = s.input(t, &[256, 2])?;
        Ok(s.g.clamp(a, -1.0, 1.0))
    }));
    v.push(row("SUM_ROWS", Op::SumRows, |s, t| {
        let a = s.input(t, &[256, 2])?;
        Ok(s.g.sum_rows(a))
    }));
    for op in [Op::Sqr, Op::Sqrt, Op::Log, Op::Sin, Op::Cos] {
        v.push(row(op.name(), op, move |s, t| {
            let a = s.input(t, &[256, 2])?;
            s.g.math(op, a)
        }));
    }
    v.push(row("REPEAT", Op::Repeat, |s, t| {
        let a = s.input(t, &[256, 1])?;
        s.g.repeat(a, [256, 2, 1, 1])
    }));
    v.push(row("CONCAT", Op::Concat, |s, t| {
        let a = s.input(t, &[256, 2])?;
        s.g.concat(a, a, 1)
    }));
    v.push(row("PAD", Op::Pad, |s, t| {
        let a = s.input(t, &[256, 2])?;
        s.g.pad(a, [0, 0, 1, 1, 0, 0, 0, 0], false)
    }));
    v.push(row("L2_NORM", Op::L2Norm, |s, t| {
        let a = s.input(t, &[256, 2])?;
        Ok(s.g.l2_norm(a, 1e-6))
    }));
    v.push(row("NORM", Op::Norm, |s, t| {
        let a = s.input(t, &[256, 2])?;
        Ok(s.g.norm(a, 1e-5))
    }));
    v.push(row("RMS_NORM", Op::RmsNorm, |s, t| {
        let a = s.input(t, &[256, 2])?;
        Ok(s.g.rms_norm(a, 1e-5))
    }));
    for u in UnaryOp::ALL {
        v.push(row(&format!("UNARY {}", u.name()), Op::Unary, move |s, t| {
            let a = s.input(t, &[256, 2])?;
            s.g.unary(a, u)
        }));
    }
    for gl in GluOp::ALL {
        v.push(row(&format!("GLU {}", gl.name()), Op::Glu, move |s, t| {
            let a = s.input(t, &[256, 2])?;
            s.g.glu(a, gl, false)
        }));
    }
    v.push(row("ROPE", Op::Rope, |s, t| {
        let a = s.input(t, &[128, 2, 3])?;
        let p = s.input(ElemType::I32, &[3])?;
        s.g.rope(a, p, None, RopeParams::llama(128, false))
    }));
    v.push(row("SOFT_MAX src0", Op::SoftMax, |s, t| {
        let a = s.input(t, &[256, 4])?;
        s.g.soft_max(a, None, None, 1.0, 0.0)
    }));
    v.push(row("SOFT_MAX mask (src0 f32)", Op::SoftMax, |s, t| {
        let a = s.input(F32, &[256, 4])?;
        let m = s.input(t, &[256, 4])?;
        s.g.soft_max(a, Some(m), None, 1.0, 0.0)
    }));
    v.push(row("FLASH_ATTN_EXT K/V (q f32)", Op::FlashAttnExt, |s, t| {
        let q = s.input(F32, &[128, 1, 4])?;
        let k = s.input(t, &[128, 256, 4])?;
        let vv = s.input(t, &[128, 256, 4])?;
        let m = s.input(ElemType::F16, &[256, 1])?;
        s.g.flash_attn_ext(q, k, vv, Some(m), None, 0.088, 0.0, 0.0)
    }));
    v.push(row("ARGSORT", Op::Argsort, |s, t| {
        let a = s.input(t, &[256, 2])?;
        Ok(s.g.argsort(a, SortOrder::Asc))
    }));
    v.push(row("TOP_K", Op::TopK, |s, t| {
        let a = s.input(t, &[256, 2])?;
        s.g.top_k(a, 4)
    }));
    v
}

/// Prints the table; false when `-o` matched no row.
pub fn support(dev: &Device, ops: &[Op]) -> bool {
    let rows: Vec<Row> = rows()
        .into_iter()
        .filter(|r| ops.is_empty() || ops.contains(&r.op))
        .collect();
    if rows.is_empty() {
        println!("support: no row for the selected ops");
        return false;
    }
    println!(
        "support on {}: yes = claimed, no = declined, - = not a valid graph",
        dev.name()
    );
    let width = rows.iter().map(|r| r.label.len()).max().unwrap_or(0);
    let mut header = format!("{:<width$}", "");
    for c in columns() {
        header += &format!(" {:>6}", c.name());
    }
    println!("{header}");
    for r in &rows {
        let mut line = format!("{:<width$}", r.label);
        for ty in columns() {
            line += &format!(" {:>6}", cell(dev, r, ty));
        }
        println!("{line}");
    }
    true
}

fn cell(dev: &Device, r: &Row, ty: ElemType) -> &'static str {
    let mut s = Setup::new();
    if (r.build)(&mut s, ty).is_err() {
        return "-";
    }
    let g = s.g.build();
    let claimed = g.nodes.iter().all(|&n| {
        let t = g.tensor(n);
        t.op.is_view() || dev.supports(t, &g.srcs(n))
    });
    if claimed {
        "yes"
    } else {
        "no"
    }
}
