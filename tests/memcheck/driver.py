"""Exercise every dlbind_demo export / import path a few hundred times, for valgrind (not pytest).

    python tests/memcheck/driver.py [--cycles N] [--no-demo] [--no-tvm] [--inject leak|uaf|both]

Run by scripts/memcheck.sh under `valgrind --tool=memcheck` with PYTHONMALLOC=malloc.
--no-demo does the same numpy / Python work without importing dlbind_demo (a baseline run, used
to generate suppressions for interpreter and numpy noise). --inject plants a known bug attributed
to dlbind_demo's code, to show that the checker fails (scripts/memcheck.sh --self-test):
  leak: a capsule whose destructor was removed -> our manager allocation is definitely lost;
  uaf:  our deleter called twice through ctypes on a copy=True export -> the copy's buffer is
        freed twice inside dlbind's deleter (invalid free). (The manager block itself is kept
        for the next export after the first call, and the source object waits in the Tensor
        free list, so a zero-copy export's second call would touch memory that is still live.)
The driver checks its own results (live_exports(), refcounts) and exits 1 on a mismatch.
"""
from __future__ import annotations

import argparse
import array
import ctypes
import gc
import os
import sys
import threading
import weakref

import numpy as np

P = argparse.ArgumentParser()
P.add_argument("--cycles", type=int, default=int(os.environ.get("DLBIND_MEMCHECK_CYCLES", "200")))
P.add_argument("--no-demo", action="store_true", help="baseline: do not import dlbind_demo")
P.add_argument("--no-tvm", action="store_true", help="skip the tvm_ffi consumer")
P.add_argument("--inject", choices=["leak", "uaf", "both"],
               help="plant a bug in dlbind's memory (checker self-test; both: a leak, then a use after free)")
ARGS = P.parse_args()
N = ARGS.cycles

if ARGS.no_demo:
    m = None
else:
    import dlbind_demo as m  # noqa: E402

tvm_ffi = None
if not ARGS.no_tvm:
    try:
        import tvm_ffi  # noqa: E402
    except ImportError:
        print("driver: tvm_ffi not importable; skipping that consumer")

COUNTS: dict[str, int] = {}


def ok(name: str, n: int = 1) -> None:
    COUNTS[name] = COUNTS.get(name, 0) + n


def expect(exc, f, *a, **kw):
    try:
        f(*a, **kw)
    except exc:
        return True
    raise AssertionError(f"{f!r}{a}{kw} did not raise {exc}")


class W:
    """Hands out one prepared capsule (a producer that is not a numpy array nor our Tensor)."""

    def __init__(self, cap):
        self.cap = cap

    def __dlpack__(self, **kw):
        return self.cap

    def __dlpack_device__(self):
        return (1, 0)


class AI:
    """Only __array_interface__ (the bridge for producers without DLPack)."""

    def __init__(self, a):
        self.base = a
        self.__array_interface__ = a.__array_interface__


# ------------------------------------------------------------------ sources
NP = [np.arange(64, dtype=np.float32), np.arange(12.0).reshape(3, 4), np.zeros((0, 3)), np.array(1.5),
      np.arange(12.0).reshape(3, 4).T, np.arange(12.0).reshape(3, 4)[::-1], np.arange(10, dtype=np.int8)[::2]]
if m is not None:
    T = m.Tensor
    t2 = T.from_bytes(np.arange(12.0).tobytes(), (3, 4), "float64")
    OURS = [T.arange(64, "float32"), t2, T.zeros((0, 3), "float64"), T.zeros((), "int64"),
            t2.set_readonly() or t2, t2.reversed(0), t2.transpose(), T.arange(7, "bfloat16"), T.zeros((5,), "bool")]
    RO = OURS[4]
    assert RO.readonly
else:
    OURS, RO = [], None
REFS0 = [sys.getrefcount(x) for x in NP + OURS]
LIVE0 = m._testing.live_exports() if m else 0


def paths_numpy_only():
    """The part a baseline run also does (numpy's own exports, capsules, buffers)."""
    for a in NP:
        np.from_dlpack(a)
        np.from_dlpack(W(a.__dlpack__(max_version=(1, 3))))
        a.__dlpack__()
        memoryview(array.array("d", [1.0, 2.0]))
    ok("numpy-only")


