//! The direct release: a `tp_dealloc` of dlbind's for frozen free-list types whose value can
//! give back its Python references itself ([`ReleasePython`]), replacing PyO3's for the
//! instances built in the probed layout, PyO3's own for every other.

use std::ffi::c_void;
use std::ptr;

use pyo3::PyClass;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::pyclass::boolean_struct::True;

use super::freelists_allowed;
#[cfg(not(Py_LIMITED_API))]
use super::registry::{Direct, list_of};
use crate::error::DlpackError;
use crate::spec::errors::FailureKind;

/// A frozen free-list type (see `enable_direct_release`) that can give back the Python
/// references its value holds, so that the rest of the value drops without any `Py<…>`.
///
/// PyO3's `tp_dealloc` runs a value's drop inside its trampoline (a thread-local count that
/// makes a dropped `Py<…>` decref at once instead of waiting in PyO3's reference pool, and a
/// panic guard); for a type whose value holds Python references only where it can release them
/// itself, `enable_direct_release` installs a `tp_dealloc` without that trampoline.
///
/// Only a frozen type can have a direct release (`enable_direct_release` requires it);
/// `#[derive(FromDLPack)]` implements this for a type whose fields are its roles.
pub trait ReleasePython: PyClass + Sync {
    /// Gives back (decrefs, with the GIL `py` proves) every Python reference the value holds,
    /// and says what is left to do ([`Released`]).
    fn release_python_refs(&mut self, py: Python<'_>) -> Released;
}

/// What [`ReleasePython::release_python_refs`] left of a value.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Released {
    /// Nothing was given back: the value is left to PyO3's own deallocation.
    No,
    /// The Python references were given back, and dropping the rest drops no `Py<…>` /
    /// `Bound<…>` (one it did drop would be decref'd at PyO3's next attach, not at once:
    /// delayed, never unsafe). The value is dropped next.
    Drop,
    /// The Python references were given back and the value owns nothing else (its drop would
    /// do nothing), so it is not dropped. Answering this for a value that still owns something
    /// leaks that, and nothing worse.
    Nothing,
}

impl Released {
    /// [`Released::Drop`] when `released`, else [`Released::No`].
    #[inline]
    pub fn drop_if(released: bool) -> Released {
        if released {
            Released::Drop
        } else {
            Released::No
        }
    }
}

/// Gives `T`'s instances a `tp_dealloc` of dlbind's that releases the value's Python
/// references through [`ReleasePython`], drops it and keeps the memory in `T`'s free list,
/// without PyO3's deallocation trampoline. Instances it cannot take that way (not built by
/// [`new_instance`](super::new_instance)'s direct path yet, or never because the layout probe
/// refused the type, a Python subclass, `release_python_refs` answering `No`) go to PyO3's
/// `tp_dealloc` as before. Call it after [`enable_freelist`](super::enable_freelist); it does
/// nothing where free lists are off (free-threaded interpreter, `DLBIND_FREELIST=0`), and is a
/// RuntimeError (`SetupRefused`) when `T` has no free list.
pub fn enable_direct_release<T: ReleasePython + PyClass<Frozen = True>>(
    py: Python<'_>,
) -> PyResult<()> {
    if cfg!(Py_GIL_DISABLED) || !freelists_allowed() {
        return Ok(());
    }
    // An abi3 build has no free lists (see `enable_freelist`) and cannot replace `tp_dealloc`.
    #[cfg(Py_LIMITED_API)]
    {
        let _ = (py, std::marker::PhantomData::<T>);
        Ok(())
    }
    #[cfg(not(Py_LIMITED_API))]
    install_direct_release::<T>(py)
}

/// [`enable_direct_release`]'s installation (full API).
#[cfg(not(Py_LIMITED_API))]
fn install_direct_release<T: ReleasePython + PyClass<Frozen = True>>(
    py: Python<'_>,
) -> PyResult<()> {
    let ty = T::type_object_raw(py);
    // SAFETY: GIL held (`py`); `ty` is T's live, ready type object; the registry reference
    // ends before anything else runs. The slot swap keeps PyO3's function for the fallback.
    unsafe {
        let Some(list) = list_of(ty) else {
            return Err(DlpackError::new(
                FailureKind::SetupRefused,
                format!(
                    "cannot give {} a direct release: it has no free list (enable_freelist first)",
                    <T as PyClass>::NAME
                ),
            )
            .into());
        };
        if list.pyo3_dealloc.is_none() {
            list.pyo3_dealloc = (*ty).tp_dealloc;
            (*ty).tp_dealloc = Some(direct_dealloc::<T>);
        }
    }
    Ok(())
}

