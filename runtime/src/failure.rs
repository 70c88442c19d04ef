//! Failure kinds and the Python exception each maps to (generated from the spec).
#![allow(clippy::all)]

include!("generated/errors.rs");
