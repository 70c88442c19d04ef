//! The managed tensor dlbind exports and the capsule around it.
//!
//! One heap allocation per export holds everything:
//! `[ DLManagedTensor | DLManagedTensorVersioned ][ owner ][ copy buffer ][ device copy ][ ndim ][ shape.. ][ strides.. ]`,
//! made with `PyMem_Malloc` (pymalloc: the fastest allocator for these ~100-byte blocks, as
//! numpy does); the last freed small block of each kind is kept and reused by the next export
//! (one allocator round trip less in export-then-free loops; `DLBIND_FREELIST=0` turns that
//! off, for memory checkers). `manager_ctx` points at the allocation itself. The deleter (`extern "C"`,
//! callable from any thread, with or without the GIL) takes the GIL with `PyGILState_Ensure`
//! unless this thread already holds it (`python::this_thread_holds_gil`), drops the strong
//! reference to the Python owner and frees the allocation — or, when the interpreter is gone
//! (`Py_IsInitialized() == 0`) or, on a thread without the GIL, finalising
//! (`interp.rs`), frees only the Rust-owned copy buffer and leaks the rest. The capsule destructor runs with the GIL held and skips `PyGILState_*`.
//!
//! Exports that involve a GPU (a non-CPU source, a non-CPU `dl_device`, or a source that
//! reports a producer stream) go through the GPU planner ([`crate::gpu::plan_export`]): it
//! orders the producer's and the consumer's streams and, for copies, fills a buffer allocated
//! through the [`DeviceRuntime`] that the tensor then owns.
//! Panics never cross the C boundary.

use std::alloc::Layout;
use std::ffi::{CStr, c_void};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

use pyo3::ffi;
use pyo3::prelude::*;

use super::request::{EXPORT_VERSION, ExportPlan, ExportRequest, SourceInfo, plan_export};
use super::{DLPackSource, c_contiguous_strides, check_data_span};
use std::sync::Arc;

use crate::alloc::AlignedBuffer;
use crate::copy::{contiguous_nbytes, copy_to_contiguous};
use crate::device::Device;
use crate::dtype_table::elem_size;
use crate::error::DlpackError;
use crate::failure::FailureKind;
use crate::ffi::{
    DLDataType, DLManagedTensor, DLManagedTensorVersioned, DLPACK_CAPSULE_NAME,
    DLPACK_VERSIONED_CAPSULE_NAME, DLTensor,
};
use crate::gpu::{self, DeviceRuntime, OwnedAllocation, TensorLayout};

static LIVE_EXPORTS: AtomicUsize = AtomicUsize::new(0);

/// Adds `delta` to the live-export count. Only called with the GIL held (building a tensor
/// requires it, and the deleter counts while it holds the GIL), so the GIL orders the updates
/// and a plain load + store is enough: no locked read-modify-write on the export hot path
/// (measured at ~4 ns per export). Without a GIL (free-threaded builds, which dlbind does not
/// target yet) the count would be approximate; it is diagnostics only.
#[inline(always)]
fn count_exports(delta: isize) {
    LIVE_EXPORTS.store(
        LIVE_EXPORTS
            .load(Ordering::Relaxed)
            .wrapping_add_signed(delta),
        Ordering::Relaxed,
    );
}

/// How many managed tensors dlbind created whose deleter has not run yet (process-wide).
#[inline]
pub fn live_exports() -> usize {
    LIVE_EXPORTS.load(Ordering::Relaxed)
}

/// The two managed-tensor structs, for code shared between them.
pub(crate) trait ManagedKind: Sized + 'static {
    /// The unused capsule name (generated).
    const CAPSULE_NAME: &'static CStr;
    /// dlbind's deleter for this kind: a concrete (non-generic) function, so that its address
    /// is the same in every crate (a generic `extern "C" fn` instantiated downstream is a
    /// separate copy, and comparisons with it would miss dlbind's own tensors).
    const DELETER: unsafe extern "C" fn(*mut Self);
    /// The struct, with `deleter` set to [`Self::DELETER`].
    fn new(tensor: DLTensor, ctx: *mut c_void, flags: u64) -> Self;
    /// # Safety
    /// `p` points to a live struct of this kind.
    unsafe fn deleter_of(p: *mut Self) -> Option<unsafe extern "C" fn(*mut Self)>;
    /// One freed small block of this kind kept for the next export (see [`take_block`]).
    fn spare() -> &'static AtomicPtr<c_void>;
}

