//! cudarc (feature `cudarc`, which turns on `cuda`): cudarc device memory as DLPack CUDA
//! tensors, and CUDA tensors from any producer as cudarc views, with the DLPack stream
//! handshake both ways.
//!
//! **Export** ([`CudaTensor`]): a [`CudaSlice`] (owned, or shared through an `Arc` for a view of
//! part of it) or a [`CudaView`] becomes an N-d `kDLCUDA` tensor on the slice's GPU. The
//! tensor reports the slice's stream as its producer stream
//! ([`DLPackSource::dlpack_stream`]): an export for another consumer stream records an event
//! there and makes the consumer's stream wait for it (no device-wide synchronise), exactly as
//! dlbind's own GPU buffers do (`gpu::plan_transfer`); `stream=-1` orders nothing. When cudarc
//! tracks events (multi-stream mode), taking the pointer first makes the slice's stream wait
//! for pending writes from other streams.
//!
//! **Import** ([`import_on_stream`], [`ImportedSlice`]): `__dlpack__(stream=s)` is called with
//! the consumer's stream, so the producer orders its pending work before `s`; the CUDA tensor
//! (checked: device, dtype, C-contiguous) is then seen as a [`CudaView`] on that stream that
//! keeps the producer's tensor alive until it drops.

/// The `cudarc` crate this adapter is built against (for a matching version).
pub use ::cudarc;

use std::ffi::c_void;
use std::mem::ManuallyDrop;
use std::sync::Arc;

use ::cudarc::driver::{CudaSlice, CudaStream, CudaView, DevicePtr, DeviceRepr, DeviceSlice};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::device::Device;
use crate::dtype::describe;
use crate::error::DlpackError;
use crate::export::DLPackSource;
use crate::ffi::{DLDataType, DLDeviceType};
use crate::gpu::StreamHandle;
use crate::import::ImportedTensor;
use crate::layout::{c_strides, check_data_span};
use crate::spec::elements::DLPackElement;
use crate::spec::errors::FailureKind;
use crate::storage::Buffer;

type Result<T> = std::result::Result<T, DlpackError>;

/// An error in the adapters' one form: `cudarc: <what was given>, wanted <what>`.
fn err(kind: FailureKind, msg: impl Into<String>) -> DlpackError {
    DlpackError::new(kind, format!("cudarc: {}", msg.into()))
}

/// A stream as the DLPack producer stream it stands for (the null stream is CUDA's legacy
/// default stream).
fn stream_handle(stream: &CudaStream) -> StreamHandle {
    match stream.cu_stream() as usize as u64 {
        0 => StreamHandle::LEGACY,
        h => StreamHandle(h),
    }
}

fn dims_of(shape: &[usize]) -> Vec<i64> {
    shape.iter().map(|&d| d as i64).collect()
}

/// CUDA device memory seen as a DLPack tensor: element 0, shape, element strides, dtype, the
/// GPU, and the stream on which work writing it may be pending; the memory is kept valid by
/// the owner inside (a `CudaSlice`, an `Arc` of one, or what the caller vouched for).
///
/// Use it as a [`DLPackSource`], or move its parts into a `#[derive(DLPackExport)]` type:
/// [`CudaTensor::into_buffer`] for the `#[dlpack(data)]` [`Buffer`], with
/// [`dtype`](Self::dtype), [`shape`](Self::shape), [`strides`](Self::strides),
/// [`device`](Self::device) and [`stream`](Self::stream) (a `#[dlpack(stream)]` field, as
/// `Option<u64>`).
#[derive(Debug)]
pub struct CudaTensor {
    buffer: Buffer,
    bytes: usize,
    dtype: DLDataType,
    shape: Vec<i64>,
    strides: Vec<i64>,
    device: Device,
    stream: Option<StreamHandle>,
}

