#!/usr/bin/env python3
"""CUDA exchange benchmark: dlbind_demo against torch (and CuPy) in ONE process, as ratios.

    python bench/bench_gpu.py            # prints a markdown table (needs a GPU, torch with CUDA)

Without a CUDA driver, or without torch built with CUDA, it prints why and exits 0: CI's
machine has no GPU, so this runs only where one is lent. No targets: the issues set none for
GPU memory. Method as bench_dlpack.py: timeit, GC off, the minimum over the repeats divided by
`number`; each row's baseline is the peer doing the same exchange in the same run. Rows "on a
side stream" run inside `torch.cuda.stream(s)`, where the exchange must order two streams (an
event recorded and waited on).
"""
from __future__ import annotations

import os
import sys
import timeit

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
import dlpack_helpers as H  # noqa: E402


def best_ns(stmt, number=5000, repeat=7) -> float:
    return min(timeit.repeat(stmt, number=number, repeat=repeat)) / number * 1e9


def main() -> int:
    if not H.HAS_CUDA:
        print(f"bench_gpu: skipped: {H.NO_CUDA_REASON}")
        return 0
    try:
        import torch
    except ImportError:
        print("bench_gpu: skipped: torch is not installed")
        return 0
    if not torch.cuda.is_available():
        print("bench_gpu: skipped: this torch has no CUDA support")
        return 0
    import numpy as np

    import dlbind_demo as m

    cuda = H.SPEC.device_type("kDLCUDA")
    x = torch.ones(4, device="cuda")
    t = m.from_dlpack(m.from_dlpack(np.ones(4, np.float32)), device=(cuda, 0))

    xd = H.Forward(x)  # forwards __dlpack__ / __dlpack_device__: no table, the __dlpack__ path
    rows = []

    def pair(name, ours, base_name, base):
        a, b = best_ns(ours), best_ns(base)
        rows.append((name, a, base_name, b))

    pair("`m.from_dlpack(x)` torch CUDA, torch's table", lambda: m.from_dlpack(x),
         "`torch.from_dlpack(x)`", lambda: torch.from_dlpack(x))
    pair("`m.from_dlpack(xd)` torch CUDA, `__dlpack__` path", lambda: m.from_dlpack(xd),
         "`torch.from_dlpack(xd)`", lambda: torch.from_dlpack(xd))
    pair("`torch.from_dlpack(t)` dlbind CUDA Tensor", lambda: torch.from_dlpack(t),
         "`torch.from_dlpack(x)` torch tensor", lambda: torch.from_dlpack(x))
    with torch.cuda.stream(torch.cuda.Stream()):
        pair("`m.from_dlpack(x)` on a side stream (table + event)", lambda: m.from_dlpack(x),
             "`torch.from_dlpack(x)` on a side stream", lambda: torch.from_dlpack(x))
        pair("`torch.from_dlpack(t)` on a side stream (event)", lambda: torch.from_dlpack(t),
             "`torch.from_dlpack(x)` on a side stream", lambda: torch.from_dlpack(x))
    try:
        import cupy

        c = cupy.ones(4, dtype=cupy.float32)
        pair("`m.from_dlpack(c)` CuPy", lambda: m.from_dlpack(c),
             "`cupy.from_dlpack(c)`", lambda: cupy.from_dlpack(c))
        pair("`cupy.from_dlpack(t)` dlbind CUDA Tensor", lambda: cupy.from_dlpack(t),
             "`cupy.from_dlpack(c)`", lambda: cupy.from_dlpack(c))
    except ImportError:
        print("(CuPy not installed: its rows are left out)")

    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}, Python {sys.version.split()[0]}\n")
    print("| ours | ns | baseline | ns | ratio |")
    print("|---|---:|---|---:|---:|")
    for name, a, base_name, b in rows:
        print(f"| {name} | {a:,.0f} | {base_name} | {b:,.0f} | {a / b:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
