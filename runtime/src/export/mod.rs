//! Producer side: the traits a exportable type implements ([`DLPackSource`], [`DataSource`]),
//! negotiation ([`request`]) and the managed tensor + capsule ([`managed`]).

pub mod managed;
pub mod request;

use std::ffi::c_void;
use std::sync::Arc;

pub use managed::{export_to_capsule, export_to_capsule_on, live_exports, spare_blocks_held};
pub use request::{ExportPlan, ExportRequest, SourceInfo, plan_export};

use crate::copy::ElemSize;
use crate::device::Device;
use crate::element::DLPackElement;
use crate::error::DlpackError;
use crate::failure::FailureKind;
use crate::ffi::DLDataType;

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
/// ([`SourceAccess::with_owner`](crate::python::SourceAccess::with_owner)), so a `&mut self`
/// method or setter fails with PyO3's borrow error while an export lives. What remains is
/// mutation through `&self` (interior mutability), which must not move or free the memory, and
/// hand-written exports ([`export_to_capsule`] and friends), which must pass such an owner.
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
    /// ([`check_data_span`]: a MalformedTensor error instead of handing out memory that is not
    /// there). `None` (the default): the shape and strides are trusted, as the safety contract
    /// above requires.
    fn dlpack_data_bytes(&self) -> Option<usize> {
        None
    }
}

/// Checks what an export is about to hand out: the dtype is one dlbind can describe (the
/// spec's rules, as on import: a known code, the bits it requires, `lanes == 1`; a constant
/// dtype folds this away), and the elements `shape` and `strides` (in elements) address, at
/// that width, lie inside `data_bytes` bytes from element 0 (no negative reach; `None` →
/// not checked). An empty tensor addresses nothing. Cheap when it passes (one pass over the
/// dims).
#[inline]
pub fn check_data_span(
    shape: &[i64],
    strides: &[i64],
    dtype: DLDataType,
    data_bytes: Option<usize>,
) -> Result<(), DlpackError> {
    let Some(elem) = crate::dtype_table::valid_elem_size(dtype) else {
        return Err(bad_export_dtype(dtype));
    };
    let Some(avail) = data_bytes else {
        return Ok(());
    };
    // u64 with checked steps (an export runs this on every call): `last` is the highest element
    // index addressed; a negative reach (stride < 0 on a dimension > 1) or an overflow is
    // refused unless the tensor is empty; a negative dimension always is.
    let mut last: u64 = 0;
    let (mut empty, mut negative_dim, mut bad) = (false, false, false);
    for (&d, &s) in shape.iter().zip(strides) {
        if d <= 1 {
            empty |= d == 0;
            negative_dim |= d < 0;
            continue;
        }
        if s < 0 {
            bad = true;
            continue;
        }
        match ((d - 1) as u64)
            .checked_mul(s as u64)
            .and_then(|r| last.checked_add(r))
        {
            Some(v) => last = v,
            None => bad = true,
        }
    }
    if negative_dim {
        return Err(span_error(shape, strides, avail));
    }
    if empty {
        return Ok(());
    }
    // Bytes for elements 0..=last at the validated width (packed when sub-byte).
    let need = last.checked_add(1).and_then(|n| match elem {
        ElemSize::Bytes(b) => n.checked_mul(b as u64),
        ElemSize::SubByte { bits } => n.checked_mul(u64::from(bits)).map(|b| b.div_ceil(8)),
    });
    if bad || need.is_none_or(|n| n > avail as u64) {
        return Err(span_error(shape, strides, avail));
    }
    Ok(())
}

#[cold]
#[inline(never)]
fn bad_export_dtype(dtype: DLDataType) -> DlpackError {
    match crate::dtype_table::validate_dtype(dtype) {
        Err(e) => DlpackError::new(e.kind(), format!("cannot export: {}", e.message())),
        Ok(_) => unreachable!("called for an invalid dtype"),
    }
}

