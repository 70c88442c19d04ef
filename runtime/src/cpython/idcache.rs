//! Caches of Python objects recognised by identity on the export path: the keyword-name tuple
//! of a call seen before (numpy's `from_dlpack` passes the same tuple on every call), the
//! `("max_version",)` tuple of the versioned call and the `max_version` value a caller's code
//! object passes on every call (each is a constant of the calling code).
//!
//! Precondition: an object remembered by address cannot be replaced by another at that address
//! while remembered. Held: each remembered object holds one strong reference, given back when
//! another takes its place; tuples of str / small ints cannot change. Checked at run time:
//! a tuple is remembered only after the general path parsed and accepted it. Fallback: any other
//! object goes through the general parser. A free-threaded build remembers no keyword tuple.

use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

use pyo3::ffi;

/// Whether `mv` is the `max_version` tuple [`versioned_max_version`] accepted last: one load
/// and one compare. That tuple is kept alive by a strong reference while it is remembered, so
/// its address is not another object's, and a tuple of ints cannot change.
#[inline]
pub(crate) fn seen_max_version(mv: *mut ffi::PyObject) -> bool {
    MAX_VERSION_SEEN.load(Ordering::Relaxed) == mv
}

/// The `max_version` tuple [`versioned_max_version`] accepted last (one strong reference), for
/// [`seen_max_version`]: each code object that calls `__dlpack__(max_version=(1, 0))` has its
/// own constant tuple, passed on every call. Only touched with the GIL held (dlbind modules
/// declare `gil_used = true`), so the relaxed loads and stores never interleave with another
/// thread's.
static MAX_VERSION_SEEN: AtomicPtr<ffi::PyObject> = AtomicPtr::new(std::ptr::null_mut());

/// Whether `mv`, a `max_version` value, asks for a versioned capsule and needs no further
/// checks: an exact tuple of two of CPython's cached small ints whose first (the major) is at
/// least 1 (only the major decides, `ExportRequest::wants_versioned`; `false` also before the
/// small ints were first used). Such a tuple is remembered for [`seen_max_version`] in place of
/// the one before. Anything else is for the general path, which parses and checks it.
///
/// # Safety
/// The GIL is held; `mv` is a live object.
#[inline]
pub(crate) unsafe fn versioned_max_version(mv: *mut ffi::PyObject) -> bool {
    // SAFETY: caller contract; the items are read after the exact type and size are checked.
    // The strong reference is taken before the pointer is published, and the old tuple is
    // unpublished before its reference is released (a tuple of small ints: its release runs no
    // Python code).
    unsafe {
        if ffi::Py_TYPE(mv) != &raw mut ffi::PyTuple_Type
            || super::api::tuple_size(mv) != 2
            || !super::ints::small_major_at_least_1(
                super::api::tuple_item(mv, 0),
                super::api::tuple_item(mv, 1),
            )
        {
            return false;
        }
        ffi::Py_INCREF(mv);
        let old = MAX_VERSION_SEEN.swap(mv, Ordering::Relaxed);
        if !old.is_null() {
            ffi::Py_DECREF(old);
        }
        true
    }
}

/// The keyword-name tuple `args::parse_fastcall_kwargs` resolved last (2 to 4 valid, distinct
/// names), kept alive by one strong reference so that its address cannot be reused by another
/// tuple while it is cached; and its slots: the name count in bits 0..3, then 2 bits per name.
/// Only touched with the GIL held (dlbind modules declare `gil_used = true`), so the relaxed
/// loads and stores never interleave with another thread's.
static KW_TUPLE: AtomicPtr<ffi::PyObject> = AtomicPtr::new(std::ptr::null_mut());
static KW_SLOTS: AtomicU32 = AtomicU32::new(0);

/// Makes `kwnames` (with `slots`) the cached tuple, releasing the previous one (nothing in a
/// free-threaded build, where the tuple and its slots could be read half-updated).
#[cold]
pub(crate) fn remember_kwnames(kwnames: *mut ffi::PyObject, slots: u32) {
    if cfg!(Py_GIL_DISABLED) {
        return;
    }
    // SAFETY: GIL held; `kwnames` is a live tuple (a new strong reference is taken before it is
    // published); the old tuple is unpublished before its reference is released, so whatever
    // its release runs (a str subclass's `__del__`) sees a consistent cache.
    unsafe {
        ffi::Py_INCREF(kwnames);
        let old = KW_TUPLE.swap(std::ptr::null_mut(), Ordering::Relaxed);
        KW_SLOTS.store(slots, Ordering::Relaxed);
        KW_TUPLE.store(kwnames, Ordering::Relaxed);
        if !old.is_null() {
            ffi::Py_DECREF(old);
        }
    }
}

