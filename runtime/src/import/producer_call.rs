//! Step 4 of the import order: the producer's capsule — `obj` itself when it is one, else its
//! `__dlpack__` (looked up on the type without raising, cached per type: the descriptor by version
//! tag on the full API, only its presence on an immutable type under abi3; called by vectorcall
//! with interned keyword names; a TypeError from a producer that predates the keywords retried
//! once without them), else the bridges (step 5).

use std::ptr;

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};

use crate::cpython::api::type_lookup;
use crate::cpython::getattr_optional;
use crate::cpython::names::names;
use crate::cpython::typecache::TypeCache;
use crate::device::Device;
use crate::import::ImportedTensor;
use crate::spec::streams::has_stream_rules;

/// What the importer remembers of the last producer type's `__dlpack__` (`cpython::typecache`).
///
/// Full API: the descriptor `_PyType_Lookup` found, a borrowed pointer. The entry counts only
/// while the type's version tag is the one it was stored under, and while it is, the descriptor
/// is the value of an entry of a dict on the type's MRO, which holds a reference to it: those
/// dicts change only through `type.__setattr__` / `__delattr__`, `__bases__` assignment, or C
/// code that must call `PyType_Modified` after writing `tp_dict`, each of which gives the type
/// and its subclasses a new tag (`type.__dict__` is a read-only proxy). CPython's own method cache
/// keeps the same borrowed pointer under the same tag.
///
/// abi3: `()`, only that an immutable type has a `__dlpack__`. The lookup is
/// `getattr(type, "__dlpack__")` there ([`type_lookup`]), which calls the attribute's
/// `__get__(None, type)`: for a `classmethod`, or any descriptor whose `__get__` makes an object,
/// a new object each time, kept alive by nothing but the reference the lookup returns. A pointer
/// to it kept past the call dangled on the next import (issue 41). Nothing of it is needed: the
/// call binds `__dlpack__` through the object ([`call_method`]), as Python's own call does. An
/// immutable type's own attributes cannot change; a base that is not immutable could lose its
/// `__dlpack__`, and then a stale presence makes that call raise AttributeError where the
/// bridges would have been tried: no memory is involved.
#[cfg(not(Py_LIMITED_API))]
static LOOKUP_CACHE: TypeCache<usize, 1> = TypeCache::new(0);
#[cfg(Py_LIMITED_API)]
static LOOKUP_CACHE: TypeCache<(), 1> = TypeCache::new(());

/// `type(obj).__dlpack__` as [`call_method`] uses it: full API, the descriptor found on the
/// type's MRO (a strong reference); abi3, nothing: only that the type has one ([`LOOKUP_CACHE`]).
#[cfg(not(Py_LIMITED_API))]
type DlpackAttr<'py> = Bound<'py, PyAny>;
#[cfg(Py_LIMITED_API)]
type DlpackAttr<'py> = std::marker::PhantomData<Python<'py>>;

thread_local! {
    /// The last producer type (address) whose `__dlpack__`, asked for no stream, exported
    /// memory on a device with streams: its objects are asked `__dlpack_device__` first, so
    /// that a GPU object is exported once, with the consumer's stream. Only an address is kept:
    /// a new type at a freed type's address costs one `__dlpack_device__` call, nothing more.
    static GPU_PRODUCER_TYPE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// `type(o).__dlpack__` without raising: `None` when the type has none.
///
/// # Safety
/// GIL held; `o` live; `name` is the interned `"__dlpack__"`.
#[inline]
unsafe fn lookup_dlpack<'py>(
    py: Python<'py>,
    o: *mut ffi::PyObject,
    name: *mut ffi::PyObject,
) -> Option<DlpackAttr<'py>> {
    // SAFETY: caller contract; `type_lookup` returns a new reference or NULL, never raising.
    #[cfg(not(Py_LIMITED_API))]
    unsafe {
        let tp = ffi::Py_TYPE(o);
        if let Some(d) = LOOKUP_CACHE.get(tp) {
            // A cached descriptor is alive while its type's tag holds (see `LOOKUP_CACHE`);
            // `from_borrowed_ptr` takes a strong reference to it.
            return Some(Bound::from_borrowed_ptr(py, d as *mut ffi::PyObject));
        }
        let d = type_lookup(tp, name);
        if d.is_null() {
            return None;
        }
        LOOKUP_CACHE.set(tp, d as usize);
        Some(Bound::from_owned_ptr(py, d))
    }
    // SAFETY: caller contract; `type_lookup` returns a new reference or NULL, never raising.
    #[cfg(Py_LIMITED_API)]
    unsafe {
        let tp = ffi::Py_TYPE(o);
        if LOOKUP_CACHE.get(tp).is_some() {
            return Some(std::marker::PhantomData);
        }
        let d = type_lookup(tp, name);
        if d.is_null() {
            return None;
        }
        LOOKUP_CACHE.set(tp, ());
        // Only the presence is kept: this release may free what the lookup made (see
        // `LOOKUP_CACHE`), and may run Python code, which sees the entry complete.
        ffi::Py_DECREF(d);
        let _ = py;
        Some(std::marker::PhantomData)
    }
}

