// Issue 41: a data field named like `Vec` but not std's is not trusted for its pointer and
// length: the derive reads every data field through `DataSource` (whose impls vouch for the
// storage), so a look-alike without that impl does not compile.
use dlbind::prelude::*;

struct Vec<T>(std::vec::Vec<T>);

impl<T> std::ops::Deref for Vec<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.0
    }
}

#[pyclass(frozen)]
#[derive(DLPackExport)]
struct LookAlike {
    #[dlpack(data)]
    values: Vec<f32>,
    #[dlpack(shape)]
    shape: [usize; 1],
}

#[dlbind::pymethods]
impl LookAlike {}

fn main() {}
