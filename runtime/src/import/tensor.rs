//! Consumer side: [`ImportedTensor`], the owning handle of an imported DLPack tensor.
//!
//! Capsule rules (DLPack 1.3 / array API): tell the struct apart by name with
//! `PyCapsule_IsValid`; refuse a versioned tensor whose major version is newer than ours, any
//! dtype we cannot describe and padded sub-byte data (`IS_SUBBYTE_TYPE_PADDED` on a sub-byte
//! dtype: dlbind reads packed sub-byte data only) **before** taking ownership (the capsule stays
//! unconsumed and its own destructor frees it once); rename to the generated `used_*` name
//! immediately on taking ownership; a capsule already named `used_*` → `CapsuleConsumed`. NULL
//! strides mean C-contiguous; element 0 is at `data + byte_offset`. Legacy tensors are read-only (they cannot
//! say otherwise), versioned ones follow `READ_ONLY`. The producer's deleter is called exactly
//! once, when the handle drops, from whatever thread drops it.

use std::ffi::{CStr, c_void};
use std::ptr::{self, NonNull};

use pyo3::ffi;
use pyo3::prelude::*;

use crate::alloc::AlignedBuffer;
use crate::copy::{ElemSize, contiguous_nbytes, copy_to_contiguous, is_c_contiguous};
use crate::device::Device;
use crate::dtype::{describe, validate_dtype};
use crate::spec::dtypes::{DTypeInfo, dtype_by_dl};
use crate::spec::elements::DLPackElement;
use crate::error::DlpackError;
use crate::extent::{Extent, reach};
use crate::layout::c_strides_into;
use crate::spec::errors::FailureKind;
use crate::ffi::{
    DLDataType, DLManagedTensor, DLManagedTensorVersioned, DLPACK_CAPSULE_NAME,
    DLPACK_FLAG_BITMASK_IS_COPIED, DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED,
    DLPACK_FLAG_BITMASK_READ_ONLY, DLPACK_MAJOR_VERSION, DLPACK_USED_CAPSULE_NAME,
    DLPACK_VERSIONED_CAPSULE_NAME, DLPACK_VERSIONED_USED_CAPSULE_NAME, DLPackVersion, DLTensor,
};



use super::validate::dims;
use super::validate::validate_dltensor;

/// Who owns the memory.
enum Owner {
    /// A legacy producer's tensor; its deleter runs on drop.
    Legacy(NonNull<DLManagedTensor>),
    /// A versioned producer's tensor; its deleter runs on drop.
    Versioned(NonNull<DLManagedTensorVersioned>),
    /// A copy dlbind made (writable, C-contiguous); held only to be freed on drop. Boxed to keep
    /// the handle small (the zero-copy path moves it around).
    Copied(#[allow(dead_code)] Box<AlignedBuffer>),
    /// Memory owned by a Python object, held by a strong reference (released with the GIL on
    /// drop; leaked after interpreter shutdown): the numpy header fast path.
    Kept(#[allow(dead_code)] crate::bridges::Keeper),
}

/// An imported DLPack tensor: owns the producer's managed tensor (or a copy) and exposes its
/// description and typed views.
pub struct ImportedTensor {
    owner: Owner,
    /// Element 0 (`data + byte_offset`).
    pub(super) data: *mut c_void,
    pub(super) byte_offset: u64,
    /// `ndim` values, in the producer's tensor or in `meta`.
    pub(super) shape: *const i64,
    /// `ndim` values, in the producer's tensor or in `meta`.
    pub(super) strides: *const i64,
    /// `[shape.., strides..]` when dlbind owns them (NULL strides from old producers, copies);
    /// heap memory, so `shape`/`strides` stay valid when the handle moves.
    pub(super) meta: Option<OwnedDims>,
    pub(super) ndim: u32,
    pub(super) dtype: DLDataType,
    pub(super) device: Device,
    pub(super) readonly: bool,
    pub(super) flags: u64,
    pub(super) version: Option<DLPackVersion>,
    /// The bytes around element 0 the description addresses (validated when the handle was
    /// made, computed once then): what a `Buffer` holding the handle vouches for on export.
    pub(super) extent: Extent,
}

// SAFETY: the handle owns its tensor; DLPack requires producers' deleters to be callable from
// any thread, and the data is plain memory whose mutation needs `&mut self`.
unsafe impl Send for ImportedTensor {}
// SAFETY: `&self` methods only read the description or hand out shared views.
unsafe impl Sync for ImportedTensor {}

impl std::fmt::Debug for ImportedTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImportedTensor")
            .field("shape", &self.shape())
            .field("strides", &self.strides())
            .field("dtype", &describe(self.dtype))
            .field("device", &self.device)
            .field("data", &self.data)
            .field("readonly", &self.readonly)
            .field("version", &self.version)
            .finish()
    }
}

