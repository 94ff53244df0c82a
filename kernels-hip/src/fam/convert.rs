use crate::KernelSource;

pub(crate) const FAMILIES: &[KernelSource] = &[];
