//! The registry of free lists: one [`List`] per type that has one, found by type with
//! [`list_of`], and the list's own operations (take a released instance out ready for reuse,
//! keep one, free one for good).

use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::ptr;

use pyo3::ffi;

use super::MAX_TYPES;

pub(super) struct List {
    pub(super) ty: *mut ffi::PyTypeObject,
    pub(super) basicsize: usize,
    pub(super) capacity: usize,
    /// Released instances. Each keeps its `ob_type` and a strong reference to it (the one the
    /// instance held; `freelist_free` takes a new one for the reference PyO3's `tp_dealloc`
    /// gives back after it), handed to the next instance made from that memory, so neither
    /// the release nor the reuse touches the type's count; an instance leaving the list for
    /// good gives it back.
    pub(super) items: Vec<*mut ffi::PyObject>,
    /// Where [`new_instance`](super::new_instance) may write the Rust value itself (see
    /// [`Direct`]).
    pub(super) direct: Direct,
    /// PyO3's `tp_dealloc` of the type, once
    /// [`enable_direct_release`](super::enable_direct_release) replaced it (what
    /// `direct_dealloc` falls back to).
    pub(super) pyo3_dealloc: Option<ffi::destructor>,
    /// The interpreter's `_Py_NewReference` (what `PyObject_Init` ends with), when it exports
    /// it: a reused instance already has its type and a reference to it (see [`List::items`]),
    /// so only its reference count (and a reference tracer, 3.13+) needs setting.
    pub(super) new_reference: Option<unsafe extern "C" fn(*mut ffi::PyObject)>,
}

/// Whether [`new_instance`](super::new_instance) may build an instance without PyO3's
/// initializer.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Direct {
    /// Not probed yet: the next `new_instance` goes through PyO3 and probes the result
    /// ([`probe_layout`](super::probe::probe_layout)).
    Unknown,
    /// PyO3 put the value at this byte offset, in the layout PyO3's audited release gives the
    /// type, and left every other byte after the object header zero: zero-filled memory with
    /// the value written there is the same object.
    At(usize),
    /// The probe found something else, the PyO3 compiled is not the audited release, or the
    /// type has an instance dict: always PyO3.
    Refused,
}

/// The lists of every type that has one, in installation order (index 0 is found first).
pub(super) struct Registry(pub(super) UnsafeCell<Lists>);

pub(super) struct Lists {
    pub(super) len: usize,
    pub(super) lists: [List; MAX_TYPES],
}

// SAFETY: every access happens with the GIL held (the `tp_alloc` / `tp_free` contract and
// `enable_freelist`'s `Python` token), which serialises them; free-threaded builds never
// install a list.
unsafe impl Sync for Registry {}

const UNUSED: List = List {
    ty: ptr::null_mut(),
    basicsize: 0,
    capacity: 0,
    items: Vec::new(),
    direct: Direct::Refused,
    pyo3_dealloc: None,
    new_reference: None,
};

pub(super) static REGISTRY: Registry = Registry(UnsafeCell::new(Lists {
    len: 0,
    lists: [UNUSED; MAX_TYPES],
}));

/// The list of `ty`, if it has one.
///
/// # Safety
/// GIL held, and no other reference into the registry is live.
#[inline]
pub(super) unsafe fn list_of(ty: *mut ffi::PyTypeObject) -> Option<&'static mut List> {
    // SAFETY: caller contract (GIL held: exclusive access).
    let r = unsafe { &mut *REGISTRY.0.get() };
    // The first list without the slice's bounds arithmetic (an unused entry's type is NULL,
    // never a live type): most processes have one type with a list.
    if ptr::eq(r.lists[0].ty, ty) {
        return Some(&mut r.lists[0]);
    }
    r.lists[..r.len].iter_mut().find(|l| ptr::eq(l.ty, ty))
}

impl List {
    /// A released instance of `self.ty` made ready as `PyType_GenericAlloc` makes a new one
    /// (header, one reference, GC-tracked), with the bytes after the header zero except
    /// `keep` (a range the caller writes at once); `None` when the list is empty.
    ///
    /// # Safety
    /// GIL held; `keep` lies in `[size_of::<PyObject>(), basicsize)` and the caller fills it
    /// before anything can look at the object.
    #[inline]
    pub(super) unsafe fn pop(
        &mut self,
        keep: std::ops::Range<usize>,
    ) -> Option<*mut ffi::PyObject> {
        // SAFETY: caller contract.
        let obj = unsafe { self.pop_untracked(keep) }?;
        // SAFETY: a live GC object, untracked.
        unsafe { ffi::PyObject_GC_Track(obj.cast::<c_void>()) };
        Some(obj)
    }

