//! The changes `dlbind diff` reports.

/// Whether a change keeps binaries built against the old spec working.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Compat {
    /// Old binaries keep working (an addition to an open set, a new optional piece).
    Compatible,
    /// Old binaries or their users can break (layout, numbering, removal, remapping).
    Break,
}

/// What happened to the thing a change is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChangeKind {
    Added,
    Removed,
    Changed,
}

/// One difference between the old and the new spec.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub kind: ChangeKind,
    pub compat: Compat,
    /// What kind of thing changed: `enum value`, `struct`, `field`, `dtype`, `stream rule`, ...
    pub subject: &'static str,
    /// Which one: `DLDeviceType::kDLTPU`, `DLTensor.ndim`, `bcomplex32`, ...
    pub name: String,
    /// The value(s): `19`, `offset 16 -> 20`, `BufferError -> ValueError`.
    pub detail: String,
}

/// Every change between two specs, in spec order (old spec's order for removals).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub changes: Vec<Change>,
}

impl Report {
    /// Whether any change breaks the ABI.
    pub fn has_breaks(&self) -> bool {
        self.changes.iter().any(|c| c.compat == Compat::Break)
    }

    /// The CLI's exit status: 0 when every change is compatible, 1 on any break.
    pub fn exit_code(&self) -> i32 {
        i32::from(self.has_breaks())
    }

    /// How many changes are compatible and how many break.
    pub fn counts(&self) -> (usize, usize) {
        let breaks = self
            .changes
            .iter()
            .filter(|c| c.compat == Compat::Break)
            .count();
        (self.changes.len() - breaks, breaks)
    }
}
