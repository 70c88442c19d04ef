"""Refcounts, deleters, owners outliving producers, threads, shutdown, leak loops (cases 53-60)."""
import ctypes
import gc
import subprocess
import sys
import textwrap
import threading
import weakref

import numpy as np
import pytest

import dlpack_helpers as H
from conftest import tensor_from_np


@pytest.mark.parametrize("mv", [(0, 0), None, (1, 0), (1, 3), (100, 3)])
def test_export_refcount(m, Tensor, mv):
    t = Tensor.zeros((3,))
    base, live = sys.getrefcount(t), m._testing.live_exports()
    cap = t.__dlpack__(max_version=mv)
    assert sys.getrefcount(t) == base + 1
    assert m._testing.live_exports() == live + 1
    del cap
    assert sys.getrefcount(t) == base
    assert m._testing.live_exports() == live


@pytest.mark.parametrize("legacy", [False, True])
def test_numpy_import_refcount(m, Tensor, legacy):
    t = Tensor.arange(4)
    base, live = sys.getrefcount(t), m._testing.live_exports()
    a = np.from_dlpack(H.W(t.__dlpack__()) if legacy else t)
    assert sys.getrefcount(t) == base + 1
    assert m._testing.live_exports() == live + 1
    del a
    assert sys.getrefcount(t) == base and m._testing.live_exports() == live


@pytest.mark.parametrize("legacy", [False, True])
def test_our_import_refcount(m, legacy):
    a = np.arange(4.0)
    base = sys.getrefcount(a)
    t = m.from_dlpack(H.W(a.__dlpack__()) if legacy else a)
    assert sys.getrefcount(a) > base  # numpy's manager (at least) holds the array
    del t
    gc.collect()
    assert sys.getrefcount(a) == base, "the producer's deleter did not run when the view died"


def test_view_of_view_keeps_base(m):
    a = np.arange(10.0)
    base = sys.getrefcount(a)
    t = m.from_dlpack(a)
    r = t.reversed(0)
    s = r.slice(0, 1, 5, 2)
    del t, r
    gc.collect()
    assert sys.getrefcount(a) > base, "the view lost its producer"
    assert np.frombuffer(s.tobytes(), np.float64).tolist() == [8.0, 6.0]
    del s
    gc.collect()
    assert sys.getrefcount(a) == base


@pytest.mark.parametrize("mv", [None, (1, 3)])
def test_unconsumed_capsule_freed_once(m, Tensor, mv):
    t = Tensor.zeros((5,))
    base, live = sys.getrefcount(t), m._testing.live_exports()
    for _ in range(3):
        cap = t.__dlpack__(max_version=mv)
        del cap
    assert m._testing.live_exports() == live and sys.getrefcount(t) == base


def test_consume_twice_no_double_free(m, Tensor):
    t = Tensor.arange(3)
    base, live = sys.getrefcount(t), m._testing.live_exports()
    cap = t.__dlpack__(max_version=(1, 3))
    w = H.W(cap)
    u = m.from_dlpack(w)
    with pytest.raises(ValueError):
        m.from_dlpack(w)
    with pytest.raises(ValueError):
        np.from_dlpack(w)
    del w, cap
    assert m._testing.live_exports() == live + 1
    del u
    gc.collect()
    assert m._testing.live_exports() == live and sys.getrefcount(t) == base


def test_producer_deleted_while_numpy_view_lives(m, Tensor):
    t = Tensor.arange(1000, "float64")
    live = m._testing.live_exports()
    y = np.from_dlpack(t)
    del t
    gc.collect()
    assert y.sum() == sum(range(1000))
    y[0] = 5.0  # memory still valid and writable
    assert m._testing.live_exports() == live + 1
    del y
    gc.collect()
    assert m._testing.live_exports() == live


def test_numpy_producer_deleted_while_our_view_lives(m):
    a = np.arange(1000, dtype=np.int64)
    ref = weakref.ref(a)
    z = m.from_dlpack(a)
    del a
    gc.collect()
    assert ref() is not None, "the numpy producer died while our view still uses its memory"
    assert sum(np.frombuffer(z.tobytes(), np.int64)) == sum(range(1000))
    del z
    gc.collect()
    assert ref() is None, "the producer's deleter never ran (leak)"


def test_our_tensor_deleted_while_our_view_lives(m, Tensor):
    t = Tensor.arange(50, "int32")
    live = m._testing.live_exports()
    ref = weakref.ref(t) if hasattr(Tensor, "__weakref__") else None
    u = m.from_dlpack(t)
    del t
    gc.collect()
    assert u.tobytes() == np.arange(50, dtype=np.int32).tobytes()
    del u
    gc.collect()
    assert m._testing.live_exports() == live
    if ref is not None:
        assert ref() is None


def _drop_in_thread(holder):
    def run():
        holder.clear()
        gc.collect()
    th = threading.Thread(target=run)
    th.start()
    th.join()


def test_our_view_dropped_in_other_thread(m):
    a = np.arange(100.0)
    ref = weakref.ref(a)
    holder = [m.from_dlpack(a)]
    del a
    _drop_in_thread(holder)
    gc.collect()
    assert ref() is None


def test_numpy_view_of_our_export_dropped_in_other_thread(m, Tensor):
    live = m._testing.live_exports()
    holder = [np.from_dlpack(Tensor.arange(100)), Tensor.zeros((3,)).__dlpack__()]
    assert m._testing.live_exports() == live + 2
    _drop_in_thread(holder)
    gc.collect()
    assert m._testing.live_exports() == live


