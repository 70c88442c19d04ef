//! Validation of a producer's `DLTensor` before ownership is taken: [`validate_dltensor`]
//! accepts in registers on the common path and names the offending field otherwise.

use crate::copy::ElemSize;
use crate::dtype::validate_dtype;
use crate::error::DlpackError;
use crate::extent::{Extent, reach};
use crate::ffi::DLTensor;
use crate::spec::errors::FailureKind;

/// The most dimensions an imported tensor may have (numpy 2's `NPY_MAXDIMS`). DLPack itself sets
/// no limit; this is dlbind's guard against garbage `ndim` values.
pub const MAX_NDIM: i32 = 64;

fn malformed(msg: String) -> DlpackError {
    DlpackError::new(FailureKind::MalformedTensor, msg)
}

/// Checks a producer's `DLTensor` before ownership is taken: every way the description can be
/// inconsistent or unaddressable gives an error whose message starts with the field's name
/// (`DLTensor.ndim: …`). The rules, in the order they are checked:
///
/// - `dtype`: [`validate_dtype`] ([`FailureKind::UnsupportedDtype`]);
/// - `device`: a device type the spec does not know, or a negative `device_id`;
/// - `ndim`: negative or above [`MAX_NDIM`];
/// - `shape`: NULL with `ndim > 0`, a negative dimension, an element count that overflows
///   `i64` (zero-size arrays included: the other dims must still multiply), or, with NULL
///   strides, a C-contiguous byte size above `isize::MAX`;
/// - `data`: NULL while the tensor has elements;
/// - `byte_offset`: `data + byte_offset` wraps the address space (tensors with elements);
/// - `strides`: the byte span from the lowest to the highest addressed element exceeds
///   `isize::MAX`, or that range wraps the address space (tensors with elements; with NULL
///   strides the same two checks apply to the C-contiguous layout and name `shape`).
///
/// Everything but `dtype` is [`FailureKind::MalformedTensor`]. `data` is never read.
///
/// Returns the bytes the description addresses around element 0 (what a handle on it vouches
/// for on export; `Extent::EMPTY` for a tensor without elements).
///
/// # Safety
/// If `0 < t.ndim <= MAX_NDIM` and `t.shape` is non-NULL, it points to `ndim` readable `i64`;
/// the same for `t.strides` when non-NULL.
#[inline]
pub unsafe fn validate_dltensor(t: &DLTensor) -> Result<Extent, DlpackError> {
    // Accept in registers (no error value built) when every rule holds; otherwise the exact
    // path decides and names the field.
    if let Some(elem) = crate::dtype::valid_elem_size(t.dtype)
        && t.device.device_type.name().is_some()
        && t.device.device_id >= 0
        // SAFETY: caller contract.
        && let Some(extent) = unsafe { layout_is_valid_fast(t, elem) }
    {
        return Ok(extent);
    }
    // SAFETY: caller contract.
    unsafe { validate_dltensor_exact(t) }
}

/// [`validate_dltensor`] with the error of the first broken rule.
///
/// # Safety
/// As for [`validate_dltensor`].
#[cold]
#[inline(never)]
unsafe fn validate_dltensor_exact(t: &DLTensor) -> Result<Extent, DlpackError> {
    let elem = validate_dtype(t.dtype)
        .map_err(|e| DlpackError::new(e.kind(), format!("DLTensor.dtype: {}", e.message())))?;
    if t.device.device_type.name().is_none() {
        return Err(malformed(format!(
            "DLTensor.device: unknown device type {}",
            t.device.device_type.0
        )));
    }
    if t.device.device_id < 0 {
        return Err(malformed(format!(
            "DLTensor.device: negative device_id {}",
            t.device.device_id
        )));
    }
    // SAFETY: caller contract.
    unsafe { validate_layout(t, elem) }
}

/// The layout part of [`validate_dltensor`] (`ndim`, `shape`, `data`, `byte_offset`,
/// `strides`), for a tensor whose dtype (of element size `elem`) and device are known valid.
///
/// # Safety
/// As for [`validate_dltensor`].
#[inline]
pub unsafe fn validate_layout(t: &DLTensor, elem: ElemSize) -> Result<Extent, DlpackError> {
    // SAFETY: caller contract.
    if let Some(extent) = unsafe { layout_is_valid_fast(t, elem) } {
        return Ok(extent);
    }
    // SAFETY: caller contract.
    unsafe { validate_layout_exact(t, elem) }
}

/// The extent the description addresses around element 0 when [`validate_layout_exact`] would
/// accept `t`, decided without building any error (registers only, checked 64-bit arithmetic);
/// `None` when it might not (the exact path then decides and names the field).
///
/// # Safety
/// As for [`validate_dltensor`].
#[inline]
unsafe fn layout_is_valid_fast(t: &DLTensor, elem: ElemSize) -> Option<Extent> {
    if !(0..=MAX_NDIM).contains(&t.ndim) || (t.ndim > 0 && t.shape.is_null()) {
        return None;
    }
    // SAFETY: ndim in range, shape non-NULL when ndim > 0 (caller contract).
    let shape = unsafe { dims(t.shape, t.ndim as usize) };
    let mut numel: i64 = 1;
    let mut empty = false;
    for &d in shape {
        if d < 0 {
            return None;
        }
        if d == 0 {
            empty = true;
        } else {
            numel = numel.checked_mul(d)?;
        }
    }
    if empty {
        return Some(Extent::EMPTY);
    }
    if t.data.is_null() {
        return None;
    }
    // SAFETY: as above; strides, when non-NULL, holds ndim values.
    unsafe { extent_fits_u64(t, shape, elem) }
}

