//! [`CudaRuntime`]: the [`DeviceRuntime`] over the CUDA driver API through cudarc (dynamic
//! loading: no CUDA toolkit at build time). Thin: every method is one or two driver calls.
//!
//! Never panics: [`CudaRuntime::try_new`] checks `cudarc::driver::sys::is_culib_present()`
//! before any other driver call (cudarc's loader panics when `libcuda` is missing, and when a
//! symbol is missing from an old driver), and every entry point runs under `catch_unwind`,
//! turning such a panic into `FailureKind::DeviceUnavailable`.

use std::collections::HashMap;
use std::ffi::{CString, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::result::{self, DriverError};
use cudarc::driver::{CudaContext, sys};

use crate::device::Device;
use crate::error::{DlpackError, Result};
use crate::ffi::DLDeviceType;
use crate::spec::errors::FailureKind;

use super::kernels::{self, KernelCache, KernelKey};
use super::{
    AllocKind, CopyKind, DeviceAllocation, DevicePtr, DeviceRuntime, EventHandle, StreamHandle,
    unavailable,
};

/// A compiled strided-copy specialisation in one context.
#[derive(Clone, Copy, Debug)]
struct LoadedKernel {
    module: usize,
    function: usize,
}

/// The CUDA driver runtime. Create with [`CudaRuntime::try_new`] or share the process-wide
/// one with [`CudaRuntime::shared`].
#[derive(Debug)]
pub struct CudaRuntime {
    device_count: i32,
    contexts: Mutex<HashMap<i32, Arc<CudaContext>>>,
    current: Mutex<HashMap<i32, u64>>,
    kernels: KernelCache<i32, LoadedKernel>,
}

/// Runs `f`, turning a panic from cudarc's loader into `DeviceUnavailable`.
fn guarded<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => {
            let detail = payload
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| payload.downcast_ref::<&str>().copied())
                .unwrap_or("unknown panic");
            Err(unavailable(format!(
                "CUDA {what} failed: the CUDA driver library could not be used ({detail})"
            )))
        }
    }
}

/// A driver error as a `DlpackError` of the right kind.
fn driver_err(what: &str, e: DriverError, default: FailureKind) -> DlpackError {
    use sys::CUresult as R;
    let kind = match e.0 {
        R::CUDA_ERROR_OUT_OF_MEMORY => FailureKind::OutOfMemory,
        R::CUDA_ERROR_NO_DEVICE
        | R::CUDA_ERROR_NOT_INITIALIZED
        | R::CUDA_ERROR_DEINITIALIZED
        | R::CUDA_ERROR_STUB_LIBRARY
        | R::CUDA_ERROR_NOT_SUPPORTED
        | R::CUDA_ERROR_SYSTEM_DRIVER_MISMATCH
        | R::CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE => FailureKind::DeviceUnavailable,
        _ => default,
    };
    // The CUresult name only: DriverError's Debug would call cuGetErrorString, which a broken
    // or stub driver may lack.
    DlpackError::new(kind, format!("CUDA {what} failed: {:?}", e.0))
}

fn cu_stream(s: StreamHandle) -> sys::CUstream {
    s.0 as usize as sys::CUstream
}

fn cu_event(e: EventHandle) -> sys::CUevent {
    e.0 as usize as sys::CUevent
}

fn shared_slot() -> &'static OnceLock<Result<Arc<CudaRuntime>>> {
    static SHARED: OnceLock<Result<Arc<CudaRuntime>>> = OnceLock::new();
    &SHARED
}

impl CudaRuntime {
    /// Whether the CUDA driver library can be loaded (never panics).
    pub fn driver_present() -> bool {
        // SAFETY: `is_culib_present` only tries to dlopen the library names and drops the
        // handle; it runs no library code besides the loader's initialisers.
        catch_unwind(|| unsafe { sys::is_culib_present() }).unwrap_or(false)
    }

