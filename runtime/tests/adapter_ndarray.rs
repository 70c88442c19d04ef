//! The ndarray adapter (`dlbind::adapters::ndarray`) against the real crate: exports of
//! `Array`, `ArcArray`, `CowArray` and a frozen class's `ArrayView`; imports into views of fixed
//! and dynamic dimension and the owning `NdTensor`; negative strides, bool (never lent: read as
//! `u8` or copied, checked), complex; empty and 0-d arrays of every element type both ways;
//! every refusal with its spec kind; every owner dropped exactly once.
#![cfg(feature = "ndarray")]

mod common;

use std::ptr::NonNull;

use dlbind::adapters::live_rust_owned_tensors;
use dlbind::adapters::ndarray::ndarray::{
    ArcArray, Array, Array1, Array2, ArrayD, CowArray, Dimension, Ix1, Ix2, Ix3, Ix4, Ix5, Ix6,
    IxDyn, s,
};
use dlbind::adapters::ndarray::{NdTensor, export, export_view, to_array, view, view_mut};
use dlbind::prelude::*;
use dlbind::spec::errors::{FailureKind, PyExceptionKind};
use dlbind::spec::types::{
    DLDataType, DLDevice, DLManagedTensorVersioned, DLPackVersion, DLTensor,
};
use num_complex::Complex;

/// `sys.getrefcount(o)` less the call's own reference.
fn refs<T>(o: &Bound<'_, T>) -> isize {
    let sys = o.py().import("sys").unwrap();
    sys.call_method1("getrefcount", (o.as_any(),))
        .unwrap()
        .extract::<isize>()
        .unwrap()
        - 1
}

fn grid() -> Array2<f32> {
    Array2::from_shape_fn((3, 4), |(i, j)| (10 * i + j) as f32)
}

#[test]
fn array_exports_writable_and_views_back_equal() {
    let _g = common::serial();
    let a = grid();
    let ptr = a.as_ptr();
    let mut t = export(a.clone()).unwrap();
    assert_eq!(t.shape(), &[3, 4]);
    assert_eq!(t.strides(), &[4, 1]);
    assert!(!t.readonly());
    assert!(!t.is_copied());
    assert_eq!(t.dtype_info().unwrap().name, "float32");
    assert_ne!(
        t.data_ptr() as *const f32,
        ptr,
        "the clone moved in, not the original"
    );
    assert_eq!(view::<f32, Ix2>(&t).unwrap(), a);
    assert_eq!(view::<f32, IxDyn>(&t).unwrap(), a.clone().into_dyn());
    // SAFETY: the test's only handle of this memory while the result lives.
    unsafe { view_mut::<f32, Ix2>(&mut t) }.unwrap()[[2, 3]] = -1.0;
    assert_eq!(view::<f32, Ix2>(&t).unwrap()[[2, 3]], -1.0);
}

#[test]
fn negative_strides_go_out_as_they_are() {
    let _g = common::serial();
    let a = grid();
    let r = a.clone().slice_move(s![..;-1, ..;-2]);
    let t = export(r.clone()).unwrap();
    assert_eq!(t.shape(), &[3, 2]);
    assert_eq!(t.strides(), &[-4, -2]);
    assert_eq!(view::<f32, Ix2>(&t).unwrap(), r);
    assert_eq!(view::<f32, Ix2>(&t).unwrap()[[0, 0]], 23.0);
    // A transposed (Fortran-order) array keeps its strides too.
    let f = a.clone().reversed_axes();
    let t = export(f.clone()).unwrap();
    assert_eq!(t.strides(), &[1, 4]);
    assert_eq!(view::<f32, Ix2>(&t).unwrap(), f);
}

