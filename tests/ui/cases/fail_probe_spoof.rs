// Issue 50: a trait in the user's scope cannot answer the derive's type probes. One with the
// probe's method on the probe of the user's own type makes the call ambiguous: a compile error,
// never a memo turned on for a shape that can change, or a constructor the type does not have.
use std::sync::atomic::AtomicI64;

use dlbind::__private::probe::Probe;
use dlbind::__private::{Constructor, FixedProbe};
use dlbind::prelude::*;

/// A shape whose values can change while shared.
struct Shifting(AtomicI64, [i64; 1]);

impl std::ops::Index<std::ops::RangeFull> for Shifting {
    type Output = [i64];
    fn index(&self, _: std::ops::RangeFull) -> &[i64] {
        &self.1
    }
}

// (What the derive asked of a shape before issue 50; unused now.)
#[allow(dead_code)]
impl Shifting {
    fn len(&self) -> usize {
        1
    }
}

trait Fixed {
    fn dlbind_fixed(self) -> bool;
}
impl Fixed for FixedProbe<Shifting> {
    fn dlbind_fixed(self) -> bool {
        true
    }
}

trait HasConstructor {
    fn dlbind_constructor(self) -> Option<Constructor>;
}
impl HasConstructor for Probe<Frame> {
    fn dlbind_constructor(self) -> Option<Constructor> {
        None
    }
}

#[pyclass(frozen)]
#[derive(DLPackExport)]
#[dlpack(dtype = "float32")]
struct Frame {
    #[dlpack(data)]
    buf: Buffer,
    #[dlpack(shape)]
    shape: Shifting,
}

#[dlbind::pymethods]
impl Frame {}

fn main() {}
