//! Pure decision logic for `__dlpack__(stream=..., dl_device=..., copy=...)` on device
//! tensors, and the executor that applies a plan to a [`DeviceRuntime`].
//!
//! [`plan_transfer`] never touches a GPU: it validates the consumer's `stream` with the
//! generated [`resolve_stream`] for the *target* device, picks what to do and lists the
//! runtime steps. [`execute_transfer`] runs the steps. Decision table (A = the producer's stream,
//! for CUDA/ROCm memory whose source reports none the device's default stream, the one
//! `stream=None` stands for; B = the consumer's stream; target = `dl_device` or the tensor's
//! own device):
//!
//! | tensor → target | copy=None | copy=False | copy=True |
//! |---|---|---|---|
//! | CUDA(n) → CUDA(n) | zero-copy; A≠B: record on A, B waits | same | alloc, sync A→B, copy on B |
//! | CUDA(n) → CPU / CUDAHost | D2H into pinned host on A, sync A | CopyRequired | same as None |
//! | CUDAHost/Managed → CPU | zero-copy, sync A | zero-copy, sync A | sync A, host copy (CPU kernels) |
//! | CUDAHost/Managed → itself | zero-copy, sync A | same | alloc same kind, copy on A, sync A |
//! | CPU → CPU | zero-copy | zero-copy | host copy (CPU kernels) |
//! | CPU → CUDA(n) (contiguous) | H2D on B | CopyRequired | H2D on B |
//! | ROCm(n) → ROCm(n) | zero-copy; A≠B: record on A, B waits | same | UnsupportedDevice |
//! | other stream-less device → itself | zero-copy | zero-copy | UnsupportedDevice |
//! | anything else | UnsupportedDevice | UnsupportedDevice | UnsupportedDevice |
//!
//! Streams: the stream is checked against the target device (CUDA: 0 rejected; ROCm: 1
//! and 2 rejected; stream-less targets such as CPU: only None) → `InvalidStream`, after the
//! device / copy checks (their BufferErrors win, as in `export::request`). `-1` means the
//! consumer synchronises: no event; a copy made for such a consumer runs on the producer
//! stream and that one stream is synchronised before returning (the consumer cannot wait on a
//! stream it does not know). For stream-less targets (CPU, CUDAHost, CUDAManaged) the producer
//! synchronises its stream A (never the whole device). Events are only used when A ≠ B
//! (on CUDA the null stream 0 and the legacy stream 1 count as the same stream).

use std::sync::Arc;

use crate::device::Device;
use crate::error::{DlpackError, Result};
use crate::ffi::DLDeviceType;
use crate::spec::errors::FailureKind;
use crate::spec::streams::{
    StreamAction, consumer_default_stream, has_stream_rules, resolve_stream, stream_value_for,
};

use super::{
    AllocKind, CopyKind, DevicePtr, DeviceRuntime, EventHandle, OwnedAllocation, StreamHandle,
};

/// Shape and strides of the tensor being exported (strides in elements, as in DLPack;
/// `None` = C-contiguous). Sub-byte packed types are described as bytes by the caller
/// (e.g. `shape = [nbytes]`, `elem_bytes = 1`) when their layout is contiguous.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorLayout<'a> {
    pub shape: &'a [i64],
    pub strides: Option<&'a [i64]>,
    pub elem_bytes: usize,
}

impl TensorLayout<'_> {
    /// Number of elements (product of the shape; 1 for rank 0).
    pub fn numel(&self) -> u64 {
        self.shape.iter().map(|&d| d.max(0) as u64).product()
    }
    /// Size of the C-contiguous copy in bytes.
    pub fn nbytes(&self) -> usize {
        (self.numel() as usize).saturating_mul(self.elem_bytes)
    }
    /// Whether the strides describe a C-contiguous layout (size-1 dimensions and empty
    /// tensors ignore their strides).
    pub fn is_contiguous(&self) -> bool {
        is_c_contiguous(self.shape, self.strides)
    }
}

