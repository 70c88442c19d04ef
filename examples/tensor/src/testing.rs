//! `dlbind_demo._testing`: diagnostics and switches for dlbind's own tests and benchmarks, built
//! on `dlbind::stats` and `dlbind::tuning`. Not part of the demo's array API: a user's module
//! would not ship these.

use dlbind::prelude::*;
use dlbind::{stats, tuning};

/// How many `from_dlpack(t)` calls took a `Tensor` as a direct view of its storage (the
/// same-type shortcut: what `Tensor`'s own exchange table gives, without calling it).
#[pyfunction]
fn same_type_views() -> u64 {
    stats::same_type_views()
}

/// Turns the same-type shortcut off (`False`: `from_dlpack(t)` of a `Tensor` calls
/// `Tensor.__dlpack_c_exchange_api__` like any producer's table) or back on.
#[pyfunction]
fn set_same_type_views(on: bool) {
    tuning::set_same_type_views(on)
}

/// How many released `Tensor`s wait in the free list (`dlbind::tuning::enable_freelist`), and whether new ones
/// are built directly (the layout probe passed): diagnostics for the tests.
#[pyfunction]
fn tensor_freelist_stats(py: Python<'_>) -> (Option<usize>, bool, usize) {
    (
        stats::freelist_len::<crate::Tensor>(py),
        stats::builds_directly::<crate::Tensor>(py),
        crate::TENSOR_FREELIST,
    )
}

/// How many managed tensors this module exported whose deleter has not run yet.
#[pyfunction]
fn live_exports() -> usize {
    stats::live_exports()
}

/// How many shared borrows of non-frozen objects (`Growable`) dlbind's live exports hold now.
#[pyfunction]
fn live_export_borrows() -> usize {
    stats::live_export_borrows()
}

/// How many freed manager blocks the export path keeps for reuse now (0 to 2; always 0 with
/// `DLBIND_FREELIST=0`): diagnostics for the tests.
#[pyfunction]
fn spare_blocks_held() -> usize {
    stats::spare_blocks_held()
}

/// Sets the byte limit of dlbind's reuse pool for freed huge host buffers and returns the old
/// limit (0 disables the pool and releases what it holds). Used by the benchmark to time copies
/// into freshly mapped memory.
#[pyfunction]
fn set_copy_pool_limit(bytes: usize) -> usize {
    tuning::set_pool_limit(bytes)
}

/// How many tensors this process imported by calling a producer's C exchange table
/// (`type(x).__dlpack_c_exchange_api__`) instead of `__dlpack__`. A `Tensor` imported as a
/// direct view of another `Tensor` does not call it and is counted by `same_type_views`.
#[pyfunction]
fn exchange_imports() -> u64 {
    stats::exchange_imports()
}

/// How many imports (this process) read a `numpy.ndarray` through numpy's array header instead of
/// calling its `__dlpack__` (dlbind's numpy fast path; `DLBIND_NUMPY_FAST_PATH=0` turns it off).
#[pyfunction]
fn numpy_fast_imports() -> u64 {
    stats::numpy_fast_imports()
}

/// `dlbind::stats::shortcuts`: `(name, active, detail)` for each CPython shortcut, as this
/// build (full API or abi3) and interpreter take them.
#[pyfunction]
fn shortcuts(py: Python<'_>) -> Vec<(&'static str, bool, String)> {
    dlbind::stats::shortcuts(py)
        .into_iter()
        .map(|s| (s.name, s.active, s.detail))
        .collect()
}

/// Adds the `_testing` submodule to `parent` (also importable as `dlbind_demo._testing`).
pub(crate) fn add_submodule(parent: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = parent.py();
    let m = PyModule::new(py, "_testing")?;
    m.add_function(wrap_pyfunction!(live_exports, &m)?)?;
    m.add_function(wrap_pyfunction!(live_export_borrows, &m)?)?;
    m.add_function(wrap_pyfunction!(spare_blocks_held, &m)?)?;
    m.add_function(wrap_pyfunction!(tensor_freelist_stats, &m)?)?;
    m.add_function(wrap_pyfunction!(same_type_views, &m)?)?;
    m.add_function(wrap_pyfunction!(set_same_type_views, &m)?)?;
    m.add_function(wrap_pyfunction!(exchange_imports, &m)?)?;
    m.add_function(wrap_pyfunction!(numpy_fast_imports, &m)?)?;
    m.add_function(wrap_pyfunction!(set_copy_pool_limit, &m)?)?;
    m.add_function(wrap_pyfunction!(shortcuts, &m)?)?;
    parent.add_submodule(&m)?;
    // `import dlbind_demo._testing` looks in `sys.modules`, which `add_submodule` does not fill.
    // maturin installs the extension as `dlbind_demo.dlbind_demo` inside a package that
    // re-exports it: the submodule is registered under the package's name too.
    let name = parent.name()?.to_string();
    let modules = py.import("sys")?.getattr("modules")?;
    modules.set_item(format!("{name}._testing"), &m)?;
    if let Some((package, _)) = name.rsplit_once('.') {
        modules.set_item(format!("{package}._testing"), &m)?;
        m.setattr("__name__", format!("{package}._testing"))?;
    }
    Ok(())
}
