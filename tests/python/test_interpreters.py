"""Which CPython shortcuts this build and interpreter take (issue 32), printed and asserted.

Every shortcut dlbind takes past the C API (a struct field read, a private symbol, an identity
cache) states a precondition, checks it (at run time, or at compile time for the version and
the build mode) and has a fallback. `dlbind::stats::shortcuts` reports what this process
does; this test prints that table (CI shows it for every matrix entry) and asserts it is what
docs/manual/interpreters.md says for this interpreter and build mode (full API or abi3).
"""
import os
import sys

import numpy as np
import pytest

import dlbind_demo as m

V = sys.version_info[:2]


def table():
    np.from_dlpack(m.from_dlpack(np.arange(3.0)))  # probes the numpy header path
    m.from_dlpack(np.arange(3.0))
    return {name: (active, detail) for name, active, detail in m._testing.shortcuts()}


def expected(abi3, layouts, freelists_env):
    """The table of docs/manual/interpreters.md: shortcut -> active, for this interpreter.
    `layouts`: an abi3 build with the `abi3-layouts` feature."""
    full = not abi3
    free = full and freelists_env
    # An abi3 build takes the layout shortcuts only with the feature, on the versions whose
    # layouts it knows (3.11-3.14); by default it uses the limited API alone.
    known = layouts and V < (3, 15)
    return {
        "full_api": full,
        "abi3_layouts": abi3 and known,
        "capsule_fields": full or known,
        "small_ints_by_identity": True,
        "version_tag_caches": full,
        "mro_lookup": full,
        "getattr_optional": True,
        "dlpack_vectorcall_entry": full or known,
        "type_dict_write": full,
        "tuple_macros": full,
        "kwnames_identity_cache": True,
        "max_version_identity": True,
        "freelists": free,
        # _Py_NewReference is exported by 3.11 to 3.14.
        "freelist_new_reference": free and V < (3, 15),
        "direct_release": free,
        "numpy_header": True,
    }


def test_the_shortcuts_of_this_interpreter_and_build(capsys):
    t = table()
    abi3 = not t["full_api"][0]
    with capsys.disabled():
        print(f"\nCPython {sys.version.split()[0]} ({'abi3' if abi3 else 'full API'}): dlbind shortcuts")
        for name, (active, detail) in t.items():
            print(f"  {'on ' if active else 'off'}  {name:<24} {detail}")
    layouts = abi3 and "feature is off" not in t["abi3_layouts"][1]
    want = expected(abi3, layouts, os.environ.get("DLBIND_FREELIST") != "0")
    assert {k: v[0] for k, v in t.items()} == want
    # In either mode the first export binds `__dlpack__` / `__dlpack_device__` to the class
    # itself (full API: its dict and PyType_Modified; abi3: setattr), so CPython specialises the
    # method call.
    m.Tensor.arange(2, dtype="float32").__dlpack__()
    for name in ("__dlpack__", "__dlpack_device__"):
        d = m.Tensor.__dict__[name]
        assert type(d).__name__ == "method_descriptor" and d.__objclass__ is m.Tensor, (name, d)
    # The details name the variant each version has.
    if t["capsule_fields"][0]:
        assert ("3.13+" in t["capsule_fields"][1]) == (V >= (3, 13)), t["capsule_fields"]
    if not abi3:
        assert ("nonzero" in t["version_tag_caches"][1]) == (V >= (3, 13)), t["version_tag_caches"]
        assert t["getattr_optional"][1] == "linked"
    elif layouts and V < (3, 15):
        # abi3 with the feature finds the renamed function at run time, by the running version's
        # name, in the interpreter's own image.
        want_sym = "PyObject_GetOptionalAttr" if V >= (3, 13) else "_PyObject_LookupAttr"
        assert t["getattr_optional"][1] == want_sym
    else:
        # abi3 by default: the limited API's getattr, no symbol looked up by name.
        assert t["getattr_optional"][1] == "PyObject_GetAttr"
    if abi3:
        # No free list is installed, though the demo asks for one: enable_freelist succeeds
        # and does nothing, so the same module source builds in either mode.
        many = [m.from_dlpack(m.Tensor.arange(3, dtype="float32")) for _ in range(10)]
        del many
        length, direct, _ = m._testing.tensor_freelist_stats()
        assert (length, direct) == (None, False)


def test_abi3_and_full_builds_agree_on_behaviour_of_what_a_shortcut_replaces():
    """The paths behind the shortcuts give the same answers in either mode: a keyword call
    (`dlpack_vectorcall_entry`, `kwnames_identity_cache`), a foreign type's `__dlpack__`
    lookup (`version_tag_caches`, `mro_lookup`), capsule fields (`capsule_fields`)."""
    t = m.Tensor.arange(4, dtype="float32")
    for _ in range(3):
        c = t.__dlpack__(max_version=(1, 0), copy=None, dl_device=None)
        assert type(c).__name__ == "PyCapsule" and "dltensor_versioned" in repr(c)
        c = t.__dlpack__(stream=None)
        assert "dltensor" in repr(c) and "versioned" not in repr(c)

    class P:
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, **kw):
            return self.a.__dlpack__(**kw)

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    a = np.arange(5.0)
    for _ in range(3):
        assert m.from_dlpack(P(a)).tobytes() == a.tobytes()
    # The class changes: a cached lookup must not answer for the old one.
    P.__dlpack__ = lambda self, **kw: np.arange(2.0).__dlpack__(**kw)
    assert m.from_dlpack(P(a)).shape == (2,)
    with pytest.raises(TypeError):
        t.__dlpack__(1)
