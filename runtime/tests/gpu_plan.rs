//! The public `dlbind::gpu` API as the runtime / demo use it, against the recording fake
//! (no GPU needed). The full decision table is in `runtime/src/gpu/plan_tests.rs`.

use std::sync::Arc;

use dlbind::Device;
use dlbind::gpu::fake::{Call, FakeRuntime};
use dlbind::gpu::{
    AllocKind, CopyKind, DeviceRuntime, StreamHandle, TensorLayout, TransferRequest,
    consumer_stream_for, default_runtime, execute_transfer, plan_transfer, zeros_with,
};
use dlbind::spec::errors::{FailureKind, PyExceptionKind};

/// What `__dlpack__(stream=s, dl_device=..., copy=...)` does for a CUDA tensor produced on
/// stream `producer`.
fn dlpack(
    rt: &Arc<dyn DeviceRuntime>,
    producer: Option<StreamHandle>,
    dl_device: Option<Device>,
    stream: Option<i64>,
    copy: Option<bool>,
) -> dlbind::error::Result<dlbind::gpu::TransferOutcome> {
    let shape = [4i64, 8];
    let strides = [8i64, 1];
    let layout = TensorLayout {
        shape: &shape,
        strides: Some(&strides),
        elem_bytes: 4,
    };
    let plan = plan_transfer(&TransferRequest {
        device: Device::cuda(0),
        producer_stream: producer,
        dl_device,
        stream,
        copy,
        contiguous: layout.is_contiguous(),
        bytes: layout.nbytes(),
    })?;
    execute_transfer(rt, &plan, 0x1000, &layout)
}

#[test]
fn dlpack_paths_through_the_public_api() {
    let fake = Arc::new(FakeRuntime::new());
    let rt: Arc<dyn DeviceRuntime> = fake.clone();
    let a = StreamHandle(0xA0);

    // stream=0 on CUDA → ValueError
    let e = dlpack(&rt, Some(a), None, Some(0), None).unwrap_err();
    assert_eq!(e.kind(), FailureKind::InvalidStream);
    assert_eq!(e.exception(), PyExceptionKind::ValueError);

    // stream=2: event on the producer stream, per-thread stream waits
    let out = dlpack(&rt, Some(a), None, Some(2), None).unwrap();
    assert!(out.allocation.is_none() && !out.is_copied);
    let calls = fake.take_calls();
    assert!(matches!(calls[0], Call::RecordEvent { stream, .. } if stream == a));
    assert!(matches!(
        calls[1],
        Call::WaitEvent {
            stream: StreamHandle::PER_THREAD,
            ..
        }
    ));

    // dl_device=(kDLCPU, 0): D2H into pinned host memory, producer stream synchronised
    let out = dlpack(&rt, Some(a), Some(Device::CPU), None, None).unwrap();
    assert_eq!(out.target, Device::CPU);
    assert!(out.is_copied);
    let calls = fake.take_calls();
    assert!(matches!(
        calls[0],
        Call::Alloc {
            kind: AllocKind::PinnedHost,
            bytes: 128,
            ..
        }
    ));
    assert!(
        matches!(calls[1], Call::Copy { kind: CopyKind::D2H, bytes: 128, stream, .. } if stream == a)
    );
    assert_eq!(
        calls[2],
        Call::SynchronizeStream {
            device: Device::cuda(0),
            stream: a
        }
    );
    drop(out);
    assert!(fake.live_allocations().is_empty());

    // ... with copy=False → BufferError
    let e = dlpack(&rt, Some(a), Some(Device::CPU), None, Some(false)).unwrap_err();
    assert_eq!(e.kind(), FailureKind::CopyRequired);
    assert_eq!(e.exception(), PyExceptionKind::BufferError);

    // another GPU → BufferError
    let e = dlpack(&rt, Some(a), Some(Device::cuda(1)), Some(1), None).unwrap_err();
    assert_eq!(e.kind(), FailureKind::UnsupportedDevice);
    assert_eq!(e.exception(), PyExceptionKind::BufferError);
}

#[test]
fn zeros_through_the_public_api() {
    let fake = Arc::new(FakeRuntime::new());
    let rt: Arc<dyn DeviceRuntime> = fake.clone();
    let t = zeros_with(&rt, Device::CUDA_MANAGED, 32).unwrap();
    assert_eq!(t.dl_device(), Device::CUDA_MANAGED);
    assert_eq!(t.allocation().kind, AllocKind::Managed);
    drop(t);
    assert!(fake.live_allocations().is_empty());
}

#[test]
fn consumer_streams() {
    assert_eq!(consumer_stream_for(Device::CPU), None);
    assert_eq!(consumer_stream_for(Device::rocm(0)), Some(0));
    let s = consumer_stream_for(Device::cuda(0));
    assert!(matches!(s, Some(x) if x != 0), "{s:?}");
}

#[test]
fn default_runtime_without_gpu_is_a_buffer_error() {
    match default_runtime() {
        Ok(rt) => eprintln!("a GPU runtime is available: {}", rt.name()),
        Err(e) => {
            assert_eq!(e.kind(), FailureKind::DeviceUnavailable);
            assert_eq!(e.exception(), PyExceptionKind::BufferError);
            eprintln!("no GPU runtime: {}", e.message());
        }
    }
}
