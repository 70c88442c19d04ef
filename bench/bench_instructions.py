#!/usr/bin/env python3
"""Deterministic instruction-count benchmark: dlbind against numpy (and peers) under callgrind.

    .venv/bin/python bench/bench_instructions.py                 # all rows, N = 2000, prints a table
    .venv/bin/python bench/bench_instructions.py --quick         # smoke: N = 200, a few rows
    .venv/bin/python bench/bench_instructions.py --module other_dlbind_ext --n 5000 \\
        --write bench/results_instructions.md --json /tmp/instr.json

Needs valgrind (`valgrind --tool=callgrind`); without it the script says so and exits 0. It is
information, never a pass/fail test: the exit status is non-zero only when the run itself breaks.

What it counts
--------------
Instructions per call of each statement, as counted by callgrind (guest instructions executed
by the whole process while the statement runs: CPython's eval loop, the extension's code, libc,
malloc). Each statement runs in a loop of N and of 2N iterations and

    per_call = (I(2N) - I(N)) / N

so everything that does not scale with the iteration count (compiling the snippet, the first
executions of CPython 3.11's adaptive specializer, the loop set-up) cancels. What is *not*
subtracted is the loop's own cost per iteration (`for _ in itertools.repeat(None, n)`, about
70 instructions on this CPython build); it is the `pass` row, and `noop(t)` / `object()` give
the floor of any call.
The objects are 4x4 float32: `a` a numpy array, `t = m.from_dlpack(np.ones((4,4), np.float32))`
(the module's own array type, as any dlbind-built module returns from `from_dlpack`; no
module-specific API is used for the core rows), `v = tvm_ffi.from_dlpack(a)`, `w =
tvm_ffi.core.DLTensorTestWrapper(v)`, `p = pyarrow.array(np.ones(16, np.float32))`.
ratio = dlbind / baseline (lower is fewer instructions), both counted in the same process.

Method (one valgrind run per module under test)
-----------------------------------------------
The script re-runs itself as `valgrind --tool=callgrind --collect-atstart=no
--toggle-collect=PyRun_StringFlags --dump-after=PyRun_StringFlags python bench_instructions.py
--child ...`. The child imports everything and builds the objects in `__main__`'s globals with
collection off, then for each statement:

  1. warm-up, not counted: the same snippet run through `exec` (which does not go through
     PyRun_StringFlags) for a few hundred iterations, so free lists, malloc arenas, interned
     names, CPython's type attribute cache and the extension's per-type caches are filled;
  2. two rounds of three calls of `ctypes.pythonapi.PyRun_SimpleStringFlags(snippet, NULL)`:
     n = N as a throw-away (the first trip of a snippet through the parser, the compiler and
     malloc after step 3 costs a few thousand instructions more; without it the N = 200 counts
     came out 16 instructions low), then n = N and n = 2N, the pair. n is read from a global,
     so all calls compile byte-identical source. Collection is on only inside
     PyRun_StringFlags (PyRun_SimpleStringFlags looks up `__main__`'s dict and calls it) and
     callgrind dumps when it returns, so each call writes one file `cg.out.PID.K`; the child
     notes K (the newest file before the round, plus one per call, checked after the round),
     the parent reads its `summary:` line.
  3. before each round: `gc.collect()`, then pymalloc is primed (`prime_pools`): for each of
     its 32 size classes (16..512 bytes) blocks are allocated and held until the class's
     current pool has 16..64 free blocks and at least one held block. Without this, the
     counts of statements that allocate depended on the heap's history (what was imported,
     even the length of argv): a loop whose alloc/free fills and unlinks a pool, or empties
     it, every iteration takes pymalloc's slow paths; `a.__dlpack__()` measured 888, 906,
     917 or 929 instructions in different runs. Primed, two runs differing only in argv gave
     identical counts, and --quick and full runs (which import different modules) agree to a
     few instructions. The priming is checked once at start (the next block of each class
     must land in its primed pool; the result is a note under the table). `--no-prime` turns
     it off.
     Nothing allocated before the priming is freed until the round is done (a free into a full
     pool would put that pool first again): `_bench` is reset to None outside the calls, so
     each call replaces None (no old function freed inside, no dict resize).

Why PyRun_StringFlags and not PyRun_SimpleStringFlags itself: called through ctypes, callgrind
never sees an entry into PyRun_SimpleStringFlags (presumably because libffi's ffi_call_unix64
moves the stack frame before its `call *%r11`): its code is attributed to an unnamed
libffi-internal function (the one ffi_call calls) and the toggle never fires (observed with
valgrind 3.19: zero instructions collected, no dumps). The function it calls,
PyRun_StringFlags, is entered by an ordinary call and toggles correctly. Any other caller of
PyRun_StringFlags (start-up calls it twice here, and the imports of pyarrow and tvm-ffi about
80 times) only adds dumps before ours, which the child accounts for by reading the newest dump
number before each round.

The snippet is `def _bench(_n):\\n for _ in _rep(None, _n): STMT\\n_bench(_n)`: the statement
runs inside a function (LOAD_FAST/LOAD_GLOBAL, as in timeit), its result is discarded, so a
producer row includes destroying the unconsumed capsule. GC is disabled while measuring;
PYTHONHASHSEED=0 and single-threaded BLAS/OpenMP are set for the child. The two (N, 2N) pairs
are compared: the table's `repeat Δ` column is their disagreement in instructions per call (the
larger of the statement's and the baseline's; under 0.1 at N = 2000, up to ~0.6 at N = 200);
the count reported is the smaller of the two.

Caveats: the counts are for primed pools (pymalloc's fast paths), not an average over heap
states. A full run (N = 2000, pyarrow and tvm-ffi imported) and a --quick run (N = 200, neither
imported) agree to within 5 instructions per call (0.2 %; `m.from_dlpack(a)` and
`m.from_dlpack(t)` exactly), so treat differences under ~0.5 % as noise. Callgrind emulates a
CPU without AVX-512 (valgrind 3.19), so numpy's SIMD dispatch may pick other kernels than it
does natively (irrelevant for these 4x4 arrays, which never reach a SIMD loop). Instruction
counts are not time: a cache miss or a mispredicted branch costs far more than an instruction;
use bench_dlpack.py for nanoseconds. The wall time (valgrind start-up with numpy, pyarrow and
tvm-ffi imports dominates) is printed at the end. Rows whose objects cannot
be built (a peer not installed, the module missing) are skipped with a note.

Options: --module NAME (repeatable: one valgrind run each; default dlbind_demo), --n N (default
2000), --quick (N = 200, the export/import rows against numpy and the floors only; no pyarrow or
tvm-ffi import), --write PATH (a markdown table with a header line: date, python, numpy,
module, N), --json PATH (everything, machine-readable), --keep DIR (keep the callgrind files and
the child's plan.json), --no-prime (measure in whatever heap state the process is in).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check_reports import portable  # noqa: E402  (paths in reports: relative or through variables)

# Toggled and dumped; see the docstring. CPython 3.14's PyRun_SimpleStringFlags and PyRun_String
# no longer go through PyRun_StringFlags (they call an internal, unexported function). There the
# child has the interpreter itself call PyRun_SimpleString(snippet), an ordinary C call whose
# entry callgrind sees: `Py_AddPendingCall(PyRun_SimpleString, snippet)`, run by the eval loop at
# its next check. DLBIND_BENCH_SYMBOL overrides the symbol.
SYMBOL = os.environ.get("DLBIND_BENCH_SYMBOL") or (
    "PyRun_StringFlags" if sys.version_info < (3, 14) else "PyRun_SimpleString")
WARMUP = 400

SNIPPET = "def _bench(_n):\n    for _ in _rep(None, _n):\n        {stmt}\n_bench(_n)\n"

# (key, row label, dlbind/peer statement, baseline statement or None, names it needs, in --quick?)
ROWS = [
    ("export_legacy", "legacy export", "t.__dlpack__()", "a.__dlpack__()", ("t",), True),
    ("export_versioned", "versioned export", "t.__dlpack__(max_version=(1, 0))", "a.__dlpack__(max_version=(1, 0))", ("t",), False),
    ("device", "device", "t.__dlpack_device__()", "a.__dlpack_device__()", ("t",), False),
    ("np_from_ours", "np.from_dlpack of ours", "np.from_dlpack(t)", "np.from_dlpack(a)", ("t",), True),
    ("import_numpy", "import numpy", "m.from_dlpack(a)", "np.from_dlpack(a)", ("m",), True),
    ("import_own", "import own type", "m.from_dlpack(t)", "np.from_dlpack(a)", ("t",), True),
    ("import_foreign_table", "import foreign table (tvm-ffi test wrapper)", "m.from_dlpack(w)", "np.from_dlpack(a)", ("m", "w"), False),
    ("import_tvm_tensor", "import tvm-ffi Tensor", "m.from_dlpack(v)", "np.from_dlpack(a)", ("m", "v"), False),
    ("import_pyarrow", "import pyarrow Array", "m.from_dlpack(p)", "np.from_dlpack(p)", ("m", "p"), False),
    # a plain (non-frozen) #[pyclass] (issue 33): `g` is the module's `Growable` (reshaped to
    # 4x4) or `Samples` (16 float64), whichever it has; its exports hold a shared borrow. (No
    # legacy row: a `Vec` is exported read-only, which a legacy capsule refuses; decision 0016.)
    ("plain_export_versioned", "plain class: versioned export", "g.__dlpack__(max_version=(1, 0))", "a.__dlpack__(max_version=(1, 0))", ("g",), False),
    ("plain_device", "plain class: device", "g.__dlpack_device__()", "a.__dlpack_device__()", ("g",), False),
    ("plain_np_from_ours", "plain class: np.from_dlpack", "np.from_dlpack(g)", "np.from_dlpack(a)", ("g",), False),
    # peers (no dlbind involved, except the last): the statement against numpy importing numpy
    ("peer_np_pyarrow", "peer: numpy imports pyarrow", "np.from_dlpack(p)", "np.from_dlpack(a)", ("p",), False),
    ("peer_tvm_numpy", "peer: tvm-ffi imports numpy", "tvm_ffi.from_dlpack(a)", "np.from_dlpack(a)", ("tvm_ffi",), False),
    ("peer_tvm_own", "peer: tvm-ffi imports its Tensor", "tvm_ffi.from_dlpack(v)", "np.from_dlpack(a)", ("v",), False),
    ("peer_tvm_table", "peer: tvm-ffi imports its table", "tvm_ffi.from_dlpack(w)", "np.from_dlpack(a)", ("w",), False),
    ("peer_tvm_ours", "peer: tvm-ffi imports ours", "tvm_ffi.from_dlpack(t)", "np.from_dlpack(a)", ("t", "tvm_ffi"), False),
    # floors
    ("floor_loop", "floor: loop only", "pass", None, (), True),
    ("floor_noop", "floor: Python call", "noop(t)", None, (), True),
    ("floor_object", "floor: new object", "object()", None, (), True),
]


# Peers measured in the same process (issue 52, `--peers DIR` / `--peer LABEL=MODULE`): each peer
# module `m` with its own tensor `t = m.from_dlpack(np.ones((4, 4), np.float32))` runs these rows'
# statements, byte for byte the ones dlbind's rows run (`m` and `t` rebound in `__main__` before
# each peer's statements), with the same warm-up, priming and N/2N pairs.
PEER_ROWS = ("export_legacy", "export_versioned", "device", "np_from_ours", "import_numpy", "import_own",
             "import_foreign_table", "import_tvm_tensor", "import_pyarrow")
# Rows only some peers have (nanobind's caster alone: `nb_peer.ndim(a)`), beside the same baseline.
PEER_EXTRA_ROWS = [
    ("import_caster", "caster alone (import of a, returns ndim)", "m.ndim(a)", "np.from_dlpack(a)", ("m", "a"), False),
]
# The peer table's operation column (the first cell differs from ROWS' labels: `--summarize` reads those).
PEER_LABELS = {
    "export_legacy": "export legacy", "export_versioned": "export versioned", "device": "device",
    "np_from_ours": "numpy imports x", "import_numpy": "import a numpy array", "import_own": "import own tensor",
    "import_foreign_table": "import a foreign C exchange table (tvm-ffi test wrapper w)",
    "import_tvm_tensor": "import a tvm-ffi Tensor", "import_pyarrow": "import a pyarrow Array",
    "import_caster": "caster alone", "floor_loop": "timeit loop floor",
}

# Targets: ratio to numpy's instructions in the same process (issue 23). Information, never a
# pass/fail test: the table says "meets" or "MISSES".
TARGETS = {
    "export_legacy": 0.75,
    "export_versioned": 0.60,
    "device": 0.30,
    "np_from_ours": 0.92,
    "import_numpy": 0.36,
    "import_own": 0.21,
    "import_foreign_table": 0.40,
}

# Issue 33's targets for a plain (non-frozen) class's exports: ahead of every peer on every
# export row, as for the frozen type. Information, like TARGETS (not in `--summarize`).
PLAIN_TARGETS = {
    "plain_export_versioned": 0.62,
    "plain_device": 0.31,
    "plain_np_from_ours": 0.96,
}

# The section of bench/results.md this benchmark owns (`--write` replaces it, keeping the rest:
# bench_dlpack.py's timeit tables).
BEGIN_MARK = "<!-- BEGIN bench_instructions.py -->"
END_MARK = "<!-- END bench_instructions.py -->"


def _commit() -> str:
    """The commit the measured build came from (short hash; `+dirty` with local changes)."""
    root = Path(__file__).resolve().parents[1]
    try:
        h = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                           text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return (h or "unknown") + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def write_section(path: Path, text: str, key: str = "") -> None:
    """Put `text` between the markers in `path` (replacing what was there), or append it. `key`
    names one of several sections (`--per-interpreter`: one per interpreter and build mode)."""
    begin, end = (BEGIN_MARK, END_MARK) if not key else (
        BEGIN_MARK.replace(" -->", f": {key} -->"), END_MARK.replace(" -->", f": {key} -->"))
    block = f"{begin}\n{text.rstrip()}\n{end}\n"
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    if begin in old and end in old:
        a = old.index(begin)
        b = old.index(end) + len(end)
        new = old[:a] + block.rstrip("\n") + old[b:]
    else:
        new = (old.rstrip("\n") + "\n\n" if old else "") + block
    path.write_text(new, encoding="utf-8")


# --------------------------------------------------------------------------------------------
# pymalloc priming (see the docstring): every size class's current pool gets free blocks to spare
# and one of our blocks held, so no allocation or free in the measured loop takes a slow path.
# --------------------------------------------------------------------------------------------

# CPython >= 3.10 on 64-bit builds uses 16 KiB pools (radix-tree obmalloc), older 4 KiB.
_POOL_BITS = 14 if sys.version_info >= (3, 10) and sys.maxsize > 2**32 else 12
_POOL_OVERHEAD = 48  # sizeof(struct pool_header), the first block's offset in a pool
_PRIME_MAX = 1 << 20  # blocks held in all before giving up (not pymalloc? the check says so)
_PRIME = {}  # filled on first use: objects made once, so priming allocates nothing else


def _prime_setup():
    import collections
    import functools
    ints = iter(range(1 << 20, 1 << 29))  # one-digit ints: 28 bytes, the 32-byte class
    _PRIME["makers"] = (None, object, ints.__next__) + tuple(
        functools.partial(bytes, 16 * c - 33) for c in range(3, 33))  # bytes(n): 33 + n bytes
    _PRIME["want"] = tuple(0 if c == 0 else min(((1 << _POOL_BITS) - _POOL_OVERHEAD) // (16 * c) // 2, 64)
                           for c in range(33))
    _PRIME["order"] = tuple(range(32, 2, -1)) + (1, 2)  # the int class last: the loop's own ints
    # deques: the object is a 232-byte block, made once; their storage is system malloc
    _PRIME["in_pool"] = collections.deque()
    _PRIME["queue"] = collections.deque()


def prime_pools(holder, heads=None):
    """Leave each of pymalloc's 32 size classes (16..512 bytes) with a current pool that has
    `want` (16..64) free blocks and at least one block held in `holder` (a deque, whose storage
    comes from the system allocator). Per class: allocate blocks of exactly that class, held,
    until one lands in a new pool (the pool being filled is then full, and holds r of ours);
    once a full pool holds more than `want` of ours, give the new block back, then `want` of
    ours in the full pool: its first free links it at the front of the class's list, where the
    next allocation looks. Nothing allocated before is freed meanwhile: no iterator objects
    (`while` loops over deques), helpers made once; the only transients are the loop's ints
    (the 32-byte class, primed last). heads (a dict with keys 1..32, for the self-check) gets
    each class's pool number."""
    if not _PRIME:
        _prime_setup()
    makers, wants = _PRIME["makers"], _PRIME["want"]
    in_pool, queue = _PRIME["in_pool"], _PRIME["queue"]
    bits, limit = _POOL_BITS, _PRIME_MAX
    queue.clear()
    queue.extend(_PRIME["order"])
    while queue:
        c = queue.popleft()
        make, want = makers[c], wants[c]
        cur = None
        in_pool.clear()
        while len(holder) < limit:
            x = make()
            p = id(x) >> bits
            if p != cur:
                if cur is not None and len(in_pool) > want:
                    if heads is not None:
                        heads[c] = cur
                    del x, p, cur
                    keep = len(in_pool) - want
                    while len(in_pool) > keep:
                        in_pool.pop()
                    break
                holder.extend(in_pool)
                in_pool.clear()
                cur = p
            in_pool.append(x)
        holder.extend(in_pool)
        in_pool.clear()


