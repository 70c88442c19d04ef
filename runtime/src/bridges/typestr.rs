//! numpy typestr and PEP 3118 format ↔ `DLDataType`, through the spec's generated dtype table
//! (`numpy_typestr` and `buffer_format` columns). The only logic here is byte-order
//! normalisation and resolving the platform-sized struct codes (`l`, `L`, `n`, `N`) to the
//! fixed-size codes the table uses.

use std::ffi::{c_long, c_ulong};

use crate::spec::dtypes::{DTypeInfo, dtype_by_buffer_format, dtype_by_dl, dtype_by_typestr};
use crate::dtype::{
    describe, itemsize,
};
use crate::error::DlpackError;
use crate::spec::errors::FailureKind;
use crate::ffi::{DLDataType, DLDataTypeCode};

/// The byte-order character of native data in a typestr.
const NATIVE: char = if cfg!(target_endian = "little") {
    '<'
} else {
    '>'
};
/// The byte-order character of non-native data in a typestr.
const FOREIGN: char = if cfg!(target_endian = "little") {
    '>'
} else {
    '<'
};

fn row(dtype: DLDataType) -> Result<&'static DTypeInfo, DlpackError> {
    dtype_by_dl(dtype).ok_or_else(|| {
        DlpackError::new(
            FailureKind::UnsupportedDtype,
            format!("dtype {} is not in the spec's dtype table", describe(dtype)),
        )
    })
}

/// The numpy typestr of `dtype` (e.g. `"<f4"`), or `UnsupportedDtype` where numpy has none
/// (bfloat16, float8, ...).
pub fn typestr_of(dtype: DLDataType) -> Result<&'static str, DlpackError> {
    let r = row(dtype)?;
    r.numpy_typestr.ok_or_else(|| {
        DlpackError::new(
            FailureKind::UnsupportedDtype,
            format!("dtype {} has no numpy typestr in the spec", r.name),
        )
    })
}

/// The PEP 3118 format of `dtype` (e.g. `"f"`), or `UnsupportedDtype` where there is none.
pub fn buffer_format_of(dtype: DLDataType) -> Result<&'static str, DlpackError> {
    let r = row(dtype)?;
    r.buffer_format.ok_or_else(|| {
        DlpackError::new(
            FailureKind::UnsupportedDtype,
            format!("dtype {} has no PEP 3118 buffer format in the spec", r.name),
        )
    })
}

/// Parses a numpy typestr (`"<f4"`, `"=i8"`, `"|b1"`, `"|u1"`). `=` means native; one-byte
/// types are accepted with any byte-order character; non-native multi-byte data →
/// `UnsupportedDtype` (BufferError).
pub fn dtype_from_typestr(s: &str) -> Result<DLDataType, DlpackError> {
    let bad = || {
        DlpackError::new(
            FailureKind::UnsupportedDtype,
            format!("unsupported typestr {s:?}"),
        )
    };
    let mut chars = s.chars();
    let order = chars.next().ok_or_else(bad)?;
    let rest = chars.as_str();
    if !matches!(order, '<' | '>' | '|' | '=') || rest.is_empty() {
        return Err(bad());
    }
    let order = if order == '=' { NATIVE } else { order };
    // One-byte types are written with '|' in the table.
    if let Some(info) = dtype_by_typestr(&format!("|{rest}")) {
        return Ok(info.dtype);
    }
    if order == FOREIGN {
        return Err(DlpackError::new(
            FailureKind::UnsupportedDtype,
            format!(
                "typestr {s:?}: non-native byte order is not supported (zero-copy import needs native data)"
            ),
        ));
    }
    let native = format!("{NATIVE}{rest}");
    dtype_by_typestr(&native).map(|i| i.dtype).ok_or_else(bad)
}

