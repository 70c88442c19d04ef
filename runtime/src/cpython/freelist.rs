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
//! writes. Python subclasses of `T` have their own `tp_alloc` / `tp_free` and never use the
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

// An abi3 build installs no list (see `enable_freelist`): the slots' functions go unused there.
#![cfg_attr(Py_LIMITED_API, allow(dead_code))]

use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::ptr;

use crate::error::DlpackError;
use crate::spec::errors::FailureKind;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::pyclass::boolean_struct::True;
use pyo3::{PyClass, PyClassInitializer};

/// `Py_TPFLAGS_MANAGED_WEAKREF` (1 << 3, CPython 3.12+) and `Py_TPFLAGS_MANAGED_DICT` (1 << 4,
/// 3.11+): flags of types whose instances carry a pre-header besides the GC one (bit 3 is unused
/// before 3.12).
const MANAGED_PREHEADER: std::ffi::c_ulong = (1 << 3) | (1 << 4);

/// How many types may have a free list in one process.
pub const MAX_TYPES: usize = 8;
/// The largest `capacity` [`enable_freelist`] accepts.
pub const MAX_CAPACITY: usize = 1024;

struct List {
    ty: *mut ffi::PyTypeObject,
    basicsize: usize,
    capacity: usize,
    /// Released instances. Each keeps its `ob_type` and a strong reference to it (the one the
    /// instance held; `freelist_free` takes a new one for the reference PyO3's `tp_dealloc`
    /// gives back after it), handed to the next instance made from that memory, so neither
    /// the release nor the reuse touches the type's count; an instance leaving the list for
    /// good gives it back.
    items: Vec<*mut ffi::PyObject>,
    /// Where [`new_instance`] may write the Rust value itself (see [`Direct`]).
    direct: Direct,
    /// PyO3's `tp_dealloc` of the type, once [`enable_direct_release`] replaced it (what
    /// [`direct_dealloc`] falls back to).
    pyo3_dealloc: Option<ffi::destructor>,
    /// The interpreter's `_Py_NewReference` (what `PyObject_Init` ends with), when it exports
    /// it: a reused instance already has its type and a reference to it (see [`List::items`]),
    /// so only its reference count (and a reference tracer, 3.13+) needs setting.
    new_reference: Option<unsafe extern "C" fn(*mut ffi::PyObject)>,
}

/// Whether [`new_instance`] may build an instance without PyO3's initializer.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Direct {
    /// Not probed yet: the next [`new_instance`] goes through PyO3 and probes the result.
    Unknown,
    /// PyO3 put the value at this byte offset and left every other byte after the object
    /// header zero: zero-filled memory with the value written there is the same object.
    At(usize),
    /// The probe found something else (or the type has an instance dict): always PyO3.
    Refused,
}

/// The lists of every type that has one, in installation order (index 0 is found first).
struct Registry(UnsafeCell<Lists>);

