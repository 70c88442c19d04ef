//! dlbind-codegen: compile a declarative DLPack spec (YAML) into Rust `repr(C)`
//! types and tables, a C header, Python stubs and markdown docs.
//!
//! Data flow: spec text → [`spec`] (serde model) → [`validate`] (checks, with
//! `file:line:col` from [`positions`]) → [`ir::Ir`] → backends (tera templates)
//! → files under `generated/`.
//!
//! ```no_run
//! # #[cfg(feature = "generate")] {
//! // build.rs of a crate with its own spec:
//! dlbind_codegen::Builder::new()
//!     .spec("spec/my_dlpack.yaml")
//!     .out_dir(std::env::var("OUT_DIR").unwrap())
//!     .generate()
//!     .unwrap();
//! # }
//! ```
//!
//! With `default-features = false` only the spec parser and the IR are built
//! (no template engine); the derive macro uses [`ir::Ir::embedded`].

// docs.rs documents with `--cfg docsrs` on nightly: `doc_cfg` marks what needs `generate`
// (docs/decisions/0026-docs-rs-build.md).
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod diff;
pub mod error;
pub mod ir;
pub mod positions;
pub mod spec;
pub mod validate;

#[cfg(feature = "generate")]
pub mod backend;
#[cfg(feature = "generate")]
pub mod builder;
#[cfg(feature = "generate")]
pub mod project;
#[cfg(feature = "generate")]
pub mod templates;

#[cfg(feature = "generate")]
pub use builder::{Builder, CheckReport, Generated};
pub use error::{Diagnostic, Error, Result};
pub use ir::Ir;
