//! Element types with ggml's numbering (`enum ggml_type`) and block geometry.

use crate::blocks::*;
use std::mem::size_of;

/// Elements per block of the k-quant formats (ggml's `QK_K`).
pub const QK_K: usize = 256;

/// A ggml element type. The discriminant is ggml's `enum ggml_type` value.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ElemType {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2K = 10,
    Q3K = 11,
    Q4K = 12,
    Q5K = 13,
    Q6K = 14,
    Q8K = 15,
    IQ4NL = 20,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    BF16 = 30,
}

impl ElemType {
    /// Every type tandem knows, in ggml order.
    pub const ALL: [ElemType; 21] = [
        ElemType::F32,
        ElemType::F16,
        ElemType::Q4_0,
        ElemType::Q4_1,
        ElemType::Q5_0,
        ElemType::Q5_1,
        ElemType::Q8_0,
        ElemType::Q8_1,
        ElemType::Q2K,
        ElemType::Q3K,
        ElemType::Q4K,
        ElemType::Q5K,
        ElemType::Q6K,
        ElemType::Q8K,
        ElemType::IQ4NL,
        ElemType::I8,
        ElemType::I16,
        ElemType::I32,
        ElemType::I64,
        ElemType::F64,
        ElemType::BF16,
    ];

    /// Weight formats: the quantized types a model file stores (not the activation-only ones).
    pub const WEIGHT_QUANTS: [ElemType; 11] = [
        ElemType::Q4_0,
        ElemType::Q4_1,
        ElemType::Q5_0,
        ElemType::Q5_1,
        ElemType::Q8_0,
        ElemType::Q2K,
        ElemType::Q3K,
        ElemType::Q4K,
        ElemType::Q5K,
        ElemType::Q6K,
        ElemType::IQ4NL,
    ];

    /// The type with ggml's number `id`, if tandem knows it.
    pub fn from_ggml(id: u32) -> Option<ElemType> {
        ElemType::ALL.iter().copied().find(|t| *t as u32 == id)
    }

    /// ggml's number for this type.
    pub fn ggml_id(self) -> u32 {
        self as u32
    }

    /// ggml's name for this type (`ggml_type_name`).
    pub fn name(self) -> &'static str {
        match self {
            ElemType::F32 => "f32",
            ElemType::F16 => "f16",
            ElemType::Q4_0 => "q4_0",
            ElemType::Q4_1 => "q4_1",
            ElemType::Q5_0 => "q5_0",
            ElemType::Q5_1 => "q5_1",
            ElemType::Q8_0 => "q8_0",
            ElemType::Q8_1 => "q8_1",
            ElemType::Q2K => "q2_K",
            ElemType::Q3K => "q3_K",
            ElemType::Q4K => "q4_K",
            ElemType::Q5K => "q5_K",
            ElemType::Q6K => "q6_K",
            ElemType::Q8K => "q8_K",
            ElemType::IQ4NL => "iq4_nl",
            ElemType::I8 => "i8",
            ElemType::I16 => "i16",
            ElemType::I32 => "i32",
            ElemType::I64 => "i64",
            ElemType::F64 => "f64",
            ElemType::BF16 => "bf16",
        }
    }

    /// The type named `name` (ggml's spelling, case-insensitive).
    pub fn from_name(name: &str) -> Option<ElemType> {
        ElemType::ALL
            .iter()
            .copied()
            .find(|t| t.name().eq_ignore_ascii_case(name))
    }

    /// Elements per block (1 for plain types).
    pub fn block_size(self) -> usize {
        match self {
            ElemType::Q4_0
            | ElemType::Q4_1
            | ElemType::Q5_0
            | ElemType::Q5_1
            | ElemType::Q8_0
            | ElemType::Q8_1
            | ElemType::IQ4NL => 32,
            ElemType::Q2K | ElemType::Q3K | ElemType::Q4K | ElemType::Q5K | ElemType::Q6K | ElemType::Q8K => QK_K,
            _ => 1,
        }
    }

    /// Bytes per block (`ggml_type_size`).
    pub fn type_size(self) -> usize {
        match self {
            ElemType::F32 => 4,
            ElemType::F16 | ElemType::BF16 => 2,
            ElemType::Q4_0 => size_of::<BlockQ4_0>(),
            ElemType::Q4_1 => size_of::<BlockQ4_1>(),
            ElemType::Q5_0 => size_of::<BlockQ5_0>(),
            ElemType::Q5_1 => size_of::<BlockQ5_1>(),
            ElemType::Q8_0 => size_of::<BlockQ8_0>(),
            ElemType::Q8_1 => size_of::<BlockQ8_1>(),
            ElemType::Q2K => size_of::<BlockQ2K>(),
            ElemType::Q3K => size_of::<BlockQ3K>(),
            ElemType::Q4K => size_of::<BlockQ4K>(),
            ElemType::Q5K => size_of::<BlockQ5K>(),
            ElemType::Q6K => size_of::<BlockQ6K>(),
            ElemType::Q8K => size_of::<BlockQ8K>(),
            ElemType::IQ4NL => size_of::<BlockIQ4NL>(),
            ElemType::I8 => 1,
            ElemType::I16 => 2,
            ElemType::I32 => 4,
            ElemType::I64 | ElemType::F64 => 8,
        }
    }

    /// True for block-quantized types.
    pub fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    /// True for f32, f16 and bf16.
    pub fn is_float(self) -> bool {
        matches!(self, ElemType::F32 | ElemType::F16 | ElemType::BF16)
    }

    /// Bytes of one row of `ne0` elements, or `None` if `ne0` is not a whole number of blocks.
    pub fn row_size(self, ne0: i64) -> Option<usize> {
        let bs = self.block_size() as i64;
        if ne0 < 0 || ne0 % bs != 0 {
            return None;
        }
        Some((ne0 / bs) as usize * self.type_size())
    }
}

impl std::fmt::Display for ElemType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ggml_numbering_round_trips() {
        for t in ElemType::ALL {
            assert_eq!(ElemType::from_ggml(t.ggml_id()), Some(t));
            assert_eq!(ElemType::from_name(t.name()), Some(t));
        }
        assert_eq!(ElemType::from_ggml(4), None);
        assert_eq!(ElemType::from_ggml(16), None);
    }

    #[test]
    fn sizes_match_ggml() {
        // ggml_type_size values from ggml.c's type_traits table.
        let expect = [
            (ElemType::Q4_0, 18),
            (ElemType::Q4_1, 20),
            (ElemType::Q5_0, 22),
            (ElemType::Q5_1, 24),
            (ElemType::Q8_0, 34),
            (ElemType::Q8_1, 36),
            (ElemType::Q2K, 84),
            (ElemType::Q3K, 110),
            (ElemType::Q4K, 144),
            (ElemType::Q5K, 176),
            (ElemType::Q6K, 210),
            (ElemType::Q8K, 292),
            (ElemType::IQ4NL, 18),
        ];
        for (t, s) in expect {
            assert_eq!(t.type_size(), s, "{t}");
        }
        assert_eq!(ElemType::Q4K.row_size(4096), Some(16 * 144));
        assert_eq!(ElemType::Q4_0.row_size(33), None);
    }
}
