//! Must NOT compile: scripts/downstream.sh checks that the derive from the packaged crates
//! still reports misuse at the offending span (an unknown dtype name, an unknown key).
use dlbind::prelude::*;

#[pyclass(frozen)]
#[derive(DLPackExport)]
#[dlpack(dtype = "float33")]
struct Bad {
    #[dlpack(data)]
    bytes: Vec<u8>,
    #[dlpack(shape)]
    shape: Vec<usize>,
}

#[pyclass(frozen)]
#[derive(DLPackExport)]
struct Worse {
    #[dlpack(data, colour)]
    bytes: Vec<u8>,
    #[dlpack(shape)]
    shape: Vec<usize>,
}

fn main() {}
