//! Filling an export's block from a [`DLPackSource`]: shape, strides (C-contiguous when the
//! source gives none), dtype and span checks, flags, the owner reference.

use std::ffi::c_void;
use std::ptr::{self, NonNull};

use super::DLPackSource;
use super::borrow::{BorrowSlot, Keep};
use super::request::ExportPlan;
use crate::layout::c_strides_into;
use std::sync::Arc;

use super::block::*;
use super::device::*;
use crate::error::DlpackError;
use crate::ffi::{DLDataType, DLTensor};
use crate::gpu::DeviceRuntime;
use crate::spec::errors::FailureKind;

/// Builds a managed tensor of kind `M` for `src` according to `plan`, in one allocation.
///
/// `owner` is what the block keeps of the object that owns `src`'s memory ([`Keep`]): the object
/// (a new strong reference) or a shared borrow of it (moved into the block, ended by the
/// deleter); nothing when the data was copied on the host (a borrow then ends when this returns,
/// after the copy).
///
/// # Safety
/// `owner` is a live Python object (or NULL) that keeps `src`'s memory alive; the GIL is held.
/// `stream`: the consumer's `stream=` argument (for the GPU planner); `runtime`: the GPU runtime
/// for device steps (`None`: `gpu::default_runtime`, fetched only if needed).
#[inline(always)]
pub(crate) unsafe fn build_managed<M: ManagedKind, S: DLPackSource + ?Sized, K: Keep>(
    owner: K,
    src: &S,
    plan: &ExportPlan,
    stream: Option<i64>,
    runtime: Option<&Arc<dyn DeviceRuntime>>,
) -> Result<NonNull<M>, DlpackError> {
    let ndim = src.dlpack_ndim();
    let dtype: DLDataType = src.dlpack_dtype();
    // Host memory exported as it is (asked once, before anything is written, so that the
    // compiler reuses the caller's same question).
    let as_is = !plan.copy && !gpu_involved(src, plan);
    let too_many = || {
        DlpackError::new(
            FailureKind::UnsupportedLayout,
            format!("too many dimensions: {ndim}"),
        )
    };
    if ndim > i32::MAX as usize {
        return Err(too_many());
    }
    let (l, dims_off) = layout::<M>(ndim).ok_or_else(too_many)?;
    const { assert!(std::mem::align_of::<Header<M>>() <= 8) };
    // SAFETY: the GIL is held (caller contract); pymalloc returns 8-byte (or better) aligned
    // blocks, enough for the header and the i64 dims.
    let raw = unsafe { take_block::<M>(ndim, l.size()) };
    if raw.is_null() {
        return Err(DlpackError::new(
            FailureKind::OutOfMemory,
            "out of memory allocating a DLPack tensor",
        ));
    }
    let hdr = raw.cast::<Header<M>>();
    // SAFETY: `dims_off + 8 * max(2 * ndim, SMALL_DIMS) <= l.size()`; the dims area is zeroed
    // before any reference to it is made, and i64 is valid for any bit pattern.
    let (shape, strides) = unsafe {
        let dims = raw.add(dims_off).cast::<i64>();
        if 2 * ndim <= SMALL_DIMS {
            dims.cast::<[i64; SMALL_DIMS]>()
                .write_unaligned([0; SMALL_DIMS]);
        } else {
            ptr::write_bytes(dims, 0, 2 * ndim);
        }
        (
            std::slice::from_raw_parts_mut(dims, ndim),
            std::slice::from_raw_parts_mut(dims.add(ndim), ndim),
        )
    };
    src.dlpack_fill_shape(shape);
    if !src.dlpack_fill_strides(strides) {
        c_strides_into(shape, strides);
    }
    let memo = if K::FROZEN_INSTANCE {
        src.__dlbind_memo()
    } else {
        None
    };
    if let Err(e) = super::check_source_once(src, shape, strides, dtype, memo) {
        // SAFETY: `raw` was taken above (GIL held) and nothing else refers to it.
        unsafe { give_block::<M>(raw.cast::<c_void>(), ndim) };
        return Err(e);
    }

    let prepared = if as_is {
        // The hot path: host memory exported as it is.
        Prepared {
            data: src.dlpack_data_ptr(),
            device: plan.device,
            copy: None,
            device_copy: None,
            host_copied: false,
        }
    } else {
        match prepare_data(src, shape, strides, dtype, plan, stream, runtime) {
            Ok(p) => p,
            Err(e) => {
                // SAFETY: `raw` was taken above (GIL held) and nothing else refers to it.
                unsafe { give_block::<M>(raw.cast::<c_void>(), ndim) };
                return Err(e);
            }
        }
    };
    let Prepared {
        data,
        device,
        copy,
        device_copy,
        host_copied: host_copy,
    } = prepared;

    // A host copy is finished and owns its data: it keeps nothing (a borrow ends here, after
    // the copy was made). Anything else keeps the owner alive, and a non-frozen one borrowed:
    // its memory (zero-copy), or the source of a device copy that may still be in flight on
    // the consumer's stream.
    let (owner, borrow, unborrow) = if host_copy {
        drop(owner);
        (ptr::null_mut(), BorrowSlot::uninit(), None)
    } else {
        // SAFETY: `owner` is live or NULL and the GIL is held (caller contract).
        unsafe { owner.into_kept() }
    };
    let (shape_ptr, strides_ptr) = if ndim == 0 {
        (ptr::null_mut(), ptr::null_mut())
    } else {
        (shape.as_mut_ptr(), strides.as_mut_ptr())
    };
    let tensor = DLTensor {
        data,
        device: device.to_dl(),
        ndim: ndim as i32,
        dtype,
        shape: shape_ptr,
        strides: strides_ptr,
        byte_offset: 0,
    };
    // SAFETY: `hdr` is valid for writes of `Header<M>` (start of an allocation of `l.size()`);
    // fields are written in place (no temporary header to copy).
    unsafe {
        (&raw mut (*hdr).managed).write(M::new(tensor, raw.cast::<c_void>(), plan.flags));
        (&raw mut (*hdr).owner).write(owner);
        // The borrow slot means something only with its `unborrow` (a plain owner leaves it
        // unwritten: nothing reads it then).
        if unborrow.is_some() {
            (&raw mut (*hdr).borrow).write(borrow);
        }
        (&raw mut (*hdr).unborrow).write(unborrow);
        if as_is {
            // Nothing was copied (`Prepared` above): the fields written as constants, so that
            // no copy of an empty `Option`'s bytes is made.
            debug_assert!(copy.is_none() && device_copy.is_none());
            std::mem::forget((copy, device_copy));
            (&raw mut (*hdr).copy).write(None);
            (&raw mut (*hdr).device_copy).write(None);
        } else {
            (&raw mut (*hdr).copy).write(copy);
            (&raw mut (*hdr).device_copy).write(device_copy);
        }
        (&raw mut (*hdr).ndim).write(ndim);
    }
    count_exports(1);
    // SAFETY: `raw` is non-null; `managed` is the header's first field.
    Ok(unsafe { NonNull::new_unchecked(hdr.cast::<M>()) })
}
