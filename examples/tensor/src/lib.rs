//! `dlbind_demo`: the reference user of dlbind.
//!
//! `Tensor` is a frozen `#[pyclass]` whose DLPack export (`__dlpack__`, `__dlpack_device__`) and
//! import (`from_dlpack`) are entirely derived; everything else here (constructors, views,
//! properties) is ordinary PyO3 code a user would write, on dlbind's public API only. Views
//! (`reversed`, `transpose`, `slice`, `set_readonly`) share the owner's storage, so the Python
//! tests can build every layout case. `Growable` (in `growable.rs`) is a
//! plain, non-frozen `#[pyclass]` with `&mut self` methods, exported through the same derive.

use dlbind::layout::{ElemSize, c_strides};
use dlbind::prelude::*;
use dlbind::spec::dtypes::{self, DTypeInfo};
use dlbind::tuning;
use pyo3::exceptions::{PyBufferError, PyIndexError, PyMemoryError, PyTypeError, PyValueError};
use pyo3::types::{PyBytes, PyInt, PyTuple};

mod adapters;
mod growable;
mod hygiene;
#[cfg(feature = "immutable-type")]
mod immutable;
mod testing;

/// An n-d array in host or device memory, exported and imported through DLPack.
///
/// Both directions are derived. `#[derive(FromDLPack)]` writes every import path from the
/// fields' roles: a capsule's or an exchange table's tensor kept in `buf` (written in place into
/// a released instance of the free list), a view of numpy's array header or of a lending
/// exchange table (the owner kept alive), and `from_dlpack(t)` of a `Tensor` as a view of `t`'s
/// storage; the C exchange table (`Tensor.__dlpack_c_exchange_api__`) builds `Tensor`s through
/// it too.
#[pyclass(frozen, weakref, module = "dlbind_demo")]
#[derive(DLPackExport, FromDLPack)]
#[dlpack(unchecked_extent)]
pub struct Tensor {
    #[dlpack(data)]
    buf: Buffer,
    #[dlpack(dtype)]
    dtype: DLDataType,
    #[dlpack(shape)]
    shape: Dims,
    #[dlpack(strides)]
    strides: Dims,
    #[dlpack(device)]
    device: Device,
    /// `Unknown` for data imported through a legacy capsule (it may leave through one again).
    #[dlpack(readonly)]
    readonly: Writability,
}

// SAFETY: every `Tensor` is built here, from a layout that fits its storage: `owned` gets a
// buffer its callers size for the C-contiguous shape (`zeros`, `arange`, `from_bytes` checks the
// byte count, copies allocate `contiguous_nbytes`), views take in-bounds offsets and strides of
// their source, and imports take the producer's tensor as validated on import. Its dtype comes
// from the spec's table (`lookup_dtype`) or from a validated import (views keep their source's).
// So exports skip the per-call span check on the `t.__dlpack__()` hot path (the dtype is still
// checked: one table load, once per instance through the memo).
unsafe impl dlbind::UncheckedExtent for Tensor {}

// ---------------------------------------------------------------------------------------------
// Helpers

fn lookup_dtype(name: &str) -> PyResult<&'static DTypeInfo> {
    dtypes::dtype_by_name(name).ok_or_else(|| {
        let names: Vec<&str> = dtypes::DTYPES.iter().map(|d| d.name).collect();
        PyValueError::new_err(format!(
            "unknown dtype {name:?}; valid: {}",
            names.join(", ")
        ))
    })
}

/// Bits of one element (all lanes).
fn elem_bits(dtype: DLDataType) -> u64 {
    dtype.bits as u64 * dtype.lanes.max(1) as u64
}

/// Bytes of one element, or None for sub-byte dtypes.
fn elem_bytes(dtype: DLDataType) -> Option<usize> {
    let bits = elem_bits(dtype);
    bits.is_multiple_of(8).then_some((bits / 8) as usize)
}

fn numel(shape: &[i64]) -> PyResult<u64> {
    shape.iter().try_fold(1u64, |n, &d| {
        if d < 0 {
            return Err(PyValueError::new_err(format!("negative dimension {d}")));
        }
        n.checked_mul(d as u64)
            .ok_or_else(|| PyValueError::new_err("shape overflows"))
    })
}

