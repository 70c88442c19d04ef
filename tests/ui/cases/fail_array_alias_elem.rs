// Issue 50: the dtype of an ndarray field comes from the array's element type, not from how the
// field is spelled. An alias that makes `Array1<f64>` hold one-byte elements does not compile
// (it exported one-byte elements as float64 before).
use std::marker::PhantomData;

use dlbind::prelude::*;

type Array1<T> = ndarray::Array1<(u8, PhantomData<T>)>;

#[pyclass(frozen)]
#[derive(DLPackExport)]
struct Spelled {
    #[dlpack(array)]
    a: Array1<f64>,
}

#[dlbind::pymethods]
impl Spelled {}

fn main() {}
