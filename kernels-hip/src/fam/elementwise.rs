use crate::{KernelSource, KernelUnit};

/// Elementwise: binary ops with broadcasting and the GLU gates, every UNARY sub-op, SCALE, CLAMP
/// (f32/f16/bf16 through the `_any` entries), ADD_ID, and the weighted sum of MoE expert outputs.
pub(crate) const FAMILIES: &[KernelSource] = &[KernelSource {
    family: "elementwise",
    file: "elementwise.hip",
    source: include_str!("../elementwise.hip"),
    entries: &[], // the units' entries (`crate::units_of`)
    options: &[],
}];

/// The `elementwise` family's units (`crate::KernelUnit`): the generic binary and unary kernels
/// (every type mix and op, most of the family's compile time) apart from the f32 fast paths.
pub(crate) const ELEMENTWISE_UNITS: &[KernelUnit] = &[
    KernelUnit::new(
        "common",
        &[
            "tandem_add_f32",
            "tandem_sub_f32",
            "tandem_mul_f32",
            "tandem_div_f32",
            "tandem_swiglu4_f32",
            "tandem_geglu4_f32",
            "tandem_reglu4_f32",
            "tandem_geglu_erf4_f32",
            "tandem_geglu_quick4_f32",
            "tandem_scale_f32",
            "tandem_silu_f32",
            "tandem_add_id_f32",
            "tandem_moe_sum_f32",
        ],
    ),
    KernelUnit::new("binary", &["tandem_binary_any"]),
    KernelUnit::new("unary", &["tandem_unary_any"]),
];
