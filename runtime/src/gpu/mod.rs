//! GPU devices and streams: the [`DeviceRuntime`] trait, the pure export planner
//! ([`plan`]), a recording fake (`fake`) and the cudarc implementation (`cuda`, feature
//! `cuda`).
//!
//! Everything that decides *what* to do for `__dlpack__(stream=..., dl_device=..., copy=...)`
//! lives in [`plan`] and is pure: it validates the stream with the generated
//! [`resolve_stream`](crate::spec::streams::resolve_stream) for the target device, picks
//! zero-copy / device-to-host copy / same-device copy, and lists the synchronisation steps
//! (record an event on the producer stream, make the consumer stream wait on it; never a
//! device-wide synchronise). [`plan::execute_transfer`] applies such a plan to any
//! [`DeviceRuntime`]; the cudarc runtime only implements the primitive operations.
//!
//! Handles are plain integers so that the trait is object-safe and the fake can record them:
//! streams and events are the raw `CUstream` / `CUevent` values, device memory is a
//! `CUdeviceptr` (`u64`), host memory a host address as `u64`.

use std::fmt;
use std::sync::Arc;

use crate::device::Device;
use crate::error::{DlpackError, Result};
use crate::ffi::DLDeviceType;
use crate::spec::errors::FailureKind;

#[cfg(any(test, feature = "test-util"))]
pub mod fake;
pub mod kernels;
pub mod plan;

#[cfg(feature = "cuda")]
pub mod cuda;

#[cfg(test)]
mod plan_tests;

pub use plan::{
    Step, TensorLayout, TransferKind, TransferOutcome, TransferPlan, TransferRequest, can_copy,
    consumer_stream_for, consumer_stream_from_current, consumer_stream_with, device_default_stream,
    execute_transfer, plan_transfer, run_transfer, wait_for_producer_stream,
};

/// A raw stream handle (`CUstream` / `hipStream_t` as an integer).
///
/// `0` is the null stream; on CUDA, `1` is `CU_STREAM_LEGACY` and `2` is
/// `CU_STREAM_PER_THREAD` (the DLPack stream values 1 and 2 map to them unchanged).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct StreamHandle(pub u64);

impl StreamHandle {
    /// The null stream (`0`). Never passed to a producer on CUDA (ambiguous there); the ROCm
    /// default stream.
    pub const NULL: StreamHandle = StreamHandle(0);
    /// `CU_STREAM_LEGACY` (`0x1`): the legacy default stream.
    pub const LEGACY: StreamHandle = StreamHandle(1);
    /// `CU_STREAM_PER_THREAD` (`0x2`): the per-thread default stream.
    pub const PER_THREAD: StreamHandle = StreamHandle(2);
}

impl fmt::Display for StreamHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            StreamHandle::NULL => f.write_str("stream 0 (null)"),
            StreamHandle::LEGACY => f.write_str("stream 1 (legacy default)"),
            StreamHandle::PER_THREAD => f.write_str("stream 2 (per-thread default)"),
            StreamHandle(h) => write!(f, "stream {h:#x}"),
        }
    }
}

/// A raw event handle (`CUevent` as an integer).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct EventHandle(pub u64);

/// A device pointer (`CUdeviceptr`) or, for host memory, a host address.
pub type DevicePtr = u64;

/// Direction of a linear copy.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum CopyKind {
    /// Device (or managed / pinned) memory to host memory.
    D2H,
    /// Host memory to device memory.
    H2D,
    /// Between two device-addressable buffers (device, managed or pinned memory, through
    /// unified addressing).
    D2D,
}

/// What kind of memory to allocate.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum AllocKind {
    /// Device memory (`cuMemAlloc`), reported as `kDLCUDA`.
    Device,
    /// Page-locked host memory (`cuMemHostAlloc`, portable), reported as `kDLCUDAHost`.
    PinnedHost,
    /// Managed (unified) memory (`cuMemAllocManaged`, attach global), reported as
    /// `kDLCUDAManaged`.
    Managed,
}

impl AllocKind {
    /// The allocation kind that backs memory of `device` (`kDLCUDA` → Device, `kDLCUDAHost` →
    /// PinnedHost, `kDLCUDAManaged` → Managed), `None` for other device types.
    pub fn for_device(device: Device) -> Option<AllocKind> {
        match device.device_type {
            DLDeviceType::kDLCUDA => Some(AllocKind::Device),
            DLDeviceType::kDLCUDAHost => Some(AllocKind::PinnedHost),
            DLDeviceType::kDLCUDAManaged => Some(AllocKind::Managed),
            _ => None,
        }
    }

    /// The DLPack device memory of this kind reports, for an allocation made on GPU `ordinal`.
    pub fn dl_device(self, ordinal: i32) -> Device {
        match self {
            AllocKind::Device => Device::cuda(ordinal),
            // Pinned host memory is not tied to one GPU: DLPack convention is ordinal 0.
            AllocKind::PinnedHost => Device::cuda_host(0),
            AllocKind::Managed => Device::cuda_managed(0),
        }
    }

