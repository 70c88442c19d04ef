//! Decision-table tests: plans are executed on the recording fake and the exact call
//! sequences are asserted.

use std::sync::Arc;

use super::fake::{Call, FAKE_EVENT_BASE, FAKE_PTR_BASE, FakeRuntime, Op};
use super::plan::*;
use super::*;
use crate::spec::errors::{FailureKind, PyExceptionKind};

const SRC: DevicePtr = 0x5000_0000;
const A: StreamHandle = StreamHandle(0xA000);
const B: StreamHandle = StreamHandle(0xB000);
const BYTES: usize = 4 * 6;
const SHAPE: [i64; 2] = [2, 3];
const C_STRIDES: [i64; 2] = [3, 1];
const T_STRIDES: [i64; 2] = [1, 2];

fn cuda0() -> Device {
    Device::cuda(0)
}

fn req(
    device: Device,
    producer: Option<StreamHandle>,
    dl_device: Option<Device>,
    stream: Option<i64>,
    copy: Option<bool>,
    contiguous: bool,
) -> TransferRequest {
    TransferRequest {
        device,
        producer_stream: producer,
        dl_device,
        stream,
        copy,
        contiguous,
        bytes: BYTES,
    }
}

fn layout(contiguous: bool) -> TensorLayout<'static> {
    TensorLayout {
        shape: &SHAPE,
        strides: Some(if contiguous { &C_STRIDES } else { &T_STRIDES }),
        elem_bytes: 4,
    }
}

/// Plans and runs on a fresh fake; returns (plan, outcome, calls, fake).
fn run(r: TransferRequest) -> Result<(TransferPlan, TransferOutcome, Vec<Call>, Arc<FakeRuntime>)> {
    let fake = Arc::new(FakeRuntime::new());
    let rt: Arc<dyn DeviceRuntime> = fake.clone();
    let plan = plan_transfer(&r)?;
    let out = execute_transfer(&rt, &plan, SRC, &layout(r.contiguous))?;
    let calls = fake.calls();
    Ok((plan, out, calls, fake))
}

fn ev(n: u64) -> EventHandle {
    EventHandle(FAKE_EVENT_BASE + n)
}
/// The three calls that order stream `b` after stream `a` with event number `n`.
fn ordering_calls(device: Device, a: StreamHandle, b: StreamHandle, n: u64) -> Vec<Call> {
    vec![
        Call::RecordEvent {
            device,
            stream: a,
            event: ev(n),
        },
        Call::WaitEvent {
            device,
            stream: b,
            event: ev(n),
        },
        Call::DestroyEvent {
            device,
            event: ev(n),
        },
    ]
}
fn ptr(n: u64) -> DevicePtr {
    FAKE_PTR_BASE + (n << 20)
}

fn err_kind(r: TransferRequest) -> FailureKind {
    plan_transfer(&r).expect_err("expected an error").kind()
}

// ---------------------------------------------------------------- stream validation

#[test]
fn stream_rules_follow_the_target_device() {
    let cases: &[(Device, Option<Device>, Option<i64>)] = &[
        (cuda0(), None, Some(0)),
        (cuda0(), None, Some(-2)),
        (Device::rocm(0), None, Some(1)),
        (Device::rocm(0), None, Some(2)),
        (Device::CPU, None, Some(1)),
        (Device::CPU, None, Some(-1)),
        (Device::CPU, None, Some(0)),
        (Device::CPU, None, Some(12345)),
        // dl_device given: the stream must be valid for dl_device, not the tensor's device
        (cuda0(), Some(Device::CPU), Some(1)),
        (cuda0(), Some(Device::CPU), Some(-1)),
        (cuda0(), Some(Device::CPU), Some(0x1234)),
        (Device::CUDA_HOST, None, Some(1)),
        (Device::CUDA_MANAGED, Some(Device::CPU), Some(2)),
        (Device::CPU, Some(cuda0()), Some(0)),
    ];
    for &(dev, target, stream) in cases {
        for copy in [None, Some(true), Some(false)] {
            let t = target.unwrap_or(dev);
            let default_stream = crate::spec::streams::consumer_default_stream(t.device_type);
            if let Err(device_error) =
                plan_transfer(&req(dev, Some(A), target, default_stream, copy, true))
            {
                // a device / copy error (BufferError) wins over the bad stream
                let e = plan_transfer(&req(dev, Some(A), target, stream, copy, true)).unwrap_err();
                assert_eq!(
                    e.kind(),
                    device_error.kind(),
                    "{dev} -> {target:?} stream {stream:?}"
                );
                assert_eq!(e.kind().exception(), PyExceptionKind::BufferError);
                continue;
            }
            let e = plan_transfer(&req(dev, Some(A), target, stream, copy, true)).unwrap_err();
            assert_eq!(
                e.kind(),
                FailureKind::InvalidStream,
                "{dev} -> {target:?} stream {stream:?}"
            );
            assert_eq!(e.kind().exception(), PyExceptionKind::ValueError);
            assert!(e.message().contains("stream"), "{}", e.message());
        }
    }
}

#[test]
fn stream_values_map_to_handles() {
    let cases: &[(Option<i64>, Option<StreamHandle>)] = &[
        (None, Some(StreamHandle::LEGACY)),
        (Some(1), Some(StreamHandle::LEGACY)),
        (Some(2), Some(StreamHandle::PER_THREAD)),
        (Some(-1), None),
        (Some(0xB000), Some(B)),
    ];
    for &(stream, handle) in cases {
        let p = plan_transfer(&req(cuda0(), None, None, stream, None, true)).unwrap();
        assert_eq!(p.consumer_stream, handle, "stream {stream:?}");
    }
    let p = plan_transfer(&req(Device::rocm(0), None, None, Some(0), None, true)).unwrap();
    assert_eq!(p.consumer_stream, Some(StreamHandle::NULL));
    let p = plan_transfer(&req(Device::rocm(0), None, None, None, None, true)).unwrap();
    assert_eq!(p.consumer_stream, Some(StreamHandle::NULL));
}