#[test]
fn arc_array_is_read_only_while_shared_and_dropped_once() {
    let _g = common::serial();
    let shared: ArcArray<f64, Ix2> = ArcArray::from_shape_fn((2, 2), |(i, j)| (i * 2 + j) as f64);
    let t = export(shared.clone()).unwrap();
    assert!(t.readonly(), "shared with `shared`");
    assert!(!shared.is_unique());
    assert_eq!(t.data_ptr() as *const f64, shared.as_ptr(), "no copy");
    let mut t = t;
    // SAFETY: the test's only handle of this memory while the result lives.
    let e = unsafe { view_mut::<f64, Ix2>(&mut t) }.unwrap_err();
    assert_eq!(e.kind(), FailureKind::UnsupportedLayout);
    assert!(e.message().contains("read-only"), "{}", e.message());
    drop(t);
    assert!(shared.is_unique(), "the tensor's clone dropped with it");

    let t = export(shared).unwrap();
    assert!(!t.readonly(), "held alone: writable");
}

#[test]
fn cow_array_owned_moves_and_borrowed_copies() {
    let _g = common::serial();
    let a = grid();
    let owned: CowArray<'_, f32, Ix2> = CowArray::from(a.clone());
    let p = owned.as_ptr();
    let t = export(owned).unwrap();
    assert_eq!(t.data_ptr() as *const f32, p);
    assert!(!t.is_copied());

    let v: CowArray<'_, f32, Ix2> = CowArray::from(a.slice(s![.., 1..3]));
    let t = export(v).unwrap();
    assert!(t.is_copied());
    assert!(!t.readonly());
    assert_eq!(t.strides(), &[2, 1]);
    assert_eq!(view::<f32, Ix2>(&t).unwrap(), a.slice(s![.., 1..3]));
}

#[test]
fn bool_and_complex_and_empty() {
    let _g = common::serial();
    let b = Array1::from(vec![true, false, true]);
    let t = export(b.clone()).unwrap();
    assert_eq!(t.dtype_info().unwrap().name, "bool");
    // Never lent: its bytes as u8, or a checked copy.
    let e = view::<bool, Ix1>(&t).unwrap_err();
    assert_eq!(e.kind(), FailureKind::UnsupportedDtype);
    assert_eq!(view::<u8, Ix1>(&t).unwrap(), Array1::from(vec![1u8, 0, 1]));
    assert_eq!(to_array::<bool, Ix1>(&t).unwrap(), b);

    let c = Array2::from_shape_fn((2, 3), |(i, j)| Complex::new(i as f64, -(j as f64)));
    let t = export(c.clone().slice_move(s![.., ..;-1])).unwrap();
    assert_eq!(t.dtype_info().unwrap().name, "complex128");
    assert_eq!(
        view::<Complex<f64>, Ix2>(&t).unwrap(),
        c.slice(s![.., ..;-1])
    );

    let e = Array2::<i16>::zeros((0, 5));
    let t = export(e).unwrap();
    assert_eq!(t.shape(), &[0, 5]);
    assert_eq!(view::<i16, Ix2>(&t).unwrap().len(), 0);
}

#[test]
fn fixed_dimensions_one_to_six_and_rank_mismatch() {
    let _g = common::serial();
    macro_rules! each {
        ($($d:ty => $n:expr),*) => {$(
            let shape: Vec<usize> = (0..$n).map(|k| k % 2 + 1).collect();
            let a = ArrayD::from_shape_fn(IxDyn(&shape), |ix| ix.slice().iter().sum::<usize>() as u8);
            let t = export(a.clone()).unwrap();
            assert_eq!(view::<u8, $d>(&t).unwrap().into_dyn(), a, "rank {}", $n);
            let e = view::<u8, Ix3>(&t);
            if $n == 3 {
                assert!(e.is_ok());
            } else {
                let e = e.unwrap_err();
                assert_eq!(e.kind(), FailureKind::UnsupportedLayout);
                assert_eq!(e.exception(), PyExceptionKind::BufferError);
                assert!(
                    e.message().contains(&format!("has {} dimension(s)", $n))
                        && e.message().contains("wanted 3 for ndarray::Ix3"),
                    "{}",
                    e.message()
                );
            }
        )*};
    }
    each!(Ix1 => 1, Ix2 => 2, Ix3 => 3, Ix4 => 4, Ix5 => 5, Ix6 => 6);
}

