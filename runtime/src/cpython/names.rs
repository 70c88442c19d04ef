//! Every interned Python name the runtime uses, built once per process: the protocol's method
//! and keyword names (from the generated `protocol` module and the spec's exchange-table
//! attributes), the older interfaces' attribute names, torch's lazy-bit methods, and the cached
//! `max_version` tuple. Nothing outside this file interns a name.

use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyString, PyTuple};
use std::sync::atomic::{AtomicPtr, Ordering};

use crate::device::Device;

use crate::export::request::EXPORT_VERSION;
use crate::ffi::{DLPACK_EXCHANGE_API_ATTR, DLPACK_EXCHANGE_API_LEGACY_ATTRS};
use crate::spec::protocol;

pub(crate) struct Names {
    pub(crate) dlpack: Py<PyString>,
    pub(crate) dlpack_device: Py<PyString>,
    pub(crate) from_dlpack: Py<PyString>,
    /// `__dlpack_c_exchange_api__` and the legacy attribute names older producers use.
    pub(crate) exchange_api: Py<PyString>,
    pub(crate) exchange_api_legacy: Vec<Py<PyString>>,
    /// `__cuda_array_interface__`, `__sycl_usm_array_interface__`, `__array_interface__`.
    pub(crate) cuda_array_interface: Py<PyString>,
    pub(crate) sycl_usm_array_interface: Py<PyString>,
    pub(crate) array_interface: Py<PyString>,
    /// torch's `is_neg` / `is_conj` (the lazy bits an exchange-table import refuses).
    pub(crate) is_neg: Py<PyString>,
    pub(crate) is_conj: Py<PyString>,
    /// `from_dlpack`'s keywords (`device`, `copy`), from the generated protocol names.
    pub(crate) kw_from_device: Py<PyString>,
    pub(crate) kw_from_copy: Py<PyString>,
    pub(crate) kw_stream: Py<PyString>,
    pub(crate) kw_max_version: Py<PyString>,
    pub(crate) kw_dl_device: Py<PyString>,
    pub(crate) kw_copy: Py<PyString>,
    /// `("max_version",)`
    pub(crate) kwnames_fast: Py<PyTuple>,
    /// `(DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION)`
    pub(crate) version: Py<PyTuple>,
    /// `(device_type, 0)` for device types `0..DEVICE_TUPLES`: what `__dlpack_device__`
    /// returns for device 0 of each type, made once (tuples are immutable; nanobind does the
    /// same).
    pub(crate) device_tuples: Vec<Py<PyTuple>>,
}

/// How many device types get a cached `(device_type, 0)` tuple (the spec's types are < 32).
pub(crate) const DEVICE_TUPLES: usize = 32;

pub(crate) static NAMES: PyOnceLock<Names> = PyOnceLock::new();

/// The tuples of [`Names::device_tuples`] as borrowed pointers, for `__dlpack_device__`'s fast
/// path ([`cached_device_tuple`]), which must not spend instructions on the `PyOnceLock`'s
/// state: null until [`names`] first returns, set before it returns, never changed after
/// (`NAMES` keeps the strong references, for the life of the process).
static DEVICE_TUPLE_PTRS: [AtomicPtr<pyo3::ffi::PyObject>; DEVICE_TUPLES] =
    [const { AtomicPtr::new(std::ptr::null_mut()) }; DEVICE_TUPLES];

/// The interned `max_version` keyword name, for the versioned `__dlpack__` call's fast check
/// ([`crate::cpython::idcache::only_max_version`]), which must not spend instructions on the `PyOnceLock`'s
/// state: null until [`names`] first returns (a check against it then fails, and the general
/// path runs `names`), set before it returns, never changed after (`NAMES` keeps the string).
static KW_MAX_VERSION_PTR: AtomicPtr<pyo3::ffi::PyObject> = AtomicPtr::new(std::ptr::null_mut());

/// The interned `max_version` (null before [`names`] first returned).
#[inline]
pub(crate) fn kw_max_version_ptr() -> *mut pyo3::ffi::PyObject {
    KW_MAX_VERSION_PTR.load(Ordering::Relaxed)
}

