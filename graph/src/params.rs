//! Typed views of `op_params`, laid out exactly as ggml writes them.

use crate::op::{GluOp, SortOrder, UnaryOp, ROPE_TYPE_NEOX};
use crate::tensor::Tensor;

/// ROPE params (`ggml_rope_impl`): `[n_past, n_dims, mode, n_ctx, n_ctx_orig, freq_base,
/// freq_scale, ext_factor, attn_factor, beta_fast, beta_slow, sections[4], n_offs]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RopeParams {
    pub n_dims: i32,
    pub mode: i32,
    pub n_ctx_orig: i32,
    pub freq_base: f32,
    pub freq_scale: f32,
    pub ext_factor: f32,
    pub attn_factor: f32,
    pub beta_fast: f32,
    pub beta_slow: f32,
}

impl RopeParams {
    pub fn read(t: &Tensor) -> RopeParams {
        RopeParams {
            n_dims: t.param_i32(1),
            mode: t.param_i32(2),
            n_ctx_orig: t.param_i32(4),
            freq_base: t.param_f32(5),
            freq_scale: t.param_f32(6),
            ext_factor: t.param_f32(7),
            attn_factor: t.param_f32(8),
            beta_fast: t.param_f32(9),
            beta_slow: t.param_f32(10),
        }
    }

    pub fn write(&self, t: &mut Tensor) {
        t.op_params = [0; 16];
        t.set_param_i32(1, self.n_dims);
        t.set_param_i32(2, self.mode);
        t.set_param_i32(4, self.n_ctx_orig);
        t.set_param_f32(5, self.freq_base);
        t.set_param_f32(6, self.freq_scale);
        t.set_param_f32(7, self.ext_factor);
        t.set_param_f32(8, self.attn_factor);
        t.set_param_f32(9, self.beta_fast);
        t.set_param_f32(10, self.beta_slow);
    }

    pub fn is_neox(&self) -> bool {
        self.mode & ROPE_TYPE_NEOX != 0
    }

    /// Plain llama-style defaults for `n_dims`.
    pub fn llama(n_dims: i32, neox: bool) -> RopeParams {
        RopeParams {
            n_dims,
            mode: if neox { ROPE_TYPE_NEOX } else { 0 },
            n_ctx_orig: 4096,
            freq_base: 10000.0,
            freq_scale: 1.0,
            ext_factor: 0.0,
            attn_factor: 1.0,
            beta_fast: 32.0,
            beta_slow: 1.0,
        }
    }
}

/// SOFT_MAX params: `[scale, max_bias]` (f32).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SoftMaxParams {
    pub scale: f32,
    pub max_bias: f32,
}

impl SoftMaxParams {
    pub fn read(t: &Tensor) -> SoftMaxParams {
        SoftMaxParams {
            scale: t.param_f32(0),
            max_bias: t.param_f32(1),
        }
    }
}

/// FLASH_ATTN_EXT params: `[scale, max_bias, logit_softcap]` (f32), `[3]` = precision (i32).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FlashAttnParams {
    pub scale: f32,
    pub max_bias: f32,
    pub logit_softcap: f32,
    pub prec: i32,
}

impl FlashAttnParams {
    pub fn read(t: &Tensor) -> FlashAttnParams {
        FlashAttnParams {
            scale: t.param_f32(0),
            max_bias: t.param_f32(1),
            logit_softcap: t.param_f32(2),
            prec: t.param_i32(3),
        }
    }
}

/// SCALE params: `x * s + b`.
pub fn scale_params(t: &Tensor) -> (f32, f32) {
    (t.param_f32(0), t.param_f32(1))
}

/// CLAMP params: `[min, max]`.
pub fn clamp_params(t: &Tensor) -> (f32, f32) {
    (t.param_f32(0), t.param_f32(1))
}

/// NORM / RMS_NORM epsilon.
pub fn norm_eps(t: &Tensor) -> f32 {
    t.param_f32(0)
}

/// UNARY sub-op, if known.
pub fn unary_op(t: &Tensor) -> Option<UnaryOp> {
    UnaryOp::from_ggml(t.param_i32(0))
}

/// GLU sub-op (if known) and whether the halves are swapped.
pub fn glu_op(t: &Tensor) -> (Option<GluOp>, bool) {
    (GluOp::from_ggml(t.param_i32(0)), t.param_i32(1) != 0)
}

/// ARGSORT order, if valid.
pub fn sort_order(t: &Tensor) -> Option<SortOrder> {
    match t.param_i32(0) {
        0 => Some(SortOrder::Asc),
        1 => Some(SortOrder::Desc),
        _ => None,
    }
}

/// PERMUTE axes: `axes[i]` is where source dim `i` goes.
pub fn permute_axes(t: &Tensor) -> [i32; 4] {
    [t.param_i32(0), t.param_i32(1), t.param_i32(2), t.param_i32(3)]
}