#[test]
fn wrong_dtype_is_unsupported_dtype() {
    let _g = common::serial();
    let t = export(grid()).unwrap();
    let e = view::<f64, Ix2>(&t).unwrap_err();
    assert_eq!(e.kind(), FailureKind::UnsupportedDtype);
    assert!(e.message().contains("float32"), "{}", e.message());
    let e = NdTensor::<i32, Ix2>::new(t).unwrap_err();
    assert_eq!(e.kind(), FailureKind::UnsupportedDtype);
}

/// A CUDA tensor description (never read): what a GPU producer hands over.
fn cuda_tensor() -> dlbind::ImportedTensor {
    struct Block {
        m: DLManagedTensorVersioned,
        shape: [i64; 1],
    }
    unsafe extern "C" fn del(m: *mut DLManagedTensorVersioned) {
        // SAFETY: `m` is the first field of the leaked `Block` below.
        drop(unsafe { Box::from_raw(m.cast::<Block>()) });
    }
    let mut b = Box::new(Block {
        m: DLManagedTensorVersioned {
            version: DLPackVersion { major: 1, minor: 3 },
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(del),
            flags: 0,
            dl_tensor: DLTensor {
                data: 0x1000 as *mut _,
                device: DLDevice {
                    device_type: dlbind::spec::types::DLDeviceType::kDLCUDA,
                    device_id: 0,
                },
                ndim: 1,
                dtype: DLDataType {
                    code: 2,
                    bits: 32,
                    lanes: 1,
                },
                shape: std::ptr::null_mut(),
                strides: std::ptr::null_mut(),
                byte_offset: 0,
            },
        },
        shape: [4],
    });
    b.m.dl_tensor.shape = b.shape.as_mut_ptr();
    let m = NonNull::from(&mut Box::leak(b).m);
    // SAFETY: a live tensor nobody else holds; its deleter frees the block.
    unsafe { dlbind::ImportedTensor::from_managed_versioned(m) }.unwrap()
}

#[test]
fn device_memory_is_refused_with_unsupported_device() {
    let _g = common::serial();
    let mut t = cuda_tensor();
    let e = view::<f32, Ix1>(&t).unwrap_err();
    assert_eq!(e.kind(), FailureKind::UnsupportedDevice);
    assert_eq!(e.exception(), PyExceptionKind::BufferError);
    assert_eq!(
        // SAFETY: the test's only handle of this memory while the result lives.
        unsafe { view_mut::<f32, Ix1>(&mut t) }.unwrap_err().kind(),
        FailureKind::UnsupportedDevice
    );
    assert_eq!(
        NdTensor::<f32, Ix1>::new(t).unwrap_err().kind(),
        FailureKind::UnsupportedDevice
    );
}

#[test]
fn nd_tensor_owns_the_tensor() {
    let _g = common::serial();
    let shared: ArcArray<i64, Ix1> = ArcArray::from(vec![1i64, 2, 3]);
    let mut nd = NdTensor::<i64, Ix1>::new(export(shared.clone()).unwrap()).unwrap();
    assert_eq!(nd.view().unwrap().sum(), 6);
    // SAFETY: the test's only handle of this memory while the result lives.
    assert!(unsafe { nd.view_mut() }.is_err(), "shared: read-only");
    assert_eq!(nd.tensor().shape(), &[3]);
    assert!(!shared.is_unique());
    let t = nd.into_tensor();
    assert!(!shared.is_unique());
    drop(t);
    assert!(shared.is_unique());

    let e = NdTensor::<i64, Ix2>::new(export(shared).unwrap()).unwrap_err();
    assert_eq!(e.kind(), FailureKind::UnsupportedLayout);
}

#[pyclass(frozen)]
struct Weights {
    w: Array2<f32>,
}

