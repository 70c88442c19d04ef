//! Producer side: the traits a exportable type implements ([`DLPackSource`], [`DataSource`]),
//! negotiation ([`request`]) and the managed tensor + capsule ([`managed`]).

pub mod managed;
pub mod request;

use std::ffi::c_void;
use std::sync::Arc;

pub use managed::{export_to_capsule, export_to_capsule_on, live_exports};
pub use request::{ExportPlan, ExportRequest, SourceInfo, plan_export};

use crate::device::Device;
use crate::element::DLPackElement;
use crate::ffi::DLDataType;

/// A type that can describe itself as one DLPack tensor. `#[derive(DLPackExport)]` implements
/// it; a hand-written impl is fine too.
///
/// # Safety
/// While the value is alive and not mutated, `dlpack_data_ptr()` must point to element 0 of
/// memory that holds every element addressed by the shape and strides filled in (element
/// strides, any sign) at the dtype's width, on `dlpack_device()`. An exported capsule keeps the
/// Python object that owns `self` alive; the implementor must not free or move that memory
/// while exports exist (e.g. by reallocating a `Vec` from a `&mut self` method).
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
    /// Whether consumers must not write (default: writable).
    fn dlpack_readonly(&self) -> bool {
        false
    }
    /// The stream (raw `CUstream` / `hipStream_t`) on which work that writes this tensor may
    /// still be pending, or `None` when nothing is pending (the default; host data). When the
    /// consumer asks for another stream, the export records an event on this one and makes
    /// the consumer's stream wait for it (no device-wide synchronisation).
    fn dlpack_stream(&self) -> Option<crate::gpu::StreamHandle> {
        None
    }
}

/// Storage that can back a `#[dlpack(data)]` field.
///
/// # Safety
/// `data_ptr()` points to the first element of the storage and stays valid while `self` is
/// alive and not mutated; `element_dtype()`, when `Some`, is the dtype of the stored elements.
pub unsafe trait DataSource {
    /// Address of the first element (non-null; dangling-but-aligned when empty).
    fn data_ptr(&self) -> *mut c_void;
    /// The element dtype, or `None` for untyped bytes (the dtype comes from elsewhere).
    fn element_dtype(&self) -> Option<DLDataType>;
}

// SAFETY: a Vec's buffer pointer is valid (dangling and aligned when empty) while the Vec lives
// unmodified; its elements are `T`, whose dtype is `T::DTYPE`.
unsafe impl<T: DLPackElement> DataSource for Vec<T> {
    #[inline]
    fn data_ptr(&self) -> *mut c_void {
        self.as_ptr() as *mut c_void
    }
    #[inline]
    fn element_dtype(&self) -> Option<DLDataType> {
        Some(T::DTYPE)
    }
}

// SAFETY: as for Vec: the boxed slice's pointer is valid while the box lives.
unsafe impl<T: DLPackElement> DataSource for Box<[T]> {
    #[inline]
    fn data_ptr(&self) -> *mut c_void {
        self.as_ptr() as *mut c_void
    }
    #[inline]
    fn element_dtype(&self) -> Option<DLDataType> {
        Some(T::DTYPE)
    }
}

// SAFETY: the Arc'd slice never moves while any Arc to it lives (this one included).
unsafe impl<T: DLPackElement> DataSource for Arc<[T]> {
    #[inline]
    fn data_ptr(&self) -> *mut c_void {
        self.as_ptr() as *mut c_void
    }
    #[inline]
    fn element_dtype(&self) -> Option<DLDataType> {
        Some(T::DTYPE)
    }
}

/// C-contiguous element strides for `shape` (written into `out`, same length).
#[inline]
pub fn c_contiguous_strides(shape: &[i64], out: &mut [i64]) {
    let mut acc: i64 = 1;
    for i in (0..shape.len()).rev() {
        out[i] = acc;
        acc = acc.wrapping_mul(shape[i].max(1));
    }
}