/// Packed C-order byte size: ceil(numel * bits / 8).
fn packed_nbytes(shape: &[i64], dtype: DLDataType) -> PyResult<usize> {
    let n = numel(shape)?;
    let bits = n
        .checked_mul(elem_bits(dtype))
        .ok_or_else(|| PyValueError::new_err("shape overflows"))?;
    usize::try_from(bits.div_ceil(8)).map_err(|_| PyValueError::new_err("shape overflows"))
}

/// `shape` as an int or a sequence of ints (checked without raising and catching).
fn parse_shape(shape: &Bound<'_, PyAny>) -> PyResult<Vec<i64>> {
    let dims: Vec<i64> = if shape.is_instance_of::<PyInt>() {
        vec![shape.extract::<i64>()?]
    } else if let Ok(t) = shape.cast::<PyTuple>() {
        t.iter()
            .map(|d| d.extract::<i64>())
            .collect::<PyResult<_>>()?
    } else {
        shape
            .extract::<Vec<i64>>()
            .map_err(|_| PyTypeError::new_err("shape must be an int or a sequence of ints"))?
    };
    if let Some(d) = dims.iter().find(|&&d| d < 0) {
        return Err(PyValueError::new_err(format!(
            "negative dimension {d} in shape"
        )));
    }
    Ok(dims)
}

fn alloc_zeroed(nbytes: usize) -> PyResult<Buffer> {
    Buffer::zeroed(nbytes).map_err(|e| PyMemoryError::new_err(e.to_string()))
}

/// The bytes of a buffer [`alloc_zeroed`] made (owned host memory, so never `None`).
fn owned_bytes(buf: &mut Buffer) -> &mut [u8] {
    buf.owned_bytes_mut()
        .expect("alloc_zeroed returns owned host memory")
}

fn normalize_axis(axis: i64, ndim: usize) -> PyResult<usize> {
    let n = ndim as i64;
    let a = if axis < 0 { axis + n } else { axis };
    if a < 0 || a >= n {
        return Err(PyIndexError::new_err(format!(
            "axis {axis} is out of bounds for a tensor of dimension {ndim}"
        )));
    }
    Ok(a as usize)
}

/// Python's `slice(start, stop, step).indices(len)` followed by the resulting length.
fn slice_indices(
    start: Option<i64>,
    stop: Option<i64>,
    step: i64,
    len: i64,
) -> PyResult<(i64, i64)> {
    if step == 0 {
        return Err(PyValueError::new_err("slice step cannot be zero"));
    }
    let clamp = |v: Option<i64>, default: i64, lo: i64, hi: i64| -> i64 {
        match v {
            None => default,
            Some(v) if v < 0 => (v + len).max(lo),
            Some(v) => v.min(hi),
        }
    };
    let (start, stop) = if step > 0 {
        (clamp(start, 0, 0, len), clamp(stop, len, 0, len))
    } else {
        (
            clamp(start, len - 1, -1, len - 1),
            clamp(stop, -1, -1, len - 1),
        )
    };
    let count = if step > 0 {
        if stop > start {
            (stop - start - 1) / step + 1
        } else {
            0
        }
    } else if start > stop {
        (start - stop - 1) / (-step) + 1
    } else {
        0
    };
    Ok((start, count))
}

