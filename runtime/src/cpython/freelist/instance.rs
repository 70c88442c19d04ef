//! Building frozen instances without PyO3's initializer, once the probe has verified the layout
//! ([`new_instance`], [`pop_for_fill`]); PyO3's constructor otherwise.

use std::ffi::c_void;
use std::ptr;

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::pyclass::boolean_struct::True;
use pyo3::{PyClass, PyClassInitializer};

use super::probe::probe_layout;
use super::registry::{Direct, keep_or_free, list_of};

/// A new Python instance of `T` holding `value`: `Bound::new(py, value)`, made cheaper for a
/// frozen `T` with a free list ([`enable_freelist`](super::enable_freelist)).
///
/// The first instance is made by PyO3 and probed ([`probe_layout`]): built against the PyO3
/// release whose layout dlbind models, the value must sit exactly where that layout puts it,
/// the type's instance size and weak-reference offset must be that layout's, and every other
/// byte after the object header must be zero (PyO3 fills a frozen, `Send` class's bookkeeping
/// — borrow flag, thread checker, weak-reference slot — with zeros or nothing). When the probe
/// holds, later instances are a free-list (or `PyType_GenericAlloc`) object, zero-filled with
/// header and GC tracking as `PyType_GenericAlloc` makes them, with `value` written at that
/// offset: the bytes PyO3 would have written, without `object.__new__` and PyO3's initializer.
/// When it does not, or `T` has no free list, every instance is `Bound::new`.
#[inline]
#[allow(dead_code)] // the derive calls `new_instance_tracked`; tests call this
pub fn new_instance<T>(py: Python<'_>, value: T) -> PyResult<Bound<'_, T>>
where
    T: PyClass<Frozen = True> + Sync + Into<PyClassInitializer<T>>,
{
    new_instance_tracked(py, value, |_| true)
}

/// [`new_instance`], leaving an instance from the free list out of the garbage collector when
/// `track`, asked of the value once it is in place, says `false` (what `#[derive(FromDLPack)]`
/// answers for a value whose Python reference can close no cycle:
/// `FromDLPack::__dlbind_needs_tracking`), whether it came from the list or from
/// `PyType_GenericAlloc`. An instance made by PyO3 (the first, probed one; every one when the
/// probe refused) is tracked.
#[inline]
pub fn new_instance_tracked<T>(
    py: Python<'_>,
    value: T,
    track: impl FnOnce(&T) -> bool,
) -> PyResult<Bound<'_, T>>
where
    T: PyClass<Frozen = True> + Sync + Into<PyClassInitializer<T>>,
{
    // No free lists in an abi3 or free-threaded build: PyO3's constructor, with nothing
    // between (no registry lookup, and the value is not moved through one more call).
    if cfg!(any(Py_LIMITED_API, Py_GIL_DISABLED)) {
        let _ = track;
        return Bound::new(py, value);
    }
    let ty = T::type_object_raw(py);
    // SAFETY: GIL held (`py`); the registry reference is used only before any Python code runs
    // (`pop` and `PyType_GenericAlloc` run none) and not kept past the match arm.
    let list = unsafe { list_of(ty) };
    match list.as_ref().map(|l| l.direct) {
        Some(Direct::At(off)) => {
            // SAFETY: GIL held; `pop_untracked` (or `PyType_GenericAlloc`) returns a new
            // reference to an instance of exactly `ty` (header set; untracked, or tracked by
            // `PyType_GenericAlloc`) whose bytes after the header are zero except the value's
            // (`pop_untracked`) or all zero, or NULL with an exception set; a popped instance is
            // tracked once whole, unless `track` says its value can close no cycle;
            // the probe showed that PyO3's instance of `T` is this memory with the value at
            // `off` (aligned for `T`, inside `tp_basicsize`). Nothing runs between the
            // allocation and the write that could look at the object.
            unsafe {
                let keep = off..off + std::mem::size_of::<T>();
                let (obj, popped) = match list.and_then(|l| l.pop_untracked(keep)) {
                    Some(obj) => (obj, true),
                    None => (ffi::PyType_GenericAlloc(ty, 0), false),
                };
                if obj.is_null() {
                    return Err(PyErr::fetch(py));
                }
                let place = obj.cast::<u8>().add(off).cast::<T>();
                ptr::write(place, value);
                match (popped, track(&*place)) {
                    // A live GC object from the list, untracked, now whole.
                    (true, true) => ffi::PyObject_GC_Track(obj.cast::<c_void>()),
                    // `PyType_GenericAlloc` tracked it: the same answer either way.
                    (false, false) => ffi::PyObject_GC_UnTrack(obj.cast::<c_void>()),
                    _ => {}
                }
                Ok(Bound::from_owned_ptr(py, obj).cast_into_unchecked())
            }
        }
        Some(Direct::Unknown) => {
            let b = Bound::new(py, value)?;
            let probed = probe_layout(&b);
            // SAFETY: GIL held; `list` is not used again (the new reference replaces it), and
            // `Bound::new` (which runs `tp_alloc`, and so the registry) has returned.
            if let Some(l) = unsafe { list_of(ty) } {
                l.direct = probed;
            }
            Ok(b)
        }
        Some(Direct::Refused) | None => Bound::new(py, value),
    }
}

/// A released instance of `T` to fill in place, with its value's place: what the typed
/// `from_dlpack` writes a same-type view into (`FromDLPack::share_into`). `None` when `T` is
/// not built directly ([`new_instance`] has not probed it, or the probe refused) or its list
/// is empty.
///
/// The instance has its header and one reference and is untracked by the garbage collector, so
/// nothing looks at the value before it is written. [`Unfilled::filled`] hands it out (tracked);
/// dropping the [`Unfilled`] — the value not written, or a panic while writing it — gives it
/// back to the list.
///
/// # Safety
/// GIL held, until the `Unfilled` is filled or dropped.
#[inline]
pub(crate) unsafe fn pop_for_fill<'a, T: PyClass>(
    py: Python<'_>,
) -> Option<(Unfilled, &'a mut std::mem::MaybeUninit<T>)> {
    let ty = T::type_object_raw(py);
    // SAFETY: GIL held; the registry reference ends here. `Direct::At` is set only by a probe
    // of a PyO3-made instance of exactly `T` (`new_instance`, frozen types): the value lives
    // at `off`, and every other byte after the header is zero.
    unsafe {
        let list = list_of(ty)?;
        let Direct::At(off) = list.direct else {
            return None;
        };
        let obj = list.pop_untracked(off..off + std::mem::size_of::<T>())?;
        let slot = &mut *obj.cast::<u8>().add(off).cast::<std::mem::MaybeUninit<T>>();
        Some((Unfilled(obj), slot))
    }
}

