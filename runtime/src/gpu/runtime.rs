//! The device runtime layer: the [`DeviceRuntime`] trait and its plain-data handles. Internal
//! (public only under `test-util`, for dlbind's own tests): its methods take raw device and host
//! addresses, so a safe caller outside the crate could make any of them read or write anywhere.

use std::fmt;
use std::sync::Arc;

use crate::device::Device;
use crate::error::{DlpackError, Result};
use crate::spec::errors::FailureKind;
use crate::ffi::DLDeviceType;

use super::{OwnedAllocation, StreamHandle};

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

/// [`zeros`](super::zeros) through `runtime`: allocates zero-filled memory: `kDLCUDA` → device
/// memory, `kDLCUDAHost` → pinned host, `kDLCUDAManaged` → managed memory. The memset runs on
/// the legacy default stream, which is then synchronised (one stream), so the memory is ready
/// for any consumer stream and for the host; a producer may report its stream as
/// [`StreamHandle::LEGACY`] or `None`.
///
/// Errors: `UnsupportedDevice` for other device types, whatever the runtime reports
/// (`DeviceUnavailable` without a driver, `OutOfMemory`).
pub fn zeros_with(
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
        super::cuda::CudaRuntime::shared().map(|rt| rt as Arc<dyn DeviceRuntime>)
    }
    #[cfg(not(feature = "cuda"))]
    {
        Err(super::unavailable(
            "GPU support is not available: dlbind was built without the `cuda` feature",
        ))
    }
}
