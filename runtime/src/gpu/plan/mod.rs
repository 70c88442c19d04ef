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
//!
//! The parts: `planner` ([`plan_transfer`], one method per row of the table), `execute` (the
//! steps applied to a runtime: [`execute_transfer`], [`run_transfer`]) and `streams` (the
//! consumer's stream choice and the exchange table's producer-stream wait).
//!
//! [`DeviceRuntime`]: super::DeviceRuntime
//! [`resolve_stream`]: crate::spec::streams::resolve_stream

mod execute;
mod planner;
mod streams;

use crate::device::Device;
use crate::error::DlpackError;
use crate::ffi::DLDeviceType;
use crate::spec::errors::FailureKind;
use crate::spec::streams::{StreamAction, consumer_default_stream, has_stream_rules};

use super::{AllocKind, CopyKind, StreamHandle};

pub use execute::{TransferOutcome, execute_transfer, run_transfer};
pub use planner::plan_transfer;
pub use streams::{
    consumer_stream_for, consumer_stream_from_current, consumer_stream_with, device_default_stream,
    wait_for_producer_stream,
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

impl TransferPlan {
    /// Whether [`execute_transfer`] needs a [`DeviceRuntime`] (any step at all). A zero-copy
    /// plan without steps (CPU data, nothing pending) can be served without a driver.
    ///
    /// [`DeviceRuntime`]: super::DeviceRuntime
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

pub use crate::layout::c_strides;
