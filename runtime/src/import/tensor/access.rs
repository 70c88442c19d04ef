//! What an [`ImportedTensor`] describes (shape, strides, dtype, device, flags) and its elements
//! as typed slices.

use std::ffi::c_void;
use std::ptr::NonNull;

use crate::copy::is_c_contiguous;
use crate::device::Device;
use crate::error::DlpackError;
use crate::extent::Extent;
use crate::ffi::{DLDataType, DLPACK_FLAG_BITMASK_IS_COPIED, DLPackVersion};
use crate::spec::dtypes::{DTypeInfo, dtype_by_dl};
use crate::spec::elements::DLPackElement;
use crate::spec::errors::FailureKind;

use super::super::typed;
use super::super::validate::dims;
use super::{ImportedTensor, Owner};

impl ImportedTensor {
    /// The bytes around [`Self::data_ptr`] that this tensor's description addresses, and so
    /// the most that an export of a [`crate::Buffer`] holding it may describe.
    #[inline]
    pub fn extent(&self) -> Extent {
        self.extent
    }

    /// Shape (elements per dimension).
    #[inline]
    pub fn shape(&self) -> &[i64] {
        // SAFETY: `shape` points to `ndim` values owned by the producer's tensor or by `meta`
        // (heap), both alive as long as `self`.
        unsafe { dims(self.shape, self.ndim as usize) }
    }

    /// Strides in elements (computed C-contiguous ones when the producer sent NULL).
    #[inline]
    pub fn strides(&self) -> &[i64] {
        // SAFETY: as for `shape` (NULL strides were replaced by owned ones at import).
        unsafe { dims(self.strides, self.ndim as usize) }
    }

    /// Number of dimensions.
    #[inline]
    pub fn ndim(&self) -> usize {
        self.ndim as usize
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        // Validated at import: dims are non-negative and their product fits in isize.
        self.shape()
            .iter()
            .fold(1usize, |n, &d| n.saturating_mul(d as usize))
    }

    /// The dtype.
    #[inline]
    pub fn dtype(&self) -> DLDataType {
        self.dtype
    }

