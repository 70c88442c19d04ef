//! Issue 5 bridges with an embedded interpreter: the buffer protocol / `__array_interface__` /
//! `__cuda_array_interface__` / `__sycl_usm_array_interface__` exports (a hand-written pyclass
//! calling `dlbind::bridges`, independent of the derive) and `from_dlpack`'s import fallbacks for
//! objects without `__dlpack__`.

mod common;

use std::ffi::{CString, c_void};

use dlbind::export::DLPackSource;
use dlbind::from_dlpack;
use dlbind::gpu::StreamHandle;
use dlbind::prelude::*;
use dlbind::stats::live_exports;
use pyo3::exceptions::{PyAttributeError, PyBufferError, PyValueError};
use pyo3::ffi as pyffi;
use pyo3::types::{IntoPyDict, PyDict};

#[pyclass(frozen)]
struct Arr {
    data: Vec<i32>,
    shape: Vec<usize>,
    strides: Option<Vec<isize>>,
    readonly: bool,
    device: Device,
    bf16: bool,
}

// SAFETY: `data` is never mutated (frozen class); shape/strides address elements inside it.
unsafe impl DLPackSource for Arr {
    fn dlpack_data_ptr(&self) -> *mut c_void {
        match &self.strides {
            // reversed 1-d view: element 0 is the last one
            Some(s) if s.len() == 1 && s[0] < 0 => {
                self.data.as_ptr().wrapping_add(self.data.len() - 1) as *mut c_void
            }
            _ => self.data.as_ptr() as *mut c_void,
        }
    }
    fn dlpack_dtype(&self) -> DLDataType {
        if self.bf16 {
            dlbind::spec::dtypes::dtype_by_name("bfloat16")
                .unwrap()
                .dtype
        } else {
            <i32 as DLPackElement>::DTYPE
        }
    }
    fn dlpack_ndim(&self) -> usize {
        self.shape.len()
    }
    fn dlpack_fill_shape(&self, out: &mut [i64]) {
        dlbind::__private::fill_dims(&self.shape, out)
    }
    fn dlpack_fill_strides(&self, out: &mut [i64]) -> bool {
        match &self.strides {
            Some(s) => {
                dlbind::__private::fill_dims(s, out);
                true
            }
            None => false,
        }
    }
    fn dlpack_device(&self) -> Device {
        self.device
    }
    fn dlpack_readonly(&self) -> bool {
        self.readonly
    }
}

#[pymethods]
impl Arr {
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut pyffi::Py_buffer,
        flags: std::ffi::c_int,
    ) -> PyResult<()> {
        // SAFETY: called by CPython's bf_getbuffer with a valid view.
        unsafe { dlbind::bridges::getbuffer(&slf, view, flags) }
    }
    unsafe fn __releasebuffer__(&self, view: *mut pyffi::Py_buffer) {
        // SAFETY: the view was filled by getbuffer.
        unsafe { dlbind::bridges::releasebuffer(view) }
    }
    #[getter]
    fn __array_interface__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        dlbind::bridges::array_interface(slf)
    }
    #[getter]
    fn __cuda_array_interface__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        dlbind::bridges::cuda_array_interface(slf)
    }
    #[getter]
    fn __sycl_usm_array_interface__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        dlbind::bridges::sycl_usm_array_interface(slf)
    }
}

fn arr<'py>(py: Python<'py>, n: usize, device: Device) -> Bound<'py, Arr> {
    let a = Arr {
        data: (0..n as i32).collect(),
        shape: vec![n],
        strides: None,
        readonly: false,
        device,
        bf16: false,
    };
    Bound::new(py, a).unwrap()
}

fn run<'py>(py: Python<'py>, code: &str, g: &Bound<'py, PyDict>) {
    py.run(&CString::new(code).unwrap(), Some(g), None)
        .unwrap_or_else(|e| panic!("{code}: {e}"));
}

fn eval<'py>(py: Python<'py>, code: &str, g: &Bound<'py, PyDict>) -> Bound<'py, PyAny> {
    py.eval(&CString::new(code).unwrap(), Some(g), None)
        .unwrap_or_else(|e| panic!("{code}: {e}"))
}

fn refcnt(o: &Bound<'_, PyAny>) -> isize {
    // SAFETY: live object.
    unsafe { pyffi::Py_REFCNT(o.as_ptr()) }
}