    /// Loads the driver and initialises it. `DeviceUnavailable` when there is no driver
    /// library, `cuInit` fails, or there is no GPU.
    pub fn try_new() -> Result<CudaRuntime> {
        if !Self::driver_present() {
            return Err(unavailable(
                "CUDA is not available: the CUDA driver library (libcuda.so / nvcuda.dll) was not found",
            ));
        }
        guarded("initialisation", || {
            result::init().map_err(|e| {
                driver_err("initialisation (cuInit)", e, FailureKind::DeviceUnavailable)
            })?;
            let device_count = result::device::get_count()
                .map_err(|e| driver_err("device query", e, FailureKind::DeviceUnavailable))?;
            if device_count <= 0 {
                return Err(unavailable(
                    "CUDA is not available: the driver reports no GPU",
                ));
            }
            Ok(CudaRuntime {
                device_count,
                contexts: Mutex::new(HashMap::new()),
                current: Mutex::new(HashMap::new()),
                kernels: KernelCache::default(),
            })
        })
    }

    /// The process-wide runtime (created on first use; the outcome, success or error, is
    /// kept).
    pub fn shared() -> Result<Arc<CudaRuntime>> {
        shared_slot()
            .get_or_init(|| CudaRuntime::try_new().map(Arc::new))
            .clone()
    }

    /// Number of GPUs.
    pub fn device_count(&self) -> i32 {
        self.device_count
    }

    /// Sets the stream [`DeviceRuntime::current_stream`] reports for `device` (what a consumer
    /// passes as `stream=`); `None` = the legacy default stream.
    pub fn set_current_stream(&self, device: Device, stream: Option<StreamHandle>) {
        let mut map = self.current.lock().unwrap_or_else(|p| p.into_inner());
        match stream {
            Some(s) => map.insert(device.device_id, s.0),
            None => map.remove(&device.device_id),
        };
    }

    /// Creates a non-blocking stream on `device` (for tests and callers that want their own
    /// stream). Destroy it with [`destroy_stream`](Self::destroy_stream).
    pub fn create_stream(&self, device: Device) -> Result<StreamHandle> {
        guarded("stream creation", || {
            self.bind(device)?;
            let s = result::stream::create(result::stream::StreamKind::NonBlocking)
                .map_err(|e| driver_err("stream creation", e, FailureKind::DeviceUnavailable))?;
            Ok(StreamHandle(s as usize as u64))
        })
    }

    /// Destroys a stream made by [`create_stream`](Self::create_stream).
    pub fn destroy_stream(&self, device: Device, stream: StreamHandle) -> Result<()> {
        if stream.0 <= 2 {
            return Ok(());
        }
        guarded("stream destruction", || {
            self.bind(device)?;
            // SAFETY: `stream` was created by `create_stream` and is destroyed once by the caller.
            unsafe { result::stream::destroy(cu_stream(stream)) }
                .map_err(|e| driver_err("stream destruction", e, FailureKind::InvalidStream))
        })
    }

    /// Number of compiled strided-copy specialisations (all contexts).
    pub fn compiled_kernels(&self) -> usize {
        self.kernels.len()
    }

    /// Makes `device`'s primary context current on this thread and returns it.
    fn bind(&self, device: Device) -> Result<Arc<CudaContext>> {
        if device.device_type != DLDeviceType::kDLCUDA {
            return Err(DlpackError::new(
                FailureKind::UnsupportedDevice,
                format!("the CUDA runtime cannot serve device {device} (expected kDLCUDA)"),
            ));
        }
        let ordinal = device.device_id;
        if ordinal < 0 || ordinal >= self.device_count {
            return Err(DlpackError::new(
                FailureKind::UnsupportedDevice,
                format!(
                    "CUDA device {ordinal} does not exist ({} GPU(s) present)",
                    self.device_count
                ),
            ));
        }
        let ctx = {
            let mut map = self.contexts.lock().unwrap_or_else(|p| p.into_inner());
            match map.get(&ordinal) {
                Some(c) => Arc::clone(c),
                None => {
                    let c = CudaContext::new(ordinal as usize).map_err(|e| {
                        driver_err("context creation", e, FailureKind::DeviceUnavailable)
                    })?;
                    map.insert(ordinal, Arc::clone(&c));
                    c
                }
            }
        };
        ctx.bind_to_thread()
            .map_err(|e| driver_err("context binding", e, FailureKind::DeviceUnavailable))?;
        Ok(ctx)
    }

