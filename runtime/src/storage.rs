//! [`Buffer`]: storage for an array type: an owned aligned host buffer or imported foreign
//! memory (kept alive by the owning [`ImportedTensor`]).

use std::ffi::c_void;
use std::sync::Arc;

use crate::alloc::AlignedBuffer;
use crate::device::Device;
use crate::error::DlpackError;
use crate::export::DataSource;
use crate::ffi::DLDataType;
use crate::import::ImportedTensor;

/// Array storage: owned host memory or an imported DLPack tensor.
pub enum Buffer {
    /// Host memory owned by this buffer (64-byte aligned; 256 for large ones).
    Owned(AlignedBuffer),
    /// Memory of an imported tensor; the producer's deleter runs when the buffer drops.
    Imported(ImportedTensor),
    /// Memory of an imported tensor shared with other buffers.
    Shared(Arc<ImportedTensor>),
}

impl Buffer {
    /// `nbytes` zeroed host bytes.
    pub fn zeroed(nbytes: usize) -> Result<Buffer, DlpackError> {
        Ok(Buffer::Owned(AlignedBuffer::zeroed(nbytes)?))
    }

    /// Owned, writable host memory.
    #[inline]
    pub fn from_aligned(buf: AlignedBuffer) -> Buffer {
        Buffer::Owned(buf)
    }

    /// An imported tensor's memory (the producer stays alive until the buffer drops).
    #[inline]
    pub fn from_imported(t: ImportedTensor) -> Buffer {
        Buffer::Imported(t)
    }

    /// Address of the first byte (element 0 for imported tensors).
    #[inline]
    pub fn data_ptr(&self) -> *mut c_void {
        match self {
            Buffer::Owned(b) => b.as_mut_ptr().cast::<c_void>(),
            Buffer::Imported(t) => t.data_ptr(),
            Buffer::Shared(t) => t.data_ptr(),
        }
    }

    /// The imported tensor behind this buffer, if any.
    #[inline]
    pub fn imported(&self) -> Option<&ImportedTensor> {
        match self {
            Buffer::Owned(_) => None,
            Buffer::Imported(t) => Some(t),
            Buffer::Shared(t) => Some(t),
        }
    }

    /// Where the memory is (owned buffers are host memory).
    #[inline]
    pub fn device(&self) -> Device {
        self.imported().map_or(Device::CPU, ImportedTensor::device)
    }

    /// Whether the memory must not be written (imported read-only tensors).
    #[inline]
    pub fn readonly(&self) -> bool {
        self.imported().is_some_and(ImportedTensor::readonly)
    }

    /// Byte length of an owned buffer (`None` for imported memory).
    pub fn owned_len(&self) -> Option<usize> {
        match self {
            Buffer::Owned(b) => Some(b.len()),
            _ => None,
        }
    }
}

impl From<AlignedBuffer> for Buffer {
    fn from(b: AlignedBuffer) -> Self {
        Buffer::Owned(b)
    }
}

impl From<ImportedTensor> for Buffer {
    fn from(t: ImportedTensor) -> Self {
        Buffer::Imported(t)
    }
}

impl From<Arc<ImportedTensor>> for Buffer {
    fn from(t: Arc<ImportedTensor>) -> Self {
        Buffer::Shared(t)
    }
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Buffer::Owned(b) => f.debug_struct("Buffer::Owned").field("len", &b.len()).finish(),
            Buffer::Imported(t) => f.debug_tuple("Buffer::Imported").field(t).finish(),
            Buffer::Shared(t) => f.debug_tuple("Buffer::Shared").field(t).finish(),
        }
    }
}

// SAFETY: the pointer is valid while the buffer lives: owned memory is freed only on drop, and
// imported memory only when the owning `ImportedTensor` drops. No dtype: untyped bytes.
unsafe impl DataSource for Buffer {
    #[inline]
    fn data_ptr(&self) -> *mut c_void {
        Buffer::data_ptr(self)
    }
    #[inline]
    fn element_dtype(&self) -> Option<DLDataType> {
        None
    }
}