/// C-contiguity of `shape` with `strides` (`None`: C-contiguous by definition), by the rule of
/// [`crate::layout::is_c_contiguous`].
pub fn is_c_contiguous(shape: &[i64], strides: Option<&[i64]>) -> bool {
    strides.is_none_or(|s| crate::layout::is_c_contiguous(shape, s))
}

/// What `__dlpack__` was asked, plus what the producer knows about its tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransferRequest {
    /// Where the tensor's memory is (`__dlpack_device__`).
    pub device: Device,
    /// The stream the producer's pending work on the tensor was queued on; `None` when
    /// nothing is pending (host data, or the producer synchronised already).
    pub producer_stream: Option<StreamHandle>,
    /// `dl_device=`; `None` = stay on `device`.
    pub dl_device: Option<Device>,
    /// `stream=` as the consumer passed it (already type-checked as an int).
    pub stream: Option<i64>,
    /// `copy=`.
    pub copy: Option<bool>,
    /// Whether the tensor is C-contiguous ([`TensorLayout::is_contiguous`]).
    pub contiguous: bool,
    /// Size of a C-contiguous copy in bytes ([`TensorLayout::nbytes`]).
    pub bytes: usize,
}

/// The kind of export a plan performs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TransferKind {
    /// Export the tensor's own memory.
    ZeroCopy,
    /// Copy device memory into fresh pinned host memory (target CPU or CUDAHost).
    DeviceToHost,
    /// Copy into fresh memory of the same device.
    SameDevice,
    /// Copy host memory into fresh device memory.
    HostToDevice,
    /// Copy host-accessible memory into fresh plain host memory with the CPU copy kernels
    /// (`dlbind::copy`) after the plan's steps (which make the data ready for the host).
    HostCopy,
}

/// A buffer a step reads or writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Buf {
    /// The tensor being exported (its data pointer, byte offset included).
    Src,
    /// The fresh buffer that is exported (from [`Step::AllocDst`]).
    Dst,
    /// A contiguous device scratch buffer (from [`Step::AllocTemp`]).
    Temp,
}

/// One runtime action of a plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// Allocate the exported buffer.
    AllocDst {
        kind: AllocKind,
        device: Device,
        bytes: usize,
    },
    /// Allocate a contiguous device scratch buffer.
    AllocTemp { device: Device, bytes: usize },
    /// Record an event on `stream` (the producer's).
    RecordEvent {
        device: Device,
        stream: StreamHandle,
    },
    /// Make `stream` (the consumer's) wait for the event of the last `RecordEvent`.
    WaitEvent {
        device: Device,
        stream: StreamHandle,
    },
    /// Destroy the event of the last `RecordEvent`.
    DestroyEvent { device: Device },
    /// Strided (non-contiguous) source → contiguous `to`, on `stream`.
    StridedCopy {
        device: Device,
        stream: StreamHandle,
        to: Buf,
    },
    /// Linear copy of `bytes` bytes on `stream`.
    Copy {
        device: Device,
        kind: CopyKind,
        stream: StreamHandle,
        from: Buf,
        to: Buf,
        bytes: usize,
    },
    /// Block until `stream` is done (one stream, never the device).
    SynchronizeStream {
        device: Device,
        stream: StreamHandle,
    },
    /// Free the scratch buffer.
    FreeTemp,
}

/// What to do for one `__dlpack__` call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransferPlan {
    pub kind: TransferKind,
    /// The device the exported capsule reports.
    pub target: Device,
    /// Set `DLPACK_FLAG_BITMASK_IS_COPIED`.
    pub is_copied: bool,
    /// The consumer's stream after mapping (1 → `CU_STREAM_LEGACY`, 2 →
    /// `CU_STREAM_PER_THREAD`, > 2 → the handle, ROCm 0 → null); `None` for stream-less
    /// targets and for -1.
    pub consumer_stream: Option<StreamHandle>,
    /// Runtime steps in order. For [`TransferKind::HostCopy`] the caller copies after them.
    pub steps: Vec<Step>,
}

fn err(kind: FailureKind, msg: String) -> DlpackError {
    DlpackError::new(kind, msg)
}

