use crate::KernelSource;

/// Row-wise f32 ops: norms (alone and with the next MUL folded in), SUM_ROWS, SOFT_MAX, ARGSORT.
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
            "tandem_sum_rows_f32",
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
        entries: &["tandem_argsort_f32"],
        options: &[],
    },
];