// ---------------------------------------------------------------- CUDA zero-copy

#[test]
fn cuda_zero_copy_records_on_producer_and_waits_on_consumer() {
    for copy in [None, Some(false)] {
        let (plan, out, calls, fake) =
            run(req(cuda0(), Some(A), None, Some(0xB000), copy, true)).unwrap();
        assert_eq!(plan.kind, TransferKind::ZeroCopy);
        assert_eq!(
            calls,
            vec![
                Call::RecordEvent {
                    device: cuda0(),
                    stream: A,
                    event: ev(1)
                },
                Call::WaitEvent {
                    device: cuda0(),
                    stream: B,
                    event: ev(1)
                },
                Call::DestroyEvent {
                    device: cuda0(),
                    event: ev(1)
                },
            ]
        );
        assert!(out.allocation.is_none());
        assert!(!out.is_copied);
        assert_eq!(out.target, cuda0());
        assert_eq!(fake.live_events(), 0);
    }
}

#[test]
fn cuda_zero_copy_stream_table() {
    // (producer stream, consumer stream= , expected (record on, wait on) or None)
    let lg = StreamHandle::LEGACY;
    let pt = StreamHandle::PER_THREAD;
    type Case = (
        Option<StreamHandle>,
        Option<i64>,
        Option<(StreamHandle, StreamHandle)>,
    );
    let cases: &[Case] = &[
        (Some(A), None, Some((A, lg))),
        (Some(A), Some(1), Some((A, lg))),
        (Some(A), Some(2), Some((A, pt))),
        (Some(A), Some(0xA000), None),
        (Some(A), Some(-1), None),
        (Some(lg), None, None),
        (Some(lg), Some(1), None),
        (Some(StreamHandle::NULL), Some(1), None), // null stream == legacy on CUDA
        (Some(lg), Some(2), Some((lg, pt))),
        (Some(pt), Some(2), None),
        (Some(pt), Some(1), Some((pt, lg))),
        (Some(lg), Some(0xB000), Some((lg, B))),
        (Some(pt), Some(-1), None),
        // No reported stream: the data is taken to be ready on the legacy stream (what
        // stream=None stands for), so another consumer stream waits for it.
        (None, Some(0xB000), Some((lg, B))),
        (None, Some(2), Some((lg, pt))),
        (None, Some(1), None),
        (None, Some(-1), None),
        (None, None, None),
    ];
    for &(producer, stream, expect) in cases {
        let (_, _, calls, _) = run(req(cuda0(), producer, None, stream, None, true)).unwrap();
        let expected = match expect {
            None => vec![],
            Some((a, b)) => ordering_calls(cuda0(), a, b, 1),
        };
        assert_eq!(calls, expected, "producer {producer:?} stream {stream:?}");
        // never a host-side wait for a zero-copy export to a stream consumer
        assert!(
            !calls
                .iter()
                .any(|c| matches!(c, Call::SynchronizeStream { .. }))
        );
    }
}

#[test]
fn cuda_zero_copy_with_explicit_same_dl_device() {
    let (plan, _, calls, _) = run(req(
        Device::cuda(1),
        Some(A),
        Some(Device::cuda(1)),
        Some(2),
        None,
        false,
    ))
    .unwrap();
    assert_eq!(plan.kind, TransferKind::ZeroCopy);
    assert_eq!(plan.target, Device::cuda(1));
    assert_eq!(calls.len(), 3);
    assert_eq!(
        calls[0],
        Call::RecordEvent {
            device: Device::cuda(1),
            stream: A,
            event: ev(1)
        }
    );
}

// ---------------------------------------------------------------- CUDA same-device copy

#[test]
fn cuda_copy_true_copies_on_consumer_stream_after_waiting() {
    let (plan, out, calls, fake) =
        run(req(cuda0(), Some(A), None, Some(0xB000), Some(true), true)).unwrap();
    assert_eq!(plan.kind, TransferKind::SameDevice);
    assert_eq!(
        calls,
        vec![
            Call::Alloc {
                kind: AllocKind::Device,
                device: cuda0(),
                bytes: BYTES,
                ptr: ptr(1)
            },
            Call::RecordEvent {
                device: cuda0(),
                stream: A,
                event: ev(2)
            },
            Call::WaitEvent {
                device: cuda0(),
                stream: B,
                event: ev(2)
            },
            Call::DestroyEvent {
                device: cuda0(),
                event: ev(2)
            },
            Call::Copy {
                device: cuda0(),
                kind: CopyKind::D2D,
                dst: ptr(1),
                src: SRC,
                bytes: BYTES,
                stream: B
            },
        ]
    );
    assert!(out.is_copied);
    assert_eq!(out.target, cuda0());
    let a = out.allocation.as_ref().unwrap();
    assert_eq!(a.ptr(), ptr(1));
    assert_eq!(a.dl_device(), cuda0());
    drop(out);
    assert!(fake.live_allocations().is_empty(), "dst freed on drop");
    assert_eq!(
        fake.calls().last(),
        Some(&Call::Free {
            ptr: ptr(1),
            kind: AllocKind::Device
        })
    );
}