impl CudaTensor {
    /// Device memory at `ptr` (`bytes` bytes from element 0) on CUDA device `device`, with
    /// work possibly pending on `stream`, as a tensor of `dtype`, `shape` and `strides`
    /// (elements, non-negative; `None`: C-contiguous), kept valid by `owner`.
    ///
    /// Errors: `UnsupportedDevice` unless `device` is `kDLCUDA`, `UnsupportedDtype` for dtypes
    /// the spec does not describe, `MalformedTensor` for a layout outside `bytes` or of the
    /// wrong rank.
    ///
    /// # Safety
    /// The `bytes` bytes from `ptr` are device memory of `device` that stays allocated while
    /// `owner` lives, and nothing frees it before.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn from_device_ptr<O: Send + Sync + 'static>(
        owner: O,
        ptr: u64,
        bytes: usize,
        device: Device,
        stream: Option<StreamHandle>,
        dtype: DLDataType,
        shape: &[i64],
        strides: Option<&[i64]>,
    ) -> Result<CudaTensor> {
        // SAFETY: the caller's contract, passed on; writable, as the caller vouches.
        unsafe {
            Self::from_device_ptr_as(
                owner, ptr, bytes, device, stream, dtype, shape, strides, false,
            )
        }
    }

    /// [`Self::from_device_ptr`], read-only when `readonly`.
    ///
    /// # Safety
    /// As [`Self::from_device_ptr`].
    #[allow(clippy::too_many_arguments)]
    unsafe fn from_device_ptr_as<O: Send + Sync + 'static>(
        owner: O,
        ptr: u64,
        bytes: usize,
        device: Device,
        stream: Option<StreamHandle>,
        dtype: DLDataType,
        shape: &[i64],
        strides: Option<&[i64]>,
        readonly: bool,
    ) -> Result<CudaTensor> {
        if device.device_type != DLDeviceType::kDLCUDA {
            return Err(err(
                FailureKind::UnsupportedDevice,
                format!("device {device}, wanted kDLCUDA (cudarc memory is CUDA device memory)"),
            ));
        }
        let strides = match strides {
            Some(s) if s.len() != shape.len() => {
                return Err(err(
                    FailureKind::MalformedTensor,
                    format!(
                        "{} strides, wanted one per dimension ({})",
                        s.len(),
                        shape.len()
                    ),
                ));
            }
            Some(s) => s.to_vec(),
            None => c_strides(shape),
        };
        check_data_span(
            shape,
            &strides,
            dtype,
            Some(crate::Extent::from_start(bytes)),
        )?;
        // SAFETY: caller contract: `owner` keeps the memory allocated; `Buffer` only hands out
        // the address (device memory is never read on the host).
        let buffer = unsafe {
            Buffer::from_owner(
                owner,
                ptr as usize as *mut c_void,
                crate::Extent::from_start(bytes),
                device,
                readonly,
            )
        };
        Ok(CudaTensor {
            buffer,
            bytes,
            dtype,
            shape: shape.to_vec(),
            strides,
            device,
            stream,
        })
    }

    /// An owned slice as a C-contiguous tensor of `shape` (its product must be the slice's
    /// length); the slice is freed (by cudarc, on its stream) when the tensor's buffer drops.
    ///
    /// Errors: `MalformedTensor` when `shape` does not hold exactly the slice's elements.
    pub fn from_slice<T>(slice: CudaSlice<T>, shape: &[usize]) -> Result<CudaTensor>
    where
        T: DeviceRepr + DLPackElement,
    {
        let slice = Arc::new(slice);
        let len = slice.len();
        check_len(shape, len)?;
        Self::from_shared(slice, 0, shape, None)
    }

    /// A view of part of a shared slice: element 0 at element `offset`, `shape` and `strides`
    /// (elements, non-negative; `None`: C-contiguous) inside the slice. The `Arc` keeps the
    /// slice alive.
    ///
    /// Writable only when this `Arc` is the slice's only one (no other strong or weak
    /// reference: nothing else can reach the slice once the tensor holds it); read-only
    /// otherwise, like the ndarray adapter's shared `ArcArray` (issue 50: another clone could
    /// read the memory while a consumer writes it).
    ///
    /// Errors: `MalformedTensor` for a view outside the slice.
    pub fn from_shared<T>(
        mut slice: Arc<CudaSlice<T>>,
        offset: usize,
        shape: &[usize],
        strides: Option<&[i64]>,
    ) -> Result<CudaTensor>
    where
        T: DeviceRepr + DLPackElement,
    {
        let shared = Arc::get_mut(&mut slice).is_none();
        let elem = std::mem::size_of::<T>();
        let len = slice.len();
        if offset > len {
            return Err(err(
                FailureKind::MalformedTensor,
                format!("offset {offset}, wanted one inside the slice's {len} elements"),
            ));
        }
        let stream = Arc::clone(slice.stream());
        // Taking the pointer makes `stream` wait for writes cudarc tracks on other streams.
        let base = {
            let (p, _record) = slice.device_ptr(&stream);
            p
        };
        let device = Device::cuda(slice.ordinal() as i32);
        let ptr = base + (offset * elem) as u64;
        let bytes = (len - offset) * elem;
        // SAFETY: `ptr` is inside the slice's allocation, `bytes` bytes of it from there; the
        // `Arc` (the owner) keeps the slice, hence the allocation, alive.
        unsafe {
            Self::from_device_ptr_as(
                slice,
                ptr,
                bytes,
                device,
                Some(stream_handle(&stream)),
                T::DTYPE,
                &dims_of(shape),
                strides,
                shared,
            )
        }
    }

    /// A [`CudaView`] as a tensor of `shape` and `strides` (elements; `None`: C-contiguous)
    /// inside the view, kept valid by `owner`.
    ///
    /// # Safety
    /// `owner` keeps the slice the view borrows from allocated (it is, or holds, that slice
    /// or an `Arc` of it) for as long as it lives.
    pub unsafe fn from_view<T, O>(
        view: &CudaView<'_, T>,
        owner: O,
        shape: &[usize],
        strides: Option<&[i64]>,
    ) -> Result<CudaTensor>
    where
        T: DeviceRepr + DLPackElement,
        O: Send + Sync + 'static,
    {
        let stream = Arc::clone(view.stream());
        let ptr = {
            let (p, _record) = view.device_ptr(&stream);
            p
        };
        let bytes = view.len() * std::mem::size_of::<T>();
        let device = Device::cuda(stream.context().ordinal() as i32);
        // SAFETY: caller contract; `ptr` and `bytes` are the view's.
        unsafe {
            Self::from_device_ptr(
                owner,
                ptr,
                bytes,
                device,
                Some(stream_handle(&stream)),
                T::DTYPE,
                &dims_of(shape),
                strides,
            )
        }
    }

    /// The element dtype.
    pub fn dtype(&self) -> DLDataType {
        self.dtype
    }
    /// The shape.
    pub fn shape(&self) -> &[i64] {
        &self.shape
    }
    /// The strides, in elements.
    pub fn strides(&self) -> &[i64] {
        &self.strides
    }
    /// The GPU (`kDLCUDA`, the slice's ordinal).
    pub fn device(&self) -> Device {
        self.device
    }
    /// The stream whose pending work consumers wait for (the slice's stream).
    pub fn stream(&self) -> Option<StreamHandle> {
        self.stream
    }
    /// The memory, for a `#[dlpack(data)]` field (device memory: never read on the host).
    pub fn into_buffer(self) -> Buffer {
        self.buffer
    }
}