    /// Whether the CPU can dereference memory of this kind.
    pub fn is_host_accessible(self) -> bool {
        !matches!(self, AllocKind::Device)
    }
}

/// One allocation made by a [`DeviceRuntime`]. Plain data: free it with
/// [`DeviceRuntime::free`], or wrap it in an [`OwnedAllocation`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct DeviceAllocation {
    /// Device pointer (Device / Managed) or host address (PinnedHost). Never 0, even for
    /// `bytes == 0` (the runtime allocates at least one byte).
    pub ptr: DevicePtr,
    /// The size asked for.
    pub bytes: usize,
    pub kind: AllocKind,
    /// The GPU the allocation was made through (its context).
    pub device: Device,
}

impl DeviceAllocation {
    /// The device the memory reports in `__dlpack_device__`.
    pub fn dl_device(&self) -> Device {
        self.kind.dl_device(self.device.device_id)
    }
}

/// The primitive operations a GPU runtime offers. Object-safe; every method takes `&self`.
///
/// `device` arguments name the GPU whose context the call runs in (always a `kDLCUDA` /
/// `kDLROCM` device; pinned / managed memory uses the device it was allocated through).
/// Implementations never panic: every failure, including "no driver", is a [`DlpackError`]
/// (`FailureKind::DeviceUnavailable` when the runtime is missing).
pub trait DeviceRuntime: fmt::Debug + Send + Sync {
    /// A short name for messages ("cuda", "fake").
    fn name(&self) -> &'static str;

    /// Creates an event, records it on `stream` and returns it.
    fn record_event(&self, device: Device, stream: StreamHandle) -> Result<EventHandle>;
    /// Makes `stream` wait (on the device, not the host) for `event`.
    fn wait_event(&self, device: Device, stream: StreamHandle, event: EventHandle) -> Result<()>;
    /// Destroys an event (safe while work waiting on it is still pending).
    fn destroy_event(&self, device: Device, event: EventHandle) -> Result<()>;
    /// The stream work on `device` currently runs on, as the framework set it
    /// (`None`: no current stream, i.e. the legacy default stream).
    fn current_stream(&self, device: Device) -> Result<Option<StreamHandle>>;
    /// A linear asynchronous copy of `bytes` bytes on `stream`.
    fn copy(
        &self,
        device: Device,
        kind: CopyKind,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
        stream: StreamHandle,
    ) -> Result<()>;
    /// Copies the strided tensor at `src` (`shape`, `strides` in elements, `elem_bytes` per
    /// element) into the C-contiguous buffer `dst` on `stream`. Both buffers are
    /// device-addressable. `src` already includes the tensor's `byte_offset`.
    #[allow(clippy::too_many_arguments)]
    fn strided_copy_to_contiguous(
        &self,
        device: Device,
        src: DevicePtr,
        shape: &[i64],
        strides: &[i64],
        elem_bytes: usize,
        dst: DevicePtr,
        stream: StreamHandle,
    ) -> Result<()>;
    /// Sets `bytes` bytes at `ptr` (any allocation of this runtime) to zero, ordered on `stream`.
    fn memset_zero(
        &self,
        device: Device,
        ptr: DevicePtr,
        bytes: usize,
        stream: StreamHandle,
    ) -> Result<()>;
    /// Allocates `bytes` bytes of `kind` through `device`'s context.
    fn alloc(&self, kind: AllocKind, device: Device, bytes: usize) -> Result<DeviceAllocation>;
    /// Frees an allocation made by [`alloc`](DeviceRuntime::alloc).
    fn free(&self, allocation: &DeviceAllocation) -> Result<()>;
    /// Blocks the host until all work queued on `stream` is done (one stream, never the whole
    /// device).
    fn synchronize_stream(&self, device: Device, stream: StreamHandle) -> Result<()>;
    /// Which device owns `ptr`, as a DLPack device: device memory with its GPU's ordinal,
    /// page-locked host memory, or managed memory (the last two with ordinal 0, as
    /// [`AllocKind::dl_device`] reports them). `Ok(None)` for memory this runtime does not know
    /// (e.g. ordinary host memory). Used to tag `__cuda_array_interface__` imports. The default
    /// knows nothing.
    fn pointer_device(&self, ptr: DevicePtr) -> Result<Option<Device>> {
        let _ = ptr;
        Ok(None)
    }
}

/// An allocation that frees itself (through its runtime) when dropped. This is what a
/// `Buffer` owner / DLPack deleter keeps alive.
pub struct OwnedAllocation {
    runtime: Arc<dyn DeviceRuntime>,
    allocation: DeviceAllocation,
    freed: bool,
}