#[cfg_attr(miri, ignore = "calls Python, which Miri cannot run")]
#[test]
fn export_view_keeps_the_python_owner_and_is_read_only() {
    let _g = common::serial();
    Python::attach(|py| {
        let obj = Bound::new(py, Weights { w: grid() }).unwrap();
        let rc = refs(&obj);
        let t = export_view(&obj, |w| w.w.slice(s![1.., ..;-1])).unwrap();
        assert_eq!(refs(&obj), rc + 1);
        assert!(t.readonly());
        assert_eq!(t.strides(), &[4, -1]);
        assert_eq!(
            view::<f32, Ix2>(&t).unwrap(),
            obj.get().w.slice(s![1.., ..;-1])
        );
        let t2 = export_view(&obj, |w| w.w.row(2)).unwrap();
        assert_eq!(
            t2.data_ptr() as *const f32,
            &obj.get().w[[2, 0]] as *const f32
        );
        drop(t);
        drop(t2);
        assert_eq!(refs(&obj), rc);
    });
}

#[cfg_attr(miri, ignore = "calls Python, which Miri cannot run")]
#[test]
fn from_py_imports_numpy_and_maps_errors_to_python() {
    let _g = common::serial();
    Python::attach(|py| {
        let Some(np) = common::numpy(py) else {
            eprintln!("numpy not installed: only the Rust-side checks ran");
            return;
        };
        let a = np.call_method1("arange", (12.0f64,)).unwrap();
        // A copy owns its data (a view's base would be the array that does).
        let a = a
            .call_method1("reshape", ((3, 4),))
            .unwrap()
            .call_method0("copy")
            .unwrap();
        let rc = refs(&a);
        let flipped = np.call_method1("flip", (&a, 0)).unwrap();
        assert_eq!(refs(&a), rc + 1, "the flipped view's base");
        let nd = NdTensor::<f64, Ix2>::from_py(&flipped).unwrap();
        assert_eq!(nd.tensor().strides(), &[-4, 1]);
        assert_eq!(nd.view().unwrap()[[0, 0]], 8.0);
        drop(flipped);
        assert_eq!(
            refs(&a),
            rc + 1,
            "nd keeps the flipped view, which keeps `a`"
        );
        let sum: f64 = nd.view().unwrap().sum();
        assert_eq!(sum, 66.0);
        drop(nd);
        assert_eq!(refs(&a), rc, "dropping nd released the producer once");

        let e = NdTensor::<f64, Ix3>::from_py(&a).unwrap_err();
        assert!(
            e.is_instance_of::<pyo3::exceptions::PyBufferError>(py),
            "{e}"
        );
        let e = NdTensor::<f32, Ix2>::from_py(&a).unwrap_err();
        assert!(
            e.is_instance_of::<pyo3::exceptions::PyBufferError>(py),
            "{e}"
        );

        // A broadcast view may not be viewed mutably (two indices share an element).
        let b = np
            .getattr("broadcast_to")
            .unwrap()
            .call1((np.call_method1("ones", (3,)).unwrap(), (2, 3)))
            .unwrap();
        let mut t = dlbind::from_dlpack(&b, None, None).unwrap();
        assert_eq!(view::<f64, Ix2>(&t).unwrap().sum(), 6.0);
        // SAFETY: the test's only handle of this memory while the result lives.
        assert!(unsafe { view_mut::<f64, Ix2>(&mut t) }.is_err());
    });
}

#[test]
fn every_export_is_dropped_once() {
    let _g = common::serial();
    let base = live_rust_owned_tensors();
    let ts: Vec<_> = (0..5)
        .map(|k| export(Array::from_elem((k + 1, 2), k as u32)).unwrap())
        .collect();
    assert_eq!(live_rust_owned_tensors(), base + 5);
    // A refused view leaves the tensor as it was; an export that fails validation drops its
    // owner at once.
    assert!(view::<u32, Ix3>(&ts[0]).is_err());
    drop(ts);
    assert_eq!(live_rust_owned_tensors(), base);
}