def paths_demo():
    for t in OURS:
        # ours -> numpy, ours -> ours (same-type view, then through Tensor's C exchange table
        # with that shortcut off), ours -> ours (capsules), ours -> tvm_ffi
        npok = t.dtype != "bfloat16"  # numpy has no bfloat16
        x = np.from_dlpack(t) if npok else None
        y = m.from_dlpack(t)
        m._testing.set_same_type_views(False)
        try:
            y2 = m.from_dlpack(t)
        finally:
            m._testing.set_same_type_views(True)
        del y2
        z = m.from_dlpack(W(t.__dlpack__(max_version=(1, 3))))
        # Legacy: the memory itself, or a private copy of read-only memory (decision 0024).
        z2 = m.from_dlpack(W(t.__dlpack__()))
        del z2
        if tvm_ffi is not None:
            v = tvm_ffi.from_dlpack(t)
            del v
        del x, y, z
        # copy=True imports
        m.from_dlpack(t, copy=True)
        if npok:
            np.from_dlpack(t, copy=True)
            # bridges out: __array_interface__ (numpy prefers it), buffer protocol
            np.asarray(t)
            memoryview(t)
        ok("ours->*", 1)
    for a in NP:
        # numpy -> ours (exchange-less: __dlpack__ with max_version), legacy capsule, copy
        u = m.from_dlpack(a)
        u2 = m.from_dlpack(W(a.__dlpack__()))
        u3 = m.from_dlpack(a, copy=True)
        u4 = m.from_dlpack(AI(a))            # __array_interface__ bridge
        del u, u2, u3, u4
        ok("numpy->ours")
    # buffer-protocol imports
    for b in (b"abcdefgh", bytearray(b"12345678"), memoryview(b"xyzw" * 4), array.array("i", range(6)),
              array.array("d"), memoryview(bytes(16)).cast("B", (4, 4))):
        m.from_dlpack(b)
        m.from_dlpack(b, copy=True)
        ok("buffer->ours")


class _Legacy:
    """A producer from before 2023: `__dlpack__(self, stream=None)` only."""

    def __init__(self, t):
        self.t = t

    def __dlpack__(self, stream=None):
        return self.t.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


def interop_edges():
    """Issue 25's paths: ml_dtypes arrays from numpy's header and the typed view back, a legacy
    import of unknown writability leaving through legacy and versioned capsules, the pre-2023
    producer retry (copy=False, device=, a device mismatch), bridge offsets refused."""
    try:
        import ml_dtypes
    except ImportError:
        ml_dtypes = None
    if ml_dtypes is not None:
        for dt in (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn):
            b = np.arange(12, dtype=np.float32).reshape(3, 4).astype(dt)
            t = m.from_dlpack(b[:, ::2])
            v = t.numpy()
            del t, v
    src = OURS[0]
    u = m.from_dlpack(W(src.__dlpack__()))  # unknown writability
    w = m.from_dlpack(W(u.__dlpack__()))
    w2 = m.from_dlpack(W(u.__dlpack__(max_version=(1, 3))))
    del u, w, w2
    p = _Legacy(src)
    for kw in ({"copy": False}, {"device": (1, 0)}, {"copy": True}):
        x = m.from_dlpack(p, **kw)
        del x
    expect(BufferError, m.from_dlpack, p, device=(4, 0))
    expect(ValueError, m.from_dlpack, np.ones(2), device=(1, 0, 0))

    class S:
        __sycl_usm_array_interface__ = {"data": (0x7F0000100000, False), "shape": (640,), "strides": (1,),
                                        "typestr": "<i8", "offset": 2**62, "version": 1}
    expect(BufferError, m.from_dlpack, S())
    ok("interop edges")


def exports_every_flag():
    """Every __dlpack__ flag combination on every source; capsules dropped unconsumed or consumed."""
    n = 0
    for t in OURS:
        for mv in (None, (0, 9), (1, 0), (1, 3), (2, 0)):
            for copy in (None, True, False):
                for dev in (None, (1, 0), (2, 0), (3, 0)):
                    for stream in (None, 5):
                        try:
                            cap = t.__dlpack__(max_version=mv, copy=copy, dl_device=dev, stream=stream)
                        except (BufferError, ValueError, TypeError):
                            ok("export refused")
                            continue
                        n += 1
                        if n % 2:
                            del cap  # unconsumed
                        else:
                            m.from_dlpack(W(cap))
    ok("export combos", n)


def error_paths():
    t = OURS[1]
    cap = t.__dlpack__(max_version=(1, 3))
    w = W(cap)
    u = m.from_dlpack(w)
    expect(ValueError, m.from_dlpack, w)          # second consumption
    expect(ValueError, np.from_dlpack, w)
    del u, w, cap
    expect(ValueError, t.__dlpack__, stream=5)    # CPU has no streams
    expect(BufferError, RO.__dlpack__, copy=False)  # legacy cannot carry READ_ONLY, no copy allowed
    expect(BufferError, t.__dlpack__, max_version=(1, 3), dl_device=(2, 0), copy=False)
    expect(BufferError, m.from_dlpack, NP[1], device=(2, 0), copy=False)
    expect(BufferError, m.from_dlpack, OURS[6], device=(2, 0), copy=False)
    expect((AttributeError, TypeError), m.from_dlpack, object())
    expect(Exception, m.from_dlpack, W("not a capsule"))
    ok("error paths")


