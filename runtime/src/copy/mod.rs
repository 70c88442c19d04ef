//! Strided N-d → C-contiguous host copies.
//!
//! [`copy_to_contiguous`] normalises the layout (drops size-1 dims, merges dims that are
//! contiguous with each other), then picks a kernel (see [`plan`]):
//!
//! * `PlanKind::Memcpy`: the source is contiguous — one `memcpy` (in 2 MiB chunks on two
//!   threads when large);
//! * `PlanKind::Rows`: the last axis is contiguous — one `memcpy` per row;
//! * `PlanKind::Transpose2D`: the source's smallest stride is on another axis than the last —
//!   a cache-blocked transpose of that axis with the last one (SIMD micro-kernels for 2/4/8-byte
//!   elements when that axis is unit-stride), repeated over the remaining axes;
//! * `PlanKind::Generic`: an odometer over the outer axes with an inner loop specialised by
//!   element width (1/2/4/8/16 bytes, any other width through `memcpy`).
//!
//! Large copies (≥ [`PARALLEL_MIN_BYTES`]) are split into ~2 MiB destination chunks and run on
//! the rayon pool. Strides are in elements and may be negative or zero.
//!
//! Depends on `std`, `libc`, `rayon` and [`crate::layout`] (the contiguity rule) only.

mod kernels;
mod plan;
mod transpose;

#[cfg(test)]
mod tests;

use std::fmt;

#[cfg(any(test, feature = "test-util"))]
pub use plan::{CopyPlan, PlanKind};

/// Copies of at least this many bytes run on the rayon pool (when it has more than one thread).
pub const PARALLEL_MIN_BYTES: usize = 1 << 20;

/// Why a copy (or a size computation) was refused. Nothing is written when an error is returned.
/// Non-exhaustive: new checks may add reasons.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CopyError {
    /// `shape.len() != strides.len()`.
    ShapeStrideMismatch,
    /// A dimension is negative.
    NegativeDim,
    /// The element count, byte size or a byte offset does not fit in `usize`/`isize`.
    Overflow,
    /// Packed sub-byte elements can only be copied from a C-contiguous source.
    SubByteNotContiguous,
    /// The destination holds `have` bytes but the copy needs `need`.
    DestinationTooSmall { need: usize, have: usize },
}

impl fmt::Display for CopyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CopyError::ShapeStrideMismatch => {
                f.write_str("shape and strides have different lengths")
            }
            CopyError::NegativeDim => f.write_str("shape has a negative dimension"),
            CopyError::Overflow => f.write_str("array size or offsets overflow the address space"),
            CopyError::SubByteNotContiguous => f.write_str(
                "packed sub-byte elements can only be copied from a C-contiguous layout",
            ),
            CopyError::DestinationTooSmall { need, have } => {
                write!(f, "destination too small: need {need} bytes, have {have}")
            }
        }
    }
}

impl std::error::Error for CopyError {}

/// Element size description: whole bytes, or packed sub-byte elements (bits < 8, e.g. FP4 = 4,
/// FP6 = 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElemSize {
    Bytes(usize),
    SubByte { bits: u32 },
}

fn numel(shape: &[i64]) -> Result<usize, CopyError> {
    // Negative dims are reported even when another dim is 0.
    if shape.iter().any(|&d| d < 0) {
        return Err(CopyError::NegativeDim);
    }
    let mut n: usize = 1;
    let mut zero = false;
    for &d in shape {
        let d = usize::try_from(d).map_err(|_| CopyError::Overflow)?;
        if d == 0 {
            zero = true;
        } else {
            n = n.checked_mul(d).ok_or(CopyError::Overflow)?;
        }
    }
    // A zero-size array still must have a representable shape (the other dims' product is
    // checked above), and has 0 elements.
    Ok(if zero { 0 } else { n })
}

/// Bytes a C-contiguous array of this shape occupies (sub-byte: `ceil(numel * bits / 8)`).
/// Errors on overflow (the result must also fit in `isize`) and negative dims.
pub fn contiguous_nbytes(shape: &[i64], elem: ElemSize) -> Result<usize, CopyError> {
    let n = numel(shape)?;
    let bytes = match elem {
        ElemSize::Bytes(b) => n.checked_mul(b).ok_or(CopyError::Overflow)?,
        ElemSize::SubByte { bits } => {
            // u128: n * bits cannot overflow, and the byte count is exact.
            let bytes = (n as u128 * bits as u128).div_ceil(8);
            usize::try_from(bytes).map_err(|_| CopyError::Overflow)?
        }
    };
    if bytes > isize::MAX as usize {
        return Err(CopyError::Overflow);
    }
    Ok(bytes)
}

pub use crate::layout::is_c_contiguous;

#[cfg(any(test, feature = "test-util"))]
/// The planner's decision for a copy of this layout (`elem_bytes`-byte elements), as
/// [`copy_to_contiguous`] would run it. Invalid input gives [`PlanKind::Invalid`].
pub fn plan(shape: &[i64], strides: &[i64], elem_bytes: usize) -> CopyPlan {
    match plan::normalize(shape, strides, elem_bytes) {
        Ok(norm) => plan::make_plan(&norm).0,
        Err(_) => CopyPlan {
            kind: PlanKind::Invalid,
            parallel: false,
        },
    }
}

/// Copy an N-d strided array (strides in ELEMENTS, any sign, zero allowed; `src` points at
/// element 0 and may be unaligned) into the C-contiguous destination `dst` (`dst_len` bytes,
/// at least [`contiguous_nbytes`]). Sub-byte elements: only from a C-contiguous source (one
/// `memcpy` of the packed bytes), else [`CopyError::SubByteNotContiguous`].
///
/// All validation happens before anything is written; on error `dst` is untouched.
///
/// # Safety
/// Every element address reachable from `src` with these shape/strides is readable (for the
/// element's full width); `dst` is writable for `dst_len` bytes; source and destination do not
/// overlap. Nothing is read or written when the array has zero elements.
pub unsafe fn copy_to_contiguous(
    src: *const u8,
    shape: &[i64],
    strides: &[i64],
    elem: ElemSize,
    dst: *mut u8,
    dst_len: usize,
) -> Result<(), CopyError> {
    if shape.len() != strides.len() {
        return Err(CopyError::ShapeStrideMismatch);
    }
    let need = contiguous_nbytes(shape, elem)?;
    if dst_len < need {
        return Err(CopyError::DestinationTooSmall {
            need,
            have: dst_len,
        });
    }
    match elem {
        ElemSize::SubByte { .. } => {
            if need == 0 {
                return Ok(());
            }
            if !is_c_contiguous(shape, strides) {
                return Err(CopyError::SubByteNotContiguous);
            }
            // SAFETY: the source is C-contiguous, so its `need` packed bytes starting at `src`
            // are readable (caller contract); dst is writable for dst_len >= need; no overlap.
            unsafe { kernels::memcpy_parallel(src, dst, need) };
            Ok(())
        }
        ElemSize::Bytes(elem_bytes) => {
            let norm = plan::normalize(shape, strides, elem_bytes)?;
            // SAFETY: `norm` describes exactly the caller's element set (validated offsets);
            // dst is writable for `need` bytes which equals the normalised element count times
            // the element size; caller guarantees readability and no overlap.
            unsafe { plan::execute(&norm, src, dst) };
            Ok(())
        }
    }
}
