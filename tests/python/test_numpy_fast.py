"""dlbind's numpy fast path: `from_dlpack(a)` of an exact `numpy.ndarray` reads numpy's array
header instead of calling `a.__dlpack__` (runtime/src/bridges/numpy_header.rs).

The contract: the result is exactly what the capsule path gives (same pointer, shape, element
strides, dtype, read-only flag, the array kept alive), and everything numpy's `__dlpack__`
should judge still goes through `__dlpack__` (same exception as before). Each test checks
`numpy_fast_imports()` to know which path ran, so a test cannot pass on the wrong path.
"""
import gc
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dlpack_helpers as H
from test_hypothesis import numpy_views

NP_NAMES = [d.name for d in H.NUMPY_DTYPES]


def describe(t):
    return (tuple(t.shape), tuple(t.strides), t.dtype, t.device, t.readonly, t.data_ptr)


def via_capsule(m, a):
    """The ordinary path: numpy's own versioned capsule, consumed by dlbind."""
    return m.from_dlpack(a.__dlpack__(max_version=(1, 3)))


def fast(m, a, **kw):
    """`m.from_dlpack(a)`, asserting it took the fast path."""
    n0 = m._testing.numpy_fast_imports()
    t = m.from_dlpack(a, **kw)
    assert m._testing.numpy_fast_imports() == n0 + 1, "expected the numpy header fast path"
    return t


def not_fast(m, fn):
    """Runs `fn()`, asserting the fast path was not taken; returns its result."""
    n0 = m._testing.numpy_fast_imports()
    r = fn()
    assert m._testing.numpy_fast_imports() == n0, "the numpy fast path ran where it must step aside"
    return r


@pytest.mark.parametrize("name", NP_NAMES)
def test_every_numpy_dtype_matches_capsule_path(m, name):
    a = H.sample_values(H.SPEC.dtype(name), (3, 4))
    t = fast(m, a)
    assert describe(t) == describe(via_capsule(m, a))
    assert t.dtype == name
    np.testing.assert_array_equal(np.from_dlpack(t), a)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(numpy_views(), st.booleans())
def test_random_views_match_capsule_path(m, a, readonly):
    if readonly and a.flags.writeable:
        a = a.view()
        a.flags.writeable = False
    t = fast(m, a)
    assert describe(t) == describe(via_capsule(m, a))
    assert t.readonly == (not a.flags.writeable)
    np.testing.assert_array_equal(np.from_dlpack(t), a)


@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2), (1,) * 9, (2,) * 10, (1,) * 64])
def test_zero_size_zero_d_and_many_dims(m, shape):
    a = np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.int32).reshape(shape)
    t = fast(m, a)
    assert describe(t) == describe(via_capsule(m, a))


def test_readonly_array_gives_readonly_view(m):
    a = np.arange(6.0)
    a.flags.writeable = False
    t = fast(m, a)
    assert t.readonly
    assert describe(t) == describe(via_capsule(m, a))


def test_view_keeps_array_alive_and_refcount_returns(m):
    a = np.arange(1000, dtype=np.float64)
    base = sys.getrefcount(a)
    t = fast(m, a)
    assert sys.getrefcount(a) == base + 1
    ptr = t.data_ptr
    del a
    gc.collect()
    back = np.from_dlpack(t)
    assert back.__array_interface__["data"][0] == ptr
    np.testing.assert_array_equal(back, np.arange(1000, dtype=np.float64))
    a = np.arange(3.0)
    base = sys.getrefcount(a)
    t = fast(m, a)
    del t
    gc.collect()
    assert sys.getrefcount(a) == base


def test_writes_are_shared(m):
    a = np.zeros(4, dtype=np.int64)
    t = fast(m, a)
    np.from_dlpack(t)[2] = 7
    assert a[2] == 7


def test_copy_true_copies_and_copy_false_views(m):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]
    # copy=True: the runtime's `from_dlpack` imports the view through the header (as an
    # ImportedTensor) and copies it.
    c = fast(m, a, copy=True)
    assert c.data_ptr != a.__array_interface__["data"][0]
    assert c.strides == (2, 1)
    np.testing.assert_array_equal(np.from_dlpack(c), a)
    v = fast(m, a, copy=False)
    assert describe(v) == describe(via_capsule(m, a))
    d = fast(m, a, device=(1, 0))
    assert describe(d) == describe(v)


