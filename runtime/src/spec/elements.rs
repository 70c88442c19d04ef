//! Rust element types with a DLPack dtype.
//!
//! The impls come from the spec's dtype table (`generated/rust/elements.rs`): `bool`, the
//! integer types, `f32`/`f64`, `half::f16`/`half::bf16` and `num_complex::Complex<f32/f64>`.

use super::types::DLDataType;

/// A Rust type whose values are stored exactly as the DLPack dtype [`Self::DTYPE`].
///
/// Implemented by the generated table; the derive uses it to infer a data field's dtype.
///
/// # Safety
/// The runtime sizes exports and imported slices of `Self` by [`Self::DTYPE`] (a `Vec<Self>` is
/// exported as `len` elements of that dtype; an import whose dtype is `DTYPE` is read as
/// `&[Self]`), so an implementation must make that true: `size_of::<Self>()` bytes are exactly
/// `DTYPE.bits * DTYPE.lanes` bits, and every bit pattern of that size is a valid `Self` (`bool`
/// alone excepted: imports check its bytes are 0 or 1). A wrong answer would let a consumer read
/// past the end of the memory, or Rust read an invalid value, so implementing it is `unsafe`.
#[diagnostic::on_unimplemented(
    message = "element type `{Self}` has no DLPack dtype code",
    label = "not a DLPack element type",
    note = "the element types are the spec's `rust_type` column (the impls of `dlbind::DLPackElement`)",
    note = "for raw storage name the dtype on the struct, e.g. `#[dlpack(dtype = \"bfloat16\")]` (not on a `#[dlpack(array)]` field, whose dtype is its element type's)"
)]
pub unsafe trait DLPackElement: Copy + Send + Sync + 'static {
    /// The DLPack dtype of one element (`lanes == 1`).
    const DTYPE: DLDataType;
    /// The spec's Python name of the dtype (`"float32"`, `"bfloat16"`, ...).
    const NAME: &'static str;
}

#[allow(clippy::all)]
mod generated {
    include!("../generated/elements.rs");
}
