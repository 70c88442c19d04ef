//! Text form of a [`Report`]: one line per change, then a summary line.
//!
//! ```text
//! compatible  added    enum value   DLDeviceType::kDLTPU = 19
//! BREAK       changed  field        DLTensor.ndim: offset 16 -> 20
//! 1 compatible, 1 breaking: ABI break
//! ```

use std::fmt;

use super::model::{ChangeKind, Compat, Report};

impl fmt::Display for ChangeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ChangeKind::Added => "added",
            ChangeKind::Removed => "removed",
            ChangeKind::Changed => "changed",
        })
    }
}

impl fmt::Display for Compat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Compat::Compatible => "compatible",
            Compat::Break => "BREAK",
        })
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.changes.is_empty() {
            return writeln!(f, "no changes");
        }
        for c in &self.changes {
            let line = format!(
                "{:<11} {:<8} {:<17} {}{}{}",
                c.compat.to_string(),
                c.kind.to_string(),
                c.subject,
                c.name,
                if c.detail.is_empty() { "" } else { ": " },
                c.detail
            );
            writeln!(f, "{}", line.trim_end())?;
        }
        let (ok, breaks) = self.counts();
        let verdict = if breaks > 0 {
            "ABI break"
        } else {
            "compatible"
        };
        writeln!(f, "{ok} compatible, {breaks} breaking: {verdict}")
    }
}
