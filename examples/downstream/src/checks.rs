//! `downstream_checks`: what the README does not show. C code compiled against the header dlbind
//! publishes (`DEP_DLBIND_INCLUDE`, csrc/abi.c) reads tensors dlbind exported, and reports the
//! struct layout it sees; `live_exports` is dlbind's count of exports not yet released. A module
//! of its own (`PyInit_downstream_checks` in the same shared library), so that the README's two
//! modules stay exactly as the README writes them.

use dlbind::prelude::*;
use pyo3::types::PyCapsule;

unsafe extern "C" {
    fn downstream_c_layout(out: *mut u64);
    fn downstream_c_sum_f32(m: *const dlbind::spec::types::DLManagedTensorVersioned, ok: *mut i32) -> f64;
}

/// `(c, rust)`: the DLPack struct layout as csrc/abi.c (compiled against dlbind's published
/// header) sees it, and as dlbind's Rust types have it.
#[pyfunction]
fn abi_layouts() -> ([u64; 8], [u64; 8]) {
    use dlbind::spec::types::{DLDataType, DLManagedTensorVersioned, DLTensor};
    use std::mem::{offset_of, size_of};
    let mut c = [0u64; 8];
    // SAFETY: writes exactly 8 values into `c`.
    unsafe { downstream_c_layout(c.as_mut_ptr()) };
    let rust = [
        size_of::<DLTensor>() as u64,
        offset_of!(DLTensor, shape) as u64,
        offset_of!(DLTensor, byte_offset) as u64,
        size_of::<DLManagedTensorVersioned>() as u64,
        offset_of!(DLManagedTensorVersioned, dl_tensor) as u64,
        offset_of!(DLManagedTensorVersioned, flags) as u64,
        size_of::<DLDataType>() as u64,
        1003,
    ];
    (c, rust)
}

/// Sum of a float32 array computed by C code: `x.__dlpack__(max_version=(1, 3))`'s tensor is
/// read through the published header. The capsule is left unconsumed, so its destructor runs
/// the producer's deleter when it goes.
#[pyfunction]
fn c_sum_f32(x: &Bound<'_, PyAny>) -> PyResult<f64> {
    let kwargs = pyo3::types::PyDict::new(x.py());
    kwargs.set_item("max_version", (1, 3))?;
    let cap = x.call_method("__dlpack__", (), Some(&kwargs))?;
    let cap = cap.cast::<PyCapsule>()?;
    let name = dlbind::spec::types::DLPACK_VERSIONED_CAPSULE_NAME;
    let ptr = cap
        .pointer_checked(Some(name))
        .map_err(|_| pyo3::exceptions::PyTypeError::new_err("not a versioned DLPack capsule"))?;
    let mut ok = 0;
    // SAFETY: a live `dltensor_versioned` capsule holds a DLManagedTensorVersioned that stays
    // valid while the capsule (held here) is alive.
    let sum = unsafe { downstream_c_sum_f32(ptr.as_ptr().cast(), &mut ok) };
    if ok == 0 {
        return Err(pyo3::exceptions::PyTypeError::new_err(
            "c_sum_f32 reads float32 CPU tensors only",
        ));
    }
    Ok(sum)
}

/// dlbind's count of exports not yet released (0 when every deleter ran).
#[pyfunction]
fn live_exports() -> usize {
    dlbind::stats::live_exports()
}

#[pymodule(gil_used = true)]
fn downstream_checks(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(abi_layouts, m)?)?;
    m.add_function(wrap_pyfunction!(c_sum_f32, m)?)?;
    m.add_function(wrap_pyfunction!(live_exports, m)?)?;
    Ok(())
}
