use dlbind::prelude::*;

#[pyclass(frozen)]
#[derive(DLPackExport)]
enum Kind {
    A,
    B,
}

fn main() {}
