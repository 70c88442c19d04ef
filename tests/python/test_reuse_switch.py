"""`DLBIND_FREELIST=0`: dlbind's memory reuse off (the `Tensor` free list and the export path's
spare manager blocks), as `scripts/memcheck.sh`'s second run sets it; each case runs in a fresh
interpreter, since the switch is read once per process."""

import os
import subprocess
import sys

import dlbind_demo as m

# An abi3 build has no free lists (the limited API cannot replace `tp_alloc`; see
# test_interpreters.py), but keeps its spare manager blocks.
FREELISTS_BUILT = dict((n, a) for n, a, _ in m._testing.shortcuts())["full_api"]


def test_DLBIND_FREELIST_0_turns_every_reuse_off_and_everything_still_works():
    # The switch scripts/memcheck.sh uses for its second run: released Tensors and manager
    # blocks are really freed, so a use after release is visible to the checker.
    code = (
        "import dlbind_demo as m, numpy as np\n"
        "t = m.Tensor.arange(6, dtype='float32')\n"
        "vs = [m.from_dlpack(t) for _ in range(100)]\n"
        "assert all(np.array_equal(np.from_dlpack(v), np.arange(6, dtype=np.float32)) for v in vs)\n"
        "del vs\n"
        "c = t.__dlpack__(); v = t.__dlpack__(max_version=(1, 3)); del c, v\n"
        "print(m._testing.tensor_freelist_stats()[0], m._testing.spare_blocks_held(), m._testing.live_exports())\n"
    )
    for value in ("0", "1"):
        env = dict(os.environ, DLBIND_FREELIST=value)
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        length, spares, live = r.stdout.split()
        assert live == "0", r.stdout
        if value == "0":
            assert (length, spares) == ("None", "0"), r.stdout
        else:
            if FREELISTS_BUILT:
                assert length != "None" and int(length) > 0, r.stdout
            else:
                assert length == "None", r.stdout
            assert spares == "2", "a freed block of each kind is kept: " + r.stdout