def test_our_deleter_called_without_the_gil(m, Tensor):
    """dlbind's deleter called by threads that do NOT hold the GIL (a ctypes CFUNCTYPE call
    releases it for the duration), several at once: each takes the GIL itself and releases the
    export exactly once (owner reference and live-export count restored)."""
    deleter_t = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
    set_name = ctypes.pythonapi.PyCapsule_SetName
    set_name.restype, set_name.argtypes = ctypes.c_int, [ctypes.py_object, ctypes.c_char_p]
    t = Tensor.arange(100)
    rc, live = sys.getrefcount(t), m._testing.live_exports()
    ptrs = []
    for _ in range(32):
        cap = t.__dlpack__(max_version=(1, 3))
        ptrs.append(H.inspect_capsule(cap).struct_addr)
        assert set_name(cap, b"used_dltensor_versioned") == 0  # consumed: its destructor frees nothing
        del cap
    assert m._testing.live_exports() == live + 32 and sys.getrefcount(t) == rc + 32

    def worker(chunk):
        for p in chunk:
            deleter_t(H.D.fn_address(H.DLManagedTensorVersioned.from_address(p).deleter))(p)

    ths = [threading.Thread(target=worker, args=(ptrs[i::4],)) for i in range(4)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    assert m._testing.live_exports() == live
    assert sys.getrefcount(t) == rc


def test_deleter_from_thread_without_gil(m):
    """A producer deleter that runs while the dropping thread released the GIL elsewhere."""
    results = []

    def worker(i):
        a = np.arange(1000, dtype=np.float32) + i
        ref = weakref.ref(a)
        t = m.from_dlpack(a)
        del a
        np.dot(np.ones(200), np.ones(200))  # numpy releases the GIL around here
        del t
        gc.collect()
        results.append(ref() is None)

    ths = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    assert results == [True] * 8


def test_interpreter_shutdown_with_live_views():
    """Case 59: views and capsules kept in module globals until exit -> clean exit."""
    import conftest
    code = textwrap.dedent(f"""
        import sys, threading, numpy as np
        import {conftest.DEMO_MODULE} as m
        KEEP_A = m.from_dlpack(np.arange(10.0))
        KEEP_B = np.from_dlpack(m.Tensor.arange(10))
        KEEP_C = m.Tensor.zeros((4,)).__dlpack__(max_version=(1, 3))
        KEEP_D = m.Tensor.zeros((4,)).__dlpack__()
        class Cycle: pass
        c = Cycle(); c.self = c; c.view = m.from_dlpack(np.ones(3))
        def bg():
            import time
            global KEEP_E
            KEEP_E = m.from_dlpack(np.zeros(5))
        th = threading.Thread(target=bg); th.start(); th.join()
        print("ok", flush=True)
    """)
    import os
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(conftest.__file__)] + sys.path))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "ok"
    assert "Fatal" not in r.stderr and "panicked" not in r.stderr, r.stderr[-2000:]


@pytest.mark.slow
def test_leak_loop_10k(m, Tensor):
    """Case 60: 10k iterations of export / import / drop both ways; counts must not drift."""
    t = Tensor.arange(64, "float32")
    tz = Tensor.zeros((0, 3))
    ro = t.set_readonly() or t
    a = np.arange(64, dtype=np.float32)
    az = np.zeros((0, 4))
    srcs = (t, tz, ro, a, az)
    base = [sys.getrefcount(x) for x in srcs]
    live = m._testing.live_exports()
    for i in range(10_000):
        x = np.from_dlpack(t)
        y = np.from_dlpack(tz)
        c1 = t.__dlpack__()
        c2 = ro.__dlpack__(max_version=(1, 3))
        u = m.from_dlpack(a)
        v = m.from_dlpack(az)
        w = m.from_dlpack(t)
        q = m.from_dlpack(a, copy=True)
        try:
            ro.__dlpack__()
        except BufferError:
            pass
        try:
            t.__dlpack__(stream=1)
        except Exception:
            pass
        del x, y, c1, c2, u, v, w, q
    gc.collect()
    assert m._testing.live_exports() == live
    assert [sys.getrefcount(x) for x in srcs] == base


@pytest.mark.parametrize("run", range(3))
def test_exit_while_daemon_threads_export_and_import(run):
    """Interpreter exit while daemon threads are mid-way through exports, imports and drops
    (their deleters may run during finalisation or never): no crash, no hang, exit status 0."""
    import conftest
    code = textwrap.dedent(f"""
        import threading, time, numpy as np
        import {conftest.DEMO_MODULE} as m
        started = threading.Barrier(3)
        def loop(k):
            t = m.Tensor.arange(100 + k)
            a = np.arange(100.0 + k)
            started.wait()
            while True:
                x = np.from_dlpack(t)
                y = m.from_dlpack(a)
                z = m.from_dlpack(t)
                c = t.__dlpack__(max_version=(1, 3))
                d = m.from_dlpack(a, copy=True)
                del x, y, z, c, d
        for k in range(2):
            threading.Thread(target=loop, args=(k,), daemon=True).start()
        started.wait()
        time.sleep(0.05 * ({run} + 1))
        KEEP = [m.from_dlpack(np.ones(4)), m.Tensor.zeros((2,)).__dlpack__()]
        print("exiting", flush=True)
    """)
    import os
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(conftest.__file__)] + sys.path))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert r.stdout.strip() == "exiting"
    assert "Fatal" not in r.stderr and "panicked" not in r.stderr, r.stderr[-2000:]
