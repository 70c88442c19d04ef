//! GPU devices and streams. What a user calls: [`StreamHandle`], [`zeros`] (an
//! [`OwnedAllocation`] to wrap in a `Buffer`) and [`check_driver`]. Internal (public only under
//! `test-util`): the `DeviceRuntime` trait (`runtime`), the pure export planner (`plan`), the
//! copy kernels (`kernels`), a recording fake (`fake`) and the cudarc implementation (`cuda`,
//! feature `cuda`).
//!
//! Everything that decides *what* to do for `__dlpack__(stream=..., dl_device=..., copy=...)`
//! lives in `plan` and is pure: it validates the stream with the generated
//! [`resolve_stream`](crate::spec::streams::resolve_stream) for the target device, picks
//! zero-copy / device-to-host copy / same-device copy, and lists the synchronisation steps
//! (record an event on the producer stream, make the consumer stream wait on it; never a
//! device-wide synchronise). `plan::execute_transfer` applies such a plan to any
//! `DeviceRuntime`; the cudarc runtime only implements the primitive operations.
//!
//! Handles are plain integers so that the trait is object-safe and the fake can record them:
//! streams and events are the raw `CUstream` / `CUevent` values, device memory is a
//! `CUdeviceptr` (`u64`), host memory a host address as `u64`.

use std::fmt;
use std::sync::Arc;

use crate::device::Device;
use crate::error::{DlpackError, Result};
use crate::spec::errors::FailureKind;

#[cfg(any(test, feature = "test-util"))]
pub mod fake;

/// The internal parts of `gpu`: private, and public under the `test-util` feature, for dlbind's
/// own tests only (hidden from the docs, not covered by semver). What a user calls is
/// [`StreamHandle`], [`zeros`], [`OwnedAllocation`] and [`check_driver`].
macro_rules! internal {
    ($(#[$attr:meta])* mod $m:ident;) => {
        $(#[$attr])*
        #[cfg(feature = "test-util")]
        #[doc(hidden)]
        pub mod $m;
        $(#[$attr])*
        #[cfg(not(feature = "test-util"))]
        // Some items are for dlbind's own tests (the reference copy, the cache's counters, the
        // CUDA runtime's stream helpers), which build with `test-util`.
        #[allow(dead_code)]
        pub(crate) mod $m;
    };
    (use $($path:tt)*) => {
        #[cfg(feature = "test-util")]
        #[doc(hidden)]
        pub use $($path)*;
        #[cfg(not(feature = "test-util"))]
        #[allow(unused_imports)]
        pub(crate) use $($path)*;
    };
}

internal!(
    mod kernels;
);
internal!(
    mod plan;
);
internal!(
    mod runtime;
);
internal!(
    #[cfg(feature = "cuda")]
    mod cuda;
);

#[cfg(test)]
mod plan_tests;

internal!(use plan::{
    Step, TensorLayout, TransferKind, TransferOutcome, TransferPlan, TransferRequest, can_copy,
    consumer_stream_for, consumer_stream_from_current, consumer_stream_with, device_default_stream,
    execute_transfer, plan_transfer, run_transfer, wait_for_producer_stream,
});
internal!(use runtime::{
    AllocKind, CopyKind, DeviceAllocation, DevicePtr, DeviceRuntime, EventHandle, default_runtime,
    zeros_with,
});

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

/// An allocation that frees itself (through its runtime) when dropped. This is what a
/// `Buffer` owner / DLPack deleter keeps alive.
pub struct OwnedAllocation {
    runtime: Arc<dyn DeviceRuntime>,
    allocation: DeviceAllocation,
    freed: bool,
}

impl OwnedAllocation {
    /// Takes ownership of `allocation`, made by `runtime`.
    pub(crate) fn new(runtime: Arc<dyn DeviceRuntime>, allocation: DeviceAllocation) -> Self {
        OwnedAllocation {
            runtime,
            allocation,
            freed: false,
        }
    }
    /// The allocation (pointer, size, kind, device).
    #[doc(hidden)]
    pub fn allocation(&self) -> &DeviceAllocation {
        &self.allocation
    }
    /// The pointer (`DLTensor::data`).
    pub fn ptr(&self) -> u64 {
        self.allocation.ptr
    }
    /// The device the memory reports (`DLTensor::device`).
    pub fn dl_device(&self) -> Device {
        self.allocation.dl_device()
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

/// Zero-filled GPU memory of `bytes` bytes for `device`: `kDLCUDA` → device memory,
/// `kDLCUDAHost` → pinned host, `kDLCUDAManaged` → managed memory, through the process's GPU
/// runtime (the `cuda` feature). The memory is ready for any consumer stream and for the host
/// (a producer may report its stream as [`StreamHandle::LEGACY`] or `None`). Wrap it in a
/// [`Buffer`](crate::Buffer) with [`Buffer::from_owner`](crate::Buffer::from_owner).
///
/// Errors: `DeviceUnavailable` without the `cuda` feature or a driver, `UnsupportedDevice` for
/// other device types, `OutOfMemory`.
pub fn zeros(device: Device, bytes: usize) -> Result<OwnedAllocation> {
    runtime::zeros_with(&runtime::default_runtime()?, device, bytes)
}

/// `Ok` when GPU work can run here: dlbind was built with the `cuda` feature and a CUDA driver
/// is present; else the `DeviceUnavailable` error saying which is missing (a `BufferError` in
/// Python). Check it before calling a GPU crate that panics without a driver.
pub fn check_driver() -> Result<()> {
    runtime::default_runtime().map(drop)
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
