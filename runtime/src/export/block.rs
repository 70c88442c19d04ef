//! The memory of one export: one `PyMem_Malloc` block per export holds everything:
//! `[ DLManagedTensor | DLManagedTensorVersioned ][ owner ][ borrow ][ copy buffer ][ device copy ][ ndim ][ shape.. ][ strides.. ]`
//! (pymalloc: the fastest allocator for these ~100-byte blocks, as numpy does). The last freed
//! small block of each kind is kept and reused by the next export (one allocator round trip
//! less in export-then-free loops; `DLBIND_FREELIST=0` turns that off, for memory checkers).
//! `manager_ctx` points at the block itself. Also the live-export count ([`live_exports`]).

use std::alloc::Layout;
use std::ffi::{CStr, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::cpython::spare::SpareBlock;

use pyo3::ffi;

use super::borrow::{BorrowSlot, Unborrow};
use super::request::EXPORT_VERSION;

use super::release::*;
use crate::alloc::AlignedBuffer;
use crate::ffi::{
    DLManagedTensor, DLManagedTensorVersioned, DLPACK_CAPSULE_NAME, DLPACK_VERSIONED_CAPSULE_NAME,
    DLTensor,
};
use crate::gpu::OwnedAllocation;

pub(super) static LIVE_EXPORTS: AtomicUsize = AtomicUsize::new(0);

/// Adds `delta` to the live-export count. Only called with the GIL held (building a tensor
/// requires it, and the deleter counts while it holds the GIL), so the GIL orders the updates
/// and a plain load + store is enough: no locked read-modify-write on the export hot path.
/// Without a GIL (free-threaded builds, which dlbind does not
/// target yet) the count would be approximate; it is diagnostics only.
#[inline]
pub(super) fn count_exports(delta: isize) {
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
    fn spare() -> &'static SpareBlock;
}

pub(super) static SPARE_LEGACY: SpareBlock = SpareBlock::new();
pub(super) static SPARE_VERSIONED: SpareBlock = SpareBlock::new();

/// Whether the environment was read for [`spares_allowed`] (on the first allocation).
pub(super) static SPARES_SWITCH: std::sync::Once = std::sync::Once::new();

/// Switches both spare slots off, once, when the environment turns dlbind's object and block
/// reuse off (`DLBIND_FREELIST=0`, see [`crate::cpython::freelist::freelists_allowed`]): a block parked
/// in a slot is still allocated to a memory checker, so a use after free of it would go unseen.
/// Called on [`take_block`]'s allocator path, which the first export of the process takes.
#[cold]
#[inline(never)]
pub(super) fn spares_allowed() {
    SPARES_SWITCH.call_once(|| {
        if !crate::cpython::freelist::freelists_allowed() {
            SPARE_LEGACY.switch_off();
            SPARE_VERSIONED.switch_off();
        }
    });
}

/// How many of the two spare slots (legacy, versioned) hold a freed block now (diagnostics for
/// the tests: 0 after any export when `DLBIND_FREELIST=0`).
pub fn spare_blocks_held() -> usize {
    [&SPARE_LEGACY, &SPARE_VERSIONED]
        .into_iter()
        .filter(|s| s.held())
        .count()
}

/// A block for a tensor of kind `M` with `ndim` dimensions: the spare one when it fits
/// (exports of up to `SMALL_DIMS / 2` dimensions all have the same size), else `PyMem_Malloc`.
/// Export-then-free loops (every `np.from_dlpack(t)`) then skip one allocator round trip.
///
/// # Safety
/// The GIL is held: it orders every access to the spare slots (plain load + store, no locked
/// instruction), as for the live-export counter.
#[inline]
pub(super) unsafe fn take_block<M: ManagedKind>(ndim: usize, size: usize) -> *mut u8 {
    if 2 * ndim <= SMALL_DIMS {
        // SAFETY: the GIL is held (caller contract).
        if let Some(spare) = unsafe { M::spare().take() } {
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
#[inline]
pub(super) unsafe fn give_block<M: ManagedKind>(block: *mut c_void, ndim: usize) {
    // SAFETY: the GIL is held and nothing refers to `block` (caller contract).
    if !(2 * ndim <= SMALL_DIMS && unsafe { M::spare().give(block) }) {
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
    #[inline]
    fn spare() -> &'static SpareBlock {
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
    #[inline]
    fn spare() -> &'static SpareBlock {
        &SPARE_VERSIONED
    }
}

/// The allocation's fixed part. `managed` is first, so a pointer to the managed struct is a
/// pointer to the header.
#[repr(C)]
pub(super) struct Header<M> {
    pub(super) managed: M,
    /// Strong reference to the Python owner (NULL for copies, which own their data). With
    /// `unborrow` set, the reference is the one the borrow in `borrow` holds.
    pub(super) owner: *mut ffi::PyObject,
    /// The shared borrow of a non-frozen owner (a `PyRef`, see `borrow::HeldBorrow`); holds a
    /// value only while `unborrow` is set.
    pub(super) borrow: BorrowSlot,
    /// Ends `borrow` (and drops `owner`'s reference with it); `None`: no borrow, `owner` is a
    /// plain strong reference.
    pub(super) unborrow: Option<Unborrow>,
    pub(super) copy: Option<AlignedBuffer>,
    /// A buffer a GPU runtime allocated for this export (device-to-host, same-device or
    /// host-to-device copies); frees itself through its runtime.
    pub(super) device_copy: Option<Box<OwnedAllocation>>,
    pub(super) ndim: usize,
}

/// Dims slots always allocated (shape + strides of up to 4 dimensions).
pub(super) const SMALL_DIMS: usize = 8;

#[inline]
pub(super) fn layout<M>(ndim: usize) -> Option<(Layout, usize)> {
    // At least SMALL_DIMS slots so that small ranks are zeroed with one fixed-size store.
    let dims = Layout::array::<i64>(ndim.checked_mul(2)?.max(SMALL_DIMS)).ok()?;
    let (l, off) = Layout::new::<Header<M>>().extend(dims).ok()?;
    Some((l.pad_to_align(), off))
}
