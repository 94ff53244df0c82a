//! Ops with ggml's numbering (`enum ggml_op`, ggml 0.26.0) and the unary/GLU sub-ops.

/// A ggml op. The discriminant is ggml's `enum ggml_op` value; only the ops tandem knows are
/// listed (the capi layer refuses any other op with a named error).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    None = 0,
    Dup = 1,
    Add = 2,
    AddId = 3,
    Sub = 6,
    Mul = 7,
    Div = 8,
    Sqr = 9,
    Sqrt = 10,
    Log = 11,
    Sin = 12,
    Cos = 13,
    SumRows = 15,
    Repeat = 20,
    Concat = 22,
    Norm = 24,
    RmsNorm = 25,
    L2Norm = 28,
    MulMat = 29,
    MulMatId = 30,
    Scale = 32,
    Cpy = 34,
    Cont = 35,
    Reshape = 36,
    View = 37,
    Permute = 38,
    Transpose = 39,
    GetRows = 40,
    SetRows = 42,
    SoftMax = 46,
    Rope = 48,
    Clamp = 50,
    Pad = 64,
    Argsort = 69,
    TopK = 70,
    FlashAttnExt = 74,
    Unary = 91,
    Glu = 100,
}

impl Op {
    /// Every op tandem knows.
    pub const ALL: [Op; 38] = [
        Op::None,
        Op::Dup,
        Op::Add,
        Op::AddId,
        Op::Sub,
        Op::Mul,
        Op::Div,
        Op::Sqr,
        Op::Sqrt,
        Op::Log,
        Op::Sin,
        Op::Cos,
        Op::SumRows,
        Op::Repeat,
        Op::Concat,
        Op::Norm,
        Op::RmsNorm,
        Op::L2Norm,
        Op::MulMat,
        Op::MulMatId,
        Op::Scale,
        Op::Cpy,
        Op::Cont,
        Op::Reshape,
        Op::View,
        Op::Permute,
        Op::Transpose,
        Op::GetRows,
        Op::SetRows,
        Op::SoftMax,
        Op::Rope,
        Op::Clamp,
        Op::Pad,
        Op::Argsort,
        Op::TopK,
        Op::FlashAttnExt,
        Op::Unary,
        Op::Glu,
    ];

    /// The op with ggml's number `id`, if tandem knows it.
    pub fn from_ggml(id: u32) -> Option<Op> {
        Op::ALL.iter().copied().find(|o| *o as u32 == id)
    }

    /// ggml's number for this op.
    pub fn ggml_id(self) -> u32 {
        self as u32
    }

    /// ggml's name for this op (`ggml_op_name`).
    pub fn name(self) -> &'static str {
        match self {
            Op::None => "NONE",
            Op::Dup => "DUP",
            Op::Add => "ADD",
            Op::AddId => "ADD_ID",
            Op::Sub => "SUB",
            Op::Mul => "MUL",
            Op::Div => "DIV",
            Op::Sqr => "SQR",
            Op::Sqrt => "SQRT",
            Op::Log => "LOG",
            Op::Sin => "SIN",
            Op::Cos => "COS",
            Op::SumRows => "SUM_ROWS",
            Op::Repeat => "REPEAT",
            Op::Concat => "CONCAT",
            Op::Norm => "NORM",
            Op::RmsNorm => "RMS_NORM",
            Op::L2Norm => "L2_NORM",
            Op::MulMat => "MUL_MAT",
            Op::MulMatId => "MUL_MAT_ID",
            Op::Scale => "SCALE",
            Op::Cpy => "CPY",
            Op::Cont => "CONT",
            Op::Reshape => "RESHAPE",
            Op::View => "VIEW",
            Op::Permute => "PERMUTE",
            Op::Transpose => "TRANSPOSE",
            Op::GetRows => "GET_ROWS",
            Op::SetRows => "SET_ROWS",
            Op::SoftMax => "SOFT_MAX",
            Op::Rope => "ROPE",
            Op::Clamp => "CLAMP",
            Op::Pad => "PAD",
            Op::Argsort => "ARGSORT",
            Op::TopK => "TOP_K",
            Op::FlashAttnExt => "FLASH_ATTN_EXT",
            Op::Unary => "UNARY",
            Op::Glu => "GLU",
        }
    }

    /// The op named `name` (ggml's spelling, case-insensitive).
    pub fn from_name(name: &str) -> Option<Op> {
        Op::ALL.iter().copied().find(|o| o.name().eq_ignore_ascii_case(name))
    }

    /// Ops that only reinterpret their source's bytes (no computation).
    pub fn is_view(self) -> bool {
        matches!(self, Op::Reshape | Op::View | Op::Permute | Op::Transpose)
    }
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// ggml's `enum ggml_unary_op` (`op_params[0]` of a UNARY node).
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    Abs = 0,
    Sgn = 1,
    Neg = 2,
    Step = 3,
    Tanh = 4,
    Elu = 5,
    Relu = 6,
    Sigmoid = 7,
    Gelu = 8,
    GeluQuick = 9,
    Silu = 10,
    Hardswish = 11,
    Hardsigmoid = 12,
    Exp = 13,
    Expm1 = 14,
    Softplus = 15,
    GeluErf = 16,
    Floor = 18,
    Ceil = 19,
    Round = 20,
    Trunc = 21,
}

