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
pub(crate) mod memo;
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
pub(crate) use capsule::wrap_capsule;
use memo::ExportMemo;
pub(crate) use release::visit_exported_owner;
pub use request::ExportRequest;
#[cfg(feature = "test-util")]
pub use request::{ExportPlan, SourceInfo, plan_export};

use crate::device::Device;
use crate::extent::Extent;
use crate::ffi::DLDataType;
use crate::spec::elements::DLPackElement;
use crate::writability::Writability;

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
    #[inline]
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
    /// one as it is; known read-only data asked for in a legacy capsule leaves as a private
    /// copy (`copy=None`) or not at all (`copy=False`).
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
    /// What the storage behind [`Self::dlpack_data_ptr`] vouches for: the bytes around element 0
    /// that may be addressed ([`Extent`]) and the device the memory is on. Every export checks
    /// the shape and strides it fills in against the extent (a MalformedTensor error instead of
    /// describing memory that is not there) and refuses a [`Self::dlpack_device`] that differs
    /// from the storage's. `#[derive(DLPackExport)]` reports its data field's
    /// [`DataSource::extent`] and [`DataSource::device`]; `None` (the default, for a hand-written
    /// impl) checks nothing, the impl vouching by its safety contract.
    #[doc(hidden)]
    #[inline]
    fn __dlbind_storage(&self) -> Option<(Extent, Device)> {
        None
    }
    /// Whether the type vouches for every value's layout (shape and strides inside its data),
    /// so that exports skip the span check (not the device or dtype check). The derive returns `true` for a type with `#[dlpack(unchecked_extent)]` (which
    /// requires [`UncheckedExtent`], whose safety contract says so) and for an ndarray data
    /// field (consistent by construction);
    /// the default is `false`: every export checks the dtype (and the span, against the
    /// storage's extent).
    fn dlpack_layout_trusted(&self) -> bool {
        false
    }
    /// Where an instance of a `#[pyclass(frozen)]` type remembers that an export of it passed
    /// [`check_source`] ([`ExportMemo`], decision 0022): `Some` only when every value the check
    /// reads (dtype, shape, strides, device, and the storage's extent and device) stays the same
    /// for as long as `self` is only shared, and the memo belongs to `self` alone (not to
    /// storage another source may share). Read only by `__dlpack__`'s frozen path.
    /// `#[derive(DLPackExport)]` returns its [`Buffer`](crate::Buffer)'s memo when the shape and
    /// strides fields are [`FixedDims`](memo::FixedDims); the default is `None` (checked every time).
    #[doc(hidden)]
    #[inline]
    fn __dlbind_memo(&self) -> Option<&ExportMemo> {
        None
    }
}

/// What every export path checks before it describes `src`'s memory (`__dlpack__`, legacy and
/// versioned, the C exchange table, the buffer protocol, the array interfaces, SYCL), with the
/// shape and strides it filled in: the device is the storage's, and (unless the type vouches
/// for its layout) the dtype is one dlbind can describe and the elements lie inside the
/// storage's extent. Writability needs no check here: a derived type's
/// [`DLPackSource::dlpack_writability`] already folds the storage's in.
#[inline(always)]
pub(crate) fn check_source<S: DLPackSource + ?Sized>(
    src: &S,
    shape: &[i64],
    strides: &[i64],
    dtype: DLDataType,
) -> Result<(), crate::error::DlpackError> {
    check_source_once(src, shape, strides, dtype, None)
}

/// [`check_source`], skipped when `memo` says an export of the same frozen instance passed it
/// (and noting a pass in it): `memo` is `src`'s [`DLPackSource::__dlbind_memo`], given only when
/// `src` is part of a live frozen instance (`borrow::FrozenInstance`), else `None`.
#[inline(always)]
pub(crate) fn check_source_once<S: DLPackSource + ?Sized>(
    src: &S,
    shape: &[i64],
    strides: &[i64],
    dtype: DLDataType,
    memo: Option<&ExportMemo>,
) -> Result<(), crate::error::DlpackError> {
    if let Some(m) = memo {
        if m.passed() {
            return Ok(());
        }
        check_source_fully(src, shape, strides, dtype)?;
        m.note_passed();
        return Ok(());
    }
    check_source_fully(src, shape, strides, dtype)
}

#[inline(always)]
fn check_source_fully<S: DLPackSource + ?Sized>(
    src: &S,
    shape: &[i64],
    strides: &[i64],
    dtype: DLDataType,
) -> Result<(), crate::error::DlpackError> {
    let storage = src.__dlbind_storage();
    if let Some((_, on)) = storage {
        let said = src.dlpack_device();
        if said != on {
            return Err(device_mismatch(said, on));
        }
    }
    if src.dlpack_layout_trusted() {
        // A trusted layout still describes a dtype dlbind can (issue 50): a constant dtype
        // folds this away; a dtype field is one table load.
        return crate::layout::check_dtype_only(dtype);
    }
    crate::layout::check_data_span(shape, strides, dtype, storage.map(|(e, _)| e))
}

#[cold]
#[inline(never)]
fn device_mismatch(said: Device, on: Device) -> crate::error::DlpackError {
    crate::error::DlpackError::new(
        crate::spec::errors::FailureKind::MalformedTensor,
        format!(
            "the array says its data is on {said}, but its storage holds memory on {on}: \
             fix the array's device field (it may not differ from its data's)"
        ),
    )
}

