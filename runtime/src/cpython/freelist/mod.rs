//! A per-type free list for `#[pyclass]` instances, installed in the type's `tp_alloc` /
//! `tp_free` slots: what CPython does for its own short-lived objects (floats, tuples, slices).
//!
//! `from_dlpack` returns a new object per call, and on this interpreter most of that call is the
//! object's allocation and release: `object.__new__` → `PyType_GenericAlloc` (pymalloc, zero
//! fill, GC link) and, on release, `PyObject_GC_Del` (GC unlink, pymalloc free). With
//! [`enable_freelist::<T>`] a released instance of exactly `T` keeps its memory in a small
//! bounded list and the next allocation of `T` takes it back: zero fill, header, GC tracking as
//! `PyType_GenericAlloc` does, minus the allocator round trip.
//!
//! PyO3 still destroys the objects (its `tp_dealloc` drops the Rust value, clears weak
//! references and untracks the object before calling `tp_free`), and still creates them when
//! asked (`Bound::new`, `#[new]`, methods returning `T`: all through `tp_alloc`). For a frozen
//! `T`, [`new_instance`] goes one step further and writes the value into the released memory
//! itself, once a probe of the first PyO3-made instance has shown that this gives the bytes PyO3
//! writes: only on the PyO3 release whose class layout the probe models, and only when the
//! instance has exactly that layout (`probe`, decision 0017); PyO3's constructor otherwise.
//! Python subclasses of `T` have their own `tp_alloc` / `tp_free` and never use the
//! list; objects from the list are GC-tracked like any other (PyO3's own `freelist` option
//! leaves them untracked and takes a mutex per call), except a derived import whose only Python
//! reference can close no cycle (`cpython::gc::referent_needs_tracking`: a view of a numpy
//! array), which is never linked into the collector. The list is only touched with the GIL
//! held (the CPython contract for both slots); on a free-threaded interpreter
//! [`enable_freelist`] installs nothing. At most [`MAX_TYPES`] types have a list; at most
//! `capacity` objects wait in each, so what is kept at interpreter exit is bounded
//! (`capacity × tp_basicsize` bytes a type). Memory checkers see a released object as still
//! allocated while it waits in the list, so a use after release of one of those is invisible
//! to them (valgrind's memcheck included): `DLBIND_FREELIST=0` in the environment turns the
//! lists off for such runs ([`freelists_allowed`]).
//!
//! The parts: `registry` (the lists, found by type), `slots` (the `tp_alloc` / `tp_free`
//! functions), `probe` (the layout check), `instance` (the direct construction) and `dealloc`
//! (the direct release, [`enable_direct_release`]); this file installs lists and answers
//! what they hold.

// An abi3 build installs no list (see `enable_freelist`): the slots' functions, and what
// installs them, go unused there.
#![cfg_attr(Py_LIMITED_API, allow(dead_code, unused_imports))]

mod dealloc;
mod instance;
mod probe;
mod registry;
mod slots;

use pyo3::PyClass;
use pyo3::ffi;
use pyo3::prelude::*;

use crate::error::DlpackError;
use crate::spec::errors::FailureKind;
use registry::{Direct, List, REGISTRY, free_item, list_of, new_reference_symbol};
use slots::{freelist_alloc, freelist_free};

pub use dealloc::{ReleasePython, Released, enable_direct_release};
pub(crate) use instance::pop_for_fill;
// `new_instance` is for dlbind's tests (the derive calls `new_instance_tracked`): unused in a
// build without `test-util`, where this module is private.
#[allow(unused_imports)]
pub use instance::{new_instance, new_instance_tracked};
#[cfg(feature = "test-util")]
#[doc(hidden)]
pub use probe::skew_probed_basicsize;

/// `Py_TPFLAGS_MANAGED_WEAKREF` (1 << 3, CPython 3.12+) and `Py_TPFLAGS_MANAGED_DICT` (1 << 4,
/// 3.11+): flags of types whose instances carry a pre-header besides the GC one (bit 3 is unused
/// before 3.12).
const MANAGED_PREHEADER: std::ffi::c_ulong = (1 << 3) | (1 << 4);