#[test]
fn cuda_copy_true_non_contiguous_uses_strided_kernel() {
    let (_, _, calls, _) = run(req(cuda0(), Some(A), None, Some(2), Some(true), false)).unwrap();
    assert_eq!(
        calls,
        vec![
            Call::Alloc {
                kind: AllocKind::Device,
                device: cuda0(),
                bytes: BYTES,
                ptr: ptr(1)
            },
            Call::RecordEvent {
                device: cuda0(),
                stream: A,
                event: ev(2)
            },
            Call::WaitEvent {
                device: cuda0(),
                stream: StreamHandle::PER_THREAD,
                event: ev(2)
            },
            Call::DestroyEvent {
                device: cuda0(),
                event: ev(2)
            },
            Call::StridedCopy {
                device: cuda0(),
                src: SRC,
                shape: SHAPE.to_vec(),
                strides: T_STRIDES.to_vec(),
                elem_bytes: 4,
                dst: ptr(1),
                stream: StreamHandle::PER_THREAD
            },
        ]
    );
}

#[test]
fn cuda_copy_true_same_stream_needs_no_event() {
    let (_, _, calls, _) =
        run(req(cuda0(), Some(B), None, Some(0xB000), Some(true), true)).unwrap();
    assert_eq!(
        calls,
        vec![
            Call::Alloc {
                kind: AllocKind::Device,
                device: cuda0(),
                bytes: BYTES,
                ptr: ptr(1)
            },
            Call::Copy {
                device: cuda0(),
                kind: CopyKind::D2D,
                dst: ptr(1),
                src: SRC,
                bytes: BYTES,
                stream: B
            },
        ]
    );
}

#[test]
fn cuda_copy_true_no_sync_copies_on_producer_stream_and_waits_for_it() {
    let (plan, _, calls, _) = run(req(cuda0(), Some(A), None, Some(-1), Some(true), true)).unwrap();
    assert_eq!(plan.consumer_stream, None);
    assert_eq!(
        calls,
        vec![
            Call::Alloc {
                kind: AllocKind::Device,
                device: cuda0(),
                bytes: BYTES,
                ptr: ptr(1)
            },
            Call::Copy {
                device: cuda0(),
                kind: CopyKind::D2D,
                dst: ptr(1),
                src: SRC,
                bytes: BYTES,
                stream: A
            },
            Call::SynchronizeStream {
                device: cuda0(),
                stream: A
            },
        ]
    );
}

// ---------------------------------------------------------------- CUDA → host

#[test]
fn cuda_to_cpu_copies_d2h_on_producer_stream_then_syncs_it() {
    for copy in [None, Some(true)] {
        let (plan, out, calls, fake) =
            run(req(cuda0(), Some(A), Some(Device::CPU), None, copy, true)).unwrap();
        assert_eq!(plan.kind, TransferKind::DeviceToHost);
        assert_eq!(
            calls,
            vec![
                Call::Alloc {
                    kind: AllocKind::PinnedHost,
                    device: cuda0(),
                    bytes: BYTES,
                    ptr: ptr(1)
                },
                Call::Copy {
                    device: cuda0(),
                    kind: CopyKind::D2H,
                    dst: ptr(1),
                    src: SRC,
                    bytes: BYTES,
                    stream: A
                },
                Call::SynchronizeStream {
                    device: cuda0(),
                    stream: A
                },
            ]
        );
        assert!(out.is_copied);
        assert_eq!(out.target, Device::CPU);
        assert_eq!(fake.live_allocations().len(), 1);
        drop(out);
        assert!(fake.live_allocations().is_empty());
    }
}

#[test]
fn cuda_to_cpu_without_producer_stream_uses_legacy_stream() {
    let (_, _, calls, _) = run(req(cuda0(), None, Some(Device::CPU), None, None, true)).unwrap();
    assert_eq!(
        calls[1],
        Call::Copy {
            device: cuda0(),
            kind: CopyKind::D2H,
            dst: ptr(1),
            src: SRC,
            bytes: BYTES,
            stream: StreamHandle::LEGACY
        }
    );
    assert_eq!(
        calls[2],
        Call::SynchronizeStream {
            device: cuda0(),
            stream: StreamHandle::LEGACY
        }
    );
}

#[test]
fn cuda_to_cpu_non_contiguous_gathers_on_device_first() {
    let (_, out, calls, fake) = run(req(
        Device::cuda(2),
        Some(A),
        Some(Device::CPU),
        None,
        None,
        false,
    ))
    .unwrap();
    let d = Device::cuda(2);
    assert_eq!(
        calls,
        vec![
            Call::Alloc {
                kind: AllocKind::PinnedHost,
                device: d,
                bytes: BYTES,
                ptr: ptr(1)
            },
            Call::Alloc {
                kind: AllocKind::Device,
                device: d,
                bytes: BYTES,
                ptr: ptr(2)
            },
            Call::StridedCopy {
                device: d,
                src: SRC,
                shape: SHAPE.to_vec(),
                strides: T_STRIDES.to_vec(),
                elem_bytes: 4,
                dst: ptr(2),
                stream: A
            },
            Call::Copy {
                device: d,
                kind: CopyKind::D2H,
                dst: ptr(1),
                src: ptr(2),
                bytes: BYTES,
                stream: A
            },
            Call::SynchronizeStream {
                device: d,
                stream: A
            },
            Call::Free {
                ptr: ptr(2),
                kind: AllocKind::Device
            },
        ]
    );
    assert_eq!(fake.live_allocations().len(), 1);
    assert_eq!(out.allocation.as_ref().unwrap().ptr(), ptr(1));
}

#[test]
fn cuda_to_cpu_with_copy_false_is_copy_required() {
    for contiguous in [true, false] {
        let e = plan_transfer(&req(
            cuda0(),
            Some(A),
            Some(Device::CPU),
            None,
            Some(false),
            contiguous,
        ))
        .unwrap_err();
        assert_eq!(e.kind(), FailureKind::CopyRequired);
        assert_eq!(e.kind().exception(), PyExceptionKind::BufferError);
    }
}

