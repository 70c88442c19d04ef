"""A derived class declared `#[pyclass(immutable_type)]` (issue 42): its `__dlpack__` and
`__dlpack_device__` work on every call in either build mode. In an abi3 build dlbind cannot
re-bind the methods on such a type (its `setattr` is refused), so it leaves the derived ones in
place; before issue 42 the refused `setattr` failed every call.

The demo has the class (`Fixed`) only when built with its `immutable-type` feature: the matrix
builds that in its 3.14 entry as one abi3 wheel for 3.14 (`abi3-py314`, the first abi3 version
PyO3 accepts `immutable_type` in).
"""
import numpy as np
import pytest

import dlbind_demo as m
import dlpack_helpers as H

pytestmark = pytest.mark.skipif(
    not hasattr(m, "Fixed"),
    reason="dlbind_demo built without its `immutable-type` feature (the matrix's 3.14 entry builds it)",
)


def test_the_type_is_immutable():
    with pytest.raises(TypeError):
        m.Fixed.extra = 1


def test_exports_work_on_every_call():
    f = m.Fixed([1.0, 2.0, 3.0])
    for _ in range(4):
        a = np.from_dlpack(f)
        assert a.tolist() == [1.0, 2.0, 3.0] and a.dtype == np.float32
        # A frozen class lends its Vec through `&`: never exported writable.
        assert not a.flags.writeable
        c = f.__dlpack__(max_version=(1, 0))
        assert "dltensor_versioned" in repr(c)
        # A legacy capsule cannot say read-only: a private copy under copy=None (decision
        # 0024), refused under copy=False.
        legacy = np.from_dlpack(H.W(f.__dlpack__()))
        assert legacy.ctypes.data != a.ctypes.data and legacy.tolist() == [1.0, 2.0, 3.0]
        with pytest.raises(BufferError, match="copy=False"):
            f.__dlpack__(copy=False)
        assert f.__dlpack_device__() == (1, 0)


def test_the_type_check_still_applies():
    # The unbound descriptor checks `self` itself.
    with pytest.raises(TypeError):
        m.Fixed.__dlpack__(np.arange(3.0))
