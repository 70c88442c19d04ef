//! `__dlpack__` exports that involve a GPU, end to end through `export_to_capsule_on` with the
//! recording fake runtime: the capsule's device / data / flags and the exact runtime calls
//! (stream ordering, allocation, copies, frees when the consumer deletes the tensor).
//! Without a runtime (`export_to_capsule`, no driver here), the device steps fail with
//! `DeviceUnavailable` (BufferError) and zero-copy exports that need no step still work.

mod common;

use std::ffi::c_void;
use std::sync::Arc;

use dlbind::export::{DLPackSource, ExportRequest, export_to_capsule, export_to_capsule_on};
use dlbind::gpu::fake::{Call, FakeRuntime, Op};
use dlbind::gpu::{AllocKind, CopyKind, DeviceRuntime, StreamHandle};
use dlbind::prelude::*;
use dlbind::spec::errors::FailureKind;
use dlbind::spec::types::{
    DLManagedTensor, DLManagedTensorVersioned, DLPACK_CAPSULE_NAME, DLPACK_FLAG_BITMASK_IS_COPIED,
    DLPACK_FLAG_BITMASK_READ_ONLY, DLPACK_VERSIONED_CAPSULE_NAME,
};
use dlbind::stats::live_exports;
use pyo3::exceptions::{PyBufferError, PyValueError};
use pyo3::ffi as pyffi;

/// A tensor that claims to live on `device` at `ptr` (never dereferenced by the fake runtime;
/// real host memory in `host` when a test needs the CPU kernels to read it).
#[pyclass(frozen)]
struct DevTensor {
    ptr: usize,
    host: Vec<i32>,
    shape: Vec<i64>,
    strides: Option<Vec<i64>>,
    device: Device,
    stream: Option<u64>,
    readonly: bool,
    dtype: DLDataType,
}

// SAFETY: for CPU-readable devices `ptr` points into `host`, which holds every addressed
// element and never changes (frozen class); device pointers are only handed to the fake
// runtime, which reads nothing.
unsafe impl DLPackSource for DevTensor {
    fn dlpack_data_ptr(&self) -> *mut c_void {
        self.ptr as *mut c_void
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
        match &self.strides {
            Some(s) => {
                out.copy_from_slice(s);
                true
            }
            None => false,
        }
    }
    fn dlpack_device(&self) -> Device {
        self.device
    }
    fn dlpack_readonly(&self) -> bool {
        self.readonly
    }
    fn dlpack_stream(&self) -> Option<StreamHandle> {
        self.stream.map(StreamHandle)
    }
}

fn refcnt<T>(o: &Bound<'_, T>) -> isize {
    // SAFETY: `o` is a live object.
    unsafe { pyffi::Py_REFCNT(o.as_ptr()) }
}

const SRC: usize = 0x5000_0000;
const I32: DLDataType = <i32 as DLPackElement>::DTYPE;

fn dev(device: Device, shape: &[i64], stream: Option<u64>) -> DevTensor {
    DevTensor {
        ptr: SRC,
        host: Vec::new(),
        shape: shape.to_vec(),
        strides: None,
        device,
        stream,
        readonly: false,
        dtype: I32,
    }
}

fn req(dl_device: Option<Device>, stream: Option<i64>, copy: Option<bool>) -> ExportRequest {
    ExportRequest {
        max_version: Some((1, 3)),
        copy,
        dl_device,
        stream,
    }
}

struct Seen {
    data: usize,
    device: Device,
    flags: u64,
    shape: Vec<i64>,
    strides: Vec<i64>,
}