#[test]
fn cuda_to_cuda_host_reports_cuda_host() {
    let (plan, _, calls, _) = run(req(
        cuda0(),
        Some(A),
        Some(Device::CUDA_HOST),
        None,
        None,
        true,
    ))
    .unwrap();
    assert_eq!(plan.target, Device::CUDA_HOST);
    assert_eq!(
        calls[0],
        Call::Alloc {
            kind: AllocKind::PinnedHost,
            device: cuda0(),
            bytes: BYTES,
            ptr: ptr(1)
        }
    );
    assert_eq!(
        err_kind(req(
            cuda0(),
            Some(A),
            Some(Device::CUDA_HOST),
            None,
            Some(false),
            true
        )),
        FailureKind::CopyRequired
    );
}

// ---------------------------------------------------------------- pinned / managed memory

#[test]
fn pinned_and_managed_export_to_cpu_without_copy() {
    for dev in [Device::CUDA_HOST, Device::CUDA_MANAGED] {
        for copy in [None, Some(false)] {
            let (plan, out, calls, _) =
                run(req(dev, Some(A), Some(Device::CPU), None, copy, true)).unwrap();
            assert_eq!(plan.kind, TransferKind::ZeroCopy);
            assert_eq!(out.target, Device::CPU);
            assert!(!out.is_copied);
            assert_eq!(
                calls,
                vec![Call::SynchronizeStream {
                    device: cuda0(),
                    stream: A
                }]
            );
            let (_, _, calls, _) =
                run(req(dev, None, Some(Device::CPU), None, copy, false)).unwrap();
            assert!(calls.is_empty());
        }
        let (plan, out, calls, _) =
            run(req(dev, Some(A), Some(Device::CPU), None, Some(true), true)).unwrap();
        assert_eq!(plan.kind, TransferKind::HostCopy);
        assert!(out.needs_host_copy && out.is_copied && out.allocation.is_none());
        assert_eq!(
            calls,
            vec![Call::SynchronizeStream {
                device: cuda0(),
                stream: A
            }]
        );
    }
}

#[test]
fn pinned_and_managed_stay_put_and_sync_producer() {
    for dev in [Device::CUDA_HOST, Device::CUDA_MANAGED] {
        let (plan, _, calls, _) = run(req(dev, Some(A), None, None, None, true)).unwrap();
        assert_eq!(plan.kind, TransferKind::ZeroCopy);
        assert_eq!(plan.target, dev);
        assert_eq!(
            calls,
            vec![Call::SynchronizeStream {
                device: cuda0(),
                stream: A
            }]
        );
        let kind = AllocKind::for_device(dev).unwrap();
        let (plan, _, calls, _) =
            run(req(dev, Some(A), Some(dev), None, Some(true), true)).unwrap();
        assert_eq!(plan.kind, TransferKind::SameDevice);
        assert_eq!(
            calls,
            vec![
                Call::Alloc {
                    kind,
                    device: cuda0(),
                    bytes: BYTES,
                    ptr: ptr(1)
                },
                Call::Copy {
                    device: cuda0(),
                    kind: CopyKind::D2D,
                    dst: ptr(1),
                    src: SRC,
                    bytes: BYTES,
                    stream: A
                },
                Call::SynchronizeStream {
                    device: cuda0(),
                    stream: A
                },
            ]
        );
    }
}

#[test]
fn rocm_host_exports_to_cpu_without_copy() {
    let (plan, _, calls, _) = run(req(
        Device::ROCM_HOST,
        Some(A),
        Some(Device::CPU),
        None,
        None,
        true,
    ))
    .unwrap();
    assert_eq!(plan.kind, TransferKind::ZeroCopy);
    assert_eq!(
        calls,
        vec![Call::SynchronizeStream {
            device: Device::rocm(0),
            stream: A
        }]
    );
}

// ---------------------------------------------------------------- CPU

#[test]
fn cpu_tensors() {
    for copy in [None, Some(false)] {
        for target in [None, Some(Device::CPU)] {
            let (plan, _, calls, _) =
                run(req(Device::CPU, None, target, None, copy, false)).unwrap();
            assert_eq!(plan.kind, TransferKind::ZeroCopy);
            assert!(calls.is_empty());
        }
    }
    let (plan, out, calls, _) = run(req(Device::CPU, None, None, None, Some(true), false)).unwrap();
    assert_eq!(plan.kind, TransferKind::HostCopy);
    assert!(out.needs_host_copy && out.is_copied);
    assert!(calls.is_empty());
}

#[test]
fn cpu_to_cuda_copies_h2d_on_consumer_stream() {
    for copy in [None, Some(true)] {
        let (plan, out, calls, _) = run(req(
            Device::CPU,
            None,
            Some(Device::cuda(1)),
            Some(0xB000),
            copy,
            true,
        ))
        .unwrap();
        assert_eq!(plan.kind, TransferKind::HostToDevice);
        assert_eq!(out.target, Device::cuda(1));
        assert_eq!(
            calls,
            vec![
                Call::Alloc {
                    kind: AllocKind::Device,
                    device: Device::cuda(1),
                    bytes: BYTES,
                    ptr: ptr(1)
                },
                Call::Copy {
                    device: Device::cuda(1),
                    kind: CopyKind::H2D,
                    dst: ptr(1),
                    src: SRC,
                    bytes: BYTES,
                    stream: B
                },
            ]
        );
    }
    let (_, _, calls, _) =
        run(req(Device::CPU, None, Some(cuda0()), Some(-1), None, true)).unwrap();
    assert_eq!(
        &calls[1..],
        &[
            Call::Copy {
                device: cuda0(),
                kind: CopyKind::H2D,
                dst: ptr(1),
                src: SRC,
                bytes: BYTES,
                stream: StreamHandle::LEGACY
            },
            Call::SynchronizeStream {
                device: cuda0(),
                stream: StreamHandle::LEGACY
            },
        ]
    );
    assert_eq!(
        err_kind(req(
            Device::CPU,
            None,
            Some(cuda0()),
            Some(1),
            Some(false),
            true
        )),
        FailureKind::CopyRequired
    );
    assert_eq!(
        err_kind(req(Device::CPU, None, Some(cuda0()), Some(1), None, false)),
        FailureKind::UnsupportedLayout
    );
}