fn is_type(d: Device, t: DLDeviceType) -> bool {
    d.device_type == t
}

/// On CUDA, the null stream (0) and `CU_STREAM_LEGACY` (1) are the same stream.
fn same_stream(device: Device, a: StreamHandle, b: StreamHandle) -> bool {
    let norm = |s: StreamHandle| {
        if is_type(device, DLDeviceType::kDLCUDA) && s == StreamHandle::NULL {
            StreamHandle::LEGACY
        } else {
            s
        }
    };
    norm(a) == norm(b)
}

/// The GPU whose context serves memory of `device` (pinned / managed memory: the GPU with
/// the same ordinal; ROCm host memory: the ROCm GPU).
fn context_device(device: Device) -> Device {
    match device.device_type {
        DLDeviceType::kDLCUDAHost | DLDeviceType::kDLCUDAManaged => Device::cuda(device.device_id),
        DLDeviceType::kDLROCMHost => Device::rocm(device.device_id),
        _ => device,
    }
}

/// Whether memory of `device` belongs to a GPU runtime (so work may be pending on a stream).
fn has_gpu_context(device: Device) -> bool {
    matches!(
        device.device_type,
        DLDeviceType::kDLCUDA
            | DLDeviceType::kDLCUDAHost
            | DLDeviceType::kDLCUDAManaged
            | DLDeviceType::kDLROCM
            | DLDeviceType::kDLROCMHost
    )
}

/// Whether the tensor's device has streams of its own (the spec's stream rules: CUDA, ROCm).
fn is_stream_device(d: Device) -> bool {
    has_stream_rules(d.device_type)
}

/// Maps a validated stream action to a handle: `None` for stream-less devices and for -1.
fn consumer_handle(action: StreamAction) -> Option<StreamHandle> {
    match action {
        StreamAction::None | StreamAction::NoSync => None,
        StreamAction::LegacyDefault => Some(StreamHandle::LEGACY),
        StreamAction::PerThreadDefault => Some(StreamHandle::PER_THREAD),
        StreamAction::DefaultStream => Some(StreamHandle::NULL),
        StreamAction::Pointer(p) => Some(StreamHandle(p as u64)),
    }
}

/// Steps that make work of producer stream `producer` visible on consumer stream `consumer`.
fn order_streams(
    steps: &mut Vec<Step>,
    device: Device,
    producer: Option<StreamHandle>,
    consumer: StreamHandle,
) {
    if let Some(a) = producer
        && !same_stream(device, a, consumer)
    {
        steps.push(Step::RecordEvent { device, stream: a });
        steps.push(Step::WaitEvent {
            device,
            stream: consumer,
        });
        steps.push(Step::DestroyEvent { device });
    }
}

/// The stream that `stream=None` stands for on `device` (the spec's consumer default: CUDA's
/// legacy stream, ROCm's 0), as a handle; `None` for stream-less devices. GPU data whose source
/// records no pending stream is taken to be ready on it.
pub fn device_default_stream(device: Device) -> Option<StreamHandle> {
    consumer_default_stream(device.device_type).map(|s| StreamHandle(s as u64))
}

/// The consumer's half of a C exchange table's no-sync export
/// (`managed_tensor_from_py_object_no_sync`): makes the stream that `__dlpack__(stream=None)`
/// stands for on `device` (the spec's consumer default: CUDA's legacy stream, ROCm's 0) wait
/// for the work queued on `producer`, the producer's current work stream as its table's
/// `current_work_stream` reports it. That is what the producer's `__dlpack__` would have
/// done itself, so a table import is ordered like a `__dlpack__` import: later dlbind copies
/// of the view (queued on that default stream) see the producer's writes. An event recorded
/// on `producer`, waited on, destroyed; nothing for stream-less devices or when the two
/// streams are the same (on CUDA the null stream is the legacy one). Never a synchronise.
pub fn wait_for_producer_stream(
    runtime: &dyn DeviceRuntime,
    device: Device,
    producer: StreamHandle,
) -> Result<()> {
    let Some(consumer) = device_default_stream(device) else {
        return Ok(());
    };
    if same_stream(device, producer, consumer) {
        return Ok(());
    }
    let event = runtime.record_event(device, producer)?;
    let waited = runtime.wait_event(device, consumer, event);
    let destroyed = runtime.destroy_event(device, event);
    waited.and(destroyed)
}