#[test]
fn buffer_protocol_export() {
    Python::attach(|py| {
        let g = PyDict::new(py);
        let a = arr(py, 6, Device::CPU);
        g.set_item("a", &a).unwrap();
        run(py, "mv = memoryview(a)", &g);
        assert_eq!(eval(py, "mv.format", &g).extract::<String>().unwrap(), "i");
        assert_eq!(
            eval(py, "(mv.itemsize, mv.shape, mv.strides, mv.readonly)", &g)
                .extract::<(usize, (i64,), (i64,), bool)>()
                .unwrap(),
            (4, (6,), (4,), false)
        );
        assert_eq!(
            eval(py, "mv.tolist()", &g).extract::<Vec<i32>>().unwrap(),
            vec![0, 1, 2, 3, 4, 5]
        );
        assert!(eval(py, "mv.obj is a", &g).extract::<bool>().unwrap());
        let before = refcnt(a.as_any());
        run(py, "mv.release()", &g);
        assert_eq!(refcnt(a.as_any()), before - 1, "view.obj released");
        // 2-d, transposed (strided): memoryview with strides in bytes
        let t = Arr {
            data: (0..6).collect(),
            shape: vec![3, 2],
            strides: Some(vec![1, 3]),
            readonly: true,
            device: Device::CPU,
            bf16: false,
        };
        g.set_item("t", Bound::new(py, t).unwrap()).unwrap();
        assert_eq!(
            eval(py, "memoryview(t).strides", &g)
                .extract::<(i64, i64)>()
                .unwrap(),
            (4, 12)
        );
        assert!(
            eval(py, "memoryview(t).readonly", &g)
                .extract::<bool>()
                .unwrap()
        );
        assert_eq!(
            eval(py, "memoryview(t).tolist()", &g)
                .extract::<Vec<Vec<i32>>>()
                .unwrap(),
            vec![vec![0, 3], vec![1, 4], vec![2, 5]]
        );
        // contiguous-only requests on a strided layout, writable requests on read-only data
        let tb = g.get_item("t").unwrap().unwrap();
        for flags in [
            pyffi::PyBUF_SIMPLE,
            pyffi::PyBUF_ND,
            pyffi::PyBUF_C_CONTIGUOUS,
            pyffi::PyBUF_STRIDES | pyffi::PyBUF_WRITABLE,
        ] {
            let mut v = pyffi::Py_buffer::new();
            // SAFETY: live object, valid view.
            let rc = unsafe { pyffi::PyObject_GetBuffer(tb.as_ptr(), &mut v, flags) };
            assert_eq!(rc, -1, "flags {flags:#x}");
            let e = PyErr::fetch(py);
            assert!(e.is_instance_of::<PyBufferError>(py), "{e}");
        }
        // F-contiguous request is satisfied by the transposed layout
        let mut v = pyffi::Py_buffer::new();
        // SAFETY: live object, valid view; released below.
        unsafe {
            assert_eq!(
                pyffi::PyObject_GetBuffer(tb.as_ptr(), &mut v, pyffi::PyBUF_F_CONTIGUOUS),
                0
            );
            assert!(v.format.is_null(), "no PyBUF_FORMAT → NULL format");
            assert_eq!((v.len, v.itemsize, v.ndim), (24, 4, 2));
            pyffi::PyBuffer_Release(&mut v);
        }
        // negative strides
        let r = Arr {
            data: (0..4).collect(),
            shape: vec![4],
            strides: Some(vec![-1]),
            readonly: false,
            device: Device::CPU,
            bf16: false,
        };
        g.set_item("r", Bound::new(py, r).unwrap()).unwrap();
        assert_eq!(
            eval(py, "memoryview(r).tolist()", &g)
                .extract::<Vec<i32>>()
                .unwrap(),
            vec![3, 2, 1, 0]
        );
        // device memory and dtypes without a format
        g.set_item("c", arr(py, 2, Device::cuda(0))).unwrap();
        let e = py.eval(c"memoryview(c)", Some(&g), None).unwrap_err();
        assert!(e.is_instance_of::<PyBufferError>(py), "{e}");
        let b = Arr {
            data: vec![0; 2],
            shape: vec![4],
            strides: None,
            readonly: false,
            device: Device::CPU,
            bf16: true,
        };
        g.set_item("b", Bound::new(py, b).unwrap()).unwrap();
        let e = py.eval(c"memoryview(b)", Some(&g), None).unwrap_err();
        assert!(
            e.is_instance_of::<PyBufferError>(py) && e.to_string().contains("bfloat16"),
            "{e}"
        );
    });
}