impl Tensor {
    fn info(&self) -> Option<&'static DTypeInfo> {
        dtypes::dtype_by_dl(self.dtype)
    }

    fn dtype_name(&self) -> String {
        match self.info() {
            Some(info) => info.name.to_string(),
            None => format!(
                "dtype(code={}, bits={}, lanes={})",
                self.dtype.code, self.dtype.bits, self.dtype.lanes
            ),
        }
    }

    fn owned(buf: Buffer, shape: Vec<i64>, dtype: DLDataType, readonly: bool) -> Tensor {
        Tensor {
            buf,
            dtype,
            strides: Dims::from(c_strides(&shape)),
            shape: Dims::from(shape),
            device: Device::CPU,
            readonly: Writability::from_readonly(readonly),
        }
    }

    /// A view sharing this tensor's storage (it keeps `slf` alive), with element 0 moved by
    /// `elem_offset` elements.
    #[inline(always)]
    fn view(
        slf: &Bound<'_, Self>,
        elem_offset: i64,
        shape: Dims,
        strides: Dims,
        readonly: Writability,
    ) -> PyResult<Tensor> {
        let this = slf.get();
        let eb = if elem_offset == 0 {
            Some(1)
        } else {
            elem_bytes(this.dtype)
        };
        let Some(eb) = eb else {
            return Err(PyValueError::new_err(format!(
                "views of sub-byte dtype {} are not supported",
                this.dtype_name()
            )));
        };
        let byte_offset = elem_offset
            .checked_mul(eb as i64)
            .and_then(|b| isize::try_from(b).ok())
            .ok_or_else(|| PyValueError::new_err("offset overflows"))?;
        let data = this
            .ptr()
            .wrapping_offset(byte_offset)
            .cast::<std::ffi::c_void>();
        // SAFETY: `data` with `shape`/`strides` addresses elements of `this` (the offset and
        // strides come from in-bounds indices of `this`), whose storage `slf` owns (or, for a
        // view, the owner `share_view` takes instead).
        let buf = unsafe {
            this.buf.share_view(
                slf.py(),
                slf.as_any(),
                data,
                this.device,
                !readonly.is_writable(),
            )
        };
        Ok(Tensor {
            buf,
            dtype: this.dtype,
            shape,
            strides,
            device: this.device,
            readonly,
        })
    }

    /// Zeros in GPU memory (`kDLCUDA`, `kDLCUDAHost`, `kDLCUDAManaged`) through the runtime's
    /// GPU support; without a driver (or without the `cuda` feature) the runtime's
    /// `DeviceUnavailable` error (BufferError).
    fn zeros_on_device(
        device: Device,
        shape: Vec<i64>,
        dtype: DLDataType,
        nbytes: usize,
    ) -> PyResult<Tensor> {
        let alloc = dlbind::gpu::zeros(device, nbytes)?;
        let data = alloc.ptr() as usize as *mut std::ffi::c_void;
        let dl_device = alloc.dl_device();
        let strides = c_strides(&shape);
        // SAFETY: the allocation holds `nbytes` (packed C-contiguous) bytes and lives as long
        // as the buffer that owns it.
        let buf = unsafe {
            Buffer::from_owner(
                alloc,
                data,
                dlbind::Extent::from_start(nbytes),
                dl_device,
                false,
            )
        };
        Ok(Tensor {
            buf,
            dtype,
            shape: Dims::from(shape),
            strides: Dims::from(strides),
            device: dl_device,
            readonly: Writability::Writable,
        })
    }

    fn ptr(&self) -> *mut u8 {
        DataSource::data_ptr(&self.buf) as *mut u8
    }
}

