//! The fast consumer entry point: a raw `METH_FASTCALL | METH_KEYWORDS` `from_dlpack` that builds
//! the caller's own array type `T` directly (same-type view, numpy header view, exchange table),
//! and its installation as a module function or a static method; and the typed element access
//! of an import: which Rust element type reads which dtype, which may be lent (`bool` is not),
//! and [`ImportedTensor::to_vec`], the checked copy.

use std::ptr;

use pyo3::Borrowed;
use pyo3::PyClass;
use pyo3::ffi;
use pyo3::prelude::*;

use crate::bridges::PythonView;
use crate::device::Device;
use crate::dtype::describe;
use crate::error::DlpackError;
use crate::ffi::DLDataType;
use crate::import::{FromDLPack, ImportedTensor, Slot};
use crate::spec::elements::DLPackElement;
use crate::spec::errors::FailureKind;
use crate::spec::protocol;

use super::order::{Destination, import};
use crate::args::parse_from_dlpack_args;
use crate::cpython::boundary::{at_c_boundary, leaked_fastcall_def, set_type_dict_item};
use crate::export::access::is_frozen;

/// The destination of the typed `from_dlpack`: a new `T` object, as a bare new reference (NULL
/// with the exception set).
struct Typed<'py, T> {
    py: Python<'py>,
    _t: std::marker::PhantomData<fn() -> T>,
}

impl<T> Destination for Typed<'_, T>
where
    T: PyClass + FromDLPack + Into<pyo3::PyClassInitializer<T>>,
{
    type Out = *mut ffi::PyObject;

    /// [`FromDLPack::share_from`] when `x` is exactly a `T` and `T` is a `#[pyclass(frozen)]`
    /// (what `T`'s own exchange table would give, without the managed-tensor round trip; a
    /// non-frozen `T` takes its table's owning export, which holds a borrow of `x`).
    #[inline(always)]
    fn same_type(&self, x: &Bound<'_, PyAny>) -> Option<Self::Out> {
        let py = self.py;
        // Frozen types only (a constant): a view of a non-frozen object must hold a borrow of
        // it, which the owning export of `T`'s table does and `share_from` cannot promise.
        if !is_frozen::<T>()
            // SAFETY: reading the type of a live object.
            || unsafe { ffi::Py_TYPE(x.as_ptr()) } != T::type_object_raw(py)
            || !crate::exchange::same_type_views_enabled()
        {
            return None;
        }
        // SAFETY: the exact type was checked just above.
        let src = unsafe { x.cast_unchecked::<T>() };
        // The value written in place when `T` can (no move of it into the object).
        // SAFETY: GIL held (`py`) until the instance is filled or given back below.
        if let Some((pending, slot)) = unsafe { crate::cpython::freelist::pop_for_fill::<T>(py) } {
            let place = slot.as_ptr();
            if let Some(_written) = T::share_into(src, Slot::new(slot)) {
                // SAFETY: a `Written` for this call's slot: a whole `T` was written there
                // (`Slot::write`, or the implementer's `unsafe` `Slot::assume_written`), and
                // nothing else refers to it yet.
                let obj = unsafe { pending.filled((*place).__dlbind_needs_tracking(py)) };
                crate::exchange::note_same_type_view();
                return Some(obj);
            }
            drop(pending);
        }
        let v = T::share_from(src)?;
        let obj = match v {
            Ok(v) => new_instance(py, v),
            Err(e) => restore_error(py, e),
        };
        if !obj.is_null() {
            crate::exchange::note_same_type_view();
        }
        Some(obj)
    }

    #[inline(always)]
    fn view(&self, v: &PythonView<'_, '_>) -> Self::Out {
        instance_from_view::<T>(self.py, v)
    }

    /// The value written in place when `T` can ([`FromDLPack::from_imported_into`]), else
    /// [`FromDLPack::from_imported`] moved into a new instance.
    #[inline(always)]
    fn tensor(&self, t: PyResult<ImportedTensor>) -> Self::Out {
        let py = self.py;
        let mut t = match t {
            Ok(t) => t,
            Err(e) => return restore_error(py, e),
        };
        // SAFETY: GIL held (`py`) until the instance is filled or given back below.
        if let Some((pending, slot)) = unsafe { crate::cpython::freelist::pop_for_fill::<T>(py) } {
            let place = slot.as_ptr();
            match T::from_imported_into(py, t, Slot::new(slot)) {
                Ok(_written) => {
                    // SAFETY: a `Written` for this call's slot: a whole `T` was written there
                    // (`Slot::write`, or the implementer's `unsafe` `Slot::assume_written`),
                    // and nothing else refers to it yet.
                    return unsafe { pending.filled((*place).__dlbind_needs_tracking(py)) };
                }
                Err(back) => {
                    drop(pending);
                    t = back;
                }
            }
        }
        match T::from_imported(py, t) {
            Ok(v) => new_instance(py, v),
            Err(e) => restore_error(py, e),
        }
    }
}