/// Decides what `__dlpack__` must do. Pure; see the module docs for the table.
///
/// Errors: `InvalidStream` (ValueError) for a stream the target device's rules reject,
/// `CopyRequired` (BufferError) for copy=False when a copy is needed, `UnsupportedDevice`
/// (BufferError) for pairs this runtime cannot serve, `UnsupportedLayout` for a
/// non-contiguous host → device copy.
pub fn plan_transfer(req: &TransferRequest) -> Result<TransferPlan> {
    let src = req.device;
    let target = req.dl_device.unwrap_or(src);
    let action = match resolve_stream(target.device_type, req.stream) {
        Ok(action) => action,
        Err(v) => {
            // Device and copy errors (BufferError) win over a bad stream, as in
            // `export::request`: plan again with the target's default stream first.
            let probe = TransferRequest {
                stream: consumer_default_stream(target.device_type),
                ..*req
            };
            plan_transfer(&probe)?;
            return Err(v.into());
        }
    };
    let p = Planner {
        req,
        src,
        target,
        // Only GPU memory (device, pinned, managed, ROCm host) has producer streams; a stream
        // reported for anything else is ignored. Memory on a device with streams whose source
        // reports none is taken to be ready on the device's default stream, the one
        // `stream=None` stands for (CUDA: legacy, ROCm: 0): a view imported for that stream, or a
        // host-to-device copy dlbind queued on it, may still be in flight there, so a consumer
        // on another stream waits for it (an event; nothing when it is the same stream).
        producer: if !has_gpu_context(src) {
            None
        } else if is_stream_device(src) {
            req.producer_stream.or_else(|| device_default_stream(src))
        } else {
            req.producer_stream
        },
        consumer: consumer_handle(action),
        no_sync: action == StreamAction::NoSync,
        want_copy: req.copy == Some(true),
        forbid_copy: req.copy == Some(false),
    };
    if target == src {
        return if is_stream_device(src) {
            p.same_stream_device()
        } else {
            p.same_streamless_device()
        };
    }
    let target_is_pinned = is_type(target, DLDeviceType::kDLCUDAHost);
    if is_type(src, DLDeviceType::kDLCUDA) && (target.is_cpu() || target_is_pinned) {
        return p.device_to_host(target_is_pinned);
    }
    if target.is_cpu() && src.is_host_accessible() && !src.is_cpu() {
        return Ok(p.host_accessible_to_cpu());
    }
    if src.is_cpu() && is_type(target, DLDeviceType::kDLCUDA) {
        return p.host_to_device();
    }
    Err(p.unsupported(""))
}

/// One export request being planned: the devices, the two streams and the copy wish, with one
/// method per case of the module's table.
struct Planner<'a> {
    req: &'a TransferRequest,
    src: Device,
    target: Device,
    /// The producer's pending stream (GPU memory only).
    producer: Option<StreamHandle>,
    /// The consumer's stream (`None`: none, or `-1`: no synchronisation).
    consumer: Option<StreamHandle>,
    /// The consumer asked for no synchronisation (`stream=-1`).
    no_sync: bool,
    want_copy: bool,
    forbid_copy: bool,
}

