//! The candle adapter (`dlbind::adapters::candle`, feature `candle`) against candle-core: CPU
//! tensors export as read-only views of their storage (offsets, transposes, broadcasts kept as
//! strides), imports build candle tensors from a copy, bad dtypes and devices are typed errors,
//! and every exported tensor's deleter runs exactly once.
#![cfg(feature = "candle")]

mod common;

use std::ffi::c_void;

use candle_core::{DType, Device as CDevice, IndexOp, Tensor};
use dlbind::adapters::candle::{CandleTensor, to_candle};
use dlbind::alloc::AlignedBuffer;
use dlbind::export::{DLPackSource, ExportRequest, export_to_capsule};
use dlbind::prelude::*;
use dlbind::spec::dtypes::dtype_by_name;
use dlbind::spec::errors::FailureKind;
use dlbind::stats::live_exports;

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

fn arange(n: usize) -> Tensor {
    Tensor::arange(0f32, n as f32, &CDevice::Cpu).unwrap()
}

#[test]
fn cpu_tensor_is_a_read_only_view_of_its_storage() {
    let t = arange(6).reshape((2, 3)).unwrap();
    let e = CandleTensor::from_tensor(&t).unwrap();
    assert_eq!(e.dlpack_data_ptr().cast_const(), storage_ptr(&t));
    assert_eq!((e.shape(), e.strides()), (&[2i64, 3][..], &[3i64, 1][..]));
    assert_eq!(e.dtype(), f32::DTYPE);
    assert!(e.dlpack_readonly());
    assert_eq!(e.dlpack_data_bytes(), Some(24));
    assert_eq!(read_f32(&e), vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
    let buf = e.into_buffer();
    assert!(buf.readonly());
    assert_eq!(buf.data_ptr().cast_const(), storage_ptr(&t));
}

#[test]
fn layouts_become_strides_and_offsets() {
    let t = arange(12).reshape((3, 4)).unwrap();
    // Transposed: strides (1, 4).
    let tt = t.t().unwrap();
    let e = CandleTensor::from_tensor(&tt).unwrap();
    assert_eq!((e.shape(), e.strides()), (&[4i64, 3][..], &[1i64, 4][..]));
    let want: Vec<f32> = tt.flatten_all().unwrap().to_vec1().unwrap();
    assert_eq!(read_f32(&e), want);
    // A row: a start offset.
    let row = t.i(2).unwrap();
    let e = CandleTensor::from_tensor(&row).unwrap();
    assert_eq!(
        e.dlpack_data_ptr().cast_const(),
        storage_ptr(&t).wrapping_byte_add(32)
    );
    assert_eq!(read_f32(&e), vec![8.0, 9.0, 10.0, 11.0]);
    assert_eq!(e.dlpack_data_bytes(), Some(16));
    // A broadcast: a zero stride.
    let b = arange(3).broadcast_as((2, 3)).unwrap();
    let e = CandleTensor::from_tensor(&b).unwrap();
    assert_eq!(e.strides(), &[0, 1]);
    assert_eq!(read_f32(&e), vec![0.0, 1.0, 2.0, 0.0, 1.0, 2.0]);
}

#[test]
fn the_export_keeps_the_storage_alive() {
    let t = arange(1000);
    let e = CandleTensor::from_tensor(&t).unwrap();
    drop(t);
    let v = read_f32(&e);
    assert_eq!((v[0], v[999]), (0.0, 999.0));
}

#[test]
fn dtypes_map_to_the_spec() {
    let cases: [(DType, &str); 9] = [
        (DType::U8, "uint8"),
        (DType::U32, "uint32"),
        (DType::I16, "int16"),
        (DType::I32, "int32"),
        (DType::I64, "int64"),
        (DType::BF16, "bfloat16"),
        (DType::F16, "float16"),
        (DType::F64, "float64"),
        (DType::F8E4M3, "float8_e4m3fn"),
    ];
    for (dt, name) in cases {
        let t = arange(4).to_dtype(dt).unwrap();
        let e = CandleTensor::from_tensor(&t).unwrap();
        assert_eq!(e.dtype(), dtype_by_name(name).unwrap().dtype, "{dt:?}");
        // And back: the same dtype and values.
        let imported = ImportedTensor::from_buffer(
            {
                let n = 4 * dt.size_in_bytes();
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
        );
        let c = to_candle(&imported).unwrap();
        assert_eq!(c.dtype(), dt);
        let back: Vec<f32> = c.to_dtype(DType::F32).unwrap().to_vec1().unwrap();
        assert_eq!(back, vec![0.0, 1.0, 2.0, 3.0], "{dt:?}");
    }
}

/// A candle export owned by a Python object (what a `#[pyclass]` field would hold).
#[pyclass(frozen)]
struct Holder(CandleTensor);

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
        let holder = Bound::new(py, Holder(CandleTensor::from_tensor(&t).unwrap())).unwrap();
        let req = ExportRequest {
            max_version: Some((1, 3)),
            ..ExportRequest::DEFAULT
        };
        let cap = export_to_capsule(holder.as_any(), &holder.get().0, &req).unwrap();
        let imported = ImportedTensor::from_capsule(cap.bind(py)).unwrap();
        assert!(imported.readonly(), "candle exports are read-only");
        assert_eq!(imported.strides(), &[12, 1, 4]);
        assert_eq!(live_exports(), base + 1);
        let c = to_candle(&imported).unwrap();
        assert_eq!(c.dims(), &[2, 4, 3]);
        assert!(c.is_contiguous());
        assert_ne!(storage_ptr(&c), imported.data_ptr().cast_const(), "a copy");
        let want: Vec<f32> = t.flatten_all().unwrap().to_vec1().unwrap();
        assert_eq!(c.flatten_all().unwrap().to_vec1::<f32>().unwrap(), want);
        drop(imported);
        assert_eq!(live_exports(), base, "the deleter ran once");
        // The candle tensor owns its copy.
        assert_eq!(c.flatten_all().unwrap().to_vec1::<f32>().unwrap(), want);
        // Legacy capsules are refused for read-only data (DLPack cannot say read-only there).
        let e = export_to_capsule(holder.as_any(), &holder.get().0, &ExportRequest::DEFAULT)
            .unwrap_err();
        assert!(
            e.is_instance_of::<pyo3::exceptions::PyBufferError>(py),
            "{e}"
        );
        assert_eq!(live_exports(), base);
    });
}