static SPARE_LEGACY: AtomicPtr<c_void> = AtomicPtr::new(ptr::null_mut());
static SPARE_VERSIONED: AtomicPtr<c_void> = AtomicPtr::new(ptr::null_mut());

/// The value of a spare slot that is switched off: not NULL, so [`give_block`] never parks a
/// block there, and not a block, so [`take_block`] never hands it out.
const NO_SPARE: *mut c_void = ptr::without_provenance_mut(1);
/// Whether the environment was read for [`spares_allowed`] (on the first allocation).
static SPARES_SWITCH: std::sync::Once = std::sync::Once::new();

/// Switches both spare slots off, once, when the environment turns dlbind's object and block
/// reuse off (`DLBIND_FREELIST=0`, see [`crate::freelist::freelists_allowed`]): a block parked
/// in a slot is still allocated to a memory checker, so a use after free of it would go unseen.
/// Called on [`take_block`]'s allocator path, which the first export of the process takes.
#[cold]
#[inline(never)]
fn spares_allowed() {
    SPARES_SWITCH.call_once(|| {
        if !crate::freelist::freelists_allowed() {
            SPARE_LEGACY.store(NO_SPARE, Ordering::Relaxed);
            SPARE_VERSIONED.store(NO_SPARE, Ordering::Relaxed);
        }
    });
}

/// How many of the two spare slots (legacy, versioned) hold a freed block now (diagnostics for
/// the tests: 0 after any export when `DLBIND_FREELIST=0`).
pub fn spare_blocks_held() -> usize {
    [&SPARE_LEGACY, &SPARE_VERSIONED]
        .into_iter()
        .filter(|s| s.load(Ordering::Relaxed).addr() > NO_SPARE.addr())
        .count()
}

/// A block for a tensor of kind `M` with `ndim` dimensions: the spare one when it fits
/// (exports of up to `SMALL_DIMS / 2` dimensions all have the same size), else `PyMem_Malloc`.
/// Export-then-free loops (every `np.from_dlpack(t)`) then skip one allocator round trip.
///
/// # Safety
/// The GIL is held: it orders every access to the spare slots (plain load + store, no locked
/// instruction), as for the live-export counter.
#[inline(always)]
unsafe fn take_block<M: ManagedKind>(ndim: usize, size: usize) -> *mut u8 {
    if 2 * ndim <= SMALL_DIMS {
        let spare = M::spare().load(Ordering::Relaxed);
        // Neither NULL (empty) nor NO_SPARE (switched off).
        if spare.addr() > NO_SPARE.addr() {
            M::spare().store(ptr::null_mut(), Ordering::Relaxed);
            return spare.cast::<u8>();
        }
    }
    if !SPARES_SWITCH.is_completed() {
        spares_allowed();
    }
    // SAFETY: the GIL is held (caller contract).
    unsafe { ffi::PyMem_Malloc(size) }.cast::<u8>()
}

/// Gives a block back: kept as the spare when it is a small one and the slot is empty (not
/// NULL when switched off, see [`spares_allowed`]), else freed.
///
/// # Safety
/// The GIL is held; `block` came from [`take_block`] for kind `M` and `ndim`, and nothing
/// refers to it any more.
#[inline(always)]
unsafe fn give_block<M: ManagedKind>(block: *mut c_void, ndim: usize) {
    if 2 * ndim <= SMALL_DIMS && M::spare().load(Ordering::Relaxed).is_null() {
        M::spare().store(block, Ordering::Relaxed);
    } else {
        // SAFETY: caller contract (a PyMem block, GIL held).
        unsafe { ffi::PyMem_Free(block) };
    }
}