impl Planner<'_> {
    fn plan(&self, kind: TransferKind, is_copied: bool, steps: Vec<Step>) -> TransferPlan {
        TransferPlan {
            kind,
            target: self.target,
            is_copied,
            consumer_stream: self.consumer,
            steps,
        }
    }

    fn unsupported(&self, why: &str) -> DlpackError {
        err(
            FailureKind::UnsupportedDevice,
            format!(
                "cannot export a tensor on {} to dl_device={}{why}",
                self.src, self.target
            ),
        )
    }

    fn copy_required(&self) -> DlpackError {
        err(
            FailureKind::CopyRequired,
            format!(
                "exporting a tensor on {} to dl_device={} needs a copy, but copy=False",
                self.src, self.target
            ),
        )
    }

    /// Same device with streams (CUDA, ROCm): zero-copy with the streams ordered, or (CUDA,
    /// copy=True) a device copy on the consumer stream after it waited for the producer's.
    fn same_stream_device(&self) -> Result<TransferPlan> {
        let (dev, req) = (self.src, self.req);
        let mut steps = Vec::new();
        if !self.want_copy {
            if let Some(b) = self.consumer {
                order_streams(&mut steps, dev, self.producer, b);
            }
            return Ok(self.plan(TransferKind::ZeroCopy, false, steps));
        }
        if !is_type(dev, DLDeviceType::kDLCUDA) {
            return Err(self.unsupported(" with copy=True: no runtime for this device type"));
        }
        steps.push(Step::AllocDst {
            kind: AllocKind::Device,
            device: dev,
            bytes: req.bytes,
        });
        // The copy runs on the consumer stream B after B waited for A; for -1 it runs on A
        // and A is synchronised.
        let copy_stream = match self.consumer {
            Some(b) => {
                order_streams(&mut steps, dev, self.producer, b);
                b
            }
            None => self.producer.unwrap_or(StreamHandle::LEGACY),
        };
        push_device_copy(&mut steps, dev, copy_stream, req, CopyKind::D2D);
        if self.no_sync {
            steps.push(Step::SynchronizeStream {
                device: dev,
                stream: copy_stream,
            });
        }
        Ok(self.plan(TransferKind::SameDevice, true, steps))
    }

    /// Same stream-less device (CPU, CUDAHost, CUDAManaged, ROCMHost, others): zero-copy after
    /// the producer's stream is synchronised, a host copy for CPU, a device copy for pinned or
    /// managed memory.
    fn same_streamless_device(&self) -> Result<TransferPlan> {
        let (src, req) = (self.src, self.req);
        let mut steps = Vec::new();
        let ctx = context_device(src);
        if !self.want_copy {
            if let Some(a) = self.producer {
                steps.push(Step::SynchronizeStream {
                    device: ctx,
                    stream: a,
                });
            }
            return Ok(self.plan(TransferKind::ZeroCopy, false, steps));
        }
        if src.is_cpu() {
            return Ok(self.plan(TransferKind::HostCopy, true, steps));
        }
        if is_type(src, DLDeviceType::kDLCUDAHost) || is_type(src, DLDeviceType::kDLCUDAManaged) {
            let kind = AllocKind::for_device(src).unwrap_or(AllocKind::PinnedHost);
            let stream = self.producer.unwrap_or(StreamHandle::LEGACY);
            steps.push(Step::AllocDst {
                kind,
                device: ctx,
                bytes: req.bytes,
            });
            push_device_copy(&mut steps, ctx, stream, req, CopyKind::D2D);
            steps.push(Step::SynchronizeStream {
                device: ctx,
                stream,
            });
            return Ok(self.plan(TransferKind::SameDevice, true, steps));
        }
        Err(self.unsupported(" with copy=True: no runtime for this device type"))
    }

    /// CUDA → CPU / CUDAHost: device-to-host copy into pinned memory (through a contiguous
    /// device temporary for strided data).
    fn device_to_host(&self, target_is_pinned: bool) -> Result<TransferPlan> {
        if self.forbid_copy {
            return Err(self.copy_required());
        }
        let (dev, req) = (self.src, self.req);
        let mut steps = Vec::new();
        // Stream-less target: the copy is ordered after the producer's work by running on
        // the producer stream, which is then synchronised.
        let stream = self.producer.unwrap_or(StreamHandle::LEGACY);
        steps.push(Step::AllocDst {
            kind: AllocKind::PinnedHost,
            device: dev,
            bytes: req.bytes,
        });
        if req.contiguous {
            steps.push(Step::Copy {
                device: dev,
                kind: CopyKind::D2H,
                stream,
                from: Buf::Src,
                to: Buf::Dst,
                bytes: req.bytes,
            });
            steps.push(Step::SynchronizeStream {
                device: dev,
                stream,
            });
        } else {
            steps.push(Step::AllocTemp {
                device: dev,
                bytes: req.bytes,
            });
            steps.push(Step::StridedCopy {
                device: dev,
                stream,
                to: Buf::Temp,
            });
            steps.push(Step::Copy {
                device: dev,
                kind: CopyKind::D2H,
                stream,
                from: Buf::Temp,
                to: Buf::Dst,
                bytes: req.bytes,
            });
            steps.push(Step::SynchronizeStream {
                device: dev,
                stream,
            });
            steps.push(Step::FreeTemp);
        }
        Ok(TransferPlan {
            kind: TransferKind::DeviceToHost,
            target: if target_is_pinned {
                self.target
            } else {
                Device::CPU
            },
            is_copied: true,
            consumer_stream: None,
            steps,
        })
    }

    /// Host-accessible GPU memory (pinned, managed, ROCm host) → CPU: no copy needed, the
    /// producer's stream synchronised.
    fn host_accessible_to_cpu(&self) -> TransferPlan {
        let mut steps = Vec::new();
        if let Some(a) = self.producer {
            steps.push(Step::SynchronizeStream {
                device: context_device(self.src),
                stream: a,
            });
        }
        let kind = if self.want_copy {
            TransferKind::HostCopy
        } else {
            TransferKind::ZeroCopy
        };
        self.plan(kind, self.want_copy, steps)
    }

    /// CPU → CUDA: host-to-device copy on the consumer stream (synchronised when the consumer
    /// gave none). C-contiguous data only.
    fn host_to_device(&self) -> Result<TransferPlan> {
        if self.forbid_copy {
            return Err(self.copy_required());
        }
        let (dev, req) = (self.target, self.req);
        if !req.contiguous {
            return Err(err(
                FailureKind::UnsupportedLayout,
                format!(
                    "a host-to-device export to {dev} needs a C-contiguous tensor; make it contiguous first"
                ),
            ));
        }
        let stream = self.consumer.unwrap_or(StreamHandle::LEGACY);
        let mut steps = vec![
            Step::AllocDst {
                kind: AllocKind::Device,
                device: dev,
                bytes: req.bytes,
            },
            Step::Copy {
                device: dev,
                kind: CopyKind::H2D,
                stream,
                from: Buf::Src,
                to: Buf::Dst,
                bytes: req.bytes,
            },
        ];
        if self.consumer.is_none() {
            steps.push(Step::SynchronizeStream {
                device: dev,
                stream,
            });
        }
        Ok(self.plan(TransferKind::HostToDevice, true, steps))
    }
}