#[test]
fn interface_dicts_export() {
    Python::attach(|py| {
        let g = PyDict::new(py);
        let a = arr(py, 3, Device::CPU);
        let ptr = a.get().data.as_ptr() as usize;
        g.set_item("a", &a).unwrap();
        let ai = eval(py, "a.__array_interface__", &g);
        assert_eq!(ai.get_item("version").unwrap().extract::<i32>().unwrap(), 3);
        assert_eq!(
            ai.get_item("typestr").unwrap().extract::<String>().unwrap(),
            "<i4"
        );
        assert_eq!(
            ai.get_item("shape").unwrap().extract::<(i64,)>().unwrap(),
            (3,)
        );
        assert_eq!(
            ai.get_item("data")
                .unwrap()
                .extract::<(usize, bool)>()
                .unwrap(),
            (ptr, false)
        );
        assert!(ai.get_item("strides").unwrap().is_none());
        for attr in ["__cuda_array_interface__", "__sycl_usm_array_interface__"] {
            assert!(!a.hasattr(attr).unwrap(), "{attr} on CPU data");
            assert!(
                a.getattr(attr)
                    .unwrap_err()
                    .is_instance_of::<PyAttributeError>(py)
            );
        }
        let r = Arr {
            data: (0..4).collect(),
            shape: vec![4],
            strides: Some(vec![-1]),
            readonly: true,
            device: Device::CPU,
            bf16: false,
        };
        let r = Bound::new(py, r).unwrap();
        let ai = r.getattr("__array_interface__").unwrap();
        assert_eq!(
            ai.get_item("strides").unwrap().extract::<(i64,)>().unwrap(),
            (-4,)
        );
        assert!(
            ai.get_item("data")
                .unwrap()
                .extract::<(usize, bool)>()
                .unwrap()
                .1
        );

        let c = arr(py, 3, Device::cuda(1));
        assert!(!c.hasattr("__array_interface__").unwrap());
        assert!(!c.hasattr("__sycl_usm_array_interface__").unwrap());
        let cai = c.getattr("__cuda_array_interface__").unwrap();
        assert_eq!(
            cai.get_item("version").unwrap().extract::<i32>().unwrap(),
            3
        );
        // No recorded stream: CUDA data is taken to be ready on the legacy stream (1).
        assert_eq!(
            cai.get_item("stream").unwrap().extract::<u64>().unwrap(),
            StreamHandle::LEGACY.0
        );
        assert!(cai.get_item("strides").unwrap().is_none());
        assert_eq!(
            cai.get_item("typestr")
                .unwrap()
                .extract::<String>()
                .unwrap(),
            "<i4"
        );
        assert!(
            arr(py, 1, Device::CUDA_MANAGED)
                .hasattr("__cuda_array_interface__")
                .unwrap()
        );

        let s = Arr {
            data: (0..6).collect(),
            shape: vec![3, 2],
            strides: Some(vec![1, 3]),
            readonly: false,
            device: Device::oneapi(0),
            bf16: false,
        };
        let s = Bound::new(py, s).unwrap();
        assert!(!s.hasattr("__cuda_array_interface__").unwrap());
        let su = s.getattr("__sycl_usm_array_interface__").unwrap();
        assert_eq!(su.get_item("version").unwrap().extract::<i32>().unwrap(), 1);
        assert_eq!(
            su.get_item("strides")
                .unwrap()
                .extract::<(i64, i64)>()
                .unwrap(),
            (1, 3),
            "elements"
        );
        assert_eq!(su.get_item("offset").unwrap().extract::<i64>().unwrap(), 0);
        assert!(su.get_item("syclobj").unwrap().is_none());

        let b = Arr {
            data: vec![0; 1],
            shape: vec![2],
            strides: None,
            readonly: false,
            device: Device::CPU,
            bf16: true,
        };
        let b = Bound::new(py, b).unwrap();
        let e = b.getattr("__array_interface__").unwrap_err();
        assert!(
            e.is_instance_of::<PyAttributeError>(py) && e.to_string().contains("bfloat16"),
            "{e}"
        );
    });
}

