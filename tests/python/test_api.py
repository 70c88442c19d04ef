"""The demo module's documented surface (issue 3: `examples/tensor` API)."""
import inspect
from pathlib import Path

import numpy as np
import pytest

import dlpack_helpers as H
from conftest import tensor_from_np


def test_module_surface(m):
    for name in ("Tensor", "Growable", "from_dlpack", "_testing"):
        assert hasattr(m, name), f"dlbind_demo.{name} missing"
    # The diagnostics live in the `_testing` submodule, apart from the array API.
    for name in ("live_exports", "exchange_imports", "same_type_views", "set_same_type_views"):
        assert not hasattr(m, name), f"dlbind_demo.{name} is a diagnostic: dlbind_demo._testing.{name}"
        assert callable(getattr(m._testing, name)), name
    import importlib
    assert importlib.import_module("dlbind_demo._testing") is m._testing
    for name in ("__dlpack__", "__dlpack_device__", "from_dlpack", "zeros", "arange", "from_bytes",
                 "tobytes", "reversed", "transpose", "slice", "set_readonly"):
        assert hasattr(m.Tensor, name), f"Tensor.{name} missing"
    assert isinstance(m._testing.live_exports(), int)


def test_pyi_stub_shipped(m):
    """A .pyi stub is installed next to the module (or in the crate) and names the API."""
    here = Path(m.__file__).resolve().parent
    crate = H.ROOT / "examples" / "tensor"
    cands = [p for d in (here, here / "dlbind_demo", crate, crate / "python", crate / "python" / "dlbind_demo")
             if d.is_dir() for p in d.glob("*.pyi")]
    assert cands, f"no .pyi stub next to {m.__file__} or in {crate}"
    text = "\n".join(p.read_text() for p in cands)
    for word in ("class Tensor", "def from_dlpack", "_testing: ModuleType", "def __dlpack__", "max_version",
                 "def __dlpack_device__", "def zeros"):
        assert word in text, f"stub {cands} lacks {word!r}"
    # Every public module function is in the stub.
    funcs = [n for n in dir(m) if not n.startswith("_") and type(getattr(m, n)).__name__ == "builtin_function_or_method"]
    assert "from_dlpack" in funcs
    missing = [n for n in funcs if f"def {n}(" not in text]
    assert not missing, f"stub {cands} lacks {missing}"


def test_pyi_stub_protocol_matches_the_spec():
    """The demo's hand-written stub spells the protocol as the spec does: `__dlpack__`'s and
    `from_dlpack`'s keyword-only arguments (names, order, types, default None),
    `__dlpack_device__`'s return type and the exchange-table attribute. A spec change that the
    stub does not follow fails here."""
    import ast

    tree = ast.parse((H.ROOT / "examples" / "tensor" / "dlbind_demo.pyi").read_text())
    proto = H.SPEC.raw["protocol"]

    def kwonly(fn):
        assert all(isinstance(d, ast.Constant) and d.value is None for d in fn.args.kw_defaults), fn.name
        return [(a.arg, ast.unparse(a.annotation)) for a in fn.args.kwonlyargs]

    def spec_kwargs(key):
        return [(k["name"], k["py_type"]) for k in proto[key]["kwargs"]]

    tensor = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Tensor")
    members = {n.name: n for n in tensor.body if isinstance(n, ast.FunctionDef)}
    assert kwonly(members[proto["dlpack"]["name"]]) == spec_kwargs("dlpack")
    assert ast.unparse(members[proto["dlpack_device"]["name"]].returns) == proto["dlpack_device"]["returns"]
    module_fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == proto["from_dlpack"]["name"])
    for fn in (members[proto["from_dlpack"]["name"]], module_fn):
        assert kwonly(fn) == spec_kwargs("from_dlpack"), ast.unparse(fn.args)
    attrs = [n.target.id for n in tensor.body if isinstance(n, ast.AnnAssign)]
    assert H.SPEC.raw["exchange_api"]["attribute"]["value"] in attrs