impl TransferPlan {
    /// Whether [`execute_transfer`] needs a [`DeviceRuntime`] (any step at all). A zero-copy
    /// plan without steps (CPU data, nothing pending) can be served without a driver.
    pub fn needs_runtime(&self) -> bool {
        !self.steps.is_empty()
    }
}

/// Whether this planner can copy memory of `from` into fresh memory of `to` (with
/// `copy=True`, a C-contiguous source and the target's default stream): the answer for
/// `export::request::DeviceRuntime::can_copy`. Whether a driver is present is only known
/// when the plan runs ([`super::default_runtime`]).
pub fn can_copy(from: Device, to: Device) -> bool {
    let probe = TransferRequest {
        device: from,
        producer_stream: None,
        dl_device: Some(to),
        stream: consumer_default_stream(to.device_type),
        copy: Some(true),
        contiguous: true,
        bytes: 0,
    };
    plan_transfer(&probe).is_ok()
}

fn push_device_copy(
    steps: &mut Vec<Step>,
    dev: Device,
    stream: StreamHandle,
    req: &TransferRequest,
    kind: CopyKind,
) {
    if req.contiguous {
        steps.push(Step::Copy {
            device: dev,
            kind,
            stream,
            from: Buf::Src,
            to: Buf::Dst,
            bytes: req.bytes,
        });
    } else {
        steps.push(Step::StridedCopy {
            device: dev,
            stream,
            to: Buf::Dst,
        });
    }
}