// ---------------------------------------------------------------- ROCm / others

#[test]
fn rocm_zero_copy_syncs_streams_and_refuses_copies() {
    let r = Device::rocm(0);
    let (_, _, calls, _) = run(req(r, Some(A), None, Some(0), None, true)).unwrap();
    assert_eq!(
        calls,
        vec![
            Call::RecordEvent {
                device: r,
                stream: A,
                event: ev(1)
            },
            Call::WaitEvent {
                device: r,
                stream: StreamHandle::NULL,
                event: ev(1)
            },
            Call::DestroyEvent {
                device: r,
                event: ev(1)
            },
        ]
    );
    let (_, _, calls, _) = run(req(r, Some(StreamHandle::NULL), None, None, None, true)).unwrap();
    assert!(calls.is_empty());
    assert_eq!(
        err_kind(req(r, Some(A), None, Some(0), Some(true), true)),
        FailureKind::UnsupportedDevice
    );
    assert_eq!(
        err_kind(req(r, Some(A), Some(Device::CPU), None, None, true)),
        FailureKind::UnsupportedDevice
    );
}

#[test]
fn unsupported_pairs_are_buffer_errors() {
    let pairs: &[(Device, Device)] = &[
        (cuda0(), Device::cuda(1)),
        (cuda0(), Device::CUDA_MANAGED),
        (cuda0(), Device::rocm(0)),
        (Device::CUDA_MANAGED, cuda0()),
        (Device::CUDA_HOST, cuda0()),
        (Device::CUDA_HOST, Device::CUDA_MANAGED),
        (Device::CPU, Device::rocm(0)),
        (Device::CPU, Device::CUDA_HOST),
        (Device::oneapi(0), Device::CPU),
        (Device::metal(0), Device::CPU),
        (Device::CPU, Device::oneapi(0)),
    ];
    for &(src, dst) in pairs {
        let stream = crate::spec::streams::consumer_default_stream(dst.device_type);
        for copy in [None, Some(true), Some(false)] {
            let e = plan_transfer(&req(src, Some(A), Some(dst), stream, copy, true)).unwrap_err();
            assert_eq!(
                e.kind(),
                FailureKind::UnsupportedDevice,
                "{src} -> {dst} copy {copy:?}"
            );
            assert_eq!(e.kind().exception(), PyExceptionKind::BufferError);
        }
    }
    // stream-less devices without a runtime: zero-copy only
    let (plan, _, _, _) = run(req(Device::oneapi(0), None, None, None, None, true)).unwrap();
    assert_eq!(plan.kind, TransferKind::ZeroCopy);
    assert_eq!(
        err_kind(req(Device::oneapi(0), None, None, None, Some(true), true)),
        FailureKind::UnsupportedDevice
    );
}

// ---------------------------------------------------------------- exhaustive invariants

#[test]
fn decision_table_invariants() {
    let devices = [
        Device::CPU,
        cuda0(),
        Device::cuda(1),
        Device::CUDA_HOST,
        Device::CUDA_MANAGED,
        Device::rocm(0),
        Device::ROCM_HOST,
        Device::oneapi(0),
    ];
    let streams = [
        None,
        Some(-2),
        Some(-1),
        Some(0),
        Some(1),
        Some(2),
        Some(0xB000),
    ];
    let producers = [
        None,
        Some(StreamHandle::NULL),
        Some(StreamHandle::LEGACY),
        Some(StreamHandle::PER_THREAD),
        Some(A),
        Some(B),
    ];
    let mut n = 0;
    for src in devices {
        for target in std::iter::once(None).chain(devices.iter().copied().map(Some)) {
            for stream in streams {
                for copy in [None, Some(true), Some(false)] {
                    for contiguous in [true, false] {
                        for producer in producers {
                            n += 1;
                            let r = req(src, producer, target, stream, copy, contiguous);
                            let t = target.unwrap_or(src);
                            let valid_stream =
                                crate::spec::streams::resolve_stream(t.device_type, stream).is_ok();
                            let res = plan_transfer(&r);
                            let Ok(plan) = res else {
                                let k = res.unwrap_err().kind();
                                // device/copy errors win; else a bad stream is InvalidStream
                                let probe = TransferRequest {
                                    stream: crate::spec::streams::consumer_default_stream(
                                        t.device_type,
                                    ),
                                    ..r
                                };
                                match plan_transfer(&probe) {
                                    Err(e) => assert_eq!(k, e.kind(), "{r:?}"),
                                    Ok(_) => {
                                        assert!(!valid_stream, "{r:?}");
                                        assert_eq!(k, FailureKind::InvalidStream, "{r:?}");
                                    }
                                }
                                continue;
                            };
                            assert!(valid_stream, "{r:?}");
                            if copy == Some(false) {
                                assert_eq!(plan.kind, TransferKind::ZeroCopy, "{r:?}");
                            }
                            if copy == Some(true) {
                                assert!(plan.is_copied, "{r:?}");
                            }
                            assert_eq!(
                                plan.is_copied,
                                plan.kind != TransferKind::ZeroCopy,
                                "{r:?}"
                            );
                            if plan.kind == TransferKind::ZeroCopy {
                                assert_eq!(plan.target, t.clone(), "{r:?}");
                            }
                            // events: record on the producer stream, wait on the consumer's
                            for w in plan.steps.windows(2) {
                                if let [
                                    Step::RecordEvent { stream: a, .. },
                                    Step::WaitEvent { stream: b, .. },
                                ] = w
                                {
                                    // no reported stream: the device's default stream
                                    let default = crate::spec::streams::consumer_default_stream(
                                        src.device_type,
                                    )
                                    .map(|s| StreamHandle(s as u64));
                                    assert_eq!(Some(*a), producer.or(default));
                                    assert!(
                                        src.device_type == crate::ffi::DLDeviceType::kDLCUDA
                                            || src.device_type == crate::ffi::DLDeviceType::kDLROCM
                                    );
                                    assert_eq!(Some(*b), plan.consumer_stream);
                                    assert_ne!(a, b);
                                }
                            }
                            if stream == Some(-1) {
                                assert!(
                                    !plan
                                        .steps
                                        .iter()
                                        .any(|s| matches!(s, Step::RecordEvent { .. })),
                                    "{r:?}"
                                );
                            }
                            // a stream-less target with pending producer work is synchronised
                            let stream_less_target = !(t.device_type
                                == crate::ffi::DLDeviceType::kDLCUDA
                                || t.device_type == crate::ffi::DLDeviceType::kDLROCM);
                            let gpu_src = src != Device::CPU && src != Device::oneapi(0);
                            if stream_less_target && gpu_src && producer.is_some() {
                                assert!(
                                    plan.steps
                                        .iter()
                                        .any(|s| matches!(s, Step::SynchronizeStream { .. })),
                                    "{r:?}"
                                );
                            }
                            // the executor leaves nothing behind but the exported buffer
                            let fake = Arc::new(FakeRuntime::new());
                            let rt: Arc<dyn DeviceRuntime> = fake.clone();
                            let out =
                                execute_transfer(&rt, &plan, SRC, &layout(contiguous)).unwrap();
                            assert_eq!(fake.live_events(), 0);
                            assert_eq!(
                                fake.live_allocations().len(),
                                usize::from(out.allocation.is_some()),
                                "{r:?}"
                            );
                            drop(out);
                            assert!(fake.live_allocations().is_empty());
                        }
                    }
                }
            }
        }
    }
    assert_eq!(n, 8 * 9 * 7 * 3 * 2 * 6);
}