/// Calls `type(obj).__dlpack__` (found as `descr`) as a method of `obj` with `vals` for
/// `kwnames`.
///
/// # Safety
/// `vals` are live objects; `kwnames` is NULL or a tuple of `vals.len()` strings; the GIL is
/// held.
unsafe fn call_method<'py>(
    obj: &Bound<'py, PyAny>,
    descr: &DlpackAttr<'py>,
    vals: &[*mut ffi::PyObject],
    kwnames: *mut ffi::PyObject,
) -> PyResult<Bound<'py, PyAny>> {
    let py = obj.py();
    let mut args: [*mut ffi::PyObject; 5] = [ptr::null_mut(); 5];
    args[0] = obj.as_ptr();
    args[1..1 + vals.len()].copy_from_slice(vals);
    // SAFETY: caller contract; `args` holds 1 + vals.len() live objects; `descr` (full API) is a
    // live object, a strong reference.
    unsafe {
        #[cfg(not(Py_LIMITED_API))]
        if ffi::PyType_HasFeature(
            ffi::Py_TYPE(descr.as_ptr()),
            ffi::Py_TPFLAGS_METHOD_DESCRIPTOR,
        ) != 0
        {
            // A plain function / method descriptor: call it unbound with `obj` first (what
            // CPython's own method calls do).
            let res = crate::cpython::api::vectorcall(descr.as_ptr(), args.as_ptr(), 1, kwnames);
            return Bound::from_owned_ptr_or_err(py, res);
        }
        // Anything else (staticmethod, classmethod, callable object, ...), and everything in an
        // abi3 build, which keeps no descriptor: bind through getattr, as Python's own call does.
        #[cfg(Py_LIMITED_API)]
        let _ = descr;
        let bound = obj.getattr(names(py).dlpack.bind(py))?;
        let res = crate::cpython::api::vectorcall(bound.as_ptr(), args.as_ptr().add(1), 0, kwnames);
        Bound::from_owned_ptr_or_err(py, res)
    }
}

/// The producer's capsule: `obj` itself when it is one, else its `__dlpack__` (keywords as the
/// call asks; a TypeError retried once without them), else the bridges.
pub(super) fn capsule_or_dlpack(
    obj: &Bound<'_, PyAny>,
    device: Option<Device>,
    copy: Option<bool>,
) -> PyResult<ImportedTensor> {
    let py = obj.py();
    let o = obj.as_ptr();
    // SAFETY: type checks on a live object.
    let tensor = if unsafe { ffi::PyCapsule_CheckExact(o) } != 0 {
        ImportedTensor::from_capsule(obj)?
    } else {
        let n = names(py);
        // SAFETY: GIL held, `o` live, the interned name.
        let Some(descr) = (unsafe { lookup_dlpack(py, o, n.dlpack.as_ptr()) }) else {
            // No `__dlpack__`: the bridges (CUDA array interface → SYCL USM interface →
            // `__array_interface__` → buffer protocol); none → NoProtocol naming them all.
            return crate::bridges::import_bridges(obj);
        };
        // The stream the consumer will use on the device asked for (CUDA: the current stream
        // of a present runtime, else 1 — never 0; ROCm 0; stream-less devices: none); with no
        // device asked for, on the producer's own device when its type has exported GPU memory
        // before (`__dlpack_device__` asked first; other types are not asked).
        // SAFETY: reading the type of a live object.
        let tp = unsafe { ffi::Py_TYPE(o) } as usize;
        let stream = match device {
            Some(d) => crate::gpu::consumer_stream_for(d),
            None if GPU_PRODUCER_TYPE.with(|c| c.get()) == tp => stream_for_producer_device(obj)?,
            None => None,
        };
        let capsule = call_producer(obj, &descr, device, copy, stream)?;
        let t = ImportedTensor::from_capsule(&capsule)?;
        match device {
            None if stream.is_none() && has_stream_rules(t.device().device_type) => {
                // The producer was asked for no stream, and its memory is on a device with
                // streams: torch reads `stream=None` as "no synchronisation", so its pending work
                // could still be in flight. Export again with the consumer's stream, after the
                // first export's deleter has run, and remember the type, whose next objects are
                // asked `__dlpack_device__` first (one export each). Host producers (the common
                // case) pay nothing for this.
                GPU_PRODUCER_TYPE.with(|c| c.set(tp));
                let stream = crate::gpu::consumer_stream_for(t.device());
                drop(t);
                let capsule = call_producer(obj, &descr, None, copy, stream)?;
                ImportedTensor::from_capsule(&capsule)?
            }
            _ => t,
        }
    };
    Ok(tensor)
}

