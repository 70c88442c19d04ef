"""`dlbind_demo.from_dlpack` / `Tensor.from_dlpack` as raw fastcall functions (issue 5).

The common call `from_dlpack(t)` of a `Tensor` skips argument parsing and builds a view of the
same storage directly (what `Tensor`'s own exchange table would give, without the managed-tensor
round trip). These tests pin its semantics: a new object sharing memory, layout and read-only
flag kept, the source kept alive, counted as an exchange-table import; the argument errors of
`from_dlpack(x, /, *, device=None, copy=None)`; and the legacy `__c_dlpack_exchange_api__` name.
Timings are not tested here (bench/bench_dlpack.py).
"""

import ctypes
import sys
import gc
import weakref

import numpy as np
import pytest

import dlpack_helpers as H
import dlbind_demo as m
from dlbind_demo import Tensor

FUNCS = [pytest.param(m.from_dlpack, id="module"), pytest.param(Tensor.from_dlpack, id="static")]

_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def layout(t):
    return (t.data_ptr, t.shape, t.strides, t.dtype, t.device, t.readonly)


@pytest.mark.parametrize("f", FUNCS)
@pytest.mark.parametrize("make", [
    lambda: Tensor.arange(12, dtype="float64"),
    lambda: Tensor.arange(12, dtype="int16").reversed(),
    lambda: Tensor.from_bytes(bytes(range(24)), (2, 3, 4), "uint8").transpose(),
    lambda: Tensor.from_bytes(bytes(range(24)), (2, 3, 4), "uint8").slice(2, 1, None, 2),
    lambda: Tensor.zeros((), dtype="float32"),
    lambda: Tensor.zeros((0, 3), dtype="bool"),
    lambda: Tensor.zeros((1, 1, 1, 1, 1, 1, 1, 2), dtype="complex64"),  # > inline dims
    lambda: Tensor.arange(5).set_readonly(),
], ids=["1d", "reversed", "transposed", "sliced", "0d", "empty", "8d", "readonly"])
def test_same_type_import_is_a_view(f, make):
    t = make()
    n, v = m._testing.exchange_imports(), m._testing.same_type_views()
    u = f(t)
    # What the type's own table gives, without calling it.
    assert (m._testing.exchange_imports(), m._testing.same_type_views()) == (n, v + 1)
    assert type(u) is Tensor and u is not t
    assert layout(u) == layout(t)
    assert u.tobytes() == t.tobytes()
    if t.readonly:
        # read-only propagates (numpy sees a read-only array through the versioned capsule)
        assert not np.from_dlpack(u).flags.writeable


def test_view_shares_memory_both_ways():
    t = Tensor.zeros((4,), dtype="float32")
    u = m.from_dlpack(t)
    np.from_dlpack(u)[2] = 7.5  # writes through the view
    assert np.from_dlpack(t)[2] == 7.5


@pytest.mark.parametrize("f", FUNCS)
def test_source_kept_alive(f):
    t = Tensor.arange(6, dtype="float32")
    expect = t.tobytes()
    r = weakref.ref(t)
    u = f(t)
    v = f(u)  # a view of a view keeps the storage alive too
    del t
    gc.collect()
    assert r() is not None, "the view must keep its source alive"
    del u
    gc.collect()
    assert r() is not None, "a view of a view must keep the storage's owner alive"
    assert v.tobytes() == expect
    assert np.from_dlpack(v).tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    del v
    gc.collect()
    assert r() is None, "the source must be released with its last view"


def test_no_managed_tensor_left_behind():
    gc.collect()
    before = m._testing.live_exports()
    for _ in range(100):
        m.from_dlpack(Tensor.arange(3))
    gc.collect()
    assert m._testing.live_exports() == before


@pytest.mark.parametrize("f", FUNCS)
def test_keywords_take_the_full_path(f):
    t = Tensor.arange(6, dtype="float32")
    c = f(t, copy=True)
    assert c.data_ptr != t.data_ptr and c.tobytes() == t.tobytes() and not c.readonly
    assert f(t, copy=False).data_ptr == t.data_ptr
    assert f(t, device="cpu").data_ptr == t.data_ptr
    assert f(t, device=(1, 0), copy=None).data_ptr == t.data_ptr
    assert f(t, **{"copy": None, "device": None}).data_ptr == t.data_ptr
    with pytest.raises(BufferError):
        f(t, device=(4, 0))  # kDLOpenCL: no copy to it, driver or not (CUDA: test_cuda.py)


@pytest.mark.parametrize("f", FUNCS)
def test_argument_errors(f):
    t = Tensor.arange(2)
    with pytest.raises(TypeError, match="missing required positional argument"):
        f()
    with pytest.raises(TypeError, match="takes 1 positional argument but 2 were given"):
        f(t, None)
    with pytest.raises(TypeError, match="positional-only"):
        f(x=t)
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        f(t, bogus=1)
    with pytest.raises(TypeError):
        f(t, copy="yes")
    with pytest.raises(ValueError):
        f(t, device="not-a-device")
    with pytest.raises(TypeError):
        f(t, device=1.5)
    with pytest.raises(AttributeError):
        f(object())


def test_other_producers_still_work():
    a = np.arange(12.0).reshape(3, 4).T
    v = m.from_dlpack(a)
    assert (v.shape, v.strides, v.dtype, v.data_ptr) == ((4, 3), (1, 4), "float64", a.ctypes.data)
    assert Tensor.from_dlpack(a).data_ptr == a.ctypes.data
    # a raw capsule
    t = Tensor.arange(3)
    assert m.from_dlpack(t.__dlpack__(max_version=(1, 3))).data_ptr == t.data_ptr