/// Reads the versioned tensor inside an unconsumed capsule.
fn inspect(cap: &Bound<'_, PyAny>) -> Seen {
    // SAFETY: `cap` is a live "dltensor_versioned" capsule made by dlbind; the tensor and its
    // shape/strides arrays live as long as the capsule.
    unsafe {
        let p = pyffi::PyCapsule_GetPointer(cap.as_ptr(), DLPACK_VERSIONED_CAPSULE_NAME.as_ptr())
            .cast::<DLManagedTensorVersioned>();
        assert!(!p.is_null());
        let t = &(*p).dl_tensor;
        let n = t.ndim as usize;
        let (shape, strides) = if n == 0 {
            (vec![], vec![])
        } else {
            (
                std::slice::from_raw_parts(t.shape, n).to_vec(),
                std::slice::from_raw_parts(t.strides, n).to_vec(),
            )
        };
        Seen {
            data: t.data as usize,
            device: Device::new(t.device.device_type, t.device.device_id),
            flags: (*p).flags,
            shape,
            strides,
        }
    }
}

fn export<'py>(
    py: Python<'py>,
    t: DevTensor,
    r: ExportRequest,
    rt: &Arc<FakeRuntime>,
) -> (Bound<'py, DevTensor>, PyResult<Bound<'py, PyAny>>) {
    let obj = Bound::new(py, t).unwrap();
    let dynrt: Arc<dyn DeviceRuntime> = rt.clone();
    let cap = export_to_capsule_on(obj.as_any(), obj.get(), &r, &dynrt).map(|c| c.into_bound(py));
    (obj, cap)
}

fn alloc_ptr(calls: &[Call]) -> usize {
    calls
        .iter()
        .find_map(|c| match c {
            Call::Alloc { ptr, .. } => Some(*ptr as usize),
            _ => None,
        })
        .expect("an allocation")
}

#[test]
fn cuda_to_cpu_is_a_device_to_host_copy_freed_by_the_deleter() {
    let _g = common::serial();
    Python::attach(|py| {
        let rt = Arc::new(FakeRuntime::new());
        let before = live_exports();
        let (_obj, cap) = export(
            py,
            dev(Device::cuda(0), &[2, 3], None),
            req(Some(Device::CPU), None, None),
            &rt,
        );
        let cap = cap.unwrap();
        let calls = rt.take_calls();
        let dst = alloc_ptr(&calls);
        let seen = inspect(&cap);
        assert_eq!(seen.device, Device::CPU);
        assert_eq!(seen.data, dst);
        assert_eq!(seen.flags, DLPACK_FLAG_BITMASK_IS_COPIED);
        assert_eq!((seen.shape, seen.strides), (vec![2, 3], vec![3, 1]));
        let gpu = Device::cuda(0);
        assert_eq!(
            calls,
            vec![
                Call::Alloc {
                    kind: AllocKind::PinnedHost,
                    device: gpu,
                    bytes: 24,
                    ptr: dst as u64
                },
                Call::Copy {
                    device: gpu,
                    kind: CopyKind::D2H,
                    dst: dst as u64,
                    src: SRC as u64,
                    bytes: 24,
                    stream: StreamHandle::LEGACY
                },
                Call::SynchronizeStream {
                    device: gpu,
                    stream: StreamHandle::LEGACY
                },
            ]
        );
        assert_eq!(live_exports(), before + 1);
        drop(cap); // unconsumed capsule: its destructor runs the deleter
        assert_eq!(
            rt.take_calls(),
            vec![Call::Free {
                ptr: dst as u64,
                kind: AllocKind::PinnedHost
            }]
        );
        assert!(rt.live_allocations().is_empty());
        assert_eq!(live_exports(), before);
    });
}

#[test]
fn device_to_host_copy_runs_on_the_producer_stream() {
    Python::attach(|py| {
        let rt = Arc::new(FakeRuntime::new());
        let (_obj, cap) = export(
            py,
            dev(Device::cuda(0), &[4], Some(0x77)),
            req(Some(Device::CPU), None, Some(true)),
            &rt,
        );
        let _cap = cap.unwrap();
        let calls = rt.take_calls();
        let a = StreamHandle(0x77);
        assert!(
            matches!(calls[1], Call::Copy { kind: CopyKind::D2H, stream, bytes: 16, .. } if stream == a),
            "{calls:?}"
        );
        assert_eq!(
            calls[2],
            Call::SynchronizeStream {
                device: Device::cuda(0),
                stream: a
            }
        );
    });
}