fn check_len(shape: &[usize], len: usize) -> Result<()> {
    let n = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    if n != Some(len) {
        return Err(err(
            FailureKind::MalformedTensor,
            format!("shape {shape:?}, wanted one that holds the slice's {len} elements"),
        ));
    }
    Ok(())
}

// SAFETY: the buffer's address is device memory the owner keeps allocated, and the layout was
// checked against its `bytes` at construction (non-negative reach); exactly `ndim` values are
// written; the device is the memory's.
unsafe impl DLPackSource for CudaTensor {
    fn dlpack_data_ptr(&self) -> *mut c_void {
        self.buffer.data_ptr()
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
        out.copy_from_slice(&self.strides);
        true
    }
    fn dlpack_device(&self) -> Device {
        self.device
    }
    fn dlpack_stream(&self) -> Option<StreamHandle> {
        self.stream
    }
    fn __dlbind_storage(&self) -> Option<(crate::Extent, Device)> {
        Some((crate::Extent::from_start(self.bytes), self.device))
    }
}

// ---------------------------------------------------------------------------------------------
// Import

/// The DLPack `stream=` value that stands for `stream` on CUDA: 1 for the legacy default (the
/// null stream; 0 is not allowed), 2 for the per-thread default, else the handle.
fn stream_arg(stream: StreamHandle) -> Result<i64> {
    match stream {
        StreamHandle::NULL => Ok(1),
        StreamHandle(h) => i64::try_from(h).map_err(|_| {
            err(
                FailureKind::InvalidStream,
                format!("stream handle {h:#x}, wanted a DLPack stream value (at most i64::MAX)"),
            )
        }),
    }
}