/// An owned `[shape.., strides..]` copy (strides C-contiguous when `None`) and pointers to its
/// two halves (heap memory: they stay valid when the handle that keeps the box moves).
#[cold]
#[inline(never)]
fn owned_meta(
    shape: &[i64],
    strides: Option<&[i64]>,
) -> (*const i64, *const i64, Option<OwnedDims>) {
    let n = shape.len();
    let mut buf = vec![0i64; 2 * n].into_boxed_slice();
    buf[..n].copy_from_slice(shape);
    match strides {
        Some(st) => buf[n..].copy_from_slice(st),
        None => {
            let (sh, st) = buf.split_at_mut(n);
            c_strides_into(sh, st);
        }
    }
    let dims = OwnedDims::new(buf);
    let sp = dims.ptr.as_ptr().cast_const();
    // SAFETY: the allocation holds 2 * n values.
    let st = unsafe { sp.add(n) };
    (sp, st, Some(dims))
}

/// An owned `[shape.., strides..]` that a handle's `shape` / `strides` point into, held as a
/// raw allocation rather than a `Box<[i64]>`: moving a `Box` asserts unique access to what it
/// points to, which would invalidate those pointers each time the handle moves (Miri reports
/// the drop after a move as undefined behaviour under both Stacked and Tree Borrows).
pub(super) struct OwnedDims {
    ptr: NonNull<i64>,
    len: usize,
}

impl OwnedDims {
    fn new(b: Box<[i64]>) -> OwnedDims {
        let len = b.len();
        // SAFETY: `Box::into_raw` never returns NULL.
        let ptr = unsafe { NonNull::new_unchecked(Box::into_raw(b).cast::<i64>()) };
        OwnedDims { ptr, len }
    }
}

impl Drop for OwnedDims {
    fn drop(&mut self) {
        // SAFETY: `ptr` and `len` came from `Box::into_raw` of a `Box<[i64]>` (`new`), freed
        // only here.
        drop(unsafe { Box::from_raw(ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len)) });
    }
}

/// A versioned tensor flagged `IS_SUBBYTE_TYPE_PADDED`: refused when its (validated) dtype is
/// sub-byte, since dlbind reads packed sub-byte data only (its size checks and copies assume
/// packing); accepted for whole-byte dtypes, where the flag means nothing.
#[cold]
#[inline(never)]
fn check_subbyte_padding(dtype: DLDataType) -> Result<(), DlpackError> {
    match crate::dtype::valid_elem_size(dtype) {
        Some(ElemSize::SubByte { .. }) => Err(DlpackError::new(
            FailureKind::UnsupportedLayout,
            format!(
                "DLManagedTensorVersioned.flags: sub-byte elements ({}) padded to one per byte \
                 (DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED) are not supported; dlbind reads packed sub-byte data",
                describe(dtype)
            ),
        )),
        _ => Ok(()),
    }
}

impl ImportedTensor {
    /// Builds the handle for a producer's tensor that is already validated and owned.
    ///
    /// # Safety
    /// `t` is the owner's live tensor, validated with [`validate_dltensor`], which returned
    /// `extent`.
    #[inline(always)]
    unsafe fn from_parts(
        owner: Owner,
        t: &DLTensor,
        readonly: bool,
        flags: u64,
        version: Option<DLPackVersion>,
        extent: Extent,
    ) -> Self {
        let ndim = t.ndim as usize;
        let data = (t.data as *mut u8)
            .wrapping_add(t.byte_offset as usize)
            .cast::<c_void>();
        // Pre-1.2 producers: NULL strides = C-contiguous; dlbind then owns shape + computed
        // strides (out of line, so that the handle is built in registers on the common path).
        let (shape, strides, meta) = if ndim > 0 && t.strides.is_null() {
            // SAFETY: validated: `shape` holds `ndim` values.
            owned_meta(unsafe { dims(t.shape, ndim) }, None)
        } else {
            (t.shape.cast_const(), t.strides.cast_const(), None)
        };
        ImportedTensor {
            owner,
            data,
            byte_offset: t.byte_offset,
            shape,
            strides,
            meta,
            ndim: t.ndim as u32,
            dtype: t.dtype,
            device: Device::from(t.device),
            readonly,
            flags,
            version,
            extent,
        }
    }

