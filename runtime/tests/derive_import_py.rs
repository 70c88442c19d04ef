//! `#[derive(FromDLPack)]` (issue 33): the README's `Frame` and two constrained types built by
//! `from_dlpack` through every path the derive writes: numpy's header (`from_python_view`), a
//! capsule (`from_imported` / `from_imported_into`), the same frozen type (`share_from` /
//! `share_into`), and what each refuses.

mod common;

use dlbind::prelude::*;
use dlbind::stats::{live_exports, numpy_fast_imports, same_type_views};
use pyo3::types::PyDict;

/// The README's type, with no hand-written import.
#[pyclass(frozen)]
#[derive(DLPackExport, FromDLPack)]
struct Frame {
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
    #[dlpack(readonly)]
    readonly: bool,
}

#[dlbind::pymethods]
impl Frame {}

/// Fixed dtype, fixed rank, no strides, device or readonly field, and a field of its own.
#[pyclass(frozen)]
#[derive(DLPackExport, FromDLPack)]
#[dlpack(dtype = "float32")]
struct Grid {
    #[dlpack(data)]
    buf: Buffer,
    #[dlpack(shape)]
    shape: [u32; 2],
    label: String,
}

#[dlbind::pymethods]
impl Grid {}

/// Not frozen: the same-type shortcuts decline, instances come from `Bound::new`.
#[pyclass]
#[derive(DLPackExport, FromDLPack)]
struct Plain {
    #[dlpack(data)]
    buf: Buffer,
    #[dlpack(dtype)]
    dtype: DLDataType,
    #[dlpack(shape)]
    shape: Box<[usize]>,
    #[dlpack(strides)]
    strides: Vec<isize>,
    #[dlpack(readonly)]
    readonly: Writability,
}

#[dlbind::pymethods]
impl Plain {}

fn module<'py>(py: Python<'py>) -> Bound<'py, PyModule> {
    let m = PyModule::new(py, "derived").unwrap();
    m.add_class::<Frame>().unwrap();
    dlbind::add_from_dlpack::<Frame>(&m).unwrap();
    for (name, add) in [
        (
            "grid",
            dlbind::add_from_dlpack::<Grid> as fn(&Bound<'_, PyModule>) -> PyResult<()>,
        ),
        ("plain", dlbind::add_from_dlpack::<Plain>),
    ] {
        let sub = PyModule::new(py, name).unwrap();
        add(&sub).unwrap();
        m.add(name, sub).unwrap();
    }
    m
}

fn run(py: Python<'_>, code: &str, locals: &Bound<'_, PyDict>) {
    let code = std::ffi::CString::new(code).unwrap();
    py.run(&code, None, Some(locals)).unwrap();
}

