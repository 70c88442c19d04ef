//! Taking ownership: a DLPack capsule consumed (checked before, renamed on success) and a
//! managed tensor taken over from the C exchange API (its deleter run on failure).

use std::ffi::CStr;
use std::ptr::NonNull;

use pyo3::ffi;
use pyo3::prelude::*;

use crate::copy::ElemSize;
use crate::dtype::describe;
use crate::error::DlpackError;
use crate::extent::Extent;
use crate::ffi::{
    DLDataType, DLManagedTensor, DLManagedTensorVersioned, DLPACK_CAPSULE_NAME,
    DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED, DLPACK_FLAG_BITMASK_READ_ONLY,
    DLPACK_MAJOR_VERSION, DLPACK_USED_CAPSULE_NAME, DLPACK_VERSIONED_CAPSULE_NAME,
    DLPACK_VERSIONED_USED_CAPSULE_NAME,
};
use crate::spec::errors::FailureKind;

use super::super::validate::validate_dltensor;
use super::{ImportedTensor, Owner};

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
