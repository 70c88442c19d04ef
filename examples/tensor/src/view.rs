//! Memory kept alive by an arbitrary Rust owner, as a `Buffer`.
//!
//! The memory is wrapped as a DLPack managed tensor whose manager context holds the owner (a GPU
//! allocation for `Tensor.zeros(..., device=…)`) and which is imported back through the
//! runtime's public [`ImportedTensor::from_managed_versioned`]: the owner stays alive exactly as
//! long as the `Buffer`. Only public dlbind API is used. (Views of another `Tensor` need no
//! manager: they use `Buffer::share_view`, a strong reference to the owning Python object.)

use std::ffi::c_void;
use std::ptr::{self, NonNull};

use dlbind::device::Device;
use dlbind::ffi::{
    DLDataType, DLManagedTensorVersioned, DLPACK_FLAG_BITMASK_READ_ONLY, DLPACK_MAJOR_VERSION,
    DLPACK_MINOR_VERSION, DLPackVersion, DLTensor,
};
use dlbind::import::ImportedTensor;
use dlbind::storage::Buffer;
use pyo3::PyResult;

#[repr(C)]
struct ViewCtx<O> {
    /// First field: the deleter recovers the `Box<ViewCtx>` from the managed-tensor pointer.
    managed: DLManagedTensorVersioned,
    owner: O,
    dims: Box<[i64]>,
}

/// The deleter of [`share`]'s views.
///
/// # Safety
/// `m` is NULL or the first field of a `ViewCtx<O>` leaked by `share`, and this is the only
/// call for it (the DLPack deleter contract).
unsafe extern "C" fn view_deleter<O>(m: *mut DLManagedTensorVersioned) {
    if m.is_null() {
        return;
    }
    // SAFETY: `m` is the first field of a `ViewCtx<O>` leaked by `share`; called exactly once.
    let ctx = unsafe { Box::from_raw(m.cast::<ViewCtx<O>>()) };
    // For a `Py<…>` owner, dropping decrefs now when attached to the interpreter, or defers
    // it to PyO3's reference pool otherwise. A panic in a generic owner's drop must not unwind
    // into C (it would abort): it is caught and the owner leaked.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(ctx)));
}

/// A `Buffer` whose element 0 is `data`, kept valid by `owner` (a `Py<Tensor>` for views; any
/// owning handle, e.g. a device allocation, works).
///
/// # Safety
/// `data` with `shape`/`strides` (elements) must address memory owned by `owner` that stays
/// valid while `owner` lives.
pub unsafe fn share<O: Send + 'static>(
    owner: O,
    data: *mut c_void,
    dtype: DLDataType,
    shape: &[i64],
    strides: &[i64],
    device: Device,
    readonly: bool,
) -> PyResult<Buffer> {
    let ndim = shape.len();
    let dims: Box<[i64]> = shape.iter().chain(strides).copied().collect();
    let mut ctx = Box::new(ViewCtx {
        managed: DLManagedTensorVersioned {
            version: DLPackVersion {
                major: DLPACK_MAJOR_VERSION,
                minor: DLPACK_MINOR_VERSION,
            },
            manager_ctx: ptr::null_mut(),
            deleter: Some(view_deleter::<O>),
            flags: if readonly {
                DLPACK_FLAG_BITMASK_READ_ONLY
            } else {
                0
            },
            dl_tensor: DLTensor {
                data,
                device: device.to_dl(),
                ndim: ndim as i32,
                dtype,
                shape: ptr::null_mut(),
                strides: ptr::null_mut(),
                byte_offset: 0,
            },
        },
        owner,
        dims,
    });
    let base = ctx.dims.as_mut_ptr();
    ctx.managed.dl_tensor.shape = base;
    // SAFETY: `dims` holds `2 * ndim` values.
    ctx.managed.dl_tensor.strides = unsafe { base.add(ndim) };
    let raw = Box::into_raw(ctx);
    // SAFETY: `raw` is live and unused elsewhere; the managed tensor is its first field.
    let m = unsafe { NonNull::new_unchecked(ptr::addr_of_mut!((*raw).managed)) };
    // SAFETY: `m` is a live, fully built versioned tensor whose deleter (`view_deleter`) frees
    // exactly what `share` allocated; `from_managed_versioned` owns it from here (on error it
    // has already called the deleter).
    let imported = unsafe { ImportedTensor::from_managed_versioned(m) }?;
    Ok(Buffer::from(imported))
}
