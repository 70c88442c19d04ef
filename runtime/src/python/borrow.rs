//! The shared borrow an export of a non-frozen `#[pyclass]` holds ([`ExportBorrow`]).
//!
//! A frozen class only ever hands out `&self`: nothing can move the memory it lends while the
//! object lives, so an export keeps the object itself alive and that is enough. A plain
//! `#[pyclass]` hands out `&mut self` (methods, setters), and one of them could reallocate or
//! free the data a capsule, memoryview or numpy array still points at. So an export of such an
//! object keeps a *shared borrow* of it for as long as the consumer holds the export: a
//! `&mut self` call then fails with PyO3's borrow error (`RuntimeError: Already borrowed`)
//! instead, and works again once every export is released (numpy refuses `resize` on an array
//! that other objects refer to in the same way).
//!
//! The borrow lives in an [`ExportBorrow`]: a small hidden `#[pyclass(frozen)]` holding a
//! `PyRef` of the object (a strong reference plus one count of PyO3's borrow flag). An export
//! of a non-frozen class uses this guard as its *owner* where an export of a frozen class uses
//! the object ([`SourceAccess::with_owner`](super::SourceAccess::with_owner)): the managed
//! tensor's strong reference (`__dlpack__` capsules, the exchange table's owning export), the
//! `obj` of a `Py_buffer` (memoryviews), the `data` entry of `__array_interface__` (numpy keeps
//! it as the array's base). The borrow ends when the last reference to the guard goes, in the
//! guard's `tp_dealloc`, which runs attached to the interpreter (dlbind's deleters take the GIL
//! before they drop an owner, see `export::managed`).
//!
//! The guard reports the object to the garbage collector (`__traverse__`) and has no
//! `tp_clear`: the collector breaks a cycle through it at its other members, never by ending the
//! borrow while an export still points into the data.

use std::any::Any;
use std::ffi::{c_int, c_void};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::{PyClass, PyTraverseError, PyVisit};

/// Guards alive now (process-wide): diagnostics for the tests.
static LIVE_BORROWS: AtomicUsize = AtomicUsize::new(0);

/// How many `ExportBorrow` guards exist now, i.e. how many shared borrows of non-frozen
/// `#[pyclass]` objects dlbind's exports hold (process-wide; diagnostics). Returns to its
/// previous value once every such export is released.
pub fn live_export_borrows() -> usize {
    LIVE_BORROWS.load(Ordering::Relaxed)
}

/// Bytes an [`ExportBorrow`] exposes through the buffer protocol (a `PyBUF_SIMPLE` byte buffer):
/// for `__array_interface__`, whose `data` entry is then the guard (see
/// [`crate::bridges::array_interface`](fn@crate::bridges::array_interface)).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Window {
    /// The lowest address the array reaches (an address, not a pointer, so the guard is `Send`).
    pub base: usize,
    /// Bytes from `base` on that the array reaches.
    pub len: usize,
    /// Whether consumers must not write.
    pub readonly: bool,
}

/// A shared borrow of a non-frozen `#[pyclass]` object, held for as long as this Python object
/// lives (see the module docs). Created by [`hold`]; not constructible from Python.
#[pyclass(frozen, module = "dlbind", name = "ExportBorrow")]
pub(crate) struct ExportBorrow {
    held: Held,
    window: Option<Window>,
}

/// The type-erased `PyRef<'static, T>` and the object it borrows.
struct Held {
    /// The borrowed object: the `PyRef` below holds a strong reference to it.
    obj: NonNull<ffi::PyObject>,
    /// A `PyRef<'static, T>`: dropping it releases the borrow and the reference.
    _borrow: Box<dyn Any>,
}

// SAFETY: the `PyRef` is only ever dropped, never used: it goes with the guard, in the guard's
// `tp_dealloc`, which CPython runs on a thread attached to the interpreter (with the GIL on the
// builds dlbind supports), as a `PyRef` drop requires. `obj` is read only as an address (by
// `__traverse__`, which touches no reference count).
unsafe impl Send for Held {}
// SAFETY: as above; `&Held` gives access to nothing but `obj`'s address.
unsafe impl Sync for Held {}

