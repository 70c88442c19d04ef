//! Rules built on the spec's dtype table ([`crate::spec::dtypes`]): which dtypes dlbind can
//! describe, their element size, and their name in messages.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::spec::dtypes::{dtype_by_dl, required_bits};

use crate::copy::ElemSize;
use crate::error::DlpackError;
use crate::spec::errors::FailureKind;
use crate::ffi::{DLDataType, DLDataTypeCode};

/// Checks that `dtype` is something dlbind can describe: a code the spec knows, `bits` as the
/// spec's per-code rule demands (FP6 = 6, FP4 = 4, FP8/bool = 8), whole bytes otherwise, and
/// `lanes == 1`. Returns the element size for copies.
#[inline]
pub fn validate_dtype(dtype: DLDataType) -> Result<ElemSize, DlpackError> {
    check_dtype(dtype).map_err(|why| unsupported(dtype, why))
}

/// [`validate_dtype`]'s element size when the dtype is valid, decided in registers (no error
/// value is built): for hot paths that build the error only after a `None`. Every export of a
/// type that does not vouch for its layout runs this (the README's `Frame`), with the same
/// dtype call after call: the dtype seen valid last is remembered process-wide ([`LAST_VALID`];
/// a dtype's validity is a function of its value alone, so any value in it is still valid), and
/// a new one is checked by [`check_dtype`] (a test compares the two answers on every code, bit
/// width and a few lane counts).
#[inline(always)]
pub(crate) fn valid_elem_size(dtype: DLDataType) -> Option<ElemSize> {
    is_valid(dtype).then(|| elem_size_of_valid(dtype))
}

/// Whether [`valid_elem_size`] accepts `dtype`: for a caller that needs the element size only
/// on some paths (it then asks [`elem_size_of_valid`]).
#[inline(always)]
pub(crate) fn is_valid(dtype: DLDataType) -> bool {
    u64::from(packed(dtype)) == LAST_VALID.load(Ordering::Relaxed) || is_valid_new(dtype)
}

/// [`is_valid`] for a dtype other than the one seen valid last: checked, and remembered when
/// valid.
#[inline(never)]
fn is_valid_new(dtype: DLDataType) -> bool {
    let valid = check_dtype(dtype).is_ok();
    if valid {
        LAST_VALID.store(u64::from(packed(dtype)), Ordering::Relaxed);
    }
    valid
}

/// The dtype [`valid_elem_size`] saw valid last, as [`packed`] writes it, widened to 64 bits so
/// that its starting value, [`NONE_SEEN`], equals no dtype (every 32-bit pattern is some dtype's,
/// the all-zero one included).
static LAST_VALID: AtomicU64 = AtomicU64::new(NONE_SEEN);

/// [`LAST_VALID`] before any dtype was seen valid: above every widened 32-bit word.
const NONE_SEEN: u64 = u64::MAX;
const _: () = assert!(NONE_SEEN > u32::MAX as u64);

/// The dtype's three fields in one word, for [`LAST_VALID`]: its four bytes as they lie in
/// memory (`repr(C)`: code, bits, lanes), the word the compiler loaded.
#[inline(always)]
const fn packed(dtype: DLDataType) -> u32 {
    let lanes = dtype.lanes.to_ne_bytes();
    u32::from_ne_bytes([dtype.code, dtype.bits, lanes[0], lanes[1]])
}

/// The element size of a dtype [`is_valid`] accepts.
#[inline(always)]
pub(crate) fn elem_size_of_valid(dtype: DLDataType) -> ElemSize {
    // Its bits read off the word [`packed`] compares: the field read on its own made the
    // compiler split the word and put it together again for the comparison (10 instructions).
    let bits = (packed(dtype) >> 8) as u8;
    if bits.is_multiple_of(8) {
        ElemSize::Bytes(usize::from(bits / 8))
    } else {
        ElemSize::SubByte {
            bits: u32::from(bits),
        }
    }
}

/// The rules of [`validate_dtype`], with the reason of a refusal.
#[inline(always)]
fn check_dtype(dtype: DLDataType) -> Result<ElemSize, DtypeProblem> {
    if dtype.lanes != 1 {
        return Err(DtypeProblem::Lanes);
    }
    let code = DLDataTypeCode(dtype.code);
    if code.name().is_none() || code == DLDataTypeCode::kDLOpaqueHandle {
        return Err(DtypeProblem::Code);
    }
    if let Some(bits) = required_bits(dtype.code)
        && dtype.bits != bits
    {
        return Err(DtypeProblem::RequiredBits(bits));
    }
    elem_size_of(dtype)
}