impl ManagedKind for DLManagedTensor {
    const CAPSULE_NAME: &'static CStr = DLPACK_CAPSULE_NAME;
    const DELETER: unsafe extern "C" fn(*mut Self) = deleter_legacy;
    #[inline]
    fn new(tensor: DLTensor, ctx: *mut c_void, _flags: u64) -> Self {
        DLManagedTensor {
            dl_tensor: tensor,
            manager_ctx: ctx,
            deleter: Some(Self::DELETER),
        }
    }
    #[inline]
    unsafe fn deleter_of(p: *mut Self) -> Option<unsafe extern "C" fn(*mut Self)> {
        // SAFETY: the caller guarantees `p` is live.
        unsafe { (*p).deleter }
    }
    #[inline(always)]
    fn spare() -> &'static AtomicPtr<c_void> {
        &SPARE_LEGACY
    }
}

impl ManagedKind for DLManagedTensorVersioned {
    const CAPSULE_NAME: &'static CStr = DLPACK_VERSIONED_CAPSULE_NAME;
    const DELETER: unsafe extern "C" fn(*mut Self) = deleter_versioned;
    #[inline]
    fn new(tensor: DLTensor, ctx: *mut c_void, flags: u64) -> Self {
        DLManagedTensorVersioned {
            version: EXPORT_VERSION,
            manager_ctx: ctx,
            deleter: Some(Self::DELETER),
            flags,
            dl_tensor: tensor,
        }
    }
    #[inline]
    unsafe fn deleter_of(p: *mut Self) -> Option<unsafe extern "C" fn(*mut Self)> {
        // SAFETY: the caller guarantees `p` is live. `deleter` is in the ABI-stable prefix.
        unsafe { (*p).deleter }
    }
    #[inline(always)]
    fn spare() -> &'static AtomicPtr<c_void> {
        &SPARE_VERSIONED
    }
}

/// The allocation's fixed part. `managed` is first, so a pointer to the managed struct is a
/// pointer to the header.
#[repr(C)]
struct Header<M> {
    managed: M,
    /// Strong reference to the Python owner (NULL for copies, which own their data).
    owner: *mut ffi::PyObject,
    copy: Option<AlignedBuffer>,
    /// A buffer a GPU runtime allocated for this export (device-to-host, same-device or
    /// host-to-device copies); frees itself through its runtime.
    device_copy: Option<Box<OwnedAllocation>>,
    ndim: usize,
}

/// Dims slots always allocated (shape + strides of up to 4 dimensions).
const SMALL_DIMS: usize = 8;

#[inline]
fn layout<M>(ndim: usize) -> Option<(Layout, usize)> {
    // At least SMALL_DIMS slots so that small ranks are zeroed with one fixed-size store.
    let dims = Layout::array::<i64>(ndim.checked_mul(2)?.max(SMALL_DIMS)).ok()?;
    let (l, off) = Layout::new::<Header<M>>().extend(dims).ok()?;
    Some((l.pad_to_align(), off))
}

/// The deleter dlbind installs in every legacy tensor it exports ([`deleter`]).
///
/// # Safety
/// As for [`deleter`].
// Never inlined, and so never copied into another crate (rustc may make small functions
// available for cross-crate inlining): its address identifies dlbind's tensors.
#[inline(never)]
unsafe extern "C" fn deleter_legacy(p: *mut DLManagedTensor) {
    // SAFETY: forwarded caller contract.
    unsafe { deleter(p) }
}

/// The deleter dlbind installs in every versioned tensor it exports ([`deleter`]).
///
/// # Safety
/// As for [`deleter`].
// Never inlined, and so never copied into another crate (rustc may make small functions
// available for cross-crate inlining): its address identifies dlbind's tensors.
#[inline(never)]
unsafe extern "C" fn deleter_versioned(p: *mut DLManagedTensorVersioned) {
    // SAFETY: forwarded caller contract.
    unsafe { deleter(p) }
}

