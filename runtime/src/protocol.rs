//! Python protocol names (method and keyword names), generated from the spec.
#![allow(clippy::all)]

include!("generated/protocol.rs");
