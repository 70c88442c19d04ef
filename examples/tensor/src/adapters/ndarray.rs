//! `dlbind_demo.adapters.ndarray_*`: the ndarray adapter (`dlbind::adapters::ndarray`). Arrays
//! built in Rust leave as `Tensor`s without a copy (the array moves into the tensor), and
//! Python arrays come in as `ndarray` views, fixed-dimension or dynamic.

use std::sync::Mutex;

use dlbind::adapters::ndarray::ndarray::{
    ArcArray, Array, Array2, Axis, CowArray, Ix1, Ix2, IxDyn, s,
};
use dlbind::adapters::ndarray::{NdTensor, export, export_view, view, view_mut};
use dlbind::prelude::*;
use num_complex::Complex;
use pyo3::exceptions::PyValueError;
use pyo3::types::PyComplex;

use crate::Tensor;

/// A `Tensor` over an adapter's export (no copy).
fn tensor(py: Python<'_>, t: Result<ImportedTensor, DlpackError>) -> PyResult<Tensor> {
    <Tensor as FromDLPack>::from_imported(py, t?)
}

/// A `rows` x `cols` array of `0, 1, 2, ...` in `dtype` (`float64`, `float32`, `int64`, `bool`:
/// odd numbers, `complex128`: `k - k*j`), optionally with both axes reversed (negative strides).
#[pyfunction]
#[pyo3(signature = (rows, cols, dtype = "float64", reversed = false))]
fn ndarray_grid(
    py: Python<'_>,
    rows: usize,
    cols: usize,
    dtype: &str,
    reversed: bool,
) -> PyResult<Tensor> {
    fn rev<A>(mut a: Array2<A>, reversed: bool) -> Array2<A> {
        if reversed {
            a.invert_axis(Axis(0));
            a.invert_axis(Axis(1));
        }
        a
    }
    let k = |i: usize, j: usize| i * cols + j;
    let t = match dtype {
        "float64" => export(rev(
            Array2::from_shape_fn((rows, cols), |(i, j)| k(i, j) as f64),
            reversed,
        )),
        "float32" => export(rev(
            Array2::from_shape_fn((rows, cols), |(i, j)| k(i, j) as f32),
            reversed,
        )),
        "int64" => export(rev(
            Array2::from_shape_fn((rows, cols), |(i, j)| k(i, j) as i64),
            reversed,
        )),
        "bool" => export(rev(
            Array2::from_shape_fn((rows, cols), |(i, j)| k(i, j) % 2 == 1),
            reversed,
        )),
        "complex128" => export(rev(
            Array2::from_shape_fn((rows, cols), |(i, j)| {
                Complex::new(k(i, j) as f64, -(k(i, j) as f64))
            }),
            reversed,
        )),
        other => {
            return Err(PyValueError::new_err(format!(
                "ndarray_grid: no dtype {other:?}"
            )));
        }
    };
    tensor(py, t)
}

/// Clones of `ArcArray`s exported with `shared=True`, kept here so the export is read-only.
static SHARED: Mutex<Vec<ArcArray<f64, Ix1>>> = Mutex::new(Vec::new());

/// `[0.0, 1.0, ...]` as an `ArcArray`: with `shared=True` a clone stays in Rust (the `Tensor`
/// is then read-only), else the tensor holds it alone (writable).
#[pyfunction]
#[pyo3(signature = (n, shared = false))]
fn ndarray_arc(py: Python<'_>, n: usize, shared: bool) -> PyResult<Tensor> {
    let a: ArcArray<f64, Ix1> = Array::from_iter((0..n).map(|k| k as f64)).into_shared();
    if shared {
        SHARED.lock().unwrap().push(a.clone());
    }
    tensor(py, export(a))
}

/// For each `ArcArray` kept by `ndarray_arc(shared=True)`: whether Rust holds it alone again
/// (its exported clone was dropped, exactly once). Clears the list.
#[pyfunction]
fn ndarray_arc_release() -> Vec<bool> {
    SHARED
        .lock()
        .unwrap()
        .drain(..)
        .map(|a| a.is_unique())
        .collect()
}

/// A `CowArray` export: an owned one moves, a borrowed one (a column slice) is copied.
#[pyfunction]
fn ndarray_cow(py: Python<'_>, borrowed: bool) -> PyResult<Tensor> {
    let a = Array2::from_shape_fn((3, 4), |(i, j)| (10 * i + j) as i32);
    if borrowed {
        tensor(py, export(CowArray::from(a.slice(s![.., 1..3]))))
    } else {
        tensor(py, export(CowArray::from(a)))
    }
}

/// `ndarray_cow` handed to Python once (`dlbind::adapters::Handoff`): the borrowed one is a
/// copy, and the handoff says so (`IS_COPIED`).
#[pyfunction]
fn ndarray_cow_handoff(borrowed: bool) -> PyResult<dlbind::adapters::Handoff> {
    let a = Array2::from_shape_fn((3, 4), |(i, j)| (10 * i + j) as i32);
    let t = if borrowed {
        export(CowArray::from(a.slice(s![.., 1..3])))?
    } else {
        export(CowArray::from(a))?
    };
    Ok(dlbind::adapters::Handoff::new(t)?)
}