#[test]
fn bool_views_are_refused_naming_the_ways_out() {
    let _g = common::serial();
    let b = Array2::from_shape_fn((2, 3), |(i, j)| (i + j) % 2 == 0);
    let mut t = export(b.clone().slice_move(s![.., ..;-1])).unwrap();
    let e = view::<bool, Ix2>(&t).unwrap_err();
    assert_eq!(e.kind(), FailureKind::UnsupportedDtype);
    assert!(
        e.message().starts_with("ndarray: bool elements borrowed"),
        "{e}"
    );
    assert!(e.message().contains("view::<u8, ndarray::Ix2>"), "{e}");
    assert!(e.message().contains("to_array"), "{e}");
    assert_eq!(e.kind().exception(), PyExceptionKind::BufferError);
    // SAFETY: the test's only handle of this memory (refused anyway).
    let e = unsafe { view_mut::<bool, Ix2>(&mut t) }.unwrap_err();
    assert!(e.message().starts_with("ndarray: bool"), "{e}");
    // The bytes, writable through u8 (any byte is a valid u8).
    // SAFETY: the test's only handle of this memory while the result lives.
    unsafe { view_mut::<u8, Ix2>(&mut t) }.unwrap()[[0, 0]] = 0;
    // The checked copy, from a negative-stride layout, in C order.
    let mut want = b.slice(s![.., ..;-1]).to_owned();
    want[[0, 0]] = false;
    assert_eq!(to_array::<bool, Ix2>(&t).unwrap(), want);
    assert_eq!(
        to_array::<bool, IxDyn>(&t).unwrap(),
        want.clone().into_dyn()
    );
    assert_eq!(
        to_array::<bool, Ix1>(&t).unwrap_err().kind(),
        FailureKind::UnsupportedLayout,
        "rank checked"
    );
    assert_eq!(
        to_array::<i8, Ix2>(&t).unwrap_err().kind(),
        FailureKind::UnsupportedDtype
    );
    // A byte other than 0/1, stored while the tensor lives (as Python code could): the copy
    // names it.
    // SAFETY: element (0, 2) (stride -1: two bytes below element 0) of the tensor's writable
    // memory; no borrow of it is alive.
    unsafe { t.data_ptr().cast::<u8>().sub(2).write(7) };
    let e = to_array::<bool, Ix2>(&t).unwrap_err();
    assert_eq!(e.kind(), FailureKind::MalformedTensor);
    assert_eq!(
        e.message(),
        "ndarray: bool element 2 (C order) holds the byte 7, wanted 0 or 1"
    );
}

#[test]
fn nd_tensor_of_bool_holds_a_checked_copy() {
    let _g = common::serial();
    let b = Array1::from(vec![true, false, true, true]);
    let t = export(b.clone()).unwrap();
    let p = t.data_ptr().cast::<u8>();
    let mut nd = NdTensor::<bool, Ix1>::new(t).unwrap();
    assert_eq!(nd.view().unwrap(), b);
    // The producer's memory changes (as Python code could change it): the copy does not, so
    // no view ever holds a byte other than 0/1.
    // SAFETY: byte 1 of the tensor's writable memory; no borrow of it is alive (the view above
    // is of the copy).
    unsafe { p.add(1).write(7) };
    assert_eq!(nd.view().unwrap(), b, "a snapshot");
    // SAFETY: the test's only handle of this memory (refused anyway).
    let e = unsafe { nd.view_mut() }.unwrap_err();
    assert_eq!(e.kind(), FailureKind::UnsupportedDtype);
    assert!(e.message().contains("u8"), "{e}");
    // The tensor itself is the producer's, with the new byte.
    assert_eq!(nd.tensor().as_slice::<u8>().unwrap(), &[1, 7, 1, 1]);
    // A new NdTensor checks the bytes.
    let e = NdTensor::<bool, Ix1>::new(nd.into_tensor()).unwrap_err();
    assert_eq!(e.kind(), FailureKind::MalformedTensor);
    assert!(e.message().contains("element 1"), "{e}");
}

