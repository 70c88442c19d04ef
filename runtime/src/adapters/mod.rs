//! Adapters for the Rust array crates users already hold data in (issue 34): one cargo feature
//! per crate, off by default, each both ways where the crate allows.
//!
//! | feature | module | export | import |
//! |---|---|---|---|
//! | `ndarray` (default) | `adapters::ndarray` | `Array`, `ArcArray`, `CowArray`, a frozen class's `ArrayView` | `ArrayView(Mut)` of `Ix1`..`Ix6` / `IxDyn`, owning `NdTensor` |
//! | `image` | `adapters::image` | `ImageBuffer` (HWC), `FlatSamples` (its strides), a frozen class's `SubImage` | `ImageBuffer` over the tensor |
//! | `safetensors` | `adapters::safetensors` | a file's tensors, read-only, zero-copy (aligned) | |
//! | `arrow` | `adapters::arrow` | `PrimitiveArray`, `FixedSizeListArray` (N-D), `arrow.fixed_shape_tensor` (permutation → strides); read-only views, nulls and booleans with `copy` only | `PrimitiveArray`, nested `FixedSizeListArray`, `arrow.fixed_shape_tensor`, over the tensor's memory (`Buffer::from_custom_allocation`) |
//! | `candle` | `adapters::candle` | CPU `Tensor` (any layout), read-only, zero-copy | a CPU `Tensor` (a copy: candle cannot own foreign memory) |
//! | `cudarc` (with `cuda`) | `adapters::cudarc` | `CudaSlice` (owned or `Arc`-shared part), `CudaView`: N-d `kDLCUDA`, producer stream = the slice's (events) | `import_on_stream` (`__dlpack__(stream=...)`), `ImportedSlice` → `CudaView` keeping the producer |
//!
//! Each adapter is a leaf: it uses the public model (`DLPackSource`, `ImportedTensor`, `Buffer`,
//! `from_dlpack`) and never a CPython internal.

#[cfg(feature = "arrow")]
pub mod arrow;
#[cfg(feature = "candle")]
pub mod candle;
#[cfg(feature = "cudarc")]
pub mod cudarc;

#[cfg(feature = "image")]
pub mod image;
#[cfg(feature = "ndarray")]
pub mod ndarray;
#[cfg(any(feature = "ndarray", feature = "image", feature = "safetensors"))]
mod rust_owned;
#[cfg(any(feature = "ndarray", feature = "image", feature = "safetensors"))]
pub use rust_owned::live_rust_owned_tensors;
#[cfg(feature = "safetensors")]
pub mod safetensors;