    /// The bytes around [`Self::data_ptr`] that this tensor's description addresses, and so
    /// the most that an export of a [`crate::Buffer`] holding it may describe.
    #[inline]
    pub fn extent(&self) -> Extent {
        self.extent
    }

    /// Stores an owned copy of `shape` and `strides` (C-contiguous when `None`) and points the
    /// accessors at it.
    fn set_owned_meta(&mut self, shape: &[i64], strides: Option<&[i64]>) {
        let (sp, st, meta) = owned_meta(shape, strides);
        self.shape = sp;
        self.strides = st;
        self.ndim = shape.len() as u32;
        self.meta = meta;
    }

    /// Consumes a DLPack capsule (`"dltensor"` or `"dltensor_versioned"`).
    ///
    /// On success the capsule is renamed to its `used_*` name and this handle owns the tensor.
    /// On a validation error (version, dtype, layout, padded sub-byte data) the capsule is left
    /// unconsumed (its destructor frees it).
    pub fn from_capsule(capsule: &Bound<'_, PyAny>) -> PyResult<ImportedTensor> {
        let cap = capsule.as_ptr();
        // SAFETY: `cap` is a live object; `PyCapsule_GetName` never raises on an exact capsule;
        // the name is a NUL-terminated C string (or NULL) owned by the producer.
        unsafe {
            if ffi::PyCapsule_CheckExact(cap) == 0 {
                let tn = crate::error::type_name_of(capsule);
                return Err(DlpackError::new(
                    FailureKind::BadArgumentType,
                    format!("expected a DLPack PyCapsule, got an object of type '{tn}'"),
                )
                .into());
            }
            // One name read, then the pointer fetched with that same name (no error possible).
            let name = ffi::PyCapsule_GetName(cap);
            if !name.is_null() && libc::strcmp(name, DLPACK_VERSIONED_CAPSULE_NAME.as_ptr()) == 0 {
                let m = ffi::PyCapsule_GetPointer(cap, name).cast::<DLManagedTensorVersioned>();
                let m = NonNull::new(m).ok_or_else(|| PyErr::fetch(capsule.py()))?;
                let extent = Self::check_versioned(m)?;
                rename(capsule, DLPACK_VERSIONED_USED_CAPSULE_NAME)?;
                return Ok(Self::take_versioned_unchecked(m, extent));
            }
            if !name.is_null() && libc::strcmp(name, DLPACK_CAPSULE_NAME.as_ptr()) == 0 {
                let m = ffi::PyCapsule_GetPointer(cap, name).cast::<DLManagedTensor>();
                let m = NonNull::new(m).ok_or_else(|| PyErr::fetch(capsule.py()))?;
                let extent = validate_dltensor(&(*m.as_ptr()).dl_tensor)?;
                rename(capsule, DLPACK_USED_CAPSULE_NAME)?;
                return Ok(Self::take_legacy_unchecked(m, extent));
            }
            let name = if name.is_null() {
                None
            } else {
                Some(CStr::from_ptr(name))
            };
            if name == Some(DLPACK_USED_CAPSULE_NAME)
                || name == Some(DLPACK_VERSIONED_USED_CAPSULE_NAME)
            {
                Err(DlpackError::new(
                    FailureKind::CapsuleConsumed,
                    "this DLPack capsule was already consumed (a capsule can be consumed only once)",
                )
                .into())
            } else {
                Err(DlpackError::new(
                    FailureKind::CapsuleWrongName,
                    format!(
                        "not a DLPack capsule: name is {:?}, expected {:?} or {:?}",
                        name.map(|n| n.to_string_lossy().into_owned()),
                        DLPACK_VERSIONED_CAPSULE_NAME,
                        DLPACK_CAPSULE_NAME
                    ),
                )
                .into())
            }
        }
    }

