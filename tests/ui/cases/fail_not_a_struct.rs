use dlbind::prelude::*;

#[pyclass]
#[derive(DLPackExport)]
enum Kind {
    A,
    B,
}

fn main() {}
