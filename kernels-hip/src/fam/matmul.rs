use crate::{KernelSource, KernelUnit};

/// MUL_MAT and MUL_MAT_ID: decode GEMV (1..8 columns, q8_1 activations for quantized weights),
/// MUL_MAT_ID in GEMV form, the prefill tiled GEMM for every weight type, and the tensor-core
/// prefill GEMM (NVIDIA sm_80+) for f16 and the 32-value-group quantized types.
pub(crate) const FAMILIES: &[KernelSource] = &[
    KernelSource {
        family: "gemv",
        file: "gemv.hip",
        source: include_str!("../gemv.hip"),
        entries: &[], // the units' entries (`crate::units_of`)
        options: &[],
    },
    KernelSource {
        family: "gemm",
        file: "gemm.hip",
        source: include_str!("../gemm.hip"),
        entries: &[
            "tandem_gemm_f32",
            "tandem_gemm_f16",
            "tandem_gemm_bf16",
            "tandem_gemm_q4_0",
            "tandem_gemm_q4_1",
            "tandem_gemm_q5_0",
            "tandem_gemm_q5_1",
            "tandem_gemm_q8_0",
            "tandem_gemm_q2_K",
            "tandem_gemm_q3_K",
            "tandem_gemm_q4_K",
            "tandem_gemm_q5_K",
            "tandem_gemm_q6_K",
            "tandem_gemm_iq4_nl",
            "tandem_gemm_f32_parts",
            "tandem_gemm_sum_parts",
        ],
        options: &[],
    },
    KernelSource {
        family: "mma",
        file: "mma.hip",
        source: include_str!("../mma.hip"),
        entries: &[], // the units' entries (`crate::units_of`)
        options: &[],
    },
    // The same source built with the WMMA tiles' entries: native on AMD gfx11 / gfx12, emulated
    // on NVIDIA (a test of everything around the instruction).
    KernelSource {
        family: "wmma",
        file: "mma.hip",
        source: include_str!("../mma.hip"),
        entries: &[
            "tandem_wmma_route",
            "tandem_wmma_f16",
            "tandem_wmma_f16_copy",
            "tandem_wmma_q4_0",
            "tandem_wmma_q4_1",
            "tandem_wmma_q5_0",
            "tandem_wmma_q5_1",
            "tandem_wmma_q8_0",
            "tandem_wmma_iq4_nl",
            "tandem_wmma_q4_K",
            "tandem_wmma_q5_K",
            "tandem_wmma_q2_K",
            "tandem_wmma_q3_K",
            "tandem_wmma_q6_K",
            "tandem_mmid_wmma_q4_0",
            "tandem_mmid_wmma_q4_1",
            "tandem_mmid_wmma_q5_0",
            "tandem_mmid_wmma_q5_1",
            "tandem_mmid_wmma_q8_0",
            "tandem_mmid_wmma_iq4_nl",
            "tandem_mmid_wmma_q4_K",
            "tandem_mmid_wmma_q5_K",
            "tandem_mmid_wmma_q2_K",
            "tandem_mmid_wmma_q3_K",
            "tandem_mmid_wmma_q6_K",
        ],
        options: &["-DTANDEM_WMMA_ENTRIES"],
    },
];

/// The `gemv` family's units (`crate::KernelUnit`): one a weight type (its GEMVs and MUL_MAT_IDs of
/// every form), and the activation quantizers apart.
pub(crate) const GEMV_UNITS: &[KernelUnit] = &[
    KernelUnit::new("common", &["tandem_quantize_q8_1", "tandem_q8_round_f32"]),
    KernelUnit::new(
        "f32",
        &["tandem_gemv_f32_c1", "tandem_gemv_f32_c8", "tandem_mul_mat_id_f32"],
    ),
    KernelUnit::new(
        "f16",
        &["tandem_gemv_f16_c1", "tandem_gemv_f16_c8", "tandem_mul_mat_id_f16"],
    ),
    KernelUnit::new(
        "bf16",
        &["tandem_gemv_bf16_c1", "tandem_gemv_bf16_c8", "tandem_mul_mat_id_bf16"],
    ),
    KernelUnit::new(
        "q4_0",
        &[
            "tandem_gemv_q4_0_c1",
            "tandem_gemv_q4_0_c8",
            "tandem_gemv_q4_0_s1",
            "tandem_gemv_q4_0_u1",
            "tandem_gemv_q4_0_n1",
            "tandem_mul_mat_id_q4_0",
            "tandem_mmid_q4_0_u1",
        ],
    ),
    KernelUnit::new(
        "q4_1",
        &["tandem_gemv_q4_1_c1", "tandem_gemv_q4_1_c8", "tandem_mul_mat_id_q4_1"],
    ),
    KernelUnit::new(
        "q5_0",
        &["tandem_gemv_q5_0_c1", "tandem_gemv_q5_0_c8", "tandem_mul_mat_id_q5_0"],
    ),
    KernelUnit::new(
        "q5_1",
        &["tandem_gemv_q5_1_c1", "tandem_gemv_q5_1_c8", "tandem_mul_mat_id_q5_1"],
    ),
    KernelUnit::new(
        "q8_0",
        &[
            "tandem_gemv_q8_0_c1",
            "tandem_gemv_q8_0_c8",
            "tandem_gemv_q8_0_u1",
            "tandem_gemv_q8_0_n1",
            "tandem_mul_mat_id_q8_0",
            "tandem_mmid_q8_0_u1",
        ],
    ),
    KernelUnit::new(
        "q2_K",
        &["tandem_gemv_q2_K_c1", "tandem_gemv_q2_K_c8", "tandem_mul_mat_id_q2_K"],
    ),
    KernelUnit::new(
        "q3_K",
        &["tandem_gemv_q3_K_c1", "tandem_gemv_q3_K_c8", "tandem_mul_mat_id_q3_K"],
    ),
    KernelUnit::new(
        "q4_K",
        &[
            "tandem_gemv_q4_K_c1",
            "tandem_gemv_q4_K_c8",
            "tandem_gemv_q4_K_s1",
            "tandem_gemv_q4_K_u1",
            "tandem_gemv_q4_K_n1",
            "tandem_mul_mat_id_q4_K",
            "tandem_mmid_q4_K_u1",
        ],
    ),
    KernelUnit::new(
        "q5_K",
        &["tandem_gemv_q5_K_c1", "tandem_gemv_q5_K_c8", "tandem_mul_mat_id_q5_K"],
    ),
    KernelUnit::new(
        "q6_K",
        &[
            "tandem_gemv_q6_K_c1",
            "tandem_gemv_q6_K_c8",
            "tandem_gemv_q6_K_u1",
            "tandem_gemv_q6_K_n1",
            "tandem_mul_mat_id_q6_K",
            "tandem_mmid_q6_K_u1",
        ],
    ),
    KernelUnit::new(
        "iq4_nl",
        &[
            "tandem_gemv_iq4_nl_c1",
            "tandem_gemv_iq4_nl_c8",
            "tandem_gemv_iq4_nl_s1",
            "tandem_mul_mat_id_iq4_nl",
        ],
    ),
];