/// For one element type: empty arrays (a 0 in each place) and a 0-d array go out as tensors
/// and come back (`view`, `NdTensor`, `to_array`) equal, for every array kind `export` takes.
fn empty_and_zero_d_both_ways<T>(x: T)
where
    T: DLPackElement + PartialEq + std::fmt::Debug,
{
    let lendable = T::DTYPE != bool::DTYPE;
    let shapes: [&[usize]; 6] = [&[0], &[0, 3], &[3, 0], &[2, 0, 4], &[0, 0], &[]];
    for shape in shapes {
        let a = ArrayD::<T>::from_elem(IxDyn(shape), x);
        let want: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
        let numel: usize = shape.iter().product();
        let check = |t: &ImportedTensor, what: &str| {
            assert_eq!(t.shape(), &want[..], "{} {what} {shape:?}", T::NAME);
            assert_eq!(t.dtype(), T::DTYPE);
            assert_eq!(t.numel(), numel);
            assert_eq!(to_array::<T, IxDyn>(t).unwrap(), a, "{} {what}", T::NAME);
            assert_eq!(
                t.to_vec::<T>().unwrap(),
                a.iter().cloned().collect::<Vec<_>>()
            );
            if lendable {
                assert_eq!(view::<T, IxDyn>(t).unwrap(), a, "{} {what}", T::NAME);
            } else {
                let e = view::<T, IxDyn>(t).unwrap_err();
                assert_eq!(e.kind(), FailureKind::UnsupportedDtype, "{e}");
                assert_eq!(view::<u8, IxDyn>(t).unwrap().len(), numel);
            }
        };
        let t = export(a.clone()).unwrap();
        check(&t, "Array");
        let nd = NdTensor::<T, IxDyn>::new(t).unwrap();
        assert_eq!(nd.view().unwrap(), a);
        let shared = a.clone().into_shared();
        let t = export(shared.clone()).unwrap();
        assert!(t.readonly(), "shared ArcArray");
        check(&t, "ArcArray");
        drop(t);
        let t = export(CowArray::from(a.view())).unwrap();
        assert!(t.is_copied(), "borrowing CowArray");
        check(&t, "CowArray");
    }
    // Fixed dimensions: an empty Ix2 and a 0-d Ix0.
    let e2 = Array2::<T>::from_elem((0, 5), x);
    let t = export(e2.clone()).unwrap();
    assert_eq!(to_array::<T, Ix2>(&t).unwrap(), e2);
    let z = ndarray_zero_d(x);
    let t = export(z.clone()).unwrap();
    assert_eq!((t.shape(), t.strides()), (&[][..], &[][..]));
    assert_eq!(
        to_array::<T, dlbind::adapters::ndarray::ndarray::Ix0>(&t).unwrap(),
        z
    );
    if lendable {
        assert_eq!(
            view::<T, dlbind::adapters::ndarray::ndarray::Ix0>(&t).unwrap()[()],
            x
        );
    }
}

fn ndarray_zero_d<T: Copy>(x: T) -> dlbind::adapters::ndarray::ndarray::Array0<T> {
    dlbind::adapters::ndarray::ndarray::arr0(x)
}

#[test]
fn empty_and_zero_d_arrays_of_every_element_type_go_both_ways() {
    let _g = common::serial();
    let base = live_rust_owned_tensors();
    empty_and_zero_d_both_ways(true);
    empty_and_zero_d_both_ways(-3i8);
    empty_and_zero_d_both_ways(-3i16);
    empty_and_zero_d_both_ways(-3i32);
    empty_and_zero_d_both_ways(-3i64);
    empty_and_zero_d_both_ways(3u8);
    empty_and_zero_d_both_ways(3u16);
    empty_and_zero_d_both_ways(3u32);
    empty_and_zero_d_both_ways(3u64);
    empty_and_zero_d_both_ways(half::f16::from_f32(1.5));
    empty_and_zero_d_both_ways(half::bf16::from_f32(1.5));
    empty_and_zero_d_both_ways(1.5f32);
    empty_and_zero_d_both_ways(1.5f64);
    empty_and_zero_d_both_ways(Complex::new(1.0f32, -2.0));
    empty_and_zero_d_both_ways(Complex::new(1.0f64, -2.0));
    empty_and_zero_d_both_ways(Complex::new(
        half::bf16::from_f32(1.0),
        half::bf16::from_f32(-2.0),
    ));
    assert_eq!(live_rust_owned_tensors(), base, "every owner dropped once");
}
