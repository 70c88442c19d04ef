//! `dlbind diff OLD NEW`: what changed between two specs, at the IR level, and whether each
//! change keeps the ABI.
//!
//! Both specs are parsed and validated first (an invalid one is a spec error with
//! `file:line:col`, exit status 2). [`compare`] walks the two [`Ir`]s (classify.rs) and
//! returns a [`Report`] of [`Change`]s ([`model`]), which prints itself (`Display`, report.rs).
//! A change is [`Compat::Compatible`] (an addition to an open enum, a new flag, struct, dtype,
//! stream rule or failure kind) or [`Compat::Break`] (a removed or renumbered value, a field
//! whose type, offset or size changed, a struct whose size changed, a remapped exception, ...).

mod classify;
pub mod model;
mod report;

pub use model::{Change, ChangeKind, Compat, Report};

use crate::error::Result;
use crate::ir::Ir;

/// Compare two validated specs.
pub fn compare(old: &Ir, new: &Ir) -> Report {
    let mut changes = Vec::new();
    classify::all(old, new, &mut changes);
    Report { changes }
}

/// Parse, validate and compare two spec files (`old`, `new` name them in diagnostics).
pub fn compare_files(old: &std::path::Path, new: &std::path::Path) -> Result<Report> {
    let a = Ir::from_path(old)?;
    let b = Ir::from_path(new)?;
    Ok(compare(&a, &b))
}
