"""Soak: export -> import -> drop cycles in every direction (issue 6, memory and lifetime).

Each test runs CYCLES cycles of one direction over a set of sources (1-d, 2-d, zero-size
(0, 3), 0-d, read-only, negative-stride and transposed views), then checks that

* every cycle ran and, on the first one, really exported / imported what it should
  (live_exports() while held, the producer's refcount, exchange_imports());
* resident memory (/proc/self/statm) grew by less than 1 MiB between the end of the warm-up
  (min(10 % of the cycles, 2,000), then gc.collect()) and the end (after gc.collect());
* live_exports() and sys.getrefcount() of every source are back to their starting values.

Default: 20,000 cycles per direction (the whole file takes a few seconds). The long run:

    DLBIND_SOAK_CYCLES=1000000 JAX_PLATFORMS=cpu .venv/bin/python -m pytest tests/python/test_soak.py -q -p no:cacheprovider
"""
from __future__ import annotations

import gc
import os
import sys

import numpy as np
import pytest

import dlpack_helpers as H
from conftest import tensor_from_np

CYCLES = int(os.environ.get("DLBIND_SOAK_CYCLES", "20000"))
WARMUP = min(CYCLES // 10, 2000)
RSS_LIMIT = 1 << 20  # bytes
PAGE = os.sysconf("SC_PAGE_SIZE")

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc/self/statm (Linux)")


def rss() -> int:
    """Resident set size in bytes (second field of /proc/self/statm, in pages)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def soak(m, sources, body, *, expect_live: int | None = None, expect_exchange: int | None = None,
         expect_refs_held: bool = False) -> dict:
    """Run `body(sources)` CYCLES times; `body` returns what it imported / exported (dropped at once).

    The first cycle's result is held while checking that the path did what it should:
    `expect_live` more of our exports alive, `expect_exchange` more C-exchange imports,
    `expect_refs_held`: every source's refcount went up (a consumer holds its producer).
    """
    assert CYCLES >= 10, f"DLBIND_SOAK_CYCLES={CYCLES} is too small to measure anything"
    gc.collect()
    live0 = m._testing.live_exports()
    refs0 = [sys.getrefcount(s) for s in sources]
    xch0 = m._testing.exchange_imports()

    held = body(sources)
    assert held, "the cycle body produced nothing"
    if expect_live is not None:
        assert m._testing.live_exports() - live0 == expect_live, (
            f"first cycle: live_exports() {live0} -> {m._testing.live_exports()}, expected +{expect_live}")
    if expect_exchange is not None:
        assert m._testing.exchange_imports() - xch0 == expect_exchange, (
            f"first cycle: exchange_imports() {xch0} -> {m._testing.exchange_imports()}, expected +{expect_exchange}")
    if expect_refs_held:
        now = [sys.getrefcount(s) for s in sources]
        assert all(b > a for a, b in zip(refs0, now)), f"imports do not hold their producers: {refs0} -> {now}"
    del held
    ran = 1

    for _ in range(WARMUP - 1):
        body(sources)
        ran += 1
    gc.collect()
    rss_warm = rss()
    for _ in range(CYCLES - WARMUP):
        body(sources)
        ran += 1
    gc.collect()
    rss_end = rss()

    stats = dict(cycles=ran, warmup=WARMUP, rss_warm=rss_warm, rss_end=rss_end, growth=rss_end - rss_warm,
                 live=(live0, m._testing.live_exports()), exchange=m._testing.exchange_imports() - xch0)
    print(f"soak {body.__name__}: {stats}")
    assert ran == CYCLES, f"ran {ran} of {CYCLES} cycles"
    assert rss_end - rss_warm < RSS_LIMIT, (
        f"RSS grew {(rss_end - rss_warm) / 1024:.0f} KiB over {CYCLES - WARMUP} cycles "
        f"({rss_warm} -> {rss_end} bytes): {stats}")
    assert m._testing.live_exports() == live0, f"live_exports() {live0} -> {m._testing.live_exports()}: a deleter did not run"
    refs1 = [sys.getrefcount(s) for s in sources]
    assert refs1 == refs0, f"source refcounts drifted {refs0} -> {refs1}"
    if expect_exchange is not None:
        assert m._testing.exchange_imports() - xch0 == expect_exchange * CYCLES, (
            f"exchange_imports() grew {m._testing.exchange_imports() - xch0}, expected {expect_exchange * CYCLES}")
    return stats


# ----------------------------------------------------------------- sources
def our_sources(Tensor):
    t1 = Tensor.arange(64, "float32")
    t2 = tensor_from_np(np.arange(12.0).reshape(3, 4))
    tz = Tensor.zeros((0, 3), "float64")
    t0 = Tensor.zeros((), "int64")
    ro = t2.set_readonly() or t2
    rv = t2.reversed(0)       # negative stride
    tr = t2.transpose()       # non-contiguous
    return (t1, t2, tz, t0, ro, rv, tr)


def np_sources():
    a = np.arange(12.0).reshape(3, 4)
    return (np.arange(64, dtype=np.float32), a, np.zeros((0, 3)), np.array(1.5), a.T, a[::-1], a[:, ::2],
            np.arange(5, dtype=np.int8))


def _writable(srcs):
    return tuple(s for s in srcs if not s.readonly)


# ----------------------------------------------------------------- directions
def test_soak_ours_to_numpy(m, Tensor):
    srcs = our_sources(Tensor)

    def ours_to_numpy(ss):
        return [np.from_dlpack(s) for s in ss]

    soak(m, srcs, ours_to_numpy, expect_live=len(srcs), expect_refs_held=True)


def test_soak_numpy_to_ours(m):
    srcs = np_sources()

    def numpy_to_ours(ss):
        out = [m.from_dlpack(s) for s in ss]                    # __dlpack__(max_version=(1, 3))
        out += [m.from_dlpack(H.W(s.__dlpack__())) for s in ss]  # numpy's legacy capsule
        return out

    soak(m, srcs, numpy_to_ours, expect_live=0, expect_refs_held=True)


def test_soak_ours_to_ours_same_type_view(m, Tensor):
    """dlbind_demo.from_dlpack(Tensor): the same-type shortcut (a direct view of the storage,
    what the table gives, without calling it; counted by same_type_views())."""
    srcs = our_sources(Tensor)

    def ours_to_ours(ss):
        return [m.from_dlpack(s) for s in ss]

    views0 = m._testing.same_type_views()
    # (Views of views hold the root storage's owner, not the view: no per-source refcount check.)
    stats = soak(m, srcs, ours_to_ours, expect_live=0, expect_exchange=0)
    assert m._testing.same_type_views() - views0 == len(srcs) * stats["cycles"]


def test_soak_ours_to_ours_through_the_table(m, Tensor):
    """The same with the shortcut off: every import calls Tensor's C exchange table. Writable
    sources take its non-owning fill (the view holds the source, no managed tensor); read-only
    ones its owning export (a managed tensor alive while the view lives, its deleter when the
    view dies)."""
    srcs = our_sources(Tensor)
    readonly = len(srcs) - len(_writable(srcs))
    assert readonly > 0

    def ours_to_ours(ss):
        return [m.from_dlpack(s) for s in ss]

    m._testing.set_same_type_views(False)
    try:
        soak(m, srcs, ours_to_ours, expect_live=readonly, expect_exchange=len(srcs), expect_refs_held=True)
    finally:
        m._testing.set_same_type_views(True)


def test_soak_ours_to_ours_capsule(m, Tensor):
    """Our own capsules (versioned and legacy) consumed by our importer: export + import + deleter."""
    srcs = our_sources(Tensor)
    legacy_ok = _writable(srcs)

    def ours_to_ours_capsule(ss):
        out = [m.from_dlpack(H.W(s.__dlpack__(max_version=(1, 3)))) for s in ss]
        out += [m.from_dlpack(H.W(s.__dlpack__())) for s in legacy_ok]
        return out

    soak(m, srcs, ours_to_ours_capsule, expect_live=len(srcs) + len(legacy_ok), expect_refs_held=True)


def test_soak_ours_to_tvm_ffi(m, Tensor):
    tvm_ffi = pytest.importorskip("tvm_ffi")
    srcs = our_sources(Tensor)

    def ours_to_tvm_ffi(ss):
        return [tvm_ffi.from_dlpack(s) for s in ss]

    soak(m, srcs, ours_to_tvm_ffi, expect_live=len(srcs), expect_refs_held=True)


def test_soak_unconsumed_capsules(m, Tensor):
    """Capsules dropped without a consumer: the capsule destructor must run the deleter once."""
    srcs = our_sources(Tensor)
    legacy_ok = _writable(srcs)

    def unconsumed_capsules(ss):
        out = [s.__dlpack__(max_version=(1, 3)) for s in ss]
        out += [s.__dlpack__(max_version=(1, 3), copy=True) for s in ss]
        out += [s.__dlpack__() for s in legacy_ok]
        out += [s.__dlpack__(copy=True) for s in legacy_ok]
        return out

    soak(m, srcs, unconsumed_capsules, expect_live=2 * len(srcs) + 2 * len(legacy_ok))


def test_soak_copy_imports(m, Tensor):
    """copy=True imports both ways (fresh aligned buffers; the producers' views released at once)."""
    ours, theirs = our_sources(Tensor), np_sources()
    srcs = ours + theirs

    def copy_imports(ss):
        out = [m.from_dlpack(s, copy=True) for s in ss]
        out += [np.from_dlpack(s, copy=True) for s in ours]
        return out

    # Our imports copy and hold no producer; numpy forwards copy=True to our __dlpack__, so each
    # numpy copy holds one of our exports (of the fresh buffer, not of the source).
    soak(m, srcs, copy_imports, expect_live=len(ours))


def test_soak_error_paths(m, Tensor):
    """Failed exports / imports must release what they took (BufferError, ValueError, second consumption)."""
    srcs = our_sources(Tensor) + (np.arange(3.0),)
    ro, tr, a = srcs[4], srcs[6], srcs[-1]
    assert ro.readonly

    def error_paths(ss):
        n = 0
        try:
            ro.__dlpack__(copy=False)  # legacy capsules cannot carry READ_ONLY, and no copy
        except BufferError:
            n += 1
        try:
            ss[0].__dlpack__(stream=5)  # kDLCPU has no streams
        except ValueError:
            n += 1
        try:
            tr.__dlpack__(max_version=(1, 3), dl_device=(2, 0), copy=False)  # CPU -> CUDA needs a copy
        except BufferError:
            n += 1
        try:
            m.from_dlpack(tr, device=(2, 0), copy=False)
        except BufferError:
            n += 1
        try:
            m.from_dlpack(a, device=(2, 0), copy=False)
        except BufferError:
            n += 1
        w = H.W(ss[1].__dlpack__(max_version=(1, 3)))
        u = m.from_dlpack(w)
        try:
            m.from_dlpack(w)  # the capsule was consumed already
        except ValueError:
            n += 1
        assert n == 6, f"only {n} of 6 error paths raised"
        return [u]

    soak(m, srcs, error_paths, expect_live=1)


def test_soak_error_paths_with_no_other_call(m, Tensor):
    """Error paths in a loop that makes no other call into the module: dlbind's entry points run
    without PyO3's attach count, so a `Py` an error leaves behind would wait in PyO3's pool until
    PyO3 next attaches, and pile up here (144 bytes a call for a consumed capsule, before errors
    were restored attached). Nothing may grow."""
    t = Tensor.arange(8, "float32")
    ro = Tensor.arange(8, "float32").set_readonly()
    cap = t.__dlpack__(max_version=(1, 3))
    m.from_dlpack(cap)  # consumed: every later import of it fails

    def errors(ss):
        n = 0
        for _ in range(4):
            try:
                m.from_dlpack(cap)
            except ValueError:
                n += 1
            try:
                ro.__dlpack__(copy=False)
            except BufferError:
                n += 1
        assert n == 8, f"only {n} of 8 error paths raised"
        return [n]

    soak(m, (t, ro), errors)