def cycles_collected():
    """Cycles through a bridge's exporter, a buffer's obj and a dlbind capsule's owner, freed by
    gc.collect() while a finalizer in the cycle still reads the data."""
    weak = []
    for a in NP[:3]:
        # The Tensor imported from an `AI` keeps it alive; stored on it, the two form a cycle.
        o = AI(a.copy())
        o.t = m.from_dlpack(o)
        o.t2 = m.from_dlpack(W(o.t.__dlpack__(max_version=(1, 3))))
        o.t3 = m.from_dlpack(W(o.t.__dlpack__()))  # a private copy when read-only
        o.fin = Finalizer(o.t)
        weak.append(weakref.ref(o))
        b = Bytes(b"12345678")
        b.t = m.from_dlpack(b)
        weak.append(weakref.ref(b))
        del o, b
    gc.collect()
    assert all(w() is None for w in weak), "a cycle through an imported view's owner was not collected"
    ok("cycles")


class Finalizer:
    def __init__(self, t):
        self.t = t

    def __del__(self):
        bytes(memoryview(self.t))


class Bytes(bytearray):
    pass


def thread_drop():
    holder = [m.from_dlpack(NP[0]), np.from_dlpack(OURS[0]), OURS[1].__dlpack__(max_version=(1, 3)),
              tvm_ffi.from_dlpack(OURS[2]) if tvm_ffi is not None else None]

    def run():
        holder.clear()
        gc.collect()
    th = threading.Thread(target=run)
    th.start()
    th.join()
    # and one created in the thread, dropped in the main thread
    out = []
    th = threading.Thread(target=lambda: out.append((m.from_dlpack(NP[1]), np.from_dlpack(OURS[1]))))
    th.start()
    th.join()
    del out
    ok("thread drop")


def plain_pyclass_borrows():
    """Exports of a plain (non-frozen) #[pyclass] hold a borrow guard: every kind of export, a
    refused mutation while it lives, the release, a failed export, and a guard in a cycle."""
    if not hasattr(m, "Growable"):
        return
    g = m.Growable([float(i) for i in range(32)])
    held = [g.__dlpack__(max_version=(1, 0)), g.__dlpack__(max_version=(1, 3)), np.from_dlpack(g), memoryview(g),
            np.asarray(g), m.from_dlpack(g), m.from_dlpack(W(g.__dlpack__(max_version=(1, 3))))]
    if tvm_ffi is not None:
        held.append(tvm_ffi.from_dlpack(g))
    expect(RuntimeError, g.push, 1.0)
    assert m._testing.live_export_borrows() > 0
    del held
    gc.collect()
    g.resize(64, 0.5)  # released: the Vec may move now
    expect(BufferError, g.__dlpack__, max_version=(1, 3), dl_device=(2, 0), copy=False)
    c = np.from_dlpack(g, copy=True)  # a copy holds no borrow
    g.push(2.0)
    o = AI(np.zeros(1))
    o.self, o.a = o, np.from_dlpack(g)  # a borrow guard reachable only from a cycle
    w = weakref.ref(o)
    del o, c, g
    gc.collect()
    assert w() is None and m._testing.live_export_borrows() == 0, "a plain #[pyclass] export leaked its borrow"
    ok("plain pyclass")


def paths_mutable():
    """A non-frozen class (`Growable`): every export holds a borrow guard (a C-API object of
    dlbind's) whose release ends the borrow; mutations in between reallocate the data."""
    if not hasattr(m, "Growable"):
        return
    g = m.Growable([float(i) for i in range(8)])
    g.reshape(2, 4)
    ai = _OnlyAI(g)
    held = [g.__dlpack__(max_version=(1, 0)), g.__dlpack__(max_version=(1, 3)), np.from_dlpack(g), memoryview(g),
            np.asarray(ai), m.from_dlpack(g), g.__array_interface__]
    del ai
    if tvm_ffi is not None:
        held.append(tvm_ffi.from_dlpack(g))
    expect(RuntimeError, g.resize, 100)
    expect(RuntimeError, g.push, 1.0)
    assert float(held[2].sum()) == 28.0
    held[3].release()
    held.clear()
    g.resize(1000, 1.0)                        # frees the old data: no export may still see it
    g.fill(2.0)
    cap = g.__dlpack__(max_version=(1, 3), copy=True)
    g.resize(3)
    assert np.from_dlpack(W(cap)).sum() == 2000.0
    g.set_readonly(True)
    expect(BufferError, g.__dlpack__, copy=False)
    lc = g.__dlpack__()                        # a private copy: it holds no borrow of `g`
    assert np.from_dlpack(W(lc)).tolist() == [2.0, 2.0, 2.0]
    del lc
    expect((BufferError, TypeError), ctypes.c_char.from_buffer, g)
    g.set_readonly(False)
    assert m._testing.live_export_borrows() == 0, m._testing.live_export_borrows()
    ok("mutable pyclass")