#[test]
fn non_contiguous_device_to_host_goes_through_a_device_scratch_buffer() {
    Python::attach(|py| {
        let rt = Arc::new(FakeRuntime::new());
        let mut t = dev(Device::cuda(0), &[3, 2], None);
        t.strides = Some(vec![1, 3]); // a transposed view
        let (_obj, cap) = export(py, t, req(Some(Device::CPU), None, None), &rt);
        let cap = cap.unwrap();
        let calls = rt.take_calls();
        let kinds: Vec<&str> = calls
            .iter()
            .map(|c| match c {
                Call::Alloc {
                    kind: AllocKind::PinnedHost,
                    ..
                } => "alloc-pinned",
                Call::Alloc {
                    kind: AllocKind::Device,
                    ..
                } => "alloc-temp",
                Call::StridedCopy { .. } => "strided",
                Call::Copy {
                    kind: CopyKind::D2H,
                    ..
                } => "d2h",
                Call::SynchronizeStream { .. } => "sync",
                Call::Free { .. } => "free-temp",
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "alloc-pinned",
                "alloc-temp",
                "strided",
                "d2h",
                "sync",
                "free-temp"
            ]
        );
        assert!(
            calls.iter().any(|c| matches!(c, Call::StridedCopy { shape, strides, elem_bytes: 4, .. } if shape == &[3, 2] && strides == &[1, 3]))
        );
        let seen = inspect(&cap);
        assert_eq!(seen.strides, vec![2, 1], "the copy is C-contiguous");
        assert_eq!(
            rt.live_allocations().len(),
            1,
            "only the exported buffer is still alive"
        );
    });
}

#[test]
fn zero_copy_orders_producer_and_consumer_streams_with_an_event() {
    Python::attach(|py| {
        let rt = Arc::new(FakeRuntime::new());
        let gpu = Device::cuda(0);
        let (obj, cap) = export(
            py,
            dev(gpu, &[8], Some(0x55)),
            req(None, Some(0x99), None),
            &rt,
        );
        let cap = cap.unwrap();
        let seen = inspect(&cap);
        assert_eq!((seen.data, seen.device, seen.flags), (SRC, gpu, 0));
        let calls = rt.take_calls();
        assert_eq!(calls.len(), 3, "{calls:?}");
        let ev = match calls[0] {
            Call::RecordEvent {
                device,
                stream,
                event,
            } => {
                assert_eq!((device, stream), (gpu, StreamHandle(0x55)));
                event
            }
            ref c => panic!("expected RecordEvent, got {c:?}"),
        };
        assert_eq!(
            calls[1],
            Call::WaitEvent {
                device: gpu,
                stream: StreamHandle(0x99),
                event: ev
            }
        );
        assert_eq!(
            calls[2],
            Call::DestroyEvent {
                device: gpu,
                event: ev
            }
        );
        assert_eq!(rt.live_events(), 0);
        // The zero-copy capsule keeps its owner alive, until it is deleted.
        let held = refcnt(&obj);
        drop(cap);
        assert_eq!(refcnt(&obj), held - 1);

        // -1: no synchronisation; the producer's own stream: nothing to order.
        for s in [-1, 0x55] {
            let (_o, cap) = export(
                py,
                dev(gpu, &[8], Some(0x55)),
                req(None, Some(s), None),
                &rt,
            );
            cap.unwrap();
            assert!(rt.take_calls().is_empty(), "stream {s}");
        }
        // Stream 1 is CU_STREAM_LEGACY.
        let (_o, cap) = export(
            py,
            dev(gpu, &[8], Some(0x55)),
            req(None, Some(1), None),
            &rt,
        );
        cap.unwrap();
        assert!(matches!(
            rt.take_calls()[1],
            Call::WaitEvent {
                stream: StreamHandle::LEGACY,
                ..
            }
        ));
    });
}