// ---------------------------------------------------------------- executor failures

#[test]
fn failed_copy_frees_buffers_and_waits_for_the_stream() {
    let fake = Arc::new(FakeRuntime::new());
    let rt: Arc<dyn DeviceRuntime> = fake.clone();
    fake.fail_on(Op::Copy, FailureKind::DeviceUnavailable);
    let plan = plan_transfer(&req(cuda0(), Some(A), Some(Device::CPU), None, None, false)).unwrap();
    let e = execute_transfer(&rt, &plan, SRC, &layout(false)).unwrap_err();
    assert_eq!(e.kind(), FailureKind::DeviceUnavailable);
    assert!(fake.live_allocations().is_empty());
    let calls = fake.calls();
    let sync = calls
        .iter()
        .position(|c| {
            *c == Call::SynchronizeStream {
                device: cuda0(),
                stream: A,
            }
        })
        .expect("stream synchronised");
    let first_free = calls
        .iter()
        .position(|c| matches!(c, Call::Free { .. }))
        .unwrap();
    assert!(sync < first_free);
}

#[test]
fn failed_wait_destroys_the_event() {
    let fake = Arc::new(FakeRuntime::new());
    let rt: Arc<dyn DeviceRuntime> = fake.clone();
    fake.fail_on(Op::WaitEvent, FailureKind::InvalidStream);
    let plan = plan_transfer(&req(cuda0(), Some(A), None, Some(0xB000), Some(true), true)).unwrap();
    assert!(execute_transfer(&rt, &plan, SRC, &layout(true)).is_err());
    assert_eq!(fake.live_events(), 0);
    assert!(fake.live_allocations().is_empty());
}

#[test]
fn failed_alloc_is_reported() {
    let fake = Arc::new(FakeRuntime::new());
    let rt: Arc<dyn DeviceRuntime> = fake.clone();
    fake.fail_on(Op::Alloc, FailureKind::OutOfMemory);
    let plan = plan_transfer(&req(cuda0(), Some(A), None, Some(1), Some(true), true)).unwrap();
    let e = execute_transfer(&rt, &plan, SRC, &layout(true)).unwrap_err();
    assert_eq!(e.kind(), FailureKind::OutOfMemory);
    assert!(fake.calls().is_empty());
}

#[test]
fn empty_tensors_skip_copies() {
    let fake = Arc::new(FakeRuntime::new());
    let rt: Arc<dyn DeviceRuntime> = fake.clone();
    let shape = [0i64, 3];
    let l = TensorLayout {
        shape: &shape,
        strides: Some(&[1, 0]),
        elem_bytes: 4,
    };
    let r = TransferRequest {
        bytes: l.nbytes(),
        contiguous: l.is_contiguous(),
        ..req(cuda0(), None, Some(Device::CPU), None, None, true)
    };
    let plan = plan_transfer(&r).unwrap();
    execute_transfer(&rt, &plan, SRC, &l).unwrap();
    assert!(
        !fake
            .calls()
            .iter()
            .any(|c| matches!(c, Call::Copy { .. } | Call::StridedCopy { .. }))
    );
}

#[test]
fn device_errors_win_over_stream_errors() {
    // unsupported pair + bad stream → UnsupportedDevice
    assert_eq!(
        err_kind(req(
            cuda0(),
            Some(A),
            Some(Device::cuda(1)),
            Some(0),
            None,
            true
        )),
        FailureKind::UnsupportedDevice
    );
    // copy=False + copy needed + bad stream → CopyRequired
    assert_eq!(
        err_kind(req(
            cuda0(),
            Some(A),
            Some(Device::CPU),
            Some(1),
            Some(false),
            true
        )),
        FailureKind::CopyRequired
    );
    // otherwise the stream
    assert_eq!(
        err_kind(req(
            cuda0(),
            Some(A),
            Some(Device::CPU),
            Some(1),
            None,
            true
        )),
        FailureKind::InvalidStream
    );
}

