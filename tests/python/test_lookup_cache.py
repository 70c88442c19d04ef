"""The importer's `__dlpack__` lookup cache, on producers whose `__dlpack__` is a descriptor that
makes a new object on every `__get__` (issue 41, part 4).

`from_dlpack(x)` remembers, per producer type, that `type(x)` has a `__dlpack__`
(runtime/src/import/producer_call.rs, on runtime/src/cpython/typecache.rs). A full-API build finds
the descriptor itself (`_PyType_Lookup`, which calls no `__get__`) and keeps a borrowed pointer to
it while the type's version tag holds. An abi3 build cannot read version tags: it caches immutable
types only, and its lookup is `getattr(type, "__dlpack__")`, which calls `__get__(None, type)`:
for a `classmethod` a new bound method each time, for a custom descriptor whatever it makes. The
cache kept a borrowed pointer to that object, which died when the first import let it go; the
second import then took a reference to freed memory and gave it back (a use after free, and a
second deallocation of the dead object when its memory had not been reused yet).

The producers here are Python classes made immutable by setting `Py_TPFLAGS_IMMUTABLETYPE`
(1 << 8) in their `tp_flags` with ctypes: there is no Python-level way, and PyO3's
`#[pyclass(immutable_type)]` needs the full API or abi3-py314 (the demo's wheel is abi3-py311).
numpy's, Cython's and tvm-ffi's types are immutable the same way.

How the bug shows: `test_fresh_descriptor_in_a_new_interpreter` crashes (SIGSEGV) on the old code
in every build of the abi3 wheel: the object the type lookup made there is large enough to be
`mmap`ed (the child runs with `MALLOC_MMAP_THRESHOLD_`), so its release unmaps it and the cached
pointer points at no memory at all. The in-process tests use ordinary objects (a classmethod's
bound method, a small callable); on the old code their use after free is silent or corrupts the
heap by chance, and `scripts/memcheck.sh --pytest tests/python/test_lookup_cache.py` (valgrind)
reports it every time (an abi3 wheel must be the one installed). Full-API builds pass either way:
the descriptor they cache lives in the type's dict.
"""

import os
import subprocess
import sys

import numpy as np
import pytest

import dlbind_demo as m

ABI3 = not dict((n, a) for n, a, _ in m._testing.shortcuts())["full_api"]

# `Py_TPFLAGS_IMMUTABLETYPE` (CPython 3.10+).
IMMUTABLETYPE = 1 << 8

# How many imports each scenario makes: every one after the first is a cache hit.
IMPORTS = 50


def make_immutable(cls):
    """Sets `Py_TPFLAGS_IMMUTABLETYPE` on the Python class `cls`; returns None, or why it cannot."""
    if sys.implementation.name != "cpython":
        return f"{sys.implementation.name}: tp_flags is a CPython struct field"
    try:
        import ctypes
    except ImportError as e:
        return f"no ctypes ({e}): nothing else can set Py_TPFLAGS_IMMUTABLETYPE on a Python class"
    word = ctypes.sizeof(ctypes.c_void_p)
    # PyTypeObject: PyObject_VAR_HEAD (3 words; 2 more under Py_TRACE_REFS, whose builds have
    # sys.getobjects), then 18 pointer-sized slots (tp_name ... tp_as_buffer), then tp_flags (an
    # unsigned long). The same on 3.11 to 3.14.
    offset = (21 + (2 if hasattr(sys, "getobjects") else 0)) * word
    flags = ctypes.c_ulong.from_address(id(cls) + offset)
    if flags.value != cls.__flags__:
        return (f"tp_flags is not at byte {offset} of the type object on this CPython "
                f"({flags.value:#x} there, __flags__ {cls.__flags__:#x})")
    flags.value |= IMMUTABLETYPE
    assert cls.__flags__ & IMMUTABLETYPE
    try:
        cls.probe_attribute = 1
    except TypeError:
        return None  # CPython now treats the class as immutable, as dlbind's cache does
    return "setting Py_TPFLAGS_IMMUTABLETYPE did not make the class immutable"