#[cfg(not(Py_LIMITED_API))]
/// `tp_dealloc` installed by [`enable_direct_release`]: what PyO3's does (untrack, weak
/// references, drop the value, `tp_free`, the type's reference) in CPython's order, with the
/// value's Python references given back first by [`ReleasePython::release_python_refs`].
/// Only for an instance whose layout the probe verified ([`Direct::At`]); PyO3's otherwise.
unsafe extern "C" fn direct_dealloc<T: ReleasePython + PyClass<Frozen = True>>(
    obj: *mut ffi::PyObject,
) {
    // SAFETY: CPython calls `tp_dealloc` with the GIL held, on an instance of `T` (or of a
    // Python subclass) whose last reference went.
    unsafe {
        let py = Python::assume_attached();
        let ty = ffi::Py_TYPE(obj);
        // Exactly `T` with a probed layout: the value is at `off`. Only a raw pointer to the
        // list is kept (lists never move or go): Python code runs below, and may reach the
        // registry itself.
        let Some(list) = list_of(ty).map(ptr::from_mut) else {
            return pyo3_dealloc::<T>(py, obj);
        };
        let Direct::At(off) = (*list).direct else {
            return pyo3_dealloc::<T>(py, obj);
        };
        // Untracked before anything can run Python code (as every GC type's dealloc does).
        ffi::PyObject_GC_UnTrack(obj.cast::<c_void>());
        let value = &mut *obj.cast::<u8>().add(off).cast::<T>();
        let left = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            value.release_python_refs(py)
        })) {
            Ok(Released::No) => return pyo3_dealloc::<T>(py, obj),
            Ok(left) => left,
            Err(_) => {
                unraisable_panic::<T>(py, "release_python_refs");
                return pyo3_dealloc::<T>(py, obj);
            }
        };
        // Weak references before the value goes (CPython's order for its own types).
        let wlo = (*ty).tp_weaklistoffset;
        if wlo > 0
            && !(*obj
                .cast::<u8>()
                .add(wlo as usize)
                .cast::<*mut ffi::PyObject>())
            .is_null()
        {
            ffi::PyObject_ClearWeakRefs(obj);
        }
        if left == Released::Drop
            && std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ptr::drop_in_place(value)))
                .is_err()
        {
            unraisable_panic::<T>(py, "drop");
        }
        // Kept while the list has room (the registry is not borrowed anywhere now), with the
        // instance's reference to its (heap) type; given back with the memory otherwise.
        (*list).keep_or_free(obj);
    }
}

/// PyO3's own `tp_dealloc` of `T` on `obj` (what [`enable_direct_release`] replaced).
///
/// # Safety
/// As for `tp_dealloc`; `obj` is untouched but for GC untracking.
#[cfg(not(Py_LIMITED_API))]
#[cold]
#[inline(never)]
unsafe fn pyo3_dealloc<T: ReleasePython>(py: Python<'_>, obj: *mut ffi::PyObject) {
    // SAFETY: caller contract; the registry reference ends before the call.
    unsafe {
        let f = list_of(T::type_object_raw(py)).and_then(|l| l.pyo3_dealloc);
        match f {
            Some(f) => f(obj),
            // Unreachable: installed only together with the saved function.
            None => std::process::abort(),
        }
    }
}

/// Reports a panic in `T`'s `what` during deallocation (as PyO3 does: unraisable).
#[cold]
#[inline(never)]
fn unraisable_panic<T: PyClass>(py: Python<'_>, what: &str) {
    PyErr::from(DlpackError::new(
        FailureKind::InternalError,
        format!(
            "panic in {}'s {what} during deallocation",
            <T as PyClass>::NAME
        ),
    ))
    .write_unraisable(py, None);
}