#[test]
fn can_copy_and_needs_runtime() {
    assert!(can_copy(cuda0(), Device::CPU));
    assert!(can_copy(cuda0(), cuda0()));
    assert!(can_copy(Device::CPU, cuda0()));
    assert!(can_copy(Device::CUDA_HOST, Device::CPU));
    assert!(can_copy(Device::CUDA_MANAGED, Device::CUDA_MANAGED));
    assert!(can_copy(Device::CPU, Device::CPU));
    assert!(!can_copy(cuda0(), Device::cuda(1)));
    assert!(!can_copy(Device::rocm(0), Device::CPU));
    assert!(!can_copy(Device::CPU, Device::CUDA_HOST));
    let p = plan_transfer(&req(Device::CPU, None, None, None, None, true)).unwrap();
    assert!(!p.needs_runtime());
    let p = plan_transfer(&req(cuda0(), None, None, Some(1), None, true)).unwrap();
    assert!(
        !p.needs_runtime(),
        "nothing pending on the producer: no runtime needed"
    );
    let p = plan_transfer(&req(cuda0(), Some(A), None, Some(1), None, true)).unwrap();
    assert!(p.needs_runtime());
}

#[test]
fn run_export_needs_no_runtime_for_plans_without_steps() {
    let p = plan_transfer(&req(
        Device::CUDA_HOST,
        None,
        Some(Device::CPU),
        None,
        Some(false),
        true,
    ))
    .unwrap();
    let out = run_transfer(&p, SRC, &layout(true)).unwrap();
    assert_eq!(out.target, Device::CPU);
    assert!(!out.is_copied && out.allocation.is_none() && !out.needs_host_copy);
    let p = plan_transfer(&req(Device::CPU, None, None, None, Some(true), true)).unwrap();
    assert!(
        run_transfer(&p, SRC, &layout(true))
            .unwrap()
            .needs_host_copy
    );
    // steps but no GPU runtime on this machine → DeviceUnavailable (BufferError)
    if default_runtime().is_err() {
        let p = plan_transfer(&req(cuda0(), Some(A), Some(Device::CPU), None, None, true)).unwrap();
        let e = run_transfer(&p, SRC, &layout(true)).unwrap_err();
        assert_eq!(e.kind(), FailureKind::DeviceUnavailable);
        assert_eq!(e.kind().exception(), PyExceptionKind::BufferError);
    }
}

// ---------------------------------------------------------------- layout helpers

#[test]
fn contiguity() {
    assert!(is_c_contiguous(&[2, 3], None));
    assert!(is_c_contiguous(&[2, 3], Some(&[3, 1])));
    assert!(!is_c_contiguous(&[2, 3], Some(&[1, 2])));
    assert!(is_c_contiguous(&[1, 3], Some(&[99, 1])));
    assert!(is_c_contiguous(&[0, 3], Some(&[7, 7])));
    assert!(is_c_contiguous(&[], Some(&[])));
    assert!(!is_c_contiguous(&[4], Some(&[-1])));
    assert!(!is_c_contiguous(&[4], Some(&[0])));
    assert_eq!(c_strides(&[2, 3, 4]), vec![12, 4, 1]);
    assert_eq!(
        TensorLayout {
            shape: &[2, 3],
            strides: None,
            elem_bytes: 8
        }
        .nbytes(),
        48
    );
    assert_eq!(
        TensorLayout {
            shape: &[],
            strides: None,
            elem_bytes: 8
        }
        .nbytes(),
        8
    );
}

// ---------------------------------------------------------------- consumer side

#[test]
fn consumer_stream_is_never_zero_on_cuda() {
    let c = cuda0();
    assert_eq!(consumer_stream_from_current(c, None), Some(1));
    assert_eq!(
        consumer_stream_from_current(c, Some(StreamHandle::NULL)),
        Some(1)
    );
    assert_eq!(
        consumer_stream_from_current(c, Some(StreamHandle::LEGACY)),
        Some(1)
    );
    assert_eq!(
        consumer_stream_from_current(c, Some(StreamHandle::PER_THREAD)),
        Some(2)
    );
    assert_eq!(consumer_stream_from_current(c, Some(B)), Some(0xB000));
    assert_eq!(
        consumer_stream_from_current(c, Some(StreamHandle(u64::MAX))),
        Some(1)
    );
    assert_eq!(consumer_stream_from_current(Device::rocm(0), None), Some(0));
    assert_eq!(
        consumer_stream_from_current(Device::rocm(0), Some(B)),
        Some(0xB000)
    );
    assert_eq!(consumer_stream_from_current(Device::CPU, Some(B)), None);
    assert_eq!(consumer_stream_from_current(Device::CUDA_HOST, None), None);
    assert_eq!(
        consumer_stream_from_current(Device::CUDA_MANAGED, None),
        None
    );
    // what the consumer passes is always accepted by the producer's rules
    for d in [c, Device::rocm(0), Device::CPU, Device::CUDA_HOST] {
        for cur in [
            None,
            Some(StreamHandle::NULL),
            Some(StreamHandle::LEGACY),
            Some(StreamHandle::PER_THREAD),
            Some(B),
        ] {
            let s = consumer_stream_from_current(d, cur);
            assert!(
                crate::spec::streams::resolve_stream(d.device_type, s).is_ok(),
                "{d} {cur:?} -> {s:?}"
            );
        }
    }
}

