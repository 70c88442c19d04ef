//! The shared borrow an export of a non-frozen `#[pyclass]` holds.
//!
//! A frozen class only ever hands out `&self`: nothing can move the memory it lends while the
//! object lives, so an export keeps the object itself alive and that is enough. A plain
//! `#[pyclass]` hands out `&mut self` (methods, setters), and one of them could reallocate or
//! free the data a capsule, memoryview or numpy array still points at. So an export of such an
//! object keeps a *shared borrow* of it for as long as the consumer holds the export: a
//! `&mut self` call then fails with PyO3's borrow error (`RuntimeError: Already borrowed`)
//! instead, and works again once every export is released (numpy refuses `resize` on an array
//! that other objects refer to in the same way).
//!
//! The borrow is a `PyRef` of the object (a strong reference plus one count of PyO3's borrow
//! flag), kept in one of two places (decision 0011):
//!
//! * [`HeldBorrow`]: inside the export's manager block, for every export whose owner is a DLPack
//!   managed tensor (the `__dlpack__` capsules, legacy and versioned, and the exchange table's
//!   owning export). The block already exists per export; the `PyRef` (one pointer) is moved into
//!   it with the function that drops it, and the tensor's deleter (which runs attached to the
//!   interpreter, exactly once) ends the borrow. No Python object is made.
//! * an `ExportBorrow` guard: a small hidden Python object holding the `PyRef`, where the
//!   consumer keeps an *object* as the owner: the `obj` of a `Py_buffer` (memoryviews) and the
//!   `data` entry of `__array_interface__` (numpy keeps it as the array's base). It is the
//!   owner [`SourceAccess::with_owner`](super::SourceAccess::with_owner) gives for a non-frozen
//!   class. The borrow ends when the last reference to the guard goes, in the guard's
//!   `tp_dealloc`.
//!
//! The guard's type is made with the C API (`PyType_FromSpec`, once per process, on the first
//! guarded export of a non-frozen object) rather than as a `#[pyclass]`: a pyclass registers its
//! methods in every module that links dlbind, and its PyO3 buffer trampolines then changed how
//! LLVM inlined the frozen classes' own (a few ns on `memoryview(t)`, measured). Nothing of it is
//! linked into a module without a non-frozen class.
//!
//! Neither place lets a garbage collection end the borrow while an export still points into the
//! data: the guard reports the object to the collector (`tp_traverse`) and has no `tp_clear`; a
//! block's borrow is reported by whoever owns the tensor (`visit_exported_owner`, as a plain
//! strong reference) and ends only in the tensor's deleter. The guard exposes bytes through the
//! buffer protocol only when made for `__array_interface__` (a [`Window`]), and it is not
//! instantiable from Python.

use std::ffi::{c_int, c_uint, c_void};
use std::mem::{ManuallyDrop, MaybeUninit};
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};

use pyo3::PyClass;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

/// Shared borrows that exports hold now, in guards and in manager blocks (process-wide):
/// diagnostics for the tests.
static LIVE_BORROWS: AtomicUsize = AtomicUsize::new(0);

/// Guard objects alive now (process-wide): the part of [`LIVE_BORROWS`] that guards hold.
static LIVE_GUARDS: AtomicUsize = AtomicUsize::new(0);

/// How many shared borrows of non-frozen `#[pyclass]` objects dlbind's exports hold now, in
/// manager blocks and in guard objects (process-wide; diagnostics). Returns to its previous value
/// once every such export is released.
pub fn live_export_borrows() -> usize {
    LIVE_BORROWS.load(Ordering::Relaxed)
}

/// How many of [`live_export_borrows`] are held by guard objects (memoryviews and
/// `__array_interface__` arrays of non-frozen objects; a `__dlpack__` capsule or an exchange
/// table export keeps its borrow in its manager block and makes none). Process-wide; diagnostics.
pub fn live_borrow_guards() -> usize {
    LIVE_GUARDS.load(Ordering::Relaxed)
}

/// Adds `delta` to the borrow count. Only called attached to the interpreter (a borrow is taken
/// and dropped with the GIL held), so the GIL orders the updates: a plain load + store, no
/// locked read-modify-write on the export path (as `block::count_exports`; diagnostics only).
#[inline]
fn count_borrows(delta: isize) {
    LIVE_BORROWS.store(
        LIVE_BORROWS
            .load(Ordering::Relaxed)
            .wrapping_add_signed(delta),
        Ordering::Relaxed,
    );
}