#[test]
fn same_device_copy_runs_on_the_consumer_stream_after_the_producer() {
    Python::attach(|py| {
        let rt = Arc::new(FakeRuntime::new());
        let gpu = Device::cuda(0);
        let (obj, cap) = export(
            py,
            dev(gpu, &[5], Some(0x55)),
            req(None, Some(0x99), Some(true)),
            &rt,
        );
        let cap = cap.unwrap();
        let calls = rt.take_calls();
        let dst = alloc_ptr(&calls);
        let names: Vec<_> = calls
            .iter()
            .map(|c| {
                format!("{c:?}")
                    .split([' ', '{'])
                    .next()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(
            names,
            ["Alloc", "RecordEvent", "WaitEvent", "DestroyEvent", "Copy"]
        );
        assert!(matches!(
            calls[4],
            Call::Copy {
                kind: CopyKind::D2D,
                stream: StreamHandle(0x99),
                bytes: 20,
                ..
            }
        ));
        let seen = inspect(&cap);
        assert_eq!(
            (seen.data, seen.device, seen.flags),
            (dst, gpu, DLPACK_FLAG_BITMASK_IS_COPIED)
        );
        // The copy may still be in flight on the consumer's stream: the source stays alive.
        assert!(refcnt(&obj) >= 2);
        drop(cap);
        assert!(matches!(
            rt.take_calls()[..],
            [Call::Free {
                kind: AllocKind::Device,
                ..
            }]
        ));
    });
}

/// Decision 0024 on a device: a legacy capsule cannot say READ_ONLY, so a legacy request for
/// read-only CUDA memory is a same-device copy (the consumer's stream after the producer's) in
/// a legacy capsule; `copy=False` refuses it before any runtime call; a versioned request stays
/// zero-copy, READ_ONLY.
#[test]
fn read_only_device_memory_leaves_a_legacy_capsule_only_as_a_copy() {
    Python::attach(|py| {
        let base = live_exports();
        let rt = Arc::new(FakeRuntime::new());
        let gpu = Device::cuda(0);
        let ro = || DevTensor {
            readonly: true,
            ..dev(gpu, &[5], Some(0x55))
        };
        let legacy = |copy| ExportRequest {
            max_version: None,
            copy,
            dl_device: None,
            stream: Some(0x99),
        };
        let (_obj, cap) = export(py, ro(), legacy(None), &rt);
        let cap = cap.unwrap();
        let calls = rt.take_calls();
        let dst = alloc_ptr(&calls);
        assert!(
            calls.iter().any(|c| matches!(
                c,
                Call::Copy {
                    kind: CopyKind::D2D,
                    stream: StreamHandle(0x99),
                    bytes: 20,
                    ..
                }
            )),
            "{calls:?}"
        );
        // SAFETY: `cap` is a live, unconsumed legacy capsule made by dlbind.
        let (data, device) = unsafe {
            let m = pyffi::PyCapsule_GetPointer(cap.as_ptr(), DLPACK_CAPSULE_NAME.as_ptr())
                .cast::<DLManagedTensor>();
            assert!(!m.is_null(), "a legacy capsule");
            let t = &(*m).dl_tensor;
            (
                t.data as usize,
                Device::new(t.device.device_type, t.device.device_id),
            )
        };
        assert_eq!(
            (data, device),
            (dst, gpu),
            "the copy, not the read-only source"
        );
        assert_ne!(data, SRC);
        drop(cap);
        assert!(matches!(
            rt.take_calls()[..],
            [Call::Free {
                kind: AllocKind::Device,
                ..
            }]
        ));

        let (_obj, cap) = export(py, ro(), legacy(Some(false)), &rt);
        let e = cap.unwrap_err();
        assert!(e.is_instance_of::<PyBufferError>(py), "{e}");
        assert!(e.to_string().contains("copy=False"), "{e}");
        assert!(
            rt.take_calls().is_empty(),
            "refused before any runtime call"
        );

        let (_obj, cap) = export(py, ro(), req(None, Some(0x99), None), &rt);
        let seen = inspect(&cap.unwrap());
        assert_eq!(
            (seen.data, seen.flags),
            (SRC, DLPACK_FLAG_BITMASK_READ_ONLY)
        );
        rt.take_calls();
        assert_eq!(live_exports(), base);
    });
}

#[test]
fn host_to_device_copy_on_the_consumer_stream() {
    Python::attach(|py| {
        let rt = Arc::new(FakeRuntime::new());
        let host = vec![1i32, 2, 3];
        let mut t = dev(Device::CPU, &[3], None);
        t.ptr = host.as_ptr() as usize;
        t.host = host;
        let (_obj, cap) = export(py, t, req(Some(Device::cuda(0)), Some(1), None), &rt);
        let cap = cap.unwrap();
        let calls = rt.take_calls();
        let dst = alloc_ptr(&calls);
        assert_eq!(calls.len(), 2, "{calls:?}");
        assert!(matches!(
            calls[0],
            Call::Alloc {
                kind: AllocKind::Device,
                bytes: 12,
                ..
            }
        ));
        assert!(matches!(
            calls[1],
            Call::Copy {
                kind: CopyKind::H2D,
                stream: StreamHandle::LEGACY,
                bytes: 12,
                ..
            }
        ));
        let seen = inspect(&cap);
        assert_eq!((seen.data, seen.device), (dst, Device::cuda(0)));
        // copy=False refuses; a non-contiguous host tensor cannot be copied to a device.
        let (_o, e) = export(
            py,
            dev(Device::CPU, &[3], None),
            req(Some(Device::cuda(0)), Some(1), Some(false)),
            &rt,
        );
        let e = e.unwrap_err();
        assert!(e.is_instance_of::<PyBufferError>(py), "{e}");
        let mut t = dev(Device::CPU, &[2, 2], None);
        t.strides = Some(vec![1, 2]);
        let (_o, e) = export(py, t, req(Some(Device::cuda(0)), Some(1), None), &rt);
        assert!(e.unwrap_err().is_instance_of::<PyBufferError>(py));
        assert!(rt.take_calls().is_empty());
    });
}

#[test]
fn pinned_memory_with_pending_work_is_synchronised_before_a_host_copy() {
    Python::attach(|py| {
        let rt = Arc::new(FakeRuntime::new());
        let host: Vec<i32> = (0..6).collect();
        let mut t = dev(Device::CUDA_HOST, &[2, 3], Some(0x42));
        t.ptr = host.as_ptr() as usize;
        t.strides = Some(vec![1, 2]); // F order: the CPU kernels transpose it
        t.host = host;
        let (_obj, cap) = export(py, t, req(Some(Device::CPU), None, Some(true)), &rt);
        let cap = cap.unwrap();
        assert_eq!(
            rt.take_calls(),
            vec![Call::SynchronizeStream {
                device: Device::cuda(0),
                stream: StreamHandle(0x42)
            }]
        );
        let seen = inspect(&cap);
        assert_eq!(
            (seen.device, seen.flags),
            (Device::CPU, DLPACK_FLAG_BITMASK_IS_COPIED)
        );
        assert_ne!(seen.data, 0);
        // SAFETY: the capsule's copy holds 6 i32 in C order while `cap` lives.
        let got = unsafe { std::slice::from_raw_parts(seen.data as *const i32, 6) }.to_vec();
        assert_eq!(got, vec![0, 2, 4, 1, 3, 5]);

        // Without copy: zero-copy after the same synchronisation; read-only propagates.
        let host: Vec<i32> = (0..4).collect();
        let mut t = dev(Device::CUDA_MANAGED, &[4], Some(0x42));
        t.ptr = host.as_ptr() as usize;
        t.host = host;
        t.readonly = true;
        let (_obj, cap) = export(py, t, req(Some(Device::CPU), None, Some(false)), &rt);
        let seen = inspect(&cap.unwrap());
        assert_eq!(rt.take_calls().len(), 1);
        assert_eq!(
            (seen.device, seen.flags),
            (Device::CPU, DLPACK_FLAG_BITMASK_READ_ONLY)
        );
    });
}

#[test]
fn sub_byte_dtypes_move_as_whole_bytes_only_when_contiguous() {
    Python::attach(|py| {
        let rt = Arc::new(FakeRuntime::new());
        let f4 = DLDataType {
            code: I32.code,
            bits: 4,
            lanes: 1,
        };
        let mut t = dev(Device::cuda(0), &[5], None);
        t.dtype = f4;
        let (_o, cap) = export(py, t, req(Some(Device::CPU), None, None), &rt);
        cap.unwrap();
        let calls = rt.take_calls();
        assert!(
            matches!(
                calls[1],
                Call::Copy {
                    kind: CopyKind::D2H,
                    bytes: 3,
                    ..
                }
            ),
            "{calls:?}"
        );
        let mut t = dev(Device::cuda(0), &[2, 2], None);
        t.dtype = f4;
        t.strides = Some(vec![1, 2]);
        let (_o, e) = export(py, t, req(Some(Device::CPU), None, None), &rt);
        let e = e.unwrap_err();
        assert!(e.is_instance_of::<PyBufferError>(py), "{e}");
        assert!(rt.take_calls().is_empty());
    });
}

#[test]
fn runtime_failures_raise_and_free_everything() {
    let _g = common::serial();
    Python::attach(|py| {
        let rt = Arc::new(FakeRuntime::new());
        rt.fail_on(Op::Copy, FailureKind::OutOfMemory);
        let before = live_exports();
        let (obj, cap) = export(
            py,
            dev(Device::cuda(0), &[4], None),
            req(Some(Device::CPU), None, None),
            &rt,
        );
        let e = cap.unwrap_err();
        assert!(
            e.is_instance_of::<pyo3::exceptions::PyMemoryError>(py)
                || e.is_instance_of::<PyBufferError>(py),
            "{e}"
        );
        assert!(
            rt.live_allocations().is_empty(),
            "the destination buffer is freed"
        );
        assert_eq!(live_exports(), before);
        assert_eq!(refcnt(&obj), 1, "no reference to the owner leaks");
    });
}

#[test]
fn errors_come_before_any_runtime_call() {
    Python::attach(|py| {
        let rt = Arc::new(FakeRuntime::new());
        // CUDA → CPU with copy=False, a stream on a CPU target, another GPU.
        for (r, is_value_error) in [
            (req(Some(Device::CPU), None, Some(false)), false),
            (req(Some(Device::CPU), Some(1), None), true),
            (req(Some(Device::cuda(1)), Some(1), None), false),
            (req(None, Some(0), None), true),
        ] {
            let (_o, e) = export(py, dev(Device::cuda(0), &[4], Some(0x55)), r, &rt);
            let e = e.unwrap_err();
            assert_eq!(
                e.is_instance_of::<PyValueError>(py),
                is_value_error,
                "{r:?}: {e}"
            );
            assert!(
                is_value_error || e.is_instance_of::<PyBufferError>(py),
                "{r:?}: {e}"
            );
        }
        assert!(rt.take_calls().is_empty());
    });
}

#[test]
fn without_a_driver_device_steps_are_buffer_errors_and_stepless_exports_work() {
    if dlbind::gpu::default_runtime().is_ok() {
        eprintln!("SKIPPED: a GPU runtime is present; this test covers the no-driver behaviour");
        return;
    }
    Python::attach(|py| {
        let obj = Bound::new(py, dev(Device::cuda(0), &[4], None)).unwrap();
        let e = export_to_capsule(obj.as_any(), obj.get(), &req(Some(Device::CPU), None, None))
            .unwrap_err();
        assert!(e.is_instance_of::<PyBufferError>(py), "{e}");
        assert!(
            e.to_string().to_lowercase().contains("cuda") || e.to_string().contains("GPU"),
            "{e}"
        );
        // Zero-copy on its own device with nothing pending needs no driver.
        let cap = export_to_capsule(obj.as_any(), obj.get(), &req(None, Some(1), None))
            .unwrap()
            .into_bound(py);
        let seen = inspect(&cap);
        assert_eq!((seen.data, seen.device), (SRC, Device::cuda(0)));
    });
}

/// `#[dlpack(stream)]` on the derive reports the producer stream.
#[pyclass(frozen)]
#[derive(DLPackExport)]
#[dlpack(dtype = "float32")]
struct Pending {
    /// Storage on the (fake) device: a host allocation vouched for as cuda:0 memory, which the
    /// fake runtime never dereferences (the device field must equal the storage's device).
    #[dlpack(data)]
    data: dlbind::Buffer,
    #[dlpack(shape)]
    shape: Vec<usize>,
    #[dlpack(device)]
    device: Device,
    #[dlpack(stream)]
    stream: Option<u64>,
}

#[dlbind::pymethods]
impl Pending {}

/// `n` floats of host memory vouched for as cuda:0 memory (the fake runtime never reads them).
fn fake_device(n: usize) -> dlbind::Buffer {
    let mut host = vec![0.0f32; n];
    let ptr = host.as_mut_ptr().cast::<std::ffi::c_void>();
    // SAFETY: `host` moves into the buffer as its owner and lives as long as it.
    unsafe {
        dlbind::Buffer::from_owner(
            host,
            ptr,
            dlbind::Extent::from_start(4 * n),
            Device::cuda(0),
            false,
        )
    }
}

#[test]
fn derived_stream_field_orders_streams() {
    Python::attach(|py| {
        let gpu = Device::cuda(0);
        let mut host = vec![0.0f32; 4];
        let ptr = host.as_mut_ptr().cast::<std::ffi::c_void>();
        // SAFETY: `host` moves into the buffer as its owner and lives as long as it; 16 bytes.
        let data = unsafe {
            dlbind::Buffer::from_owner(host, ptr, dlbind::Extent::from_start(16), gpu, false)
        };
        let p = Pending {
            data,
            shape: vec![4],
            device: gpu,
            stream: Some(0x31),
        };
        assert_eq!(p.dlpack_stream(), Some(StreamHandle(0x31)));
        let obj = Bound::new(py, p).unwrap();
        let rt = Arc::new(FakeRuntime::new());
        let dynrt: Arc<dyn DeviceRuntime> = rt.clone();
        let _cap = export_to_capsule_on(
            obj.as_any(),
            obj.get(),
            &req(None, Some(0x99), None),
            &dynrt,
        )
        .unwrap();
        let calls = rt.take_calls();
        assert!(
            matches!(
                calls[0],
                Call::RecordEvent {
                    stream: StreamHandle(0x31),
                    ..
                }
            ),
            "{calls:?}"
        );
        assert!(
            matches!(
                calls[1],
                Call::WaitEvent {
                    stream: StreamHandle(0x99),
                    ..
                }
            ),
            "{calls:?}"
        );
        // The CUDA array interface reports the same stream (the null stream as 1: CAI forbids 0).
        fn cai<'py>(o: &Bound<'py, Pending>) -> Bound<'py, PyAny> {
            o.getattr("__cuda_array_interface__")
                .unwrap()
                .get_item("stream")
                .unwrap()
        }
        assert_eq!(cai(&obj).extract::<u64>().unwrap(), 0x31);
        let null = Bound::new(
            py,
            Pending {
                data: fake_device(1),
                shape: vec![1],
                device: gpu,
                stream: Some(0),
            },
        )
        .unwrap();
        assert_eq!(cai(&null).extract::<u64>().unwrap(), 1);
        let idle = Pending {
            data: fake_device(0),
            shape: vec![0],
            device: gpu,
            stream: None,
        };
        assert_eq!(idle.dlpack_stream(), None);
        // No recorded stream: CUDA data is taken to be ready on the legacy stream (1), as the
        // export planner assumes.
        assert_eq!(
            cai(&Bound::new(py, idle).unwrap())
                .extract::<u64>()
                .unwrap(),
            1
        );
    });
}