    /// [`List::pop`] without the GC tracking (the caller tracks the object once it is filled).
    ///
    /// # Safety
    /// As for [`List::pop`].
    #[inline]
    pub(super) unsafe fn pop_untracked(
        &mut self,
        keep: std::ops::Range<usize>,
    ) -> Option<*mut ffi::PyObject> {
        let obj = self.items.pop()?;
        // SAFETY: `obj` is `basicsize` bytes that `freelist_free` took from a released instance
        // of this type (allocated by `PyType_GenericAlloc` with a GC header, untracked since),
        // still with its `ob_type` and the list's reference to the type, which the new
        // instance takes over.
        unsafe {
            let base = obj.cast::<u8>();
            let head = std::mem::size_of::<ffi::PyObject>();
            zero(base, head..keep.start);
            zero(base, keep.end..self.basicsize);
            // A reference count of 1, as `PyObject_Init` ends (its type is set and held).
            match self.new_reference {
                Some(new_reference) => new_reference(obj),
                None => {
                    ffi::PyObject_Init(obj, self.ty);
                    ffi::Py_DECREF(self.ty.cast::<ffi::PyObject>());
                }
            }
        }
        Some(obj)
    }

    /// Keeps `o`, a released, untracked instance of this list's type, with its type reference
    /// (see [`List::items`]), while the list has room; otherwise [`free_item`].
    ///
    /// # Safety
    /// As for [`keep_or_free`].
    #[inline]
    pub(super) unsafe fn keep_or_free(&mut self, o: *mut ffi::PyObject) {
        if self.items.len() < self.capacity {
            self.items.push(o);
        } else {
            // SAFETY: caller contract.
            unsafe { free_item(o) };
        }
    }
}

/// Zeroes `base[range]`: word stores when the range is word-aligned (the usual case: a weak
/// reference slot or nothing, where a `memset` call would cost more than the stores).
///
/// # Safety
/// `base[range]` is writable and `base` is 8-byte aligned (pymalloc aligns to 16).
#[inline]
unsafe fn zero(base: *mut u8, range: std::ops::Range<usize>) {
    // SAFETY: caller contract.
    unsafe {
        if (range.start | range.end).is_multiple_of(8) {
            // Volatile word stores: LLVM turns a loop of plain ones into a `memset` call, which
            // costs more than the usual single word's store.
            let mut p = base.add(range.start).cast::<u64>();
            let end = base.add(range.end).cast::<u64>();
            while p < end {
                p.write_volatile(0);
                p = p.add(1);
            }
        } else {
            ptr::write_bytes(base.add(range.start), 0, range.end - range.start);
        }
    }
}

/// Keeps the released, untracked instance `o`, with the reference to its type it carries, in
/// its type's list while it has room; otherwise frees both ([`free_item`]).
///
/// # Safety
/// GIL held; `o`'s `tp_dealloc` has run and it is untracked; `o` holds a strong reference to
/// its type that passes to this call; `o` is not used after this.
#[inline]
pub(super) unsafe fn keep_or_free(o: *mut ffi::PyObject) {
    // SAFETY: caller contract.
    unsafe {
        match list_of(ffi::Py_TYPE(o)) {
            Some(list) => list.keep_or_free(o),
            None => free_item(o),
        }
    }
}

/// Frees a released instance's memory (`PyObject_GC_Del`) and the reference to its type it
/// carries: an item leaving the list for good.
///
/// # Safety
/// As for [`keep_or_free`].
#[inline]
pub(super) unsafe fn free_item(o: *mut ffi::PyObject) {
    // SAFETY: caller contract: the type outlives the memory freed first.
    unsafe {
        let ty = ffi::Py_TYPE(o);
        ffi::PyObject_GC_Del(o.cast::<c_void>());
        ffi::Py_DECREF(ty.cast::<ffi::PyObject>());
    }
}

/// The interpreter's `_Py_NewReference`, found by name in the loaded objects (exported by
/// CPython 3.11 to 3.14; a later version that drops it gets `PyObject_Init` instead).
pub(super) fn new_reference_symbol() -> Option<unsafe extern "C" fn(*mut ffi::PyObject)> {
    // SAFETY: CPython's `void _Py_NewReference(PyObject *)`.
    unsafe { crate::cpython::api::interpreter_symbol(&[c"_Py_NewReference"]) }
}