/// The `mma` family's units (`crate::KernelUnit`): one a weight type (its tensor-core tiles,
/// batched-decode GEMV, Hopper GEMMs and MUL_MAT_ID tiles), and the activation copies and the
/// MUL_MAT_ID routing apart.
pub(crate) const MMA_UNITS: &[KernelUnit] = &[
    KernelUnit::new(
        "common",
        &[
            "tandem_mma_f16_copy",
            "tandem_mma_bf16_copy",
            "tandem_mma_f16_q8_copy",
            "tandem_mmid_route",
        ],
    ),
    KernelUnit::new("f16", &["tandem_mma_f16", "tandem_wgmma_f16"]),
    KernelUnit::new("bf16", &["tandem_mma_bf16", "tandem_wgmma_bf16"]),
    KernelUnit::new(
        "q4_0",
        &[
            "tandem_mma_q4_0",
            "tandem_mmv_q4_0",
            "tandem_wgmma_q4_0",
            "tandem_wgmmq_q4_0",
            "tandem_mmid_mma_q4_0",
        ],
    ),
    KernelUnit::new(
        "q4_1",
        &[
            "tandem_mma_q4_1",
            "tandem_mmv_q4_1",
            "tandem_wgmma_q4_1",
            "tandem_wgmmq_q4_1",
            "tandem_mmid_mma_q4_1",
        ],
    ),
    KernelUnit::new(
        "q5_0",
        &[
            "tandem_mma_q5_0",
            "tandem_mmv_q5_0",
            "tandem_wgmma_q5_0",
            "tandem_wgmmq_q5_0",
            "tandem_mmid_mma_q5_0",
        ],
    ),
    KernelUnit::new(
        "q5_1",
        &[
            "tandem_mma_q5_1",
            "tandem_mmv_q5_1",
            "tandem_wgmma_q5_1",
            "tandem_wgmmq_q5_1",
            "tandem_mmid_mma_q5_1",
        ],
    ),
    KernelUnit::new(
        "q8_0",
        &[
            "tandem_mma_q8_0",
            "tandem_mmv_q8_0",
            "tandem_wgmma_q8_0",
            "tandem_wgmmq_q8_0",
            "tandem_mmid_mma_q8_0",
        ],
    ),
    KernelUnit::new(
        "iq4_nl",
        &[
            "tandem_mma_iq4_nl",
            "tandem_mmv_iq4_nl",
            "tandem_wgmma_iq4_nl",
            "tandem_wgmmq_iq4_nl",
            "tandem_mmid_mma_iq4_nl",
        ],
    ),
    KernelUnit::new("q2_K", &["tandem_mma_q2_K", "tandem_mmv_q2_K", "tandem_mmid_mma_q2_K"]),
    KernelUnit::new("q3_K", &["tandem_mma_q3_K", "tandem_mmv_q3_K", "tandem_mmid_mma_q3_K"]),
    KernelUnit::new(
        "q4_K",
        &[
            "tandem_mma_q4_K",
            "tandem_mmv_q4_K",
            "tandem_wgmmq_q4_K",
            "tandem_mmid_mma_q4_K",
        ],
    ),
    KernelUnit::new(
        "q5_K",
        &[
            "tandem_mma_q5_K",
            "tandem_mmv_q5_K",
            "tandem_wgmmq_q5_K",
            "tandem_mmid_mma_q5_K",
        ],
    ),
    KernelUnit::new("q6_K", &["tandem_mma_q6_K", "tandem_mmv_q6_K", "tandem_mmid_mma_q6_K"]),
];
