//! The cudarc adapter (`dlbind::adapters::cudarc`, feature `cudarc`): on the recording fake
//! runtime, the exact stream handshake of an export (an event recorded on the slice's stream,
//! waited on by the consumer's), device copies and frees, the import's `stream=` handshake
//! through `__dlpack__`, and typed errors for bad layouts and devices. On a real GPU (skipped
//! with a message without a driver): a `CudaSlice` exported, imported back as a `CudaView` and
//! read.
#![cfg(feature = "cudarc")]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use dlbind::adapters::cudarc::{CudaTensor, ImportedSlice, import_on_stream};
use dlbind::export::{DLPackSource, ExportRequest, export_to_capsule_on};
use dlbind::gpu::cuda::CudaRuntime;
use dlbind::gpu::fake::{Call, FakeRuntime};
use dlbind::gpu::{DeviceRuntime, StreamHandle};
use dlbind::prelude::*;
use dlbind::spec::errors::FailureKind;
use dlbind::stats::live_exports;
use pyo3::exceptions::{PyBufferError, PyValueError};

const PTR: u64 = 0x7000_0000;
const PRODUCER: StreamHandle = StreamHandle(0x55);
const CONSUMER: StreamHandle = StreamHandle(0x77);

/// Counts drops of the owner a tensor keeps (the stand-in for a `CudaSlice`).
struct Owner(Arc<AtomicUsize>);
impl Drop for Owner {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

fn tensor(drops: &Arc<AtomicUsize>, shape: &[i64], strides: Option<&[i64]>) -> CudaTensor {
    // SAFETY: the fake runtime never touches the memory; nothing is freed.
    unsafe {
        CudaTensor::from_device_ptr(
            Owner(Arc::clone(drops)),
            PTR,
            24,
            Device::cuda(0),
            Some(PRODUCER),
            f32::DTYPE,
            shape,
            strides,
        )
    }
    .unwrap()
}

/// A Python object owning a `CudaTensor`, exporting through the fake runtime.
#[pyclass(frozen)]
struct Holder(CudaTensor);

fn fake() -> &'static Arc<FakeRuntime> {
    static FAKE: OnceLock<Arc<FakeRuntime>> = OnceLock::new();
    FAKE.get_or_init(|| Arc::new(FakeRuntime::new()))
}

#[pymethods]
impl Holder {
    /// `__dlpack__` through the fake runtime (the derive's would use the real one).
    #[pyo3(signature = (*, stream=None, max_version=None))]
    fn __dlpack__(
        slf: &Bound<'_, Self>,
        stream: Option<i64>,
        max_version: Option<(i64, i64)>,
    ) -> PyResult<Py<PyAny>> {
        let req = ExportRequest {
            stream,
            max_version,
            ..ExportRequest::DEFAULT
        };
        let rt: Arc<dyn DeviceRuntime> = fake().clone();
        export_to_capsule_on(slf.as_any(), &slf.get().0, &req, &rt)
    }
    fn __dlpack_device__(&self) -> (i32, i32) {
        self.0.dlpack_device().to_tuple()
    }
}

fn event_calls(calls: &[Call]) -> Vec<(&'static str, StreamHandle)> {
    calls
        .iter()
        .filter_map(|c| match c {
            Call::RecordEvent { stream, .. } => Some(("record", *stream)),
            Call::WaitEvent { stream, .. } => Some(("wait", *stream)),
            _ => None,
        })
        .collect()
}

#[test]
fn export_orders_the_consumer_stream_after_the_slice_stream() {
    let _g = common::serial();
    let _ = fake().take_calls();
    Python::attach(|py| {
        let base = live_exports();
        let drops = Arc::new(AtomicUsize::new(0));
        let obj = Bound::new(py, Holder(tensor(&drops, &[2, 3], None))).unwrap();
        let imported = |stream: Option<i64>| {
            let kw = pyo3::types::PyDict::new(py);
            kw.set_item("stream", stream).unwrap();
            kw.set_item("max_version", (1, 3)).unwrap();
            let cap = obj.call_method("__dlpack__", (), Some(&kw)).unwrap();
            ImportedTensor::from_capsule(&cap).unwrap()
        };
        let t = imported(Some(CONSUMER.0 as i64));
        assert_eq!(t.device(), Device::cuda(0));
        assert_eq!(t.data_ptr() as u64, PTR);
        assert_eq!((t.shape(), t.strides()), (&[2i64, 3][..], &[3i64, 1][..]));
        let calls = fake().take_calls();
        assert_eq!(
            event_calls(&calls),
            vec![("record", PRODUCER), ("wait", CONSUMER)]
        );
        assert!(calls.iter().any(|c| matches!(c, Call::DestroyEvent { .. })));
        assert!(
            !calls
                .iter()
                .any(|c| matches!(c, Call::SynchronizeStream { .. })),
            "no host sync"
        );
        drop(t);
        // stream=None on CUDA is the legacy default stream; -1 orders nothing; the producer's
        // own stream needs no event.
        drop(imported(None));
        assert_eq!(
            event_calls(&fake().take_calls()),
            vec![("record", PRODUCER), ("wait", StreamHandle::LEGACY)]
        );
        drop(imported(Some(-1)));
        assert_eq!(fake().take_calls(), vec![]);
        drop(imported(Some(PRODUCER.0 as i64)));
        assert_eq!(event_calls(&fake().take_calls()), vec![]);
        assert_eq!(live_exports(), base, "every export's deleter ran");
        assert_eq!(
            drops.load(Ordering::SeqCst),
            0,
            "the object still owns the memory"
        );
        drop(obj);
        py.import("gc").unwrap().call_method0("collect").unwrap();
        assert_eq!(
            drops.load(Ordering::SeqCst),
            1,
            "the owner dropped once, with the object"
        );
    });
}

