use crate::KernelSource;

/// ROPE (normal and neox, frequency factors, YaRN), f32 and f16.
pub(crate) const FAMILIES: &[KernelSource] = &[KernelSource {
    family: "rope",
    file: "rope.hip",
    source: include_str!("../rope.hip"),
    entries: &["tandem_rope"],
    options: &[],
}];
