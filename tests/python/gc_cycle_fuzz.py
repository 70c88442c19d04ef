"""Random reference cycles under frequent collection (run by test_gc_cycles.py in a subprocess,
since what it guards against is a crash): exporters of every kind dlbind imports from, views
and re-exports of them (dlbind, numpy, tvm-ffi, capsules, memoryviews), tied into cycles through
plain objects and caught exceptions' tracebacks, then dropped.

Usage: python gc_cycle_fuzz.py SEED ROUNDS  ->  prints "ok <live_exports>".
"""
import array
import ctypes
import gc
import io
import random
import sys

import numpy as np

import dlbind_demo as m
import dlpack_helpers as H


class Box:
    pass


class BytesOwner(bytearray):
    pass


def main(seed, rounds):
    import tvm_ffi

    rng = random.Random(seed)
    gc.set_threshold(5, 2, 2)
    makers = [
        lambda: memoryview(bytearray(rng.randbytes(16))),
        lambda: BytesOwner(rng.randbytes(16)),
        lambda: H.OnlyArrayInterface(np.arange(4.0)),
        lambda: np.arange(6, dtype=np.int32),
        lambda: m.from_dlpack(np.arange(5.0)),
        lambda: (ctypes.c_uint8 * 8)(),
        lambda: io.BytesIO(b"abcdefgh").getbuffer(),
        lambda: array.array("i", [1, 2, 3]),
        lambda: tvm_ffi.from_dlpack(np.arange(3.0)),
    ]
    imports = [
        lambda o: m.from_dlpack(o),
        lambda o: m.from_dlpack(H.Forward(m.from_dlpack(o))),  # a dlbind capsule import
        lambda o: np.from_dlpack(m.from_dlpack(o)),
        lambda o: tvm_ffi.from_dlpack(m.from_dlpack(o)),
        lambda o: m.from_dlpack(m.from_dlpack(o).__dlpack__(max_version=rng.choice([None, (1, 3)]))),
        lambda o: memoryview(m.from_dlpack(o)),
    ]

    def raiser(objs):
        held = list(objs)
        raise ValueError(len(held))

    for _ in range(rounds):
        pool = [rng.choice(makers)() for _ in range(rng.randrange(1, 5))]
        for _ in range(rng.randrange(1, 6)):
            try:
                pool.append(rng.choice(imports)(rng.choice(pool)))
            except (BufferError, TypeError, ValueError, AttributeError):
                pass
        boxes = [Box() for _ in range(rng.randrange(1, 4))]
        for box in boxes:
            box.items = rng.sample(pool, rng.randrange(1, len(pool) + 1))
            box.other = rng.choice(boxes)
            box.me = box
        del box  # the loop variable would keep the last cycle reachable
        if rng.random() < 0.5:
            try:
                raiser(pool + boxes)
            except ValueError as e:
                e.me = e
                boxes[0].err = e
        keep = rng.choice(pool) if rng.random() < 0.3 else None
        del pool, boxes
        if rng.random() < 0.3:
            gc.collect()
        if keep is not None and not isinstance(keep, np.ndarray):
            try:
                bytes(memoryview(keep))
            except (TypeError, BufferError, ValueError):
                pass
        del keep
    gc.collect()
    print("ok", m._testing.live_exports(), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