/// [`validate_layout`] computed exactly, naming the field of the first problem.
///
/// # Safety
/// As for [`validate_dltensor`].
#[cold]
#[inline(never)]
unsafe fn validate_layout_exact(t: &DLTensor, elem: ElemSize) -> Result<Extent, DlpackError> {
    if !(0..=MAX_NDIM).contains(&t.ndim) {
        return Err(malformed(format!(
            "DLTensor.ndim: {} is outside 0..={MAX_NDIM}",
            t.ndim
        )));
    }
    let ndim = t.ndim as usize;
    if ndim > 0 && t.shape.is_null() {
        return Err(malformed(format!(
            "DLTensor.shape: NULL with ndim = {ndim}"
        )));
    }
    // SAFETY: ndim is in range and shape is non-NULL when ndim > 0 (caller contract).
    let shape = unsafe { dims(t.shape, ndim) };
    let mut numel: i64 = 1;
    let mut empty = false;
    for (i, &d) in shape.iter().enumerate() {
        if d < 0 {
            return Err(malformed(format!(
                "DLTensor.shape: dimension {i} is negative ({d}) in {shape:?}"
            )));
        }
        if d == 0 {
            empty = true;
        } else {
            numel = numel.checked_mul(d).ok_or_else(|| {
                malformed(format!(
                    "DLTensor.shape: element count of {shape:?} overflows i64"
                ))
            })?;
        }
    }
    if empty {
        // Nothing is ever addressed: data, byte_offset and strides are not looked at.
        return Ok(Extent::EMPTY);
    }
    if t.data.is_null() {
        return Err(malformed(format!(
            "DLTensor.data: NULL for a tensor of {numel} elements"
        )));
    }
    let base = t.data as usize as i128 + t.byte_offset as i128;
    if base > usize::MAX as i128 {
        return Err(malformed(format!(
            "DLTensor.byte_offset: data {:p} + byte_offset {} overflows the address space",
            t.data, t.byte_offset
        )));
    }
    let too_big = |field: &str| {
        malformed(format!(
            "DLTensor.{field}: the tensor spans more than isize::MAX bytes"
        ))
    };
    let (field, strides) = if t.strides.is_null() {
        ("shape", None)
    } else {
        // SAFETY: ndim is in range and strides is non-NULL (caller contract).
        ("strides", Some(unsafe { dims(t.strides, ndim) }))
    };
    // The one extent computation; an overflow of its i64 element positions or u64 bytes is a
    // span past isize::MAX bytes whatever the element size.
    let r = reach(shape, strides, elem).map_err(|_| too_big(field))?;
    let span = r.span().ok_or_else(|| too_big(field))?;
    if span > isize::MAX as u64 {
        return Err(malformed(format!(
            "DLTensor.{field}: the tensor spans {span} bytes (more than isize::MAX)"
        )));
    }
    let low = base - i128::from(r.below);
    let high = base + i128::from(r.above) - 1;
    if low < 0 || high > usize::MAX as i128 {
        return Err(malformed(format!(
            "DLTensor.{field}: the elements' addresses wrap the address space (data {:p}, byte_offset {})",
            t.data, t.byte_offset
        )));
    }
    // Below isize::MAX bytes in all: both fit usize.
    Ok(Extent::new(r.below as usize, r.above as usize))
}

/// The fast path of [`validate_dltensor`]'s extent check: the extent when the elements of a
/// non-empty tensor at `data + byte_offset` span at most `isize::MAX` bytes and stay inside the
/// address space ([`reach`], the one extent computation); `None` when they might not (the
/// caller then decides exactly and names the field).
///
/// # Safety
/// As for [`validate_dltensor`], with `ndim` already checked.
#[inline]
unsafe fn extent_fits_u64(t: &DLTensor, shape: &[i64], elem: ElemSize) -> Option<Extent> {
    let strides = if t.strides.is_null() {
        None
    } else {
        // SAFETY: caller contract (ndim in range, strides non-NULL).
        Some(unsafe { dims(t.strides, shape.len()) })
    };
    let r = reach(shape, strides, elem).ok()?;
    let base = (t.data as u64).checked_add(t.byte_offset)?;
    let fits = r.span()? <= isize::MAX as u64
        && base.checked_sub(r.below).is_some()
        && base.checked_add(r.above.checked_sub(1)?).is_some();
    // Below isize::MAX bytes in all: both fit usize.
    fits.then_some(Extent::new(r.below as usize, r.above as usize))
}

/// # Safety
/// `p` points to `n` readable i64 or `n == 0`.
#[inline]
pub(super) unsafe fn dims<'a>(p: *const i64, n: usize) -> &'a [i64] {
    if n == 0 {
        &[]
    } else {
        // SAFETY: caller contract.
        unsafe { std::slice::from_raw_parts(p, n) }
    }
}
