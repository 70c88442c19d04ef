//! The arrow adapter (`dlbind::adapters::arrow`, feature `arrow`) against arrow-rs itself:
//! exports view the arrow buffer (pointer identity), nulls and booleans need `copy`, the
//! fixed-shape-tensor permutation becomes strides, imports build arrow buffers over the tensor's
//! memory that keep the producer alive, and every managed tensor's deleter runs exactly once;
//! empty arrays and tensors (a 0 in any dimension, any data pointer) of every type both ways,
//! 0-d tensors and list lengths beyond `i64` refused with typed errors, never a panic.
#![cfg(feature = "arrow")]

mod common;

use std::ffi::c_void;
use std::sync::Arc;

use arrow_array::types::{
    ArrowPrimitiveType, Float16Type, Float32Type, Float64Type, Int8Type, Int16Type, Int32Type,
    Int64Type, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use arrow_array::{
    Array, ArrayRef, BooleanArray, FixedSizeListArray, Float32Array, Int32Array, PrimitiveArray,
    StringArray,
};
use arrow_buffer::{NullBuffer, ScalarBuffer};
use arrow_schema::extension::{EXTENSION_TYPE_METADATA_KEY, EXTENSION_TYPE_NAME_KEY};
use arrow_schema::{DataType, Field};
use dlbind::adapters::arrow::{ArrowTensor, to_arrow, to_fixed_shape_tensor, to_primitive};
use dlbind::alloc::AlignedBuffer;
use dlbind::export::{DLPackSource, ExportRequest, export_to_capsule};
use dlbind::prelude::*;
use dlbind::spec::errors::FailureKind;
use dlbind::stats::live_exports;
use pyo3::exceptions::PyBufferError;

fn f32_list(values: Vec<f32>, size: i32) -> FixedSizeListArray {
    let field = Arc::new(Field::new_list_field(DataType::Float32, false));
    FixedSizeListArray::new(field, size, Arc::new(Float32Array::from(values)), None)
}

/// The elements of a host tensor source, read through its shape and strides in C order.
fn read_f32<S: DLPackSource>(src: &S) -> Vec<f32> {
    let n = src.dlpack_ndim();
    let (mut shape, mut strides) = (vec![0i64; n], vec![0i64; n]);
    src.dlpack_fill_shape(&mut shape);
    assert!(src.dlpack_fill_strides(&mut strides));
    let base = src.dlpack_data_ptr().cast::<f32>();
    let total: i64 = shape.iter().product();
    let mut out = Vec::new();
    for flat in 0..total {
        let (mut rem, mut off) = (flat, 0i64);
        for d in (0..n).rev() {
            off += (rem % shape[d]) * strides[d];
            rem /= shape[d];
        }
        // SAFETY: `off` addresses an element inside the source's layout.
        out.push(unsafe { *base.offset(off as isize) });
    }
    out
}

// ------------------------------------------------------------------------------------- export

#[test]
fn primitive_array_is_a_read_only_view_of_its_buffer() {
    let a = Float32Array::from(vec![1.0, 2.0, 3.0, 4.0]);
    let t = ArrowTensor::from_array(&a, false).unwrap();
    assert_eq!(
        t.dlpack_data_ptr().cast_const(),
        a.values().as_ptr().cast::<c_void>()
    );
    assert_eq!((t.shape(), t.strides()), (&[4i64][..], &[1i64][..]));
    assert_eq!(t.dtype(), f32::DTYPE);
    assert!(t.readonly() && !t.is_copied());
    assert_eq!(
        t.__dlbind_storage(),
        Some((dlbind::Extent::from_start(16), Device::CPU))
    );
    // A slice starts at its offset.
    let s = a.slice(1, 2);
    let ts = ArrowTensor::from_array(&s, false).unwrap();
    assert_eq!(
        ts.dlpack_data_ptr().cast_const(),
        s.values().as_ptr().cast::<c_void>()
    );
    assert_eq!(read_f32(&ts), vec![2.0, 3.0]);
}

#[test]
fn primitive_array_by_value_is_writable_only_when_unshared() {
    let a = Int32Array::from(vec![7, 8, 9]);
    let ptr = a.values().as_ptr();
    let t = ArrowTensor::from_primitive(a, false).unwrap();
    assert!(!t.readonly(), "the only handle of arrow-allocated memory");
    assert_eq!(t.dlpack_data_ptr().cast_const(), ptr.cast::<c_void>());

    let b = Int32Array::from(vec![7, 8, 9]);
    let keep = b.clone();
    let t = ArrowTensor::from_primitive(b, false).unwrap();
    assert!(t.readonly(), "another array shares the buffer");
    assert_eq!(
        t.dlpack_data_ptr().cast_const(),
        keep.values().as_ptr().cast::<c_void>()
    );
}

#[test]
fn fixed_size_lists_are_n_d() {
    let l = f32_list((0..12).map(|i| i as f32).collect(), 3);
    let t = ArrowTensor::from_array(&l, false).unwrap();
    assert_eq!((t.shape(), t.strides()), (&[4i64, 3][..], &[3i64, 1][..]));
    assert_eq!(read_f32(&t), (0..12).map(|i| i as f32).collect::<Vec<_>>());
    // Nested lists: 2 x 3 x 2.
    let inner = f32_list((0..12).map(|i| i as f32).collect(), 2);
    let field = Arc::new(Field::new_list_field(inner.data_type().clone(), false));
    let outer = FixedSizeListArray::new(field, 3, Arc::new(inner), None);
    let t = ArrowTensor::from_array(&outer, false).unwrap();
    assert_eq!(
        (t.shape(), t.strides()),
        (&[2i64, 3, 2][..], &[6i64, 2, 1][..])
    );
    // A sliced list views its rows.
    let s = l.slice(2, 2);
    let t = ArrowTensor::from_array(&s, false).unwrap();
    assert_eq!(read_f32(&t), vec![6.0, 7.0, 8.0, 9.0, 10.0, 11.0]);
}

#[cfg_attr(miri, ignore = "calls Python, which Miri cannot run")]
#[test]
fn nulls_and_booleans_need_copy() {
    let a = PrimitiveArray::<Int32Type>::new(
        ScalarBuffer::from(vec![1, 2, 3]),
        Some(NullBuffer::from(vec![true, false, true])),
    );
    let e = ArrowTensor::from_array(&a, false).unwrap_err();
    assert_eq!(e.kind(), FailureKind::CopyRequired);
    assert!(e.message().contains("nulls"), "{e}");
    Python::attach(|py| assert!(PyErr::from(e).is_instance_of::<PyBufferError>(py)));

    // A null row of a list is zeroed whole in a copy; a null value inside a row too.
    let values = PrimitiveArray::<Float32Type>::new(
        ScalarBuffer::from(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]),
        Some(NullBuffer::from(vec![true, true, true, true, false, true])),
    );
    let field = Arc::new(Field::new_list_field(DataType::Float32, true));
    let l = FixedSizeListArray::new(
        field,
        2,
        Arc::new(values),
        Some(NullBuffer::from(vec![true, false, true])),
    );
    assert_eq!(
        ArrowTensor::from_array(&l, false).unwrap_err().kind(),
        FailureKind::CopyRequired
    );
    let t = ArrowTensor::from_array(&l, true).unwrap();
    assert!(t.is_copied() && !t.readonly());
    assert_eq!(read_f32(&t), vec![1.0, 2.0, 0.0, 0.0, 0.0, 6.0]);

    let b = BooleanArray::from(vec![true, false, true]);
    let e = ArrowTensor::from_array(&b, false).unwrap_err();
    assert_eq!(e.kind(), FailureKind::CopyRequired);
    assert!(e.message().contains("bit-packed"), "{e}");
    let t = ArrowTensor::from_array(&b, true).unwrap();
    assert_eq!(t.dtype(), bool::DTYPE);
    // SAFETY: an owned copy of 3 one-byte booleans.
    let bytes = unsafe { std::slice::from_raw_parts(t.dlpack_data_ptr().cast::<u8>(), 3) };
    assert_eq!(bytes, &[1, 0, 1]);
}

