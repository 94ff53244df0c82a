use crate::{KernelSource, KernelUnit};

/// Element conversion families: GET_ROWS (gather + dequantize to f32), CPY/CONT/DUP (float
/// conversions, bit copies, quantizing copies) and SET_ROWS (scatter + convert or quantize).
pub(crate) const FAMILIES: &[KernelSource] = &[
    KernelSource {
        family: "getrows",
        file: "getrows.hip",
        source: include_str!("../getrows.hip"),
        entries: &[
            "tandem_get_rows_b32",
            "tandem_get_rows_f16",
            "tandem_get_rows_bf16",
            "tandem_get_rows_q4_0",
            "tandem_get_rows_q4_1",
            "tandem_get_rows_q5_0",
            "tandem_get_rows_q5_1",
            "tandem_get_rows_q8_0",
            "tandem_get_rows_q2_K",
            "tandem_get_rows_q3_K",
            "tandem_get_rows_q4_K",
            "tandem_get_rows_q5_K",
            "tandem_get_rows_q6_K",
            "tandem_get_rows_iq4_nl",
        ],
        options: &[],
    },
    KernelSource {
        family: "copy",
        file: "copy.hip",
        source: include_str!("../copy.hip"),
        entries: &[], // the units' entries (`crate::units_of`)
        options: &[],
    },
    KernelSource {
        family: "setrows",
        file: "setrows.hip",
        source: include_str!("../setrows.hip"),
        entries: &[], // the units' entries (`crate::units_of`)
        options: &[],
    },
];

/// The `setrows` family's units (`crate::KernelUnit`): the index checks, the float row stores,
/// and one a quantized cache type.
pub(crate) const SETROWS_UNITS: &[KernelUnit] = &[
    KernelUnit::new(
        "common",
        &[
            "tandem_set_rows_clear",
            "tandem_set_rows_mark_i32",
            "tandem_set_rows_mark_i64",
        ],
    ),
    KernelUnit::new(
        "float",
        &[
            "tandem_set_rows_f32_i32",
            "tandem_set_rows_f32_i64",
            "tandem_set_rows_f16_i32",
            "tandem_set_rows_f16_i64",
            "tandem_set_rows_bf16_i32",
            "tandem_set_rows_bf16_i64",
        ],
    ),
    KernelUnit::new("q8_0", &["tandem_set_rows_q8_0_i32", "tandem_set_rows_q8_0_i64"]),
    KernelUnit::new("q4_0", &["tandem_set_rows_q4_0_i32", "tandem_set_rows_q4_0_i64"]),
    KernelUnit::new("q4_1", &["tandem_set_rows_q4_1_i32", "tandem_set_rows_q4_1_i64"]),
    KernelUnit::new("q5_0", &["tandem_set_rows_q5_0_i32", "tandem_set_rows_q5_0_i64"]),
    KernelUnit::new("q5_1", &["tandem_set_rows_q5_1_i32", "tandem_set_rows_q5_1_i64"]),
];

/// The `copy` family's units (`crate::KernelUnit`): byte copies and the read probe, the float
/// conversions, and one a quantized destination type.
pub(crate) const COPY_UNITS: &[KernelUnit] = &[
    KernelUnit::new("common", &["tandem_cpy_b32", "tandem_cpy_b16", "tandem_read_probe"]),
    KernelUnit::new(
        "float",
        &[
            "tandem_cpy_f32_f16",
            "tandem_cpy_f32_bf16",
            "tandem_cpy_f16_f32",
            "tandem_cpy_bf16_f32",
            "tandem_cpy_f16_bf16",
            "tandem_cpy_bf16_f16",
        ],
    ),
    KernelUnit::new("q8_0", &["tandem_cpy_f32_q8_0"]),
    KernelUnit::new("q4_0", &["tandem_cpy_f32_q4_0"]),
    KernelUnit::new("q4_1", &["tandem_cpy_f32_q4_1"]),
    KernelUnit::new("q5_0", &["tandem_cpy_f32_q5_0"]),
    KernelUnit::new("q5_1", &["tandem_cpy_f32_q5_1"]),
];
