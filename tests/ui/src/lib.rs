//! trybuild compile tests for `#[derive(DLPackExport)]` live in `tests/ui.rs` and `cases/`.