#[test]
fn import_through_buffer_protocol() {
    let _g = common::serial();
    Python::attach(|py| {
        let base = live_exports();
        let g = PyDict::new(py);
        run(
            py,
            "import array, ctypes\nb = b'\\x01\\x02\\x03'\nba = bytearray(b'abcd')\nad = array.array('d', [1.0, 2.0])",
            &g,
        );
        let b = eval(py, "b", &g);
        let t = from_dlpack(&b, None, None).unwrap();
        assert!(t.readonly());
        assert_eq!(t.device(), Device::CPU);
        assert_eq!(t.as_slice::<u8>().unwrap(), &[1, 2, 3]);
        assert_eq!(
            t.data_ptr() as usize,
            // SAFETY: `b` is a live bytes object.
            unsafe { pyffi::PyBytes_AsString(b.as_ptr()) } as usize,
            "zero-copy"
        );
        let mut t = from_dlpack(&eval(py, "ba", &g), None, None).unwrap();
        assert!(!t.readonly());
        // SAFETY: the test's only handle of this memory while the result lives.
        unsafe { t.as_mut_slice::<u8>() }.unwrap()[0] = b'z';
        assert_eq!(
            eval(py, "bytes(ba)", &g).extract::<Vec<u8>>().unwrap(),
            b"zbcd"
        );
        // The held buffer blocks resizing until the view drops.
        assert!(
            py.run(c"ba.append(1)", Some(&g), None)
                .unwrap_err()
                .is_instance_of::<PyBufferError>(py)
        );
        drop(t);
        run(py, "ba.append(1)", &g);
        let ad = eval(py, "ad", &g);
        let t = from_dlpack(&ad, None, None).unwrap();
        assert_eq!(t.as_slice::<f64>().unwrap(), &[1.0, 2.0]);
        assert_eq!(
            t.data_ptr() as usize,
            eval(py, "ad.buffer_info()[0]", &g)
                .extract::<usize>()
                .unwrap()
        );
        let before = refcnt(&ad);
        drop(t);
        assert!(refcnt(&ad) < before, "buffer released on drop");
        // memoryview of a strided slice (negative step)
        let mv = eval(py, "memoryview(array.array('i', range(6)))[::-2]", &g);
        let t = from_dlpack(&mv, None, None).unwrap();
        assert_eq!(t.strides(), &[-2]);
        #[cfg(feature = "ndarray")]
        assert_eq!(
            t.as_ndarray::<i32>()
                .unwrap()
                .iter()
                .copied()
                .collect::<Vec<_>>(),
            vec![5, 3, 1]
        );
        drop(t);
        assert_eq!(live_exports(), base, "bridges create no dlbind exports");
    });
}