impl Drop for ExportBorrow {
    fn drop(&mut self) {
        // The `PyRef` in `held` drops right after this: the borrow ends with the guard.
        LIVE_BORROWS.fetch_sub(1, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for ExportBorrow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExportBorrow")
            .field("obj", &self.held.obj)
            .field("window", &self.window)
            .finish()
    }
}

/// A new [`ExportBorrow`] keeping `r`'s shared borrow (and a strong reference to its object)
/// until the guard's last reference goes. `window`: bytes the guard exposes through the buffer
/// protocol (`None`: it exposes none).
pub(crate) fn hold<'py, T: PyClass>(
    r: PyRef<'py, T>,
    window: Option<Window>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = r.py();
    // SAFETY: a `PyRef` refers to a live object, so its pointer is not NULL.
    let obj = unsafe { NonNull::new_unchecked(r.as_ptr()) };
    // SAFETY: only the lifetime changes (same type otherwise, same layout). `'py` bounds the
    // time the GIL token is known to be held; the extended `PyRef` is never used, only dropped,
    // and only attached to the interpreter (see `Held`'s `Send` impl), so it never outlives
    // what `'py` stands for at the one point it is touched.
    let r: PyRef<'static, T> =
        unsafe { std::mem::transmute::<PyRef<'py, T>, PyRef<'static, T>>(r) };
    LIVE_BORROWS.fetch_add(1, Ordering::Relaxed);
    // On failure the value (and so the borrow) is dropped here, with the GIL held.
    let guard = ExportBorrow {
        held: Held {
            obj,
            _borrow: Box::new(r),
        },
        window,
    };
    Ok(Bound::new(py, guard)?.into_any())
}

#[pymethods]
impl ExportBorrow {
    /// A `PyBUF_SIMPLE` byte buffer over the [`Window`] (`BufferError` without one, or when a
    /// writable buffer is asked of read-only data). `view.obj` is the guard, so the borrow lasts
    /// as long as the view.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        let Some(w) = slf.get().window else {
            return Err(pyo3::exceptions::PyBufferError::new_err(
                "this dlbind export borrow exposes no buffer",
            ));
        };
        let len = ffi::Py_ssize_t::try_from(w.len)
            .map_err(|_| pyo3::exceptions::PyBufferError::new_err("buffer too large"))?;
        // SAFETY: `view` comes from CPython's bf_getbuffer (NULL is refused by the call with
        // an exception); the window is memory the borrowed object owns, kept as it is by the
        // borrow, which lasts as long as `view.obj` (a new reference to the guard) does.
        let rc = unsafe {
            ffi::PyBuffer_FillInfo(
                view,
                slf.as_ptr(),
                w.base as *mut c_void,
                len,
                c_int::from(w.readonly),
                flags,
            )
        };
        if rc != 0 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }

    /// Frees what a `Py_buffer` whose `obj` is this guard holds: nothing for the guard's own
    /// buffers, the metadata block for a non-frozen object's buffer export
    /// ([`crate::bridges::getbuffer`] makes the guard the `obj` of those).
    unsafe fn __releasebuffer__(_slf: Bound<'_, Self>, view: *mut ffi::Py_buffer) {
        // SAFETY: `view` was filled by `getbuffer` (its `internal` block) or by
        // `PyBuffer_FillInfo` above (`internal` NULL); CPython releases each once.
        unsafe { crate::bridges::releasebuffer(view) }
    }

    /// Reports the borrowed object, to which the guard holds a strong reference.
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        // SAFETY: `obj` is live while the guard is: the held `PyRef` owns a reference to it.
        unsafe { crate::gc::visit_ptr(&visit, self.held.obj) }
    }
}