#[test]
fn copies_go_through_the_runtime_and_are_freed() {
    let _g = common::serial();
    let _ = fake().take_calls();
    Python::attach(|py| {
        let drops = Arc::new(AtomicUsize::new(0));
        // A transposed view: a device copy needs the strided kernel.
        let obj = Bound::new(py, Holder(tensor(&drops, &[3, 2], Some(&[1, 3])))).unwrap();
        let req = ExportRequest {
            max_version: Some((1, 3)),
            copy: Some(true),
            stream: Some(CONSUMER.0 as i64),
            ..ExportRequest::DEFAULT
        };
        let rt: Arc<dyn DeviceRuntime> = fake().clone();
        let cap = export_to_capsule_on(obj.as_any(), &obj.get().0, &req, &rt).unwrap();
        let t = ImportedTensor::from_capsule(cap.bind(py)).unwrap();
        assert!(t.is_copied());
        assert_ne!(t.data_ptr() as u64, PTR);
        assert_eq!(t.strides(), &[2, 1]);
        let calls = fake().take_calls();
        assert!(
            calls.iter().any(|c| matches!(c, Call::Alloc { .. })),
            "{calls:?}"
        );
        assert!(calls.iter().any(|c| matches!(c, Call::StridedCopy { src: PTR, shape, strides, .. } if shape == &[3, 2] && strides == &[1, 3])), "{calls:?}");
        assert_eq!(
            event_calls(&calls)[0],
            ("record", PRODUCER),
            "the copy waits for the slice's stream"
        );
        drop(t);
        assert!(
            fake()
                .take_calls()
                .iter()
                .any(|c| matches!(c, Call::Free { .. }))
        );
        assert!(fake().live_allocations().is_empty());
    });
}

#[test]
fn bad_layouts_and_devices_are_typed_errors() {
    let drops = Arc::new(AtomicUsize::new(0));
    let make = |device: Device, shape: &[i64], strides: Option<&[i64]>| {
        // SAFETY: never dereferenced (the constructor only checks).
        unsafe {
            CudaTensor::from_device_ptr(
                Owner(Arc::clone(&drops)),
                PTR,
                24,
                device,
                None,
                f32::DTYPE,
                shape,
                strides,
            )
        }
        .unwrap_err()
    };
    let e = make(Device::cuda(0), &[7], None);
    assert_eq!(e.kind(), FailureKind::MalformedTensor, "{e}");
    let e = make(Device::cuda(0), &[3], Some(&[-1]));
    assert_eq!(e.kind(), FailureKind::MalformedTensor, "{e}");
    let e = make(Device::cuda(0), &[2, 3], Some(&[1]));
    assert_eq!(e.kind(), FailureKind::MalformedTensor, "{e}");
    let e = make(Device::CPU, &[6], None);
    assert_eq!(e.kind(), FailureKind::UnsupportedDevice, "{e}");
    assert!(e.message().contains("kDLCUDA"), "{e}");
    assert_eq!(
        drops.load(Ordering::SeqCst),
        4,
        "a refused owner is dropped at once"
    );
    Python::attach(|py| {
        assert!(PyErr::from(e).is_instance_of::<PyBufferError>(py));
    });
}

/// A host producer that counts `__dlpack__` calls.
#[pyclass]
struct HostProducer {
    calls: usize,
}

#[pymethods]
impl HostProducer {
    fn __dlpack_device__(&self) -> (i32, i32) {
        (1, 0)
    }
    #[pyo3(signature = (**_kw))]
    fn __dlpack__(&mut self, _kw: Option<&Bound<'_, pyo3::types::PyDict>>) -> PyResult<()> {
        self.calls += 1;
        Err(PyValueError::new_err("not reached"))
    }
}

