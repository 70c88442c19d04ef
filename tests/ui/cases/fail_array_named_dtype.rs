// Issue 50: an ndarray field's layout is trusted, so its dtype is its element type's. Naming
// another (f64 over 16 bytes of `u8`: 128 bytes described over 16) is refused at compile time.
use dlbind::prelude::*;

#[pyclass(frozen)]
#[derive(DLPackExport)]
#[dlpack(dtype = "float64")]
struct Bytes {
    #[dlpack(array)]
    a: ndarray::Array1<u8>,
}

#[pyclass(frozen)]
#[derive(DLPackExport)]
struct Tagged {
    #[dlpack(array)]
    a: ndarray::Array1<u8>,
    #[dlpack(dtype)]
    dtype: DLDataType,
}

fn main() {}
