//! Everything dlbind knows about DLPack, **generated** from `spec/dlpack.yaml` by `dlbind
//! generate` (the runtime includes its copy of `generated/rust/*.rs`, kept equal by `dlbind
//! check` and the bootstrap test). Read-only tables: edit the spec, not these modules.
//!
//! | module | generated from | holds |
//! |---|---|---|
//! | [`types`] | `structs:`, `enums:`, `flags:`, `capsules:` | the C ABI as `#[repr(C)]` types, version, flags, capsule names |
//! | [`dtypes`] | `dtypes:` | the dtype table: names, codes, bits, numpy typestrs, buffer formats |
//! | [`elements`] | `dtypes:` (`rust:`) | [`DLPackElement`](elements::DLPackElement): Rust element types and their dtype |
//! | [`streams`] | `streams:` | per-device stream rules (`resolve_stream`, consumer defaults) |
//! | [`errors`] | `errors:` | [`FailureKind`](errors::FailureKind) and the Python exception of each |
//! | [`protocol`] | `protocol:` | method and keyword names (`__dlpack__`, `max_version`, …) |

/// The DLPack C ABI (`dlpack.h` 1.3): open enums as `#[repr(transparent)]` newtypes,
/// `#[repr(C)]` structs, flag masks, version and capsule names (`generated/rust/types.rs`).
#[allow(
    non_upper_case_globals,
    non_camel_case_types,
    non_snake_case,
    missing_docs,
    missing_debug_implementations,
    clippy::all
)]
pub mod types {
    include!("../generated/types.rs");
}

/// The spec's dtype table (`generated/rust/dtypes.rs`).
#[allow(clippy::all)]
pub mod dtypes {
    include!("../generated/dtypes.rs");
}

pub mod elements;

/// Failure kinds and the Python exception each maps to (`generated/rust/errors.rs`).
#[allow(clippy::all)]
pub mod errors {
    include!("../generated/errors.rs");
}

/// Python protocol names: method and keyword names (`generated/rust/protocol.rs`).
#[allow(clippy::all)]
pub mod protocol {
    include!("../generated/protocol.rs");
}

#[allow(clippy::all)]
pub mod streams;