/// Writes `0..n` in the dtype `name` into `out` (native byte order).
fn fill_arange(name: &str, n: usize, out: &mut [u8]) -> PyResult<()> {
    macro_rules! fill {
        ($t:ty, $conv:expr) => {{
            let size = std::mem::size_of::<$t>();
            for (i, chunk) in out.chunks_exact_mut(size).take(n).enumerate() {
                let v: $t = $conv(i);
                chunk.copy_from_slice(&v.to_ne_bytes());
            }
        }};
    }
    match name {
        "bool" => {
            for (i, b) in out.iter_mut().take(n).enumerate() {
                *b = (i != 0) as u8;
            }
        }
        "int8" => fill!(i8, |i| i as i8),
        "int16" => fill!(i16, |i| i as i16),
        "int32" => fill!(i32, |i| i as i32),
        "int64" => fill!(i64, |i| i as i64),
        "uint8" => fill!(u8, |i| i as u8),
        "uint16" => fill!(u16, |i| i as u16),
        "uint32" => fill!(u32, |i| i as u32),
        "uint64" => fill!(u64, |i| i as u64),
        "float16" => fill!(half::f16, |i| half::f16::from_f64(i as f64)),
        "bfloat16" => fill!(half::bf16, |i| half::bf16::from_f64(i as f64)),
        "float32" => fill!(f32, |i| i as f32),
        "float64" => fill!(f64, |i| i as f64),
        "complex64" => {
            for (i, chunk) in out.chunks_exact_mut(8).take(n).enumerate() {
                chunk[..4].copy_from_slice(&(i as f32).to_ne_bytes());
                chunk[4..].copy_from_slice(&0f32.to_ne_bytes());
            }
        }
        "complex128" => {
            for (i, chunk) in out.chunks_exact_mut(16).take(n).enumerate() {
                chunk[..8].copy_from_slice(&(i as f64).to_ne_bytes());
                chunk[8..].copy_from_slice(&0f64.to_ne_bytes());
            }
        }
        other => {
            return Err(PyValueError::new_err(format!(
                "arange does not support dtype {other:?} (bool, int*, uint*, float16/32/64, \
                 bfloat16, complex64/128 only)"
            )));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Python API

// `#[dlbind::pymethods]` in place of `#[pymethods]`: the derive's methods are merged into this
// block (decision 0025), so no PyO3 `multiple-pymethods` is needed for `Tensor`.
#[dlbind::pymethods]
impl Tensor {
    /// A C-contiguous, 64-byte aligned, writable tensor of zeros.
    ///
    /// `device`: None, "cpu" or a `(device_type, device_id)` tuple. Only host memory is
    /// allocated by this build; other devices raise the spec's `DeviceUnavailable` error.
    #[staticmethod]
    #[pyo3(signature = (shape, dtype = "float32", device = None))]
    fn zeros(
        shape: &Bound<'_, PyAny>,
        dtype: &str,
        device: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Tensor> {
        let shape = parse_shape(shape)?;
        let info = lookup_dtype(dtype)?;
        let nbytes = packed_nbytes(&shape, info.dtype)?;
        match Device::from_py_arg(device)? {
            None => {}
            Some(d) if d == Device::CPU => {}
            Some(d) => return Tensor::zeros_on_device(d, shape, info.dtype, nbytes),
        }
        let buf = alloc_zeroed(nbytes)?;
        Ok(Tensor::owned(buf, shape, info.dtype, false))
    }

    /// A 1-d tensor holding `0, 1, …, n-1` in `dtype`.
    #[staticmethod]
    #[pyo3(signature = (n, dtype = "float32"))]
    fn arange(n: i64, dtype: &str) -> PyResult<Tensor> {
        if n < 0 {
            return Err(PyValueError::new_err("n must be >= 0"));
        }
        let info = lookup_dtype(dtype)?;
        let shape = vec![n];
        let mut buf = alloc_zeroed(packed_nbytes(&shape, info.dtype)?)?;
        fill_arange(info.name, n as usize, owned_bytes(&mut buf))?;
        Ok(Tensor::owned(buf, shape, info.dtype, false))
    }

    /// A C-contiguous tensor holding a copy of `data` (exactly `nbytes` long).
    #[staticmethod]
    #[pyo3(signature = (data, shape, dtype, readonly = false))]
    fn from_bytes(
        data: &[u8],
        shape: &Bound<'_, PyAny>,
        dtype: &str,
        readonly: bool,
    ) -> PyResult<Tensor> {
        let shape = parse_shape(shape)?;
        let info = lookup_dtype(dtype)?;
        let nbytes = packed_nbytes(&shape, info.dtype)?;
        if data.len() != nbytes {
            return Err(PyValueError::new_err(format!(
                "got {} bytes, shape {shape:?} of {} needs {nbytes}",
                data.len(),
                info.name
            )));
        }
        let mut buf = alloc_zeroed(nbytes)?;
        owned_bytes(&mut buf).copy_from_slice(data);
        Ok(Tensor::owned(buf, shape, info.dtype, readonly))
    }

    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.shape.iter())
    }

    /// Strides in elements.
    #[getter]
    fn strides<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.strides.iter())
    }

    /// The spec's Python dtype name ("float32", "bfloat16", "float8_e4m3fn", …).
    #[getter]
    fn dtype(&self) -> String {
        self.dtype_name()
    }

    /// `(device_type, device_id)`, as `__dlpack_device__` returns it.
    #[getter]
    fn device(&self) -> (i32, i32) {
        (self.device.device_type.0, self.device.device_id)
    }

    #[getter]
    fn readonly(&self) -> bool {
        !self.readonly.is_writable()
    }

    /// `"writable"`, `"readonly"`, or `"unknown"` (imported through a legacy capsule: not
    /// written by dlbind, exported READ_ONLY in versioned capsules, allowed in legacy ones).
    #[getter]
    fn writability(&self) -> &'static str {
        match self.readonly {
            Writability::Writable => "writable",
            Writability::ReadOnly => "readonly",
            Writability::Unknown => "unknown",
        }
    }

    /// Address of element 0.
    #[getter]
    fn data_ptr(&self) -> usize {
        self.ptr() as usize
    }

    #[getter]
    fn ndim(&self) -> usize {
        self.shape.len()
    }

    /// Bytes of the logical array (packed for sub-byte dtypes).
    #[getter]
    fn nbytes(&self) -> PyResult<usize> {
        packed_nbytes(&self.shape, self.dtype)
    }

    fn __len__(&self) -> PyResult<usize> {
        match self.shape.first() {
            Some(&n) => Ok(n as usize),
            None => Err(PyTypeError::new_err("len() of a 0-d tensor")),
        }
    }

    fn __repr__(&self) -> String {
        let tuple = |v: &[i64]| match v {
            [x] => format!("({x},)"),
            v => format!(
                "({})",
                v.iter().map(i64::to_string).collect::<Vec<_>>().join(", ")
            ),
        };
        format!(
            "Tensor(shape={}, dtype={}, strides={}, device={:?}, readonly={})",
            tuple(&self.shape),
            self.dtype_name(),
            tuple(&self.strides),
            self.device(),
            if self.readonly.is_writable() {
                "False"
            } else {
                "True"
            }
        )
    }

    /// The logical array's bytes in C order (a copy, whatever the strides).
    fn tobytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        if !matches!(self.device.device_type, DLDeviceType::kDLCPU)
            && !self.device.is_host_accessible()
        {
            return Err(PyBufferError::new_err(
                "tobytes() needs host-accessible memory",
            ));
        }
        let nbytes = packed_nbytes(&self.shape, self.dtype)?;
        let elem = match elem_bytes(self.dtype) {
            Some(b) => ElemSize::Bytes(b),
            None => ElemSize::SubByte {
                bits: elem_bits(self.dtype) as u32,
            },
        };
        let src = self.ptr() as *const u8;
        PyBytes::new_with(py, nbytes, |dst| {
            if nbytes == 0 {
                return Ok(());
            }
            // SAFETY: `src` addresses this tensor's elements under `shape`/`strides` (kept alive
            // by `self.buf`); `dst` has `nbytes` writable bytes.
            unsafe {
                dlbind::layout::copy_to_contiguous(
                    src,
                    &self.shape,
                    &self.strides,
                    elem,
                    dst.as_mut_ptr(),
                    dst.len(),
                )
            }
            .map_err(|e| PyValueError::new_err(format!("tobytes: {e}")))
        })
    }

    /// A view with `axis` reversed (negative stride), sharing storage.
    #[pyo3(signature = (axis = 0))]
    fn reversed(slf: &Bound<'_, Self>, axis: i64) -> PyResult<Tensor> {
        let this = slf.get();
        let a = normalize_axis(axis, this.shape.len())?;
        let mut strides = this.strides.clone();
        let offset = if this.shape[a] > 0 {
            (this.shape[a] - 1) * strides[a]
        } else {
            0
        };
        strides[a] = -strides[a];
        Tensor::view(slf, offset, this.shape.clone(), strides, this.readonly)
    }

    /// A view with all axes reversed (`x.T`), sharing storage.
    fn transpose(slf: &Bound<'_, Self>) -> PyResult<Tensor> {
        let this = slf.get();
        let shape = this.shape.iter().rev().copied().collect();
        let strides = this.strides.iter().rev().copied().collect();
        Tensor::view(slf, 0, shape, strides, this.readonly)
    }

    /// `x[start:stop:step]` along `axis`, as a view sharing storage (Python slice semantics).
    #[pyo3(signature = (axis, start = None, stop = None, step = 1))]
    fn slice(
        slf: &Bound<'_, Self>,
        axis: i64,
        start: Option<i64>,
        stop: Option<i64>,
        step: i64,
    ) -> PyResult<Tensor> {
        let this = slf.get();
        let a = normalize_axis(axis, this.shape.len())?;
        let (first, count) = slice_indices(start, stop, step, this.shape[a])?;
        let mut shape = this.shape.clone();
        let mut strides = this.strides.clone();
        let offset = if count > 0 { first * strides[a] } else { 0 };
        shape[a] = count;
        strides[a] *= step;
        Tensor::view(slf, offset, shape, strides, this.readonly)
    }

    /// A numpy array viewing this tensor's memory (zero-copy, keeps it alive), typed as numpy
    /// or `ml_dtypes` names the dtype: `bfloat16` and `float8_*` tensors give arrays of
    /// `ml_dtypes.bfloat16` etc., which `np.from_dlpack` refuses (`dlbind::numpy_view`).
    fn numpy<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        dlbind::numpy_view(slf)
    }

    /// A read-only view of the same storage.
    fn set_readonly(slf: &Bound<'_, Self>) -> PyResult<Tensor> {
        let this = slf.get();
        Tensor::view(
            slf,
            0,
            this.shape.clone(),
            this.strides.clone(),
            Writability::ReadOnly,
        )
    }
}