/// Room for one `PyRef<'static, T>` of any pyclass `T` inside an export's manager block (PyO3's
/// `PyRef` is a `Bound`: one pointer; [`HeldBorrow::new`] checks that it fits at compile time).
pub(crate) type BorrowSlot = MaybeUninit<*mut c_void>;

/// Ends a borrow kept in a [`BorrowSlot`]: drops the `PyRef<'static, T>` it holds (PyO3's borrow
/// count and the strong reference go). Must be called exactly once per borrow, attached to the
/// interpreter, with the slot [`HeldBorrow::into_raw`] gave it alongside.
pub(crate) type Unborrow = unsafe fn(BorrowSlot);

/// A shared borrow of a pyclass object (its `PyRef`, lifetime-extended and type-erased) that an
/// export moves into its manager block ([`HeldBorrow::into_raw`]); dropped as it is (a failed
/// export, a host copy that keeps nothing), it ends the borrow. It lives only inside a call that
/// holds the GIL, and the block's deleter drops what was moved out attached as well.
pub(crate) struct HeldBorrow {
    /// The borrowed object (the `PyRef` in `slot` holds the strong reference to it).
    obj: *mut ffi::PyObject,
    slot: BorrowSlot,
    unborrow: Unborrow,
}

impl HeldBorrow {
    /// Keeps `r`'s shared borrow (and its strong reference) until the result is dropped or the
    /// [`Unborrow`] of [`Self::into_raw`] runs.
    #[inline]
    pub(crate) fn new<T: PyClass>(r: PyRef<'_, T>) -> Self {
        const {
            assert!(
                std::mem::size_of::<PyRef<'static, T>>() <= std::mem::size_of::<BorrowSlot>()
                    && std::mem::align_of::<PyRef<'static, T>>()
                        <= std::mem::align_of::<BorrowSlot>(),
                "PyO3's PyRef no longer fits a pointer-sized slot"
            )
        };
        let obj = r.as_ptr();
        // SAFETY: only the lifetime changes (same type otherwise, same layout). The extended
        // `PyRef` is never used, only dropped, by `unborrow::<T>`, which runs attached to the
        // interpreter (in `Drop` inside the call that made it, or in the export's deleter, which
        // takes the GIL first), so it never outlives what `'_` stands for at the one point it is
        // touched.
        let r: PyRef<'static, T> = unsafe { std::mem::transmute::<PyRef<'_, T>, _>(r) };
        let mut slot = BorrowSlot::uninit();
        // SAFETY: the slot is large and aligned enough for a `PyRef<'static, T>` (checked above).
        unsafe { slot.as_mut_ptr().cast::<PyRef<'static, T>>().write(r) };
        count_borrows(1);
        HeldBorrow {
            obj,
            slot,
            unborrow: unborrow::<T>,
        }
    }

    /// The borrowed object (borrowed pointer: the strong reference stays with the borrow).
    #[inline]
    pub(crate) fn object(&self) -> *mut ffi::PyObject {
        self.obj
    }

    /// Moves the borrow out: the slot and the function that ends it, which the new owner (an
    /// export's manager block) must call exactly once with that slot, attached to the
    /// interpreter (see [`Unborrow`]).
    #[inline]
    pub(crate) fn into_raw(self) -> (BorrowSlot, Unborrow) {
        let me = ManuallyDrop::new(self);
        (me.slot, me.unborrow)
    }
}

impl Drop for HeldBorrow {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: the slot holds the `PyRef` `new` wrote (not moved out: `into_raw` forgets
        // `self`), dropped once here, attached (a `HeldBorrow` lives only inside a call that
        // holds the GIL).
        unsafe { (self.unborrow)(self.slot) }
    }
}

