use crate::{KernelSource, KernelUnit};

/// Row-wise f32 ops: norms (alone, with the next MUL folded in, and RMS_NORM with the residual ADD
/// before it), SUM_ROWS (alone and as the
/// CLAMP/DIV normalization of MoE weights), SOFT_MAX, ARGSORT (alone and as a MoE router's top
/// k), and FLASH_ATTN_EXT (a softmax over rows of scores).
pub(crate) const FAMILIES: &[KernelSource] = &[
    KernelSource {
        family: "norm",
        file: "norm.hip",
        source: include_str!("../norm.hip"),
        entries: &[
            "tandem_rms_norm_f32",
            "tandem_norm_f32",
            "tandem_rms_norm_mul_f32",
            "tandem_norm_mul_f32",
            "tandem_add_rms_norm_mul_f32",
            "tandem_sum_rows_f32",
            "tandem_sum_clamp_div_f32",
        ],
        options: &[],
    },
    KernelSource {
        family: "softmax",
        file: "softmax.hip",
        source: include_str!("../softmax.hip"),
        entries: &["tandem_soft_max_f32"],
        options: &[],
    },
    KernelSource {
        family: "rowsort",
        file: "rowsort.hip",
        source: include_str!("../rowsort.hip"),
        entries: &["tandem_argsort_f32", "tandem_topk_moe_f32"],
        options: &[],
    },
    KernelSource {
        family: "flash_attn",
        file: "flash_attn.hip",
        source: include_str!("../flash_attn.hip"),
        entries: &[], // the units' entries (`crate::units_of`)
        options: &[],
    },
];

/// The `flash_attn` family's units (`crate::KernelUnit`): the f32 kernels of f16, q8_0 and any
/// other K/V, the split reduction, and the tensor-core kernels (prefill and decode) of one head
/// size each.
pub(crate) const FLASH_ATTN_UNITS: &[KernelUnit] = &[
    KernelUnit::new(
        "f16",
        &[
            "tandem_fa_f16_r4",
            "tandem_fa_f16_r8",
            "tandem_fa_f16_r16",
            "tandem_fa_f16_l",
        ],
    ),
    KernelUnit::new(
        "q8_0",
        &[
            "tandem_fa_q8_0_r4",
            "tandem_fa_q8_0_r8",
            "tandem_fa_q8_0_r16",
            "tandem_fa_q8_0_l",
        ],
    ),
    KernelUnit::new(
        "any",
        &[
            "tandem_fa_any_r4",
            "tandem_fa_any_r8",
            "tandem_fa_any_r16",
            "tandem_fa_any_l",
        ],
    ),
    KernelUnit::new("reduce", &["tandem_fa_reduce"]),
    KernelUnit::new("d64", &["tandem_fa_mma_d64", "tandem_fa_mmd_d64"]),
    KernelUnit::new("d96", &["tandem_fa_mma_d96", "tandem_fa_mmd_d96"]),
    KernelUnit::new("d128", &["tandem_fa_mma_d128", "tandem_fa_mmd_d128"]),
    KernelUnit::new("d256", &["tandem_fa_mma_d256", "tandem_fa_mmd_d256"]),
];