/// What dlbind's deleters do (the body of [`ManagedKind::DELETER`]).
///
/// # Safety
/// `p` is NULL or a tensor created by [`build_managed`] whose deleter has not run yet.
#[inline(always)]
unsafe fn deleter<M: ManagedKind>(p: *mut M) {
    if p.is_null() {
        return;
    }
    // A panic must not unwind into C; nothing below is expected to panic.
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // SAFETY: forwarded caller contract. The GIL may or may not be held by this thread.
        unsafe { release::<M>(p, false) }
    }));
}

/// Frees a tensor made by [`build_managed`].
///
/// # Safety
/// As for [`deleter`], `p` non-null; `gil_held` only if this thread holds the GIL.
#[inline(always)]
unsafe fn release<M: ManagedKind>(p: *mut M, gil_held: bool) {
    let hdr = p.cast::<Header<M>>();
    // SAFETY: `hdr` is the live header of an allocation made by `build_managed`; the copy
    // buffer is moved out exactly once (the deleter runs once per tensor by the DLPack rules).
    let (owner, copy, device_copy, ndim) = unsafe {
        (
            (*hdr).owner,
            ptr::read(&raw const (*hdr).copy),
            ptr::read(&raw const (*hdr).device_copy),
            (*hdr).ndim,
        )
    };
    // Rust-owned memory needs no interpreter. (Dropped only when present: the drop of an empty
    // `Option<Box<_>>` was an out-of-line call on every CPU export's release.)
    drop(copy);
    if device_copy.is_some() {
        drop(device_copy);
    }
    // SAFETY: plain C API calls. The allocation (pymalloc) is freed and the owner reference
    // dropped only while the interpreter is alive and with the GIL held (taken here unless the
    // caller holds it, and only when not finalising: see `interp`). After (or, on a thread
    // without the GIL, during) finalization both are leaked on purpose.
    unsafe {
        // A deleter usually runs on a thread that holds the GIL (a consumer's array being
        // freed): skip the Ensure/Release pair then.
        if gil_held || (ffi::Py_IsInitialized() != 0 && crate::python::this_thread_holds_gil()) {
            give_block::<M>(hdr.cast::<c_void>(), ndim);
            if !owner.is_null() {
                ffi::Py_DECREF(owner);
            }
            count_exports(-1);
        } else if crate::interp::may_take_gil() {
            let gil = ffi::PyGILState_Ensure();
            give_block::<M>(hdr.cast::<c_void>(), ndim);
            if !owner.is_null() {
                ffi::Py_DECREF(owner);
            }
            count_exports(-1);
            ffi::PyGILState_Release(gil);
        }
    }
}

/// Visits the Python owner of `m` when `m` is a dlbind export (its deleter is dlbind's and
/// its header holds a strong reference); nothing for other tensors and for copies. For the
/// `tp_traverse` of the object that owns `m` (see [`crate::gc`]).
///
/// # Safety
/// `m` is a live managed tensor owned by the caller (its deleter not run).
pub(crate) unsafe fn visit_exported_owner<M: ManagedKind>(
    m: NonNull<M>,
    visit: &pyo3::PyVisit<'_>,
) -> Result<(), pyo3::PyTraverseError> {
    // SAFETY: caller contract.
    let Some(d) = (unsafe { M::deleter_of(m.as_ptr()) }) else {
        return Ok(());
    };
    if d as usize != M::DELETER as usize {
        return Ok(());
    }
    // SAFETY: a tensor with dlbind's deleter is the first field of a live `Header` block
    // (`build_managed`, `repr(C)`), whose `owner` is NULL or a strong reference it holds.
    match NonNull::new(unsafe { (*m.as_ptr().cast::<Header<M>>()).owner }) {
        // SAFETY: the block's (so the caller's) strong reference.
        Some(o) => unsafe { crate::gc::visit_ptr(visit, o) },
        None => Ok(()),
    }
}

