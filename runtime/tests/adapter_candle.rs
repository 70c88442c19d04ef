//! The candle adapter (`dlbind::adapters::candle`, feature `candle`) against candle-core: CPU
//! tensors export as copies dlbind owns (in-place candle writes afterwards do not reach them),
//! or through the `unsafe` view as read-only views of their storage (offsets, transposes,
//! broadcasts kept as strides); imports build candle tensors from a copy; empty and 0-d tensors
//! of every dtype go both ways; bad dtypes and devices are typed errors, and every exported
//! tensor's deleter runs exactly once.
#![cfg(feature = "candle")]

mod common;

use std::ffi::c_void;

use candle_core::{DType, Device as CDevice, IndexOp, Tensor, Var};
use dlbind::adapters::candle::{CandleTensor, to_candle};
use dlbind::alloc::AlignedBuffer;
use dlbind::export::{DLPackSource, ExportRequest, export_to_capsule};
use dlbind::prelude::*;
use dlbind::spec::dtypes::dtype_by_name;
use dlbind::spec::errors::FailureKind;
use dlbind::stats::live_exports;

/// Every dtype the adapter carries, with its spec name.
const DTYPES: [(DType, &str); 11] = [
    (DType::U8, "uint8"),
    (DType::U32, "uint32"),
    (DType::I16, "int16"),
    (DType::I32, "int32"),
    (DType::I64, "int64"),
    (DType::BF16, "bfloat16"),
    (DType::F16, "float16"),
    (DType::F32, "float32"),
    (DType::F64, "float64"),
    (DType::F8E4M3, "float8_e4m3fn"),
    (DType::F8E8M0, "float8_e8m0fnu"),
];

/// The elements of an f32 source through its shape and strides, in C order.
fn read_f32<S: DLPackSource>(src: &S) -> Vec<f32> {
    let n = src.dlpack_ndim();
    let (mut shape, mut strides) = (vec![0i64; n], vec![0i64; n]);
    src.dlpack_fill_shape(&mut shape);
    assert!(src.dlpack_fill_strides(&mut strides));
    let base = src.dlpack_data_ptr().cast::<f32>();
    let total: i64 = shape.iter().product();
    (0..total)
        .map(|flat| {
            let (mut rem, mut off) = (flat, 0i64);
            for d in (0..n).rev() {
                off += (rem % shape[d]) * strides[d];
                rem /= shape[d];
            }
            // SAFETY: `off` addresses an element of the source's layout.
            unsafe { *base.offset(off as isize) }
        })
        .collect()
}

fn storage_ptr(t: &Tensor) -> *const c_void {
    let (s, _) = t.storage_and_layout();
    match &*s {
        candle_core::Storage::Cpu(candle_core::CpuStorage::F32(v)) => v.as_ptr().cast(),
        _ => panic!("an f32 CPU tensor"),
    }
}

/// The bytes of a candle tensor's elements in C order, read from its storage (no candle
/// conversion: candle's `to_dtype` crashes on f8e4m3).
fn bytes_of(t: &Tensor) -> Vec<u8> {
    fn raw<T>(v: &[T]) -> &[u8] {
        // SAFETY: the element types candle stores have no padding, so every byte of the
        // initialised slice is initialised; the byte slice borrows `v`.
        unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
    }
    use candle_core::CpuStorage as S;
    let t = t.contiguous().unwrap();
    let (s, l) = t.storage_and_layout();
    let candle_core::Storage::Cpu(cpu) = &*s else {
        panic!("a CPU tensor")
    };
    let all = match cpu {
        S::U8(v) | S::F6E2M3(v) | S::F6E3M2(v) | S::F4(v) | S::F8E8M0(v) => raw(v),
        S::U32(v) => raw(v),
        S::I16(v) => raw(v),
        S::I32(v) => raw(v),
        S::I64(v) => raw(v),
        S::BF16(v) => raw(v),
        S::F16(v) => raw(v),
        S::F32(v) => raw(v),
        S::F64(v) => raw(v),
        S::F8E4M3(v) => raw(v),
    };
    let elem = t.dtype().size_in_bytes();
    let start = l.start_offset() * elem;
    all[start..start + t.elem_count() * elem].to_vec()
}

