//! # dlbind — DLPack for Rust/PyO3
//!
//! Zero-copy export (`#[derive(DLPackExport)]` → `__dlpack__` / `__dlpack_device__`) and
//! import ([`from_dlpack`] → [`ImportedTensor`]) of DLPack 1.3 tensors. Every protocol
//! constant, capsule name, keyword name, stream rule and exception choice comes from the code
//! generated from `spec/dlpack.yaml` (modules [`ffi`], [`dtype_table`], [`element`],
//! [`stream_rules`], [`failure`], [`protocol`]).
//!
//! ```ignore
//! use dlbind::prelude::*;
//! #[pyclass(frozen)]
//! #[derive(DLPackExport)]
//! struct Image {
//!     #[dlpack(data)] pixels: Vec<u8>,
//!     #[dlpack(shape)] dims: Vec<usize>,
//! }
//! ```
//!
//! ## Map
//! * Producer: [`export::DLPackSource`] (what the derive implements), [`export::DataSource`]
//!   (data fields), [`export::request`] (pure negotiation: `ExportRequest` → `ExportPlan`),
//!   [`export::managed`] (one `PyMem_Malloc` block per export, capsule with the generated
//!   static name, GIL-safe deleter, [`live_exports`]), [`python::dlpack_method`] /
//!   [`python::dlpack_device_method`] (the method bodies) and the optional raw-fastcall
//!   `__dlpack__` ([`python::dlpack_descriptor`], [`python::install_fast_dlpack`]).
//! * Consumer: [`from_dlpack`] / [`python::from_dlpack_py`] → [`ImportedTensor`] (owning
//!   handle: shape/strides/dtype/device/readonly, slices, `ndarray` views, copies).
//! * Storage for array types: [`storage::Buffer`]; what it reports to the garbage collector
//!   ([`export::DataSource::visit_python_refs`], the derived `__traverse__`) is in `gc`.
//! * Errors: [`DlpackError`] = generated [`failure::FailureKind`] + message; the Python exception
//!   comes from the generated mapping.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_debug_implementations)]

pub mod dtype_table;
pub mod element;
pub mod failure;
pub mod ffi;
pub mod protocol;
pub mod stream_rules;

pub mod alloc;
pub mod bridges;
pub mod copy;
mod cpython;
pub mod device;
pub mod error;
pub mod exchange;
pub mod export;
pub mod freelist;
mod gc;
pub mod gpu;
pub mod import;
mod interp;
pub mod prelude;
pub mod python;
pub mod storage;

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;

pub use dlbind_macros::DLPackExport;
pub use pyo3;

pub use device::Device;
pub use error::DlpackError;
pub use export::live_exports;
pub use import::ImportedTensor;
pub use python::from_dlpack;
pub use storage::Buffer;
