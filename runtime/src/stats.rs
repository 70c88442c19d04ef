//! Process-wide counters, for tests, leak checks and diagnostics. Reading one costs a load;
//! the hot paths update them without locks (the GIL orders the updates).
//!
//! | counter | counts |
//! |---|---|
//! | [`live_exports`] | managed tensors exported whose deleter has not run yet (0 when nothing leaks) |
//! | [`live_export_borrows`] | shared borrows of non-frozen objects that live exports hold |
//! | [`spare_blocks_held`] | freed manager blocks kept for the next export (0 to 2) |
//! | [`exchange_imports`] | imports through a producer's C exchange table |
//! | [`same_type_views`] | `from_dlpack(t)` calls served as a direct view of your own type |
//! | [`numpy_fast_imports`] | imports that read a `numpy.ndarray`'s header instead of calling `__dlpack__` |
//! | [`freelist_len`] / [`builds_directly`] | a type's free list: how many wait, and whether instances are built directly |
//! | [`shortcuts`] | which CPython shortcuts this build and interpreter take (not a counter: a report) |

pub use crate::bridges::numpy_fast_imports;
pub use crate::cpython::freelist::{builds_directly, freelist_len};
pub use crate::exchange::{exchange_imports, same_type_views};
pub use crate::export::borrow::live_export_borrows;
pub use crate::export::{live_exports, spare_blocks_held};

/// One of the CPython shortcuts dlbind takes where a check shows it is valid ([`shortcuts`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Shortcut {
    /// Its name, as in the manual's table (docs/manual/interpreters.md).
    pub name: &'static str,
    /// Whether this process takes it.
    pub active: bool,
    /// What it does here, or what is done instead.
    pub detail: String,
}

/// Which CPython shortcuts this build (full API or abi3) takes on the running interpreter:
/// each has a precondition, checked at run time (or at compile time for the version), and a
/// fallback. Checks not made yet are made now, except the numpy header's, which needs an
/// ndarray import first (`"not probed yet"`).
pub fn shortcuts(py: pyo3::Python<'_>) -> Vec<Shortcut> {
    let _ = py;
    let abi3 = cfg!(Py_LIMITED_API);
    let gil = !cfg!(Py_GIL_DISABLED);
    let full = !abi3;
    let s = |name, active, detail: &str| Shortcut {
        name,
        active,
        detail: detail.to_string(),
    };
    // SAFETY: the GIL is held (`py`).
    let capsule = unsafe { crate::cpython::capsule::current_layout() };
    // SAFETY: as above.
    let ints = unsafe { crate::cpython::ints::by_identity() };
    let freelists = full && gil && crate::cpython::freelist::freelists_allowed();
    vec![
        s(
            "full_api",
            full,
            if full {
                "built for this interpreter's full C API"
            } else {
                "built for the limited API (abi3): one wheel for every CPython from 3.11"
            },
        ),
        s(
            "capsule_fields",
            capsule != crate::cpython::capsule::Layout::CApi,
            match capsule {
                crate::cpython::capsule::Layout::Plain => {
                    "PyCapsule written by field (3.11, 3.12 layout)"
                }
                crate::cpython::capsule::Layout::Gc => {
                    "PyCapsule written by field (3.13+ layout, GC-allocated)"
                }
                crate::cpython::capsule::Layout::CApi => "PyCapsule_New / PyCapsule_GetName calls",
            },
        ),
        s(
            "small_ints_by_identity",
            ints,
            if ints {
                "cached small ints read by address"
            } else {
                "PyLong_AsLongLongAndOverflow"
            },
        ),
        s(
            "version_tag_caches",
            crate::cpython::typecache::ACTIVE,
            if !full {
                "no tp_version_tag in the limited API: type lookups every call"
            } else if !gil {
                "free-threaded build: no shared caches"
            } else if cfg!(Py_3_13) {
                "keyed by a nonzero tp_version_tag (3.13+)"
            } else {
                "keyed by tp_version_tag under Py_TPFLAGS_VALID_VERSION_TAG"
            },
        ),
        s(
            "mro_lookup",
            full,
            if full {
                "_PyType_Lookup"
            } else {
                "getattr on the type"
            },
        ),
        s(
            "getattr_optional",
            true,
            crate::cpython::api::getattr_optional_source(),
        ),
        s(
            "dlpack_vectorcall_entry",
            full,
            if full {
                "__dlpack__'s descriptor has dlbind's vectorcall entry"
            } else {
                "CPython's method_vectorcall_FASTCALL_KEYWORDS"
            },
        ),
        s(
            "type_dict_write",
            full,
            if full {
                "tp_dict + PyType_Modified"
            } else {
                "setattr on the type"
            },
        ),
        s(
            "tuple_macros",
            full,
            if full {
                "PyTuple_GET_ITEM / GET_SIZE inlined"
            } else {
                "PyTuple_GetItem / PyTuple_Size"
            },
        ),
        s(
            "kwnames_identity_cache",
            gil,
            if gil {
                "last keyword tuple by identity"
            } else {
                "parsed every call"
            },
        ),
        s(
            "max_version_identity",
            true,
            "last max_version tuple by identity",
        ),
        s(
            "freelists",
            freelists,
            if !full {
                "abi3: tp_alloc / tp_free cannot be replaced"
            } else if !gil {
                "free-threaded build"
            } else if freelists {
                "types that enable_freelist keep released instances"
            } else {
                "DLBIND_FREELIST=0"
            },
        ),
        s(
            "direct_release",
            freelists,
            if freelists {
                "tp_dealloc without PyO3's trampoline"
            } else {
                "PyO3's tp_dealloc"
            },
        ),
        match crate::bridges::header_path_state() {
            None => s(
                "numpy_header",
                false,
                "not probed yet (no ndarray imported)",
            ),
            Some(true) => s("numpy_header", true, "numpy.ndarray's header read directly"),
            Some(false) => s(
                "numpy_header",
                false,
                "probe refused or DLBIND_NUMPY_FAST_PATH=0: __dlpack__ called",
            ),
        },
    ]
}
