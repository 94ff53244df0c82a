//! Dot products of weight rows with activation rows quantized the way ggml's CPU backend does.

use tandem_graph::ElemType;

/// The activation format ggml pairs with weight type `ty` (its `vec_dot_type`).
pub fn vec_dot_type(ty: ElemType) -> ElemType {
    ty
}
