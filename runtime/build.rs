//! Emits PyO3's `Py_3_*` cfgs, so version-dependent CPython symbols (see `cpython.rs`) resolve
//! to the right name on every supported interpreter.
fn main() {
    pyo3_build_config::use_pyo3_cfgs();
}