#[test]
fn unsupported_types_are_dtype_errors() {
    let s = StringArray::from(vec!["a", "b"]);
    let e = ArrowTensor::from_array(&s, true).unwrap_err();
    assert_eq!(e.kind(), FailureKind::UnsupportedDtype);
    assert!(e.message().contains("Utf8"), "{e}");
}

#[test]
fn fixed_shape_tensor_permutation_becomes_strides() {
    // Physical element shape [2, 3] stored row-major, permutation [1, 0]: logical [3, 2].
    let l = f32_list((0..12).map(|i| i as f32).collect(), 6);
    let field = tensor_field(
        &l,
        r#"{"shape":[2,3],"dim_names":["a","b"],"permutation":[1,0]}"#,
    );
    let t = ArrowTensor::from_field(&field, &l, false).unwrap();
    assert_eq!(t.shape(), &[2, 3, 2]);
    assert_eq!(t.dim_names(), Some(&["b".to_owned(), "a".to_owned()][..]));
    assert_eq!(t.strides(), &[6, 1, 3]);
    // Logical [k][i][j] = physical [k][j][i] = 6k + 3j + i.
    let got = read_f32(&t);
    let mut want = Vec::new();
    for k in 0..2 {
        for i in 0..3 {
            for j in 0..2 {
                want.push((6 * k + 3 * j + i) as f32);
            }
        }
    }
    assert_eq!(got, want);
    // Metadata that does not fit the storage.
    let field = tensor_field(&l, r#"{"shape":[4,4]}"#);
    let e = ArrowTensor::from_field(&field, &l, false).unwrap_err();
    assert_eq!(e.kind(), FailureKind::MalformedTensor);
    let field = tensor_field(&l, r#"{"shape":[2,3],"permutation":[0,0]}"#);
    let e = ArrowTensor::from_field(&field, &l, false).unwrap_err();
    assert_eq!(e.kind(), FailureKind::MalformedTensor);
    assert!(e.message().contains("permutation"), "{e}");
}

fn tensor_field(l: &FixedSizeListArray, meta: &str) -> Field {
    Field::new("t", l.data_type().clone(), false).with_metadata(
        [
            (
                EXTENSION_TYPE_NAME_KEY.to_owned(),
                "arrow.fixed_shape_tensor".to_owned(),
            ),
            (EXTENSION_TYPE_METADATA_KEY.to_owned(), meta.to_owned()),
        ]
        .into_iter()
        .collect::<std::collections::HashMap<String, String>>(),
    )
}

// ------------------------------------------------------------------------------------- import

/// A host tensor with explicit strides over a `Vec<f32>` (a test producer).
#[pyclass(frozen)]
struct Strided {
    data: Vec<f32>,
    offset: usize,
    shape: Vec<i64>,
    strides: Vec<i64>,
    device: Device,
}

// SAFETY: every test builds shapes and strides inside `data` from `offset`; frozen.
unsafe impl DLPackSource for Strided {
    fn dlpack_data_ptr(&self) -> *mut c_void {
        self.data.as_ptr().wrapping_add(self.offset) as *mut c_void
    }
    fn dlpack_dtype(&self) -> DLDataType {
        f32::DTYPE
    }
    fn dlpack_ndim(&self) -> usize {
        self.shape.len()
    }
    fn dlpack_fill_shape(&self, out: &mut [i64]) {
        out.copy_from_slice(&self.shape);
    }
    fn dlpack_fill_strides(&self, out: &mut [i64]) -> bool {
        out.copy_from_slice(&self.strides);
        true
    }
    fn dlpack_device(&self) -> Device {
        self.device
    }
}

/// Exports `src` (kept by a Python object) and imports the capsule: a producer's tensor.
fn import(py: Python<'_>, src: Strided) -> (ImportedTensor, *const f32) {
    let obj = Bound::new(py, src).unwrap();
    let ptr = obj.get().dlpack_data_ptr().cast_const().cast::<f32>();
    let req = ExportRequest {
        max_version: Some((1, 3)),
        ..ExportRequest::DEFAULT
    };
    let cap = export_to_capsule(obj.as_any(), obj.get(), &req).unwrap();
    (ImportedTensor::from_capsule(cap.bind(py)).unwrap(), ptr)
}

fn strided(data: Vec<f32>, shape: &[i64], strides: &[i64]) -> Strided {
    Strided {
        data,
        offset: 0,
        shape: shape.to_vec(),
        strides: strides.to_vec(),
        device: Device::CPU,
    }
}

#[cfg_attr(miri, ignore = "calls Python, which Miri cannot run")]
#[test]
fn import_views_the_tensor_and_keeps_the_producer_alive() {
    let _g = common::serial();
    Python::attach(|py| {
        let base = live_exports();
        let (t, ptr) = import(py, strided((0..6).map(|i| i as f32).collect(), &[6], &[1]));
        assert_eq!(live_exports(), base + 1);
        let a: PrimitiveArray<Float32Type> = to_primitive(t, false).unwrap();
        assert_eq!(a.values().as_ptr(), ptr, "zero-copy");
        assert_eq!(a.values().as_ref(), &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        let b = a.slice(2, 3); // shares the buffer
        drop(a);
        assert_eq!(live_exports(), base + 1, "the slice keeps the producer");
        assert_eq!(b.values().as_ref(), &[2.0, 3.0, 4.0]);
        drop(b);
        assert_eq!(
            live_exports(),
            base,
            "deleter ran once, when the last buffer dropped"
        );
    });
}

#[cfg_attr(miri, ignore = "calls Python, which Miri cannot run")]
#[test]
fn import_n_d_as_nested_lists_and_round_trip() {
    let _g = common::serial();
    Python::attach(|py| {
        let base = live_exports();
        let (t, ptr) = import(
            py,
            strided((0..24).map(|i| i as f32).collect(), &[2, 3, 4], &[12, 4, 1]),
        );
        let arr: ArrayRef = to_arrow(t, false).unwrap();
        assert_eq!(arr.len(), 2);
        assert!(matches!(arr.data_type(), DataType::FixedSizeList(_, 3)));
        // Back to DLPack: the same memory, the same shape.
        let back = ArrowTensor::from_array(arr.as_ref(), false).unwrap();
        assert_eq!(back.dlpack_data_ptr().cast_const().cast::<f32>(), ptr);
        assert_eq!(back.shape(), &[2, 3, 4]);
        assert_eq!(
            read_f32(&back),
            (0..24).map(|i| i as f32).collect::<Vec<_>>()
        );
        drop(arr);
        assert_eq!(
            live_exports(),
            base + 1,
            "the export still holds the buffer"
        );
        drop(back);
        assert_eq!(live_exports(), base);
    });
}

#[cfg_attr(miri, ignore = "calls Python, which Miri cannot run")]
#[test]
fn import_transposed_as_fixed_shape_tensor_with_permutation() {
    let _g = common::serial();
    Python::attach(|py| {
        // Physical (2, 3, 4) C order, logical view (2, 4, 3): strides (12, 1, 4).
        let (t, ptr) = import(
            py,
            strided((0..24).map(|i| i as f32).collect(), &[2, 4, 3], &[12, 1, 4]),
        );
        let (field, list) = to_fixed_shape_tensor(t, false).unwrap();
        assert_eq!(
            field.extension_type_name(),
            Some("arrow.fixed_shape_tensor")
        );
        assert_eq!(
            field.extension_type_metadata(),
            Some(r#"{"shape":[3,4],"permutation":[1,0]}"#),
            "the physical element shape and the permutation"
        );
        let values = list
            .values()
            .as_any()
            .downcast_ref::<Float32Array>()
            .unwrap();
        assert_eq!(values.values().as_ptr(), ptr, "zero-copy");
        // And back: the permutation becomes the same strides.
        let back = ArrowTensor::from_field(&field, &list, false).unwrap();
        assert_eq!(back.shape(), &[2, 4, 3]);
        assert_eq!(back.strides(), &[12, 1, 4]);
    });
}

#[cfg_attr(miri, ignore = "calls Python, which Miri cannot run")]
#[test]
fn import_refuses_what_arrow_cannot_view_unless_copy() {
    let _g = common::serial();
    Python::attach(|py| {
        let base = live_exports();
        // Reversed: negative strides.
        let mut rev = strided((0..4).map(|i| i as f32).collect(), &[4], &[-1]);
        rev.offset = 3;
        let (t, _) = import(py, rev);
        let e = to_arrow(t, false).unwrap_err();
        assert_eq!(e.kind(), FailureKind::CopyRequired);
        assert!(e.message().contains("C-contiguous"), "{e}");
        assert_eq!(live_exports(), base, "a refused tensor is released");
        let mut rev = strided((0..4).map(|i| i as f32).collect(), &[4], &[-1]);
        rev.offset = 3;
        let (t, ptr) = import(py, rev);
        let a: PrimitiveArray<Float32Type> = to_primitive(t, true).unwrap();
        assert_ne!(a.values().as_ptr(), ptr);
        assert_eq!(a.values().as_ref(), &[3.0, 2.0, 1.0, 0.0]);
        assert_eq!(live_exports(), base, "the copy released the producer");

        // The outer dimension of a fixed shape tensor must be outermost.
        let (t, _) = import(
            py,
            strided((0..6).map(|i| i as f32).collect(), &[3, 2], &[1, 3]),
        );
        let e = to_fixed_shape_tensor(t, false).unwrap_err();
        assert_eq!(e.kind(), FailureKind::CopyRequired);

        // Wrong dtype, rank, device.
        let (t, _) = import(py, strided(vec![0.0; 4], &[4], &[1]));
        let e = to_primitive::<Int64Type>(t, false).unwrap_err();
        assert_eq!(e.kind(), FailureKind::UnsupportedDtype);
        assert!(e.message().contains("float32"), "{e}");
        let (t, _) = import(py, strided(vec![0.0; 4], &[2, 2], &[2, 1]));
        assert_eq!(
            to_primitive::<Float32Type>(t, false).unwrap_err().kind(),
            FailureKind::UnsupportedLayout
        );
        let (t, _) = import(py, strided(vec![0.0; 1], &[], &[]));
        assert_eq!(
            to_arrow(t, false).unwrap_err().kind(),
            FailureKind::UnsupportedLayout
        );
        let (t, _) = import(py, strided(vec![0.0; 2], &[2], &[1]));
        assert_eq!(
            to_fixed_shape_tensor(t, false).unwrap_err().kind(),
            FailureKind::UnsupportedLayout
        );
        let mut dev = strided(vec![0.0; 4], &[4], &[1]);
        dev.device = Device::cuda(0);
        let (t, _) = import(py, dev);
        let e = to_arrow(t, true).unwrap_err();
        assert_eq!(e.kind(), FailureKind::UnsupportedDevice);
        assert_eq!(
            live_exports(),
            base,
            "every refused tensor was released once"
        );
    });
}

#[test]
fn bool_tensors_pack_with_copy_only() {
    let t = ImportedTensor::from_buffer(
        {
            let b = AlignedBuffer::zeroed(3).unwrap();
            // SAFETY: 3 fresh bytes.
            unsafe { std::ptr::copy_nonoverlapping([1u8, 0, 1].as_ptr(), b.as_mut_ptr(), 3) };
            b
        },
        &[3],
        bool::DTYPE,
    )
    .unwrap();
    let e = to_arrow(t, false).unwrap_err();
    assert_eq!(e.kind(), FailureKind::CopyRequired);
    assert!(e.message().contains("bit-packed"), "{e}");
    let t = ImportedTensor::from_buffer(
        {
            let b = AlignedBuffer::zeroed(3).unwrap();
            // SAFETY: 3 fresh bytes.
            unsafe { std::ptr::copy_nonoverlapping([1u8, 0, 1].as_ptr(), b.as_mut_ptr(), 3) };
            b
        },
        &[3],
        bool::DTYPE,
    )
    .unwrap();
    let a = to_arrow(t, true).unwrap();
    let b = a.as_any().downcast_ref::<BooleanArray>().unwrap();
    assert_eq!(
        b.iter().collect::<Vec<_>>(),
        vec![Some(true), Some(false), Some(true)]
    );
}

// ------------------------------------------------------------------------------ empty tensors

/// An empty tensor of any dtype and shape at any address, with C-contiguous strides or junk
/// ones: a producer may send any pointer (NULL or dangling at 1 included) and any strides for a
/// tensor without elements (numpy sends zeros).
#[pyclass(frozen)]
struct EmptyAt {
    addr: usize,
    dtype: DLDataType,
    shape: Vec<i64>,
    junk_strides: bool,
}

// SAFETY: every test gives a shape with a 0 in it: nothing is addressed.
unsafe impl DLPackSource for EmptyAt {
    fn dlpack_data_ptr(&self) -> *mut c_void {
        std::ptr::without_provenance_mut(self.addr)
    }
    fn dlpack_dtype(&self) -> DLDataType {
        self.dtype
    }
    fn dlpack_ndim(&self) -> usize {
        self.shape.len()
    }
    fn dlpack_fill_shape(&self, out: &mut [i64]) {
        out.copy_from_slice(&self.shape);
    }
    fn dlpack_fill_strides(&self, out: &mut [i64]) -> bool {
        if self.junk_strides {
            for (i, s) in out.iter_mut().enumerate() {
                *s = [0, i64::MIN, 7, -1][i % 4];
            }
        } else {
            out.copy_from_slice(&dlbind::layout::c_strides(&self.shape));
        }
        true
    }
}

/// An empty producer tensor (through a versioned capsule) at `addr`; junk strides when `addr`
/// is odd.
fn import_empty(py: Python<'_>, addr: usize, dtype: DLDataType, shape: &[i64]) -> ImportedTensor {
    assert!(shape.contains(&0));
    let obj = Bound::new(
        py,
        EmptyAt {
            addr,
            dtype,
            shape: shape.to_vec(),
            junk_strides: addr % 2 == 1,
        },
    )
    .unwrap();
    let req = ExportRequest {
        max_version: Some((1, 3)),
        ..ExportRequest::DEFAULT
    };
    let cap = export_to_capsule(obj.as_any(), obj.get(), &req).unwrap();
    let t = ImportedTensor::from_capsule(cap.bind(py)).unwrap();
    assert_eq!(t.data_ptr() as usize, addr, "the producer's own pointer");
    t
}

/// The addresses an empty tensor comes with: NULL, 1 (what the old adapter passed arrow
/// itself, misaligned for any type wider than a byte), an aligned one, an odd one (odd ones
/// with junk strides).
const EMPTY_ADDRS: [usize; 4] = [0, 1, 4096, 4099];

/// The shapes with a 0 somewhere.
const EMPTY_SHAPES: [&[i64]; 5] = [&[0], &[0, 3], &[3, 0], &[2, 0, 4], &[2, 3, 0]];

/// Every dtype the adapter gives arrow (bool: packed, `copy` only).
const DTYPES: [DLDataType; 12] = [
    i8::DTYPE,
    i16::DTYPE,
    i32::DTYPE,
    i64::DTYPE,
    u8::DTYPE,
    u16::DTYPE,
    u32::DTYPE,
    u64::DTYPE,
    half::f16::DTYPE,
    f32::DTYPE,
    f64::DTYPE,
    bool::DTYPE,
];

/// One 1-D empty tensor of `T` at each address, as a `PrimitiveArray<T>` and back.
fn empty_primitive_both_ways<T>(py: Python<'_>)
where
    T: ArrowPrimitiveType,
    T::Native: DLPackElement,
{
    let dt = <T::Native as DLPackElement>::DTYPE;
    for addr in EMPTY_ADDRS {
        for copy in [false, true] {
            let t = import_empty(py, addr, dt, &[0]);
            let a: PrimitiveArray<T> =
                to_primitive(t, copy).unwrap_or_else(|e| panic!("{} at {addr}: {e}", T::DATA_TYPE));
            assert_eq!((a.len(), a.null_count()), (0, 0));
            assert!(
                (a.values().as_ptr() as usize).is_multiple_of(std::mem::align_of::<T::Native>())
            );
            let back = ArrowTensor::from_array(&a, false).unwrap();
            assert_eq!((back.shape(), back.dtype()), (&[0i64][..], dt));
            let back = ArrowTensor::from_primitive(a, copy).unwrap();
            assert_eq!((back.shape(), back.dtype()), (&[0i64][..], dt));
        }
    }
}

#[cfg_attr(miri, ignore = "calls Python, which Miri cannot run")]
#[test]
fn empty_tensors_of_every_type_import_as_primitive_arrays() {
    let _g = common::serial();
    Python::attach(|py| {
        let base = live_exports();
        empty_primitive_both_ways::<Int8Type>(py);
        empty_primitive_both_ways::<Int16Type>(py);
        empty_primitive_both_ways::<Int32Type>(py);
        empty_primitive_both_ways::<Int64Type>(py);
        empty_primitive_both_ways::<UInt8Type>(py);
        empty_primitive_both_ways::<UInt16Type>(py);
        empty_primitive_both_ways::<UInt32Type>(py);
        empty_primitive_both_ways::<UInt64Type>(py);
        empty_primitive_both_ways::<Float16Type>(py);
        empty_primitive_both_ways::<Float32Type>(py);
        empty_primitive_both_ways::<Float64Type>(py);
        assert_eq!(live_exports(), base, "every producer released once");
    });
}

#[cfg_attr(miri, ignore = "calls Python, which Miri cannot run")]
#[test]
fn empty_tensors_of_every_type_and_shape_go_to_arrow_and_back() {
    let _g = common::serial();
    Python::attach(|py| {
        let base = live_exports();
        for dt in DTYPES {
            let is_bool = dt == bool::DTYPE;
            for shape in EMPTY_SHAPES {
                for addr in EMPTY_ADDRS {
                    let what = format!("{dt:?} {shape:?} at {addr}");
                    // bool needs copy (bit-packed); the others view, and an empty view is
                    // arrow's own empty buffer.
                    let arr = to_arrow(import_empty(py, addr, dt, shape), is_bool)
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert_eq!(arr.len() as i64, shape[0], "{what}");
                    let back = ArrowTensor::from_array(arr.as_ref(), is_bool)
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert_eq!(back.shape(), shape, "{what}: the same shape back");
                    assert_eq!(back.dtype(), dt, "{what}");
                    if shape.len() >= 2 && !is_bool {
                        let (field, list) =
                            to_fixed_shape_tensor(import_empty(py, addr, dt, shape), false)
                                .unwrap_or_else(|e| panic!("{what}: {e}"));
                        assert_eq!(list.len() as i64, shape[0], "{what}");
                        let back = ArrowTensor::from_field(&field, &list, false).unwrap();
                        assert_eq!(back.shape(), shape, "{what}: fixed_shape_tensor back");
                    }
                }
            }
        }
        assert_eq!(live_exports(), base, "every producer released once");
    });
}

#[cfg_attr(miri, ignore = "calls Python, which Miri cannot run")]
#[test]
fn zero_d_tensors_are_refused_by_every_import() {
    let _g = common::serial();
    Python::attach(|py| {
        let base = live_exports();
        let zero_d = || import(py, strided(vec![2.5], &[], &[])).0;
        for e in [
            to_arrow(zero_d(), false).unwrap_err(),
            to_arrow(zero_d(), true).unwrap_err(),
            to_primitive::<Float32Type>(zero_d(), true).unwrap_err(),
            to_fixed_shape_tensor(zero_d(), true).unwrap_err(),
        ] {
            assert_eq!(e.kind(), FailureKind::UnsupportedLayout, "{e}");
        }
        assert_eq!(live_exports(), base, "every producer released once");
    });
}

#[test]
fn empty_arrays_of_every_type_export_as_empty_tensors() {
    for (ty, dt) in [
        (DataType::Int8, i8::DTYPE),
        (DataType::Int16, i16::DTYPE),
        (DataType::Int32, i32::DTYPE),
        (DataType::Int64, i64::DTYPE),
        (DataType::UInt8, u8::DTYPE),
        (DataType::UInt16, u16::DTYPE),
        (DataType::UInt32, u32::DTYPE),
        (DataType::UInt64, u64::DTYPE),
        (DataType::Float16, half::f16::DTYPE),
        (DataType::Float32, f32::DTYPE),
        (DataType::Float64, f64::DTYPE),
        (DataType::Boolean, bool::DTYPE),
    ] {
        let is_bool = ty == DataType::Boolean;
        let a = arrow_array::new_empty_array(&ty);
        for copy in [is_bool, true] {
            let t = ArrowTensor::from_array(a.as_ref(), copy).unwrap();
            assert_eq!(
                (t.shape(), t.strides(), t.dtype()),
                (&[0i64][..], &[1i64][..], dt)
            );
            assert_eq!(t.is_copied(), copy, "{ty}");
        }
        // Lists of size 0 (3 of them) and 0 lists of size 4.
        let field = Arc::new(Field::new_list_field(ty.clone(), true));
        let l =
            FixedSizeListArray::try_new_with_length(field.clone(), 0, a.clone(), None, 3).unwrap();
        let t = ArrowTensor::from_array(&l, is_bool).unwrap();
        assert_eq!((t.shape(), t.dtype()), (&[3i64, 0][..], dt), "{ty}");
        let l = FixedSizeListArray::try_new_with_length(field, 4, a.clone(), None, 0).unwrap();
        let t = ArrowTensor::from_array(&l, true).unwrap();
        assert_eq!(t.shape(), &[0, 4], "{ty}");
    }
    // An empty slice keeps its offset, and views nothing.
    let a = Int32Array::from(vec![1, 2, 3]);
    let t = ArrowTensor::from_array(&a.slice(3, 0), false).unwrap();
    assert_eq!(t.shape(), &[0]);
    assert_eq!(read_f32(&t), Vec::<f32>::new());
    // arrow.fixed_shape_tensor of element shape (0, 2), permuted: logical (5, 2, 0).
    let values = Float32Array::from(Vec::<f32>::new());
    let field = Arc::new(Field::new_list_field(DataType::Float32, false));
    let l = FixedSizeListArray::try_new_with_length(field, 0, Arc::new(values), None, 5).unwrap();
    let f = tensor_field(&l, r#"{"shape":[0,2],"permutation":[1,0]}"#);
    let t = ArrowTensor::from_field(&f, &l, false).unwrap();
    assert_eq!(t.shape(), &[5, 2, 0]);
}

#[test]
fn list_lengths_beyond_i64_are_refused_not_wrapped() {
    // Lists of size 0 hold no values, so their length costs no memory: 2^63 of them, in lists
    // of 2^30, in lists of 2^30, is a valid arrow array of shape (8, 2^30, 2^30, 0), whose
    // lengths multiply past i64.
    let empty: ArrayRef = Arc::new(Int32Array::from(Vec::<i32>::new()));
    let f0 = Arc::new(Field::new_list_field(DataType::Int32, true));
    let l0 = FixedSizeListArray::try_new_with_length(f0, 0, empty, None, 1 << 63).unwrap();
    let f1 = Arc::new(Field::new_list_field(l0.data_type().clone(), true));
    let l1 =
        FixedSizeListArray::try_new_with_length(f1, 1 << 30, Arc::new(l0), None, 1 << 33).unwrap();
    let f2 = Arc::new(Field::new_list_field(l1.data_type().clone(), true));
    let l2 = FixedSizeListArray::try_new_with_length(f2, 1 << 30, Arc::new(l1), None, 8).unwrap();
    for copy in [false, true] {
        let e = ArrowTensor::from_array(&l2, copy).unwrap_err();
        assert_eq!(e.kind(), FailureKind::UnsupportedLayout, "{e}");
        assert!(e.message().starts_with("arrow: nested list lengths"), "{e}");
    }
    // Metadata whose shape multiplies past i64 matches no storage.
    let l = f32_list(vec![0.0; 4], 2);
    let f = tensor_field(&l, r#"{"shape":[4294967296,4294967296,4294967296]}"#);
    let e = ArrowTensor::from_field(&f, &l, false).unwrap_err();
    assert_eq!(e.kind(), FailureKind::MalformedTensor, "{e}");
    assert!(e.message().contains("beyond i64"), "{e}");
}

#[test]
fn bool_tensors_with_bytes_other_than_0_and_1_are_refused_when_packed() {
    let _g = common::serial();
    #[cfg(feature = "ndarray")]
    {
        use dlbind::adapters::ndarray::{export, ndarray};
        let t = export(ndarray::array![true, false, true]).unwrap();
        // SAFETY: element 1 of the tensor's writable memory; no borrow of it is alive.
        unsafe { t.data_ptr().cast::<u8>().add(1).write(7) };
        let e = to_arrow(t, true).unwrap_err();
        assert_eq!(e.kind(), FailureKind::MalformedTensor);
        assert_eq!(
            e.message(),
            "arrow: bool element 1 (C order) holds the byte 7, wanted 0 or 1"
        );
        // Reversed (a non-contiguous bool tensor packs from a copy).
        let t = export(ndarray::array![true, false, false].slice_move(ndarray::s![..;-1])).unwrap();
        let a = to_arrow(t, true).unwrap();
        let b = a.as_any().downcast_ref::<BooleanArray>().unwrap();
        assert_eq!(
            b.iter().collect::<Vec<_>>(),
            vec![Some(false), Some(false), Some(true)]
        );
    }
}