/// The slots of `kwnames` when it is the keyword-name tuple remembered last.
#[inline]
pub(crate) fn cached_kwnames(kwnames: *mut ffi::PyObject) -> Option<u32> {
    (kwnames == KW_TUPLE.load(Ordering::Relaxed)).then(|| KW_SLOTS.load(Ordering::Relaxed))
}

/// The `("max_version",)` keyword tuple [`only_max_version`] accepted last (one strong
/// reference; none in a free-threaded build).
static MV_KWNAMES: AtomicPtr<ffi::PyObject> = AtomicPtr::new(std::ptr::null_mut());

/// Whether `kwnames` is `("max_version",)`: the tuple accepted last, by identity (one load, no
/// tuple read: in an abi3 build a tuple read is a function call), else its one item compared
/// with the interned name (`false` before the names were first built), and then remembered.
///
/// # Safety
/// The GIL is held; `kwnames` is a tuple of str.
#[inline]
pub(crate) unsafe fn only_max_version(kwnames: *mut ffi::PyObject) -> bool {
    // SAFETY: caller contract.
    kwnames == MV_KWNAMES.load(Ordering::Relaxed) || unsafe { only_max_version_slow(kwnames) }
}

/// Whether `kwnames` is the `("max_version",)` tuple [`only_max_version`] accepted last: the
/// identity check alone (one load), for a caller that must not spend more on other calls
/// (`__dlpack__`'s own vectorcall entry).
#[inline]
pub(crate) fn is_max_version_kwnames(kwnames: *mut ffi::PyObject) -> bool {
    !kwnames.is_null() && kwnames == MV_KWNAMES.load(Ordering::Relaxed)
}

/// [`only_max_version`] past the identity check.
///
/// # Safety
/// As for [`only_max_version`].
#[inline(never)]
unsafe fn only_max_version_slow(kwnames: *mut ffi::PyObject) -> bool {
    // SAFETY: caller contract; the item is read after the size is checked. The strong reference
    // is taken before the pointer is published, the old tuple's released after it is replaced
    // (a tuple of str: its release runs no Python code).
    unsafe {
        let ok = super::api::tuple_size(kwnames) == 1
            && super::api::tuple_item(kwnames, 0) == super::names::kw_max_version_ptr();
        if ok && cfg!(not(Py_GIL_DISABLED)) {
            ffi::Py_INCREF(kwnames);
            let old = MV_KWNAMES.swap(kwnames, Ordering::Relaxed);
            if !old.is_null() {
                ffi::Py_DECREF(old);
            }
        }
        ok
    }
}

/// Whether a call with the keyword tuple remembered last ([`cached_kwnames`], `slots`) asks for
/// exactly what `__dlpack__(max_version=mv)` alone asks for: every value `None` but
/// `max_version`, which [`seen_max_version`] or [`versioned_max_version`] accepts. numpy's
/// `from_dlpack` calls `x.__dlpack__(dl_device=None, copy=None, max_version=(1, n))` with the
/// same name tuple and the same `max_version` tuple every time; this decides that call with a
/// few compares instead of the general parser and plan (`None` is the parser's "not given" for
/// each of these keywords, `args::given`).
///
/// # Safety
/// The GIL is held; `args` holds the call's `len(kwnames)` keyword values (no positional ones),
/// `slots` is what [`cached_kwnames`] returned for its `kwnames`.
#[inline]
pub(crate) unsafe fn versioned_defaults(args: *const *mut ffi::PyObject, slots: u32) -> bool {
    // SAFETY: caller contract: `slots & 7` values follow.
    unsafe {
        let none = ffi::Py_None();
        let mut versioned = false;
        for i in 0..(slots & 7) as usize {
            let v = *args.add(i);
            if (slots >> (3 + 2 * i)) & 3 == crate::args::MAX_VERSION_SLOT {
                if !(seen_max_version(v) || versioned_max_version(v)) {
                    return false;
                }
                versioned = true;
            } else if v != none {
                return false;
            }
        }
        versioned
    }
}