    /// The strided-copy function for `key` in `device`'s context (compiled with NVRTC on
    /// first use).
    fn kernel(&self, device: Device, key: KernelKey) -> Result<LoadedKernel> {
        self.kernels.get_or_try_insert(device.device_id, key, |key| {
            // SAFETY: only tries to dlopen the NVRTC library.
            let nvrtc_present = catch_unwind(|| unsafe { cudarc::nvrtc::sys::is_culib_present() }).unwrap_or(false);
            if !nvrtc_present {
                return Err(unavailable(
                    "copying a non-contiguous CUDA tensor needs NVRTC (libnvrtc.so), which was not found",
                ));
            }
            let opts = cudarc::nvrtc::CompileOptions { name: Some(format!("{}.cu", key.name())), ..Default::default() };
            let ptx = cudarc::nvrtc::compile_ptx_with_opts(key.source(), opts).map_err(|e| {
                DlpackError::new(FailureKind::DeviceUnavailable, format!("NVRTC could not compile the strided-copy kernel: {e}"))
            })?;
            let mut image: Vec<u8> = ptx.as_bytes().map(<[u8]>::to_vec).unwrap_or_else(|| ptx.to_src().into_bytes());
            if image.last() != Some(&0) {
                image.push(0);
            }
            // SAFETY: `image` is a NUL-terminated PTX string that outlives the call; the
            // context is current (bound by the caller).
            let module = unsafe { result::module::load_data(image.as_ptr().cast::<c_void>()) }
                .map_err(|e| driver_err("loading the strided-copy kernel (PTX JIT)", e, FailureKind::DeviceUnavailable))?;
            let name = CString::new(key.name()).expect("kernel names have no NUL");
            // SAFETY: `module` was just loaded and is not unloaded while the cache holds it.
            let function = match unsafe { result::module::get_function(module, name) } {
                Ok(f) => f,
                Err(e) => {
                    // SAFETY: `module` is loaded and not referenced anywhere else.
                    let _ = unsafe { result::module::unload(module) };
                    return Err(driver_err("looking up the strided-copy kernel", e, FailureKind::DeviceUnavailable));
                }
            };
            Ok(LoadedKernel { module: module as usize, function: function as usize })
        })
    }
}

impl Drop for CudaRuntime {
    fn drop(&mut self) {
        let entries = self.kernels.drain();
        if entries.is_empty() {
            return;
        }
        let _ = catch_unwind(AssertUnwindSafe(|| {
            for ((ordinal, _), k) in entries {
                if self.bind(Device::cuda(ordinal)).is_ok() {
                    // SAFETY: the module was loaded in this context by `kernel` and its
                    // function is no longer reachable (the cache was drained; `&mut self`).
                    let _ = unsafe { result::module::unload(k.module as sys::CUmodule) };
                }
            }
        }));
    }
}