    /// # Safety
    /// `m` is a live versioned tensor.
    #[inline(always)]
    unsafe fn check_versioned(m: NonNull<DLManagedTensorVersioned>) -> Result<Extent, DlpackError> {
        // SAFETY: `version` is in the ABI-stable prefix; the rest is read only for our major.
        unsafe {
            let v = (*m.as_ptr()).version;
            if v.major > DLPACK_MAJOR_VERSION {
                return Err(DlpackError::new(
                    FailureKind::VersionTooNew,
                    format!(
                        "DLPack tensor version {}.{} is newer than the supported major version {}",
                        v.major, v.minor, DLPACK_MAJOR_VERSION
                    ),
                ));
            }
            let mt = &*m.as_ptr();
            let extent = validate_dltensor(&mt.dl_tensor)?;
            // One AND on the common path; the dtype is looked at only when the flag is set.
            if mt.flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED != 0 {
                check_subbyte_padding(mt.dl_tensor.dtype)?;
            }
            Ok(extent)
        }
    }

    /// [`Self::check_versioned`]; on failure the tensor's deleter is called (as
    /// [`Self::from_managed_versioned`] does).
    ///
    /// # Safety
    /// `m` is a live tensor that nobody else will use or delete (on failure, it is deleted).
    #[inline(always)]
    pub(crate) unsafe fn check_versioned_or_delete(
        m: NonNull<DLManagedTensorVersioned>,
    ) -> Result<Extent, DlpackError> {
        // SAFETY: caller contract.
        unsafe {
            let r = Self::check_versioned(m);
            if r.is_err() {
                Self::delete_versioned(m);
            }
            r
        }
    }

    /// Calls the tensor's deleter (if any): it is given back to its producer.
    ///
    /// # Safety
    /// `m` is a live tensor that nobody else will use or delete.
    #[cold]
    #[inline(never)]
    pub(crate) unsafe fn delete_versioned(m: NonNull<DLManagedTensorVersioned>) {
        // SAFETY: caller contract.
        unsafe {
            if let Some(d) = (*m.as_ptr()).deleter {
                d(m.as_ptr());
            }
        }
    }

    /// # Safety
    /// `m` is live, validated (`extent` is what its validation returned), and ownership is
    /// transferred to the result.
    #[inline(always)]
    pub(crate) unsafe fn take_versioned_unchecked(
        m: NonNull<DLManagedTensorVersioned>,
        extent: Extent,
    ) -> ImportedTensor {
        // SAFETY: caller contract.
        unsafe {
            let mt = &*m.as_ptr();
            let flags = mt.flags;
            let readonly = flags & DLPACK_FLAG_BITMASK_READ_ONLY != 0;
            Self::from_parts(
                Owner::Versioned(m),
                &mt.dl_tensor,
                readonly,
                flags,
                Some(mt.version),
                extent,
            )
        }
    }

    /// # Safety
    /// `m` is live, validated (`extent` is what its validation returned), and ownership is
    /// transferred to the result.
    unsafe fn take_legacy_unchecked(m: NonNull<DLManagedTensor>, extent: Extent) -> ImportedTensor {
        // SAFETY: caller contract. Legacy tensors cannot signal read-only: imported read-only.
        unsafe {
            Self::from_parts(
                Owner::Legacy(m),
                &(*m.as_ptr()).dl_tensor,
                true,
                0,
                None,
                extent,
            )
        }
    }

    /// Takes ownership of a versioned managed tensor (e.g. from the C exchange API).
    /// On error the tensor's deleter has already been called.
    ///
    /// # Safety
    /// `m` is a live tensor that nobody else will use or delete.
    #[inline(always)]
    pub unsafe fn from_managed_versioned(
        m: NonNull<DLManagedTensorVersioned>,
    ) -> Result<ImportedTensor, DlpackError> {
        // SAFETY: caller contract.
        unsafe {
            let extent = Self::check_versioned_or_delete(m)?;
            Ok(Self::take_versioned_unchecked(m, extent))
        }
    }

    /// Takes ownership of a legacy managed tensor. On error its deleter has already been called.
    ///
    /// # Safety
    /// `m` is a live tensor that nobody else will use or delete.
    pub unsafe fn from_managed_legacy(
        m: NonNull<DLManagedTensor>,
    ) -> Result<ImportedTensor, DlpackError> {
        // SAFETY: caller contract.
        unsafe {
            let extent = match validate_dltensor(&(*m.as_ptr()).dl_tensor) {
                Ok(extent) => extent,
                Err(e) => {
                    if let Some(d) = (*m.as_ptr()).deleter {
                        d(m.as_ptr());
                    }
                    return Err(e);
                }
            };
            Ok(Self::take_legacy_unchecked(m, extent))
        }
    }

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