def test_dlpack_device_is_cpu(Tensor):
    dev = Tensor.zeros((2,)).__dlpack_device__()
    assert tuple(dev) == (H.KDLCPU, 0)
    assert all(isinstance(x, int) for x in dev)  # IntEnum is fine (int subclass)


@pytest.mark.parametrize("dt", H.DTYPES, ids=str)
def test_zeros_every_dtype(Tensor, dt):
    shape = (3, 5)
    t = Tensor.zeros(shape, dt.name)
    assert t.dtype == dt.name
    assert tuple(t.shape) == shape
    assert t.ndim == 2
    assert tuple(t.device) == (H.KDLCPU, 0)
    assert t.readonly is False
    assert t.data_ptr % 64 == 0, f"data_ptr {t.data_ptr:#x} not 64-byte aligned"
    if not dt.subbyte:
        assert tuple(t.strides) == (5, 1)
        assert t.nbytes == 15 * dt.bits // 8
    else:
        # packed by default; padded (one element per byte) only with the flag
        info = H.inspect_capsule(t.__dlpack__(max_version=(1, 3)))
        padded = bool(info.flags & H.FLAG_SUBBYTE_PADDED)
        assert t.nbytes == dt.nbytes(15, padded)
    assert t.tobytes() == b"\0" * t.nbytes


def test_zeros_default_dtype_is_float32(Tensor):
    t = Tensor.zeros((4,))
    assert t.dtype == "float32" and tuple(t.shape) == (4,) and tuple(t.strides) == (1,)


def test_zeros_unknown_dtype_rejected(Tensor):
    with pytest.raises((TypeError, ValueError)):
        Tensor.zeros((2,), "float128_not_a_dtype")


def test_zeros_writable_through_numpy(Tensor):
    t = Tensor.zeros((4,), "int32")
    a = np.from_dlpack(t)  # numpy asks for a versioned capsule: no READ_ONLY flag => writeable
    assert a.flags.writeable
    a[2] = 7
    assert np.frombuffer(t.tobytes(), np.int32).tolist() == [0, 0, 7, 0]


@pytest.mark.parametrize("name", ["float32", "int64", "uint8", "float64"])
def test_arange(Tensor, name):
    t = Tensor.arange(10, name)
    assert t.dtype == name and tuple(t.shape) == (10,)
    np.testing.assert_array_equal(np.from_dlpack(t), np.arange(10).astype(name))


def test_from_bytes_tobytes_roundtrip(Tensor):
    a = np.arange(24, dtype=np.int16).reshape(2, 3, 4)
    t = Tensor.from_bytes(a.tobytes(), a.shape, "int16")
    assert tuple(t.shape) == (2, 3, 4) and tuple(t.strides) == (12, 4, 1)
    assert t.tobytes() == a.tobytes()
    assert t.readonly is False
    r = Tensor.from_bytes(a.tobytes(), a.shape, "int16", readonly=True)
    assert r.readonly is True and r.tobytes() == a.tobytes()


def test_from_bytes_wrong_size_rejected(Tensor):
    with pytest.raises((ValueError, TypeError, BufferError)):
        Tensor.from_bytes(b"\0" * 7, (2,), "float32")


def test_views_are_zero_copy(Tensor):
    t = Tensor.arange(12, "int32")
    r = t.reversed(0)
    assert tuple(r.strides) == (-1,)
    assert r.data_ptr == t.data_ptr + 11 * 4
    s = t.slice(0, 2, 11, 3)
    assert tuple(s.shape) == (3,) and tuple(s.strides) == (3,)
    assert s.data_ptr == t.data_ptr + 2 * 4
    np.testing.assert_array_equal(np.from_dlpack(s), np.arange(12)[2:11:3])
    m2 = tensor_from_np(np.arange(6, dtype=np.float64).reshape(2, 3))
    tt = m2.transpose()
    assert tuple(tt.shape) == (3, 2) and tuple(tt.strides) == (1, 3) and tt.data_ptr == m2.data_ptr
    ro = m2.set_readonly()
    ro = m2 if ro is None else ro
    assert ro.readonly is True and ro.data_ptr == m2.data_ptr


