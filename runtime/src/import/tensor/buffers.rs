//! Handles over memory dlbind holds itself: its own C-contiguous host buffers
//! ([`ImportedTensor::from_buffer`], [`ImportedTensor::to_contiguous_copy`]) and a Python
//! object's memory ([`ImportedTensor::from_python_view`]).

use std::ffi::c_void;
use std::ptr::{self, NonNull};

use crate::alloc::AlignedBuffer;
use crate::copy::{contiguous_nbytes, copy_to_contiguous};
use crate::device::Device;
use crate::dtype::{describe, validate_dtype};
use crate::error::DlpackError;
use crate::extent::{Extent, reach};
use crate::ffi::{DLDataType, DLPACK_FLAG_BITMASK_IS_COPIED, DLPACK_FLAG_BITMASK_READ_ONLY};
use crate::spec::errors::FailureKind;

use super::{ImportedTensor, Owner};

impl ImportedTensor {
    /// A C-contiguous, writable copy of this tensor's data in a fresh host buffer
    /// (`IS_COPIED` is reported by [`Self::is_copied`]). Host-accessible memory only.
    pub fn to_contiguous_copy(&self) -> Result<ImportedTensor, DlpackError> {
        if !self.device.is_host_accessible() {
            return Err(DlpackError::new(
                FailureKind::UnsupportedDevice,
                format!("cannot copy memory on device {} to the host", self.device),
            ));
        }
        let elem = validate_dtype(self.dtype)?;
        let shape = self.shape();
        let nbytes = contiguous_nbytes(shape, elem)?;
        let buf = Box::new(AlignedBuffer::uninit(nbytes)?);
        // SAFETY: the producer guarantees every element addressed by shape/strides from
        // element 0 is readable host memory; `buf` is fresh (`nbytes` bytes, no overlap).
        unsafe {
            copy_to_contiguous(
                self.data.cast::<u8>(),
                shape,
                self.strides(),
                elem,
                buf.as_mut_ptr(),
                nbytes,
            )?
        };
        Self::from_buffer(buf, shape, self.dtype)
    }

    /// A handle on a [`crate::bridges::PythonView`] (already validated): keeps `view.owner`
    /// alive by a strong reference until it drops (released with the GIL, from any thread;
    /// leaked after interpreter shutdown) and owns a copy of the shape and strides. Reports no
    /// version and no flags but READ_ONLY.
    ///
    /// # Safety
    /// The view describes memory of its owner (or memory the owner keeps alive), valid while
    /// the owner lives; writable unless `readonly`.
    pub unsafe fn from_python_view(view: &crate::bridges::PythonView<'_, '_>) -> ImportedTensor {
        // SAFETY: a live object; the strong reference is released by the keeper.
        let keeper = crate::bridges::Keeper::Object(unsafe {
            NonNull::new_unchecked(view.owner.clone().into_ptr())
        });
        let mut this = ImportedTensor {
            owner: Owner::Kept(keeper),
            data: view.data,
            byte_offset: 0,
            shape: ptr::null(),
            strides: ptr::null(),
            meta: None,
            ndim: 0,
            dtype: view.dtype,
            device: view.device,
            readonly: view.readonly,
            flags: if view.readonly {
                DLPACK_FLAG_BITMASK_READ_ONLY
            } else {
                0
            },
            version: None,
            extent: Extent::EMPTY,
        };
        this.set_owned_meta(view.shape, Some(view.strides));
        this.extent = view.extent;
        this
    }

    /// Wraps an owned C-contiguous host buffer (writable) as a tensor of `shape` and `dtype`.
    /// Errors: `UnsupportedDtype` for a dtype the spec does not describe, `MalformedTensor` when
    /// `shape` has a negative dimension or needs more bytes than `buf` holds (the accessors and
    /// exports would otherwise read past it).
    pub fn from_buffer(
        buf: impl Into<Box<AlignedBuffer>>,
        shape: &[i64],
        dtype: DLDataType,
    ) -> Result<ImportedTensor, DlpackError> {
        let buf = buf.into();
        let elem = validate_dtype(dtype)?;
        let fits = reach(shape, None, elem)
            .ok()
            .and_then(Extent::of_reach)
            .filter(|e| e.above <= buf.len());
        let Some(extent) = fits else {
            return Err(DlpackError::new(
                FailureKind::MalformedTensor,
                format!(
                    "from_buffer: shape {shape:?} of {} given {} bytes, wanted a shape whose \
                     elements fit them",
                    describe(dtype),
                    buf.len()
                ),
            ));
        };
        let data = buf.as_mut_ptr().cast::<c_void>();
        let mut this = ImportedTensor {
            owner: Owner::Copied(buf),
            data,
            byte_offset: 0,
            shape: ptr::null(),
            strides: ptr::null(),
            meta: None,
            ndim: 0,
            dtype,
            device: Device::CPU,
            readonly: false,
            flags: DLPACK_FLAG_BITMASK_IS_COPIED,
            version: None,
            extent,
        };
        this.set_owned_meta(shape, None);
        Ok(this)
    }
}
