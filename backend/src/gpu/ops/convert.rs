use crate::gpu::registry::Registration;

pub const REGISTRATIONS: &[Registration] = &[];
