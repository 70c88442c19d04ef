//! Caches keyed by a type object and its method-cache version tag: what a lookup on the type
//! found (the exchange table, the `__dlpack__` descriptor), answered again without the lookup
//! while the tag is unchanged.
//!
//! Precondition: a valid tag ([`version_tag`]) is unique for the type's current MRO dicts:
//! CPython resets it when the type or a base changes and never hands one out twice. Checked at
//! run time: an entry counts only when its type and tag equal the object's type and its current
//! nonzero tag. Fallback: no tag (a type CPython gave none) means no entry, and the caller looks
//! the attribute up every time.
//!
//! An abi3 build cannot read tags (not in the limited API). It keeps entries for immutable types
//! only (`Py_TPFLAGS_IMMUTABLETYPE`: static types such as numpy's, Cython's or tvm-ffi's, whose
//! attributes cannot be set or deleted), holding a strong reference to each cached type so that
//! its address cannot be another type's while the entry lives; a Python class is looked up every
//! time.
//!
//! What a value may be: plain data, or a pointer to something the type itself keeps alive while
//! the entry counts. On the full API an object the MRO lookup (`_PyType_Lookup`) returned is such
//! a thing: it is the value of an entry of a dict on the type's MRO, and no such dict changes
//! without the type's tag changing. Under abi3 nothing the lookup returned is: the lookup is
//! `getattr(type, name)` (`api::type_lookup`), which calls a descriptor's `__get__(None, type)`,
//! and that may make a new object (a `classmethod` makes a bound method), freed when the caller
//! gives its reference back. An abi3 value is what the caller derived from it (the exchange
//! table's address, which lives for the process) or only that it was found; an entry holds no
//! reference to its value, only to its type (issue 41: a `__dlpack__` descriptor kept there was
//! used after free).
//!
//! With a GIL, one process-wide array the GIL serialises (a thread-local one cost a
//! `__tls_get_addr` call per use). A free-threaded build keeps no entries at all: its callers
//! look up every time (dlbind refuses to run such an interpreter with the GIL off, see
//! `interp::require_gil`, but the build must stay sound either way).

use pyo3::ffi;

#[cfg(not(Py_GIL_DISABLED))]
use super::api::version_tag;

/// `N` entries of `(type address, tag, value)`, a type's slot chosen by its address (type
/// objects are at least 64 bytes apart), so a few alternating types keep a hit each. A value
/// holds no reference (see the module's note on what it may be).
pub(crate) struct TypeCache<V: Copy, const N: usize> {
    #[cfg(not(Py_GIL_DISABLED))]
    slots: std::cell::UnsafeCell<[(usize, u32, V); N]>,
    #[cfg(Py_GIL_DISABLED)]
    _value: std::marker::PhantomData<V>,
}

// SAFETY: the entries are read and written only through `get` / `set`, whose callers hold the
// GIL, which on an interpreter with a GIL serialises every access; a free-threaded build keeps
// no entries.
unsafe impl<V: Copy, const N: usize> Sync for TypeCache<V, N> {}

impl<V: Copy, const N: usize> TypeCache<V, N> {
    /// An empty cache (`N` a power of two); `empty` fills the unused entries.
    pub(crate) const fn new(empty: V) -> Self {
        assert!(N.is_power_of_two());
        #[cfg(not(Py_GIL_DISABLED))]
        {
            TypeCache {
                slots: std::cell::UnsafeCell::new([(0, 0, empty); N]),
            }
        }
        #[cfg(Py_GIL_DISABLED)]
        {
            let _ = empty;
            TypeCache {
                _value: std::marker::PhantomData,
            }
        }
    }

    /// The key an entry for `tp` is stored under: its version tag (full API), or 1 for an
    /// immutable type (abi3); 0: no entry.
    ///
    /// # Safety
    /// The GIL is held; `tp` is a live type object.
    #[cfg(not(Py_GIL_DISABLED))]
    #[inline]
    unsafe fn tag(tp: *mut ffi::PyTypeObject) -> u32 {
        // SAFETY: caller contract.
        unsafe {
            #[cfg(not(Py_LIMITED_API))]
            {
                version_tag(tp)
            }
            #[cfg(Py_LIMITED_API)]
            {
                let _ = version_tag;
                u32::from(ffi::PyType_GetFlags(tp) & ffi::Py_TPFLAGS_IMMUTABLETYPE != 0)
            }
        }
    }

    #[cfg(not(Py_GIL_DISABLED))]
    #[inline]
    fn slot(tp: *mut ffi::PyTypeObject) -> usize {
        ((tp as usize) >> 6) & (N - 1)
    }

    /// The value stored for `tp` under its current tag, if any.
    ///
    /// # Safety
    /// The GIL is held; `tp` is a live type object.
    #[inline]
    pub(crate) unsafe fn get(&self, tp: *mut ffi::PyTypeObject) -> Option<V> {
        #[cfg(not(Py_GIL_DISABLED))]
        // SAFETY: caller contract (GIL held: no other access runs).
        unsafe {
            let tag = Self::tag(tp);
            if tag == 0 {
                return None;
            }
            let (t, ctag, v) = (*self.slots.get())[Self::slot(tp)];
            (t == tp as usize && ctag == tag).then_some(v)
        }
        #[cfg(Py_GIL_DISABLED)]
        {
            let _ = tp;
            None
        }
    }

    /// Stores `v` for `tp` under its current tag (nothing when it has none). Call it after the
    /// lookup whose answer `v` is: the lookup may have given the type its tag.
    ///
    /// # Safety
    /// The GIL is held; `tp` is a live type object.
    #[inline]
    pub(crate) unsafe fn set(&self, tp: *mut ffi::PyTypeObject, v: V) {
        #[cfg(not(Py_GIL_DISABLED))]
        // SAFETY: caller contract (GIL held: no other access runs). An abi3 entry holds a strong
        // reference to its type, taken before it is stored; the one it replaces is given back
        // after (a type's release may run Python code, which then sees a consistent cache).
        unsafe {
            let tag = Self::tag(tp);
            if tag == 0 {
                return;
            }
            let slot = &mut (*self.slots.get())[Self::slot(tp)];
            #[cfg(Py_LIMITED_API)]
            {
                if slot.0 == tp as usize && slot.1 == tag {
                    slot.2 = v;
                    return;
                }
                ffi::Py_INCREF(tp.cast());
            }
            let old = std::mem::replace(slot, (tp as usize, tag, v));
            #[cfg(Py_LIMITED_API)]
            if old.0 != 0 {
                ffi::Py_DECREF(old.0 as *mut ffi::PyObject);
            }
            #[cfg(not(Py_LIMITED_API))]
            let _ = old;
        }
        #[cfg(Py_GIL_DISABLED)]
        let _ = (tp, v);
    }
}

/// Whether this build keys caches by version tag: the full API with a GIL (an abi3 build caches
/// immutable types only).
pub(crate) const ACTIVE: bool = cfg!(all(not(Py_LIMITED_API), not(Py_GIL_DISABLED)));