impl UnaryOp {
    pub const ALL: [UnaryOp; 21] = [
        UnaryOp::Abs,
        UnaryOp::Sgn,
        UnaryOp::Neg,
        UnaryOp::Step,
        UnaryOp::Tanh,
        UnaryOp::Elu,
        UnaryOp::Relu,
        UnaryOp::Sigmoid,
        UnaryOp::Gelu,
        UnaryOp::GeluQuick,
        UnaryOp::Silu,
        UnaryOp::Hardswish,
        UnaryOp::Hardsigmoid,
        UnaryOp::Exp,
        UnaryOp::Expm1,
        UnaryOp::Softplus,
        UnaryOp::GeluErf,
        UnaryOp::Floor,
        UnaryOp::Ceil,
        UnaryOp::Round,
        UnaryOp::Trunc,
    ];

    pub fn from_ggml(id: i32) -> Option<UnaryOp> {
        UnaryOp::ALL.iter().copied().find(|o| *o as i32 == id)
    }

    /// ggml's name (`ggml_unary_op_name`).
    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Abs => "ABS",
            UnaryOp::Sgn => "SGN",
            UnaryOp::Neg => "NEG",
            UnaryOp::Step => "STEP",
            UnaryOp::Tanh => "TANH",
            UnaryOp::Elu => "ELU",
            UnaryOp::Relu => "RELU",
            UnaryOp::Sigmoid => "SIGMOID",
            UnaryOp::Gelu => "GELU",
            UnaryOp::GeluQuick => "GELU_QUICK",
            UnaryOp::Silu => "SILU",
            UnaryOp::Hardswish => "HARDSWISH",
            UnaryOp::Hardsigmoid => "HARDSIGMOID",
            UnaryOp::Exp => "EXP",
            UnaryOp::Expm1 => "EXPM1",
            UnaryOp::Softplus => "SOFTPLUS",
            UnaryOp::GeluErf => "GELU_ERF",
            UnaryOp::Floor => "FLOOR",
            UnaryOp::Ceil => "CEIL",
            UnaryOp::Round => "ROUND",
            UnaryOp::Trunc => "TRUNC",
        }
    }
}

/// ggml's `enum ggml_glu_op` (`op_params[0]` of a GLU node).
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GluOp {
    Reglu = 0,
    Geglu = 1,
    Swiglu = 2,
    GegluErf = 4,
    GegluQuick = 5,
}

impl GluOp {
    pub const ALL: [GluOp; 5] = [
        GluOp::Reglu,
        GluOp::Geglu,
        GluOp::Swiglu,
        GluOp::GegluErf,
        GluOp::GegluQuick,
    ];

    pub fn from_ggml(id: i32) -> Option<GluOp> {
        GluOp::ALL.iter().copied().find(|o| *o as i32 == id)
    }

    /// ggml's name (`ggml_glu_op_name`).
    pub fn name(self) -> &'static str {
        match self {
            GluOp::Reglu => "REGLU",
            GluOp::Geglu => "GEGLU",
            GluOp::Swiglu => "SWIGLU",
            GluOp::GegluErf => "GEGLU_ERF",
            GluOp::GegluQuick => "GEGLU_QUICK",
        }
    }
}

/// ggml's `enum ggml_sort_order`.
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SortOrder {
    Asc = 0,
    Desc = 1,
}

/// ggml's rope mode bits (`GGML_ROPE_TYPE_*`).
pub const ROPE_TYPE_NORMAL: i32 = 0;
pub const ROPE_TYPE_NEOX: i32 = 2;
pub const ROPE_TYPE_MROPE: i32 = 8;
pub const ROPE_TYPE_VISION: i32 = 24;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbering_round_trips() {
        for o in Op::ALL {
            assert_eq!(Op::from_ggml(o.ggml_id()), Some(o));
            assert_eq!(Op::from_name(o.name()), Some(o));
        }
        for u in UnaryOp::ALL {
            assert_eq!(UnaryOp::from_ggml(u as i32), Some(u));
        }
        for g in GluOp::ALL {
            assert_eq!(GluOp::from_ggml(g as i32), Some(g));
        }
    }
}