/// Whether the C string `a` equals `b`, reading `a` only up to the first difference: a consumer's
/// "used_…" name differs at its first byte (`PyCapsule_IsValid`'s `strcmp` cost ~3 ns on every
/// consumed export's release).
///
/// # Safety
/// `a` is a NUL-terminated string.
#[inline(always)]
unsafe fn c_str_eq(a: *const std::ffi::c_char, b: &CStr) -> bool {
    for (i, &want) in b.to_bytes_with_nul().iter().enumerate() {
        // SAFETY: every earlier byte of `a` matched a non-NUL byte of `b`, so `a` has not ended
        // before index `i`.
        if unsafe { *a.add(i) } as u8 != want {
            return false;
        }
    }
    true
}

/// PyCapsule destructor: frees the tensor only while the capsule still has its unused name
/// (a consumer that renamed it owns the tensor).
///
/// # Safety
/// Called by CPython with the GIL held on a capsule created by [`wrap_capsule`].
unsafe extern "C" fn capsule_destructor<M: ManagedKind>(capsule: *mut ffi::PyObject) {
    // SAFETY: `capsule` is a live capsule (CPython contract); these calls only read it.
    unsafe {
        // Fast check: our capsules carry exactly the static name pointer until a consumer
        // renames them; otherwise compare by content as the DLPack rule says.
        let name = ffi::PyCapsule_GetName(capsule);
        let p = if name == M::CAPSULE_NAME.as_ptr() {
            // Unrenamed (the static name pointer): the context holds the tensor (`wrap_capsule`).
            ffi::PyCapsule_GetContext(capsule).cast::<M>()
        } else if !name.is_null() && c_str_eq(name, M::CAPSULE_NAME) {
            ffi::PyCapsule_GetPointer(capsule, name).cast::<M>()
        } else {
            // Renamed by a consumer ("used_dltensor…"): it owns the tensor now.
            return;
        };
        if p.is_null() {
            ffi::PyErr_WriteUnraisable(capsule);
            return;
        }
        match M::deleter_of(p) {
            // Our own tensor: the GIL is held here, skip PyGILState_*.
            Some(d) if d as usize == M::DELETER as usize => {
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    release::<M>(p, true)
                }));
            }
            Some(d) => d(p),
            None => {}
        }
    }
}

/// Builds a managed tensor of kind `M` for `src` according to `plan`, in one allocation.
///
/// # Safety
/// `owner` is a live Python object that keeps `src`'s memory alive (it gets a new strong
/// reference unless the data was copied on the host); the GIL is held. `stream`: the
/// consumer's `stream=` argument (for the GPU planner); `runtime`: the GPU runtime for device
/// steps (`None`: [`gpu::default_runtime`], fetched only if needed).
#[inline]
pub(crate) unsafe fn build_managed<M: ManagedKind, S: DLPackSource + ?Sized>(
    owner: *mut ffi::PyObject,
    src: &S,
    plan: &ExportPlan,
    stream: Option<i64>,
    runtime: Option<&Arc<dyn DeviceRuntime>>,
) -> Result<NonNull<M>, DlpackError> {
    let ndim = src.dlpack_ndim();
    let dtype: DLDataType = src.dlpack_dtype();
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
        c_contiguous_strides(shape, strides);
    }
    if let Err(e) = check_data_span(shape, strides, dtype, src.dlpack_data_bytes()) {
        // SAFETY: `raw` was taken above (GIL held) and nothing else refers to it.
        unsafe { give_block::<M>(raw.cast::<c_void>(), ndim) };
        return Err(e);
    }

    let prepared = if !plan.copy && !gpu_involved(src, plan) {
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

    // A host copy is finished and owns its data. Anything else keeps the owner alive: its
    // memory (zero-copy), or the source of a device copy that may still be in flight on the
    // consumer's stream.
    let owner = if host_copy || owner.is_null() {
        ptr::null_mut()
    } else {
        // SAFETY: `owner` is live and the GIL is held (caller contract).
        unsafe { ffi::Py_INCREF(owner) };
        owner
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
        (&raw mut (*hdr).copy).write(copy);
        (&raw mut (*hdr).device_copy).write(device_copy);
        (&raw mut (*hdr).ndim).write(ndim);
    }
    count_exports(1);
    // SAFETY: `raw` is non-null; `managed` is the header's first field.
    Ok(unsafe { NonNull::new_unchecked(hdr.cast::<M>()) })
}