def producers():
    """Three fresh producer classes (a class object per call, so every test has its own cache
    entry): a classmethod `__dlpack__`; a descriptor that makes a new callable on every
    `__get__` and counts the ones made for the type itself (`obj is None`: the type lookup of an
    abi3 build); a descriptor whose type lookup makes a large object (a tuple of 16,384 items,
    128 KiB) and whose instance lookup makes the callable."""
    data = np.arange(6, dtype=np.float32)

    class ClassmethodProducer:
        @classmethod
        def __dlpack__(cls, **kwargs):
            return cls.data.__dlpack__(**kwargs)

    class Fresh:
        """`__get__` makes a new object every time."""

        def __init__(self, large=False):
            self.large = large
            self.type_gets = 0

        def __get__(self, obj, owner=None):
            if obj is None:
                self.type_gets += 1
                if self.large:
                    return (None,) * 16384
            return lambda **kwargs: owner.data.__dlpack__(**kwargs)

    class FreshProducer:
        __dlpack__ = Fresh()

    class LargeFreshProducer:
        __dlpack__ = Fresh(large=True)

    for cls in (ClassmethodProducer, FreshProducer, LargeFreshProducer):
        cls.data = data
    return ClassmethodProducer, FreshProducer, LargeFreshProducer


def import_many(cls, n=IMPORTS):
    """`n` imports of one instance of `cls`, each checked against the class's data."""
    x = cls()
    for _ in range(n):
        t = m.from_dlpack(x)
        assert np.array_equal(np.from_dlpack(t), cls.data)
        del t


def expected_type_gets(immutable, n=IMPORTS):
    """How often dlbind's own lookup asks the type for `__dlpack__` (`__get__(None, type)`) in
    `n` imports: never on the full API (`_PyType_Lookup` calls no `__get__`); on abi3 once for an
    immutable type (the cache answers the rest: the case the bug needs) and every time for
    another."""
    if not ABI3:
        return 0
    return 1 if immutable else n


def test_classmethod_dlpack_on_an_immutable_type():
    cm, _, _ = producers()
    why = make_immutable(cm)
    if why:
        pytest.skip(why)
    import_many(cm)
    # The cache entry outlives the imports; more imports after other work use it again.
    np.ones(1000).sum()
    import_many(cm, 5)


def test_fresh_descriptor_on_an_immutable_type_is_looked_up_once_under_abi3():
    _, fresh, _ = producers()
    why = make_immutable(fresh)
    if why:
        pytest.skip(why)
    import_many(fresh)
    descr = fresh.__dict__["__dlpack__"]
    assert descr.type_gets == expected_type_gets(immutable=True), (
        "the importer's lookup of an immutable type is cached on abi3 (and calls no __get__ on "
        "the full API); if that changed, this test no longer covers the cache")


def test_fresh_descriptor_on_a_mutable_type_is_looked_up_every_time():
    # The control: no cache entry for a type that can change (abi3), so nothing to go stale.
    _, fresh, _ = producers()
    import_many(fresh)
    assert fresh.__dict__["__dlpack__"].type_gets == expected_type_gets(immutable=False)


CHILD_ENV = {
    # glibc: allocations from 64 KiB are mmap'ed and unmapped when freed (a fixed threshold: no
    # dynamic raise after the first free), so the large object the type lookup made is unmapped
    # when the import lets it go, and a pointer kept to it faults on its next use.
    "MALLOC_MMAP_THRESHOLD_": "65536",
    # A crash prints where it happened.
    "PYTHONFAULTHANDLER": "1",
}


def test_fresh_descriptor_in_a_new_interpreter():
    # A new interpreter, so that a use after free crashes it and not this test process, and
    # malloc starts in a known state. All three producers, immutable, imported IMPORTS times each.
    env = dict(os.environ, **CHILD_ENV)
    r = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True,
                       timeout=120, cwd=os.path.dirname(os.path.abspath(__file__)))
    if r.returncode == 0 and r.stdout.startswith("SKIP "):
        pytest.skip(r.stdout[5:].strip())
    assert r.returncode == 0, (
        f"the child exited {r.returncode} (negative: killed by that signal; -11 is the use after "
        f"free of what the type lookup returned)\nstdout:\n{r.stdout}\nstderr:\n{r.stderr[-3000:]}")
    assert r.stdout.split()[-1] == "ok", r.stdout


def child():
    classes = producers()
    for cls in classes:
        why = make_immutable(cls)
        if why:
            print("SKIP", why)
            return
    for cls in classes:
        import_many(cls)
        # Import the others in between: the cache holds one type at a time, so each entry is
        # replaced (its type reference given back) and made again.
        for other in classes:
            import_many(other, 2)
        print(cls.__name__, "imported", IMPORTS + 2 * len(classes), "times", flush=True)
    large = classes[2].__dict__["__dlpack__"]
    print("type lookups of the large descriptor:", large.type_gets, flush=True)
    print("ok")


if __name__ == "__main__":
    child()