impl OwnedAllocation {
    /// Takes ownership of `allocation`, made by `runtime`.
    pub fn new(runtime: Arc<dyn DeviceRuntime>, allocation: DeviceAllocation) -> Self {
        OwnedAllocation {
            runtime,
            allocation,
            freed: false,
        }
    }
    /// The allocation (pointer, size, kind, device).
    pub fn allocation(&self) -> &DeviceAllocation {
        &self.allocation
    }
    /// The pointer (`DLTensor::data`).
    pub fn ptr(&self) -> DevicePtr {
        self.allocation.ptr
    }
    /// The device the memory reports (`DLTensor::device`).
    pub fn dl_device(&self) -> Device {
        self.allocation.dl_device()
    }
    /// The runtime that made it.
    pub fn runtime(&self) -> &Arc<dyn DeviceRuntime> {
        &self.runtime
    }
    /// Frees now, reporting the runtime's error (drop ignores it).
    pub fn free(mut self) -> Result<()> {
        self.freed = true;
        self.runtime.free(&self.allocation)
    }
}

impl fmt::Debug for OwnedAllocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedAllocation")
            .field("runtime", &self.runtime.name())
            .field("allocation", &self.allocation)
            .finish()
    }
}

impl Drop for OwnedAllocation {
    fn drop(&mut self) {
        if !self.freed {
            // A deleter cannot report errors; a failed free leaks (the driver is going away).
            let _ = self.runtime.free(&self.allocation);
        }
    }
}

/// Allocates zero-filled memory for `Tensor.zeros(..., device=...)`: `kDLCUDA` → device
/// memory, `kDLCUDAHost` → pinned host, `kDLCUDAManaged` → managed memory. The memset runs on
/// the legacy default stream, which is then synchronised (one stream), so the memory is ready
/// for any consumer stream and for the host; a producer may report its stream as
/// [`StreamHandle::LEGACY`] or `None`.
///
/// Errors: `UnsupportedDevice` for other device types, whatever the runtime reports
/// (`DeviceUnavailable` without a driver, `OutOfMemory`).
pub fn zeros(
    runtime: &Arc<dyn DeviceRuntime>,
    device: Device,
    bytes: usize,
) -> Result<OwnedAllocation> {
    let kind = AllocKind::for_device(device).ok_or_else(|| {
        DlpackError::new(
            FailureKind::UnsupportedDevice,
            format!("cannot allocate on device {device} with the {} runtime (kDLCUDA, kDLCUDAHost and kDLCUDAManaged are supported)", runtime.name()),
        )
    })?;
    // Pinned and managed memory are allocated through GPU `device_id` (normally 0).
    let gpu = Device::cuda(device.device_id);
    let allocation = runtime.alloc(kind, gpu, bytes)?;
    let owned = OwnedAllocation::new(Arc::clone(runtime), allocation);
    if bytes > 0 {
        runtime.memset_zero(gpu, owned.ptr(), bytes, StreamHandle::LEGACY)?;
        runtime.synchronize_stream(gpu, StreamHandle::LEGACY)?;
    }
    Ok(owned)
}

/// The process-wide runtime for real GPUs: the cudarc runtime when the crate is built with
/// `cuda` and a driver is present, else `Err(DeviceUnavailable)` with a clear message (raised
/// as BufferError in Python). The result is cached after the first success.
pub fn default_runtime() -> Result<Arc<dyn DeviceRuntime>> {
    #[cfg(feature = "cuda")]
    {
        cuda::CudaRuntime::shared().map(|rt| rt as Arc<dyn DeviceRuntime>)
    }
    #[cfg(not(feature = "cuda"))]
    {
        Err(unavailable(
            "GPU support is not available: dlbind was built without the `cuda` feature",
        ))
    }
}

/// `DeviceUnavailable` error for a runtime that has no driver.
pub(crate) fn unavailable(what: impl Into<String>) -> DlpackError {
    DlpackError::new(FailureKind::DeviceUnavailable, what.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_kinds_report_dlpack_devices() {
        assert_eq!(
            AllocKind::for_device(Device::cuda(1)),
            Some(AllocKind::Device)
        );
        assert_eq!(
            AllocKind::for_device(Device::CUDA_HOST),
            Some(AllocKind::PinnedHost)
        );
        assert_eq!(
            AllocKind::for_device(Device::CUDA_MANAGED),
            Some(AllocKind::Managed)
        );
        assert_eq!(AllocKind::for_device(Device::CPU), None);
        assert_eq!(AllocKind::Device.dl_device(3), Device::cuda(3));
        assert_eq!(AllocKind::PinnedHost.dl_device(3), Device::cuda_host(0));
        assert_eq!(AllocKind::Managed.dl_device(0), Device::cuda_managed(0));
    }

    #[test]
    fn stream_handle_constants_match_cuda() {
        assert_eq!(StreamHandle::LEGACY.0, 0x1);
        assert_eq!(StreamHandle::PER_THREAD.0, 0x2);
    }

    #[cfg(not(feature = "cuda"))]
    #[test]
    fn default_runtime_without_feature_is_device_unavailable() {
        let err = default_runtime().unwrap_err();
        assert_eq!(err.kind(), FailureKind::DeviceUnavailable);
    }
}