#[test]
fn import_through_interfaces() {
    Python::attach(|py| {
        let g = PyDict::new(py);
        run(
            py,
            r#"
import ctypes
buf = (ctypes.c_float * 6)(*range(6))
addr = ctypes.addressof(buf)
class AI:
    def __init__(self, ro=False, typestr='<f4', strides=None):
        self.buf = buf
        self.__array_interface__ = {'shape': (2, 3), 'typestr': typestr, 'data': (addr, ro), 'strides': strides, 'version': 3}
class CAI:
    def __init__(self, **kw):
        self.__cuda_array_interface__ = dict({'shape': (6,), 'typestr': '<f4', 'data': (addr, False), 'version': 3}, **kw)
class SUAI:
    __sycl_usm_array_interface__ = {'shape': (2,), 'typestr': '|u1', 'data': (addr, True), 'strides': None, 'offset': 4, 'version': 1, 'syclobj': None}
class Both(AI, CAI):
    def __init__(self):
        AI.__init__(self); CAI.__init__(self)
"#,
            &g,
        );
        let addr = eval(py, "addr", &g).extract::<usize>().unwrap();
        let ai = eval(py, "AI()", &g);
        let rc = refcnt(&ai);
        let t = from_dlpack(&ai, None, None).unwrap();
        assert_eq!(refcnt(&ai), rc + 1, "exporter kept alive");
        assert_eq!(t.data_ptr() as usize, addr);
        assert_eq!(t.shape(), &[2, 3]);
        assert!(!t.readonly());
        assert_eq!(
            t.as_slice::<f32>().unwrap(),
            &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
        );
        drop(t);
        assert_eq!(refcnt(&ai), rc);
        let t = from_dlpack(
            &eval(py, "AI(ro=True, typestr='=f4', strides=(4, 8))", &g),
            None,
            None,
        )
        .unwrap();
        assert!(t.readonly());
        assert_eq!(t.strides(), &[1, 2]);
        let e = from_dlpack(&eval(py, "AI(typestr='>f4')", &g), None, None).unwrap_err();
        assert!(e.is_instance_of::<PyBufferError>(py), "{e}");
        let e = from_dlpack(&eval(py, "AI(strides=(3, 4))", &g), None, None).unwrap_err();
        assert!(e.is_instance_of::<PyBufferError>(py), "{e}");

        for code in ["CAI()", "CAI(stream=None)", "Both()"] {
            let t = from_dlpack(&eval(py, code, &g), None, None).unwrap();
            // A host pointer the CUDA driver does not know (or no driver): kDLCUDA device 0.
            assert_eq!(
                t.device(),
                dlbind::bridges::CAI_DEVICE_WITHOUT_DRIVER,
                "{code}"
            );
            assert_eq!(t.device(), Device::cuda(0), "{code}");
            assert_eq!(t.data_ptr() as usize, addr);
            assert!(t.as_slice::<f32>().is_err(), "never read on the host");
            assert!(t.to_contiguous_copy().is_err());
        }
        let e = from_dlpack(&eval(py, "CAI(stream=0)", &g), None, None).unwrap_err();
        assert!(e.is_instance_of::<PyValueError>(py), "{e}");
        let t = from_dlpack(&eval(py, "SUAI()", &g), None, None).unwrap();
        assert_eq!(t.device(), Device::oneapi(0));
        assert_eq!(t.data_ptr() as usize, addr + 4, "offset in elements");
        assert!(t.readonly());
        // device requests apply to bridged imports too
        let e = from_dlpack(&eval(py, "CAI()", &g), Some(Device::CPU), None).unwrap_err();
        assert!(e.is_instance_of::<PyBufferError>(py), "{e}");
        let t = from_dlpack(&eval(py, "AI()", &g), Some(Device::CPU), Some(true)).unwrap();
        assert!(t.is_copied() && t.data_ptr() as usize != addr);
    });
}

#[test]
fn no_protocol_names_everything_tried() {
    Python::attach(|py| {
        for code in [c"object()", c"[1, 2]", c"'str'", c"1.5"] {
            let e = from_dlpack(&py.eval(code, None, None).unwrap(), None, None).unwrap_err();
            assert!(e.is_instance_of::<PyAttributeError>(py), "{e}");
            let msg = e.to_string();
            for p in dlbind::bridges::PROTOCOLS_TRIED {
                assert!(msg.contains(p), "{msg}");
            }
        }
        // A malformed interface is an error, not a silent fall-through.
        let g = PyDict::new(py);
        run(py, "class X:\n    __cuda_array_interface__ = 5", &g);
        assert!(from_dlpack(&eval(py, "X()", &g), None, None).is_err());
    });
}

#[test]
fn round_trip_numpy_when_available() {
    Python::attach(|py| {
        let Some(np) = common::numpy(py) else { return };
        let g = PyDict::new(py);
        g.set_item("np", np).unwrap();
        let a = arr(py, 4, Device::CPU);
        g.set_item("a", &a).unwrap();
        let x = eval(py, "np.asarray(a)", &g);
        assert_eq!(
            x.call_method0("tolist")
                .unwrap()
                .extract::<Vec<i32>>()
                .unwrap(),
            vec![0, 1, 2, 3]
        );
        assert_eq!(
            eval(py, "np.asarray(a).ctypes.data", &g)
                .extract::<usize>()
                .unwrap(),
            a.get().data.as_ptr() as usize
        );
        let t = from_dlpack(
            &eval(
                py,
                "memoryview(np.arange(6, dtype=np.int64).reshape(2, 3).T)",
                &g,
            ),
            None,
            None,
        )
        .unwrap();
        assert_eq!(t.strides(), &[1, 3]);
    });
}

