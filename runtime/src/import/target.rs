//! [`FromDLPack`]: what an import builds when it builds your type.

use pyo3::PyClass;
use pyo3::prelude::*;

use crate::bridges::PythonView;
use crate::import::{ImportedTensor, Slot, Written};

/// Implemented by your array type to be built by an import: [`add_from_dlpack`](crate::add_from_dlpack)
/// gives your module `from_dlpack(x, /, *, device=None, copy=None)` returning your type, and a
/// `#[derive(DLPackExport)]` type that implements it gets the C exchange table's allocator and
/// `to_py_object` entries (no attribute: the derive detects the impl). Only
/// [`from_imported`](Self::from_imported) is required; the other methods are shortcuts that
/// skip the managed-tensor round trip.
pub trait FromDLPack: Sized {
    /// The value wrapping `tensor` (zero-copy): keep the handle, e.g. in a [`Buffer`](crate::Buffer),
    /// and copy its shape, strides, dtype and device into your fields.
    fn from_imported(py: Python<'_>, tensor: ImportedTensor) -> PyResult<Self>;

    /// A new value sharing `source`'s memory: what importing `source` (an object of this very
    /// type) through the type's own exchange table would give — same data pointer, shape,
    /// strides, dtype and device, read-only when `source` is, `source`'s memory kept alive —
    /// built directly, without the managed-tensor round trip (allocation of a manager, copies of
    /// shape and strides, deleter). Used by the typed `from_dlpack` when the argument's type is exactly `Self` and `Self` is a `#[pyclass(frozen)]` (never called for
    /// a non-frozen type: its views must hold a borrow of `source`, which the table's owning
    /// export does). `None` (the default): go through the table.
    #[inline]
    fn share_from(source: &Bound<'_, Self>) -> Option<PyResult<Self>>
    where
        Self: PyClass,
    {
        let _ = source;
        None
    }

    /// [`share_from`](Self::share_from) written straight into the new object's memory, with no
    /// move of the value: tried first, for a frozen type whose free list
    /// ([`tuning::enable_freelist`](crate::tuning::enable_freelist)) builds instances directly
    /// (as `#[derive(FromDLPack)]`'s [`into_instance`](Self::into_instance) does). `out` is the value's place in
    /// a new instance nothing else can see yet: write the value `share_from` would give and
    /// return the proof ([`Slot::write`], or field by field and [`Slot::assume_written`]), or
    /// return `None` (the instance is given back, nothing in it dropped, and `share_from` runs).
    /// The default declines.
    #[inline]
    fn share_into<'a>(source: &Bound<'_, Self>, out: Slot<'a, Self>) -> Option<Written<'a, Self>>
    where
        Self: PyClass,
    {
        let _ = (source, out);
        None
    }

    /// [`from_imported`](Self::from_imported) written straight into the new object's memory,
    /// with no move of the value: tried first, for a frozen type whose free list
    /// ([`tuning::enable_freelist`](crate::tuning::enable_freelist)) builds instances directly
    /// (as `#[derive(FromDLPack)]`'s [`into_instance`](Self::into_instance) does); `tensor` comes from a capsule or
    /// an exchange table's owning export. `out` is the value's place in a new instance nothing
    /// else can see yet: write the value `from_imported` would give and return the proof
    /// ([`Slot::write`], or field by field and [`Slot::assume_written`]), or give `tensor` back as
    /// `Err(tensor)` (the instance is given back, nothing in it dropped, and `from_imported` runs
    /// with it). The default declines.
    #[inline]
    fn from_imported_into<'a>(
        py: Python<'_>,
        tensor: ImportedTensor,
        out: Slot<'a, Self>,
    ) -> Result<Written<'a, Self>, ImportedTensor>
    where
        Self: PyClass,
    {
        let _ = (py, out);
        Err(tensor)
    }

    /// A new value viewing host memory owned by another Python object — an exact
    /// `numpy.ndarray` read through numpy's array header, or a writable host object of a
    /// lending exchange table — keeping `view.owner` alive (e.g. with
    /// [`Buffer::view`](crate::Buffer::view)). Used by the typed `from_dlpack` before any DLPack
    /// call. `None` (the default): the view is wrapped in an [`ImportedTensor`] and given to [`Self::from_imported`] (one
    /// allocation more).
    #[inline]
    fn from_python_view(view: &PythonView<'_, '_>) -> Option<PyResult<Self>> {
        let _ = view;
        None
    }

    /// For `#[derive(FromDLPack)]`: what [`add_from_dlpack`](crate::add_from_dlpack) sets up for
    /// the type beyond its free list (the derived direct release). Not part of the API.
    #[doc(hidden)]
    #[inline]
    fn __dlbind_setup(py: Python<'_>)
    where
        Self: PyClass,
    {
        let _ = py;
    }

    /// For `#[derive(FromDLPack)]`: whether a new instance holding this value must be tracked
    /// by the garbage collector (see `DataSource::__dlbind_needs_tracking`). The default says
    /// yes. Not part of the API.
    #[doc(hidden)]
    #[inline]
    fn __dlbind_needs_tracking(&self, py: Python<'_>) -> bool {
        let _ = py;
        true
    }

    /// The Python object for a value the typed `from_dlpack` made. The default is `Bound::new`;
    /// `#[derive(FromDLPack)]` builds a frozen type's instance straight from its free list
    /// ([`crate::tuning::enable_freelist`]), skipping PyO3's initializer (what the demo's
    /// `Tensor` and the README's `Frame` get).
    #[inline]
    fn into_instance(py: Python<'_>, value: Self) -> PyResult<Bound<'_, Self>>
    where
        Self: PyClass + Into<pyo3::PyClassInitializer<Self>>,
    {
        Bound::new(py, value)
    }
}