#[test]
fn consumer_stream_with_queries_the_runtime() {
    let fake = FakeRuntime::new();
    assert_eq!(consumer_stream_with(&fake, cuda0()), Some(1));
    fake.set_current_stream(cuda0(), Some(B));
    assert_eq!(consumer_stream_with(&fake, cuda0()), Some(0xB000));
    assert_eq!(consumer_stream_with(&fake, Device::cuda(1)), Some(1));
    assert_eq!(consumer_stream_with(&fake, Device::CPU), None);
    fake.fail_on(Op::CurrentStream, FailureKind::DeviceUnavailable);
    assert_eq!(consumer_stream_with(&fake, cuda0()), Some(1));
    // no runtime in this build/test machine: defaults
    assert_eq!(consumer_stream_for(Device::CPU), None);
    assert_eq!(consumer_stream_for(Device::rocm(0)), Some(0));
}

// ---------------------------------------------------------------- zeros

#[test]
fn zeros_allocates_clears_and_frees() {
    let fake = Arc::new(FakeRuntime::new());
    let rt: Arc<dyn DeviceRuntime> = fake.clone();
    for (dev, kind) in [
        (cuda0(), AllocKind::Device),
        (Device::CUDA_HOST, AllocKind::PinnedHost),
        (Device::CUDA_MANAGED, AllocKind::Managed),
    ] {
        fake.take_calls();
        let z = zeros_with(&rt, dev, 64).unwrap();
        assert_eq!(z.dl_device(), dev);
        let p = z.ptr();
        assert_eq!(
            fake.calls(),
            vec![
                Call::Alloc {
                    kind,
                    device: cuda0(),
                    bytes: 64,
                    ptr: p
                },
                Call::MemsetZero {
                    device: cuda0(),
                    ptr: p,
                    bytes: 64,
                    stream: StreamHandle::LEGACY
                },
                Call::SynchronizeStream {
                    device: cuda0(),
                    stream: StreamHandle::LEGACY
                },
            ]
        );
        drop(z);
        assert_eq!(fake.calls().last(), Some(&Call::Free { ptr: p, kind }));
    }
    fake.take_calls();
    let z = zeros_with(&rt, Device::cuda(3), 0).unwrap();
    assert_eq!(fake.calls().len(), 1);
    drop(z);
    let e = zeros_with(&rt, Device::CPU, 8).unwrap_err();
    assert_eq!(e.kind(), FailureKind::UnsupportedDevice);
    fake.fail_on(Op::Alloc, FailureKind::DeviceUnavailable);
    assert_eq!(
        zeros_with(&rt, cuda0(), 8).unwrap_err().kind(),
        FailureKind::DeviceUnavailable
    );
    fake.clear_failure(Op::Alloc);
    fake.fail_on(Op::MemsetZero, FailureKind::DeviceUnavailable);
    assert!(zeros_with(&rt, cuda0(), 8).is_err());
    assert!(
        fake.live_allocations().is_empty(),
        "freed after a failed memset"
    );
}

#[test]
fn owned_allocation_free_reports_errors_once() {
    let fake = Arc::new(FakeRuntime::new());
    let rt: Arc<dyn DeviceRuntime> = fake.clone();
    let a = rt.alloc(AllocKind::Device, cuda0(), 8).unwrap();
    let owned = OwnedAllocation::new(rt.clone(), a);
    owned.free().unwrap();
    assert!(fake.live_allocations().is_empty());
    assert_eq!(
        fake.calls()
            .iter()
            .filter(|c| matches!(c, Call::Free { .. }))
            .count(),
        1
    );
}

// ------------------------------------------------------ table imports (no-sync exports)

#[test]
fn table_import_waits_for_the_producer_stream_on_the_legacy_stream() {
    let fake = FakeRuntime::new();
    wait_for_producer_stream(&fake, cuda0(), A).unwrap();
    assert_eq!(
        fake.take_calls(),
        ordering_calls(cuda0(), A, StreamHandle::LEGACY, 1)
    );
    assert_eq!(fake.live_events(), 0);
    // ROCm's consumer default is stream 0; the per-thread stream differs from CUDA's legacy one.
    wait_for_producer_stream(&fake, Device::rocm(1), A).unwrap();
    let calls = fake.take_calls();
    assert!(
        matches!(
            calls[1],
            Call::WaitEvent {
                stream: StreamHandle::NULL,
                ..
            }
        ),
        "{calls:?}"
    );
    wait_for_producer_stream(&fake, cuda0(), StreamHandle::PER_THREAD).unwrap();
    assert_eq!(fake.take_calls().len(), 3);
}

#[test]
fn table_import_of_default_stream_work_needs_no_event() {
    let fake = FakeRuntime::new();
    for s in [StreamHandle::NULL, StreamHandle::LEGACY] {
        wait_for_producer_stream(&fake, cuda0(), s).unwrap();
    }
    wait_for_producer_stream(&fake, Device::rocm(0), StreamHandle::NULL).unwrap();
    for d in [Device::CPU, Device::CUDA_HOST, Device::CUDA_MANAGED] {
        wait_for_producer_stream(&fake, d, A).unwrap();
    }
    assert_eq!(fake.take_calls(), vec![]);
}

#[test]
fn table_import_wait_failure_still_destroys_the_event() {
    let fake = FakeRuntime::new();
    fake.fail_on(Op::WaitEvent, FailureKind::DeviceUnavailable);
    let e = wait_for_producer_stream(&fake, cuda0(), A).unwrap_err();
    assert_eq!(e.kind(), FailureKind::DeviceUnavailable);
    assert_eq!(fake.live_events(), 0);
    fake.clear_failure(Op::WaitEvent);
    fake.fail_on(Op::RecordEvent, FailureKind::DeviceUnavailable);
    assert!(wait_for_producer_stream(&fake, cuda0(), A).is_err());
    assert!(
        !fake
            .take_calls()
            .iter()
            .any(|c| matches!(c, Call::WaitEvent { .. }))
    );
}
