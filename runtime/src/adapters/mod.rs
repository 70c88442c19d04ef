//! Adapters for the Rust array crates users already hold data in (issue 34): one cargo feature
//! per crate, off by default, each both ways where the crate allows.
//!
//! | feature | module | export | import |
//! |---|---|---|---|
//! | `ndarray` (default) | `adapters::ndarray` | `Array`, `ArcArray`, `CowArray`, a frozen class's `ArrayView` | `ArrayView(Mut)` of `Ix1`..`Ix6` / `IxDyn`, owning `NdTensor` |
//! | `image` | `adapters::image` | `ImageBuffer` (HWC), `FlatSamples` (its strides), a frozen class's `SubImage` | `ImageBuffer` over the tensor |
//! | `safetensors` | `adapters::safetensors` | a file's tensors, read-only, zero-copy (aligned) | |
//! | `arrow` | `adapters::arrow` | `PrimitiveArray`, `FixedSizeListArray` (N-D), `arrow.fixed_shape_tensor` (permutation → strides); read-only views, nulls and booleans with `copy` only | `PrimitiveArray`, nested `FixedSizeListArray`, `arrow.fixed_shape_tensor`, over the tensor's memory (`Buffer::from_custom_allocation`) |
//! | `candle` | `adapters::candle` | CPU `Tensor` (any layout): a copy (`from_tensor`, `IS_COPIED`), or a read-only zero-copy view (`unsafe` `view_unchecked`: candle writes storage in place) | a CPU `Tensor` (a copy: candle cannot own foreign memory) |
//! | `cudarc` (with `cuda`) | `adapters::cudarc` | `CudaSlice` (owned or `Arc`-shared part), `CudaView`: N-d `kDLCUDA`, producer stream = the slice's (events) | `import_on_stream` (`__dlpack__(stream=...)`), `ImportedSlice` → `CudaView` keeping the producer |
//!
//! An export that copied says so (`is_copied()`); [`Handoff`] hands one to Python once with
//! DLPack's `IS_COPIED` (and `READ_ONLY`) flags, which an object that keeps lending the memory
//! cannot set.
//!
//! Each adapter is a leaf: it uses the public model (`DLPackSource`, `ImportedTensor`, `Buffer`,
//! `from_dlpack`) and never a CPython internal.

#[cfg(feature = "arrow")]
pub mod arrow;
#[cfg(feature = "candle")]
pub mod candle;
#[cfg(feature = "cudarc")]
pub mod cudarc;

mod handoff;
#[cfg(feature = "image")]
pub mod image;
#[cfg(feature = "ndarray")]
pub mod ndarray;
mod rust_owned;
pub use handoff::Handoff;
pub use rust_owned::live_rust_owned_tensors;
#[cfg(feature = "safetensors")]
pub mod safetensors;

/// Error messages have one form across the adapters: `<adapter>: <what was given>, wanted <what>`
/// (`ndarray: tensor dtype is float64, wanted float32`). This rewrites an error that an
/// [`ImportedTensor`](crate::import::ImportedTensor) accessor gave (`as_slice`, `as_ndarray`,
/// `to_vec`, ...: `"as_ndarray: tensor dtype is float64, not float32"`) into that form: the
/// accessor's name becomes the adapter's, `", not Y"` becomes `", wanted Y"`, and `"X is not Y"`
/// gets `", wanted Y"` (unless the message says what it wanted already). The kind is kept.
#[cfg(any(feature = "ndarray", feature = "image", feature = "arrow"))]
pub(crate) fn reword(adapter: &str, e: crate::error::DlpackError) -> crate::error::DlpackError {
    let msg = e.message();
    // The accessor's name: one leading identifier and ": " (`as_ndarray_mut: `, `to_vec: `).
    let rest = match msg.split_once(": ") {
        Some((head, rest))
            if !head.is_empty() && head.bytes().all(|b| b == b'_' || b.is_ascii_alphanumeric()) =>
        {
            rest
        }
        _ => msg,
    };
    let rest = match (rest.split_once(", not "), rest.split_once(" is not ")) {
        _ if rest.contains("wanted") => rest.to_owned(),
        // "tensor dtype is float64, not float32"
        (Some((given, wanted)), _) => format!("{given}, wanted {wanted}"),
        // "tensor is not C-contiguous", "memory on device kDLCUDA:0 is not host-accessible"
        (None, Some((_, wanted))) => format!("{rest}, wanted {wanted}"),
        (None, None) => rest.to_owned(),
    };
    crate::error::DlpackError::new(e.kind(), format!("{adapter}: {rest}"))
}
