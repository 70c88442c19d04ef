//! Failure kinds and the Python exception each maps to (generated from the spec).
#![allow(clippy::all)]

include!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../generated/rust/errors.rs"
));