    /// The dtype's row in the spec's table (`None` for valid dtypes the table lacks).
    pub fn dtype_info(&self) -> Option<&'static DTypeInfo> {
        dtype_by_dl(self.dtype)
    }

    /// Where the memory is.
    #[inline]
    pub fn device(&self) -> Device {
        self.device
    }

    /// Address of element 0 (`data + byte_offset`). Meaningless for opaque-handle devices
    /// (OpenCL, Metal): use [`Self::raw_data`] and [`Self::byte_offset`] there.
    #[inline]
    pub fn data_ptr(&self) -> *mut c_void {
        self.data
    }

    /// The producer's `data` field as sent.
    #[inline]
    pub fn raw_data(&self) -> *mut c_void {
        (self.data as *mut u8)
            .wrapping_sub(self.byte_offset as usize)
            .cast::<c_void>()
    }

    /// The producer's `byte_offset` field.
    #[inline]
    pub fn byte_offset(&self) -> u64 {
        self.byte_offset
    }

    /// Whether the data must not be written (legacy imports; versioned with READ_ONLY).
    #[inline]
    pub fn readonly(&self) -> bool {
        self.readonly
    }

    /// Whether consumers may write the data: `Unknown` for a legacy capsule's tensor (it cannot
    /// say), which may leave through a legacy capsule again ([`Writability`]).
    ///
    /// [`Writability`]: crate::Writability
    #[inline]
    pub fn writability(&self) -> crate::Writability {
        match (&self.owner, self.readonly) {
            (_, false) => crate::Writability::Writable,
            (Owner::Legacy(_), true) => crate::Writability::Unknown,
            (_, true) => crate::Writability::ReadOnly,
        }
    }

    /// The versioned flags (0 for legacy tensors; IS_COPIED for dlbind's own copies).
    #[inline]
    pub fn flags(&self) -> u64 {
        self.flags
    }

    /// Whether the data is a private copy (producer set IS_COPIED, or dlbind copied it).
    #[inline]
    pub fn is_copied(&self) -> bool {
        self.flags & DLPACK_FLAG_BITMASK_IS_COPIED != 0
    }

    /// The producer's version (`None` for legacy tensors and dlbind's copies).
    #[inline]
    pub fn version(&self) -> Option<DLPackVersion> {
        self.version
    }

    /// Whether the layout is C-contiguous (size-1 strides ignored; zero-size is contiguous).
    pub fn is_c_contiguous(&self) -> bool {
        is_c_contiguous(self.shape(), self.strides())
    }

    /// The checks of the borrowed typed accessors: the element type ([`typed::check_elem`]:
    /// `T` reads this dtype and may be lent, which `bool` may not) and host-accessible memory.
    pub(in crate::import) fn check_typed<T: DLPackElement>(
        &self,
        what: &str,
    ) -> Result<(), DlpackError> {
        typed::check_elem::<T>(self.dtype, what, true)?;
        if !self.device.is_host_accessible() {
            return Err(DlpackError::new(
                FailureKind::UnsupportedDevice,
                format!(
                    "{what}: memory on device {} is not host-accessible",
                    self.device
                ),
            ));
        }
        Ok(())
    }

    pub(in crate::import) fn typed_ptr<T>(&self) -> *mut T {
        if self.numel() == 0 || self.data.is_null() {
            NonNull::<T>::dangling().as_ptr()
        } else {
            self.data.cast::<T>()
        }
    }

    /// The elements as a slice (C-contiguous, dtype `T`, host memory). `bool` elements are
    /// not lent (Python code may store any byte in the producer's memory while the slice
    /// lives): `as_slice::<u8>()` reads their bytes, [`Self::to_vec`] copies them checked.
    pub fn as_slice<T: DLPackElement>(&self) -> Result<&[T], DlpackError> {
        self.check_typed::<T>("as_slice")?;
        if !self.is_c_contiguous() {
            return Err(DlpackError::new(
                FailureKind::UnsupportedLayout,
                "as_slice: tensor is not C-contiguous",
            ));
        }
        if !(self.data as usize).is_multiple_of(std::mem::align_of::<T>()) && self.numel() > 0 {
            return Err(DlpackError::new(
                FailureKind::UnsupportedLayout,
                "as_slice: data is not aligned for the element type",
            ));
        }
        // SAFETY: contiguous host memory of `numel` elements of the checked dtype, alive and
        // unmodified through `&self` for the borrow (read-only views are fine to read).
        Ok(unsafe { std::slice::from_raw_parts(self.typed_ptr::<T>(), self.numel()) })
    }

    /// The elements as a mutable slice (C-contiguous, dtype `T`, host memory, not read-only).
    ///
    /// # Safety
    /// The elements are the producer's memory, which more than this handle may reach: another
    /// import of the same object (two `from_dlpack` calls on one numpy array give two handles to
    /// the same bytes), the producer itself, Python code. While the result lives nothing else may
    /// read or write them (Rust's rule for `&mut`): no other handle of the same producer hands
    /// out a slice or view of them, and no Python code touches the array (rust-numpy's
    /// `as_slice_mut` asks the same).
    pub unsafe fn as_mut_slice<T: DLPackElement>(&mut self) -> Result<&mut [T], DlpackError> {
        if self.readonly {
            return Err(DlpackError::new(
                FailureKind::UnsupportedLayout,
                "as_mut_slice: tensor is read-only",
            ));
        }
        let n = self.as_slice::<T>()?.len();
        // SAFETY: as for `as_slice`, plus writability (checked) and exclusivity: `&mut self`
        // for this handle, the caller's contract for every other way to the memory.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.typed_ptr::<T>(), n) })
    }
}
