// Issue 33: a proof kept from another slot (here one that would live forever, as a proof stashed
// in a static from an earlier call would) does not prove this call's slot: `Written` is
// invariant in its lifetime, which is the call's own.
use dlbind::prelude::*;
use dlbind::{Slot, Written};

#[pyclass(frozen)]
struct Frame {
    buf: Buffer,
    len: i64,
}

impl FromDLPack for Frame {
    fn from_imported(_py: Python<'_>, t: ImportedTensor) -> PyResult<Self> {
        let len = t.shape()[0];
        Ok(Frame { buf: Buffer::from(t), len })
    }

    fn from_imported_into<'a>(
        _py: Python<'_>,
        _tensor: ImportedTensor,
        _out: Slot<'a, Self>,
    ) -> Result<Written<'a, Self>, ImportedTensor> {
        Ok(kept_from_an_earlier_call())
    }
}

fn kept_from_an_earlier_call() -> Written<'static, Frame> {
    unimplemented!()
}

fn main() {}