/// Opt-out of the export-side layout checks for a derived type whose constructors already keep
/// every value's dtype valid and its shape and strides inside its data: with the struct-level
/// `#[dlpack(unchecked_extent)]`, `#[derive(DLPackExport)]` then reports a trusted layout
/// ([`DLPackSource::dlpack_layout_trusted`]), and exports skip the per-call span check (the
/// dtype is still validated, issue 50). The storage's device and writability are still applied: a field may narrow them,
/// never widen them. The only way to skip the span check.
///
/// The attribute and this impl go together: the attribute alone is a compile error (a safe
/// attribute never skips a check), and so is this impl on a type whose derive lacks the
/// attribute (it would skip nothing).
///
/// ```ignore
/// #[pyclass(frozen)]
/// #[derive(DLPackExport)]
/// #[dlpack(unchecked_extent)]
/// struct Checked { /* constructors keep the layout inside the data */ }
///
/// #[dlbind::pymethods]
/// impl Checked { /* the constructors */ }
///
/// // SAFETY: every constructor of `Checked` checks its shape against its data.
/// unsafe impl dlbind::UncheckedExtent for Checked {}
/// ```
///
/// # Safety
/// For every value of the type that safe code can build: its dtype is one dlbind can describe
/// (a type code the spec knows, with the bits that code requires, `lanes == 1`: what
/// `dlbind::layout::validate_dtype` accepts), and the elements its shape and strides address (at
/// that dtype's width, from `dlpack_data_ptr()`) lie inside memory that stays readable while the
/// value lives. Without this impl the derive checks both on every export.
#[diagnostic::on_unimplemented(
    message = "`#[dlpack(unchecked_extent)]` on `{Self}` needs `unsafe impl dlbind::UncheckedExtent for {Self} {{}}`",
    note = "the attribute only tells the derive; the unsafe impl is the promise that every value's layout lies inside its data"
)]
pub unsafe trait UncheckedExtent: DeclaresUncheckedExtent {}

/// Implemented by `#[derive(DLPackExport)]` for a type with `#[dlpack(unchecked_extent)]`: what
/// lets it implement [`UncheckedExtent`] (the two say the same thing, and neither works alone).
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "`unsafe impl UncheckedExtent for {Self}` needs `#[dlpack(unchecked_extent)]` on the struct",
    label = "the derive is not told to skip the span check",
    note = "write `#[dlpack(unchecked_extent)]` next to `#[derive(DLPackExport)]`: the impl's promise and the attribute go together"
)]
pub trait DeclaresUncheckedExtent {}

/// Storage that can back a `#[dlpack(data)]` field. The storage vouches for the memory it
/// holds: which bytes around its data pointer may be addressed ([`Self::extent`]), whether
/// consumers may write them ([`Self::writability`]) and where they are ([`Self::device`]). A
/// derived export checks the type's shape and strides against the extent, exports read-only
/// whatever the storage calls read-only, and refuses a device field that differs from the
/// storage's: the type's own fields can narrow what is exported, never widen it.
///
/// # Safety
/// `data_ptr()` points to the first element of the storage and stays valid while `self` is
/// alive and not mutated; `element_dtype()`, when `Some`, is the dtype of the stored elements;
/// every byte of `extent()` around `data_ptr()` is valid memory on `device()` while `self`
/// lives unmodified; and when `writability()` is `Writable`, a consumer may write those bytes
/// while `self` is only shared: no safe code reads them through a Rust reference (`&[T]`,
/// `&T`) derived from `&self`, so writes are not undefined behaviour. Memory Rust lends
/// through `&` (`Vec`, `Box<[T]>`, `Arc<[T]>`) is never `Writable`.
pub unsafe trait DataSource {
    /// Address of the first element (non-null; dangling-but-aligned when empty).
    fn data_ptr(&self) -> *mut c_void;
    /// The element dtype, or `None` for untyped bytes (the dtype comes from elsewhere).
    fn element_dtype(&self) -> Option<DLDataType>;
    /// The bytes around [`Self::data_ptr`] that may be addressed: exports check the type's
    /// shape and strides against it.
    fn extent(&self) -> Extent;
    /// Whether consumers may write the memory. The default: read-only.
    #[inline]
    fn writability(&self) -> Writability {
        Writability::ReadOnly
    }
    /// Where the memory is. The default: the CPU.
    #[inline]
    fn device(&self) -> Device {
        Device::CPU
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
    /// The memo of the instance this storage is part of ([`DLPackSource::__dlbind_memo`]):
    /// `Some` only for storage no other source can share, whose extent and device are fixed
    /// when it is made ([`Buffer`](crate::Buffer)). Not part of the API.
    #[doc(hidden)]
    #[inline]
    fn __dlbind_memo(&self) -> Option<&ExportMemo> {
        None
    }
    #[doc(hidden)]
    #[inline]
    fn __dlbind_needs_tracking(&self, own: impl FnOnce() -> *mut pyo3::ffi::PyTypeObject) -> bool {
        let _ = own;
        true
    }
}

/// `DataSource` for owned slices of elements: the slice's pointer, `T::DTYPE`, its byte size,
/// read-only (decision 0016), on the CPU.
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
            fn extent(&self) -> Extent {
                Extent::from_start(std::mem::size_of_val::<[T]>(self))
            }
            /// Read-only: the slice is reached through `&self` (Rust's aliasing rules forbid
            /// writes through it while `&self` code may read it).
            #[inline]
            fn writability(&self) -> Writability {
                Writability::ReadOnly
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