/// How many types may have a free list in one process.
pub const MAX_TYPES: usize = 8;
/// The largest `capacity` [`enable_freelist`] accepts.
pub const MAX_CAPACITY: usize = 1024;

/// Whether a reused instance is given its reference count by `_Py_NewReference` (the
/// `freelist_new_reference` shortcut) rather than `PyObject_Init`.
pub(crate) fn new_reference_exported() -> bool {
    new_reference_symbol().is_some()
}

/// The capacity of the free list [`add_from_dlpack`](crate::add_from_dlpack) gives a frozen type
/// that has none ([`enable_default_freelist`]).
pub(crate) const DEFAULT_CAPACITY: usize = 64;

/// The free list [`add_from_dlpack`](crate::add_from_dlpack) gives a frozen type (issue 33: a
/// user's type as the README writes it gets the demo's speed with no tuning call):
/// [`DEFAULT_CAPACITY`] instances, unless the type has a list already (an earlier
/// [`enable_freelist`] keeps its capacity). A default list takes a registry slot only while at
/// most half of the [`MAX_TYPES`] are in use, leaving the rest to explicit calls; a type the list
/// cannot take (a managed dict, another allocator) simply keeps PyO3's allocation.
pub(crate) fn enable_default_freelist<T: PyClass>(py: Python<'_>) {
    #[cfg(not(Py_LIMITED_API))]
    {
        let ty = T::type_object_raw(py);
        // SAFETY: GIL held (`py`); the registry is only read here.
        let (has, used) = unsafe { (list_of(ty).is_some(), (*REGISTRY.0.get()).len) };
        if has || used >= MAX_TYPES / 2 {
            return;
        }
    }
    let _ = enable_freelist::<T>(py, DEFAULT_CAPACITY);
}

/// Gives `T` a free list of at most `capacity` released instances (see the module docs).
/// Call it once at module initialisation, after the class is created; calling it again for the
/// same type changes the capacity. Errors (`SetupRefused`, a RuntimeError) when `T`'s type does not use the
/// default GC allocator (`PyType_GenericAlloc` / `PyObject_GC_Del`, which every PyO3 class
/// uses), has a variable size, or `MAX_TYPES` (8) types already have a list; `capacity` above
/// `MAX_CAPACITY` (1,024) is a ValueError (`BadArgumentValue`). On a free-threaded interpreter it does nothing, nor when
/// the environment has `DLBIND_FREELIST=0` (see `dlbind::tuning`'s environment switches).
pub fn enable_freelist<T: PyClass>(py: Python<'_>, capacity: usize) -> PyResult<()> {
    if capacity > MAX_CAPACITY {
        return Err(DlpackError::new(
            FailureKind::BadArgumentValue,
            format!("free list capacity {capacity} is above the maximum {MAX_CAPACITY}"),
        )
        .into());
    }
    if cfg!(Py_GIL_DISABLED) || !freelists_allowed() {
        return Ok(());
    }
    // An abi3 build cannot replace a type's slots (the limited API has no `tp_alloc` field to
    // write): no list, every instance allocated and freed by PyO3 (`stats::freelist_len` is
    // `None`).
    #[cfg(Py_LIMITED_API)]
    {
        let _ = py;
        Ok(())
    }
    #[cfg(not(Py_LIMITED_API))]
    install_freelist::<T>(py, capacity)
}

