//! The producer path, top to bottom:
//!
//! 1. The traits an exportable type implements: [`DLPackSource`] (what the derive implements),
//!    [`DataSource`] (storage of a `#[dlpack(data)]` field), and `access` ([`SourceAccess`]:
//!    `&T` from a frozen or plain `#[pyclass]`, and what an export keeps alive; `borrow`: the
//!    shared borrow a plain class's exports hold, in the managed tensor's block or in a guard
//!    object).
//! 2. `method`: the `__dlpack__` / `__dlpack_device__` bodies the derive installs (a raw
//!    fastcall descriptor for `__dlpack__`).
//! 3. `request`: negotiation, pure: an [`ExportRequest`] (the call's keywords) and the source's
//!    facts → an `ExportPlan` (versioned or legacy, target device, copy, stream), or the spec's
//!    error.
//! 4. The managed tensor: `block` (one `PyMem_Malloc` block per export, its layout, the spare
//!    blocks, [`live_exports`]), `fill` (the block filled from the source), `release` (the
//!    deleter, GIL-safe, run exactly once), `device` (exports that involve a GPU: the device
//!    plan), `capsule` (the capsule with the generated name, and the entry points).

mod block;
mod capsule;
mod device;
mod fill;
mod release;

pub mod access;
pub mod borrow;
pub mod method;
pub mod request;

use std::ffi::c_void;
use std::sync::Arc;

pub use access::SourceAccess;
pub use block::{live_exports, spare_blocks_held};
#[cfg(any(test, feature = "test-util"))]
pub use capsule::export_to_capsule;
#[cfg(feature = "test-util")]
pub use capsule::export_to_capsule_on;
pub use capsule::export_versioned_managed;
pub(crate) use capsule::export_versioned_managed_kept;
pub(crate) use release::visit_exported_owner;
pub use request::ExportRequest;
#[cfg(feature = "test-util")]
pub use request::{ExportPlan, SourceInfo, plan_export};

use crate::device::Device;
use crate::ffi::DLDataType;
use crate::spec::elements::DLPackElement;

/// A type that can describe itself as one DLPack tensor. `#[derive(DLPackExport)]` implements
/// it; a hand-written impl is fine too.
///
/// # Safety
/// While the value is alive and not mutated, `dlpack_data_ptr()` must point to element 0 of
/// memory that holds every element addressed by the shape and strides filled in (element
/// strides, any sign) at the dtype's width, on `dlpack_device()`. An export keeps the Python
/// object that owns `self` alive; the implementor must not free or move that memory while
/// exports exist. For a `#[pyclass]`, dlbind's entry points (`__dlpack__`, the exchange table,
/// the bridges) see to `&mut self`: a frozen class has none, and every export of a non-frozen
/// one holds a shared borrow of the object
/// ([`SourceAccess::with_owner`]), so a `&mut self`
/// method or setter fails with PyO3's borrow error while an export lives. What remains is
/// mutation through `&self` (interior mutability), which must not move or free the memory, and
/// hand-written exports (`export_to_capsule` and friends), which must pass such an owner.
/// `dlpack_fill_shape` / `dlpack_fill_strides` must write exactly `dlpack_ndim()` values.
pub unsafe trait DLPackSource {
    /// Address of element 0 (any byte offset already folded in).
    fn dlpack_data_ptr(&self) -> *mut c_void;
    /// The element type.
    fn dlpack_dtype(&self) -> DLDataType;
    /// Number of dimensions.
    fn dlpack_ndim(&self) -> usize;
    /// Writes the shape (`out.len() == dlpack_ndim()`).
    fn dlpack_fill_shape(&self, out: &mut [i64]);
    /// Writes the strides in elements and returns `true`, or returns `false` for
    /// C-contiguous (the runtime computes them). `out.len() == dlpack_ndim()`.
    fn dlpack_fill_strides(&self, out: &mut [i64]) -> bool {
        let _ = out;
        false
    }
    /// Where the memory is (default: CPU).
    fn dlpack_device(&self) -> Device {
        Device::CPU
    }
    /// The device of every value of the type, when it does not depend on the value: then it
    /// must equal [`Self::dlpack_device`] for every value. `__dlpack_device__` answers it without
    /// reading the object (for a non-frozen class: without borrowing it). The derive returns
    /// `Some(Device::CPU)` for a type without a `#[dlpack(device)]` field; the default `None`
    /// asks the value. (A function rather than a constant, so that `dyn DLPackSource` stays
    /// usable.)
    #[inline(always)]
    fn dlpack_fixed_device() -> Option<Device>
    where
        Self: Sized,
    {
        None
    }
    /// Whether consumers must not write (default: writable).
    fn dlpack_readonly(&self) -> bool {
        false
    }
    /// Whether consumers may write, when that is known ([`Writability`]); the default follows
    /// [`Self::dlpack_readonly`]. Data of `Unknown` writability (a view imported from a legacy
    /// capsule) is exported read-only in versioned capsules but may also leave through a legacy
    /// one, which known read-only data refuses.
    ///
    /// [`Writability`]: crate::Writability
    fn dlpack_writability(&self) -> crate::Writability {
        crate::Writability::from_readonly(self.dlpack_readonly())
    }
    /// The stream (raw `CUstream` / `hipStream_t`) on which work that writes this tensor may
    /// still be pending, or `None` (the default): host data has nothing pending, and CUDA/ROCm
    /// data is then taken to be ready on the device's default stream (the one `stream=None`
    /// stands for: CUDA's legacy stream, ROCm's 0). When the consumer asks for another stream,
    /// the export records an event on this one and makes the consumer's stream wait for it (no
    /// device-wide synchronisation).
    fn dlpack_stream(&self) -> Option<crate::gpu::StreamHandle> {
        None
    }
    /// How many bytes the memory holds from `dlpack_data_ptr()` on, with nothing before it, when
    /// the source knows (the derive returns its data field's [`DataSource::bytes_from_start`]).
    /// Every export then checks that the shape and strides stay inside it
    /// (`check_data_span`: a MalformedTensor error instead of handing out memory that is not
    /// there). `None` (the default): the shape and strides are trusted, as the safety contract
    /// above requires.
    fn dlpack_data_bytes(&self) -> Option<usize> {
        None
    }
    /// Whether the type vouches for every value's layout — a dtype dlbind can describe, and
    /// shape and strides inside its data — so that exports skip both checks. The derive returns
    /// `true` for a type that implements [`UncheckedExtent`] (whose safety contract says so);
    /// the default is `false`: every export checks the dtype (and the span, with
    /// [`Self::dlpack_data_bytes`]).
    fn dlpack_layout_trusted(&self) -> bool {
        false
    }
}