#[test]
fn cai_pointer_device_query() {
    use dlbind::bridges::cuda_pointer_device;
    // Ordinary host memory and NULL: no device, whether or not a driver is present (the driver
    // does not know such pointers; without one nobody can answer).
    let host = [0f32; 4];
    assert_eq!(cuda_pointer_device(host.as_ptr() as usize), None);
    assert_eq!(cuda_pointer_device(0), None);
    #[cfg(feature = "cuda")]
    {
        use dlbind::gpu::{AllocKind, default_runtime};
        let Ok(rt) = default_runtime() else {
            eprintln!("skipping the driver half of cai_pointer_device_query: no CUDA driver/GPU");
            return;
        };
        for kind in [AllocKind::Device, AllocKind::PinnedHost, AllocKind::Managed] {
            let a = rt.alloc(kind, Device::cuda(0), 64).unwrap();
            assert_eq!(
                cuda_pointer_device(a.ptr as usize),
                Some(a.dl_device()),
                "{kind:?}"
            );
            rt.free(&a).unwrap();
        }
    }
}

#[test]
fn cai_pointer_device_mapping_with_a_fake_runtime() {
    use dlbind::bridges::cuda_pointer_device_with;
    use dlbind::gpu::fake::FakeRuntime;
    use dlbind::gpu::{AllocKind, DeviceRuntime};
    let rt = FakeRuntime::new();
    let host = [0u8; 8];
    assert_eq!(
        cuda_pointer_device_with(&rt, host.as_ptr() as usize),
        None,
        "unknown memory"
    );
    for (kind, gpu, want) in [
        (AllocKind::Device, Device::cuda(1), Device::cuda(1)),
        (AllocKind::PinnedHost, Device::cuda(1), Device::CUDA_HOST),
        (AllocKind::Managed, Device::cuda(0), Device::CUDA_MANAGED),
    ] {
        let a = rt.alloc(kind, gpu, 64).unwrap();
        assert_eq!(
            cuda_pointer_device_with(&rt, a.ptr as usize),
            Some(want),
            "{kind:?}"
        );
        assert_eq!(
            cuda_pointer_device_with(&rt, a.ptr as usize + 63),
            Some(want),
            "inside {kind:?}"
        );
        assert_eq!(
            cuda_pointer_device_with(&rt, a.ptr as usize + 64),
            None,
            "past the end of {kind:?}"
        );
        rt.free(&a).unwrap();
        assert_eq!(
            cuda_pointer_device_with(&rt, a.ptr as usize),
            None,
            "freed {kind:?}"
        );
    }
}

/// The numpy header fast path (`bridges::import_ndarray`, taken by `from_dlpack` for exact
/// `numpy.ndarray`s) gives the same handle as consuming numpy's own versioned capsule.
#[test]
fn numpy_header_fast_path_matches_the_capsule() {
    Python::attach(|py| {
        let Some(np) = common::numpy(py) else {
            eprintln!("skipped: numpy is not importable (run scripts/test.sh to create .venv)");
            return;
        };
        let g = PyDict::new(py);
        g.set_item("np", np).unwrap();
        run(
            py,
            "a = np.arange(60, dtype=np.float32).reshape(3, 4, 5).transpose(2, 0, 1)[::-2, :, 1::2]\nr = np.arange(4.0)\nr.flags.writeable = False",
            &g,
        );
        for name in ["a", "r"] {
            let arr = eval(py, name, &g);
            let before = dlbind::stats::numpy_fast_imports();
            let fast = from_dlpack(&arr, None, None).unwrap();
            assert_eq!(
                dlbind::stats::numpy_fast_imports(),
                before + 1,
                "{name}: fast path not taken"
            );
            let cap = arr
                .call_method(
                    "__dlpack__",
                    (),
                    Some(&[("max_version", (1, 3))].into_py_dict(py).unwrap()),
                )
                .unwrap();
            let slow = dlbind::ImportedTensor::from_capsule(&cap).unwrap();
            assert_eq!(fast.shape(), slow.shape(), "{name}");
            assert_eq!(fast.strides(), slow.strides(), "{name}");
            assert_eq!(fast.dtype(), slow.dtype(), "{name}");
            assert_eq!(fast.data_ptr(), slow.data_ptr(), "{name}");
            assert_eq!(fast.readonly(), slow.readonly(), "{name}");
            assert_eq!(fast.device(), slow.device(), "{name}");
        }
        // A subclass is not read through the header.
        run(
            py,
            "class S(np.ndarray): pass\ns = np.arange(3.0).view(S)",
            &g,
        );
        let before = dlbind::stats::numpy_fast_imports();
        let t = from_dlpack(&eval(py, "s", &g), None, None).unwrap();
        assert_eq!(t.shape(), &[3]);
        assert_eq!(dlbind::stats::numpy_fast_imports(), before);
    });
}

