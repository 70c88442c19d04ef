//! The crate root (`[lib] path` in Cargo.toml) of `my_arrays`, a user's crate built on dlbind as
//! published. Its Rust is the README's, verbatim: `src/lib.rs` is the README's `src/lib.rs`
//! block (`Samples`, the module `my_arrays`) and `src/frame.rs` its "Importing as your own type"
//! block (`Frame`, the module `frames`); `tests/python/test_readme_downstream.py` fails when
//! either differs from the README. `src/image.rs` (the module `images`) and `src/matrix.rs`
//! (`matrices`) are the registry READMEs' blocks (runtime/README.md, macros/README.md), checked by
//! `tests/python/test_crate_readmes.py`. The one shared library exports all those modules
//! (`PyInit_my_arrays`, `PyInit_frames`, `PyInit_images`, `PyInit_matrices`) and
//! `downstream_checks` (`src/checks.rs`: C compiled against the header dlbind publishes, and
//! dlbind's export counter), which no README shows.

include!("lib.rs");

mod checks;
mod frame;
mod image;
mod matrix;
