"""`arrow.fixed_shape_tensor`'s `permutation` (issue 43): dlbind follows the Arrow spec (logical
dimension i is physical dimension permutation[i]; the spec's example: physical shape
[100, 200, 500] with permutation [2, 0, 1] is logical shape [500, 100, 200]), pyarrow 26 uses the
inverse map. They agree on permutations that are their own inverse and differ on a 3-cycle. These
tests pin both sides, so they fail when pyarrow changes (then docs/manual/adapters-b.md's
paragraph "The `permutation`, and pyarrow" is out of date)."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import demo

pa = pytest.importorskip("pyarrow")
ad = demo.adapters
if not hasattr(ad, "arrow_to_pyarrow"):
    pytest.skip("dlbind_demo built without the arrow feature", allow_module_level=True)

# Logical shape (4, 2, 3), stored as a C-contiguous (2, 3, 4): logical dimension 0 is physical 2,
# 1 is 0, 2 is 1, so the spec's permutation is [2, 0, 1] (a 3-cycle, not its own inverse).
PHYS = np.arange(2 * 24, dtype=np.int32).reshape(2, 2, 3, 4)   # (batch, *physical)
LOGICAL = PHYS.transpose(0, 3, 1, 2)
SPEC_PERM = [2, 0, 1]


def spec_read(arr) -> np.ndarray:
    """The tensors of a FixedShapeTensorArray as the Arrow spec reads them."""
    shape, perm = list(arr.type.shape), arr.type.permutation
    phys = np.asarray(arr.storage.flatten()).reshape([len(arr)] + shape)
    return phys if perm is None else phys.transpose([0] + [p + 1 for p in perm])


def test_the_spec_reading_of_its_own_example():
    ty = pa.fixed_shape_tensor(pa.int8(), [100, 200, 500], permutation=[2, 0, 1])
    storage = pa.FixedSizeListArray.from_arrays(pa.array(np.zeros(100 * 200 * 500, np.int8)),
                                                100 * 200 * 500)
    assert spec_read(pa.ExtensionArray.from_storage(ty, storage)).shape == (1, 500, 100, 200)


def test_dlbind_writes_the_spec_permutation_and_pyarrow_the_inverse():
    ours = ad.arrow_to_pyarrow(LOGICAL, tensor=True)
    theirs = pa.FixedShapeTensorArray.from_numpy_ndarray(LOGICAL)
    assert (list(ours.type.shape), ours.type.permutation) == ([2, 3, 4], SPEC_PERM)
    np.testing.assert_array_equal(spec_read(ours), LOGICAL)
    # pyarrow 26: the same physical shape, the inverse permutation.
    assert list(theirs.type.shape) == [2, 3, 4]
    assert theirs.type.permutation == list(np.argsort(SPEC_PERM)) == [1, 2, 0]
    assert spec_read(theirs).shape != LOGICAL.shape


def test_dlbind_reads_the_spec_permutation_and_pyarrow_does_not():
    ours = ad.arrow_to_pyarrow(LOGICAL, tensor=True)
    back = np.from_dlpack(ad.arrow_from_pyarrow(ours))
    np.testing.assert_array_equal(back, LOGICAL)                  # dlbind: the spec's tensor
    theirs = ours.to_numpy_ndarray()                              # pyarrow 26 on the same array
    assert theirs.shape == LOGICAL.shape                          # the shape agrees ...
    assert not np.array_equal(theirs, LOGICAL)                    # ... the tensor does not


def test_they_agree_on_a_permutation_that_is_its_own_inverse():
    x = np.arange(2 * 12, dtype=np.float32).reshape(2, 3, 4).transpose(0, 2, 1)   # [1, 0]
    ours = ad.arrow_to_pyarrow(x, tensor=True)
    theirs = pa.FixedShapeTensorArray.from_numpy_ndarray(x)
    assert ours.type.permutation == theirs.type.permutation == [1, 0]
    np.testing.assert_array_equal(ours.to_numpy_ndarray(), x)
    np.testing.assert_array_equal(np.from_dlpack(ad.arrow_from_pyarrow(theirs)), x)