/// Wraps a managed tensor in a capsule with the generated unused name and dlbind's
/// destructor. On failure the tensor is deleted.
///
/// # Safety
/// `m` is an unowned-by-anyone-else tensor made by [`build_managed`]; the GIL is held.
#[inline]
unsafe fn wrap_capsule<M: ManagedKind>(py: Python<'_>, m: NonNull<M>) -> PyResult<Py<PyAny>> {
    // SAFETY: the name is a 'static C string (PyCapsule keeps the pointer); the destructor
    // follows the DLPack rules for exactly this struct kind.
    let cap = unsafe {
        ffi::PyCapsule_New(
            m.as_ptr().cast::<c_void>(),
            M::CAPSULE_NAME.as_ptr(),
            Some(capsule_destructor::<M>),
        )
    };
    if cap.is_null() {
        // SAFETY: nobody else owns `m`.
        unsafe { (M::DELETER)(m.as_ptr()) };
        return Err(PyErr::fetch(py));
    }
    // The context repeats the pointer so that the destructor reads it without
    // `PyCapsule_GetPointer`'s name comparison (DLPack consumers never use the context).
    // SAFETY: `cap` is the live capsule just made; setting its context cannot fail.
    unsafe { ffi::PyCapsule_SetContext(cap, m.as_ptr().cast::<c_void>()) };
    // SAFETY: `PyCapsule_New` returned a new reference.
    Ok(unsafe { Bound::from_owned_ptr(py, cap) }.unbind())
}

/// The data an export points at, when it is not simply the source's own host memory.
struct Prepared {
    data: *mut c_void,
    device: Device,
    /// A host copy the tensor owns.
    copy: Option<AlignedBuffer>,
    /// A GPU runtime's buffer the tensor owns.
    device_copy: Option<Box<OwnedAllocation>>,
    /// The data was copied on the host (finished; the owner is not needed).
    host_copied: bool,
}

/// Whether an export needs the GPU planner: a non-CPU source or target, or a source that
/// reports a stream with pending work.
#[inline(always)]
fn gpu_involved<S: DLPackSource + ?Sized>(src: &S, plan: &ExportPlan) -> bool {
    !(src.dlpack_device().is_cpu() && plan.device.is_cpu()) || src.dlpack_stream().is_some()
}

/// Copies and device work for an export (everything but "host memory as it is"): the GPU
/// planner when a GPU is involved (a device source or target, or a pending producer stream),
/// then the CPU copy kernels for host copies. Rewrites `strides` to C-contiguous after a copy.
#[cold]
#[inline(never)]
fn prepare_data<S: DLPackSource + ?Sized>(
    src: &S,
    shape: &[i64],
    strides: &mut [i64],
    dtype: DLDataType,
    plan: &ExportPlan,
    stream: Option<i64>,
    runtime: Option<&Arc<dyn DeviceRuntime>>,
) -> Result<Prepared, DlpackError> {
    let mut out = Prepared {
        data: src.dlpack_data_ptr(),
        device: plan.device,
        copy: None,
        device_copy: None,
        host_copied: plan.copy,
    };
    if gpu_involved(src, plan) {
        let done = run_device_plan(src, shape, strides, dtype, plan, stream, runtime)?;
        if done.is_copied != plan.copy {
            return Err(DlpackError::new(
                FailureKind::BadArgumentValue,
                "dlbind internal error: the GPU planner and the negotiation disagree about a copy",
            ));
        }
        out.device = done.target;
        out.host_copied = done.needs_host_copy;
        if let Some(a) = done.allocation {
            out.data = a.ptr() as usize as *mut c_void;
            c_contiguous_strides(shape, strides);
            out.device_copy = Some(Box::new(a));
        }
    }
    if out.host_copied {
        let elem = elem_size(dtype)?;
        let nbytes = contiguous_nbytes(shape, elem)?;
        let buf = AlignedBuffer::uninit(nbytes)?;
        // SAFETY: host copies are only planned for host-accessible memory (made ready for the
        // host by the GPU plan's steps, if any); `src`'s contract makes every element reachable
        // from its data pointer with these shape/strides readable; `buf` is a fresh allocation
        // of `nbytes` bytes (no overlap).
        unsafe {
            copy_to_contiguous(
                out.data.cast::<u8>(),
                shape,
                strides,
                elem,
                buf.as_mut_ptr(),
                nbytes,
            )
        }?;
        c_contiguous_strides(shape, strides);
        out.data = buf.as_mut_ptr().cast::<c_void>();
        out.copy = Some(buf);
    }
    Ok(out)
}