/// [`enable_freelist`]'s installation (full API).
#[cfg(not(Py_LIMITED_API))]
fn install_freelist<T: PyClass>(py: Python<'_>, capacity: usize) -> PyResult<()> {
    let ty = T::type_object_raw(py);
    // SAFETY: GIL held (`py`); `ty` is T's live, ready type object, whose slots we read and,
    // for a type that uses the default GC allocator, replace before any instance of it could be
    // freed through the new `tp_free` without having been allocated by a compatible `tp_alloc`
    // (both slot pairs allocate through pymalloc with a GC header, so an instance allocated
    // before installation is freed correctly by `freelist_free`).
    unsafe {
        if let Some(list) = list_of(ty) {
            list.capacity = capacity;
            while list.items.len() > capacity {
                if let Some(o) = list.items.pop() {
                    free_item(o);
                }
            }
            return Ok(());
        }
        let name = <T as PyClass>::NAME;
        let fail = |why: &str| {
            Err(DlpackError::new(
                FailureKind::SetupRefused,
                format!("cannot give {name} a free list: {why}"),
            )
            .into())
        };
        if ffi::PyType_IS_GC(ty) == 0
            || (*ty).tp_alloc.map(|f| f as usize)
                != Some(ffi::PyType_GenericAlloc as ffi::allocfunc as usize)
            || (*ty).tp_free.map(|f| f as usize)
                != Some(ffi::PyObject_GC_Del as ffi::freefunc as usize)
        {
            return fail("its type does not use the default GC allocator");
        }
        if (*ty).tp_itemsize != 0 {
            return fail("its type has variable-size instances");
        }
        // The list holds a reference to the type per item (a heap type's instances do).
        if ffi::PyType_HasFeature(ty, ffi::Py_TPFLAGS_HEAPTYPE) == 0 {
            return fail("its type is not a heap type");
        }
        // A managed dict or weak-reference list lives in a pre-header before the object, which
        // `PyType_GenericAlloc` prepares and this list does not: such types keep their slots.
        if ffi::PyType_GetFlags(ty) & MANAGED_PREHEADER != 0 {
            return fail("its instances have a managed dict or weak-reference list");
        }
        let basicsize = (*ty).tp_basicsize as usize;
        let r = &mut *REGISTRY.0.get();
        if r.len == MAX_TYPES {
            return fail("the maximum number of types with a free list is reached");
        }
        let direct = if (*ty).tp_dictoffset == 0 {
            Direct::Unknown
        } else {
            Direct::Refused
        };
        r.lists[r.len] = List {
            ty,
            basicsize,
            capacity,
            items: Vec::with_capacity(capacity),
            direct,
            pyo3_dealloc: None,
            new_reference: new_reference_symbol(),
        };
        r.len += 1;
        (*ty).tp_alloc = Some(freelist_alloc);
        (*ty).tp_free = Some(freelist_free);
    }
    Ok(())
}

/// Whether dlbind reuses released memory in this process: not when the environment has
/// `DLBIND_FREELIST=0`. Then [`enable_freelist`] installs no list and exports keep no spare
/// manager block (`export::spare_blocks_held` stays 0). A released object or block kept for
/// reuse is still allocated memory to a memory checker, so a use after release of one is
/// invisible to it: `scripts/memcheck.sh` runs its driver a second time with reuse off, where
/// every release is a real free.
pub fn freelists_allowed() -> bool {
    std::env::var_os("DLBIND_FREELIST").is_none_or(|v| v != "0")
}

/// How many released instances of `T` wait in its free list (`None`: `T` has none).
pub fn freelist_len<T: PyClass>(py: Python<'_>) -> Option<usize> {
    // SAFETY: GIL held (`py`); the reference ends before this returns.
    unsafe { list_of(T::type_object_raw(py)).map(|l| l.items.len()) }
}

/// Whether `new_instance` (the derived `into_instance`) builds `T` directly: its probe passed
/// (the PyO3 release whose layout dlbind models, and exactly that layout). Tests and
/// diagnostics.
pub fn builds_directly<T: PyClass>(py: Python<'_>) -> bool {
    // SAFETY: GIL held (`py`); the reference ends before this returns.
    unsafe { list_of(T::type_object_raw(py)).is_some_and(|l| matches!(l.direct, Direct::At(_))) }
}