#[test]
fn frame_from_numpy_capsules_and_itself() {
    let _g = common::serial();
    Python::attach(|py| {
        let Some(np) = common::numpy(py) else {
            eprintln!("skipped: numpy is not importable (run scripts/test.sh to create .venv)");
            return;
        };
        let m = module(py);
        let f = m.getattr("from_dlpack").unwrap();
        let base = live_exports();

        // numpy's header: a strided view, no managed tensor.
        let a = np
            .call_method1("arange", (12.0,))
            .unwrap()
            .call_method1("reshape", (3, 4))
            .unwrap()
            .getattr("T")
            .unwrap();
        let n = numpy_fast_imports();
        let t = f.call1((&a,)).unwrap();
        assert_eq!(numpy_fast_imports(), n + 1, "read from numpy's header");
        let fr = t.cast::<Frame>().unwrap().get();
        assert_eq!(
            (fr.shape.to_vec(), fr.strides.to_vec()),
            (vec![4, 3], vec![1, 4])
        );
        assert_eq!(fr.dtype, <f64 as DLPackElement>::DTYPE);
        assert_eq!(fr.device, Device::CPU);
        assert!(!fr.readonly);
        let ptr: usize = a
            .getattr("ctypes")
            .unwrap()
            .getattr("data")
            .unwrap()
            .extract()
            .unwrap();
        assert_eq!(DataSource::data_ptr(&fr.buf) as usize, ptr, "zero-copy");

        // A read-only array gives a read-only frame.
        let ro = np.call_method1("arange", (5,)).unwrap();
        ro.getattr("flags")
            .unwrap()
            .setattr("writeable", false)
            .unwrap();
        let t2 = f.call1((&ro,)).unwrap();
        assert!(t2.cast::<Frame>().unwrap().get().readonly);

        // A raw versioned capsule: the handle kept in the buffer (in place or moved).
        let kw = PyDict::new(py);
        kw.set_item("max_version", (1, 3)).unwrap();
        let b = np
            .call_method1("arange", (6,))
            .unwrap()
            .call_method1("astype", ("int32",))
            .unwrap();
        let cap = b.call_method("__dlpack__", (), Some(&kw)).unwrap();
        let t3 = f.call1((&cap,)).unwrap();
        let fr3 = t3.cast::<Frame>().unwrap().get();
        assert_eq!(
            (fr3.shape.to_vec(), fr3.strides.to_vec()),
            (vec![6], vec![1])
        );
        assert_eq!(fr3.dtype, <i32 as DLPackElement>::DTYPE);
        // SAFETY: only `is_some` is asked; nothing borrowed from the tensor outlives the call.
        let held = unsafe { fr3.buf.imported() }.is_some();
        assert!(held, "the capsule's handle");

        // Itself: a view of the same memory keeping the source alive (a frame that is itself
        // a view keeps that view's owner, the numpy array, instead: no chain of owners).
        // SAFETY: reads the count of a live object.
        let refcnt = |o: &Bound<'_, PyAny>| unsafe { pyo3::ffi::Py_REFCNT(o.as_ptr()) };
        let v = same_type_views();
        let (src_refs, a_refs) = (refcnt(&t3), refcnt(&a));
        let t4 = f.call1((&t3,)).unwrap();
        let t5 = f.call1((&t,)).unwrap();
        assert_eq!(same_type_views(), v + 2, "the same-type shortcut");
        let (fr4, fr5) = (
            t4.cast::<Frame>().unwrap().get(),
            t5.cast::<Frame>().unwrap().get(),
        );
        assert_eq!(
            DataSource::data_ptr(&fr4.buf),
            DataSource::data_ptr(&fr3.buf)
        );
        assert_eq!(
            (fr4.shape.to_vec(), fr4.strides.to_vec(), fr4.dtype),
            (vec![6], vec![1], fr3.dtype)
        );
        assert_eq!(
            DataSource::data_ptr(&fr5.buf),
            DataSource::data_ptr(&fr.buf)
        );
        assert_eq!(
            (fr5.shape.to_vec(), fr5.strides.to_vec(), fr5.readonly),
            (vec![4, 3], vec![1, 4], false)
        );
        assert_eq!(refcnt(&t3), src_refs + 1, "the view holds its source");
        assert_eq!(
            refcnt(&a),
            a_refs + 1,
            "a view of a view holds the original owner"
        );

        // Round trip through numpy: the same values.
        let back = np.call_method1("from_dlpack", (&t5,)).unwrap();
        assert!(
            np.call_method1("array_equal", (&back, &a))
                .unwrap()
                .extract::<bool>()
                .unwrap()
        );
        drop((t, t2, t3, t4, t5, back, cap));
        py.run(c"import gc; gc.collect()", None, None).unwrap();
        assert_eq!(live_exports(), base, "every export released");
    });
}