impl DeviceRuntime for CudaRuntime {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn record_event(&self, device: Device, stream: StreamHandle) -> Result<EventHandle> {
        guarded("event record", || {
            self.bind(device)?;
            let ev = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)
                .map_err(|e| driver_err("event creation", e, FailureKind::DeviceUnavailable))?;
            // SAFETY: `ev` was just created; `stream` is a stream handle of this context
            // (or a special handle 0/1/2) that the caller keeps alive for the call.
            if let Err(e) = unsafe { result::event::record(ev, cu_stream(stream)) } {
                // SAFETY: `ev` is live and not shared.
                let _ = unsafe { result::event::destroy(ev) };
                return Err(driver_err(
                    &format!("event record on {stream}"),
                    e,
                    FailureKind::InvalidStream,
                ));
            }
            Ok(EventHandle(ev as usize as u64))
        })
    }

    fn wait_event(&self, device: Device, stream: StreamHandle, event: EventHandle) -> Result<()> {
        guarded("stream wait", || {
            self.bind(device)?;
            // SAFETY: `event` comes from `record_event` and is not destroyed yet; `stream` is
            // the consumer's live stream handle.
            unsafe {
                result::stream::wait_event(
                    cu_stream(stream),
                    cu_event(event),
                    sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT,
                )
            }
            .map_err(|e| driver_err(&format!("wait on {stream}"), e, FailureKind::InvalidStream))
        })
    }

    fn destroy_event(&self, device: Device, event: EventHandle) -> Result<()> {
        guarded("event destruction", || {
            self.bind(device)?;
            // SAFETY: `event` comes from `record_event` and is destroyed exactly once;
            // destroying it while a wait on it is pending is allowed by the driver.
            unsafe { result::event::destroy(cu_event(event)) }
                .map_err(|e| driver_err("event destruction", e, FailureKind::DeviceUnavailable))
        })
    }

    fn current_stream(&self, device: Device) -> Result<Option<StreamHandle>> {
        let map = self.current.lock().unwrap_or_else(|p| p.into_inner());
        Ok(map.get(&device.device_id).copied().map(StreamHandle))
    }

    fn copy(
        &self,
        device: Device,
        kind: CopyKind,
        dst: DevicePtr,
        src: DevicePtr,
        bytes: usize,
        stream: StreamHandle,
    ) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        guarded("copy", || {
            self.bind(device)?;
            let s = cu_stream(stream);
            // SAFETY: the caller guarantees `src` and `dst` are valid for `bytes` bytes of
            // the stated kinds until the copy completes on `stream` (the plan keeps the
            // buffers alive and synchronises before freeing them).
            let r = unsafe {
                match kind {
                    CopyKind::D2H => {
                        sys::cuMemcpyDtoHAsync_v2(dst as usize as *mut c_void, src, bytes, s)
                    }
                    CopyKind::H2D => {
                        sys::cuMemcpyHtoDAsync_v2(dst, src as usize as *const c_void, bytes, s)
                    }
                    CopyKind::D2D => sys::cuMemcpyAsync(dst, src, bytes, s),
                }
            };
            r.result().map_err(|e| {
                driver_err(
                    &format!("{kind:?} copy of {bytes} bytes on {stream}"),
                    e,
                    FailureKind::DeviceUnavailable,
                )
            })
        })
    }

    fn strided_copy_to_contiguous(
        &self,
        device: Device,
        src: DevicePtr,
        shape: &[i64],
        strides: &[i64],
        elem_bytes: usize,
        dst: DevicePtr,
        stream: StreamHandle,
    ) -> Result<()> {
        let layout_err = |m: String| DlpackError::new(FailureKind::UnsupportedLayout, m);
        if shape.len() != strides.len() {
            return Err(layout_err(format!(
                "shape has {} dimensions but strides {}",
                shape.len(),
                strides.len()
            )));
        }
        if shape.iter().any(|&d| d < 0) {
            return Err(layout_err(format!("negative extent in shape {shape:?}")));
        }
        if elem_bytes == 0 {
            return Err(layout_err(
                "elements narrower than one byte cannot be gathered element-wise on the device"
                    .into(),
            ));
        }
        let n: u64 = shape.iter().map(|&d| d as u64).product();
        if n == 0 {
            return Ok(());
        }
        let (shape, strides) = kernels::coalesce(shape, strides);
        if shape.len() == 1 && strides[0] == 1 {
            let bytes = (n as usize)
                .checked_mul(elem_bytes)
                .ok_or_else(|| layout_err("tensor too large".into()))?;
            return self.copy(device, CopyKind::D2D, dst, src, bytes, stream);
        }
        let key = KernelKey::for_copy(elem_bytes, shape.len(), src, dst).ok_or_else(|| {
            layout_err(format!(
                "rank {} is above the strided-copy kernel's limit of {}",
                shape.len(),
                kernels::MAX_RANK
            ))
        })?;
        guarded("strided copy", || {
            self.bind(device)?;
            let k = self.kernel(device, key)?;
            let mut src_arg: u64 = src;
            let mut dst_arg: u64 = dst;
            let mut n_arg: u64 = n;
            let mut params = kernels::pack_params(&shape, &strides);
            let mut args: [*mut c_void; 4] = [
                (&mut src_arg as *mut u64).cast(),
                (&mut dst_arg as *mut u64).cast(),
                (&mut n_arg as *mut u64).cast(),
                params.as_mut_ptr().cast(),
            ];
            // SAFETY: `k.function` is a live kernel of this (current) context whose parameters
            // are (const char*, char*, unsigned long long, struct of 2*rank long long): the
            // four argument pointers point to values of exactly those sizes, alive for the
            // call (the driver copies them at launch). `src`/`dst` are device-addressable and
            // cover the strided extent / `n * elem_bytes` bytes (the caller's contract).
            let r = unsafe {
                sys::cuLaunchKernel(
                    k.function as sys::CUfunction,
                    kernels::grid_for(n),
                    1,
                    1,
                    kernels::BLOCK_SIZE,
                    1,
                    1,
                    0,
                    cu_stream(stream),
                    args.as_mut_ptr(),
                    std::ptr::null_mut(),
                )
            };
            r.result().map_err(|e| {
                driver_err(
                    &format!("strided-copy kernel launch on {stream}"),
                    e,
                    FailureKind::DeviceUnavailable,
                )
            })
        })
    }

    fn memset_zero(
        &self,
        device: Device,
        ptr: DevicePtr,
        bytes: usize,
        stream: StreamHandle,
    ) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        guarded("memset", || {
            self.bind(device)?;
            if memory_type(ptr) == Some(sys::CUmemorytype::CU_MEMORYTYPE_HOST) {
                // Pinned host memory: clear it from the host, after work queued on `stream`.
                self.synchronize_stream(device, stream)?;
                // SAFETY: `ptr` is a pinned host allocation of this runtime covering `bytes`
                // bytes (caller's contract) and no device work on it is pending (synchronised).
                unsafe { std::ptr::write_bytes(ptr as usize as *mut u8, 0, bytes) };
                return Ok(());
            }
            // SAFETY: `ptr` is device or managed memory covering `bytes` bytes.
            unsafe { sys::cuMemsetD8Async(ptr, 0, bytes, cu_stream(stream)) }
                .result()
                .map_err(|e| driver_err("memset", e, FailureKind::DeviceUnavailable))
        })
    }

    fn alloc(&self, kind: AllocKind, device: Device, bytes: usize) -> Result<DeviceAllocation> {
        guarded("allocation", || {
            self.bind(device)?;
            // cuMemAlloc rejects 0 bytes; keep pointers non-null for empty tensors.
            let n = bytes.max(1);
            let what = format!("{kind:?} allocation of {bytes} bytes on {device}");
            // SAFETY: plain allocation calls in the current context; the results are owned by
            // the returned DeviceAllocation and freed by `free`.
            let ptr = unsafe {
                match kind {
                    AllocKind::Device => result::malloc_sync(n),
                    AllocKind::PinnedHost => result::malloc_host(n, sys::CU_MEMHOSTALLOC_PORTABLE)
                        .map(|p| p as usize as u64),
                    AllocKind::Managed => {
                        result::malloc_managed(n, sys::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL)
                    }
                }
            }
            .map_err(|e| driver_err(&what, e, FailureKind::DeviceUnavailable))?;
            Ok(DeviceAllocation {
                ptr,
                bytes,
                kind,
                device,
            })
        })
    }

    fn free(&self, allocation: &DeviceAllocation) -> Result<()> {
        guarded("free", || {
            self.bind(allocation.device)?;
            // SAFETY: `allocation` was made by `alloc` with this kind and is freed once (the
            // owner's contract).
            let r = unsafe {
                match allocation.kind {
                    AllocKind::Device | AllocKind::Managed => result::free_sync(allocation.ptr),
                    AllocKind::PinnedHost => {
                        result::free_host(allocation.ptr as usize as *mut c_void)
                    }
                }
            };
            r.map_err(|e| driver_err("free", e, FailureKind::DeviceUnavailable))
        })
    }

    fn pointer_device(&self, ptr: DevicePtr) -> Result<Option<Device>> {
        if ptr == 0 {
            return Ok(None);
        }
        guarded("pointer query", || Ok(query_pointer(ptr)))
    }

    fn synchronize_stream(&self, device: Device, stream: StreamHandle) -> Result<()> {
        guarded("stream synchronisation", || {
            self.bind(device)?;
            // SAFETY: `stream` is a live stream handle (or a special handle 0/1/2).
            unsafe { result::stream::synchronize(cu_stream(stream)) }.map_err(|e| {
                driver_err(
                    &format!("synchronising {stream}"),
                    e,
                    FailureKind::InvalidStream,
                )
            })
        })
    }
}