/// A non-frozen array class with a hand-written DLPackSource and the bridges: every bridge
/// export holds a shared borrow of it.
#[pyclass]
struct MutArr {
    data: Vec<i32>,
    shape: Vec<usize>,
    /// Elements; `[-1]` is a reversed 1-d view (element 0 is the last one).
    strides: Vec<isize>,
    readonly: bool,
    device: Device,
}

// SAFETY: `data` is only changed by `&mut self` methods, which every export's borrow keeps out;
// shape/strides address elements inside it.
unsafe impl DLPackSource for MutArr {
    fn dlpack_data_ptr(&self) -> *mut c_void {
        if self.strides == [-1] {
            self.data.as_ptr().wrapping_add(self.data.len() - 1) as *mut c_void
        } else {
            self.data.as_ptr() as *mut c_void
        }
    }
    fn dlpack_dtype(&self) -> DLDataType {
        <i32 as DLPackElement>::DTYPE
    }
    fn dlpack_ndim(&self) -> usize {
        self.shape.len()
    }
    fn dlpack_fill_shape(&self, out: &mut [i64]) {
        dlbind::__private::fill_dims(&self.shape, out)
    }
    fn dlpack_fill_strides(&self, out: &mut [i64]) -> bool {
        dlbind::__private::fill_dims(&self.strides, out);
        true
    }
    fn dlpack_device(&self) -> Device {
        self.device
    }
    fn dlpack_readonly(&self) -> bool {
        self.readonly
    }
}

#[pymethods]
impl MutArr {
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut pyffi::Py_buffer,
        flags: std::ffi::c_int,
    ) -> PyResult<()> {
        // SAFETY: called by CPython's bf_getbuffer with a valid view.
        unsafe { dlbind::bridges::getbuffer(&slf, view, flags) }
    }
    unsafe fn __releasebuffer__(_slf: Bound<'_, Self>, _view: *mut pyffi::Py_buffer) {
        // Never called: the views' `obj` is the borrow guard, which releases them.
        unreachable!("a non-frozen class's buffer views are released by the guard")
    }
    #[getter]
    fn __array_interface__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        dlbind::bridges::array_interface(slf)
    }
    #[getter]
    fn __cuda_array_interface__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        dlbind::bridges::cuda_array_interface(slf)
    }
    #[getter]
    fn __sycl_usm_array_interface__(slf: &Bound<'_, Self>) -> PyResult<Py<PyAny>> {
        dlbind::bridges::sycl_usm_array_interface(slf)
    }
    /// Reallocates the data (what every export's borrow keeps out).
    fn grow(&mut self) {
        self.data.extend(0..1000);
        self.data.shrink_to_fit();
        self.shape = vec![self.data.len()];
        self.strides = vec![1];
    }
}

fn mut_arr(
    py: Python<'_>,
    data: Vec<i32>,
    strides: Vec<isize>,
    device: Device,
) -> Bound<'_, MutArr> {
    let shape = match strides.len() {
        1 => vec![data.len()],
        _ => vec![2, data.len() / 2],
    };
    let a = MutArr {
        data,
        shape,
        strides,
        readonly: false,
        device,
    };
    Bound::new(py, a).unwrap()
}

