"""torch, both directions (issue 5: "test with torch when installed").

torch is not in the pinned test set (its registry wheel pulls several GB of CUDA libraries), so
this module skips without it. torch ≥ 2.9 publishes `__dlpack_c_exchange_api__` on
`torch.Tensor`; `dlbind_demo.from_dlpack(x)` imports through that table (counted by
`exchange_imports()`). torch's table exports tensors whose conjugate or negative bit is set as
their stored values, which would be wrong numbers; dlbind refuses those (BufferError).
"""

import gc

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (optional peer: multi-GB CUDA wheel)")

import dlbind_demo as m  # noqa: E402
from dlbind_demo import Tensor  # noqa: E402

HAS_TABLE = hasattr(torch.Tensor, "__dlpack_c_exchange_api__")

DTYPES = [
    (torch.float16, "float16"), (torch.bfloat16, "bfloat16"), (torch.float32, "float32"),
    (torch.float64, "float64"), (torch.int8, "int8"), (torch.int16, "int16"),
    (torch.int32, "int32"), (torch.int64, "int64"), (torch.uint8, "uint8"), (torch.bool, "bool"),
    (torch.complex64, "complex64"), (torch.complex128, "complex128"),
]


def element_strides(x):
    return tuple(x.stride())


@pytest.mark.parametrize("tdt,name", DTYPES, ids=[n for _, n in DTYPES])
def test_torch_to_dlbind_zero_copy_through_the_table(tdt, name):
    x = (torch.arange(24) % 2).to(tdt).reshape(2, 3, 4)
    for v in [x, x.transpose(0, 2), x[:, 1:, ::2], x[0, 0, 0]]:
        n = m._testing.exchange_imports()
        u = m.from_dlpack(v)
        if HAS_TABLE:
            assert m._testing.exchange_imports() == n + 1, "imported through torch's C exchange table"
        assert u.data_ptr == v.data_ptr()
        assert u.shape == tuple(v.shape)
        assert u.strides == element_strides(v)
        assert u.dtype == name
        assert not u.readonly
        assert u.device == (1, 0)
        if name != "bfloat16":
            np.testing.assert_array_equal(np.from_dlpack(u), v.numpy())


def test_empty_and_zero_d():
    assert m.from_dlpack(torch.zeros(0, 3)).shape == (0, 3)
    u = m.from_dlpack(torch.tensor(3.5))
    assert u.shape == () and np.from_dlpack(u)[()] == 3.5


def test_the_view_keeps_torch_memory_alive():
    x = torch.arange(1000, dtype=torch.float64)
    want = x.numpy().copy()
    u = m.from_dlpack(x[::3])
    del x
    gc.collect()
    _ = [torch.ones(1000, dtype=torch.float64) for _ in range(20)]
    np.testing.assert_array_equal(np.from_dlpack(u), want[::3])


def test_writes_go_both_ways():
    x = torch.zeros(4, dtype=torch.float32)
    u = m.from_dlpack(x)
    np.from_dlpack(u)[1] = 7
    assert x[1].item() == 7
    t = Tensor.arange(6, "float32")
    y = torch.from_dlpack(t)
    assert y.data_ptr() == t.data_ptr
    y[0] = 42
    assert np.from_dlpack(t)[0] == 42


def test_dlbind_to_torch_layouts():
    t = Tensor.from_bytes(bytes(range(24)), (2, 3, 4), "uint8")
    for v in [t, t.transpose(), t.slice(2, 1, None, 2)]:
        y = torch.from_dlpack(v)
        assert y.data_ptr() == v.data_ptr
        assert tuple(y.stride()) == v.strides
        np.testing.assert_array_equal(y.numpy(), np.from_dlpack(v))


def test_round_trip_torch_dlbind_torch():
    x = torch.arange(12, dtype=torch.int32).reshape(3, 4).t()
    y = torch.from_dlpack(m.from_dlpack(x))
    assert y.data_ptr() == x.data_ptr() and torch.equal(x, y)
    assert tuple(y.stride()) == tuple(x.stride())


@pytest.mark.parametrize("make,bit,fix", [
    (lambda: torch.tensor([1 + 2j, 3 - 4j]).conj(), "conjugate", "resolve_conj"),
    (lambda: torch.tensor([1 + 2j, 3 - 4j]).conj().imag, "negative", "resolve_neg"),
    (lambda: torch.tensor([1.0, -2.0])._neg_view(), "negative", "resolve_neg"),
])
def test_lazy_conjugate_and_negative_bits_are_refused(make, bit, fix):
    if not HAS_TABLE:
        pytest.skip("this torch has no C exchange table")
    x = make()
    with pytest.raises(BufferError, match=f"{bit} bit set.*{fix}"):
        m.from_dlpack(x)
    resolved = getattr(x, fix)()
    u = m.from_dlpack(resolved)
    # The values the tensor means (tolist() applies the lazy bit), not its stored ones.
    np.testing.assert_array_equal(np.from_dlpack(u), np.array(x.tolist()))


def test_conjugated_values_after_resolve():
    x = torch.tensor([1 + 2j]).conj()
    u = m.from_dlpack(x.resolve_conj())
    assert np.from_dlpack(u)[0] == 1 - 2j


def test_requires_grad_is_torchs_table_choice():
    # torch's __dlpack__ refuses tensors that require grad; its C exchange table (what tvm-ffi
    # and dlbind use) exports their data. dlbind follows the producer's table.
    g = torch.ones(3, requires_grad=True)
    with pytest.raises(BufferError):
        g.__dlpack__()
    if HAS_TABLE:
        u = m.from_dlpack(g)
        assert u.data_ptr == g.data_ptr()
