// Issue 50: `Buffer::imported` is unsafe. The buffer may export its memory writable while the
// `&ImportedTensor` (and a `&[T]` from it) lives.
use dlbind::Buffer;

fn first(buf: &Buffer) -> Option<f32> {
    let t = buf.imported()?;
    t.as_slice::<f32>().ok()?.first().copied()
}

fn main() {
    let _ = first;
}
