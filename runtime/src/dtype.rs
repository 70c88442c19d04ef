//! Rules built on the spec's dtype table ([`crate::spec::dtypes`]): which dtypes dlbind can
//! describe, their element size, and their name in messages.

use crate::spec::dtypes::{dtype_by_dl, required_bits};

use crate::copy::ElemSize;
use crate::error::DlpackError;
use crate::ffi::{DLDataType, DLDataTypeCode};
use crate::spec::errors::FailureKind;

/// Checks that `dtype` is something dlbind can describe: a code the spec knows, `bits` as the
/// spec's per-code rule demands (FP6 = 6, FP4 = 4, FP8/bool = 8), whole bytes otherwise, and
/// `lanes == 1`. Returns the element size for copies.
#[inline]
pub fn validate_dtype(dtype: DLDataType) -> Result<ElemSize, DlpackError> {
    check_dtype(dtype).map_err(|why| unsupported(dtype, why))
}

/// [`validate_dtype`]'s element size when the dtype is valid, decided in registers (no error
/// value is built): for hot paths that build the error only after a `None`. Every export of a
/// type that does not vouch for its layout runs this (the README's `Frame`). A pure function of
/// the dtype: one load from [`ELEM`], a table the compiler builds from the spec's rules
/// ([`check_dtype`]; a test compares the two on every code, bit width and a few lane counts).
#[inline]
pub(crate) fn valid_elem_size(dtype: DLDataType) -> Option<ElemSize> {
    let e = ELEM[elem_index(dtype)];
    (dtype.lanes == 1 && e != INVALID).then(|| decode(e))
}

/// Whether [`valid_elem_size`] accepts `dtype`: for a caller that needs the element size only
/// on some paths (it then asks [`elem_size_of_valid`]).
#[inline]
pub(crate) fn is_valid(dtype: DLDataType) -> bool {
    dtype.lanes == 1 && ELEM[elem_index(dtype)] != INVALID
}

/// The element size of a dtype [`is_valid`] accepts.
#[inline]
pub(crate) fn elem_size_of_valid(dtype: DLDataType) -> ElemSize {
    decode(ELEM[elem_index(dtype)])
}

/// For every `(code, bits)` with `lanes == 1`, the element size [`check_dtype`] gives, encoded
/// in a byte (see [`decode`]), or [`INVALID`]: 64 KiB, built at compile time.
static ELEM: [u8; 1 << 16] = elem_table();

/// [`ELEM`]'s entry of a refused `(code, bits)`.
const INVALID: u8 = 0;
/// [`ELEM`]: a sub-byte width is stored with this bit set (whole bytes are 1 to 31).
const SUB_BYTE: u8 = 0x80;

#[inline]
fn elem_index(dtype: DLDataType) -> usize {
    (usize::from(dtype.code) << 8) | usize::from(dtype.bits)
}

#[inline]
fn decode(e: u8) -> ElemSize {
    if e & SUB_BYTE == 0 {
        ElemSize::Bytes(usize::from(e))
    } else {
        ElemSize::SubByte {
            bits: u32::from(e & !SUB_BYTE),
        }
    }
}

const fn elem_table() -> [u8; 1 << 16] {
    let mut t = [INVALID; 1 << 16];
    let mut i = 0;
    while i < (1 << 16) {
        let d = DLDataType {
            code: (i >> 8) as u8,
            bits: (i & 0xff) as u8,
            lanes: 1,
        };
        t[i] = match check_dtype(d) {
            Ok(ElemSize::Bytes(n)) => n as u8,
            Ok(ElemSize::SubByte { bits }) => SUB_BYTE | bits as u8,
            Err(_) => INVALID,
        };
        i += 1;
    }
    t
}

/// The rules of [`validate_dtype`], with the reason of a refusal.
#[inline]
const fn check_dtype(dtype: DLDataType) -> Result<ElemSize, DtypeProblem> {
    if dtype.lanes != 1 {
        return Err(DtypeProblem::Lanes);
    }
    let code = DLDataTypeCode(dtype.code);
    if code.name().is_none() || code.0 == DLDataTypeCode::kDLOpaqueHandle.0 {
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

#[inline]
const fn elem_size_of(dtype: DLDataType) -> Result<ElemSize, DtypeProblem> {
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

    /// The table answers as the rules do, for every code, bit width and a few lane counts.
    #[test]
    fn table_check_agrees_with_the_rules() {
        let mut valid = 0;
        // Under Miri, the first four codes (all 256 take 15 minutes there).
        for code in 0..=if cfg!(miri) { 3 } else { u8::MAX } {
            for bits in 0..=u8::MAX {
                for lanes in [0u16, 1, 2, 4, u16::MAX] {
                    let d = DLDataType { code, bits, lanes };
                    let rules = check_dtype(d).ok();
                    assert_eq!(valid_elem_size(d), rules, "{code} {bits} {lanes}");
                    valid += usize::from(rules.is_some());
                }
            }
        }
        // Some dtypes pass (the comparison is not vacuous), and a known one among them.
        assert!(valid > 100, "{valid}");
        let f32 = DLDataType {
            code: DLDataTypeCode::kDLFloat.0,
            bits: 32,
            lanes: 1,
        };
        assert_eq!(valid_elem_size(f32), Some(ElemSize::Bytes(4)));
        let opaque = DLDataType {
            code: DLDataTypeCode::kDLOpaqueHandle.0,
            bits: 64,
            lanes: 1,
        };
        assert_eq!(valid_elem_size(opaque), None);
    }
}