#[test]
fn non_frozen_bridges_hold_a_borrow() {
    let _g = common::serial();
    Python::attach(|py| {
        let np = common::numpy(py);
        let borrows = dlbind::stats::live_export_borrows();
        let g = PyDict::new(py);
        let held = |a: &Bound<'_, MutArr>| a.try_borrow_mut().is_err();

        // The buffer protocol: the view's `obj` is the guard; released with the view.
        let a = mut_arr(py, (0..6).collect(), vec![1], Device::CPU);
        g.set_item("a", &a).unwrap();
        run(py, "mv = memoryview(a)", &g);
        assert!(held(&a));
        assert_eq!(
            eval(py, "(mv.tolist(), type(mv.obj).__name__)", &g)
                .extract::<(Vec<i32>, String)>()
                .unwrap(),
            ((0..6).collect(), "ExportBorrow".to_owned())
        );
        let e = eval(py, "a.grow", &g).call0().unwrap_err();
        assert!(e.to_string().contains("Already borrowed"), "{e}");
        run(py, "mv.release()", &g);
        assert!(!held(&a), "released with the view");
        assert_eq!(dlbind::stats::live_export_borrows(), borrows);
        run(py, "a.grow()", &g);

        // __array_interface__: `data` is the guard (a byte buffer), `offset` locates element 0.
        // A reversed view reaches below element 0: the buffer starts at the lowest address.
        let r = mut_arr(py, (10..14).collect(), vec![-1], Device::CPU);
        let base = r.borrow().data.as_ptr() as usize;
        g.set_item("r", &r).unwrap();
        run(py, "ai = r.__array_interface__", &g);
        assert!(held(&r), "the dict's guard holds the borrow");
        assert_eq!(
            eval(
                py,
                "(ai['offset'], ai['strides'], type(ai['data']).__name__)",
                &g
            )
            .extract::<(usize, (i64,), String)>()
            .unwrap(),
            (12, (-4,), "ExportBorrow".to_owned())
        );
        run(py, "bm = memoryview(ai['data'])", &g);
        assert_eq!(
            eval(py, "(bm.nbytes, bm.readonly, bm.format)", &g)
                .extract::<(usize, bool, String)>()
                .unwrap(),
            (16, false, "B".to_owned())
        );
        let addr = eval(
            py,
            "__import__('ctypes').addressof(__import__('ctypes').c_char.from_buffer(bm))",
            &g,
        )
        .extract::<usize>()
        .unwrap();
        assert_eq!(
            addr, base,
            "the buffer starts at the lowest address reached"
        );
        run(py, "bm.release(); del bm", &g);
        // dlbind's own consumer reads that form (an object with only the interface).
        run(
            py,
            "class OnlyAI:\n    def __init__(self, d): self.__array_interface__ = d\noai = OnlyAI(ai)\ndel ai",
            &g,
        );
        let t = from_dlpack(&eval(py, "oai", &g), None, None).unwrap();
        assert_eq!(
            t.to_contiguous_copy().unwrap().as_slice::<i32>().unwrap(),
            &[13, 12, 11, 10]
        );
        run(py, "del oai", &g);
        assert!(held(&r), "the import holds the guard");
        drop(t);
        assert!(!held(&r), "released with the import");
        if let Some(np) = &np {
            g.set_item("np", np).unwrap();
            run(py, "x = np.asarray(OnlyAI(r.__array_interface__))", &g);
            assert_eq!(
                eval(
                    py,
                    "(x.tolist(), x.flags.writeable, type(x.base).__name__)",
                    &g
                )
                .extract::<(Vec<i32>, bool, String)>()
                .unwrap(),
                (vec![13, 12, 11, 10], true, "ExportBorrow".to_owned())
            );
            assert!(held(&r), "numpy keeps the guard as the array's base");
            run(py, "x[0] = 99", &g);
            assert_eq!(r.borrow().data[3], 99, "a view, not a copy");
            run(py, "del x", &g);
            assert!(!held(&r));
            // Read-only data: numpy gets a read-only array.
            r.borrow_mut().readonly = true;
            run(py, "x = np.asarray(OnlyAI(r.__array_interface__))", &g);
            assert!(!eval(py, "x.flags.writeable", &g).extract::<bool>().unwrap());
            run(py, "del x", &g);
            // 2-d, transposed (Fortran order): strides (1, 2) elements.
            let f = mut_arr(py, (0..6).collect(), vec![1, 2], Device::CPU);
            g.set_item("f", &f).unwrap();
            run(py, "x = np.asarray(OnlyAI(f.__array_interface__))", &g);
            assert_eq!(
                eval(py, "x.tolist()", &g)
                    .extract::<Vec<Vec<i32>>>()
                    .unwrap(),
                vec![vec![0, 2, 4], vec![1, 3, 5]]
            );
            run(py, "del x", &g);
            assert!(!held(&f));
        }
        assert!(!held(&r));

        // CUDA / SYCL interfaces: not for a non-frozen class (consumers keep only the object).
        for (device, attr) in [
            (Device::cuda(0), "__cuda_array_interface__"),
            (Device::oneapi(0), "__sycl_usm_array_interface__"),
        ] {
            let c = mut_arr(py, (0..4).collect(), vec![1], device);
            let e = c.getattr(attr).unwrap_err();
            assert!(e.is_instance_of::<PyAttributeError>(py), "{attr}: {e}");
            assert!(e.to_string().contains("not frozen"), "{attr}: {e}");
            assert!(!held(&c));
        }
        run(py, "del a, r, mv", &g);
        assert_eq!(dlbind::stats::live_export_borrows(), borrows);
    });
}
