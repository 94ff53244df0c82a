use crate::KernelSource;

/// Elementwise f32: binary ops with broadcasting, scale, silu.
pub(crate) const FAMILIES: &[KernelSource] = &[KernelSource {
    family: "elementwise",
    file: "elementwise.hip",
    source: include_str!("../elementwise.hip"),
    entries: &[
        "tandem_add_f32",
        "tandem_sub_f32",
        "tandem_mul_f32",
        "tandem_div_f32",
        "tandem_scale_f32",
        "tandem_silu_f32",
    ],
    options: &[],
}];
