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
//!
//! The parts: `capsule` (consuming a capsule or a managed tensor: the checks before ownership,
//! the rename, the deleter on failure), `buffers` (handles over memory dlbind holds: its own
//! copies, a Python object's memory) and `access` (the description and the typed slices).

mod access;
mod buffers;
mod capsule;

use std::ffi::c_void;
use std::ptr::{self, NonNull};

use crate::alloc::AlignedBuffer;
use crate::device::Device;
use crate::dtype::describe;
use crate::extent::Extent;
use crate::ffi::{DLDataType, DLManagedTensor, DLManagedTensorVersioned, DLPackVersion, DLTensor};
use crate::layout::c_strides_into;

use super::validate::dims;

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

impl ImportedTensor {
    /// Builds the handle for a producer's tensor that is already validated and owned.
    ///
    /// # Safety
    /// `t` is the owner's live tensor, validated with [`validate_dltensor`], which returned
    /// `extent`.
    ///
    /// [`validate_dltensor`]: super::validate_dltensor
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

    /// Stores an owned copy of `shape` and `strides` (C-contiguous when `None`) and points the
    /// accessors at it.
    fn set_owned_meta(&mut self, shape: &[i64], strides: Option<&[i64]>) {
        let (sp, st, meta) = owned_meta(shape, strides);
        self.shape = sp;
        self.strides = st;
        self.ndim = shape.len() as u32;
        self.meta = meta;
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