/// Imports a CUDA tensor from `obj` for work on `stream` of the consumer: asks
/// `obj.__dlpack_device__()` first (anything but `kDLCUDA` is refused before an export is
/// made), then calls `obj.__dlpack__(stream=s, max_version=(1, 3))`, so the producer makes `s`
/// wait for its pending work (an event; DLPack's handshake). The result keeps the producer's
/// tensor until it drops.
///
/// Errors: `UnsupportedDevice` (BufferError) for host or other devices, whatever the producer
/// raises (an invalid stream is its ValueError), and the import's checks.
pub fn import_on_stream(obj: &Bound<'_, PyAny>, stream: StreamHandle) -> PyResult<ImportedTensor> {
    let py = obj.py();
    let (dev_type, dev_id): (i32, i32) = obj.call_method0("__dlpack_device__")?.extract()?;
    let device = Device::from_tuple((dev_type, dev_id));
    if device.device_type != DLDeviceType::kDLCUDA {
        return Err(err(
            FailureKind::UnsupportedDevice,
            format!("the producer's memory is on {device}, wanted kDLCUDA device memory"),
        )
        .into());
    }
    let kwargs = PyDict::new(py);
    kwargs.set_item("stream", stream_arg(stream)?)?;
    kwargs.set_item("max_version", (1, 3))?;
    let capsule = obj.call_method("__dlpack__", (), Some(&kwargs))?;
    ImportedTensor::from_capsule(&capsule)
}

/// A CUDA tensor from any producer seen as a cudarc [`CudaView`] of `T` on a consumer stream,
/// owning the imported tensor (so the producer's memory) until it drops.
///
/// Dropping it synchronises the consumer stream before giving the tensor back: the producer may
/// free the memory at once (DLPack deleters are not stream-ordered), so work queued on the
/// stream must be done reading it.
pub struct ImportedSlice<T> {
    /// cudarc's handle on the producer's memory; never freed by cudarc (`leak`ed on drop).
    slice: ManuallyDrop<CudaSlice<T>>,
    tensor: ManuallyDrop<ImportedTensor>,
}

impl<T> std::fmt::Debug for ImportedSlice<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImportedSlice")
            .field("tensor", &*self.tensor)
            .finish()
    }
}

