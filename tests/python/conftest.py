"""pytest configuration for the dlbind DLPack suite (see tests/python/README.md)."""
from __future__ import annotations

import gc
import importlib
import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import dlpack_helpers as H  # noqa: E402

# DLBIND_DEMO_MODULE lets the suite run against another implementation of the demo API.
DEMO_MODULE = os.environ.get("DLBIND_DEMO_MODULE", "dlbind_demo")
try:
    demo = importlib.import_module(DEMO_MODULE)
except ImportError as e:  # pragma: no cover - a clear message instead of 100 errors
    raise ImportError(
        f"cannot import {DEMO_MODULE!r} ({e}); build it first: "
        "maturin develop --release -m examples/tensor/Cargo.toml (scripts/test.sh does this)") from e


def pytest_report_header(config):
    return [f"demo module: {DEMO_MODULE} from {getattr(demo, '__file__', '?')}",
            f"spec: {H.SPEC.path} ({len(H.DTYPES)} dtypes, DLPack {H.SPEC.version[0]}.{H.SPEC.version[1]})",
            f"numpy {np.__version__}"]


def pytest_configure(config):
    assert H.DTYPES, f"no dtype table found in {H.SPEC.path} or generated/docs/dtypes.md"
    config.addinivalue_line("markers", "slow: long-running test (leak loops)")


@pytest.fixture(scope="session")
def m():
    return demo


@pytest.fixture(scope="session")
def Tensor():
    return demo.Tensor


def _freeze_the_long_lived_heap():
    """Import the installed peers once and move everything alive now into the permanent generation
    (gc.freeze): the two full collections of every test then walk only what tests made, not
    jax's and pyarrow's millions of module objects (60 ms a collection before, most of the suite's
    time). Nothing made by a test is frozen, so its cycles are still collected and counted."""
    for name in ("jax", "jax.numpy", "pyarrow", "tvm_ffi", "ml_dtypes", "array_api_strict",
                 "hypothesis", "torch"):
        try:
            importlib.import_module(name)
        except Exception:  # an optional peer: the tests that need it skip with their own reason
            pass
    gc.collect()
    gc.freeze()


_freeze_the_long_lived_heap()


@pytest.fixture(autouse=True)
def _no_leaked_exports():
    """Every test must leave live_exports() where it found it (deleters ran exactly once)."""
    gc.collect()
    before = demo._testing.live_exports()
    yield
    gc.collect()
    after = demo._testing.live_exports()
    # A consumer may release on another thread, after the test returns: JAX frees an imported
    # buffer on its runtime thread (DLPack lets a deleter run on any thread). A leak never comes
    # back; a deleter still on its way does within a second.
    deadline = time.monotonic() + 2.0
    while after != before and time.monotonic() < deadline:
        time.sleep(0.01)
        gc.collect()
        after = demo._testing.live_exports()
    assert after == before, f"live_exports() {before} -> {after}: an exported tensor's deleter did not run"


# ----------------------------------------------------------------- helpers
def tensor_from_np(a: np.ndarray, name: str | None = None, readonly: bool = False):
    """A fresh dlbind Tensor holding a copy of `a` (C order) through Tensor.from_bytes."""
    if name is None:
        name = dtype_name(a.dtype)
    return demo.Tensor.from_bytes(np.ascontiguousarray(a).tobytes(), tuple(a.shape), name, readonly=readonly)


def dtype_name(npdt) -> str:
    npdt = np.dtype(npdt)
    for d in H.DTYPES:
        if d.np_dtype == npdt:
            return d.name
    raise KeyError(npdt)


def readonly_view(t):
    r = t.set_readonly()
    return t if r is None else r
