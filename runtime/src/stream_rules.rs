//! The spec's per-device stream rules (generated): `resolve_stream` and
//! `consumer_default_stream`.
#![allow(clippy::all)]

include!(concat!(env!("CARGO_MANIFEST_DIR"), "/../generated/rust/streams.rs"));