impl<T: DeviceRepr + DLPackElement> ImportedSlice<T> {
    /// Wraps an imported CUDA tensor for cudarc work on `stream` (import it with
    /// [`import_on_stream`] for that stream, so it is ordered before your work).
    ///
    /// Errors: `UnsupportedDevice` unless the tensor is `kDLCUDA` memory of `stream`'s GPU,
    /// `UnsupportedDtype` unless its dtype is `T`'s, `UnsupportedLayout` unless C-contiguous
    /// (a `CudaView` is linear), and read-only tensors are accepted (a `CudaView` is
    /// read-only).
    pub fn new(tensor: ImportedTensor, stream: &Arc<CudaStream>) -> Result<ImportedSlice<T>> {
        let gpu = Device::cuda(stream.context().ordinal() as i32);
        if tensor.device() != gpu {
            return Err(err(
                FailureKind::UnsupportedDevice,
                format!(
                    "tensor is on {}, wanted the stream's GPU {gpu}",
                    tensor.device()
                ),
            ));
        }
        if tensor.dtype() != T::DTYPE {
            return Err(err(
                FailureKind::UnsupportedDtype,
                format!(
                    "tensor dtype is {}, wanted {}",
                    describe(tensor.dtype()),
                    T::NAME
                ),
            ));
        }
        if !tensor.is_c_contiguous() {
            return Err(err(
                FailureKind::UnsupportedLayout,
                format!(
                    "tensor strides {:?} for shape {:?}, wanted C-contiguous ones (a CudaView \
                     is linear)",
                    tensor.strides(),
                    tensor.shape()
                ),
            ));
        }
        let len = tensor.numel();
        // SAFETY: the tensor's `len` elements of `T` from its element 0 are device memory of
        // this GPU, allocated while `tensor` lives; the `CudaSlice` is never dropped as such
        // (`leak`ed in our drop, before the tensor is given back), so cudarc never frees it.
        let slice = unsafe { stream.upgrade_device_ptr::<T>(tensor.data_ptr() as u64, len) };
        Ok(ImportedSlice {
            slice: ManuallyDrop::new(slice),
            tensor: ManuallyDrop::new(tensor),
        })
    }

    /// The memory as a cudarc view (for kernels and copies on the stream).
    pub fn as_view(&self) -> CudaView<'_, T> {
        self.slice.as_view()
    }

    /// The imported tensor (shape, strides, dtype, device, read-only flag).
    pub fn tensor(&self) -> &ImportedTensor {
        &self.tensor
    }
}

impl<T> Drop for ImportedSlice<T> {
    fn drop(&mut self) {
        // SAFETY: each field is taken once, here.
        let (slice, tensor) = unsafe {
            (
                ManuallyDrop::take(&mut self.slice),
                ManuallyDrop::take(&mut self.tensor),
            )
        };
        let stream = Arc::clone(slice.stream());
        // cudarc gives the pointer back without freeing it (its stream waits on its events).
        let _ = slice.leak();
        // Work queued on the stream must finish before the producer may free the memory; a
        // failure (a broken context) leaves nothing better to do than giving the tensor back.
        let _ = stream.synchronize();
        drop(tensor);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_args_follow_the_cuda_rules() {
        assert_eq!(stream_arg(StreamHandle::NULL), Ok(1));
        assert_eq!(stream_arg(StreamHandle::LEGACY), Ok(1));
        assert_eq!(stream_arg(StreamHandle::PER_THREAD), Ok(2));
        assert_eq!(stream_arg(StreamHandle(0x7000)), Ok(0x7000));
        assert_eq!(
            stream_arg(StreamHandle(u64::MAX)).unwrap_err().kind(),
            FailureKind::InvalidStream
        );
    }

    #[test]
    fn slice_lengths_must_match_the_shape() {
        assert!(check_len(&[2, 3], 6).is_ok());
        assert!(check_len(&[], 1).is_ok());
        assert_eq!(
            check_len(&[2, 3], 5).unwrap_err().kind(),
            FailureKind::MalformedTensor
        );
        assert!(check_len(&[usize::MAX, 2], 0).is_err(), "overflow");
    }
}