def prime_check():
    """None when, after priming, the next block of every class lands in the primed pool; else
    the classes (block sizes) where it does not."""
    import collections
    if not _PRIME:
        _prime_setup()
    holder = collections.deque()
    heads = dict.fromkeys(range(1, 33))
    prime_pools(holder, heads)
    bad = []
    for c in range(1, 33):
        x = _PRIME["makers"][c]()
        if heads[c] is None or id(x) >> _POOL_BITS != heads[c]:
            bad.append(16 * c)
        del x
    holder.clear()
    return bad or None


# --------------------------------------------------------------------------------------------
# child: runs under callgrind
# --------------------------------------------------------------------------------------------

def _child(args) -> int:
    import ctypes
    import gc
    import importlib
    import itertools

    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import numpy as np

    g = sys.modules["__main__"].__dict__
    notes: list[str] = []
    quick = args.quick

    def opt(name):
        try:
            return importlib.import_module(name)
        except Exception as e:  # noqa: BLE001
            notes.append(f"{name} not importable ({type(e).__name__}: {e}); its rows skipped")
            return None

    objs: dict = {"np": np, "_rep": itertools.repeat}

    def noop(x=None):
        return None

    objs["noop"] = noop
    objs["a"] = np.ones((4, 4), np.float32)
    m = opt(args.module)
    if m is not None:
        objs["m"] = m
        try:
            objs["t"] = m.from_dlpack(np.ones((4, 4), np.float32))
        except Exception as e:  # noqa: BLE001
            notes.append(f"{args.module}.from_dlpack(numpy) failed ({type(e).__name__}: {e}); dlbind rows skipped")
    if "t" not in objs:
        objs["t"] = objs["a"]  # the floor row noop(t) still runs; rows needing t are skipped
        have_t = False
    else:
        have_t = True
    if m is not None:
        # A plain #[pyclass] of the module (the demo's Growable, the downstream crate's Samples).
        try:
            if hasattr(m, "Growable"):
                objs["g"] = m.Growable([1.0] * 16)
                objs["g"].reshape(4, 4)
            elif hasattr(m, "Samples"):
                objs["g"] = m.Samples([1.0] * 16)
        except Exception as e:  # noqa: BLE001
            notes.append(f"{args.module}'s plain class could not be built ({type(e).__name__}: {e}); its rows skipped")
        if "g" in objs:
            notes.append(f"`g` is a {type(objs['g']).__module__}.{type(objs['g']).__qualname__} (a plain #[pyclass])")
    if not quick:
        pa = opt("pyarrow")
        if pa is not None:
            objs["pa"] = pa
            objs["p"] = pa.array(np.ones(16, np.float32))
        tvm_ffi = opt("tvm_ffi")
        if tvm_ffi is not None:
            objs["tvm_ffi"] = tvm_ffi
            try:
                objs["v"] = tvm_ffi.from_dlpack(objs["a"])
            except Exception as e:  # noqa: BLE001
                notes.append(f"tvm_ffi.from_dlpack(numpy) failed: {e}")
            Wrapper = getattr(getattr(tvm_ffi, "core", None), "DLTensorTestWrapper", None)
            if "v" in objs and Wrapper is not None:
                objs["w"] = Wrapper(objs["v"])
            elif "v" in objs:
                notes.append("tvm_ffi.core.DLTensorTestWrapper missing: no foreign C exchange table row")
            if "v" in objs:
                tv = type(objs["v"])
                has = any(getattr(tv, n, None) is not None
                          for n in ("__dlpack_c_exchange_api__", "__c_dlpack_exchange_api__"))
                notes.append(f"tvm_ffi {getattr(tvm_ffi, '__version__', '?')}: `v` ({tv.__module__}.{tv.__qualname__}) "
                             + ("publishes a C exchange table" if has else
                                "publishes no C exchange table, so `m.from_dlpack(v)` takes the __dlpack__ "
                                "path; `w` (tvm_ffi.core.DLTensorTestWrapper(v)) publishes one and is the "
                                "foreign-table row"))
    # Peers (`--peer LABEL=MODULE`): each with its own `m` and `t`, bound before its statements.
    main_bind = {"m": objs.get("m"), "t": objs["t"]}
    peers = []  # (label, {"m": module, "t": its tensor})
    for spec in args.peer or []:
        label, _, modname = spec.partition("=")
        pm = objs.get("tvm_ffi") if modname == "tvm_ffi" else opt(modname)
        if pm is None:
            notes.append(f"peer {label}: `{modname}` not importable; its column is empty")
            continue
        try:
            peers.append((label, {"m": pm, "t": pm.from_dlpack(np.ones((4, 4), np.float32))}))
        except Exception as e:  # noqa: BLE001
            notes.append(f"peer {label}: `{modname}.from_dlpack(numpy)` failed ({type(e).__name__}: {e}); its column is empty")
            continue
        tt = type(peers[-1][1]["t"])
        notes.append(f"peer {label}: module `{modname}` ({portable(getattr(pm, '__file__', None)) or 'built in'}), "
                     f"`t` is a {tt.__module__}.{tt.__qualname__}")
    g.update(objs)

    def available(needs, have=None):
        for n in needs:
            if have is not None and n in have:
                continue
            if n == "t" and not have_t:
                return False
            if n not in objs:
                return False
        return True

    rows, stmts = [], []
    only = set(args.rows.split(",")) if args.rows else None
    for key, label, stmt, base, needs, in_quick in ROWS:
        if quick and not in_quick:
            continue
        if only is not None and key not in only:
            continue
        if base is not None and base.startswith("np.from_dlpack(p)") and "p" not in objs:
            continue
        if not available(needs):
            continue
        rows.append({"key": key, "label": label, "stmt": stmt, "base": base})
        for s in (stmt, base):
            if s is not None and s not in stmts:
                stmts.append(s)
    # The peers' rows: statement keys `LABEL|stmt` (measured with that peer's m and t bound).
    binds = {}  # statement key -> (statement, the m/t to bind)
    for label, bind in peers:
        for key, rlabel, stmt, base, needs, in_quick in [r for r in ROWS if r[0] in PEER_ROWS] + PEER_EXTRA_ROWS:
            if quick and not in_quick:
                continue
            if only is not None and key not in only and key != "import_caster":
                continue
            if key == "import_caster" and not hasattr(bind["m"], "ndim"):
                continue
            if base is not None and base.startswith("np.from_dlpack(p)") and "p" not in objs:
                continue
            if not available(needs, have=("m", "t")):
                continue
            skey = f"{label}|{stmt}"
            binds[skey] = (stmt, bind)
            rows.append({"key": key, "label": rlabel, "stmt": skey, "base": base, "group": label})
            if skey not in stmts:
                stmts.append(skey)
            if base is not None and base not in stmts:
                stmts.append(base)

    def text_of(s):
        return binds[s][0] if s in binds else s

    def bind_for(s):
        g.update(binds[s][1] if s in binds else main_bind)

    # Each statement must run (and keep running) before it is measured.
    ok = []
    for s in stmts:
        try:
            bind_for(s)
            exec(compile(f"for _ in range(3): {text_of(s)}\n", "<check>", "exec"), g)
            ok.append(s)
        except Exception as e:  # noqa: BLE001
            notes.append(f"`{s}` raises {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}; skipped")
    bind_for(None)
    stmts = ok
    rows = [r for r in rows if r["stmt"] in stmts and (r["base"] is None or r["base"] in stmts)]

    # Optional check (only when the module has the demo's counter): does m.from_dlpack(w) go
    # through the foreign table? Information only, not used for the core rows.
    if any(r["key"] == "import_foreign_table" for r in rows):
        cnt = getattr(getattr(m, "_testing", None), "exchange_imports", None)
        if callable(cnt):
            try:
                before = cnt()
                m.from_dlpack(objs["w"])
                notes.append("`m.from_dlpack(w)` " + ("went through w's C exchange table"
                                                      if cnt() == before + 1 else
                                                      "did NOT go through w's C exchange table")
                             + f" ({args.module}._testing.exchange_imports counter)")
            except Exception:  # noqa: BLE001
                pass

    if sys.version_info < (3, 14):
        run = ctypes.pythonapi.PyRun_SimpleStringFlags
        run.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
        run.restype = ctypes.c_int
    else:
        # Py_AddPendingCall(PyRun_SimpleString, snippet): the eval loop makes the call (an
        # ordinary C call, which callgrind sees), at its next check, in the loop below.
        pending = ctypes.pythonapi.Py_AddPendingCall
        pending.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        pending.restype = ctypes.c_int
        simple = ctypes.cast(ctypes.pythonapi.PyRun_SimpleString, ctypes.c_void_p).value
        done = [0]

        def run(src, _flags):
            buf = ctypes.create_string_buffer(src + b"\n_done[0] += 1\n")
            g["_done"] = done
            want = done[0] + 1
            if pending(simple, ctypes.addressof(buf)) != 0:
                return -1
            for _ in range(10_000_000):
                if done[0] >= want:
                    return 0
            return -1

    # callgrind writes dump K of this process as <outdir>/cg.out.<pid>.K when the toggled
    # function returns; the newest K after each call is that call's dump (anything else in
    # the process that ran the function before, e.g. at start-up, just shifts the numbers).
    outdir, prefix = Path(args.plan).parent, f"cg.out.{os.getpid()}."

    def last_dump():
        ks = [int(f[len(prefix):]) for f in os.listdir(outdir)
              if f.startswith(prefix) and f[len(prefix):].isdigit()]
        return max(ks, default=0)

    calls = []  # in call order, each with its dump number
    import collections
    prime = not args.no_prime
    if prime:
        bad = prime_check()
        notes.append("pymalloc priming: " + ("checked, every size class's next block lands in its primed pool"
                                             if bad is None else
                                             f"NOT effective for block sizes {bad} (counts may vary between runs)"))
    gc.disable()
    n = args.n
    for s in stmts:
        bind_for(s)
        src = SNIPPET.format(stmt=text_of(s))
        g["_n"] = WARMUP
        exec(compile(src, "<warmup>", "exec"), g)
        srcb = src.encode()
        # Two (N, 2N) pairs, each in freshly primed pools and each after a throw-away call with
        # the same n as the first (after the priming, the first call through PyRun_* costs a few
        # thousand instructions more: the parser's, compiler's and malloc's first use). Nothing
        # allocated before the priming is freed until the pair is done: `_bench` is reset to None
        # outside the calls (each call then replaces None: no old function freed inside, no dict
        # resize).
        for _pair in range(2):
            g["_bench"] = None
            g["_n"] = n
            gc.collect()
            before = last_dump()
            pads = collections.deque()
            if prime:
                prime_pools(pads)
            rcs = []
            for i, k in enumerate((n, n, 2 * n)):
                if i:
                    g["_bench"] = None
                    g["_n"] = k
                rcs.append(run(srcb, None))
            pads.clear()
            del pads
            after = last_dump()
            ok = after == before + 3
            for i, (k, rc, role) in enumerate(zip((n, n, 2 * n), rcs, ("warm", "N", "2N"))):
                calls.append({"stmt": s, "n": k, "role": role, "rc": rc, "part": before + 1 + i if ok else None})
                if rc != 0:
                    notes.append(f"`{s}` failed under PyRun_SimpleStringFlags (rc {rc})")
    bind_for(None)
    gc.enable()

    info = {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "module": args.module,
        "module_file": portable(getattr(m, "__file__", None)) if m is not None else None,
        "build_mode": build_mode(args.module) if m is not None else None,
        "versions": {k: getattr(sys.modules[k], "__version__", "?")
                     for k in ("pyarrow", "tvm_ffi") if k in sys.modules},
        "prefix": sys.prefix,
    }
    Path(args.plan).write_text(json.dumps({"calls": calls, "rows": rows, "notes": notes,
                                           "info": info, "n": n}), encoding="utf-8")
    return 0


