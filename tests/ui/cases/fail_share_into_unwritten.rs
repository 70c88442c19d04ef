// Issue 33: a safe `share_into` that claims a value it never wrote. With the old signature
// (`&mut MaybeUninit<Self>` and a `bool`) this compiled, and the runtime then published a
// released instance's stale bytes as a value: a double drop from safe code. The hook now takes a
// `Slot` and must return the `Written` that only writing makes, so this no longer compiles.
use dlbind::prelude::*;

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

    fn share_into(_source: &Bound<'_, Self>, _out: &mut std::mem::MaybeUninit<Self>) -> bool {
        true
    }
}

fn main() {}
