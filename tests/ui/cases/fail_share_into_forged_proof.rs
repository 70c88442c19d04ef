// Issue 33: the proof that a slot was filled cannot be made without filling it: `Written` has no
// public constructor.
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

    fn share_into<'a>(_source: &Bound<'_, Self>, _out: Slot<'a, Self>) -> Option<Written<'a, Self>> {
        Some(Written { _brand: std::marker::PhantomData, _value: std::marker::PhantomData })
    }
}

fn main() {}
