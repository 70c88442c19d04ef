//! A DLPack tensor over memory a Rust value owns, for the adapters of the `ndarray`, `image`
//! and `safetensors` features: the value moves into one heap block with a
//! `DLManagedTensorVersioned` and its shape and strides; the tensor's deleter drops the block
//! (and so the value) exactly once. The result is handed to [`ImportedTensor::from_managed_versioned`],
//! which validates it like any producer's tensor, so the adapters' exports are `ImportedTensor`s:
//! what any `FromDLPack` type (the demo's `Tensor`, a user's derived type) takes without a copy.

use std::ffi::c_void;
use std::mem::MaybeUninit;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::device::Device;
use crate::error::DlpackError;
use crate::ffi::{
    DLDataType, DLManagedTensor, DLManagedTensorVersioned, DLPACK_FLAG_BITMASK_IS_COPIED,
    DLPACK_FLAG_BITMASK_READ_ONLY, DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION, DLPackVersion,
    DLTensor,
};
use crate::import::ImportedTensor;
use crate::spec::errors::FailureKind;

/// Tensors built here whose deleter has not run yet.
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// How many tensors the adapters built over Rust-owned memory (an `ndarray` array, an image
/// buffer, a safetensors file's bytes) are alive: built, their deleter not yet run. For leak
/// tests, as [`crate::stats::live_exports`] is for `__dlpack__` exports.
pub fn live_rust_owned_tensors() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// What [`export`]'s `describe` reports about the owner's memory.
pub(crate) struct Layout {
    /// Element 0 (any sign of strides: the other elements may sit below it).
    pub data: *mut c_void,
    pub shape: Vec<i64>,
    /// In elements; `None` for C-contiguous.
    pub strides: Option<Vec<i64>>,
    pub dtype: DLDataType,
    /// Consumers must not write.
    pub readonly: bool,
    /// The memory is a copy made for this tensor (sets `IS_COPIED`).
    pub copied: bool,
}

/// The DLPack struct a block starts with: `DLManagedTensorVersioned` (flags kept), or the
/// legacy `DLManagedTensor` (no flags: only for memory a consumer may write, see
/// [`crate::adapters::Handoff`]).
pub(crate) trait BlockKind: Sized + 'static {
    /// Whether the struct has flags (READ_ONLY): without, read-only memory is refused.
    const CARRIES_FLAGS: bool;
    /// The struct over `tensor`, deleted by `deleter`, carrying `flags` where it can.
    fn with(tensor: DLTensor, deleter: unsafe extern "C" fn(*mut Self), flags: u64) -> Self;
}

impl BlockKind for DLManagedTensorVersioned {
    const CARRIES_FLAGS: bool = true;
    fn with(tensor: DLTensor, deleter: unsafe extern "C" fn(*mut Self), flags: u64) -> Self {
        DLManagedTensorVersioned {
            version: DLPackVersion {
                major: DLPACK_MAJOR_VERSION,
                minor: DLPACK_MINOR_VERSION,
            },
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(deleter),
            flags,
            dl_tensor: tensor,
        }
    }
}

impl BlockKind for DLManagedTensor {
    const CARRIES_FLAGS: bool = false;
    fn with(tensor: DLTensor, deleter: unsafe extern "C" fn(*mut Self), _flags: u64) -> Self {
        DLManagedTensor {
            dl_tensor: tensor,
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(deleter),
        }
    }
}

/// The heap block behind one tensor: the managed tensor first (its address is the block's;
/// written once the owner sits in the block and has described its memory), then
/// `[shape.., strides..]`, then the owner.
#[repr(C)]
struct Block<M, O> {
    managed: MaybeUninit<M>,
    dims: Box<[i64]>,
    owner: O,
}

/// The deleter: drops the block (and the owner) once; a panicking `Drop` stops here.
///
/// # Safety
/// `m` is the `managed` field of a live `Block<M, O>` made by [`export_raw_as`], deleted once.
unsafe extern "C" fn delete_block<M, O>(m: *mut M) {
    if m.is_null() {
        return;
    }
    // SAFETY: caller contract: `m` is the first field of a `Box<Block<M, O>>` leaked by
    // `export_raw_as` (`repr(C)`, and `MaybeUninit<M>` has `M`'s layout: same address), and
    // this is its only deletion.
    let block = unsafe { Box::from_raw(m.cast::<Block<M, O>>()) };
    LIVE.fetch_sub(1, Ordering::Relaxed);
    let _ = catch_unwind(AssertUnwindSafe(move || drop(block)));
}

