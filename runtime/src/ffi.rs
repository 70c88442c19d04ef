//! The DLPack C ABI (`dlpack.h` 1.3) as Rust types, generated from `spec/dlpack.yaml`.
//!
//! Everything in this module comes from `generated/rust/types.rs` (Contract 1): open enums as
//! `#[repr(transparent)]` newtypes, `#[repr(C)]` structs, flag masks and capsule names.
#![allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    missing_docs,
    missing_debug_implementations
)]
#![allow(clippy::all)]

include!("generated/types.rs");