#[cold]
#[inline(never)]
fn span_error(shape: &[i64], strides: &[i64], avail: usize) -> DlpackError {
    DlpackError::new(
        FailureKind::MalformedTensor,
        format!(
            "shape {shape:?} with strides {strides:?} addresses memory outside the {avail} bytes the data field holds \
             (negative reach or past the end): fix the array's shape, strides or data"
        ),
    )
}

/// Opt-out of the export-side span check for a derived type whose constructors already keep
/// every value's shape and strides inside its data: `#[derive(DLPackExport)]` then reports no
/// data extent ([`DLPackSource::dlpack_data_bytes`] = `None`) and exports skip the per-call
/// check (a few ns on the hottest path). The dtype is still checked.
///
/// # Safety
/// For every value of the type that safe code can build, the elements its shape and strides
/// address (at its dtype's width, from `dlpack_data_ptr()`) lie inside memory that stays
/// readable while the value lives. Without this impl the derive checks it on every export.
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

/// C-contiguous element strides for `shape` (written into `out`, same length).
#[inline]
pub fn c_contiguous_strides(shape: &[i64], out: &mut [i64]) {
    let mut acc: i64 = 1;
    for i in (0..shape.len()).rev() {
        out[i] = acc;
        acc = acc.wrapping_mul(shape[i].max(1));
    }
}

#[cfg(test)]
mod span_tests {
    use super::*;

    use crate::ffi::DLDataTypeCode;

    const F32: DLDataType = DLDataType {
        code: DLDataTypeCode::kDLFloat.0,
        bits: 32,
        lanes: 1,
    };
    const FP4: DLDataType = DLDataType {
        code: DLDataTypeCode::kDLFloat4_e2m1fn.0,
        bits: 4,
        lanes: 1,
    };

    #[test]
    fn spans_inside_the_data_pass_and_others_fail() {
        let ok = |shape: &[i64], strides: &[i64], dt, n| {
            check_data_span(shape, strides, dt, Some(n)).is_ok()
        };
        assert!(ok(&[3, 4], &[4, 1], F32, 48));
        assert!(!ok(&[3, 4], &[4, 1], F32, 47), "one byte short");
        assert!(ok(&[4, 3], &[1, 4], F32, 48), "transposed");
        assert!(
            !ok(&[2], &[-1], F32, 1 << 20),
            "negative stride reaches before element 0"
        );
        assert!(ok(&[0, 5], &[7, 1], F32, 0), "empty addresses nothing");
        assert!(
            !ok(&[0, -1], &[1, 1], F32, 1 << 20),
            "a negative dimension is never fine"
        );
        assert!(ok(&[], &[], F32, 4), "0-d: one element");
        assert!(!ok(&[], &[], F32, 3));
        assert!(
            ok(&[5], &[1], FP4, 3),
            "5 packed fp4 elements fit in 3 bytes"
        );
        assert!(!ok(&[5], &[1], FP4, 2));
        assert!(
            !ok(&[1 << 62, 4], &[1 << 62, 1], F32, usize::MAX),
            "no overflow"
        );
        assert!(
            check_data_span(&[1 << 40], &[1], F32, None).is_ok(),
            "unknown extent: trusted"
        );
        for bad in [
            DLDataType { lanes: 0, ..F32 },
            DLDataType { bits: 0, ..F32 },
            DLDataType { code: 200, ..F32 },
            DLDataType { bits: 8, ..FP4 },
        ] {
            let e = check_data_span(&[4], &[1], bad, Some(1 << 20)).unwrap_err();
            assert_eq!(e.kind(), FailureKind::UnsupportedDtype, "{bad:?}");
            let e = check_data_span(&[4], &[1], bad, None).unwrap_err();
            assert_eq!(
                e.kind(),
                FailureKind::UnsupportedDtype,
                "unknown extent too: {bad:?}"
            );
        }
        let e = check_data_span(&[2, 2], &[2, 1], F32, Some(8)).unwrap_err();
        assert_eq!(e.kind(), FailureKind::MalformedTensor);
        assert!(e.message().contains("8 bytes"), "{}", e.message());
    }
}