/// Calls the producer's `__dlpack__` with `max_version` and the keywords the call needs
/// (`dl_device`, `stream`, `copy`); a TypeError from a producer without the DLPack 2023.12
/// keywords (`__dlpack__(self, stream=None)`, before 2023) is retried once with `stream` alone
/// (or nothing). The caller checks what came back against the request (`finish_import`): the
/// device must match (BufferError otherwise); a legacy capsule is a view, so `copy=False`
/// holds; for `copy=True` dlbind copies.
fn call_producer<'py>(
    obj: &Bound<'py, PyAny>,
    descr: &DlpackAttr<'py>,
    device: Option<Device>,
    copy: Option<bool>,
    stream: Option<i64>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = obj.py();
    let n = names(py);
    let first = if device.is_none() && copy.is_none() && stream.is_none() {
        // SAFETY: live objects; kwnames_fast has one name for one value.
        unsafe { call_method(obj, descr, &[n.version.as_ptr()], n.kwnames_fast.as_ptr()) }
    } else {
        let mut names_v: Vec<&Py<PyString>> = vec![&n.kw_max_version];
        let mut vals: Vec<Bound<'_, PyAny>> = vec![n.version.bind(py).clone().into_any()];
        if let Some(d) = device {
            names_v.push(&n.kw_dl_device);
            vals.push(d.to_py_tuple(py)?.into_any());
        }
        if let Some(s) = stream {
            names_v.push(&n.kw_stream);
            vals.push(s.into_pyobject(py)?.into_any());
        }
        if let Some(c) = copy {
            names_v.push(&n.kw_copy);
            vals.push(pyo3::types::PyBool::new(py, c).to_owned().into_any());
        }
        let kwnames = PyTuple::new(py, names_v.iter().map(|s| s.bind(py)))?;
        let raw: Vec<*mut ffi::PyObject> = vals.iter().map(|v| v.as_ptr()).collect();
        // SAFETY: live objects; kwnames has one name per value.
        unsafe { call_method(obj, descr, &raw, kwnames.as_ptr()) }
    };
    match first {
        Ok(c) => Ok(c),
        Err(e) if e.is_instance_of::<PyTypeError>(py) => {
            // A producer without the DLPack 2023.12 keywords (it still takes `stream`). Without
            // `dl_device` it exports where its data is, so the stream is the consumer's on that
            // device (none for host memory), not on the device asked for.
            let stream = match device {
                Some(_) => stream_for_producer_device(obj)?,
                None => stream,
            };
            let retry = match stream {
                // SAFETY: live objects, no keywords.
                None => unsafe { call_method(obj, descr, &[], ptr::null_mut()) },
                Some(s) => {
                    let kwnames = PyTuple::new(py, [n.kw_stream.bind(py)])?;
                    let s = s.into_pyobject(py)?;
                    // SAFETY: live objects; kwnames has one name for one value.
                    unsafe { call_method(obj, descr, &[s.as_ptr()], kwnames.as_ptr()) }
                }
            };
            retry.inspect_err(|e2| e2.set_cause(py, Some(e)))
        }
        Err(e) => Err(e),
    }
}

/// The consumer's stream on the producer's device (`__dlpack_device__`) when that device has
/// streams, else `None`: also for a producer without `__dlpack_device__` or whose answer is not
/// a pair of ints (the capsule's device is then checked after the export, as always). An
/// exception from the call propagates.
fn stream_for_producer_device(obj: &Bound<'_, PyAny>) -> PyResult<Option<i64>> {
    let py = obj.py();
    let name = names(py).dlpack_device.bind(py);
    let Some(method) = getattr_optional(obj, name)? else {
        return Ok(None);
    };
    let Ok((t, id)) = method.call0()?.extract::<(i32, i32)>() else {
        return Ok(None);
    };
    // `consumer_stream_for` is `None` for stream-less devices.
    Ok(crate::gpu::consumer_stream_for(Device::new(
        crate::ffi::DLDeviceType(t),
        id,
    )))
}