#[test]
fn import_passes_the_consumer_stream_to_the_producer() {
    let _g = common::serial();
    let _ = fake().take_calls();
    Python::attach(|py| {
        let base = live_exports();
        let drops = Arc::new(AtomicUsize::new(0));
        let obj = Bound::new(py, Holder(tensor(&drops, &[6], None))).unwrap();
        let t = import_on_stream(obj.as_any(), CONSUMER).unwrap();
        assert_eq!((t.device(), t.data_ptr() as u64), (Device::cuda(0), PTR));
        assert_eq!(
            event_calls(&fake().take_calls()),
            vec![("record", PRODUCER), ("wait", CONSUMER)]
        );
        drop(t);
        // The null stream is asked for as 1 (CUDA's legacy default; 0 is not a DLPack value).
        let t = import_on_stream(obj.as_any(), StreamHandle::NULL).unwrap();
        assert_eq!(
            event_calls(&fake().take_calls()),
            vec![("record", PRODUCER), ("wait", StreamHandle::LEGACY)]
        );
        drop(t);
        assert_eq!(live_exports(), base);

        // Host memory is refused before any export is made.
        let host = Bound::new(py, HostProducer { calls: 0 }).unwrap();
        let e = import_on_stream(host.as_any(), CONSUMER).unwrap_err();
        assert!(e.is_instance_of::<PyBufferError>(py), "{e}");
        assert!(e.to_string().contains("kDLCUDA"), "{e}");
        assert_eq!(host.borrow().calls, 0);
    });
}

/// On a real GPU: a `CudaSlice` out through DLPack (with the CUDA runtime's events) and back
/// in as a `CudaView` on another stream, read back to the host.
#[test]
fn real_gpu_round_trip() {
    if !CudaRuntime::driver_present() || CudaRuntime::try_new().is_err() {
        eprintln!("real_gpu_round_trip: skipped: no CUDA driver or GPU on this machine");
        return;
    }
    let _g = common::serial();
    let ctx = cudarc::driver::CudaContext::new(0).unwrap();
    let producer = ctx.new_stream().unwrap();
    let consumer = ctx.new_stream().unwrap();
    let host: Vec<f32> = (0..6).map(|i| i as f32).collect();
    let slice = producer.clone_htod(&host).unwrap();
    let src_ptr = {
        let (p, _r) = cudarc::driver::DevicePtr::device_ptr(&slice, &producer);
        p
    };
    Python::attach(|py| {
        let base = live_exports();
        let t = CudaTensor::from_slice(slice, &[2, 3]).unwrap();
        assert_eq!(t.stream(), Some(StreamHandle(producer.cu_stream() as u64)));
        let obj = Bound::new(py, RealHolder(t)).unwrap();
        let stream = StreamHandle(consumer.cu_stream() as u64);
        let kw = pyo3::types::PyDict::new(py);
        kw.set_item("stream", stream.0 as i64).unwrap();
        kw.set_item("max_version", (1, 3)).unwrap();
        let req = ExportRequest {
            stream: Some(stream.0 as i64),
            max_version: Some((1, 3)),
            ..ExportRequest::DEFAULT
        };
        let cap = dlbind::export::export_to_capsule(obj.as_any(), &obj.get().0, &req).unwrap();
        let imported = ImportedTensor::from_capsule(cap.bind(py)).unwrap();
        assert_eq!(imported.data_ptr() as u64, src_ptr);
        let view = ImportedSlice::<f32>::new(imported, &consumer).unwrap();
        let back = consumer.clone_dtoh(&view.as_view()).unwrap();
        assert_eq!(back, host);
        drop(view);
        assert_eq!(live_exports(), base);
    });
}

#[pyclass(frozen)]
struct RealHolder(CudaTensor);

/// Issue 50: `from_shared` exports an `Arc<CudaSlice>` read-only while another clone of it can
/// read the memory, writable only when that `Arc` is the slice's only one. On a real GPU.
#[test]
fn from_shared_is_read_only_unless_the_arc_is_the_only_one() {
    if !CudaRuntime::driver_present() || CudaRuntime::try_new().is_err() {
        eprintln!(
            "from_shared_is_read_only_unless_the_arc_is_the_only_one: skipped: no CUDA driver or GPU on this machine"
        );
        return;
    }
    let ctx = cudarc::driver::CudaContext::new(0).unwrap();
    let stream = ctx.new_stream().unwrap();
    let slice = Arc::new(stream.clone_htod(&[1.0f32; 4]).unwrap());
    let other = Arc::clone(&slice);
    let shared = CudaTensor::from_shared(slice, 0, &[4], None).unwrap();
    assert!(shared.into_buffer().readonly(), "another clone can read it");
    assert_eq!(other.len(), 4);
    let only = Arc::new(stream.clone_htod(&[1.0f32; 4]).unwrap());
    let mine = CudaTensor::from_shared(only, 0, &[4], None).unwrap();
    assert!(!mine.into_buffer().readonly(), "the only `Arc`: writable");
}