def test_tobytes_of_view_is_logical_order(Tensor):
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    t = tensor_from_np(a)
    assert t.reversed(1).tobytes() == a[:, ::-1].tobytes()
    assert t.transpose().tobytes() == a.T.tobytes()
    assert t.slice(1, 1, 4, 2).tobytes() == a[:, 1:4:2].tobytes()


def test_from_dlpack_signature(m):
    for f in (m.from_dlpack, m.Tensor.from_dlpack):
        try:
            sig = inspect.signature(f)
        except (TypeError, ValueError):
            pytest.skip("no text signature")
        params = list(sig.parameters.values())
        kinds = {p.name: p.kind for p in params}
        assert kinds.get("device") == inspect.Parameter.KEYWORD_ONLY
        assert kinds.get("copy") == inspect.Parameter.KEYWORD_ONLY
        assert params[0].kind == inspect.Parameter.POSITIONAL_ONLY


def test_dlpack_signature_keyword_only(Tensor):
    try:
        sig = inspect.signature(Tensor.__dlpack__)
    except (TypeError, ValueError):
        pytest.skip("no text signature")
    kw = [p for p in sig.parameters.values() if p.kind == inspect.Parameter.KEYWORD_ONLY]
    assert [p.name for p in kw] == [k["name"] for k in H.SPEC.raw["protocol"]["dlpack"]["kwargs"]]
    assert all(p.default is None for p in kw)


def test_protocol_methods_bind_to_the_class_on_first_use():
    """`__dlpack__` / `__dlpack_device__` start as class attributes bound to `object` (the class
    does not exist while PyO3 builds them); the first call rebinds both to the class, so that
    CPython's method-call fast path applies (`__objclass__` is the class). A wrong `self` is a
    TypeError before and after. Run in a fresh interpreter: the rebinding happens once."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        """
        import dlbind_demo as m
        T = m.Tensor

        def bound_to():
            return (T.__dict__["__dlpack__"].__objclass__, T.__dict__["__dlpack_device__"].__objclass__)

        def refuses_an_int(when):
            for meth in ("__dlpack__", "__dlpack_device__"):
                try:
                    getattr(T, meth)(42)
                except TypeError:
                    pass
                else:
                    raise AssertionError(meth + " accepted an int " + when)

        assert bound_to() == (object, object), bound_to()
        refuses_an_int("before binding")
        t = T.zeros((2, 3))
        assert t.__dlpack_device__() == (1, 0)
        assert bound_to() == (T, T), bound_to()
        refuses_an_int("after binding")
        cap = t.__dlpack__()
        assert type(cap).__name__ == "PyCapsule"
        g = m.Growable([1.0, 2.0])
        assert g.__dlpack_device__() == (1, 0)
        assert type(g).__dict__["__dlpack_device__"].__objclass__ is m.Growable
        print("ok")
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_dlpack_device_returns_plain_int_pairs(Tensor):
    for t in (Tensor.zeros((2,)), Tensor.arange(3)):
        dev = t.__dlpack_device__()
        assert type(dev) is tuple and dev == (H.KDLCPU, 0)
        assert all(type(x) is int for x in dev)


@pytest.mark.parametrize("dev", [(1, 0), (4, 0), (2, 3), (10, 1)])
def test_dlpack_device_of_every_id(m, dev):
    """`__dlpack_device__`'s fast path answers device 0 of each type from a per-process cache
    (the same tuple object every time) and everything else through the general path (a new
    tuple): both say the tensor's own device."""
    a = np.arange(3, dtype=np.float32)

    def make():
        cap = H.device_tagged_capsule(a, dev[0])
        H.dl_tensor_of(cap).device.device_id = dev[1]
        return cap

    t = m.from_dlpack(H.fresh_producer(make, dev=dev)) if dev != (1, 0) else m.from_dlpack(a)
    got = t.__dlpack_device__()
    assert type(got) is tuple and got == dev and all(type(x) is int for x in got)
    again = t.__dlpack_device__()
    assert again == dev
    if dev[1] == 0:
        assert again is got, "device 0 of a type is one cached tuple"
    else:
        assert again is not got, "other ids are built per call"
