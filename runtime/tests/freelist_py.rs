//! `dlbind::cpython::freelist`: per-type free lists in `tp_alloc` / `tp_free` and the probe-verified
//! direct construction of frozen instances (`new_instance`), on classes defined here.

mod common;

use dlbind::cpython::freelist::{
    MAX_CAPACITY, ReleasePython, Released, builds_directly, enable_direct_release, enable_freelist,
    freelist_len, new_instance, new_instance_tracked, skew_probed_basicsize,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A frozen class with a weak-reference slot and a Python object inside (like the demo's views).
#[pyclass(frozen, weakref)]
struct Frozen {
    data: Vec<u64>,
    tag: u32,
    /// Held for its reference count (released exactly when the instance is).
    #[allow(dead_code)]
    owner: Option<Py<PyAny>>,
}

/// A frozen class for the capacity test (its own list, so test order does not matter).
#[pyclass(frozen)]
struct Small {
    tag: u32,
}

/// A frozen class with an instance dict: the direct path must refuse it.
#[pyclass(frozen, dict)]
struct WithDict {
    v: u64,
}

/// A frozen class Python code may subclass; subclass instances never enter the list.
#[pyclass(frozen, subclass)]
struct Base {
    v: u64,
}

#[pymethods]
impl Base {
    #[new]
    fn new(v: u64) -> Self {
        Base { v }
    }
}

trait RefCnt {
    fn refcnt(&self) -> isize;
}

impl<T> RefCnt for Bound<'_, T> {
    fn refcnt(&self) -> isize {
        // SAFETY: reading the reference count of a live object with the GIL held.
        unsafe { pyo3::ffi::Py_REFCNT(self.as_ptr()) }
    }
}

fn gc_tracked(py: Python<'_>, obj: &Bound<'_, PyAny>) -> bool {
    py.import("gc")
        .unwrap()
        .call_method1("is_tracked", (obj,))
        .unwrap()
        .extract()
        .unwrap()
}

#[test]
fn frozen_instances_are_reused_built_directly_and_stay_correct() {
    let _g = common::serial();
    Python::attach(|py| {
        enable_freelist::<Frozen>(py, 4).unwrap();
        assert_eq!(freelist_len::<Frozen>(py), Some(0));
        assert!(
            !builds_directly::<Frozen>(py),
            "not probed before the first instance"
        );

        let owner = py.eval(c"object()", None, None).unwrap();
        let base_rc = owner.refcnt();
        let make = |i: u32| {
            new_instance(
                py,
                Frozen {
                    data: vec![u64::from(i); 3],
                    tag: i,
                    owner: Some(owner.clone().unbind()),
                },
            )
            .unwrap()
        };

        // The first instance is PyO3's and is probed; the type qualifies.
        let first = make(0);
        assert!(
            builds_directly::<Frozen>(py),
            "a frozen, dict-less class passes the probe"
        );
        let six: Vec<_> = (1..7).map(make).collect();
        assert_eq!(owner.refcnt(), base_rc + 7);
        for b in std::iter::once(&first).chain(&six) {
            assert!(gc_tracked(py, b.as_any()), "instances are GC-tracked");
        }
        let addrs: Vec<usize> = six.iter().map(|b| b.as_ptr() as usize).collect();
        drop(six);
        assert_eq!(
            owner.refcnt(),
            base_rc + 1,
            "released instances dropped their value at once"
        );
        assert_eq!(
            freelist_len::<Frozen>(py),
            Some(4),
            "the list keeps at most its capacity"
        );

        // Reused memory, fresh contents, tracked again.
        let again = make(42);
        assert_eq!(freelist_len::<Frozen>(py), Some(3));
        assert!(
            addrs.contains(&(again.as_ptr() as usize)),
            "the object came from the list"
        );
        let v = again.get();
        assert_eq!((v.tag, v.data.as_slice()), (42, &[42u64, 42, 42][..]));
        assert!(gc_tracked(py, again.as_any()));
        assert_eq!(again.refcnt(), 1);

        // Weak references: cleared on release, never carried over to the next occupant.
        let weakref = py.import("weakref").unwrap();
        let r = weakref.call_method1("ref", (&again,)).unwrap();
        assert!(r.call0().unwrap().is(&again));
        let addr = again.as_ptr() as usize;
        drop(again);
        assert!(
            r.call0().unwrap().is_none(),
            "the weak reference died with the instance"
        );
        let next = make(7);
        assert_eq!(next.as_ptr() as usize, addr, "LIFO: the same memory again");
        assert!(
            r.call0().unwrap().is_none(),
            "the old weak reference does not see the new occupant"
        );
        let r2 = weakref.call_method1("ref", (&next,)).unwrap();
        assert!(r2.call0().unwrap().is(&next));

        // PyO3's own constructor takes from the list too (it calls `tp_alloc`).
        let before = freelist_len::<Frozen>(py).unwrap();
        let via_pyo3 = Bound::new(
            py,
            Frozen {
                data: vec![9],
                tag: 9,
                owner: None,
            },
        )
        .unwrap();
        assert_eq!(freelist_len::<Frozen>(py), Some(before - 1));
        assert_eq!(via_pyo3.get().tag, 9);
        assert!(gc_tracked(py, via_pyo3.as_any()));

        // Left out of the collector when the caller says its value can close no cycle (a
        // view of a non-GC object); tracked as ever otherwise, and when PyO3 allocates.
        let before = freelist_len::<Frozen>(py).unwrap();
        assert!(before > 0);
        let make_tracked = |tag: u32, track: bool| {
            new_instance_tracked(
                py,
                Frozen {
                    data: vec![u64::from(tag)],
                    tag,
                    owner: None,
                },
                move |_| track,
            )
            .unwrap()
        };
        let untracked = make_tracked(5, false);
        assert_eq!(
            freelist_len::<Frozen>(py),
            Some(before - 1),
            "from the list"
        );
        assert!(
            !gc_tracked(py, untracked.as_any()),
            "track = false: untracked"
        );
        assert_eq!(untracked.get().tag, 5);
        let addr = untracked.as_ptr() as usize;
        drop(untracked);
        assert_eq!(
            freelist_len::<Frozen>(py),
            Some(before),
            "released into the list"
        );
        let tracked = make_tracked(6, true);
        assert_eq!(tracked.as_ptr() as usize, addr, "the same memory again");
        assert!(gc_tracked(py, tracked.as_any()), "track = true: tracked");
        drop(tracked);

        drop((first, next, via_pyo3));
        assert_eq!(owner.refcnt(), base_rc);
    });
}

#[test]
fn capacity_is_bounded_and_can_change() {
    let _g = common::serial();
    Python::attach(|py| {
        let err = enable_freelist::<Small>(py, MAX_CAPACITY + 1).unwrap_err();
        assert!(err.is_instance_of::<PyValueError>(py), "{err}");
        enable_freelist::<Small>(py, 8).unwrap();
        let many: Vec<_> = (0..8)
            .map(|i| new_instance(py, Small { tag: i }).unwrap())
            .collect();
        drop(many);
        assert_eq!(freelist_len::<Small>(py), Some(8));
        // Shrinking frees the surplus at once.
        enable_freelist::<Small>(py, 2).unwrap();
        assert_eq!(freelist_len::<Small>(py), Some(2));
        enable_freelist::<Small>(py, 0).unwrap();
        assert_eq!(freelist_len::<Small>(py), Some(0));
        let one = new_instance(py, Small { tag: 1 }).unwrap();
        assert_eq!(one.get().tag, 1);
        drop(one);
        assert_eq!(
            freelist_len::<Small>(py),
            Some(0),
            "capacity 0 keeps nothing"
        );
        enable_freelist::<Small>(py, 4).unwrap();
    });
}

#[test]
fn classes_with_an_instance_dict_are_built_by_pyo3() {
    let _g = common::serial();
    Python::attach(|py| {
        assert_eq!(freelist_len::<WithDict>(py), None);
        enable_freelist::<WithDict>(py, 4).unwrap();
        for i in 0..3 {
            let b = new_instance(py, WithDict { v: i }).unwrap();
            assert!(!builds_directly::<WithDict>(py), "a dict slot is refused");
            assert_eq!(b.get().v, i);
            b.setattr("extra", i).unwrap();
            let d = b.getattr("__dict__").unwrap();
            assert_eq!(
                d.cast::<PyDict>().unwrap().len(),
                1,
                "a fresh dict for every instance"
            );
        }
    });
}

#[test]
fn python_subclasses_never_use_the_list() {
    let _g = common::serial();
    Python::attach(|py| {
        enable_freelist::<Base>(py, 4).unwrap();
        let base = py.get_type::<Base>();
        let g = PyDict::new(py);
        g.set_item("Base", &base).unwrap();
        py.run(c"class Sub(Base):\n    pass\n", Some(&g), None)
            .unwrap();
        let sub = g.get_item("Sub").unwrap().unwrap();
        for v in 0..6u64 {
            let s = sub.call1((v,)).unwrap();
            assert_eq!(s.cast::<Base>().unwrap().get().v, v);
            drop(s);
            assert_eq!(
                freelist_len::<Base>(py),
                Some(0),
                "a subclass instance is freed, not kept"
            );
        }
        let b = base.call1((5u64,)).unwrap();
        drop(b);
        assert_eq!(
            freelist_len::<Base>(py),
            Some(1),
            "an exact instance is kept"
        );
        let s = sub.call1((6u64,)).unwrap();
        assert_eq!(
            freelist_len::<Base>(py),
            Some(1),
            "a subclass instance does not take it"
        );
        assert_eq!(s.cast::<Base>().unwrap().get().v, 6);
    });
}

/// A class with PyO3's own free list: its `tp_alloc` / `tp_free` are not the default ones.
#[pyclass(frozen, freelist = 4)]
struct PyO3FreeList {
    #[allow(dead_code)]
    v: u64,
}

#[test]
fn types_with_their_own_allocator_are_refused() {
    let _g = common::serial();
    Python::attach(|py| {
        let err = enable_freelist::<PyO3FreeList>(py, 4).unwrap_err();
        assert!(
            err.is_instance_of::<pyo3::exceptions::PyRuntimeError>(py),
            "{err}"
        );
        assert!(err.to_string().contains("default GC allocator"), "{err}");
        assert_eq!(freelist_len::<PyO3FreeList>(py), None);
        // Its instances still work as PyO3 made them.
        let b = new_instance(py, PyO3FreeList { v: 3 }).unwrap();
        assert!(!builds_directly::<PyO3FreeList>(py));
        drop(b);
    });
}

/// Counts its drops.
struct DropCount;

static DROPS: AtomicUsize = AtomicUsize::new(0);

impl Drop for DropCount {
    fn drop(&mut self) {
        DROPS.fetch_add(1, Ordering::SeqCst);
    }
}

/// What `release_python_refs` does: 0 gives the owner back (the rest is dropped), 1 refuses,
/// 2 panics, 3 gives the owner back and answers `Nothing` (the drop counter is not dropped).
#[pyclass(frozen, weakref)]
struct Releasing {
    mode: u8,
    owner: std::sync::Mutex<Option<Py<PyAny>>>,
    _count: DropCount,
}

impl ReleasePython for Releasing {
    fn release_python_refs(&mut self, py: Python<'_>) -> Released {
        match self.mode {
            0 | 3 => {
                if let Some(o) = self.owner.get_mut().unwrap().take() {
                    drop(o.into_bound(py));
                }
                if self.mode == 0 {
                    Released::Drop
                } else {
                    Released::Nothing
                }
            }
            1 => Released::No,
            _ => panic!("release refused by panicking"),
        }
    }
}

#[test]
fn direct_release_drops_once_gives_owners_back_and_falls_back_to_pyo3() {
    let _g = common::serial();
    Python::attach(|py| {
        // Without a free list it is refused.
        let e = enable_direct_release::<Releasing>(py).unwrap_err();
        assert!(e.to_string().contains("no free list"), "{e}");
        enable_freelist::<Releasing>(py, 8).unwrap();
        enable_direct_release::<Releasing>(py).unwrap();
        enable_direct_release::<Releasing>(py).unwrap(); // twice: no change

        let owner = py.eval(c"object()", None, None).unwrap();
        let base = owner.refcnt();
        let weakref = py.import("weakref").unwrap();
        let hook_calls = py
            .eval(c"__import__('types').SimpleNamespace(n=0)", None, None)
            .unwrap();
        let sys = py.import("sys").unwrap();
        let old_hook = sys.getattr("unraisablehook").unwrap();
        let locals = PyDict::new(py);
        locals.set_item("calls", &hook_calls).unwrap();
        let hook = py
            .eval(
                c"lambda u: setattr(calls, 'n', calls.n + 1)",
                Some(&locals),
                None,
            )
            .unwrap();
        sys.setattr("unraisablehook", &hook).unwrap();

        let make = |mode: u8| {
            new_instance(
                py,
                Releasing {
                    mode,
                    owner: std::sync::Mutex::new(Some(owner.clone().unbind())),
                    _count: DropCount,
                },
            )
            .unwrap()
        };
        // The first instance is PyO3's (the probe); later ones are direct.
        drop(make(0));
        assert!(builds_directly::<Releasing>(py));
        for round in 0..3 {
            for mode in [0u8, 1, 2, 3] {
                let d0 = DROPS.load(Ordering::SeqCst);
                let o = make(mode);
                assert_eq!(owner.refcnt(), base + 1);
                let w = weakref.call_method1("ref", (&o,)).unwrap();
                let listed = freelist_len::<Releasing>(py).unwrap();
                drop(o);
                assert_eq!(
                    owner.refcnt(),
                    base,
                    "mode {mode}, round {round}: owner not given back at once"
                );
                // `Nothing`: not dropped (the counter field is forgotten with the value).
                let dropped = if mode == 3 { 0 } else { 1 };
                assert_eq!(
                    DROPS.load(Ordering::SeqCst),
                    d0 + dropped,
                    "mode {mode}: dropped once"
                );
                assert!(
                    w.call0().unwrap().is_none(),
                    "mode {mode}: weak reference outlived the object"
                );
                assert_eq!(freelist_len::<Releasing>(py).unwrap(), (listed + 1).min(8));
            }
        }
        // Each panic was reported as unraisable (and the value still dropped, by PyO3).
        let n: usize = hook_calls.getattr("n").unwrap().extract().unwrap();
        sys.setattr("unraisablehook", old_hook).unwrap();
        assert_eq!(n, 3, "one unraisable report per panicking release");
    });
}

/// Frozen classes of each layout the probe models: without a weak-reference slot, and with one
/// after a value smaller than the slot's alignment (padding between the two).
#[pyclass(frozen)]
struct Plain {
    v: u64,
}

#[pyclass(frozen, weakref)]
struct Narrow {
    tag: u8,
}

#[test]
fn the_direct_path_is_taken_on_this_pyo3() {
    let _g = common::serial();
    Python::attach(|py| {
        enable_freelist::<Plain>(py, 4).unwrap();
        let first = new_instance(py, Plain { v: 1 }).unwrap();
        // Only on the PyO3 release the probe models (the build script's `AUDITED_PYO3`). After a
        // PyO3 update this fails until the new release's class layout is read and the build
        // script names it (docs/decisions/0017-pyo3-object-layout.md).
        assert!(
            builds_directly::<Plain>(py),
            "the audited PyO3 is compiled and a frozen class without a weak-reference slot has its layout"
        );
        let second = new_instance(py, Plain { v: 2 }).unwrap();
        assert_eq!((first.get().v, second.get().v), (1, 2));
        drop((first, second));
        assert_eq!(freelist_len::<Plain>(py), Some(2));

        enable_freelist::<Narrow>(py, 4).unwrap();
        let n = new_instance(py, Narrow { tag: 7 }).unwrap();
        assert!(
            builds_directly::<Narrow>(py),
            "a weak-reference slot after a one-byte value: the model's offsets"
        );
        let m = new_instance(py, Narrow { tag: 8 }).unwrap();
        assert_eq!((n.get().tag, m.get().tag), (7, 8));
        let weakref = py.import("weakref").unwrap();
        let r = weakref.call_method1("ref", (&m,)).unwrap();
        drop(m);
        assert!(r.call0().unwrap().is_none());
        drop(n);
    });
}

/// Counts the drops of `Skewed` values.
struct SkewedDrop;

static SKEWED_DROPS: AtomicUsize = AtomicUsize::new(0);

impl Drop for SkewedDrop {
    fn drop(&mut self) {
        SKEWED_DROPS.fetch_add(1, Ordering::SeqCst);
    }
}

/// A frozen class with a direct release, probed while the probe sees another instance size.
#[pyclass(frozen, weakref)]
struct Skewed {
    tag: u32,
    owner: std::sync::Mutex<Option<Py<PyAny>>>,
    _count: SkewedDrop,
}

impl ReleasePython for Skewed {
    fn release_python_refs(&mut self, py: Python<'_>) -> Released {
        if let Some(o) = self.owner.get_mut().unwrap().take() {
            drop(o.into_bound(py));
        }
        Released::Drop
    }
}

/// Puts the probe's view of `tp_basicsize` back when dropped (a failing assertion included).
struct Unskew;

impl Drop for Unskew {
    fn drop(&mut self) {
        skew_probed_basicsize(0);
    }
}

#[test]
fn a_layout_the_probe_does_not_model_is_built_and_released_by_pyo3() {
    let _g = common::serial();
    Python::attach(|py| {
        enable_freelist::<Skewed>(py, 4).unwrap();
        enable_direct_release::<Skewed>(py).unwrap();
        let ty = py.get_type::<Skewed>();
        let type_rc = ty.refcnt();
        let owner = py.eval(c"object()", None, None).unwrap();
        let owner_rc = owner.refcnt();
        let drops = SKEWED_DROPS.load(Ordering::SeqCst);
        let make = |tag: u32| {
            new_instance(
                py,
                Skewed {
                    tag,
                    owner: std::sync::Mutex::new(Some(owner.clone().unbind())),
                    _count: SkewedDrop,
                },
            )
            .unwrap()
        };

        // A PyO3 whose class object is 8 bytes larger than the model's: refused at the probe.
        let unskew = Unskew;
        skew_probed_basicsize(8);
        let first = make(0);
        drop(unskew);
        assert!(
            !builds_directly::<Skewed>(py),
            "another instance size: PyO3's constructor"
        );
        assert_eq!(first.get().tag, 0);

        // Every later instance is PyO3's (through the list's `tp_alloc`), released by PyO3's
        // `tp_dealloc` (the direct release falls back), its memory kept by the list.
        let six: Vec<_> = (1..7).map(make).collect();
        assert!(!builds_directly::<Skewed>(py), "refused for good");
        for (i, b) in (1..).zip(&six) {
            assert_eq!(b.get().tag, i);
            assert!(gc_tracked(py, b.as_any()));
            assert_eq!(b.refcnt(), 1);
        }
        assert_eq!(owner.refcnt(), owner_rc + 7);
        let addrs: Vec<usize> = six.iter().map(|b| b.as_ptr() as usize).collect();
        let weakref = py.import("weakref").unwrap();
        let r = weakref.call_method1("ref", (&six[0],)).unwrap();
        drop(six);
        assert!(r.call0().unwrap().is_none(), "the weak reference died");
        assert_eq!(owner.refcnt(), owner_rc + 1, "owners given back at once");
        assert_eq!(
            SKEWED_DROPS.load(Ordering::SeqCst),
            drops + 6,
            "each value dropped once"
        );
        assert_eq!(
            freelist_len::<Skewed>(py),
            Some(4),
            "the list kept its capacity"
        );
        assert_eq!(
            ty.refcnt(),
            type_rc + 1 + 4,
            "the type's count: the live instance's and the list's items'"
        );

        // PyO3 takes its memory from the list, and fills it whole.
        let again = make(42);
        assert_eq!(freelist_len::<Skewed>(py), Some(3));
        assert!(addrs.contains(&(again.as_ptr() as usize)));
        assert_eq!(again.get().tag, 42);
        assert!(gc_tracked(py, again.as_any()));
        assert!(!builds_directly::<Skewed>(py));

        drop((first, again));
        assert_eq!(owner.refcnt(), owner_rc);
        assert_eq!(SKEWED_DROPS.load(Ordering::SeqCst), drops + 8);
        assert_eq!(freelist_len::<Skewed>(py), Some(4));
        assert_eq!(ty.refcnt(), type_rc + 4, "nothing leaked a type reference");
    });
}
