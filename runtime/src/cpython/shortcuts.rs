//! The report of which shortcuts this process takes (`dlbind::stats::shortcuts`): for each,
//! whether its precondition holds in this build mode and interpreter, and what runs instead
//! when it does not. Tested on every interpreter of the matrix (tests/python/test_interpreters.py).

/// One of the CPython shortcuts dlbind takes where a check shows it is valid
/// (`dlbind::stats::shortcuts`).
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

/// The report behind `stats::shortcuts`; `numpy_header`: the numpy header path's state
/// (`None`: not probed yet).
pub(crate) fn report(py: pyo3::Python<'_>, numpy_header: Option<bool>) -> Vec<Shortcut> {
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
    let capsule = unsafe { super::capsule::current_layout() };
    // SAFETY: as above.
    let ints = unsafe { super::ints::by_identity() };
    let freelists = full && gil && super::freelist::freelists_allowed();
    let descr = super::boundary::method_descr_layout_known();
    #[cfg(all(Py_LIMITED_API, feature = "abi3-layouts"))]
    let abi3_layouts = super::abi3_layouts::running().is_some();
    #[cfg(not(all(Py_LIMITED_API, feature = "abi3-layouts")))]
    let abi3_layouts = false;
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
            "abi3_layouts",
            abi3_layouts,
            if full {
                "full API: the layouts of the version built for"
            } else if abi3_layouts {
                "abi3 with the abi3-layouts feature, on a version in its table"
            } else if cfg!(feature = "abi3-layouts") {
                "abi3 with the abi3-layouts feature, on a version not in its table: the limited API"
            } else {
                "abi3: the limited API only (the abi3-layouts feature is off)"
            },
        ),
        s(
            "capsule_fields",
            capsule != super::capsule::Layout::CApi,
            match capsule {
                super::capsule::Layout::Plain => "PyCapsule written by field (3.11, 3.12 layout)",
                super::capsule::Layout::Gc => {
                    "PyCapsule written by field (3.13+ layout, GC-allocated)"
                }
                super::capsule::Layout::CApi => {
                    "PyCapsule_New / PyCapsule_GetName calls (a layout this build does not know)"
                }
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
            super::typecache::ACTIVE,
            if !full {
                "no tp_version_tag in the limited API: immutable types cached by identity, other classes looked up every call"
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
            super::api::getattr_optional_source(),
        ),
        s(
            "dlpack_vectorcall_entry",
            descr,
            if !descr {
                "CPython's method_vectorcall_FASTCALL_KEYWORDS (abi3: no descriptor layout)"
            } else if full {
                "__dlpack__'s descriptor has dlbind's vectorcall entry"
            } else {
                "__dlpack__'s descriptor has dlbind's vectorcall entry (abi3: a layout this version is known to have)"
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
            "freelist_new_reference",
            freelists && super::freelist::new_reference_exported(),
            if !freelists {
                "no free list"
            } else if super::freelist::new_reference_exported() {
                "reused instances keep their type reference: _Py_NewReference"
            } else {
                "PyObject_Init (the interpreter exports no _Py_NewReference)"
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
        match numpy_header {
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