/// A 32-bit attribute (`unsigned int` or `int`) of `ptr` from `cuPointerGetAttribute`; `None`
/// when the driver does not know the pointer (or the attribute).
fn pointer_attribute<T: Copy + Default>(
    ptr: DevicePtr,
    attribute: sys::CUpointer_attribute,
) -> Option<T> {
    const { assert!(std::mem::size_of::<T>() == 4) };
    let mut value = T::default();
    // SAFETY: the attributes asked for here (memory type, managed flag, device ordinal) each
    // write one 32-bit value to `data`, which points to a live 4-byte `T` (u32 or i32).
    let r =
        unsafe { sys::cuPointerGetAttribute((&raw mut value).cast::<c_void>(), attribute, ptr) };
    (r == sys::CUresult::CUDA_SUCCESS).then_some(value)
}

/// The driver's memory type for `ptr` (`None`: unknown pointer or value).
fn memory_type(ptr: DevicePtr) -> Option<sys::CUmemorytype> {
    use sys::CUmemorytype as M;
    match pointer_attribute::<u32>(
        ptr,
        sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
    )? {
        1 => Some(M::CU_MEMORYTYPE_HOST),
        2 => Some(M::CU_MEMORYTYPE_DEVICE),
        3 => Some(M::CU_MEMORYTYPE_ARRAY),
        4 => Some(M::CU_MEMORYTYPE_UNIFIED),
        _ => None,
    }
}

/// The DLPack device dlbind's own allocations of `ptr`'s kind report (memory type, managed
/// flag and device ordinal from the driver); `None` for a pointer the driver does not know.
/// The driver is initialised (a `CudaRuntime` exists); with unified addressing no context
/// needs to be current.
fn query_pointer(ptr: DevicePtr) -> Option<Device> {
    use sys::{CUmemorytype as M, CUpointer_attribute as A};
    let memory_type = memory_type(ptr)?;
    let is_managed =
        pointer_attribute::<u32>(ptr, A::CU_POINTER_ATTRIBUTE_IS_MANAGED).unwrap_or(0) != 0;
    let ordinal =
        pointer_attribute::<i32>(ptr, A::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL).unwrap_or(-1);
    let kind = match memory_type {
        _ if is_managed => AllocKind::Managed,
        M::CU_MEMORYTYPE_HOST => AllocKind::PinnedHost,
        M::CU_MEMORYTYPE_DEVICE | M::CU_MEMORYTYPE_UNIFIED => AllocKind::Device,
        _ => return None,
    };
    Some(kind.dl_device(ordinal.max(0)))
}