/// Plans and runs the device side of an export (GPU planner + runtime): stream ordering and,
/// for device copies, a fresh buffer. `shape` / `strides` are the source's (elements).
/// Out of line and cold: host exports (the hot path) never come here.
fn run_device_plan<S: DLPackSource + ?Sized>(
    src: &S,
    shape: &[i64],
    strides: &[i64],
    dtype: DLDataType,
    plan: &ExportPlan,
    stream: Option<i64>,
    runtime: Option<&Arc<dyn DeviceRuntime>>,
) -> Result<gpu::ExportOutcome, DlpackError> {
    let contiguous = gpu::plan::is_c_contiguous(shape, Some(strides));
    // Sub-byte dtypes move as whole bytes, which only a C-contiguous layout allows.
    let (flat, layout) = match elem_size(dtype)? {
        crate::copy::ElemSize::Bytes(b) => (
            None,
            TensorLayout {
                shape,
                strides: Some(strides),
                elem_bytes: b,
            },
        ),
        elem @ crate::copy::ElemSize::SubByte { .. } => {
            if !contiguous {
                return Err(DlpackError::new(
                    FailureKind::UnsupportedLayout,
                    format!(
                        "a non-contiguous {} tensor cannot be copied by a device runtime (sub-byte elements)",
                        crate::dtype_table::describe(dtype)
                    ),
                ));
            }
            let n = contiguous_nbytes(shape, elem)? as i64;
            (
                Some([n]),
                TensorLayout {
                    shape: &[],
                    strides: None,
                    elem_bytes: 1,
                },
            )
        }
    };
    let layout = match &flat {
        Some(n) => TensorLayout {
            shape: &n[..],
            ..layout
        },
        None => layout,
    };
    let req = gpu::ExportRequest {
        device: src.dlpack_device(),
        producer_stream: src.dlpack_stream(),
        dl_device: Some(plan.device),
        stream,
        copy: Some(plan.copy),
        contiguous,
        bytes: layout.nbytes(),
    };
    let gplan = gpu::plan_export(&req)?;
    let ptr = src.dlpack_data_ptr() as usize as gpu::DevicePtr;
    match runtime {
        Some(rt) if gplan.needs_runtime() => gpu::execute_export(rt, &gplan, ptr, &layout),
        _ => gpu::run_export(&gplan, ptr, &layout),
    }
}

/// Negotiates `req` for `src` and returns the capsule (`"dltensor"` or
/// `"dltensor_versioned"`). `owner` is the Python object that keeps `src`'s memory alive; the
/// capsule's tensor holds a strong reference to it (none when the data was copied on the host).
/// For a `#[pyclass]`, pass what [`SourceAccess::with_owner`](crate::python::SourceAccess::with_owner)
/// gives: the object when it is frozen, else a guard holding a shared borrow of it (so a
/// `&mut self` method cannot reallocate the data while the tensor lives).
#[inline]
pub fn export_to_capsule<S: DLPackSource + ?Sized>(
    owner: &Bound<'_, PyAny>,
    src: &S,
    req: &ExportRequest,
) -> PyResult<Py<PyAny>> {
    negotiate_and_export(owner, src, req, None)
}