/// Released `Tensor`s whose memory is kept for the next one (`dlbind::tuning::enable_freelist`):
/// imports and views create a `Tensor` per call, and most of such a call is the object's
/// allocation. 64 is also what `add_from_dlpack` gives a frozen type by default; the explicit
/// call shows the knob.
pub(crate) const TENSOR_FREELIST: usize = 64;

/// `gil_used = true`: on a free-threaded interpreter (3.13t+) importing this module turns the GIL
/// back on. dlbind's hot paths (the spare manager blocks, the export counter, the per-type
/// caches, the free lists) are ordered by the GIL; PyO3 0.30 declares modules GIL-free unless
/// told otherwise.
#[pymodule(gil_used = true)]
fn dlbind_demo(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Tensor>()?;
    m.add_class::<growable::Growable>()?;
    #[cfg(feature = "immutable-type")]
    m.add_class::<immutable::Fixed>()?;
    tuning::enable_freelist::<Tensor>(m.py(), TENSOR_FREELIST)?;
    // `dlbind_demo.from_dlpack` and `Tensor.from_dlpack` (dlbind's raw fastcall, built on the
    // derived `FromDLPack`); with the free list above, released `Tensor`s skip PyO3's
    // deallocation (the derive's direct release: every field is a `#[dlpack]` role).
    dlbind::add_from_dlpack::<Tensor>(m)?;
    let adapters = PyModule::new(m.py(), "adapters")?;
    adapters::register(&adapters)?;
    m.add_submodule(&adapters)?;
    let hygiene = PyModule::new(m.py(), "hygiene")?;
    hygiene::shadowed::register(&hygiene)?;
    m.add_submodule(&hygiene)?;
    testing::add_submodule(m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slice_indices_match_python() {
        // list(range(10))[2:8:3] == [2, 5]
        assert_eq!(slice_indices(Some(2), Some(8), 3, 10).unwrap(), (2, 2));
        // [::-1] over 5 -> start 4, 5 items
        assert_eq!(slice_indices(None, None, -1, 5).unwrap(), (4, 5));
        // [-3:] over 5
        assert_eq!(slice_indices(Some(-3), None, 1, 5).unwrap(), (2, 3));
        // empty
        assert_eq!(slice_indices(Some(4), Some(2), 1, 5).unwrap().1, 0);
        assert_eq!(slice_indices(Some(100), None, -2, 5).unwrap(), (4, 3));
        assert_eq!(slice_indices(None, None, 1, 0).unwrap(), (0, 0));
    }

    #[test]
    fn packed_sizes() {
        let f4 = DLDataType {
            code: 17,
            bits: 4,
            lanes: 1,
        };
        assert_eq!(packed_nbytes(&[3], f4).unwrap(), 2);
        let f6 = DLDataType {
            code: 15,
            bits: 6,
            lanes: 1,
        };
        assert_eq!(packed_nbytes(&[2, 3], f6).unwrap(), 5);
        assert_eq!(c_strides(&[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(c_strides(&[]), Vec::<i64>::new());
    }
}
