//! The tera templates, embedded at compile time and compiled once per process.

use std::sync::OnceLock;

use tera::Tera;

use crate::error::{Error, Result};

/// (name, source) of every template; one per output kind and per node kind.
pub const TEMPLATES: &[(&str, &str)] = &[
    ("c/header.h", include_str!("../templates/c/header.h.tera")),
    ("c/struct.h", include_str!("../templates/c/struct.h.tera")),
    ("c/enum.h", include_str!("../templates/c/enum.h.tera")),
    ("c/fn.h", include_str!("../templates/c/fn.h.tera")),
    ("c/flags.h", include_str!("../templates/c/flags.h.tera")),
    (
        "rust/types.rs",
        include_str!("../templates/rust/types.rs.tera"),
    ),
    (
        "rust/struct.rs",
        include_str!("../templates/rust/struct.rs.tera"),
    ),
    (
        "rust/enum.rs",
        include_str!("../templates/rust/enum.rs.tera"),
    ),
    ("rust/fn.rs", include_str!("../templates/rust/fn.rs.tera")),
    (
        "rust/flags.rs",
        include_str!("../templates/rust/flags.rs.tera"),
    ),
    (
        "rust/dtypes.rs",
        include_str!("../templates/rust/dtypes.rs.tera"),
    ),
    (
        "rust/elements.rs",
        include_str!("../templates/rust/elements.rs.tera"),
    ),
    (
        "rust/streams.rs",
        include_str!("../templates/rust/streams.rs.tera"),
    ),
    (
        "rust/errors.rs",
        include_str!("../templates/rust/errors.rs.tera"),
    ),
    (
        "rust/protocol.rs",
        include_str!("../templates/rust/protocol.rs.tera"),
    ),
    (
        "rust/derive_table.rs",
        include_str!("../templates/rust/derive_table.rs.tera"),
    ),
    (
        "python/dlpack.pyi",
        include_str!("../templates/python/dlpack.pyi.tera"),
    ),
    (
        "python/dlpack_ctypes.py",
        include_str!("../templates/python/dlpack_ctypes.py.tera"),
    ),
    (
        "python/ctypes_struct.py",
        include_str!("../templates/python/ctypes_struct.py.tera"),
    ),
    (
        "python/ctypes_enum.py",
        include_str!("../templates/python/ctypes_enum.py.tera"),
    ),
    (
        "python/ctypes_fn.py",
        include_str!("../templates/python/ctypes_fn.py.tera"),
    ),
    (
        "python/ctypes_flags.py",
        include_str!("../templates/python/ctypes_flags.py.tera"),
    ),
    (
        "cython/dlpack.pxd",
        include_str!("../templates/cython/dlpack.pxd.tera"),
    ),
    (
        "cython/struct.pxd",
        include_str!("../templates/cython/struct.pxd.tera"),
    ),
    (
        "cython/enum.pxd",
        include_str!("../templates/cython/enum.pxd.tera"),
    ),
    (
        "cython/fn.pxd",
        include_str!("../templates/cython/fn.pxd.tera"),
    ),
    (
        "cython/flags.pxd",
        include_str!("../templates/cython/flags.pxd.tera"),
    ),
    (
        "docs/dtypes.md",
        include_str!("../templates/docs/dtypes.md.tera"),
    ),
    (
        "docs/devices.md",
        include_str!("../templates/docs/devices.md.tera"),
    ),
    (
        "docs/streams.md",
        include_str!("../templates/docs/streams.md.tera"),
    ),
    (
        "docs/exceptions.md",
        include_str!("../templates/docs/exceptions.md.tera"),
    ),
];

/// The compiled template set (compiled on first use, then shared).
pub fn tera() -> Result<&'static Tera> {
    static TERA: OnceLock<std::result::Result<Tera, String>> = OnceLock::new();
    TERA.get_or_init(|| {
        let mut t = Tera::default();
        t.autoescape_on(vec![]);
        t.add_raw_templates(TEMPLATES.iter().copied())
            .map_err(|e| Error::from(e).to_string())?;
        Ok(t)
    })
    .as_ref()
    .map_err(|e| Error::Template(e.clone()))
}