/// [`export_to_capsule`] with an explicit GPU runtime for the device steps (copies, stream
/// ordering) instead of [`gpu::default_runtime`]: for tests with
/// [`gpu::fake::FakeRuntime`], or for a runtime of your own.
pub fn export_to_capsule_on<S: DLPackSource + ?Sized>(
    owner: &Bound<'_, PyAny>,
    src: &S,
    req: &ExportRequest,
    runtime: &Arc<dyn DeviceRuntime>,
) -> PyResult<Py<PyAny>> {
    negotiate_and_export(owner, src, req, Some(runtime))
}

/// Plans `req` for `src` ([`plan_export`]) and exports it ([`export_planned_on`]).
#[inline(always)]
fn negotiate_and_export<S: DLPackSource + ?Sized>(
    owner: &Bound<'_, PyAny>,
    src: &S,
    req: &ExportRequest,
    runtime: Option<&Arc<dyn DeviceRuntime>>,
) -> PyResult<Py<PyAny>> {
    let plan = plan_export(
        req,
        SourceInfo {
            device: src.dlpack_device(),
            readonly: src.dlpack_readonly(),
        },
    )?;
    export_planned_on(owner, src, &plan, req.stream, runtime)
}

#[inline]
fn export_planned_on<S: DLPackSource + ?Sized>(
    owner: &Bound<'_, PyAny>,
    src: &S,
    plan: &ExportPlan,
    stream: Option<i64>,
    runtime: Option<&Arc<dyn DeviceRuntime>>,
) -> PyResult<Py<PyAny>> {
    let py = owner.py();
    // SAFETY: `owner` is a live object (bound to the GIL token `py`) that owns `src`.
    unsafe {
        if plan.versioned {
            let m = build_managed::<DLManagedTensorVersioned, S>(
                owner.as_ptr(),
                src,
                plan,
                stream,
                runtime,
            )?;
            wrap_capsule(py, m)
        } else {
            let m =
                build_managed::<DLManagedTensor, S>(owner.as_ptr(), src, plan, stream, runtime)?;
            wrap_capsule(py, m)
        }
    }
}

/// Builds an owning `DLManagedTensorVersioned` without a capsule (for the C exchange API and
/// for Rust consumers). The caller owns the result and must call its deleter exactly once.
#[inline]
pub fn export_versioned_managed<S: DLPackSource + ?Sized>(
    owner: &Bound<'_, PyAny>,
    src: &S,
    req: &ExportRequest,
) -> Result<NonNull<DLManagedTensorVersioned>, DlpackError> {
    let mut req = *req;
    if !req.wants_versioned() {
        req.max_version = Some((EXPORT_VERSION.major as i64, EXPORT_VERSION.minor as i64));
    }
    let plan = plan_export(
        &req,
        SourceInfo {
            device: src.dlpack_device(),
            readonly: src.dlpack_readonly(),
        },
    )?;
    // SAFETY: `owner` is live and bound to the GIL.
    unsafe {
        build_managed::<DLManagedTensorVersioned, S>(owner.as_ptr(), src, &plan, req.stream, None)
    }
}

#[cfg(test)]
mod tests {
    use super::c_str_eq;

    #[test]
    fn c_str_eq_compares_whole_strings() {
        let eq = |a: &std::ffi::CStr, b: &std::ffi::CStr| {
            // SAFETY: both are NUL-terminated strings alive for the call.
            unsafe { c_str_eq(a.as_ptr(), b) }
        };
        assert!(eq(c"dltensor", c"dltensor"));
        assert!(eq(c"", c""));
        assert!(!eq(c"used_dltensor", c"dltensor"));
        assert!(
            !eq(c"dltensor", c"dltensor_versioned"),
            "a prefix is not equal"
        );
        assert!(
            !eq(c"dltensor_versioned", c"dltensor"),
            "nor is a longer name"
        );
        assert!(!eq(c"dltensoR", c"dltensor"));
        assert!(!eq(c"", c"dltensor"));
    }
}