/// An instance from [`pop_for_fill`] whose value is not written yet: given back to the list
/// when dropped (a guard, not `catch_unwind`: nothing on the way that does not panic).
pub(crate) struct Unfilled(*mut ffi::PyObject);

impl Unfilled {
    /// The instance, its value written, GC-tracked when `track` says so: a new reference.
    ///
    /// # Safety
    /// A whole, valid `T` has been written to the place [`pop_for_fill`] gave; `track` is
    /// `true` unless the value's `FromDLPack::__dlbind_needs_tracking` said otherwise.
    #[inline]
    pub(crate) unsafe fn filled(self, track: bool) -> *mut ffi::PyObject {
        let obj = self.0;
        std::mem::forget(self);
        if track {
            // SAFETY: a live GC object, untracked, now whole (caller).
            unsafe { ffi::PyObject_GC_Track(obj.cast::<c_void>()) };
        }
        obj
    }
}

impl Drop for Unfilled {
    fn drop(&mut self) {
        // SAFETY: popped and not filled (`filled` forgets the guard); GIL held (`pop_for_fill`).
        unsafe { give_back_unfilled(self.0) }
    }
}

/// Returns an instance [`pop_for_fill`] popped and did not fill: its type reference goes,
/// its memory back to the list.
///
/// # Safety
/// GIL held; `obj` came from `pop_untracked` and was not filled or shared.
#[cold]
unsafe fn give_back_unfilled(obj: *mut ffi::PyObject) {
    // SAFETY: caller contract; `obj` carries the type reference it had in the list.
    unsafe { keep_or_free(obj) }
}