/// The result of [`execute_transfer`].
#[derive(Debug)]
pub struct TransferOutcome {
    /// The fresh buffer to export (`None` for zero-copy and [`TransferKind::HostCopy`]). Keep it
    /// alive in the capsule's owner; it frees itself on drop.
    pub allocation: Option<OwnedAllocation>,
    /// The device the capsule reports.
    pub target: Device,
    /// Set `IS_COPIED`.
    pub is_copied: bool,
    /// The caller must still copy the (now host-ready) source with the CPU kernels.
    pub needs_host_copy: bool,
}

/// Applies `plan` for a tensor whose data pointer (byte offset included) is `src`.
///
/// On error, events are destroyed and scratch / destination buffers freed (after
/// synchronising the stream their copies were queued on).
pub fn execute_transfer(
    runtime: &Arc<dyn DeviceRuntime>,
    plan: &TransferPlan,
    src: DevicePtr,
    layout: &TensorLayout<'_>,
) -> Result<TransferOutcome> {
    let rt = runtime.as_ref();
    let mut dst: Option<OwnedAllocation> = None;
    let mut temp: Option<OwnedAllocation> = None;
    let mut event: Option<(Device, EventHandle)> = None;
    let mut last_stream: Option<(Device, StreamHandle)> = None;

    let result = (|| -> Result<()> {
        let ptr = |b: Buf,
                   dst: &Option<OwnedAllocation>,
                   temp: &Option<OwnedAllocation>|
         -> Result<DevicePtr> {
            match b {
                Buf::Src => Ok(src),
                Buf::Dst => dst
                    .as_ref()
                    .map(|a| a.ptr())
                    .ok_or_else(|| internal("Dst used before AllocDst")),
                Buf::Temp => temp
                    .as_ref()
                    .map(|a| a.ptr())
                    .ok_or_else(|| internal("Temp used before AllocTemp")),
            }
        };
        for step in &plan.steps {
            match *step {
                Step::AllocDst {
                    kind,
                    device,
                    bytes,
                } => {
                    let a = rt.alloc(kind, device, bytes)?;
                    dst = Some(OwnedAllocation::new(Arc::clone(runtime), a));
                }
                Step::AllocTemp { device, bytes } => {
                    let a = rt.alloc(AllocKind::Device, device, bytes)?;
                    temp = Some(OwnedAllocation::new(Arc::clone(runtime), a));
                }
                Step::RecordEvent { device, stream } => {
                    event = Some((device, rt.record_event(device, stream)?));
                }
                Step::WaitEvent { device, stream } => {
                    let (_, ev) = event.ok_or_else(|| internal("WaitEvent before RecordEvent"))?;
                    rt.wait_event(device, stream, ev)?;
                }
                Step::DestroyEvent { device } => {
                    if let Some((_, ev)) = event.take() {
                        rt.destroy_event(device, ev)?;
                    }
                }
                Step::StridedCopy { device, stream, to } => {
                    let to = ptr(to, &dst, &temp)?;
                    last_stream = Some((device, stream));
                    if layout.numel() > 0 {
                        let contiguous_strides;
                        let strides = match layout.strides {
                            Some(s) => s,
                            None => {
                                contiguous_strides = c_strides(layout.shape);
                                &contiguous_strides
                            }
                        };
                        rt.strided_copy_to_contiguous(
                            device,
                            src,
                            layout.shape,
                            strides,
                            layout.elem_bytes,
                            to,
                            stream,
                        )?;
                    }
                }
                Step::Copy {
                    device,
                    kind,
                    stream,
                    from,
                    to,
                    bytes,
                } => {
                    let (from, to) = (ptr(from, &dst, &temp)?, ptr(to, &dst, &temp)?);
                    last_stream = Some((device, stream));
                    if bytes > 0 {
                        rt.copy(device, kind, to, from, bytes, stream)?;
                    }
                }
                Step::SynchronizeStream { device, stream } => {
                    rt.synchronize_stream(device, stream)?;
                    last_stream = None;
                }
                Step::FreeTemp => {
                    if let Some(t) = temp.take() {
                        t.free()?;
                    }
                }
            }
        }
        Ok(())
    })();

    match result {
        Ok(()) => Ok(TransferOutcome {
            allocation: dst,
            target: plan.target,
            is_copied: plan.is_copied,
            needs_host_copy: plan.kind == TransferKind::HostCopy,
        }),
        Err(e) => {
            if let Some((device, ev)) = event.take() {
                let _ = rt.destroy_event(device, ev);
            }
            // Queued copies may still read / write the buffers: wait for their stream before
            // the buffers free themselves on drop.
            if let Some((device, stream)) = last_stream
                && (temp.is_some() || dst.is_some())
            {
                let _ = rt.synchronize_stream(device, stream);
            }
            drop(temp);
            drop(dst);
            Err(e)
        }
    }
}

