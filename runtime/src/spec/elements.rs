//! Rust element types with a DLPack dtype.
//!
//! The impls come from the spec's dtype table (`generated/rust/elements.rs`): `bool`, the
//! integer types, `f32`/`f64`, `half::f16`/`half::bf16` and `num_complex::Complex<f32/f64>`.

use super::types::DLDataType;

/// A Rust type whose values are stored exactly as the DLPack dtype [`Self::DTYPE`].
///
/// Implemented only by the generated table; the derive uses it to infer a data field's dtype.
pub trait DLPackElement: Copy + Send + Sync + 'static {
    /// The DLPack dtype of one element (`lanes == 1`).
    const DTYPE: DLDataType;
    /// The spec's Python name of the dtype (`"float32"`, `"bfloat16"`, ...).
    const NAME: &'static str;
}

#[allow(clippy::all)]
mod generated {
    include!("../generated/elements.rs");
}
