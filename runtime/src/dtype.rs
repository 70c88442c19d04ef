//! Rules built on the spec's dtype table ([`crate::spec::dtypes`]): which dtypes dlbind can
//! describe, their element size, and their name in messages.

use std::sync::atomic::{AtomicU32, Ordering};

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
/// a new one is checked by the same rules as [`check_dtype`] with the code's rule read from
/// [`BITS_RULE`] (a test compares the two on every code, bit width and a few lane counts).
#[inline(always)]
pub(crate) fn valid_elem_size(dtype: DLDataType) -> Option<ElemSize> {
    is_valid(dtype).then(|| elem_size_of_valid(dtype))
}

/// Whether [`valid_elem_size`] accepts `dtype`: for a caller that needs the element size only
/// on some paths (it then asks [`elem_size_of_valid`]).
#[inline(always)]
pub(crate) fn is_valid(dtype: DLDataType) -> bool {
    packed(dtype) == LAST_VALID.load(Ordering::Relaxed) || is_valid_new(dtype)
}

/// [`is_valid`] for a dtype other than the one seen valid last: checked, and remembered when
/// valid.
#[inline(never)]
fn is_valid_new(dtype: DLDataType) -> bool {
    let valid = checked_by_table(dtype).is_some();
    if valid {
        LAST_VALID.store(packed(dtype), Ordering::Relaxed);
    }
    valid
}

/// The dtype [`valid_elem_size`] saw valid last, as [`packed`] writes it; 0 to start (lanes 0,
/// which no valid dtype has).
static LAST_VALID: AtomicU32 = AtomicU32::new(0);

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

/// [`check_dtype`]'s answer without its reason, with the code's rule read from [`BITS_RULE`].
#[inline(always)]
fn checked_by_table(dtype: DLDataType) -> Option<ElemSize> {
    let rule = BITS_RULE[dtype.code as usize];
    if dtype.lanes != 1 || (rule != ANY_BITS && dtype.bits != rule) {
        return None;
    }
    // A refused code's rule is 0 bits, which `elem_size_of` refuses.
    elem_size_of(dtype).ok()
}

/// [`BITS_RULE`]'s entry for a code that takes any bit width (`elem_size_of`'s rules apply).
const ANY_BITS: u8 = u8::MAX;

/// Per type code, what [`check_dtype`] asks of `bits`: the width the spec requires
/// ([`required_bits`]), [`ANY_BITS`], or 0 for a code it refuses (unknown to the spec, or
/// opaque), a width no dtype may have. Built at compile time from the generated tables.
const BITS_RULE: [u8; 256] = {
    let mut rules = [0u8; 256];
    let mut code = 0;
    while code < 256 {
        let c = DLDataTypeCode(code as u8);
        if c.name().is_some() && c.0 != DLDataTypeCode::kDLOpaqueHandle.0 {
            rules[code] = match required_bits(code as u8) {
                Some(bits) => bits,
                None => ANY_BITS,
            };
        }
        code += 1;
    }
    rules
};

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

    /// The table-driven check answers as the rules do, for every code, bit width and a few lane
    /// counts.
    #[test]
    fn table_check_agrees_with_the_rules() {
        let mut valid = 0;
        for code in 0..=u8::MAX {
            for bits in 0..=u8::MAX {
                for lanes in [0u16, 1, 2, 4, u16::MAX] {
                    let d = DLDataType { code, bits, lanes };
                    let rules = check_dtype(d).ok();
                    assert_eq!(checked_by_table(d), rules, "{code} {bits} {lanes}");
                    // Twice: the first call may remember `d`, the second may answer from that.
                    assert_eq!(valid_elem_size(d), rules, "{code} {bits} {lanes}");
                    assert_eq!(valid_elem_size(d), rules, "{code} {bits} {lanes}");
                    let fast = rules;
                    valid += usize::from(fast.is_some());
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
