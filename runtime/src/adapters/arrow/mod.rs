//! arrow-rs (feature `arrow`): arrow arrays as DLPack tensors and DLPack tensors as arrow
//! arrays, both without a copy.
//!
//! **Export** ([`ArrowTensor`]): a [`PrimitiveArray`] without nulls is a 1-D tensor, a
//! [`FixedSizeListArray`] of primitives (nested lists too) an N-D one, and the canonical
//! `arrow.fixed_shape_tensor` extension type an N-D tensor `(len, *logical_shape)` whose
//! `permutation` becomes strides. The tensor keeps the arrow buffer alive (an `Arc` clone) and
//! is read-only: arrow buffers are shared and immutable, except a [`PrimitiveArray`] given by
//! value whose buffer nothing else holds ([`ArrowTensor::from_primitive`]), exported writable.
//!
//! **Import** ([`to_arrow`], [`to_primitive`], [`to_fixed_shape_tensor`]): the arrow buffer is
//! [`arrow_buffer::Buffer::from_custom_allocation`] over the tensor's memory, with the
//! [`ImportedTensor`] (so the producer) kept alive until the last arrow buffer drops.
//!
//! Nothing is copied silently: nulls (arrow validity bitmaps, which DLPack cannot carry),
//! bit-packed booleans (DLPack `bool` is one byte per element), non-contiguous and misaligned
//! tensors are refused with a typed error unless `copy = true` is asked for. A copy zeroes the
//! elements under nulls (`0`, `0.0`, `false`) and unpacks or packs booleans.
//!
//! Empty arrays and tensors (a 0 in any dimension, list sizes of 0 included) go both ways for
//! every type; a 0-d tensor has no arrow form (`UnsupportedLayout`). No input makes arrow-rs
//! panic: what it would panic on is checked first (an empty buffer is arrow's own, aligned for
//! every type, never a dangling pointer; sizes are checked arithmetic), and a panic that still
//! came out of arrow-rs would be caught and returned as `InternalError`.
//!
//! The parts: `export` ([`ArrowTensor`]: arrays viewed or copied as tensors), `import` (tensors
//! as arrays: [`to_arrow`], [`to_primitive`], [`to_fixed_shape_tensor`]) and `metadata` (the
//! `arrow.fixed_shape_tensor` extension metadata, read and written).
//!
//! [`PrimitiveArray`]: arrow_array::PrimitiveArray
//! [`FixedSizeListArray`]: arrow_array::FixedSizeListArray
//! [`ImportedTensor`]: crate::import::ImportedTensor

/// The arrow crates this adapter is built against (for matching versions), `arrow_array::ffi`
/// (arrow's C data interface, the way to pyarrow: `FFI_ArrowArray`, `to_ffi`, `from_ffi`) and
/// `arrow_schema::ffi::FFI_ArrowSchema` included: the `arrow` feature turns arrow-array's `ffi`
/// feature on.
pub use ::{arrow_array, arrow_buffer, arrow_data, arrow_schema};

mod export;
mod import;
mod metadata;

use arrow_schema::DataType;

use crate::error::DlpackError;
use crate::ffi::DLDataType;
use crate::spec::elements::DLPackElement;
use crate::spec::errors::FailureKind;

pub use export::ArrowTensor;
pub use import::{to_arrow, to_fixed_shape_tensor, to_primitive};

type Result<T> = std::result::Result<T, DlpackError>;

/// An error in the adapters' one form, `arrow: <what was given>, wanted <what>` (the prefix is
/// added here unless the message has it).
fn err(kind: FailureKind, msg: impl Into<String>) -> DlpackError {
    let msg = msg.into();
    match msg.starts_with("arrow: ") {
        true => DlpackError::new(kind, msg),
        false => DlpackError::new(kind, format!("arrow: {msg}")),
    }
}

/// Runs `f`, an entry point of this module, turning a panic (none is expected: the inputs
/// arrow-rs panics on are checked first) into an `InternalError` instead of unwinding into the
/// caller.
fn no_panic<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let msg = p
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Err(err(
            FailureKind::InternalError,
            format!("arrow: {what} panicked ({msg}), wanted an error"),
        ))
    })
}

/// The product of `dims`, or `None` when it overflows `i64`.
fn checked_product(dims: impl IntoIterator<Item = i64>) -> Option<i64> {
    dims.into_iter().try_fold(1i64, |n, d| n.checked_mul(d))
}

// ---------------------------------------------------------------------------------------------
// dtypes

/// The DLPack dtype and element bytes of an arrow primitive type dlbind can view in place.
fn dl_dtype_of(dt: &DataType) -> Option<(DLDataType, usize)> {
    Some(match dt {
        DataType::Int8 => (i8::DTYPE, 1),
        DataType::Int16 => (i16::DTYPE, 2),
        DataType::Int32 => (i32::DTYPE, 4),
        DataType::Int64 => (i64::DTYPE, 8),
        DataType::UInt8 => (u8::DTYPE, 1),
        DataType::UInt16 => (u16::DTYPE, 2),
        DataType::UInt32 => (u32::DTYPE, 4),
        DataType::UInt64 => (u64::DTYPE, 8),
        DataType::Float16 => (half::f16::DTYPE, 2),
        DataType::Float32 => (f32::DTYPE, 4),
        DataType::Float64 => (f64::DTYPE, 8),
        _ => return None,
    })
}