class _OnlyAI:
    def __init__(self, x):
        self.__array_interface__ = x.__array_interface__


def adapter_cycles_a():
    """The ndarray, image and safetensors adapters (dlbind::adapters, issue 34): arrays, images
    and a file's tensors over Rust-owned memory exported and read back, views of frozen objects,
    imports as ndarray views and ImageBuffers, refusals. Only when the demo has them."""
    A = m.adapters
    for rev in (False, True):
        for dt in ("float64", "bool", "complex128"):
            t = A.ndarray_grid(3, 4, dt, rev)
            a = np.from_dlpack(t)
            u = m.from_dlpack(t)
            del t, a, u
    x = np.arange(12.0).reshape(3, 4)
    A.ndarray_sum(x[::-1]); A.ndarray_trace(x[:3, :3]); A.ndarray_scale(x.copy(), 2.0)
    expect(BufferError, A.ndarray_trace, np.zeros((2, 2, 2)))
    expect(BufferError, A.ndarray_sum, np.zeros(3, np.float32))
    h = A.NdHeld(x[:, ::2])
    g = A.NdGrid(4, 3)
    v = np.from_dlpack(g.rows(0, 4, -1))
    s = A.ndarray_arc(4, shared=True)
    del h, g, v, s
    A.ndarray_arc_release()
    A.ndarray_cow(True); A.ndarray_cow(False)
    img = A.image_gradient(5, 3)
    A.image_rgb_pixel(np.from_dlpack(img), 1, 1)
    A.image_invert(np.zeros((2, 2, 3), np.uint8))
    expect(BufferError, A.image_rgb_pixel, np.zeros((2, 2, 4), np.uint8), 0, 0)
    c = A.ImageHolder(6, 4).crop(1, 1, 2, 2)
    np.from_dlpack(A.image_planar(3, 2)).sum()
    del img, c
    if ADAPTER_ST is not None:
        f = A.safetensors_from_bytes(ADAPTER_ST)
        for k in f.keys():
            t = f.get(k)
            if t.dtype != "bfloat16":
                np.from_dlpack(t).sum()
            del t
        expect(ValueError, f.get, "missing")
        expect(BufferError, A.safetensors_from_bytes, b"junk")
        del f
    ok("adapters ndarray/image/safetensors")


ADAPTER_ST = None
if m is not None and hasattr(m, "adapters") and hasattr(m.adapters, "safetensors_from_bytes"):
    try:
        from safetensors.numpy import save as _st_save
        ADAPTER_ST = _st_save({"a": np.arange(6.0).reshape(2, 3), "b": np.arange(5, dtype=np.uint8),
                               "c": np.array([True, False])})
    except ImportError:
        print("driver: safetensors not importable; skipping the safetensors adapter cycles")
LIVE_RUST0 = m.adapters.live_rust_owned_tensors() if m is not None and hasattr(
    getattr(m, "adapters", None), "live_rust_owned_tensors") else None


def inject(kind: str) -> None:
    """Plant a bug in memory dlbind allocated (checker self-test); ends the process at once."""
    api = ctypes.pythonapi
    api.PyCapsule_GetPointer.restype = ctypes.c_void_p
    api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    api.PyCapsule_SetDestructor.argtypes = [ctypes.py_object, ctypes.c_void_p]
    src = m.Tensor.arange(1000, "float64")
    if kind in ("leak", "both"):
        for _ in range(3):
            cap = src.__dlpack__(max_version=(1, 3), copy=True)
            api.PyCapsule_SetDestructor(cap, None)  # nobody will ever call the deleter
            del cap
        gc.collect()
    if kind in ("uaf", "both"):
        # A copy: the tensor owns a buffer that its deleter frees (see the module docstring).
        cap = src.__dlpack__(max_version=(1, 3), copy=True)
        p = api.PyCapsule_GetPointer(cap, b"dltensor_versioned")
        # DLManagedTensorVersioned: {DLPackVersion (8 bytes), manager_ctx, deleter, ...}
        deleter_addr = ctypes.c_void_p.from_address(p + 16).value
        deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(deleter_addr)
        api.PyCapsule_SetDestructor(cap, None)
        deleter(p)
        deleter(p)  # use after free (and double free) inside our deleter
    sys.stdout.flush()
    os._exit(0)