#[test]
fn constrained_types_refuse_what_their_fields_cannot_hold() {
    let _g = common::serial();
    Python::attach(|py| {
        let Some(np) = common::numpy(py) else {
            eprintln!("skipped: numpy is not importable (run scripts/test.sh to create .venv)");
            return;
        };
        let m = module(py);
        let locals = PyDict::new(py);
        locals.set_item("np", &np).unwrap();
        locals.set_item("grid", m.getattr("grid").unwrap()).unwrap();
        locals
            .set_item("plain", m.getattr("plain").unwrap())
            .unwrap();
        run(
            py,
            r#"
g = grid.from_dlpack(np.zeros((2, 3), dtype=np.float32))
errors = {}
for name, x in {
    "dtype": np.zeros((2, 3)),                                  # float64, the type is float32
    "strides": np.zeros((3, 2), dtype=np.float32).T,            # no strides field
    "rank": np.zeros((2, 3, 4), dtype=np.float32),              # [u32; 2]
    "readonly": np.zeros((2, 3), dtype=np.float32),             # no readonly field
}.items():
    if name == "readonly":
        x.flags.writeable = False
    for via in ("array", "capsule"):
        arg = x if via == "array" else x.__dlpack__(max_version=(1, 3))
        try:
            grid.from_dlpack(arg)
        except Exception as e:
            errors[name, via] = (type(e).__name__, str(e))
        else:
            errors[name, via] = None
p = plain.from_dlpack(np.arange(6.0).reshape(2, 3))
p2 = plain.from_dlpack(p)
q = np.from_dlpack(p2)
"#,
            &locals,
        );
        let g = locals.get_item("g").unwrap().unwrap();
        let g = g.cast::<Grid>().unwrap().get();
        assert_eq!(
            (g.shape, g.label.as_str()),
            ([2, 3], ""),
            "other fields: Default"
        );
        let errors = locals.get_item("errors").unwrap().unwrap();
        for (name, want) in [
            ("dtype", "dtype is float64, not float32"),
            ("strides", "must be C-contiguous"),
            ("rank", "does not fit the shape field"),
            ("readonly", "cannot hold read-only memory"),
        ] {
            for via in ["array", "capsule"] {
                let e = errors.get_item((name, via)).unwrap();
                let (kind, msg): (String, String) = e
                    .extract()
                    .unwrap_or_else(|_| panic!("{name} via {via}: accepted"));
                assert!(msg.contains(want), "{name} via {via}: {kind}: {msg}");
                assert!(
                    msg.contains("Grid"),
                    "{name} via {via}: names the type: {msg}"
                );
            }
        }
        let q = locals.get_item("q").unwrap().unwrap();
        let shape: Vec<usize> = q.getattr("shape").unwrap().extract().unwrap();
        assert_eq!(shape, vec![2, 3]);
        let p = locals.get_item("p").unwrap().unwrap();
        let p2 = locals.get_item("p2").unwrap().unwrap();
        let (p, p2) = (
            p.cast::<Plain>().unwrap().borrow(),
            p2.cast::<Plain>().unwrap().borrow(),
        );
        assert_eq!(DataSource::data_ptr(&p.buf), DataSource::data_ptr(&p2.buf));
        assert_eq!(&*p2.shape, &[2, 3]);
        assert_eq!(p2.strides, vec![3, 1]);
        assert!(p.readonly.is_writable());
    });
}

/// `add_from_dlpack` gives a frozen type a free list, so that later imports are written in place
/// into released instances (`from_imported_into`, `share_into`): the same values every time.
#[test]
fn frame_imports_reuse_released_instances_in_place() {
    let _g = common::serial();
    Python::attach(|py| {
        let Some(np) = common::numpy(py) else {
            eprintln!("skipped: numpy is not importable (run scripts/test.sh to create .venv)");
            return;
        };
        let m = module(py);
        let f = m.getattr("from_dlpack").unwrap();
        let has_list = dlbind::stats::freelist_len::<Frame>(py).is_some();
        if cfg!(Py_LIMITED_API) || !dlbind::cpython::freelist::freelists_allowed() {
            assert!(!has_list, "no free lists here");
        } else {
            assert!(
                has_list,
                "add_from_dlpack gave the frozen Frame a free list"
            );
        }
        let base = live_exports();
        let kw = PyDict::new(py);
        kw.set_item("max_version", (1, 3)).unwrap();
        for i in 1..40i64 {
            let a = np
                .call_method1("arange", (i,))
                .unwrap()
                .call_method1("astype", ("float32",))
                .unwrap();
            let cap = a.call_method("__dlpack__", (), Some(&kw)).unwrap();
            let t = f.call1((&cap,)).unwrap();
            let s = f.call1((&t,)).unwrap();
            for x in [&t, &s] {
                let fr = x.cast::<Frame>().unwrap().get();
                assert_eq!((fr.shape.to_vec(), fr.strides.to_vec()), (vec![i], vec![1]));
                assert_eq!(fr.dtype, <f32 as DLPackElement>::DTYPE);
                assert!(!fr.readonly);
            }
            let back = np.call_method1("from_dlpack", (&s,)).unwrap();
            assert!(
                np.call_method1("array_equal", (&back, &a))
                    .unwrap()
                    .extract::<bool>()
                    .unwrap()
            );
        }
        py.run(c"import gc; gc.collect()", None, None).unwrap();
        assert_eq!(live_exports(), base, "every export released");
        if has_list {
            assert!(
                dlbind::stats::freelist_len::<Frame>(py).unwrap() > 0,
                "instances kept"
            );
            assert!(
                dlbind::stats::builds_directly::<Frame>(py),
                "written in place"
            );
        }
    });
}