def test_subclass_goes_through_dlpack(m):
    class Sub(np.ndarray):
        calls = 0

        def __dlpack__(self, **kw):
            Sub.calls += 1
            return np.asarray(self).__dlpack__(**kw)

    s = np.arange(5.0).view(Sub)
    t = not_fast(m, lambda: m.from_dlpack(s))
    assert Sub.calls == 1
    assert t.shape == (5,)


@pytest.mark.parametrize("make", [
    pytest.param(lambda: np.arange(4, dtype=">i4"), id="big-endian"),
    pytest.param(lambda: np.zeros(3, dtype=np.longdouble), id="longdouble"),
    pytest.param(lambda: np.zeros(3, dtype="datetime64[ns]"), id="datetime"),
    pytest.param(lambda: np.zeros(3, dtype="U3"), id="str"),
    pytest.param(lambda: np.zeros(3, dtype=[("x", "<f4"), ("y", "<i4")]), id="structured"),
    pytest.param(lambda: np.zeros(3, dtype=object), id="object"),
    pytest.param(lambda: np.lib.stride_tricks.as_strided(np.zeros(16, np.int32), (3,), (6,)),
                 id="stride-not-multiple-of-itemsize"),
])
def test_what_numpy_refuses_still_raises_numpys_error(m, make):
    a = make()
    with pytest.raises(BufferError) as expected:
        a.__dlpack__(max_version=(1, 3))
    with pytest.raises(BufferError) as got:
        not_fast(m, lambda: m.from_dlpack(a))
    assert str(got.value) == str(expected.value)


def test_ml_dtypes_arrays_take_the_fast_path_sub_byte_ones_step_aside(m):
    """Whole-byte ml_dtypes (bfloat16, float8) are read from the header (numpy's own capsule
    refuses them; issue 25); sub-byte ones step aside and get numpy's BufferError."""
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes is one of the pinned peers")
    n0 = m._testing.numpy_fast_imports()
    t = m.from_dlpack(np.zeros(3, ml_dtypes.bfloat16))
    assert t.dtype == "bfloat16" and m._testing.numpy_fast_imports() == n0 + 1
    with pytest.raises(BufferError):
        not_fast(m, lambda: m.from_dlpack(np.zeros(3, ml_dtypes.float4_e2m1fn)))


def test_as_strided_bogus_extent_is_malformed(m):
    """numpy lets `as_strided` describe memory it does not have; both paths refuse to import it
    (MalformedTensor → BufferError naming the field), never a crash."""
    huge = np.lib.stride_tricks.as_strided(np.zeros(2, np.float64), (3, 2), (2**62, 8))
    with pytest.raises(BufferError, match=r"DLTensor\.strides"):
        m.from_dlpack(huge)
    with pytest.raises(BufferError, match=r"DLTensor\.strides"):
        via_capsule(m, huge)


def test_non_contiguous_strides_in_elements(m):
    a = np.arange(60, dtype=np.int16).reshape(3, 4, 5).transpose(2, 0, 1)[::-2, :, 1::2]
    t = fast(m, a)
    assert t.strides == tuple(s // a.itemsize for s in a.strides)
    np.testing.assert_array_equal(np.from_dlpack(t), a)


def test_tensor_from_dlpack_staticmethod_takes_it_too(m, Tensor):
    a = np.arange(3, dtype=np.uint16)
    n0 = m._testing.numpy_fast_imports()
    t = Tensor.from_dlpack(a)
    assert m._testing.numpy_fast_imports() == n0 + 1
    assert describe(t) == describe(via_capsule(m, a))


def test_environment_switch_turns_it_off(m):
    """`DLBIND_NUMPY_FAST_PATH=0` (read at first use): every import goes through `__dlpack__`."""
    code = textwrap.dedent(f"""
        import numpy as np, {m.__name__} as m
        a = np.arange(6.0).reshape(2, 3)
        t = m.from_dlpack(a)
        assert t.shape == (2, 3) and t.data_ptr == a.__array_interface__["data"][0]
        print(m._testing.numpy_fast_imports())
    """)
    for value, expect in (("0", "0"), ("1", "1")):
        env = dict(os.environ, DLBIND_NUMPY_FAST_PATH=value)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == expect