# --------------------------------------------------------------------------------------------
# parent
# --------------------------------------------------------------------------------------------

_TOTAL_RE = re.compile(r"^(?:summary|totals):\s*(\d+)", re.M)
_PART_RE = re.compile(r"^part:\s*(\d+)", re.M)


def _read_dumps(outdir: Path):
    """{K: total instructions} of every numbered dump cg.out.PID.K in outdir (one process)."""
    parts = {}
    for f in outdir.glob("cg.out.*.*"):
        k = f.name.rsplit(".", 1)[1]
        if not k.isdigit():
            continue
        text = f.read_text(encoding="utf-8", errors="replace")
        pm, tm = _PART_RE.search(text), _TOTAL_RE.search(text)
        if pm is None or tm is None or int(pm.group(1)) != int(k):
            raise SystemExit(f"unexpected callgrind file {f} (no part/summary line, or part != {k})")
        parts[int(k)] = int(tm.group(1))
    return parts


def _valgrind_version(vg):
    try:
        return subprocess.run([vg, "--version"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "?"


def _run_module(vg, module, args, keep_dir, peer_specs=(), peer_path=()):
    outdir = Path(keep_dir) / module if keep_dir else Path(tempfile.mkdtemp(prefix="cg_instr_"))
    outdir.mkdir(parents=True, exist_ok=True)
    for f in outdir.glob("cg.out.*"):
        f.unlink()
    plan = outdir / "plan.json"
    if plan.exists():
        plan.unlink()
    # DLBIND_BENCH_VALGRIND_ARGS: extra callgrind options for profiling (e.g. --dump-instr=yes,
    # for per-instruction counts read against `objdump -d`); they change no count.
    extra = os.environ.get("DLBIND_BENCH_VALGRIND_ARGS", "").split()
    cmd = [vg, "--tool=callgrind", "--collect-atstart=no", f"--toggle-collect={SYMBOL}",
           f"--dump-after={SYMBOL}", f"--callgrind-out-file={outdir}/cg.out.%p", *extra,
           sys.executable, str(Path(__file__).resolve()), "--child", "--module", module,
           "--n", str(args.n), "--plan", str(plan)] + (["--quick"] if args.quick else []) \
        + (["--rows", args.rows] if args.rows else []) \
        + (["--no-prime"] if args.no_prime else []) \
        + [f"--peer={p}" for p in peer_specs]
    env = dict(os.environ, PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               MKL_NUM_THREADS="1", JAX_PLATFORMS="cpu", PYTHONDONTWRITEBYTECODE="1")
    if peer_path:
        env["PYTHONPATH"] = os.pathsep.join(peer_path + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    print(f"[{module}] {' '.join(cmd[:6])} ... (this takes a while under valgrind)", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0 or not plan.exists():
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-8000:])
        raise SystemExit(f"[{module}] the callgrind child failed (exit {proc.returncode}); files in {outdir}")
    data = json.loads(plan.read_text(encoding="utf-8"))
    parts = _read_dumps(outdir)
    calls = data["calls"]
    bad = [c for c in calls if c["part"] is None or c["part"] not in parts]
    if bad:
        raise SystemExit(f"[{module}] {len(bad)} measured call(s) did not produce exactly one callgrind dump "
                         f"(first: {bad[0]}); is {SYMBOL} the function PyRun_SimpleStringFlags calls? "
                         f"files in {outdir}")
    totals = {}  # stmt -> [[I(N), I(2N)], ...] in call order
    for c in calls:
        if c["role"] == "N":
            totals.setdefault(c["stmt"], []).append([parts[c["part"]], None])
        elif c["role"] == "2N":
            totals[c["stmt"]][-1][1] = parts[c["part"]]
    per = {}
    n = data["n"]
    for s, lst in totals.items():
        ds = [(i2 - i1) / n for i1, i2 in lst]
        per[s] = {"per_call": min(ds), "pair_per_call": ds, "totals": lst,
                  "repeat_delta": max(ds) - min(ds), "fixed": lst[0][0] - n * min(ds)}
    if not keep_dir:
        shutil.rmtree(outdir, ignore_errors=True)
    stderr_tail = "\n".join(l for l in proc.stderr.splitlines()
                            if not l.startswith("==") and l.strip())[-2000:]
    return {"module": module, "wall_s": wall, "per": per, "rows": data["rows"], "notes": data["notes"],
            "info": data["info"], "n": n, "child_stderr": stderr_tail,
            "failed_calls": [c for c in calls if c["rc"] != 0]}


def _fmt(x):
    return "" if x is None else f"{x:,.0f}"


def _render(res, vg_version, quick):
    info = res["info"]
    per = res["per"]
    vers = ", ".join(f"{k} {v}" for k, v in info["versions"].items())
    head = (f"Run {_dt.datetime.now(_dt.timezone.utc):%Y-%m-%d %H:%M UTC}; python {info['python']}, "
            f"numpy {info['numpy']}" + (f", {vers}" if vers else "") +
            f"; module `{info['module']}`" + (f" (`{info['module_file']}`)" if info["module_file"] else "")
            + (f", built {info['build_mode']}" if info.get("build_mode") else "")
            + f"; N = {res['n']} (per call = (I(2N) - I(N)) / N); "
            f"{vg_version} callgrind, instructions (Ir) per call; valgrind run {res['wall_s']:.0f} s"
            + (" — **--quick run**" if quick else "") + f"; commit `{_commit()}`.")
    L = [head, "",
         "| row | statement | instr/call | baseline | instr/call | ratio | target | vs target | repeat Δ |",
         "|---|---|---:|---|---:|---:|---:|---|---:|"]
    for r in res["rows"]:
        if r.get("group"):
            continue
        s, b = r["stmt"], r["base"]
        ps = per[s]["per_call"]
        pb = per[b]["per_call"] if b else None
        ratio = f"{ps / pb:.2f}" if pb else ""
        tgt = TARGETS.get(r["key"], PLAIN_TARGETS.get(r["key"]))
        verdict = "" if tgt is None or not pb else ("meets" if ps / pb <= tgt else "MISSES")
        delta = max(per[s]["repeat_delta"], per[b]["repeat_delta"] if b else 0.0)
        L.append(f"| {r['label']} | `{s}` | {_fmt(ps)} | {'`' + b + '`' if b else ''} | {_fmt(pb)} | "
                 f"{ratio} | {'≤ ' + format(tgt, '.2f') if tgt else ''} | {verdict} | {delta:.2f} |")
    if res["notes"]:
        L += [""] + [f"- {n}" for n in res["notes"]]
    if res.get("peers"):
        L += [""] + _render_peers(res)
    return "\n".join(L) + "\n"


def _render_peers(res):
    """The peers table (issue 52): one row per operation, numpy's baseline, dlbind and each peer's
    count of the same statement in the same process (ratio to the baseline)."""
    per, labels = res["per"], [p["label"] for p in res["peers"]]
    cells = {}  # (key, group or "") -> (stmt key, base)
    for r in res["rows"]:
        cells[(r["key"], r.get("group") or "")] = (r["stmt"], r["base"])
    stmt_of = {r[0]: r[2] for r in ROWS + PEER_EXTRA_ROWS}
    keys = [k for k in (*PEER_ROWS, "import_caster", "floor_loop")
            if any((k, grp) in cells for grp in ["", *labels])]
    L = [f"### Peers, same process (`--peers`): {', '.join(labels)}", "",
         "| operation | numpy baseline | dlbind | " + " | ".join(labels) + " |",
         "|---|---|" + "---:|" * (1 + len(labels))]
    for k in keys:
        base = next((cells[(k, grp)][1] for grp in ["", *labels] if (k, grp) in cells), None)
        pb = per[base]["per_call"] if base and base in per else None
        row = [f"{PEER_LABELS.get(k, k)}: `{stmt_of[k]}`", f"`{base}` {_fmt(pb)}" if base else ""]
        for grp in ["", *labels]:
            c = cells.get((k, grp))
            if c is None or c[0] not in per:
                row.append("–")
                continue
            v = per[c[0]]["per_call"]
            row.append(_fmt(v) + (f" ({v / pb:.2f}×)" if pb else ""))
        L.append("| " + " | ".join(row) + " |")
    L += ["", "Same statements, priming and N/2N pairs as the table above; `m` and `t` are each peer's module "
          "and its own tensor (`t = m.from_dlpack(np.ones((4, 4), np.float32))`); ratio to numpy's row; "
          "–: the row does not apply or the peer lacks it."]
    for p in res["peers"]:
        if p.get("status") != "ok":
            L.append(f"- peer {p['label']}: NOT BUILT on this interpreter ({p.get('mode', '')}): {p.get('detail', '')}")
        elif p.get("detail"):
            L.append(f"- peer {p['label']} {p.get('version', '')}: {p['detail']}")
    return L


# Issue 32's targets for an abi3 build: ahead of the best peer's full-API build on each row.
ABI3_TARGETS = {
    "export_legacy": 0.80,
    "export_versioned": 0.62,
    "device": 0.31,
    "np_from_ours": 0.96,
    "import_numpy": 1.07,
    "import_own": 0.91,
    "import_foreign_table": 0.86,
}


def summarize(path: Path) -> str:
    """One markdown table from every `--per-interpreter` section of `path`: the target rows'
    ratios (count in parentheses) per interpreter and build mode, against the targets."""
    text = path.read_text(encoding="utf-8")
    sections = re.findall(r"<!-- BEGIN bench_instructions\.py: (.+?) -->\n(.*?)<!-- END", text, re.S)
    labels = {r[0]: (r[1], r[2]) for r in ROWS}
    cols = []
    for label, body in sections:
        vals = {}
        for line in body.splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            for key, (lab, stmt) in labels.items():
                if len(cells) > 5 and cells[0] == lab and key in TARGETS:
                    vals[key] = (cells[2], cells[5])
        cols.append((label.replace("CPython ", ""), "abi3" in label, vals))
    cols.sort(key=lambda c: (c[1], [int(x) for x in re.findall(r"\d+", c[0])[:2]]))
    head = "| call | target (full / abi3) | " + " | ".join(c[0] for c in cols) + " |"
    out = [head, "|---|---|" + "---:|" * len(cols)]
    for key in TARGETS:
        cells = []
        for _, abi3, vals in cols:
            if key not in vals:
                cells.append("")
                continue
            count, ratio = vals[key]
            target = (ABI3_TARGETS if abi3 else TARGETS)[key]
            miss = float(ratio) > target
            cells.append(f"{'**' if miss else ''}{ratio}{'**' if miss else ''} ({count})")
        out.append(f"| `{labels[key][1]}` | ≤ {TARGETS[key]:.2f} / < {ABI3_TARGETS[key]:.2f} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n\nRatio to numpy's own call in the same process (count of instructions per call); bold: misses its target."


def build_mode(module: str) -> str:
    """The module's build mode: `full API`, `abi3-layouts` (abi3 with dlbind's layout shortcuts,
    running on a version in their table), `abi3-layouts, limited API here` (the feature is on, this
    version is not in its table) or `abi3` (the limited API alone), as its `_testing.shortcuts()`
    reports it (dlbind's `stats::shortcuts`); for a module without that report, from its extension
    file's name (`*.abi3.so`: `abi3 (file name)`), else `full API`."""
    import importlib
    try:
        m = importlib.import_module(module)
    except Exception:  # noqa: BLE001 - the child run reports the import failure itself
        return "full API"
    try:
        rows = {n: (a, d) for n, a, d in m._testing.shortcuts()}
        if rows["full_api"][0]:
            return "full API"
        if rows["abi3_layouts"][0]:
            return "abi3-layouts"
        if "feature is off" not in rows["abi3_layouts"][1]:
            return "abi3-layouts, limited API here"
        return "abi3"
    except Exception:  # noqa: BLE001 - another module: no report, read the file name
        pass
    f = getattr(m, "__file__", None) or ""
    d = Path(f).parent if Path(f).name.startswith("__init__.") else None
    so = [p.name for p in d.iterdir() if p.suffix in (".so", ".pyd")] if d else [Path(f).name]
    return "abi3 (file name)" if any(".abi3." in n for n in so) else "full API"


def interpreter_label(module: str) -> str:
    """`CPython 3.13.0, full API`, `CPython 3.13.0, abi3-layouts` or `CPython 3.13.0, abi3`: the
    interpreter and the module's build mode (`build_mode`)."""
    return f"CPython {platform.python_version()}, {build_mode(module)}"


def _peer_list(args):
    """[{label, module, status, detail, ...}] and the PYTHONPATH entries for --peers/--peer."""
    peers, path = [], []
    if args.peers and not args.child:
        d = Path(args.peers)
        manifest = d / "peers.json"
        if not manifest.exists():
            raise SystemExit(f"--peers {args.peers}: no peers.json (run bench/peers/build.sh PYTHON first)")
        data = json.loads(manifest.read_text(encoding="utf-8"))
        want = "%d.%d" % sys.version_info[:2]
        if data.get("python") != want:
            raise SystemExit(f"--peers {args.peers}: built for python {data.get('python')}, this is {want}")
        for p in data["peers"]:
            peers.append({"label": p["name"], "module": p["module"], "status": p["status"],
                          "version": p.get("version", ""), "detail": p.get("detail", ""), "mode": data.get("mode", "")})
        path.append(str((d / "site").resolve()))
        if not args.quick:
            peers.append({"label": "tvm-ffi", "module": "tvm_ffi", "status": "ok", "version": "", "detail": ""})
    for spec in args.peer or []:
        label, _, mod = spec.partition("=")
        peers.append({"label": label, "module": mod or label, "status": "ok", "version": "", "detail": ""})
    return peers, path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--module", action="append", help="module under test (repeatable; default dlbind_demo)")
    ap.add_argument("--n", type=int, default=None, help="iterations N (2N is the other loop); default 2000, 200 with --quick")
    ap.add_argument("--quick", action="store_true", help="smoke run: small N, a few rows, no peers")
    ap.add_argument("--rows", metavar="KEY,KEY", help="only these rows (keys of ROWS, e.g. export_legacy,device)")
    ap.add_argument("--write", metavar="PATH", help="write the markdown table(s) into PATH, between its "
                    "<!-- BEGIN/END bench_instructions.py --> markers (appended when absent); e.g. bench/results.md")
    ap.add_argument("--per-interpreter", metavar="PATH",
                    help="write the table into PATH as this interpreter's section (one per CPython version "
                    "and build mode, full API or abi3), e.g. bench/results-interpreters.md")
    ap.add_argument("--json", metavar="PATH", help="write machine-readable results to PATH")
    ap.add_argument("--no-prime", action="store_true", help="do not prime pymalloc's pools before each round (see the docstring)")
    ap.add_argument("--keep", metavar="DIR", help="keep callgrind output files under DIR/<module>")
    ap.add_argument("--peers", metavar="DIR", default=os.environ.get("DLBIND_BENCH_PEERS"),
                    help="measure the peer modules bench/peers/build.sh built into DIR (its peers.json; "
                    "env DLBIND_BENCH_PEERS), plus tvm-ffi, in the same process, beside the first --module; "
                    "a peer that did not build is listed with its reason")
    ap.add_argument("--peer", action="append", metavar="LABEL=MODULE",
                    help="one more peer module (importable; repeatable), e.g. nanobind=nb_peer")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--plan", help=argparse.SUPPRESS)
    ap.add_argument("--summarize", metavar="PATH",
                    help="print one table of the target rows from every --per-interpreter section of PATH and exit")
    args = ap.parse_args(argv)
    if args.summarize:
        print(summarize(Path(args.summarize)))
        return 0
    if args.n is None:
        args.n = 200 if args.quick else 2000
    if args.child:
        args.module = (args.module or ["dlbind_demo"])[0]
        return _child(args)

    modules = args.module or ["dlbind_demo"]
    vg = shutil.which("valgrind")
    if vg is None:
        print("valgrind not found: the instruction-count benchmark needs `valgrind --tool=callgrind` "
              "(apt-get install valgrind). Nothing measured.")
        return 0
    vg_version = _valgrind_version(vg)
    t0 = time.perf_counter()
    peers, peer_path = _peer_list(args)
    results, md = [], []
    for i, module in enumerate(modules):
        mine = peers if i == 0 else []  # the peers run beside the first module only
        res = _run_module(vg, module, args, args.keep, [f"{p['label']}={p['module']}" for p in mine if p["status"] == "ok"],
                          peer_path if mine else ())
        res["peers"] = mine
        results.append(res)
        for c in res["failed_calls"]:
            print(f"[{module}] warning: `{c['stmt']}` (n={c['n']}) raised inside the measured call", file=sys.stderr)
        md.append(_render(res, vg_version, args.quick))
    wall = time.perf_counter() - t0
    text = "\n".join(md)
    print(text)
    print(f"wall time: {wall:.1f} s in all")
    if args.write:
        title = "## Instructions per call (callgrind, `bench/bench_instructions.py`)\n\n"
        write_section(Path(args.write), title + text)
    if args.per_interpreter:
        label = interpreter_label(modules[0])
        if peers:  # the peers' build mode beside dlbind's (the section key: one per pairing)
            pm = {p.get("mode") for p in peers if p.get("mode")}
            if pm:
                label += "; peers " + ("stable ABI" if pm == {"abi3"} else "full API")
        write_section(Path(args.per_interpreter), f"## {label}\n\n" + text, key=label)
    if args.json:
        Path(args.json).write_text(json.dumps({"valgrind": vg_version, "wall_s": wall, "quick": args.quick,
                                               "results": results}, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
