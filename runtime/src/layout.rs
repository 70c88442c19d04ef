//! Layout rules, written once and used by the copy kernels, the GPU planner, export, import,
//! the bridges and the demo: C-contiguous strides, contiguity, the bytes a shape and strides
//! address, element sizes, and the strided-to-contiguous host copy.
//!
//! Strides are in elements (DLPack's convention), any sign. Overflowing products saturate in
//! [`c_strides_into`] (such a shape is refused by [`contiguous_nbytes`] and the export-side span check
//! long before its strides are used) and are refused everywhere else.

pub use crate::copy::{CopyError, ElemSize, contiguous_nbytes, copy_to_contiguous};
pub use crate::dtype::{itemsize, validate_dtype};
pub use crate::extent::{Extent, Reach, ReachError, reach};

use crate::error::DlpackError;
use crate::ffi::DLDataType;
use crate::spec::errors::FailureKind;

/// Writes C-contiguous element strides for `shape` into `out` (same length): the last axis 1,
/// each earlier one the product of the later dimensions (a dimension of 0 counts as 1, so an
/// empty tensor still gets distinct strides). Products that overflow saturate at `i64::MAX`.
#[inline]
pub fn c_strides_into(shape: &[i64], out: &mut [i64]) {
    let mut acc: i64 = 1;
    for (o, &d) in out.iter_mut().zip(shape).rev() {
        *o = acc;
        acc = acc.saturating_mul(d.max(1));
    }
}

/// [`c_strides_into`] as a new vector.
#[inline]
pub fn c_strides(shape: &[i64]) -> Vec<i64> {
    let mut out = vec![0; shape.len()];
    c_strides_into(shape, &mut out);
    out
}

/// Whether `strides` (in elements) describe a C-contiguous layout of `shape`. Strides of
/// size-1 dims are ignored; zero-size arrays are contiguous. Mismatched lengths, negative dims
/// or a stride product that overflows: false.
pub fn is_c_contiguous(shape: &[i64], strides: &[i64]) -> bool {
    if shape.len() != strides.len() || shape.iter().any(|&d| d < 0) {
        return false;
    }
    if shape.contains(&0) {
        return true;
    }
    let mut expected: i64 = 1;
    for (&d, &s) in shape.iter().zip(strides).rev() {
        if d == 1 {
            continue;
        }
        if s != expected {
            return false;
        }
        expected = match expected.checked_mul(d) {
            Some(e) => e,
            // Only reachable for the outermost non-trivial dim of an absurd shape; any further
            // dim would need a stride that cannot be expressed. Be conservative.
            None => return false,
        };
    }
    true
}

/// Checks what an export is about to hand out: the dtype is one dlbind can describe (the
/// spec's rules, as on import: a known code, the bits it requires, `lanes == 1`; a constant
/// dtype folds this away), and the bytes `shape` and `strides` (in elements) address at that
/// width ([`reach`]) lie inside `extent`, what the storage vouches for (`None`: a hand-written
/// `unsafe impl DLPackSource` that vouches itself; not checked). An empty tensor addresses
/// nothing. Inlined into each export (its call and argument moves were a fifth of its cost).
#[inline(always)]
pub(crate) fn check_data_span(
    shape: &[i64],
    strides: &[i64],
    dtype: DLDataType,
    extent: Option<Extent>,
) -> Result<(), DlpackError> {
    check_dtype_only(dtype)?;
    let Some(extent) = extent else {
        return Ok(());
    };
    let elem = crate::dtype::elem_size_of_valid(dtype);
    match reach(shape, Some(strides), elem) {
        Ok(r) if extent.covers(r) => Ok(()),
        _ => Err(span_error(shape, strides, extent)),
    }
}

/// [`check_data_span`]'s dtype half alone: for a source whose layout is trusted
/// (`dlpack_layout_trusted`), which still may not describe a dtype dlbind cannot.
#[inline(always)]
pub(crate) fn check_dtype_only(dtype: DLDataType) -> Result<(), DlpackError> {
    if crate::dtype::is_valid(dtype) {
        Ok(())
    } else {
        Err(bad_export_dtype(dtype))
    }
}

#[cold]
#[inline(never)]
fn bad_export_dtype(dtype: DLDataType) -> DlpackError {
    match crate::dtype::validate_dtype(dtype) {
        Err(e) => DlpackError::new(e.kind(), format!("cannot export: {}", e.message())),
        Ok(_) => unreachable!("called for an invalid dtype"),
    }
}

#[cold]
#[inline(never)]
fn span_error(shape: &[i64], strides: &[i64], extent: Extent) -> DlpackError {
    let Extent { below, above } = extent;
    DlpackError::new(
        FailureKind::MalformedTensor,
        format!(
            "shape {shape:?} with strides {strides:?} addresses memory outside what the data field's storage holds \
             ({below} bytes before element 0, {above} from it on): fix the array's shape, strides or data"
        ),
    )
}

#[cfg(test)]
mod tests {
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
            check_data_span(shape, strides, dt, Some(Extent::from_start(n))).is_ok()
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
        // Negative strides fit storage that vouches for bytes below element 0.
        let below = |shape: &[i64], strides: &[i64], b, a| {
            check_data_span(shape, strides, F32, Some(Extent::new(b, a))).is_ok()
        };
        assert!(below(&[3], &[-1], 8, 4));
        assert!(!below(&[3], &[-1], 7, 4), "one byte short below");
        assert!(!below(&[3], &[-1], 8, 3), "element 0 itself must fit");
        // `None` is only what a hand-written `unsafe impl DLPackSource` reports: it vouches for
        // its layout itself (a derived type always reports its storage's extent).
        assert!(check_data_span(&[1 << 40], &[1], F32, None).is_ok());
        for bad in [
            DLDataType { lanes: 0, ..F32 },
            DLDataType { bits: 0, ..F32 },
            DLDataType { code: 200, ..F32 },
            DLDataType { bits: 8, ..FP4 },
        ] {
            let e =
                check_data_span(&[4], &[1], bad, Some(Extent::from_start(1 << 20))).unwrap_err();
            assert_eq!(e.kind(), FailureKind::UnsupportedDtype, "{bad:?}");
            let e = check_data_span(&[4], &[1], bad, None).unwrap_err();
            assert_eq!(
                e.kind(),
                FailureKind::UnsupportedDtype,
                "unknown extent too: {bad:?}"
            );
        }
        let e = check_data_span(&[2, 2], &[2, 1], F32, Some(Extent::from_start(8))).unwrap_err();
        assert_eq!(e.kind(), FailureKind::MalformedTensor);
        assert!(e.message().contains("8 from it on"), "{}", e.message());
    }
}