/// Element size of a `lanes == 1` dtype: whole bytes, or packed sub-byte elements.
#[inline]
pub fn elem_size(dtype: DLDataType) -> Result<ElemSize, DlpackError> {
    elem_size_of(dtype).map_err(|why| unsupported(dtype, why))
}

#[inline(always)]
fn elem_size_of(dtype: DLDataType) -> Result<ElemSize, DtypeProblem> {
    let bits = dtype.bits as u32 * dtype.lanes as u32;
    if bits == 0 {
        Err(DtypeProblem::ZeroBits)
    } else if bits.is_multiple_of(8) {
        Ok(ElemSize::Bytes((bits / 8) as usize))
    } else if bits < 8 {
        Ok(ElemSize::SubByte { bits })
    } else {
        Err(DtypeProblem::OddBits)
    }
}

/// Why a dtype is refused (the message of [`unsupported`]).
#[derive(Clone, Copy)]
enum DtypeProblem {
    Lanes,
    Code,
    RequiredBits(u8),
    ZeroBits,
    OddBits,
}

/// The `UnsupportedDtype` error for `dtype` (out of line: imports only pay for the checks).
#[cold]
#[inline(never)]
fn unsupported(dtype: DLDataType, why: DtypeProblem) -> DlpackError {
    let d = describe(dtype);
    let message = match why {
        DtypeProblem::Lanes => format!("unsupported dtype {d}: lanes must be 1"),
        DtypeProblem::Code => format!("unsupported dtype {d}: unknown or opaque type code"),
        DtypeProblem::RequiredBits(bits) => {
            format!("unsupported dtype {d}: this code requires bits == {bits}")
        }
        DtypeProblem::ZeroBits => format!("unsupported dtype {d}: zero bits"),
        DtypeProblem::OddBits => {
            format!("unsupported dtype {d}: bits must be a multiple of 8 or less than 8")
        }
    };
    DlpackError::new(FailureKind::UnsupportedDtype, message)
}

/// Bytes per element for whole-byte dtypes (`None` for sub-byte ones).
pub fn itemsize(dtype: DLDataType) -> Option<usize> {
    match elem_size(dtype) {
        Ok(ElemSize::Bytes(b)) => Some(b),
        _ => None,
    }
}

/// Human-readable description: the table's Python name, else `(code, bits, lanes)`.
pub fn describe(dtype: DLDataType) -> String {
    match dtype_by_dl(dtype) {
        Some(info) => info.name.to_string(),
        None => format!(
            "(code={}, bits={}, lanes={})",
            dtype.code, dtype.bits, dtype.lanes
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The remembered dtype answers as the rules do, for every code, bit width and a few lane
    /// counts.
    #[test]
    fn remembered_check_agrees_with_the_rules() {
        // From the starting state, which the first dtype below (all zeros) must not match. (Other
        // tests running beside this one can only store other valid dtypes.)
        LAST_VALID.store(NONE_SEEN, Ordering::Relaxed);
        let mut valid = 0;
        // Under Miri, the first four codes (all 256 take 15 minutes there).
        for code in 0..=if cfg!(miri) { 3 } else { u8::MAX } {
            for bits in 0..=u8::MAX {
                for lanes in [0u16, 1, 2, 4, u16::MAX] {
                    let d = DLDataType { code, bits, lanes };
                    let rules = check_dtype(d).ok();
                    // Twice: the first call may remember `d`, the second may answer from that.
                    assert_eq!(valid_elem_size(d), rules, "{code} {bits} {lanes}");
                    assert_eq!(valid_elem_size(d), rules, "{code} {bits} {lanes}");
                    valid += usize::from(rules.is_some());
                }
            }
        }
        // Some dtypes pass (the comparison is not vacuous), and a known one among them.
        assert!(valid > 100, "{valid}");
        let f32 = DLDataType { code: DLDataTypeCode::kDLFloat.0, bits: 32, lanes: 1 };
        assert_eq!(valid_elem_size(f32), Some(ElemSize::Bytes(4)));
        let opaque = DLDataType { code: DLDataTypeCode::kDLOpaqueHandle.0, bits: 64, lanes: 1 };
        assert_eq!(valid_elem_size(opaque), None);
    }
}