/// [`execute_transfer`] with the process-wide runtime ([`super::default_runtime`]), fetched only
/// when the plan has steps: a zero-copy plan with nothing to synchronise (e.g. pinned memory
/// with no pending work, exported to CPU) works without a driver. This is what `__dlpack__`
/// calls after [`plan_transfer`]. Errors: `DeviceUnavailable` (BufferError) when steps need a
/// driver and there is none, plus the runtime's errors.
pub fn run_transfer(
    plan: &TransferPlan,
    src: DevicePtr,
    layout: &TensorLayout<'_>,
) -> Result<TransferOutcome> {
    if !plan.needs_runtime() {
        return Ok(TransferOutcome {
            allocation: None,
            target: plan.target,
            is_copied: plan.is_copied,
            needs_host_copy: plan.kind == TransferKind::HostCopy,
        });
    }
    let runtime = super::default_runtime()?;
    execute_transfer(&runtime, plan, src, layout)
}

fn internal(what: &str) -> DlpackError {
    DlpackError::new(
        FailureKind::BadArgumentValue,
        format!("dlbind internal error: malformed export plan ({what})"),
    )
}

pub use crate::layout::c_strides;

/// The `stream=` a consumer passes to a producer for data that will be used on `device`,
/// given the destination's current stream: CUDA → the current stream (> 2), 2 for the
/// per-thread stream, else 1 (never 0); ROCm → the current stream, else 0; stream-less
/// devices → `None`. Built on the generated `consumer_default_stream` and `stream_value_for`.
pub fn consumer_stream_from_current(device: Device, current: Option<StreamHandle>) -> Option<i64> {
    let default = consumer_default_stream(device.device_type);
    // The action the current stream stands for, passed as the value the spec's rules give it
    // (`stream_value_for`). Handles 0 and 1 (the legacy stream), and actions the device has no
    // value for, pass the device's default.
    let action = match current {
        Some(StreamHandle::PER_THREAD) => StreamAction::PerThreadDefault,
        Some(StreamHandle(h)) if h <= i64::MAX as u64 => StreamAction::Pointer(h as i64),
        _ => return default,
    };
    stream_value_for(device.device_type, action).or(default)
}

/// [`consumer_stream_from_current`] with the current stream taken from `runtime` (a
/// runtime error counts as "no current stream").
pub fn consumer_stream_with(runtime: &dyn DeviceRuntime, device: Device) -> Option<i64> {
    let current = if is_stream_device(device) {
        runtime.current_stream(device).ok().flatten()
    } else {
        None
    };
    consumer_stream_from_current(device, current)
}

/// The stream `from_dlpack` passes for a destination `device`, using the process-wide
/// runtime ([`super::default_runtime`]) when one is available (CUDA: its current stream, or 1;
/// never 0; ROCm 0; CPU `None`).
pub fn consumer_stream_for(device: Device) -> Option<i64> {
    if is_stream_device(device)
        && let Ok(rt) = super::default_runtime()
    {
        return consumer_stream_with(rt.as_ref(), device);
    }
    consumer_stream_from_current(device, None)
}