/// A frozen class holding a `rows` x `cols` `float32` array; `rows(...)` exports views of it.
#[pyclass(frozen, module = "dlbind_demo.adapters")]
struct NdGrid {
    a: Array2<f32>,
}

#[pymethods]
impl NdGrid {
    #[new]
    fn new(rows: usize, cols: usize) -> Self {
        NdGrid {
            a: Array2::from_shape_fn((rows, cols), |(i, j)| (i * cols + j) as f32),
        }
    }

    /// Rows `start..stop` with `step` (negative: reversed), a read-only `Tensor` viewing this
    /// object's array (the object stays alive as long as the view).
    #[pyo3(signature = (start, stop, step = 1))]
    fn rows(slf: &Bound<'_, Self>, start: isize, stop: isize, step: isize) -> PyResult<Tensor> {
        if step == 0 {
            return Err(PyValueError::new_err("step must not be 0"));
        }
        tensor(
            slf.py(),
            export_view(slf, |g| g.a.slice(s![start..stop;step, ..])),
        )
    }
}

/// The sum of a float64 array of any rank (a view: no copy).
#[pyfunction]
fn ndarray_sum(x: &Bound<'_, PyAny>) -> PyResult<f64> {
    Ok(NdTensor::<f64, IxDyn>::from_py(x)?.view()?.sum())
}

/// The trace of a 2-D float64 array (`Ix2`: any other rank is a BufferError).
#[pyfunction]
fn ndarray_trace(x: &Bound<'_, PyAny>) -> PyResult<f64> {
    let t = dlbind::from_dlpack(x, None, None)?;
    Ok(view::<f64, Ix2>(&t)?.diag().sum())
}

/// Multiplies a writable float64 array in place (read-only data and overlapping strides are a
/// BufferError).
#[pyfunction]
fn ndarray_scale(x: &Bound<'_, PyAny>, k: f64) -> PyResult<()> {
    let mut t = dlbind::from_dlpack(x, None, None)?;
    // SAFETY: the one handle of `x`'s memory this call made, used with the GIL held: no
    // Python code runs meanwhile, and no other handle of it lives in this module.
    unsafe { view_mut::<f64, IxDyn>(&mut t) }?.mapv_inplace(|v| v * k);
    Ok(())
}

/// How many elements of a bool array are true.
#[pyfunction]
fn ndarray_count_true(x: &Bound<'_, PyAny>) -> PyResult<usize> {
    let t = NdTensor::<bool, IxDyn>::from_py(x)?;
    Ok(t.view()?.iter().filter(|&&b| b).count())
}

/// The sum of a complex128 array.
#[pyfunction]
fn ndarray_complex_sum<'py>(x: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyComplex>> {
    let s: Complex<f64> = NdTensor::<Complex<f64>, IxDyn>::from_py(x)?.view()?.sum();
    Ok(PyComplex::from_doubles(x.py(), s.re, s.im))
}

/// A float64 array imported once and held (`NdTensor`): the producer stays alive with it.
#[pyclass(frozen, module = "dlbind_demo.adapters")]
struct NdHeld {
    t: NdTensor<f64, IxDyn>,
}

#[pymethods]
impl NdHeld {
    #[new]
    fn new(x: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(NdHeld {
            t: NdTensor::from_py(x)?,
        })
    }

    fn sum(&self) -> PyResult<f64> {
        Ok(self.t.view()?.sum())
    }

    #[getter]
    fn shape(&self) -> Vec<usize> {
        self.t
            .tensor()
            .shape()
            .iter()
            .map(|&n| n as usize)
            .collect()
    }
}

pub(super) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(ndarray_grid, m)?)?;
    m.add_function(wrap_pyfunction!(ndarray_arc, m)?)?;
    m.add_function(wrap_pyfunction!(ndarray_arc_release, m)?)?;
    m.add_function(wrap_pyfunction!(ndarray_cow, m)?)?;
    m.add_function(wrap_pyfunction!(ndarray_cow_handoff, m)?)?;
    m.add_function(wrap_pyfunction!(ndarray_sum, m)?)?;
    m.add_function(wrap_pyfunction!(ndarray_trace, m)?)?;
    m.add_function(wrap_pyfunction!(ndarray_scale, m)?)?;
    m.add_function(wrap_pyfunction!(ndarray_count_true, m)?)?;
    m.add_function(wrap_pyfunction!(ndarray_complex_sum, m)?)?;
    m.add_function(wrap_pyfunction!(live_rust_owned_tensors, m)?)?;
    m.add_class::<NdGrid>()?;
    m.add_class::<NdHeld>()?;
    Ok(())
}

/// How many adapter tensors over Rust-owned memory (ndarray arrays, images, safetensors
/// bytes) are alive: `dlbind::adapters::live_rust_owned_tensors`, for the leak tests.
#[pyfunction]
fn live_rust_owned_tensors() -> usize {
    dlbind::adapters::live_rust_owned_tensors()
}
