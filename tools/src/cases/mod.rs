//! The op cases: each one builds a small graph around one op, says how its leaves are filled
//! and how its output is judged. One file per op family; [`all`] lists every case.

mod activation;
mod attention;
mod copy;
mod elementwise;
mod layout;
mod matmul;
mod norm;
pub mod perf;
mod rope;
mod rows;
mod softmax;
mod sort;

use crate::compare::Check;
use std::collections::HashMap;
use tandem_graph::{ElemType, Graph, GraphBuilder, GraphError, Op, TensorId};

/// How a leaf's values are drawn.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fill {
    /// Uniform in `[lo, hi)`, converted (or quantized) to the leaf's type.
    Uniform(f32, f32),
    /// Integers uniform in `[0, upper)` (indices, positions); repeats allowed.
    Index(i64),
    /// Integers in `[0, upper)`, distinct within each row (needs `ne0 <= upper`).
    DistinctIndex(i64),
    /// Uniform in `[-1, 1)` with `-inf` at about this fraction of the entries, never in column 0,
    /// so no row is fully masked.
    Mask(f32),
    /// A random permutation of evenly spaced values per row: no ties, so sort orders are unique.
    Distinct,
    /// A causal attention mask: entry `j` of row `i` (within each plane) is 0 where
    /// `j <= i + offset` and `-inf` after, as llama.cpp masks a prompt `offset` tokens deep.
    Causal(i64),
}

/// The graph under construction plus the fill of every leaf that is not the default.
pub struct Setup {
    pub g: GraphBuilder,
    pub fills: HashMap<TensorId, Fill>,
}

impl Default for Setup {
    fn default() -> Self {
        Setup::new()
    }
}

impl Setup {
    pub fn new() -> Setup {
        Setup {
            g: GraphBuilder::new(),
            fills: HashMap::new(),
        }
    }

    /// A leaf filled uniformly in `[-1, 1)`.
    pub fn input(&mut self, ty: ElemType, ne: &[i64]) -> Result<TensorId, GraphError> {
        self.input_with(ty, ne, Fill::Uniform(-1.0, 1.0))
    }

    pub fn input_with(&mut self, ty: ElemType, ne: &[i64], fill: Fill) -> Result<TensorId, GraphError> {
        let id = self.g.try_new_tensor(ty, ne)?;
        self.fills.insert(id, fill);
        Ok(id)
    }

    /// Makes node `id` compute in place into the bytes of its (owning) source `src`, the way
    /// ggml's `*_inplace` constructors do.
    pub fn make_inplace(&mut self, id: TensorId, src: TensorId) {
        let (root, offs) = {
            let s = self.g.tensor(src);
            match s.view_src {
                Some(r) => (r, s.view_offs),
                None => (src, 0),
            }
        };
        let t = self.g.tensor_mut(id);
        t.view_src = Some(root);
        t.view_offs = offs;
    }
}

pub type BuildFn = dyn Fn(&mut Setup) -> Result<TensorId, GraphError> + Send + Sync;

/// One test (or benchmark) case: a named graph whose returned node is the output judged.
pub struct Case {
    pub name: String,
    pub op: Op,
    pub check: Check,
    /// Floating-point operations of one run, for the compute rate in perf-ops (0 = not counted).
    pub flops: f64,
    /// Bytes one run really touches, for ops that read only part of their inputs (GET_ROWS,
    /// MUL_MAT_ID); `None` = every leaf plus the output.
    pub bytes: Option<usize>,
    pub build: Box<BuildFn>,
}

impl Case {
    pub fn new(
        op: Op,
        name: String,
        build: impl Fn(&mut Setup) -> Result<TensorId, GraphError> + Send + Sync + 'static,
    ) -> Case {
        Case {
            name,
            op,
            check: Check::for_op(op),
            flops: 0.0,
            bytes: None,
            build: Box::new(build),
        }
    }

    pub fn with_check(mut self, check: Check) -> Case {
        self.check = check;
        self
    }

    pub fn with_flops(mut self, flops: f64) -> Case {
        self.flops = flops;
        self
    }

    pub fn with_bytes(mut self, bytes: usize) -> Case {
        self.bytes = Some(bytes);
        self
    }

    /// Builds the graph; returns it, the output node and the leaf fills.
    pub fn instantiate(&self) -> Result<(Graph, TensorId, HashMap<TensorId, Fill>), GraphError> {
        let mut s = Setup::new();
        let out = (self.build)(&mut s)?;
        let fills = s.fills;
        Ok((s.g.build(), out, fills))
    }
}

/// Every test-ops case, grouped by op family.
pub fn all() -> Vec<Case> {
    let mut v = Vec::new();
    matmul::cases(&mut v);
    rows::cases(&mut v);
    rope::cases(&mut v);
    softmax::cases(&mut v);
    attention::cases(&mut v);
    elementwise::cases(&mut v);
    layout::cases(&mut v);
    activation::cases(&mut v);
    copy::cases(&mut v);
    norm::cases(&mut v);
    sort::cases(&mut v);
    v
}

/// `[a,b,c]` → `axbxc`, for case names.
pub fn dims(ne: &[i64]) -> String {
    ne.iter().map(|n| n.to_string()).collect::<Vec<_>>().join("x")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn cases_are_many_unique_and_build() {
        let cases = all();
        assert!(cases.len() >= 1500, "only {} cases", cases.len());
        let mut names = HashSet::new();
        for c in &cases {
            assert!(names.insert(c.name.clone()), "duplicate case name {}", c.name);
            let (g, out, _) = c.instantiate().unwrap_or_else(|e| panic!("{}: {e}", c.name));
            assert_eq!(g.tensor(out).op, c.op, "{}: output op", c.name);
            assert!(c.name.starts_with(c.op.name()), "{}", c.name);
        }
    }

    #[test]
    fn every_family_is_covered() {
        let ops: HashSet<Op> = all().iter().map(|c| c.op).collect();
        for op in [
            Op::MulMat,
            Op::MulMatId,
            Op::GetRows,
            Op::SetRows,
            Op::Rope,
            Op::SoftMax,
            Op::FlashAttnExt,
            Op::Glu,
            Op::Unary,
            Op::Add,
            Op::Sub,
            Op::Mul,
            Op::Div,
            Op::Sqr,
            Op::Sqrt,
            Op::Log,
            Op::Sin,
            Op::Cos,
            Op::Repeat,
            Op::Concat,
            Op::Pad,
            Op::L2Norm,
            Op::Scale,
            Op::Clamp,
            Op::SumRows,
            Op::AddId,
            Op::Cpy,
            Op::Cont,
            Op::Dup,
            Op::Norm,
            Op::RmsNorm,
            Op::Argsort,
            Op::TopK,
        ] {
            assert!(ops.contains(&op), "no case for {op}");
        }
    }

    /// The README quotes the harness's size: its `test-ops` last line (every case passes on the
    /// host device, none skipped) and the rounded count in the command table. Adding cases
    /// means updating both, or this fails.
    #[test]
    fn the_readme_quotes_the_case_count() {
        let n = all().len();
        let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
        let last_line = format!("`test-ops: {n} passed, 0 failed, 0 skipped`");
        assert!(
            readme.contains(&last_line),
            "README.md should quote {last_line} ({n} cases)"
        );
        let hundreds = (n + 50) / 100 * 100;
        let about = format!("about {},{:03}", hundreds / 1000, hundreds % 1000);
        assert!(readme.contains(&about), "README.md should say the cases are {about}");
    }
}