/// The tensor `describe` reports over `owner`'s memory: `owner` is moved to its final place
/// (one heap block) first, then `describe` reads it there, so pointers it takes stay valid
/// for the tensor's life. Host memory; validated as any import (an error drops `owner`).
///
/// # Safety
/// Every element that `describe`'s shape and strides address from its `data`, at its dtype's
/// width, lies in memory that `owner` keeps valid and unmoved until it drops, and nothing
/// else frees or (unless `readonly`) reads or writes it through a Rust reference meanwhile;
/// with `readonly == false` it may be written through `data` (a pointer derived from `&mut`).
#[cfg_attr(
    not(any(feature = "ndarray", feature = "image", feature = "safetensors")),
    allow(dead_code)
)]
pub(crate) unsafe fn export<O: Send + 'static>(
    owner: O,
    describe: impl FnOnce(&mut O) -> Result<Layout, DlpackError>,
) -> Result<ImportedTensor, DlpackError> {
    // SAFETY: caller contract, passed on.
    let m = unsafe { export_raw(owner, describe) }?;
    // SAFETY: `m` is a live tensor nobody else holds; its deleter (run by the handle's drop, or
    // here on a validation error) frees the block once. The memory it describes is the
    // caller's promise.
    unsafe { ImportedTensor::from_managed_versioned(m) }
}

/// [`export`]'s tensor itself, not yet validated or owned by a handle: the caller owns it
/// (and calls its deleter once, or hands it to a consumer who does).
///
/// # Safety
/// As for [`export`].
pub(crate) unsafe fn export_raw<O: Send + 'static>(
    owner: O,
    describe: impl FnOnce(&mut O) -> Result<Layout, DlpackError>,
) -> Result<NonNull<DLManagedTensorVersioned>, DlpackError> {
    // SAFETY: caller contract, passed on.
    unsafe { export_raw_as(owner, describe) }
}

/// [`export_raw`] as either DLPack struct ([`BlockKind`]); a legacy one carries no flags, so
/// the caller makes one only over memory a consumer may write.
///
/// # Safety
/// As for [`export`].
pub(crate) unsafe fn export_raw_as<M: BlockKind, O: Send + 'static>(
    owner: O,
    describe: impl FnOnce(&mut O) -> Result<Layout, DlpackError>,
) -> Result<NonNull<M>, DlpackError> {
    let mut block = Box::new(Block {
        managed: MaybeUninit::<M>::uninit(),
        dims: Box::new([]),
        owner,
    });
    let layout = describe(&mut block.owner)?;
    if layout.readonly && !M::CARRIES_FLAGS {
        return Err(DlpackError::new(
            FailureKind::ReadOnlyLegacy,
            "read-only memory cannot be described by a legacy DLManagedTensor (it has no READ_ONLY flag)",
        ));
    }
    let ndim = layout.shape.len();
    if ndim > crate::import::MAX_NDIM as usize {
        return Err(DlpackError::new(
            FailureKind::UnsupportedLayout,
            format!(
                "{ndim} dimensions: more than dlbind's limit of {}",
                crate::import::MAX_NDIM
            ),
        ));
    }
    let mut dims = Vec::with_capacity(2 * ndim);
    dims.extend_from_slice(&layout.shape);
    match &layout.strides {
        Some(s) => {
            assert_eq!(s.len(), ndim, "adapter layout: one stride per dimension");
            dims.extend_from_slice(s);
        }
        None => {
            dims.resize(2 * ndim, 0);
            let (sh, st) = dims.split_at_mut(ndim);
            crate::layout::c_strides_into(sh, st);
        }
    }
    block.dims = dims.into_boxed_slice();
    let shape = block.dims.as_mut_ptr();
    let flags = if layout.readonly {
        DLPACK_FLAG_BITMASK_READ_ONLY
    } else {
        0
    } | if layout.copied {
        DLPACK_FLAG_BITMASK_IS_COPIED
    } else {
        0
    };
    let tensor = DLTensor {
        data: layout.data,
        device: Device::CPU.into(),
        ndim: ndim as i32,
        dtype: layout.dtype,
        shape,
        // SAFETY: `dims` holds 2 * ndim values (an empty box: `add(0)` of its dangling
        // pointer).
        strides: unsafe { shape.add(ndim) },
        byte_offset: 0,
    };
    block
        .managed
        .write(M::with(tensor, delete_block::<M, O>, flags));
    LIVE.fetch_add(1, Ordering::Relaxed);
    Ok(NonNull::from(&mut Box::leak(block).managed).cast::<M>())
}