/// Parses a PEP 3118 format of one element (`"f"`, `"<d"`, `"@l"`, `"Zf"`; empty, as for a NULL
/// format, → unsigned bytes).
/// Platform-sized codes are resolved by size to the table's fixed-size codes. `itemsize` is
/// the exporter's; it must match the dtype's width.
pub fn dtype_from_buffer_format(
    fmt: &str,
    itemsize_given: usize,
) -> Result<DLDataType, DlpackError> {
    let bad = || {
        DlpackError::new(
            FailureKind::UnsupportedDtype,
            format!("unsupported buffer format {fmt:?}"),
        )
    };
    let (order, code) = match fmt.chars().next() {
        Some(c @ ('@' | '=' | '<' | '>' | '!')) => (c, &fmt[1..]),
        Some(_) => ('@', fmt),
        None => ('@', ""),
    };
    let little = cfg!(target_endian = "little");
    let foreign = match order {
        '<' => !little,
        '>' | '!' => little,
        _ => false,
    };
    // Platform-sized codes: the table's integer row of that width (the spec's own letter for it).
    let sized = |signed: bool, size: usize| -> Option<&'static DTypeInfo> {
        let code = if signed {
            DLDataTypeCode::kDLInt
        } else {
            DLDataTypeCode::kDLUInt
        };
        dtype_by_dl(DLDataType {
            code: code.0,
            bits: u8::try_from(8 * size).ok()?,
            lanes: 1,
        })
    };
    let info = match code {
        // No format at all: unsigned bytes (PEP 3118). A lone byte-order character is not one.
        "" if fmt.is_empty() => sized(false, 1),
        "l" => sized(true, std::mem::size_of::<c_long>()),
        "L" => sized(false, std::mem::size_of::<c_ulong>()),
        "n" => sized(true, std::mem::size_of::<isize>()),
        "N" => sized(false, std::mem::size_of::<usize>()),
        c => dtype_by_buffer_format(c),
    }
    .ok_or_else(bad)?;
    let width = itemsize(info.dtype).ok_or_else(bad)?;
    if foreign && width > 1 {
        return Err(DlpackError::new(
            FailureKind::UnsupportedDtype,
            format!(
                "buffer format {fmt:?}: non-native byte order is not supported (zero-copy import needs native data)"
            ),
        ));
    }
    if width != itemsize_given {
        return Err(DlpackError::new(
            FailureKind::UnsupportedDtype,
            format!(
                "buffer format {fmt:?} has itemsize {width}, but the exporter says {itemsize_given}"
            ),
        ));
    }
    Ok(info.dtype)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::dtypes::{DTYPES, dtype_by_name};

    #[test]
    fn every_table_typestr_round_trips() {
        for d in DTYPES {
            if let Some(ts) = d.numpy_typestr {
                assert_eq!(typestr_of(d.dtype).unwrap(), ts);
                assert_eq!(dtype_from_typestr(ts).unwrap(), d.dtype, "{ts}");
            } else {
                assert_eq!(
                    typestr_of(d.dtype).unwrap_err().kind(),
                    FailureKind::UnsupportedDtype
                );
            }
            if let (Some(f), Some(sz)) = (d.buffer_format, itemsize(d.dtype)) {
                assert_eq!(buffer_format_of(d.dtype).unwrap(), f);
                assert_eq!(dtype_from_buffer_format(f, sz).unwrap(), d.dtype, "{f}");
            }
        }
    }

    #[test]
    fn byte_order_normalisation() {
        let f4 = dtype_by_name("float32").unwrap().dtype;
        let u1 = dtype_by_name("uint8").unwrap().dtype;
        assert_eq!(dtype_from_typestr("=f4").unwrap(), f4);
        assert_eq!(dtype_from_typestr("<u1").unwrap(), u1);
        assert_eq!(dtype_from_typestr(">u1").unwrap(), u1);
        assert_eq!(
            dtype_from_typestr(">f4").unwrap_err().kind(),
            FailureKind::UnsupportedDtype
        );
        assert!(dtype_from_typestr("<V8").is_err());
        assert!(dtype_from_typestr("").is_err());
        assert_eq!(dtype_from_buffer_format("<f", 4).unwrap(), f4);
        assert_eq!(dtype_from_buffer_format("=f", 4).unwrap(), f4);
        assert_eq!(dtype_from_buffer_format("", 1).unwrap(), u1);
        assert_eq!(dtype_from_buffer_format(">B", 1).unwrap(), u1);
        assert!(dtype_from_buffer_format(">f", 4).is_err());
        assert!(dtype_from_buffer_format("!d", 8).is_err());
        assert!(dtype_from_buffer_format("f", 8).is_err());
        assert!(dtype_from_buffer_format("T{f:x:}", 4).is_err());
        let i64_ = dtype_by_name("int64").unwrap().dtype;
        if std::mem::size_of::<c_long>() == 8 {
            assert_eq!(dtype_from_buffer_format("l", 8).unwrap(), i64_);
        }
        assert_eq!(
            dtype_from_buffer_format("n", std::mem::size_of::<isize>())
                .unwrap()
                .bits as usize,
            8 * std::mem::size_of::<isize>()
        );
        let u = dtype_from_buffer_format("L", std::mem::size_of::<c_ulong>()).unwrap();
        assert_eq!(
            (u.code, u.bits as usize),
            (
                DLDataTypeCode::kDLUInt.0,
                8 * std::mem::size_of::<c_ulong>()
            )
        );
        let u = dtype_from_buffer_format("@N", std::mem::size_of::<usize>()).unwrap();
        assert_eq!(
            (u.code, u.bits as usize),
            (DLDataTypeCode::kDLUInt.0, 8 * std::mem::size_of::<usize>())
        );
        assert_eq!(
            dtype_from_buffer_format("l", 1).unwrap_err().kind(),
            FailureKind::UnsupportedDtype
        );
        for lone in ["<", "@", "=", ">", "!"] {
            assert!(
                dtype_from_buffer_format(lone, 1).is_err(),
                "{lone:?} names no type"
            );
        }
    }

    #[test]
    fn no_typestr_for_bfloat16() {
        let bf16 = dtype_by_name("bfloat16").unwrap().dtype;
        let e = typestr_of(bf16).unwrap_err();
        assert!(e.message().contains("bfloat16"), "{}", e.message());
    }
}