#[test]
fn sub_byte_floats_are_refused_on_export() {
    let t = Tensor::from_raw_buffer(&[0u8; 4], DType::F4, &[4], &CDevice::Cpu).unwrap();
    let e = CandleTensor::from_tensor(&t).unwrap_err();
    assert_eq!(e.kind(), FailureKind::UnsupportedDtype);
    assert!(e.message().contains("F4"), "{e}");
}

#[test]
fn import_refuses_dtypes_candle_lacks_and_device_memory() {
    for name in ["bool", "int8", "uint16", "uint64", "complex64"] {
        let d = dtype_by_name(name).unwrap().dtype;
        let t = ImportedTensor::from_buffer(AlignedBuffer::zeroed(64).unwrap(), &[2], d);
        let e = to_candle(&t).unwrap_err();
        assert_eq!(e.kind(), FailureKind::UnsupportedDtype, "{name}");
        assert!(e.message().contains(name), "{e}");
    }
    let _g = common::serial();
    Python::attach(|py| {
        // A CUDA tensor (never dereferenced): a zero-copy export needs no runtime.
        let holder = Bound::new(py, Dev).unwrap();
        let req = ExportRequest {
            max_version: Some((1, 3)),
            stream: Some(-1),
            ..ExportRequest::DEFAULT
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