# --- the legacy attribute name ----------------------------------------------------------------

LEGACY_ATTRS = H.SPEC.exchange_legacy_attrs


def _legacy_class(value, name=None, **extra):
    ns = {name or LEGACY_ATTRS[0]: value,
          "__dlpack__": lambda self, **kw: (_ for _ in ()).throw(RuntimeError("the __dlpack__ path was taken")),
          "__dlpack_device__": lambda self: (1, 0)}
    ns.update(extra)
    return type("Legacy", (), ns)


def test_spec_lists_a_legacy_name():
    assert LEGACY_ATTRS, "spec/dlpack.yaml exchange_api.legacy_attributes is empty"


@pytest.mark.parametrize("name", LEGACY_ATTRS)
@pytest.mark.parametrize("kind", ["capsule", "int"])
def test_legacy_attribute_name_is_used(kind, name):
    cap = Tensor.__dlpack_c_exchange_api__
    value = cap if kind == "capsule" else _get_pointer(cap, b"dlpack_exchange_api")
    Legacy = _legacy_class(value, name)
    # The table's from_py_object refuses a foreign type: that error proves the table was used
    # (the class's own __dlpack__ would raise RuntimeError).
    with pytest.raises(TypeError, match="expected a 'Tensor' object"):
        m.from_dlpack(Legacy())


def test_standard_name_wins_and_unusable_standard_falls_back_to_legacy():
    cap = Tensor.__dlpack_c_exchange_api__
    # standard name holds something that is not an exchange table: the legacy one is used
    Both = _legacy_class(cap, __dlpack_c_exchange_api__=np.arange(2).__dlpack__())
    with pytest.raises(TypeError, match="expected a 'Tensor' object"):
        m.from_dlpack(Both())


def _assert_falls_back(attrs):
    """A numpy-backed producer whose class carries `attrs` imports through its `__dlpack__`:
    the same data, no exchange table used."""
    cls = type("Stray", (H.Forward,), attrs)
    n = m._testing.exchange_imports()
    assert m.from_dlpack(cls(np.arange(3.0))).shape == (3,), attrs
    assert m._testing.exchange_imports() == n, attrs


def test_unusable_legacy_value_falls_back_to_dunder():
    _assert_falls_back({name: "not a table" for name in LEGACY_ATTRS})


@pytest.mark.parametrize("name", LEGACY_ATTRS)
def test_stray_int_addresses_are_not_dereferenced(name):
    """A legacy `int` attribute is trusted only when it is one of dlbind's tables or lies in a
    loaded library's readable segment (see the next test): small numbers, heap addresses (a
    Python object's, a numpy buffer holding a copy of a real table) and huge values fall back
    to `__dlpack__` instead of crashing the process."""
    real = ctypes.string_at(_get_pointer(Tensor.__dlpack_c_exchange_api__, b"dlpack_exchange_api"), 56)
    heap_copy = np.frombuffer(real, dtype=np.uint8).copy()  # a valid-looking table on the heap
    keep = object()
    for value in (8, 4096, 1 << 40, 2**64 - 8, id(keep), heap_copy.ctypes.data):
        _assert_falls_back({name: value})
    del heap_copy


def _maps():
    """(start, end, perms, path) of this process's mappings (Linux)."""
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            a, b = (int(x, 16) for x in parts[0].split("-"))
            out.append((a, b, parts[1], parts[5] if len(parts) > 5 else ""))
    return out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/maps (Linux)")
@pytest.mark.parametrize("name", LEGACY_ATTRS)
def test_int_addresses_inside_libraries_that_are_not_tables_fall_back(name):
    """Addresses inside a loaded library that are not a usable table: its ELF header (readable,
    major version not ours: the garbage `prev_api` after it must not be followed) and, where the
    loader left one, a no-access gap between a library's segments (inside its address range, so
    `dladdr` would accept it). Both fall back to `__dlpack__`."""
    maps = _maps()
    so = m.__file__ if m.__file__.endswith(".so") else next(p for *_, p in maps if "dlbind_demo" in p)
    header = min(a for a, _, _, p in maps if p == so)
    addrs = [header, header + 64]
    gaps = [a for a, _, perm, p in maps if perm.startswith("---") and p.startswith("/")]
    addrs += gaps[:3]
    for value in addrs:
        _assert_falls_back({name: value})


@pytest.mark.parametrize("name", LEGACY_ATTRS)
def test_int_address_of_a_table_in_a_loaded_library_is_used(name):
    """The accepting side of the rule above for a foreign table: torch's table is a static in
    its extension library, so its address as an `int` is used (torch's own type check refuses
    the foreign object, proving its table was called)."""
    torch = pytest.importorskip("torch", reason="needs torch: the only foreign producer here with a static table")
    addr = _get_pointer(torch.Tensor.__dlpack_c_exchange_api__, b"dlpack_exchange_api")
    Legacy = _legacy_class(addr, name)
    with pytest.raises(Exception) as e:
        m.from_dlpack(Legacy())
    assert "the __dlpack__ path was taken" not in str(e.value), e.value


def test_derived_types_publish_only_the_standard_name():
    assert hasattr(Tensor, "__dlpack_c_exchange_api__")
    for name in LEGACY_ATTRS:
        assert not hasattr(Tensor, name)
