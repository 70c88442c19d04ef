//! Validation of a producer's `DLTensor` before ownership is taken: [`validate_dltensor`]
//! accepts in registers on the common path and names the offending field otherwise.

use crate::copy::ElemSize;
use crate::dtype::validate_dtype;
use crate::error::DlpackError;
use crate::spec::errors::FailureKind;
use crate::ffi::DLTensor;

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
/// # Safety
/// If `0 < t.ndim <= MAX_NDIM` and `t.shape` is non-NULL, it points to `ndim` readable `i64`;
/// the same for `t.strides` when non-NULL.
#[inline]
pub unsafe fn validate_dltensor(t: &DLTensor) -> Result<(), DlpackError> {
    // Accept in registers (no error value built) when every rule holds; otherwise the exact
    // path decides and names the field.
    if let Some(elem) = crate::dtype::valid_elem_size(t.dtype)
        && t.device.device_type.name().is_some()
        && t.device.device_id >= 0
        // SAFETY: caller contract.
        && unsafe { layout_is_valid_fast(t, elem) }
    {
        return Ok(());
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
unsafe fn validate_dltensor_exact(t: &DLTensor) -> Result<(), DlpackError> {
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
pub unsafe fn validate_layout(t: &DLTensor, elem: ElemSize) -> Result<(), DlpackError> {
    // SAFETY: caller contract.
    if unsafe { layout_is_valid_fast(t, elem) } {
        return Ok(());
    }
    // SAFETY: caller contract.
    unsafe { validate_layout_exact(t, elem) }
}

/// `true` when [`validate_layout_exact`] would accept `t`, decided without building any error
/// (registers only, checked 64-bit arithmetic); `false` when it might not (the exact path then
/// decides and names the field).
///
/// # Safety
/// As for [`validate_dltensor`].
#[inline]
unsafe fn layout_is_valid_fast(t: &DLTensor, elem: ElemSize) -> bool {
    let bits = match elem {
        ElemSize::Bytes(b) => 8 * b as u64,
        ElemSize::SubByte { bits } => bits as u64,
    };
    if !(0..=MAX_NDIM).contains(&t.ndim) || (t.ndim > 0 && t.shape.is_null()) {
        return false;
    }
    // SAFETY: ndim in range, shape non-NULL when ndim > 0 (caller contract).
    let shape = unsafe { dims(t.shape, t.ndim as usize) };
    let mut numel: i64 = 1;
    let mut empty = false;
    for &d in shape {
        if d < 0 {
            return false;
        }
        if d == 0 {
            empty = true;
        } else if let Some(n) = numel.checked_mul(d) {
            numel = n;
        } else {
            return false;
        }
    }
    if empty {
        return true;
    }
    // SAFETY: as above; strides, when non-NULL, holds ndim values.
    !t.data.is_null() && unsafe { extent_fits_u64(t, shape, numel, bits) } == Some(true)
}

/// [`validate_layout`] computed exactly (i128 where 64 bits overflow), naming the field of the
/// first problem.
///
/// # Safety
/// As for [`validate_dltensor`].
#[cold]
#[inline(never)]
unsafe fn validate_layout_exact(t: &DLTensor, elem: ElemSize) -> Result<(), DlpackError> {
    let bits: i128 = match elem {
        ElemSize::Bytes(b) => 8 * b as i128,
        ElemSize::SubByte { bits } => bits as i128,
    };
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
        return Ok(());
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
    // Lowest and highest element offsets, in elements. One dim's reach fits in i128
    // (|(d - 1) * s| < 2^126); the sums are capped: past `LIMIT` elements the span exceeds
    // isize::MAX bytes whatever the element size (>= 1 bit), so the arithmetic below stays small.
    const LIMIT: i128 = 8 * isize::MAX as i128 + 8;
    let too_big = |field: &str| {
        malformed(format!(
            "DLTensor.{field}: the tensor spans more than isize::MAX bytes"
        ))
    };
    let (mut lo, mut hi) = (0i128, 0i128);
    let field = if t.strides.is_null() {
        hi = numel as i128 - 1;
        "shape"
    } else {
        // SAFETY: ndim is in range and strides is non-NULL (caller contract).
        let strides = unsafe { dims(t.strides, ndim) };
        for (&d, &s) in shape.iter().zip(strides) {
            let reach = (d as i128 - 1) * s as i128;
            if reach < 0 {
                lo += reach
            } else {
                hi += reach
            }
            if hi > LIMIT || lo < -LIMIT {
                return Err(too_big("strides"));
            }
        }
        "strides"
    };
    // `>> 3` is floor division by 8 (arithmetic shift), without i128 division calls.
    let span = ((hi - lo + 1) * bits + 7) >> 3;
    if span > isize::MAX as i128 {
        return Err(malformed(format!(
            "DLTensor.{field}: the tensor spans {span} bytes (more than isize::MAX)"
        )));
    }
    let low = base + ((lo * bits) >> 3);
    let high = base + (((hi + 1) * bits + 7) >> 3) - 1;
    if low < 0 || high > usize::MAX as i128 {
        return Err(malformed(format!(
            "DLTensor.{field}: the elements' addresses wrap the address space (data {:p}, byte_offset {})",
            t.data, t.byte_offset
        )));
    }
    Ok(())
}

/// The fast path of [`validate_dltensor`]'s extent check: `Some(true)` when the elements of a
/// tensor with `numel > 0` elements of `bits` bits, at `data + byte_offset` (known not to wrap),
/// span at most `isize::MAX` bytes and stay inside the address space; `None` when a 64-bit
/// intermediate overflows or the range does not fit (the caller then decides exactly).
///
/// # Safety
/// As for [`validate_dltensor`], with `ndim` already checked.
#[inline]
unsafe fn extent_fits_u64(t: &DLTensor, shape: &[i64], numel: i64, bits: u64) -> Option<bool> {
    let (mut lo, mut hi) = (0i64, 0i64);
    if t.strides.is_null() {
        hi = numel - 1;
    } else {
        // SAFETY: caller contract (ndim in range, strides non-NULL).
        let strides = unsafe { dims(t.strides, shape.len()) };
        for (&d, &s) in shape.iter().zip(strides) {
            let reach = (d - 1).checked_mul(s)?;
            if reach < 0 {
                lo = lo.checked_add(reach)?
            } else {
                hi = hi.checked_add(reach)?
            }
        }
    }
    let bits = bits as i64;
    // Bytes from the lowest to the highest element (ceil), and the two end addresses.
    let span = hi
        .checked_sub(lo)?
        .checked_add(1)?
        .checked_mul(bits)?
        .checked_add(7)?
        >> 3;
    let below = (lo.checked_mul(bits)? >> 3).unsigned_abs(); // floor(lo * bits / 8) <= 0
    let above = ((hi.checked_add(1)?.checked_mul(bits)?.checked_add(7)? >> 3) - 1) as u64;
    let base = (t.data as u64).checked_add(t.byte_offset)?;
    let fits = span <= isize::MAX as i64
        && base.checked_sub(below).is_some()
        && base.checked_add(above).is_some();
    fits.then_some(true)
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