/// The [`Unborrow`] for `T`: drops the `PyRef<'static, T>` in `slot`.
///
/// # Safety
/// `slot` holds a `PyRef<'static, T>` written by [`HeldBorrow::new`] for this `T` and not
/// dropped yet; attached to the interpreter.
unsafe fn unborrow<T: PyClass>(slot: BorrowSlot) {
    count_borrows(-1);
    // SAFETY: caller contract; the slot is aligned for the `PyRef` (checked in `new`). Dropping
    // a `PyRef` releases PyO3's borrow count and decrefs the object directly (no Python code
    // of ours runs; the object is not freed while its owner's other references live, and when
    // this is the last one its deallocation runs here, attached).
    drop(unsafe { slot.as_ptr().cast::<PyRef<'static, T>>().read() });
}

/// What an export's manager block keeps of the object that owns its data (`build_managed`'s
/// owner): a plain strong reference (a `*mut PyObject`: the object, which gets a new reference;
/// NULL: nothing), or a [`HeldBorrow`] (the borrow's own strong reference, ended by the block's
/// deleter), or a [`FrozenInstance`] (a plain strong reference to the frozen instance the
/// source is part of).
pub(crate) trait Keep {
    /// Whether the source is part of this owner, a live instance of a `#[pyclass(frozen)]`
    /// type ([`FrozenInstance`]): what the export checks cannot change while it lives, so the
    /// check is remembered in the instance ([`super::memo`]).
    const FROZEN_INSTANCE: bool = false;
    /// What the block stores: the owner (a strong reference the block holds from now on, or
    /// NULL), and, when a borrow holds that reference, the borrow and the function that ends it
    /// (the block then drops only the borrow).
    ///
    /// # Safety
    /// Attached to the interpreter; a pointer is a live object or NULL.
    unsafe fn into_kept(self) -> (*mut ffi::PyObject, BorrowSlot, Option<Unborrow>);
}

impl Keep for *mut ffi::PyObject {
    #[inline]
    unsafe fn into_kept(self) -> (*mut ffi::PyObject, BorrowSlot, Option<Unborrow>) {
        if !self.is_null() {
            // SAFETY: a live object, attached (caller contract).
            unsafe { ffi::Py_INCREF(self) };
        }
        (self, BorrowSlot::uninit(), None)
    }
}

/// The instance of a `#[pyclass(frozen)]` type that `__dlpack__` exports (its own `self`),
/// kept by a strong reference as a `*mut PyObject` owner is. Made only by `__dlpack__`'s frozen
/// path (`export::method`), where the source is `&` the instance's contents: PyO3 hands out no
/// `&mut` to a frozen instance, so its fields stay as they are while it lives.
#[derive(Clone, Copy)]
pub(crate) struct FrozenInstance(pub(crate) *mut ffi::PyObject);

impl Keep for FrozenInstance {
    const FROZEN_INSTANCE: bool = true;
    #[inline]
    unsafe fn into_kept(self) -> (*mut ffi::PyObject, BorrowSlot, Option<Unborrow>) {
        // SAFETY: caller contract.
        unsafe { self.0.into_kept() }
    }
}

impl Keep for HeldBorrow {
    #[inline]
    unsafe fn into_kept(self) -> (*mut ffi::PyObject, BorrowSlot, Option<Unborrow>) {
        let obj = self.object();
        let (slot, unborrow) = self.into_raw();
        (obj, slot, Some(unborrow))
    }
}

/// Bytes a guard exposes through the buffer protocol (a `PyBUF_SIMPLE` byte buffer): for
/// `__array_interface__`, whose `data` entry is then the guard (see
/// [`crate::bridges::array_interface`](fn@crate::bridges::array_interface)).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Window {
    /// The lowest address the array reaches.
    pub base: usize,
    /// Bytes from `base` on that the array reaches.
    pub len: usize,
    /// Whether consumers must not write.
    pub readonly: bool,
}

/// The guard object's layout. Every field is valid zeroed (an empty guard), which is how
/// `tp_alloc` hands it out.
#[repr(C)]
struct GuardObject {
    ob_base: ffi::PyObject,
    /// A leaked `Box<PyRef<'static, T>>` (NULL: none), released by `release`.
    borrow: *mut c_void,
    /// Drops `borrow` as the `T` it was made for (`None`: nothing to drop).
    release: Option<unsafe fn(*mut c_void)>,
    /// The borrowed object (the `PyRef` holds a strong reference to it), for `tp_traverse`.
    obj: *mut ffi::PyObject,
    /// Whether `window_*` describe bytes to expose through the buffer protocol.
    has_window: bool,
    window_readonly: bool,
    window_base: usize,
    window_len: ffi::Py_ssize_t,
}

/// Drops a `Box<PyRef<'static, T>>` made by [`hold`]: the shared borrow ends and the reference
/// to the object goes.
///
/// # Safety
/// `p` came from `Box::into_raw` of a `Box<PyRef<'static, T>>` in [`hold`] and is dropped once,
/// attached to the interpreter.
unsafe fn release_ref<T: PyClass>(p: *mut c_void) {
    // SAFETY: caller contract.
    drop(unsafe { Box::from_raw(p.cast::<PyRef<'static, T>>()) });
}

/// The guard type (made once per process).
fn guard_type(py: Python<'_>) -> PyResult<&Bound<'_, PyType>> {
    static TYPE: PyOnceLock<Py<PyType>> = PyOnceLock::new();
    TYPE.get_or_try_init(py, || {
        let mut slots = [
            ffi::PyType_Slot {
                slot: ffi::Py_tp_dealloc,
                pfunc: guard_dealloc as *mut c_void,
            },
            ffi::PyType_Slot {
                slot: ffi::Py_tp_traverse,
                pfunc: guard_traverse as *mut c_void,
            },
            ffi::PyType_Slot {
                slot: ffi::Py_bf_getbuffer,
                pfunc: guard_getbuffer as *mut c_void,
            },
            ffi::PyType_Slot {
                slot: ffi::Py_bf_releasebuffer,
                pfunc: guard_releasebuffer as *mut c_void,
            },
            ffi::PyType_Slot {
                slot: ffi::Py_tp_doc,
                pfunc: c"A shared borrow of a non-frozen #[pyclass] object, held by dlbind exports of it until they are released."
                    .as_ptr()
                    .cast_mut()
                    .cast(),
            },
            ffi::PyType_Slot {
                slot: 0,
                pfunc: ptr::null_mut(),
            },
        ];
        let mut spec = ffi::PyType_Spec {
            name: c"dlbind.ExportBorrow".as_ptr(),
            basicsize: c_int::try_from(std::mem::size_of::<GuardObject>())
                .map_err(|_| pyo3::exceptions::PySystemError::new_err("guard type too large"))?,
            itemsize: 0,
            flags: (ffi::Py_TPFLAGS_DEFAULT
                | ffi::Py_TPFLAGS_HAVE_GC
                | ffi::Py_TPFLAGS_DISALLOW_INSTANTIATION) as c_uint,
            slots: slots.as_mut_ptr(),
        };
        // SAFETY: a valid spec whose slots have the signatures CPython expects for them; the
        // name and doc are 'static; CPython copies the slots and the spec (3.11: it keeps the
        // name pointer, which is 'static).
        let tp = unsafe { Bound::from_owned_ptr_or_err(py, ffi::PyType_FromSpec(&mut spec))? };
        Ok::<_, PyErr>(tp.cast_into::<PyType>()?.unbind())
    })
    .map(|t| t.bind(py))
}

/// A new guard keeping `r`'s shared borrow (and a strong reference to its object) until the
/// guard's last reference goes. `window`: bytes the guard exposes through the buffer protocol
/// (`None`: it exposes none).
pub(crate) fn hold<'py, T: PyClass>(
    r: PyRef<'py, T>,
    window: Option<Window>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = r.py();
    let window_len = match window {
        Some(w) => ffi::Py_ssize_t::try_from(w.len)
            .map_err(|_| pyo3::exceptions::PyOverflowError::new_err("array too large"))?,
        None => 0,
    };
    let tp = guard_type(py)?.as_type_ptr();
    // SAFETY: a ready heap type; `tp_alloc` (PyType_GenericAlloc) returns a zeroed, GC-tracked
    // instance (an empty guard, see `GuardObject`) holding a reference to its type, or NULL with
    // an exception set.
    let o = unsafe {
        let alloc = crate::cpython::api::type_alloc(tp);
        Bound::from_owned_ptr_or_err(py, alloc(tp, 0))?
    };
    let obj = r.as_ptr();
    // SAFETY: only the lifetime changes (same type otherwise, same layout). `'py` bounds the
    // time the GIL token is known to be held; the extended `PyRef` is never used, only dropped
    // by `guard_dealloc`, which CPython runs attached to the interpreter, so it never outlives
    // what `'py` stands for at the one point it is touched.
    let r: PyRef<'static, T> =
        unsafe { std::mem::transmute::<PyRef<'py, T>, PyRef<'static, T>>(r) };
    let borrow = Box::into_raw(Box::new(r)).cast::<c_void>();
    // SAFETY: `o` is a new, live `GuardObject` nobody else has seen; plain field writes (no
    // Python call in between, so the collector cannot look at it half-written, and it would
    // see an empty guard if it did).
    unsafe {
        let g = o.as_ptr().cast::<GuardObject>();
        (*g).borrow = borrow;
        (*g).release = Some(release_ref::<T>);
        (*g).obj = obj;
        if let Some(w) = window {
            (*g).window_base = w.base;
            (*g).window_len = window_len;
            (*g).window_readonly = w.readonly;
            (*g).has_window = true;
        }
    }
    count_borrows(1);
    LIVE_GUARDS.fetch_add(1, Ordering::Relaxed);
    Ok(o)
}

/// `tp_dealloc`: ends the borrow (drops the `PyRef`), frees the object, drops the reference to
/// the (heap) type every instance holds.
///
/// # Safety
/// CPython's `tp_dealloc` contract: `o` is a guard whose reference count reached zero, attached
/// to the interpreter.
unsafe extern "C" fn guard_dealloc(o: *mut ffi::PyObject) {
    // SAFETY: caller contract; the fields are read and cleared before the memory is freed.
    unsafe {
        ffi::PyObject_GC_UnTrack(o.cast());
        let g = o.cast::<GuardObject>();
        let (borrow, release) = ((*g).borrow, (*g).release);
        (*g).borrow = ptr::null_mut();
        (*g).release = None;
        (*g).obj = ptr::null_mut();
        if let Some(release) = release
            && !borrow.is_null()
        {
            // A panic must not unwind into CPython: dropping a `PyRef` does not panic, and if it
            // did the borrow would be leaked (the object stays borrowed: safe).
            let _ = std::panic::catch_unwind(|| release(borrow));
            count_borrows(-1);
            LIVE_GUARDS.fetch_sub(1, Ordering::Relaxed);
        }
        let tp = ffi::Py_TYPE(o);
        match crate::cpython::api::type_free(tp) {
            Some(free) => free(o.cast()),
            None => ffi::PyObject_GC_Del(o.cast()),
        }
        ffi::Py_DECREF(tp.cast());
    }
}

/// `tp_traverse`: the (heap) type and the borrowed object, both strong references.
///
/// # Safety
/// CPython's `tp_traverse` contract.
unsafe extern "C" fn guard_traverse(
    o: *mut ffi::PyObject,
    visit: ffi::visitproc,
    arg: *mut c_void,
) -> c_int {
    // SAFETY: caller contract: `o` is a live guard; only pointers are read.
    unsafe {
        let r = visit(ffi::Py_TYPE(o).cast(), arg);
        if r != 0 {
            return r;
        }
        let obj = (*o.cast::<GuardObject>()).obj;
        if obj.is_null() { 0 } else { visit(obj, arg) }
    }
}

/// `bf_getbuffer`: a `PyBUF_SIMPLE` byte buffer over the window (`BufferError` without one, or
/// when a writable buffer is asked of read-only data). `view.obj` is the guard, so the borrow
/// lasts as long as the view.
///
/// # Safety
/// CPython's `bf_getbuffer` contract (GIL held, `o` a live guard).
unsafe extern "C" fn guard_getbuffer(
    o: *mut ffi::PyObject,
    view: *mut ffi::Py_buffer,
    flags: c_int,
) -> c_int {
    // SAFETY: caller contract; the window is memory the borrowed object owns, kept as it is by
    // the borrow, which lasts as long as `view.obj` (a new reference to the guard) does.
    // `PyBuffer_FillInfo` refuses a NULL view and writable requests of read-only data itself.
    unsafe {
        let g = o.cast::<GuardObject>();
        if !(*g).has_window {
            if !view.is_null() {
                (*view).obj = ptr::null_mut();
            }
            ffi::PyErr_SetString(
                ffi::PyExc_BufferError,
                c"this dlbind export borrow exposes no buffer".as_ptr(),
            );
            return -1;
        }
        ffi::PyBuffer_FillInfo(
            view,
            o,
            (*g).window_base as *mut c_void,
            (*g).window_len,
            c_int::from((*g).window_readonly),
            flags,
        )
    }
}

/// `bf_releasebuffer`: frees what a `Py_buffer` whose `obj` is a guard holds: nothing for the
/// guard's own buffers, the metadata block for a non-frozen object's buffer export
/// ([`crate::bridges::getbuffer`] makes the guard the `obj` of those).
///
/// # Safety
/// CPython's `bf_releasebuffer` contract: `view` was filled by `getbuffer` (its `internal`
/// block) or by `guard_getbuffer` (`internal` NULL), and is released once.
unsafe extern "C" fn guard_releasebuffer(_o: *mut ffi::PyObject, view: *mut ffi::Py_buffer) {
    // Freeing a Rust block does not panic; if it did, the block would be leaked, not unwound
    // into CPython.
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: caller contract.
        unsafe { crate::bridges::releasebuffer(view) }
    });
}