/// Opt-out of the export-side layout checks for a derived type whose constructors already keep
/// every value's dtype valid and its shape and strides inside its data: `#[derive(DLPackExport)]`
/// then reports no data extent ([`DLPackSource::dlpack_data_bytes`] = `None`) and a trusted
/// layout ([`DLPackSource::dlpack_layout_trusted`]), and exports skip the per-call dtype and
/// span checks (~40 instructions of a ~700-instruction `__dlpack__`).
///
/// # Safety
/// For every value of the type that safe code can build: its dtype is one dlbind can describe
/// (a type code the spec knows, with the bits that code requires, `lanes == 1`: what
/// `dlbind::layout::validate_dtype` accepts), and the elements its shape and strides address (at
/// that dtype's width, from `dlpack_data_ptr()`) lie inside memory that stays readable while the
/// value lives. Without this impl the derive checks both on every export.
pub unsafe trait UncheckedExtent {}

/// Storage that can back a `#[dlpack(data)]` field.
///
/// # Safety
/// `data_ptr()` points to the first element of the storage and stays valid while `self` is
/// alive and not mutated; `element_dtype()`, when `Some`, is the dtype of the stored elements;
/// `bytes_from_start()`, when `Some`, does not exceed the bytes readable from `data_ptr()` on
/// (exports trust it to bound the shape and strides).
pub unsafe trait DataSource {
    /// Address of the first element (non-null; dangling-but-aligned when empty).
    fn data_ptr(&self) -> *mut c_void;
    /// The element dtype, or `None` for untyped bytes (the dtype comes from elsewhere).
    fn element_dtype(&self) -> Option<DLDataType>;
    /// How many bytes the storage holds from `data_ptr()` on (nothing before it), or `None`
    /// when it does not know (a view whose extent was checked where it was made). Exports check
    /// shape and strides against it ([`DLPackSource::dlpack_data_bytes`]).
    fn bytes_from_start(&self) -> Option<usize> {
        None
    }
    /// Visits each Python object this storage holds a strong reference to, exactly once, for
    /// the garbage collector (the `__traverse__` that `#[derive(DLPackExport)]` emits calls it
    /// on the data field). Storage that holds none keeps the default. Visiting a reference the
    /// storage does not own, or one twice, corrupts the collector's counts: leave out any
    /// reference shared with other owners (a cycle through it is then not collected, which is
    /// safe). Runs inside `tp_traverse`: no Python calls, no reference count changes.
    fn visit_python_refs(&self, visit: &pyo3::PyVisit<'_>) -> Result<(), pyo3::PyTraverseError> {
        let _ = visit;
        Ok(())
    }
    /// For `#[derive(FromDLPack)]`: whether a new instance of the frozen type `own()` holding
    /// this storage must be tracked by the garbage collector (what it reports in
    /// [`visit_python_refs`](Self::visit_python_refs) could close a cycle). The default says
    /// yes; dlbind's own storage answers for itself. A wrong `false` can only leave a cycle
    /// uncollected. Not part of the API.
    #[doc(hidden)]
    #[inline]
    fn __dlbind_needs_tracking(&self, own: impl FnOnce() -> *mut pyo3::ffi::PyTypeObject) -> bool {
        let _ = own;
        true
    }
}

/// `DataSource` for owned slices of elements: the slice's pointer, `T::DTYPE`, its byte size.
macro_rules! slice_data_source {
    ($($(#[doc = $why:literal])* $ty:ty;)*) => {$(
        $(#[doc = $why])*
        // SAFETY: the container's slice pointer is valid (dangling and aligned when empty) and
        // unmoved while the container lives unmodified (see each impl's note); its elements are
        // `T`, whose dtype is `T::DTYPE`, and `size_of_val` is exactly their bytes.
        unsafe impl<T: DLPackElement> DataSource for $ty {
            #[inline]
            fn data_ptr(&self) -> *mut c_void {
                self.as_ptr() as *mut c_void
            }
            #[inline]
            fn element_dtype(&self) -> Option<DLDataType> {
                Some(T::DTYPE)
            }
            #[inline]
            fn bytes_from_start(&self) -> Option<usize> {
                Some(std::mem::size_of_val::<[T]>(self))
            }
            /// Elements only: no Python reference to report.
            #[inline]
            fn __dlbind_needs_tracking(
                &self,
                _own: impl FnOnce() -> *mut pyo3::ffi::PyTypeObject,
            ) -> bool {
                false
            }
        }
    )*};
}

slice_data_source! {
    /// A `Vec`'s buffer stays put while the `Vec` is not modified.
    Vec<T>;
    /// A boxed slice never moves while the box lives.
    Box<[T]>;
    /// An `Arc`'d slice never moves while any `Arc` to it lives (this one included).
    Arc<[T]>;
}