try:
    import pyarrow as _pa  # the arrow adapter's cycles use it when installed
except ImportError:  # pragma: no cover
    _pa = None
ADAPTER_B_SRC = np.arange(24, dtype=np.float32).reshape(2, 3, 4)


def adapter_cycles_b():
    """The arrow, candle and cudarc adapters (dlbind::adapters, issue 34): arrow-rs arrays over
    pyarrow's and numpy's memory both ways (fixed-size lists, fixed shape tensors, copies of
    nulls and booleans, refusals), candle tensors exported and imported. Only what the demo
    has (cudarc needs a GPU: not here)."""
    A = m.adapters
    src = ADAPTER_B_SRC
    if hasattr(A, "arrow_round_trip"):
        t = A.arrow_round_trip(src)
        u = A.arrow_round_trip(src.transpose(0, 2, 1), tensor=True)
        np.from_dlpack(t).sum(); np.from_dlpack(u).sum()
        p = A.arrow_primitive(src.ravel()[::-1], "float32", copy=True)
        expect(BufferError, A.arrow_primitive, src.ravel(), "int64")
        expect(BufferError, A.arrow_round_trip, src[:, ::2])
        expect(BufferError, A.arrow_round_trip, np.array([True, False]))
        expect(BufferError, A.arrow_round_trip, np.array([True, False]), copy=True)  # packed, then refused
        w = A.arrow_arange(5)
        del t, u, p, w
        if _pa is not None:
            a = _pa.array([1.0, None, 3.0])
            expect(BufferError, A.arrow_from_pyarrow, a)
            c = A.arrow_from_pyarrow(a, copy=True)
            q = A.arrow_to_pyarrow(src, tensor=True)
            r = A.arrow_from_pyarrow(q)
            b = A.arrow_to_pyarrow(np.from_dlpack(r).reshape(-1)[:4].copy())
            del a, c, q, r, b
    if hasattr(A, "candle_arange"):
        for layout in ("c", "t", "broadcast", "narrow"):
            t = A.candle_arange(3, 4, layout=layout)
            np.from_dlpack(t).sum()
            del t
        _, _, _, back = A.candle_import(src.transpose(2, 0, 1))
        expect(BufferError, A.candle_import, np.zeros(2, np.int8))
        del back

def main() -> int:
    for i in range(N):
        paths_numpy_only()
        if m is not None:
            paths_demo()
            if i % 10 == 0:
                exports_every_flag()
            error_paths()
            if i % 20 == 0:
                thread_drop()
            if i % 5 == 0:
                cycles_collected()
                plain_pyclass_borrows()
            paths_mutable()
            interop_edges()
            if LIVE_RUST0 is not None and hasattr(m.adapters, "ndarray_grid"):
                adapter_cycles_a()
            if hasattr(m.adapters, "arrow_round_trip") or hasattr(m.adapters, "candle_arange"):
                adapter_cycles_b()
    gc.collect()
    bad = []
    if m is not None:
        if m._testing.live_exports() != LIVE0:
            bad.append(f"live_exports() {LIVE0} -> {m._testing.live_exports()}")
        if hasattr(m, "live_export_borrows") and m._testing.live_export_borrows() != 0:
            bad.append(f"live_export_borrows() {m._testing.live_export_borrows()} (want 0)")
        if LIVE_RUST0 is not None and m.adapters.live_rust_owned_tensors() != LIVE_RUST0:
            bad.append(f"live_rust_owned_tensors() {LIVE_RUST0} -> {m.adapters.live_rust_owned_tensors()}")
        if _pa is not None and hasattr(m.adapters, "arrow_from_pyarrow") and _pa.total_allocated_bytes() != 0:
            bad.append(f"pyarrow still holds {_pa.total_allocated_bytes()} bytes after the arrow cycles")
        refs = [sys.getrefcount(x) for x in NP + OURS]
        if refs != REFS0:
            bad.append(f"source refcounts {REFS0} -> {refs}")
    print(f"driver: {N} cycles, demo={'yes' if m else 'no'}, tvm_ffi={'yes' if tvm_ffi else 'no'}, counts={COUNTS}")
    if ARGS.inject:
        inject(ARGS.inject)
    for b in bad:
        print("driver: FAIL", b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