/// The arrow type of a DLPack dtype (`bool` → `Boolean`, stored bit-packed).
fn arrow_type_of(dtype: DLDataType) -> Option<DataType> {
    let table = [
        (i8::DTYPE, DataType::Int8),
        (i16::DTYPE, DataType::Int16),
        (i32::DTYPE, DataType::Int32),
        (i64::DTYPE, DataType::Int64),
        (u8::DTYPE, DataType::UInt8),
        (u16::DTYPE, DataType::UInt16),
        (u32::DTYPE, DataType::UInt32),
        (u64::DTYPE, DataType::UInt64),
        (half::f16::DTYPE, DataType::Float16),
        (f32::DTYPE, DataType::Float32),
        (f64::DTYPE, DataType::Float64),
        (bool::DTYPE, DataType::Boolean),
    ];
    table.into_iter().find(|(d, _)| *d == dtype).map(|(_, t)| t)
}

fn unsupported_arrow_type(dt: &DataType) -> DlpackError {
    err(
        FailureKind::UnsupportedDtype,
        format!(
            "type {dt} has no DLPack equivalent, wanted Int8..Int64, UInt8..UInt64, Float16, \
             Float32, Float64, or Boolean with copy=True"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::import::permuted_contiguous;
    use super::metadata::TensorMetadata;
    use super::*;
    use arrow_array::PrimitiveArray;
    use arrow_array::types::ArrowPrimitiveType;
    use arrow_array::types::{
        Float16Type, Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type,
        UInt8Type, UInt16Type, UInt32Type, UInt64Type,
    };
    use arrow_buffer::ScalarBuffer;

    /// A [`NullBuffer`] helper kept for tests of null handling: arrays with nulls in their values.
    fn with_nulls<T: ArrowPrimitiveType>(
        values: Vec<T::Native>,
        valid: &[bool],
    ) -> PrimitiveArray<T> {
        use arrow_buffer::NullBuffer;
        PrimitiveArray::<T>::new(
            ScalarBuffer::from(values),
            Some(NullBuffer::from(valid.to_vec())),
        )
    }

    #[test]
    fn permuted_contiguous_finds_the_physical_order() {
        assert_eq!(permuted_contiguous(&[3, 4], &[4, 1]), Some(vec![0, 1]));
        assert_eq!(permuted_contiguous(&[4, 3], &[1, 4]), Some(vec![1, 0]));
        assert_eq!(
            permuted_contiguous(&[2, 3, 4], &[1, 8, 2]),
            Some(vec![1, 2, 0])
        );
        assert_eq!(permuted_contiguous(&[3, 4], &[8, 1]), None, "a gap");
        assert_eq!(
            permuted_contiguous(&[3, 1, 4], &[4, 99, 1]),
            Some(vec![0, 1, 2])
        );
    }

    #[test]
    fn tensor_metadata_reads_what_pyarrow_writes() {
        let m =
            TensorMetadata::parse(r#"{"shape":[3,4],"dim_names":["C","H"],"permutation":[1,0]}"#)
                .unwrap();
        assert_eq!(m.shape, vec![3, 4]);
        assert_eq!(m.permutation, Some(vec![1, 0]));
        assert_eq!(
            m.logical_names(),
            Some(vec!["H".to_owned(), "C".to_owned()])
        );
        let m = TensorMetadata::parse(r#" { "shape" : [ 2 ] , "dim_names" : null } "#).unwrap();
        assert_eq!((m.shape, m.dim_names), (vec![2], None));
        let m = TensorMetadata::parse(r#"{"shape":[2,2],"dim_names":["a\"b","\u00e9"]}"#).unwrap();
        assert_eq!(
            m.dim_names.unwrap(),
            vec!["a\"b".to_owned(), "é".to_owned()]
        );
        for bad in [
            "",
            "[]",
            r#"{"shape":[2],"permutation":[1]}"#,
            r#"{"shape":[2,2],"permutation":[0,0]}"#,
            r#"{"shape":[-1]}"#,
            r#"{"shape":[2.5]}"#,
            r#"{"dim_names":["a"]}"#,
            r#"{"shape":[2],"dim_names":["a","b"]}"#,
            r#"{"shape":[2"#,
        ] {
            let e = TensorMetadata::parse(bad).unwrap_err();
            assert_eq!(e.kind(), FailureKind::MalformedTensor, "{bad}");
        }
        let m = TensorMetadata {
            shape: vec![3, 4],
            dim_names: None,
            permutation: Some(vec![1, 0]),
        };
        assert_eq!(m.to_json(), r#"{"shape":[3,4],"permutation":[1,0]}"#);
        assert_eq!(TensorMetadata::parse(&m.to_json()).unwrap(), m);
    }

    #[test]
    fn nulls_zeroed_in_copies_only() {
        let a = with_nulls::<Int32Type>(vec![1, 2, 3], &[true, false, true]);
        let e = ArrowTensor::from_array(&a, false).unwrap_err();
        assert_eq!(e.kind(), FailureKind::CopyRequired);
        let t = ArrowTensor::from_array(&a, true).unwrap();
        assert!(t.is_copied() && !t.readonly());
        let b = t.into_buffer();
        // SAFETY: a copy of 3 i32s owned by the buffer.
        let v = unsafe { std::slice::from_raw_parts(b.data_ptr().cast::<i32>(), 3) };
        assert_eq!(v, &[1, 0, 3]);
    }

    #[test]
    fn type_table_round_trips() {
        for dt in [
            Int8Type::DATA_TYPE,
            Int16Type::DATA_TYPE,
            Int32Type::DATA_TYPE,
            Int64Type::DATA_TYPE,
            UInt8Type::DATA_TYPE,
            UInt16Type::DATA_TYPE,
            UInt32Type::DATA_TYPE,
            UInt64Type::DATA_TYPE,
            Float16Type::DATA_TYPE,
            Float32Type::DATA_TYPE,
            Float64Type::DATA_TYPE,
        ] {
            let (dl, _) = dl_dtype_of(&dt).unwrap();
            assert_eq!(arrow_type_of(dl), Some(dt));
        }
    }
}