/// Checks that the elements `shape` and `strides` (in elements, any sign) address from
/// `offset` lie in `0..len` elements; `UnsupportedLayout` naming `what` otherwise. An empty
/// tensor addresses nothing.
#[cfg_attr(not(any(feature = "image", feature = "safetensors")), allow(dead_code))]
pub(crate) fn check_inside(
    what: &str,
    shape: &[i64],
    strides: &[i64],
    offset: i64,
    len: usize,
) -> Result<(), DlpackError> {
    // One element per unit: the reach is in elements, and `offset` elements of storage lie
    // below element 0.
    let fits = match crate::extent::reach(shape, Some(strides), crate::copy::ElemSize::Bytes(1)) {
        Ok(r) => {
            let below = u64::try_from(offset).ok();
            let above = (len as u64).checked_sub(offset.max(0) as u64);
            r == crate::extent::Reach::NOTHING && offset >= 0
                || matches!((below, above), (Some(b), Some(a)) if r.below <= b && r.above <= a)
        }
        Err(_) => false,
    };
    if !fits {
        return Err(DlpackError::new(
            FailureKind::UnsupportedLayout,
            format!(
                "{what}: shape {shape:?} with strides {strides:?} from element {offset}, wanted \
                 a layout inside the {len} elements the storage holds"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn deleter_drops_the_owner_once_and_validation_errors_drop_it_too() {
        let owner = Arc::new(vec![1.0f32, 2.0, 3.0, 4.0]);
        let probe = Arc::clone(&owner);
        // SAFETY: the Vec's elements stay put while the Arc lives; read-only.
        let t = unsafe {
            export(probe, |o| {
                Ok(Layout {
                    data: o.as_ptr() as *mut c_void,
                    shape: vec![2, 2],
                    strides: None,
                    dtype: DLDataType {
                        code: 2,
                        bits: 32,
                        lanes: 1,
                    },
                    readonly: true,
                    copied: false,
                })
            })
        }
        .unwrap();
        assert_eq!(Arc::strong_count(&owner), 2);
        assert_eq!(t.shape(), &[2, 2]);
        assert_eq!(t.strides(), &[2, 1]);
        assert!(t.readonly());
        assert_eq!(t.as_slice::<f32>().unwrap(), &[1.0, 2.0, 3.0, 4.0]);
        drop(t);
        assert_eq!(Arc::strong_count(&owner), 1);

        // An invalid dtype: refused by validation, the owner dropped by the deleter.
        let probe = Arc::clone(&owner);
        // SAFETY: as above.
        let e = unsafe {
            export(probe, |o| {
                Ok(Layout {
                    data: o.as_ptr() as *mut c_void,
                    shape: vec![4],
                    strides: None,
                    dtype: DLDataType {
                        code: 2,
                        bits: 32,
                        lanes: 3,
                    },
                    readonly: true,
                    copied: false,
                })
            })
        }
        .unwrap_err();
        assert_eq!(e.kind(), FailureKind::UnsupportedDtype);
        assert_eq!(Arc::strong_count(&owner), 1);
    }

    #[test]
    fn check_inside_bounds() {
        assert!(check_inside("t", &[2, 3], &[3, 1], 0, 6).is_ok());
        assert!(check_inside("t", &[2, 3], &[3, 1], 0, 5).is_err());
        assert!(check_inside("t", &[2, 3], &[-3, 1], 3, 6).is_ok());
        assert!(check_inside("t", &[2, 3], &[-3, 1], 2, 6).is_err());
        assert!(check_inside("t", &[0, 3], &[3, 1], 100, 1).is_ok());
        assert!(check_inside("t", &[], &[], 0, 1).is_ok());
        assert!(check_inside("t", &[], &[], 0, 0).is_err());
    }
}