/// A new reference to the cached `(device_type, 0)` tuple of `device`, or `None` (another id or
/// a type without a cached tuple: callers then take the general path).
///
/// # Safety
/// The calling thread holds the GIL (the incref), and [`names`] has returned before, on this
/// thread or on one whose work this thread has seen (as a method descriptor installed after it
/// is seen by whoever calls that method).
#[inline]
pub(crate) unsafe fn cached_device_tuple(device: Device) -> Option<*mut pyo3::ffi::PyObject> {
    if device.device_id != 0 {
        return None;
    }
    let slot = DEVICE_TUPLE_PTRS.get(usize::try_from(device.device_type.0).ok()?)?;
    let t = slot.load(Ordering::Relaxed);
    debug_assert!(!t.is_null(), "cached_device_tuple before names()");
    // SAFETY: GIL held (caller); `t` is one of `NAMES`'s tuples, alive for the process, and
    // non-null because `names` ran first (caller).
    unsafe { pyo3::ffi::Py_INCREF(t) };
    Some(t)
}

#[inline]
pub(crate) fn names(py: Python<'_>) -> &Names {
    match NAMES.get(py) {
        Some(n) => n,
        None => init_names(py),
    }
}

/// The first [`names`]: builds them (the value `NAMES` keeps, should two threads race) and
/// publishes the device tuples of that value to [`DEVICE_TUPLE_PTRS`] and its `max_version` to
/// [`KW_MAX_VERSION_PTR`].
#[cold]
#[inline(never)]
fn init_names(py: Python<'_>) -> &Names {
    let names = NAMES.get_or_init(py, || make_names(py));
    for (slot, t) in DEVICE_TUPLE_PTRS.iter().zip(&names.device_tuples) {
        slot.store(t.as_ptr(), Ordering::Relaxed);
    }
    KW_MAX_VERSION_PTR.store(names.kw_max_version.as_ptr(), Ordering::Relaxed);
    names
}

fn make_names(py: Python<'_>) -> Names {
    {
        let s = |n: &str| PyString::intern(py, n).unbind();
        let kw_max_version = s(protocol::KW_MAX_VERSION);
        Names {
            dlpack: s(protocol::DLPACK_METHOD),
            dlpack_device: s(protocol::DLPACK_DEVICE_METHOD),
            from_dlpack: s(protocol::FROM_DLPACK_FUNCTION),
            exchange_api: s(DLPACK_EXCHANGE_API_ATTR),
            exchange_api_legacy: DLPACK_EXCHANGE_API_LEGACY_ATTRS
                .iter()
                .map(|n| s(n))
                .collect(),
            cuda_array_interface: s("__cuda_array_interface__"),
            sycl_usm_array_interface: s("__sycl_usm_array_interface__"),
            array_interface: s("__array_interface__"),
            is_neg: s("is_neg"),
            is_conj: s("is_conj"),
            kw_from_device: s(protocol::FROM_DLPACK_KW_DEVICE),
            kw_from_copy: s(protocol::FROM_DLPACK_KW_COPY),
            kw_stream: s(protocol::KW_STREAM),
            kw_dl_device: s(protocol::KW_DL_DEVICE),
            kw_copy: s(protocol::KW_COPY),
            kwnames_fast: PyTuple::new(py, [kw_max_version.bind(py)])
                .expect("tuple")
                .unbind(),
            kw_max_version,
            version: PyTuple::new(py, [EXPORT_VERSION.major, EXPORT_VERSION.minor])
                .expect("tuple")
                .unbind(),
            device_tuples: (0..DEVICE_TUPLES as i32)
                .map(|t| PyTuple::new(py, [t, 0]).expect("tuple").unbind())
                .collect(),
        }
    }
}

/// `(device_type, device_id)` of `device` as a new reference: the cached tuple for device 0 of a
/// common type ([`cached_device_tuple`]), else a new tuple.
#[inline]
pub(crate) fn device_tuple(py: Python<'_>, device: Device) -> PyResult<*mut pyo3::ffi::PyObject> {
    // `names` first: the cached tuples are published when they are built.
    names(py);
    // SAFETY: GIL held (`py`); `names` has returned.
    if let Some(t) = unsafe { cached_device_tuple(device) } {
        return Ok(t);
    }
    let (t, id) = device.to_tuple();
    Ok(PyTuple::new(py, [t, id])?.into_ptr())
}
