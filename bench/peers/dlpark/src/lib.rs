//! dlpark peer for bench/bench_instructions.py (a measurement harness, never a test, never
//! shipped): the same operations the dlbind demo rows measure, written with dlpark 0.10's Python
//! layer as its docs describe (docs/python.md: `python::from_dlpack` to import, a reusable
//! `DlpackExporter` whose `__dlpack__` parses an `ExportRequest` and calls `export_dlpack`).
//!
//!   dlpark_peer.from_dlpack(x) -> Tensor   imports any producer; the Tensor keeps the import
//!   Tensor.__dlpack__(...), __dlpack_device__()   export a fresh managed tensor per call
//!   Tensor.__dlpack_c_exchange_api__   dlpark's C Exchange table (`python::install_exchange_api`,
//!     `DlpackExchangeProducer` with the borrowed-view callback: the class is frozen, so its shape
//!     and strides stay put while it lives), which `from_dlpack` takes for a dlpark Tensor
use std::{ffi::c_void, sync::Arc};

use dlpark::{
    allocation::dynamic,
    ffi::DLTensor,
    ffi::{DLDataType, DLDevice, DLManagedTensor, DLManagedTensorVersioned},
    python::{self, DlpackExchangeProducer, DlpackExporter, ExportRequest, ImportedDlpack},
    DlpackFlags, Managed, ManagedTensorBase,
};
use pyo3::{exceptions::PyValueError, prelude::*};

fn err(e: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(e.to_string())
}

#[pyclass(frozen, module = "dlpark_peer")]
struct Tensor {
    source: Arc<ImportedDlpack>,
    data: usize,
    byte_offset: u64,
    device: DLDevice,
    dtype: DLDataType,
    shape: Vec<i64>,
    strides: Vec<i64>,
    flags: DlpackFlags,
}

impl Tensor {
    fn export<M: ManagedTensorBase>(&self) -> PyResult<dynamic::Initialized<M>> {
        let n = self.shape.len();
        let mut alloc = dynamic::Allocation::<M>::allocate(2 * n).map_err(err)?;
        {
            let extra = alloc.extra_mut();
            extra[..n].copy_from_slice(&self.shape);
            extra[n..].copy_from_slice(&self.strides);
        }
        let mut init = alloc.initialize(Arc::clone(&self.source), n).map_err(err)?;
        let extra = init.extra_mut().as_mut_ptr();
        {
            let t = init.tensor_mut();
            t.shape = extra;
            t.strides = unsafe { extra.add(n) };
        }
        init.set_data(self.data as *mut c_void)
            .set_device(self.device)
            .set_dtype(self.dtype)
            .set_byte_offset(self.byte_offset);
        Ok(init)
    }
}

impl DlpackExporter for Tensor {
    fn device(&self) -> DLDevice {
        self.device
    }
    fn flags(&self) -> DlpackFlags {
        self.flags
    }
    fn prepare_export(&self, _py: Python<'_>, _request: &ExportRequest<'_>) -> PyResult<()> {
        Ok(())
    }
    fn export_legacy(&self, _py: Python<'_>) -> PyResult<Managed<DLManagedTensor>> {
        let init = self.export::<DLManagedTensor>()?;
        Ok(unsafe { init.finish() })
    }
    fn export_versioned(&self, _py: Python<'_>) -> PyResult<Managed<DLManagedTensorVersioned>> {
        let mut init = self.export::<DLManagedTensorVersioned>()?;
        init.set_flags(self.flags).map_err(err)?;
        Ok(unsafe { init.finish() })
    }
}

unsafe impl DlpackExchangeProducer for Tensor {
    const HAS_DLTENSOR_VIEW: bool = true;

    fn managed_tensor_no_sync(
        &self,
        py: Python<'_>,
    ) -> PyResult<Managed<DLManagedTensorVersioned>> {
        self.export_versioned(py)
    }

    fn tensor_view_no_sync(&self, _py: Python<'_>) -> PyResult<DLTensor> {
        Ok(DLTensor {
            data: self.data as *mut c_void,
            device: self.device,
            ndim: self.shape.len() as i32,
            dtype: self.dtype,
            shape: self.shape.as_ptr().cast_mut(),
            strides: self.strides.as_ptr().cast_mut(),
            byte_offset: self.byte_offset,
        })
    }

    fn current_work_stream(_py: Python<'_>, _device: DLDevice) -> PyResult<*mut c_void> {
        Ok(std::ptr::null_mut())
    }

    fn from_managed_tensor_no_sync(
        py: Python<'_>,
        tensor: Managed<DLManagedTensorVersioned>,
    ) -> PyResult<Py<Self>> {
        Py::new(py, Tensor::new(ImportedDlpack::Versioned(tensor))?)
    }
}

#[pymethods]
impl Tensor {
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<&Bound<'py, PyAny>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(u32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        let request = ExportRequest::parse(stream, max_version, dl_device, copy)?;
        python::export_dlpack(self, py, request)
    }

    fn __dlpack_device__(&self) -> (i32, i32) {
        (self.device.device_type.0 as i32, self.device.device_id)
    }
}

#[pyfunction]
fn from_dlpack(obj: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    Tensor::new(python::from_dlpack(obj.as_borrowed(), None, None)?)
}

impl Tensor {
    fn new(imported: ImportedDlpack) -> PyResult<Tensor> {
        let flags = imported.flags();
        let (data, byte_offset, device, dtype, shape, strides) = {
            let t = imported.validate().map_err(err)?;
            (
                t.data_ptr() as usize,
                t.byte_offset(),
                t.device(),
                t.dtype(),
                t.shape().to_vec(),
                t.strides_or_compact().map_err(err)?.into_owned(),
            )
        };
        Ok(Tensor {
            source: Arc::new(imported),
            data,
            byte_offset,
            device,
            dtype,
            shape,
            strides,
            flags,
        })
    }
}

#[pymodule]
fn dlpark_peer(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Tensor>()?;
    python::install_exchange_api::<Tensor>(m.py())?;
    m.add_function(wrap_pyfunction!(from_dlpack, m)?)?;
    Ok(())
}
