//! Rules built on the spec's dtype table ([`crate::spec::dtypes`]): which dtypes dlbind can
//! describe, their element size, and their name in messages.

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
/// value is built): for hot paths that build the error only after a `None`.
#[inline(always)]
pub(crate) fn valid_elem_size(dtype: DLDataType) -> Option<ElemSize> {
    check_dtype(dtype).ok()
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