    /// Whether [`Self::visit_python_owner`] may report an object (everything but a copy).
    #[inline]
    pub(crate) fn reports_python_owner(&self) -> bool {
        !matches!(self.owner, Owner::Copied(_))
    }

    /// Visits the Python object this tensor holds a strong reference to, if any, for a
    /// `tp_traverse` of the object that owns this tensor (see `crate::gc`): the object a view
    /// of a Python object keeps (the numpy header, a lending table, the bridges) or the owner
    /// of a dlbind export. Other producers' managed tensors are opaque: not visited.
    pub(crate) fn visit_python_owner(
        &self,
        visit: &pyo3::PyVisit<'_>,
    ) -> Result<(), pyo3::PyTraverseError> {
        match &self.owner {
            Owner::Kept(k) => k.visit(visit),
            // SAFETY: this handle owns the live tensor `m`, and the references it reports.
            Owner::Versioned(m) => unsafe {
                match crate::bridges::Keeper::of_wrapped(*m) {
                    // A bridge import (`__array_interface__`, the buffer protocol, ...).
                    Some(k) => k.visit(visit),
                    // A dlbind export's owner; nothing for other producers' tensors.
                    None => crate::export::visit_exported_owner(*m, visit),
                }
            },
            // SAFETY: as above.
            Owner::Legacy(m) => unsafe { crate::export::visit_exported_owner(*m, visit) },
            Owner::Copied(_) => Ok(()),
        }
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

    /// The checks of the borrowed typed accessors: the element type ([`super::typed::check_elem`]:
    /// `T` reads this dtype and may be lent, which `bool` may not) and host-accessible memory.
    pub(super) fn check_typed<T: DLPackElement>(&self, what: &str) -> Result<(), DlpackError> {
        super::typed::check_elem::<T>(self.dtype, what, true)?;
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

    pub(super) fn typed_ptr<T>(&self) -> *mut T {
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

impl ImportedTensor {
    /// Gives the producer's managed tensor back now (its deleter runs here, as the drop would
    /// run it) when that is all the handle owns: a legacy or versioned tensor whose shape and
    /// strides are the producer's (no `meta`). `true` then: the handle owns nothing any more
    /// and must be forgotten (overwritten), never dropped. `false`: nothing was done.
    ///
    /// # Safety
    /// After `true`, the caller does not drop `self` (nor use it but to overwrite it).
    #[inline(always)]
    pub(crate) unsafe fn release_managed_in_place(&mut self) -> bool {
        if self.meta.is_some() {
            return false;
        }
        // SAFETY: we own the tensor; its deleter is called exactly once (here: the caller never
        // drops the handle after `true`).
        unsafe { self.owner.give_back() }
    }
}

impl Owner {
    /// Calls a producer's managed tensor's deleter (DLPack requires it to be callable from any
    /// thread): `true` for a legacy or versioned tensor, `false` (nothing done) for a copy or
    /// a kept Python object, whose fields free themselves when dropped.
    ///
    /// # Safety
    /// Called at most once per owner, which owns the tensor.
    #[inline(always)]
    unsafe fn give_back(&self) -> bool {
        // SAFETY: caller contract.
        unsafe {
            match self {
                Owner::Legacy(m) => {
                    if let Some(d) = (*m.as_ptr()).deleter {
                        d(m.as_ptr());
                    }
                }
                Owner::Versioned(m) => {
                    if let Some(d) = (*m.as_ptr()).deleter {
                        d(m.as_ptr());
                    }
                }
                Owner::Copied(_) | Owner::Kept(_) => return false,
            }
        }
        true
    }
}

impl Drop for ImportedTensor {
    fn drop(&mut self) {
        // SAFETY: we own the tensor; the drop runs once. A copy's buffer or a keeper drops with
        // the field after this.
        unsafe { self.owner.give_back() };
    }
}

/// Renames a capsule to its used name (taking ownership).
///
/// # Safety
/// `capsule` is an exact PyCapsule.
unsafe fn rename(capsule: &Bound<'_, PyAny>, used: &'static CStr) -> PyResult<()> {
    // SAFETY: the name is 'static (PyCapsule keeps the pointer).
    if unsafe { ffi::PyCapsule_SetName(capsule.as_ptr(), used.as_ptr()) } != 0 {
        return Err(PyErr::fetch(capsule.py()));
    }
    Ok(())
}