/// The bytes a source's C-contiguous memory holds (`n` elements of `elem` bytes).
fn exported_bytes<S: DLPackSource>(src: &S, nbytes: usize) -> Vec<u8> {
    if nbytes == 0 {
        return Vec::new();
    }
    // SAFETY: the source is C-contiguous over at least `nbytes` bytes from element 0.
    unsafe { std::slice::from_raw_parts(src.dlpack_data_ptr().cast::<u8>(), nbytes) }.to_vec()
}

fn arange(n: usize) -> Tensor {
    Tensor::arange(0f32, n as f32, &CDevice::Cpu).unwrap()
}

fn c_strides(shape: &[i64]) -> Vec<i64> {
    let mut s = vec![1i64; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1].max(1);
    }
    s
}

// ---------------------------------------------------------------------------------------------
// The copy (`from_tensor`)

#[test]
fn from_tensor_is_a_writable_copy_dlbind_owns() {
    let t = arange(6).reshape((2, 3)).unwrap();
    let e = CandleTensor::from_tensor(&t).unwrap();
    assert!(e.is_copied());
    assert_ne!(e.dlpack_data_ptr().cast_const(), storage_ptr(&t), "a copy");
    assert_eq!((e.shape(), e.strides()), (&[2i64, 3][..], &[3i64, 1][..]));
    assert_eq!(e.dtype(), f32::DTYPE);
    assert!(
        !e.readonly() && !e.dlpack_readonly(),
        "the copy belongs to the export"
    );
    assert_eq!(read_f32(&e), vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    let buf = e.into_buffer();
    assert_eq!(buf.storage_kind(), "owned");
    assert!(!buf.readonly());
}

#[test]
fn in_place_candle_writes_do_not_reach_the_copy() {
    // zero_set / const_set on the exported tensor.
    let t = arange(6).reshape((2, 3)).unwrap();
    let e = CandleTensor::from_tensor(&t).unwrap();
    t.zero_set().unwrap();
    assert_eq!(
        t.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
        vec![0.0; 6],
        "candle wrote its storage"
    );
    assert_eq!(read_f32(&e), vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    t.const_set(7f32.into()).unwrap();
    assert_eq!(read_f32(&e), vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);

    // A write through another tensor sharing the storage (a row of it).
    let t = arange(12).reshape((3, 4)).unwrap();
    let e = CandleTensor::from_tensor(&t.t().unwrap()).unwrap();
    t.i(1).unwrap().one_set().unwrap();
    assert_eq!(t.i(1).unwrap().to_vec1::<f32>().unwrap(), vec![1.0; 4]);
    let want: Vec<f32> = arange(12)
        .reshape((3, 4))
        .unwrap()
        .t()
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap();
    assert_eq!(read_f32(&e), want);

    // slice_set.
    let t = Tensor::zeros((2, 3), DType::F32, &CDevice::Cpu).unwrap();
    let e = CandleTensor::from_tensor(&t).unwrap();
    t.slice_set(
        &Tensor::ones((1, 3), DType::F32, &CDevice::Cpu).unwrap(),
        0,
        1,
    )
    .unwrap();
    assert_eq!(t.sum_all().unwrap().to_scalar::<f32>().unwrap(), 3.0);
    assert_eq!(read_f32(&e), vec![0.0; 6]);

    // Var::set, what an optimizer step does.
    let v = Var::from_tensor(&arange(4)).unwrap();
    let e = CandleTensor::from_tensor(v.as_tensor()).unwrap();
    v.set(&Tensor::full(9f32, 4, &CDevice::Cpu).unwrap())
        .unwrap();
    assert_eq!(v.as_tensor().to_vec1::<f32>().unwrap(), vec![9.0; 4]);
    assert_eq!(read_f32(&e), vec![0.0, 1.0, 2.0, 3.0]);
}

#[test]
fn copies_of_any_layout_are_c_contiguous() {
    let t = arange(12).reshape((3, 4)).unwrap();
    let cases = [
        t.t().unwrap(),
        t.i(2).unwrap(),
        t.narrow(1, 1, 2).unwrap(),
        arange(3).broadcast_as((2, 3)).unwrap(),
        t.t().unwrap().broadcast_as((2, 4, 3)).unwrap(),
    ];
    for c in cases {
        let e = CandleTensor::from_tensor(&c).unwrap();
        let dims: Vec<i64> = c.dims().iter().map(|&d| d as i64).collect();
        assert_eq!(e.shape(), dims);
        assert_eq!(e.strides(), c_strides(&dims), "{:?}", c.layout());
        let want: Vec<f32> = c.flatten_all().unwrap().to_vec1().unwrap();
        assert_eq!(read_f32(&e), want, "{:?}", c.layout());
    }
}

#[test]
fn the_copy_outlives_the_tensor() {
    let t = arange(1000);
    let e = CandleTensor::from_tensor(&t).unwrap();
    drop(t);
    let v = read_f32(&e);
    assert_eq!((v[0], v[999]), (0.0, 999.0));
}

// ---------------------------------------------------------------------------------------------
// The view (`unsafe view_unchecked`)

#[test]
fn view_unchecked_is_a_read_only_view_of_the_storage() {
    let t = arange(6).reshape((2, 3)).unwrap();
    // SAFETY: nothing writes `t`'s storage while `e` and its buffer live.
    let e = unsafe { CandleTensor::view_unchecked(&t) }.unwrap();
    assert!(!e.is_copied());
    assert_eq!(e.dlpack_data_ptr().cast_const(), storage_ptr(&t));
    assert_eq!((e.shape(), e.strides()), (&[2i64, 3][..], &[3i64, 1][..]));
    assert_eq!(e.dtype(), f32::DTYPE);
    assert!(e.readonly() && e.dlpack_readonly());
    assert_eq!(read_f32(&e), vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    let buf = e.into_buffer();
    assert_eq!(buf.storage_kind(), "kept");
    assert!(buf.readonly());
    assert_eq!(buf.data_ptr().cast_const(), storage_ptr(&t));
}

#[test]
fn view_layouts_become_strides_and_offsets() {
    let t = arange(12).reshape((3, 4)).unwrap();
    // Transposed: strides (1, 4).
    let tt = t.t().unwrap();
    // SAFETY: nothing writes `t`'s storage in this test (the same below).
    let e = unsafe { CandleTensor::view_unchecked(&tt) }.unwrap();
    assert_eq!((e.shape(), e.strides()), (&[4i64, 3][..], &[1i64, 4][..]));
    let want: Vec<f32> = tt.flatten_all().unwrap().to_vec1().unwrap();
    assert_eq!(read_f32(&e), want);
    // A row: a start offset.
    let row = t.i(2).unwrap();
    // SAFETY: as above.
    let e = unsafe { CandleTensor::view_unchecked(&row) }.unwrap();
    assert_eq!(
        e.dlpack_data_ptr().cast_const(),
        storage_ptr(&t).wrapping_byte_add(32)
    );
    assert_eq!(read_f32(&e), vec![8.0, 9.0, 10.0, 11.0]);
    // A broadcast: a zero stride.
    let b = arange(3).broadcast_as((2, 3)).unwrap();
    // SAFETY: nothing writes `b`'s storage in this test.
    let e = unsafe { CandleTensor::view_unchecked(&b) }.unwrap();
    assert_eq!(e.strides(), &[0, 1]);
    assert_eq!(read_f32(&e), vec![0.0, 1.0, 2.0, 0.0, 1.0, 2.0]);
}

#[test]
fn the_view_keeps_the_storage_alive() {
    let t = arange(1000);
    // SAFETY: `t` is dropped below, so the view's clone is the storage's only handle.
    let e = unsafe { CandleTensor::view_unchecked(&t) }.unwrap();
    let p = storage_ptr(&t);
    drop(t);
    assert_eq!(e.dlpack_data_ptr().cast_const(), p);
    let v = read_f32(&e);
    assert_eq!((v[0], v[999]), (0.0, 999.0));
}

// ---------------------------------------------------------------------------------------------
// Dtypes, empty and 0-d tensors

#[test]
fn dtypes_map_to_the_spec() {
    for (dt, name) in DTYPES {
        // Raw bytes (candle's `to_dtype` crashes on f8e4m3 and cannot make f8e8m0).
        let n = 4 * dt.size_in_bytes();
        let raw: Vec<u8> = (1..=n as u8).collect();
        let t = Tensor::from_raw_buffer(&raw, dt, &[4], &CDevice::Cpu).unwrap();
        let e = CandleTensor::from_tensor(&t).unwrap();
        assert_eq!(e.dtype(), dtype_by_name(name).unwrap().dtype, "{dt:?}");
        assert_eq!(exported_bytes(&e, n), raw, "{dt:?}");
        // SAFETY: nothing writes `t`'s storage in this test.
        let v = unsafe { CandleTensor::view_unchecked(&t) }.unwrap();
        assert_eq!(v.dtype(), e.dtype());
        // And back: the same dtype and bytes.
        let imported = ImportedTensor::from_buffer(
            {
                let b = AlignedBuffer::zeroed(n).unwrap();
                // SAFETY: `n` bytes of the export (C-contiguous) into a fresh buffer.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        e.dlpack_data_ptr().cast::<u8>(),
                        b.as_mut_ptr(),
                        n,
                    )
                };
                b
            },
            &[4],
            e.dtype(),
        )
        .unwrap();
        let c = to_candle(&imported).unwrap();
        assert_eq!(c.dtype(), dt);
        assert_eq!(bytes_of(&c), raw, "{dt:?}");
    }
}

/// A candle export owned by a Python object (what a `#[pyclass]` field would hold).
#[pyclass(frozen)]
struct Holder(CandleTensor);

const VERSIONED: ExportRequest = ExportRequest {
    max_version: Some((1, 3)),
    ..ExportRequest::DEFAULT
};

#[cfg_attr(miri, ignore = "calls Python, which Miri cannot run")]
#[test]
fn empty_and_0d_tensors_of_every_dtype_go_both_ways() {
    let _g = common::serial();
    let shapes: [&[usize]; 6] = [&[], &[0], &[2, 0, 3], &[0, 0], &[3, 0], &[1]];
    Python::attach(|py| {
        let base = live_exports();
        for (dt, _) in DTYPES {
            let elem = dt.size_in_bytes();
            for &shape in &shapes {
                let numel: usize = shape.iter().product();
                let raw: Vec<u8> = (0..numel * elem).map(|i| (i % 200) as u8 + 1).collect();
                let t = Tensor::from_raw_buffer(&raw, dt, shape, &CDevice::Cpu).unwrap();
                let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
                let what = format!("{dt:?} {shape:?}");
                // SAFETY: nothing writes `t`'s storage in this test.
                let view = unsafe { CandleTensor::view_unchecked(&t) }.unwrap();
                for e in [CandleTensor::from_tensor(&t).unwrap(), view] {
                    assert_eq!(e.shape(), dims, "{what}");
                    if e.is_copied() {
                        assert_eq!(e.strides(), c_strides(&dims), "{what}");
                    }
                    assert_eq!(exported_bytes(&e, numel * elem), raw, "{what}");
                    // DLPack -> candle, through a capsule.
                    let copied = e.is_copied();
                    let holder = Bound::new(py, Holder(e)).unwrap();
                    let cap = export_to_capsule(holder.as_any(), &holder.get().0, &VERSIONED)
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                    let imported = ImportedTensor::from_capsule(cap.bind(py)).unwrap();
                    assert_eq!(imported.shape(), dims, "{what}");
                    assert_eq!(imported.readonly(), !copied, "{what}");
                    let c = to_candle(&imported).unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert_eq!((c.dtype(), c.dims()), (dt, shape), "{what}");
                    assert_eq!(bytes_of(&c), raw, "{what}");
                    drop(imported);
                }
            }
        }
        assert_eq!(live_exports(), base, "every deleter ran");
    });
}

#[cfg_attr(miri, ignore = "calls Python, which Miri cannot run")]
#[test]
fn empty_views_at_the_end_of_the_storage_and_transposed_export() {
    let _g = common::serial();
    let t = arange(4);
    let end = t.narrow(0, 4, 0).unwrap();
    let tt = Tensor::zeros((0, 3), DType::F32, &CDevice::Cpu)
        .unwrap()
        .t()
        .unwrap();
    Python::attach(|py| {
        for c in [end, tt] {
            // SAFETY: nothing writes the storage in this test.
            let view = unsafe { CandleTensor::view_unchecked(&c) }.unwrap();
            assert_eq!(view.strides().len(), c.rank());
            for e in [CandleTensor::from_tensor(&c).unwrap(), view] {
                assert_eq!(read_f32(&e), Vec::<f32>::new());
                let holder = Bound::new(py, Holder(e)).unwrap();
                let cap = export_to_capsule(holder.as_any(), &holder.get().0, &VERSIONED).unwrap();
                let imported = ImportedTensor::from_capsule(cap.bind(py)).unwrap();
                assert_eq!(imported.numel(), 0);
                let back = to_candle(&imported).unwrap();
                assert_eq!(back.dims(), c.dims());
            }
        }
    });
}

// ---------------------------------------------------------------------------------------------
// Capsules, errors

#[cfg_attr(miri, ignore = "calls Python, which Miri cannot run")]
#[test]
fn round_trip_through_a_capsule_copies_on_import_and_releases_once() {
    let _g = common::serial();
    Python::attach(|py| {
        let base = live_exports();
        let t = arange(24)
            .reshape((2, 3, 4))
            .unwrap()
            .transpose(1, 2)
            .unwrap();
        let want: Vec<f32> = t.flatten_all().unwrap().to_vec1().unwrap();
        // SAFETY: nothing writes `t`'s storage in this test.
        let view = unsafe { CandleTensor::view_unchecked(&t) }.unwrap();
        for (e, strides) in [
            (CandleTensor::from_tensor(&t).unwrap(), [12, 3, 1]),
            (view, [12, 1, 4]),
        ] {
            let copied = e.is_copied();
            let holder = Bound::new(py, Holder(e)).unwrap();
            let cap = export_to_capsule(holder.as_any(), &holder.get().0, &VERSIONED).unwrap();
            let imported = ImportedTensor::from_capsule(cap.bind(py)).unwrap();
            assert_eq!(
                imported.readonly(),
                !copied,
                "a view is read-only, a copy is not"
            );
            assert_eq!(imported.strides(), &strides);
            assert_eq!(live_exports(), base + 1);
            let c = to_candle(&imported).unwrap();
            assert_eq!(c.dims(), &[2, 4, 3]);
            assert!(c.is_contiguous());
            assert_ne!(storage_ptr(&c), imported.data_ptr().cast_const(), "a copy");
            assert_eq!(c.flatten_all().unwrap().to_vec1::<f32>().unwrap(), want);
            drop(imported);
            assert_eq!(live_exports(), base, "the deleter ran once");
            // The candle tensor owns its copy.
            assert_eq!(c.flatten_all().unwrap().to_vec1::<f32>().unwrap(), want);
            // Legacy capsules cannot say read-only: the copy leaves as it is, the read-only view
            // as a private copy under copy=None, and not at all under copy=False.
            let source_ptr = holder.get().0.dlpack_data_ptr();
            let cap = export_to_capsule(holder.as_any(), &holder.get().0, &ExportRequest::DEFAULT)
                .unwrap();
            let imported = ImportedTensor::from_capsule(cap.bind(py)).unwrap();
            assert_eq!(
                imported.data_ptr() == source_ptr,
                copied,
                "the copy is lent as it is, the view never is"
            );
            let c = to_candle(&imported).unwrap();
            assert_eq!(c.flatten_all().unwrap().to_vec1::<f32>().unwrap(), want);
            drop(imported);
            let no_copy = ExportRequest {
                copy: Some(false),
                ..ExportRequest::DEFAULT
            };
            match export_to_capsule(holder.as_any(), &holder.get().0, &no_copy) {
                Ok(_) => assert!(copied, "only the copy leaves with copy=False"),
                Err(e) => {
                    assert!(!copied, "{e}");
                    assert!(
                        e.is_instance_of::<pyo3::exceptions::PyBufferError>(py),
                        "{e}"
                    );
                }
            }
            assert_eq!(live_exports(), base);
        }
    });
}

#[test]
fn sub_byte_floats_are_refused_on_export() {
    let t = Tensor::from_raw_buffer(&[0u8; 4], DType::F4, &[4], &CDevice::Cpu).unwrap();
    let e = CandleTensor::from_tensor(&t).unwrap_err();
    assert_eq!(e.kind(), FailureKind::UnsupportedDtype);
    assert!(e.message().contains("F4"), "{e}");
    // SAFETY: nothing writes `t`'s storage (and no view is made).
    let e = unsafe { CandleTensor::view_unchecked(&t) }.unwrap_err();
    assert_eq!(e.kind(), FailureKind::UnsupportedDtype);
}

#[cfg_attr(miri, ignore = "calls Python, which Miri cannot run")]
#[test]
fn import_refuses_dtypes_candle_lacks_and_device_memory() {
    for name in ["bool", "int8", "uint16", "uint64", "complex64"] {
        let d = dtype_by_name(name).unwrap().dtype;
        let t = ImportedTensor::from_buffer(AlignedBuffer::zeroed(64).unwrap(), &[2], d).unwrap();
        let e = to_candle(&t).unwrap_err();
        assert_eq!(e.kind(), FailureKind::UnsupportedDtype, "{name}");
        assert!(e.message().contains(name), "{e}");
    }
    let _g = common::serial();
    Python::attach(|py| {
        // A CUDA tensor (never dereferenced): a zero-copy export needs no runtime.
        let holder = Bound::new(py, Dev).unwrap();
        let req = ExportRequest {
            stream: Some(-1),
            ..VERSIONED
        };
        let cap = export_to_capsule(holder.as_any(), holder.get(), &req).unwrap();
        let t = ImportedTensor::from_capsule(cap.bind(py)).unwrap();
        let e = to_candle(&t).unwrap_err();
        assert_eq!(e.kind(), FailureKind::UnsupportedDevice);
        assert!(e.message().contains("CPU"), "{e}");
    });
}

/// Four f32s "on" CUDA device 0 at a made-up address.
#[pyclass(frozen)]
struct Dev;

// SAFETY: the address is only handed to consumers that check the device and never read it.
unsafe impl DLPackSource for Dev {
    fn dlpack_data_ptr(&self) -> *mut c_void {
        0x1000 as *mut c_void
    }
    fn dlpack_dtype(&self) -> DLDataType {
        f32::DTYPE
    }
    fn dlpack_ndim(&self) -> usize {
        1
    }
    fn dlpack_fill_shape(&self, out: &mut [i64]) {
        out[0] = 4;
    }
    fn dlpack_device(&self) -> Device {
        Device::cuda(0)
    }
}