/// Imports `x` as a new `T` object (a new reference), in the order of
/// [`order`](super::order), with `T` built directly where it can be.
#[inline(always)]
fn import_as<T>(
    py: Python<'_>,
    x: &Bound<'_, PyAny>,
    device: Option<Device>,
    copy: Option<bool>,
) -> *mut ffi::PyObject
where
    T: PyClass + FromDLPack + Into<pyo3::PyClassInitializer<T>>,
{
    let dest = Typed::<T> {
        py,
        _t: std::marker::PhantomData,
    };
    import(x, device, copy, &dest)
}

/// `T::into_instance(value)` as a bare new reference (NULL with the exception set).
#[inline(always)]
fn new_instance<T>(py: Python<'_>, value: T) -> *mut ffi::PyObject
where
    T: PyClass + FromDLPack + Into<pyo3::PyClassInitializer<T>>,
{
    match T::into_instance(py, value) {
        Ok(o) => o.into_ptr(),
        Err(e) => restore_error(py, e),
    }
}

/// A new `T` (a new reference) viewing `v`: built directly when `T` can
/// ([`FromDLPack::from_python_view`]), else through an `ImportedTensor` holding the
/// view's owner. Returns the bare pointer (NULL with the exception set, see `restored`): a
/// `PyResult` returned through memory is copied with wide loads that stall on the narrow
/// stores that just wrote it.
#[inline(always)]
fn instance_from_view<T>(py: Python<'_>, v: &PythonView<'_, '_>) -> *mut ffi::PyObject
where
    T: PyClass + FromDLPack + Into<pyo3::PyClassInitializer<T>>,
{
    let value = match T::from_python_view(v) {
        Some(Ok(value)) => value,
        Some(Err(e)) => return restore_error(py, e),
        // SAFETY: the view describes its owner's memory, which the handle keeps alive.
        None => match T::from_imported(py, unsafe { ImportedTensor::from_python_view(v) }) {
            Ok(value) => value,
            Err(e) => return restore_error(py, e),
        },
    };
    new_instance(py, value)
}

/// Sets `e` as the Python exception (attached: see `restore_attached`); NULL.
#[cold]
#[inline(never)]
fn restore_error(_py: Python<'_>, e: PyErr) -> *mut ffi::PyObject {
    crate::cpython::boundary::restore_attached(e);
    ptr::null_mut()
}

/// A raw `METH_FASTCALL | METH_KEYWORDS` implementation of
/// `from_dlpack(x, /, *, device=None, copy=None) -> T` (keyword names from the generated
/// `protocol` module); semantics of [`from_dlpack`](super::from_dlpack) with the arguments parsed, followed by
/// [`FromDLPack::from_imported`]. The common call — one positional argument, no keywords —
/// skips all argument parsing, and when `x` is exactly a `T` the result is built by
/// [`FromDLPack::share_from`] (no DLPack round trip). Installed by
/// [`add_from_dlpack_function`] / [`install_from_dlpack_staticmethod`].
///
/// # Safety
/// Called by CPython through a builtin function object (any `self`, ignored), GIL held.
pub unsafe extern "C" fn from_dlpack_fastcall<T>(
    _slf: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargsf: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject
where
    T: PyClass + FromDLPack + Into<pyo3::PyClassInitializer<T>>,
{
    // SAFETY: CPython holds the GIL for us and passes `nargs + len(kwnames)` live arguments.
    unsafe {
        at_c_boundary(
            || FROM_DLPACK_NAME,
            ptr::null_mut(),
            |py| {
                let nargs = crate::cpython::api::vectorcall_nargs(nargsf as usize);
                if nargs == 1
                    && (kwnames.is_null() || crate::cpython::api::tuple_size(kwnames) == 0)
                {
                    // `x` is borrowed from the caller's argument array for the whole call.
                    let x = Borrowed::from_ptr(py, *args);
                    Ok(import_as::<T>(py, &x, None, None))
                } else {
                    parse_from_dlpack_args(py, FROM_DLPACK_NAME, args, nargs, kwnames)
                        .map(|(x, device, copy)| import_as::<T>(py, &x, device, copy))
                }
            },
        )
    }
}

/// The Python name of the functions [`add_from_dlpack`] installs (the spec's `protocol.from_dlpack.name`).
pub const FROM_DLPACK_NAME: &str = protocol::FROM_DLPACK_FUNCTION;

/// A leaked `PyMethodDef` for [`from_dlpack_fastcall::<T>`] named [`FROM_DLPACK_NAME`], with a
/// text signature (`inspect.signature` works) from the generated keyword names.
fn from_dlpack_method_def<T>(doc: &str) -> PyResult<&'static mut ffi::PyMethodDef>
where
    T: PyClass + FromDLPack + Into<pyo3::PyClassInitializer<T>>,
{
    let doc = format!(
        "{FROM_DLPACK_NAME}(x, /, *, {}=None, {}=None)\n--\n\n{doc}",
        protocol::FROM_DLPACK_KW_DEVICE,
        protocol::FROM_DLPACK_KW_COPY
    );
    leaked_fastcall_def(FROM_DLPACK_NAME, doc, from_dlpack_fastcall::<T>)
}

/// Adds `module.from_dlpack(x, /, *, device=None, copy=None) -> T` backed by
/// [`from_dlpack_fastcall::<T>`] (a builtin function with the module as `__module__`).
fn add_from_dlpack_function<T>(module: &Bound<'_, pyo3::types::PyModule>, doc: &str) -> PyResult<()>
where
    T: PyClass + FromDLPack + Into<pyo3::PyClassInitializer<T>>,
{
    let py = module.py();
    crate::cpython::interp::require_gil(py)?;
    let def = from_dlpack_method_def::<T>(doc)?;
    let modname = module.name()?;
    // SAFETY: `def` lives for the rest of the process; module and name are live objects.
    let f = unsafe {
        Bound::from_owned_ptr_or_err(
            py,
            ffi::PyCMethod_New(def, module.as_ptr(), modname.as_ptr(), ptr::null_mut()),
        )?
    };
    module.add(FROM_DLPACK_NAME, f)
}

/// Sets `T.from_dlpack` to a static method backed by [`from_dlpack_fastcall::<T>`] (replacing,
/// e.g., a PyO3 `#[staticmethod]` of that name). Call it once at module init after the class is
/// added.
fn install_from_dlpack_staticmethod<T>(py: Python<'_>, doc: &str) -> PyResult<()>
where
    T: PyClass + FromDLPack + Into<pyo3::PyClassInitializer<T>>,
{
    let ty = T::type_object(py);
    let def = from_dlpack_method_def::<T>(doc)?;
    // SAFETY: `def` lives for the rest of the process; the type object is live and ready.
    unsafe {
        let f = Bound::from_owned_ptr_or_err(
            py,
            ffi::PyCMethod_New(def, ptr::null_mut(), ptr::null_mut(), ptr::null_mut()),
        )?;
        // `staticmethod(f)` (its C constructor is not in the limited API; this runs once).
        let sm = py
            .import("builtins")?
            .getattr("staticmethod")?
            .call1((f,))?;
        set_type_dict_item(
            py,
            ty.as_type_ptr(),
            crate::cpython::names::names(py).from_dlpack.bind(py),
            &sm,
        )
    }
}

/// Gives `module` a `from_dlpack(x, /, *, device=None, copy=None)` that returns a `T`, and `T`
/// the same function as the static method `T.from_dlpack`: any DLPack producer (or a raw
/// capsule, or an object with only an older array protocol) imported zero-copy where possible,
/// in the order of the import path (your own type, numpy's header, the C exchange table,
/// `__dlpack__`, the bridges). `T` builds itself from the import through [`FromDLPack`].
///
/// A raw `METH_FASTCALL` builtin, not a PyO3 function: the common call (one positional
/// argument) skips argument parsing. Call it once at module initialisation, after
/// `m.add_class::<T>()`; it replaces a `T.from_dlpack` the class may define. A frozen `T` also
/// gets a free list of released instances (64 of them; none in an abi3 build, on a free-threaded
/// interpreter or with `DLBIND_FREELIST=0`), which [`tuning::enable_freelist`](crate::tuning::enable_freelist)
/// can resize.
pub fn add_from_dlpack<T>(module: &Bound<'_, pyo3::types::PyModule>) -> PyResult<()>
where
    T: PyClass + FromDLPack + Into<pyo3::PyClassInitializer<T>>,
{
    let doc = format!(
        "Import any DLPack producer as a `{}` (zero-copy where possible).",
        <T as PyClass>::NAME
    );
    add_from_dlpack_function::<T>(module, &doc)?;
    install_from_dlpack_staticmethod::<T>(module.py(), &doc)?;
    // Every import makes one object: a frozen `T` gets a free list by default.
    if crate::export::access::is_frozen::<T>() {
        crate::cpython::freelist::enable_default_freelist::<T>(module.py());
    }
    T::__dlbind_setup(module.py());
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Element types of the typed accessors (`as_slice`, `as_ndarray`, the adapters' views) and of
// `to_vec`: the one place that decides which Rust element type reads which dtype.

/// Whether a shared borrow of `T` (`&[T]`, an `ArrayView<T>`) over an import's memory is sound
/// whatever that memory holds: every bit pattern of `T`'s size is a valid `T`.
///
/// Not for `bool` (the spec's dtype `bool`, one byte holding 0 or 1; `DLPackElement` allows
/// no other exception). Checking the bytes when the borrow is made is not enough: the memory
/// is the producer's, and Python code reached while the borrow lives, on this very thread (a
/// callback, a `__del__`, anything `Python::attach` runs), may store a 7 in it; the next read
/// through the still-live `&bool` is then an invalid value, undefined behaviour in safe code.
/// So `bool` elements are never lent: they are read as `u8` (any byte is a valid `u8`; see
/// [`reads_dtype`]) or copied by [`ImportedTensor::to_vec`], which checks each byte as it
/// copies, into memory nobody else reaches.
#[inline]
pub(crate) fn lendable<T: DLPackElement>() -> bool {
    T::DTYPE != <bool as DLPackElement>::DTYPE
}

/// Whether `T` reads elements of `dtype`: its own dtype, or, for `u8`, the bytes of a `bool`
/// tensor (the borrowable way to read them, see [`lendable`]).
#[inline]
pub(crate) fn reads_dtype<T: DLPackElement>(dtype: DLDataType) -> bool {
    T::DTYPE == dtype
        || (T::DTYPE == <u8 as DLPackElement>::DTYPE && dtype == <bool as DLPackElement>::DTYPE)
}

/// The element-type check of a typed accessor named `what`: `T` must read `dtype`
/// ([`reads_dtype`]), and, when the accessor lends the producer's memory (`lends`), `T` must be
/// [`lendable`]. `UnsupportedDtype` otherwise.
pub(crate) fn check_elem<T: DLPackElement>(
    dtype: DLDataType,
    what: &str,
    lends: bool,
) -> Result<(), DlpackError> {
    if !reads_dtype::<T>(dtype) {
        return Err(DlpackError::new(
            FailureKind::UnsupportedDtype,
            format!(
                "{what}: tensor dtype is {}, not {}",
                describe(dtype),
                T::NAME
            ),
        ));
    }
    if lends && !lendable::<T>() {
        return Err(DlpackError::new(
            FailureKind::UnsupportedDtype,
            format!(
                "{what}: {} elements borrowed from the producer's memory, wanted an element type \
                 valid for every byte (Python code may store any byte there while the borrow \
                 lives): read them as u8, or copy them with ImportedTensor::to_vec::<{}>(), \
                 which checks each byte",
                T::NAME,
                T::NAME
            ),
        ));
    }
    Ok(())
}

impl ImportedTensor {
    /// The elements in C order as a new `Vec<T>`: a copy, from any layout (negative, zero and
    /// size-1 strides), of host-accessible memory; `T` is the tensor's element type (or `u8`
    /// for a `bool` tensor's bytes).
    ///
    /// The way to read `bool` elements as `bool`: the borrowed accessors ([`Self::as_slice`],
    /// `as_ndarray`, the adapters' views) refuse them (see the element rules in this module),
    /// and this copy checks each byte as it copies: a byte other than 0 and 1 is
    /// `MalformedTensor`, naming the element.
    ///
    /// ```
    /// # use dlbind::adapters::ndarray::{export, ndarray::array};
    /// let t = export(array![[true, false], [false, true]]).unwrap();
    /// assert!(t.as_slice::<bool>().is_err());                    // never lent
    /// assert_eq!(t.as_slice::<u8>().unwrap(), &[1, 0, 0, 1]);    // its bytes
    /// assert_eq!(t.to_vec::<bool>().unwrap(), [true, false, false, true]);
    /// ```
    pub fn to_vec<T: DLPackElement>(&self) -> Result<Vec<T>, DlpackError> {
        check_elem::<T>(self.dtype, "to_vec", false)?;
        if !self.device.is_host_accessible() {
            return Err(DlpackError::new(
                FailureKind::UnsupportedDevice,
                format!(
                    "to_vec: memory on device {}, wanted host-accessible memory",
                    self.device
                ),
            ));
        }
        let shape = self.shape();
        let n = self.numel();
        if n == 0 {
            // Nothing to copy (an empty tensor's strides are not validated: never used).
            return Ok(Vec::new());
        }
        let elem = crate::dtype::validate_dtype(self.dtype)?;
        let nbytes = crate::copy::contiguous_nbytes(shape, elem)?;
        debug_assert_eq!(nbytes, n * std::mem::size_of::<T>());
        let mut v: Vec<T> = Vec::new();
        v.try_reserve_exact(n).map_err(|e| {
            DlpackError::new(
                FailureKind::OutOfMemory,
                format!("to_vec: {n} elements of {}: {e}", T::NAME),
            )
        })?;
        // SAFETY: the producer guarantees every element the shape and strides address from
        // element 0 is readable host memory (validated at import, host-accessible checked);
        // `v` holds `n` uninitialised `T`s, `nbytes` bytes (`size_of::<T>()` is the dtype's
        // width: `DLPackElement`'s contract), fresh memory that overlaps nothing.
        unsafe {
            crate::copy::copy_to_contiguous(
                self.data.cast::<u8>().cast_const(),
                shape,
                self.strides(),
                elem,
                v.as_mut_ptr().cast::<u8>(),
                nbytes,
            )?
        };
        if !lendable::<T>() {
            // SAFETY: the copy initialised the first `nbytes` bytes of `v`'s buffer, which
            // nothing else reaches.
            let bytes = unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), nbytes) };
            if let Some(i) = bytes.iter().position(|&b| b > 1) {
                return Err(DlpackError::new(
                    FailureKind::MalformedTensor,
                    format!(
                        "to_vec: {} element {i} (C order) holds the byte {}, wanted 0 or 1",
                        T::NAME,
                        bytes[i]
                    ),
                ));
            }
        }
        // SAFETY: the first `n` elements are initialised (above), each a valid `T`: every bit
        // pattern is one, or (`bool`) its byte was just checked to be 0 or 1.
        unsafe { v.set_len(n) };
        Ok(v)
    }
}
