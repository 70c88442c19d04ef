//! Python protocol names (method and keyword names), generated from the spec.
#![allow(clippy::all)]

include!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../generated/rust/protocol.rs"
));