struct Lists {
    len: usize,
    lists: [List; MAX_TYPES],
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

static REGISTRY: Registry = Registry(UnsafeCell::new(Lists {
    len: 0,
    lists: [UNUSED; MAX_TYPES],
}));

/// The list of `ty`, if it has one.
///
/// # Safety
/// GIL held, and no other reference into the registry is live.
#[inline(always)]
unsafe fn list_of(ty: *mut ffi::PyTypeObject) -> Option<&'static mut List> {
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
    #[inline(always)]
    unsafe fn pop(&mut self, keep: std::ops::Range<usize>) -> Option<*mut ffi::PyObject> {
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
    #[inline(always)]
    unsafe fn pop_untracked(&mut self, keep: std::ops::Range<usize>) -> Option<*mut ffi::PyObject> {
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
#[inline(always)]
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
    #[inline(always)]
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

/// Zeroes `base[range]`: word stores when the range is word-aligned (the usual case: a weak
/// reference slot or nothing, where a `memset` call would cost more than the stores).
///
/// # Safety
/// `base[range]` is writable and `base` is 8-byte aligned (pymalloc aligns to 16).
#[inline(always)]
unsafe fn zero(base: *mut u8, range: std::ops::Range<usize>) {
    // SAFETY: caller contract.
    unsafe {
        if (range.start | range.end).is_multiple_of(8) {
            // Volatile word stores: LLVM turns a loop of plain ones into a `memset` call, a
            // dozen instructions for the usual single word.
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

/// `tp_alloc` of a type with a free list: a released instance of exactly that type when one
/// waits, prepared as `PyType_GenericAlloc` prepares a new one; otherwise `PyType_GenericAlloc`.
unsafe extern "C" fn freelist_alloc(
    subtype: *mut ffi::PyTypeObject,
    nitems: ffi::Py_ssize_t,
) -> *mut ffi::PyObject {
    // SAFETY: CPython calls `tp_alloc` with the GIL held and a live type; `pop` zero-fills the
    // whole body (an empty `keep` range right after the header).
    unsafe {
        if nitems == 0
            && let Some(list) = list_of(subtype)
        {
            let head = std::mem::size_of::<ffi::PyObject>();
            if let Some(obj) = list.pop(head..head) {
                return obj;
            }
        }
        ffi::PyType_GenericAlloc(subtype, nitems)
    }
}

/// `tp_free` of a type with a free list: keeps the memory of a released instance of exactly
/// that type while the list has room; otherwise `PyObject_GC_Del`.
unsafe extern "C" fn freelist_free(obj: *mut c_void) {
    if obj.is_null() {
        return;
    }
    // SAFETY: CPython / PyO3 call `tp_free` with the GIL held on an object whose `tp_dealloc`
    // has run (its contents are dropped; it is no longer used by anyone).
    unsafe {
        let o = obj.cast::<ffi::PyObject>();
        // `tp_dealloc` untracks before freeing; an object freed without that is untracked here
        // so the list never holds a tracked object.
        if ffi::PyObject_GC_IsTracked(o) != 0 {
            ffi::PyObject_GC_UnTrack(obj);
        }
        // The memory handed on carries a reference to the type of its own: the caller's
        // `tp_dealloc` gives back the instance's once this returns, as CPython's heap types do.
        ffi::Py_INCREF(ffi::Py_TYPE(o).cast::<ffi::PyObject>());
        keep_or_free(o);
    }
}

/// Keeps the released, untracked instance `o`, with the reference to its type it carries, in
/// its type's list while it has room; otherwise frees both ([`free_item`]).
///
/// # Safety
/// GIL held; `o`'s `tp_dealloc` has run and it is untracked; `o` holds a strong reference to
/// its type that passes to this call; `o` is not used after this.
#[inline(always)]
unsafe fn keep_or_free(o: *mut ffi::PyObject) {
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
#[inline(always)]
unsafe fn free_item(o: *mut ffi::PyObject) {
    // SAFETY: caller contract: the type outlives the memory freed first.
    unsafe {
        let ty = ffi::Py_TYPE(o);
        ffi::PyObject_GC_Del(o.cast::<c_void>());
        ffi::Py_DECREF(ty.cast::<ffi::PyObject>());
    }
}

impl List {
    /// Keeps `o`, a released, untracked instance of this list's type, with its type reference
    /// (see [`List::items`]), while the list has room; otherwise [`free_item`].
    ///
    /// # Safety
    /// As for [`keep_or_free`].
    #[inline(always)]
    unsafe fn keep_or_free(&mut self, o: *mut ffi::PyObject) {
        if self.items.len() < self.capacity {
            self.items.push(o);
        } else {
            // SAFETY: caller contract.
            unsafe { free_item(o) };
        }
    }
}

/// The interpreter's `_Py_NewReference`, found by name in the loaded objects (exported by
/// CPython 3.11 to 3.14; a later version that drops it gets `PyObject_Init` instead).
fn new_reference_symbol() -> Option<unsafe extern "C" fn(*mut ffi::PyObject)> {
    // SAFETY: CPython's `void _Py_NewReference(PyObject *)`.
    unsafe { super::api::interpreter_symbol(&[c"_Py_NewReference"]) }
}

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
/// [`new_instance`]'s direct path yet, a Python subclass, `release_python_refs` answering
/// `false`) go to PyO3's `tp_dealloc` as before. Call it after [`enable_freelist`]; it does
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

/// A new Python instance of `T` holding `value`: `Bound::new(py, value)`, made cheaper for a
/// frozen `T` with a free list ([`enable_freelist`]).
///
/// The first instance is made by PyO3 and probed: the offset of the value in the object and
/// every other byte after the object header, which must be zero (PyO3 fills a frozen, `Send`
/// class's bookkeeping — borrow flag, thread checker, weak-reference slot — with zeros or
/// nothing). When the probe holds, later instances are a free-list (or `PyType_GenericAlloc`)
/// object, zero-filled with header and GC tracking as `PyType_GenericAlloc` makes them, with
/// `value` written at that offset: the bytes PyO3 would have written, without `object.__new__`
/// and PyO3's initializer. When it does not, or `T` has no free list, every instance is
/// `Bound::new`.
#[inline(always)]
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
/// `PyType_GenericAlloc`. An instance made by PyO3 (the first, probed one) is tracked.
#[inline(always)]
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

/// What [`new_instance`] may do for `T`, read off `b`, an instance PyO3 just made.
fn probe_layout<T: PyClass<Frozen = True> + Sync>(b: &Bound<'_, T>) -> Direct {
    let obj = b.as_ptr().cast::<u8>().cast_const();
    let val = std::ptr::from_ref::<T>(b.get()).cast::<u8>();
    // SAFETY: reading the type's basic size and exact type of a live object.
    let (basicsize, exact) = unsafe {
        let ty = ffi::Py_TYPE(b.as_ptr());
        (
            crate::cpython::api::type_basicsize(b.py(), ty).unwrap_or(0),
            ptr::eq(ty, T::type_object_raw(b.py())),
        )
    };
    let head = std::mem::size_of::<ffi::PyObject>();
    let size = std::mem::size_of::<T>();
    let Some(off) = (val as usize).checked_sub(obj as usize) else {
        return Direct::Refused;
    };
    if !exact
        || off < head
        || off + size > basicsize
        || off % std::mem::align_of::<T>() != 0
        || std::mem::align_of::<T>() > 16
    {
        return Direct::Refused;
    }
    // SAFETY: `[head, basicsize)` lies inside the live object; bytes outside the value are
    // PyO3's bookkeeping (initialised), read as plain bytes.
    let zero_elsewhere = (head..basicsize)
        .filter(|i| !(off..off + size).contains(i))
        .all(|i| unsafe { *obj.add(i) } == 0);
    if zero_elsewhere {
        Direct::At(off)
    } else {
        Direct::Refused
    }
}

/// Whether `new_instance` (the derived `into_instance`) builds `T` directly (its probe passed).
/// Tests and diagnostics.
pub fn builds_directly<T: PyClass>(py: Python<'_>) -> bool {
    // SAFETY: GIL held (`py`); the reference ends before this returns.
    unsafe { list_of(T::type_object_raw(py)).is_some_and(|l| matches!(l.direct, Direct::At(_))) }
}
