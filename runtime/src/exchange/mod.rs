//! The DLPack 1.3 C exchange API (`DLPackExchangeAPI`), both directions.
//!
//! * Producer: `#[derive(DLPackExport)]` puts `type(x).__dlpack_c_exchange_api__` (name from the
//!   spec IR) on the class: a PyCapsule named by the generated
//!   [`DLPACK_EXCHANGE_API_CAPSULE_NAME`] pointing at a per-type `DLPackExchangeAPI`, built once
//!   and leaked (process lifetime, as the spec requires). Its version is the generated
//!   `DLPACK_MAJOR_VERSION.DLPACK_MINOR_VERSION`, `prev_api` is NULL, and the functions are
//!   [`producer`]'s generic `extern "C"` functions monomorphised for the type.
//! * Consumer: [`import_via_exchange_api_with`] (step 3 of the import order, `import::order`) looks the
//!   table up on the type without raising (`cpython::api::type_lookup`) — the standard name first, then the
//!   legacy `__c_dlpack_exchange_api__` older producers use (a capsule or an `int` address) —
//!   caches it per type, checks `header.version.major` (walking `prev_api`), and imports through
//!   `managed_tensor_from_py_object_no_sync`, or, for writable objects of a table this module
//!   built for a frozen type (a table that *lends*, below), through the non-owning
//!   `dltensor_from_py_object_no_sync`, keeping a strong reference to the object as the owning
//!   export would. Derived types publish only the standard name: every
//!   consumer that knows the legacy one (tvm-ffi) reads the standard one first.
//!   [`import_via_exchange_api_with`] is the same import handing the tensor to a closure, so
//!   that [`crate::import::typed::from_dlpack_fastcall`] builds its result type in place.
//! * [`crate::import::typed::from_dlpack_fastcall`] short-cuts the table for an object whose type is
//!   exactly the target type: [`FromDLPack::share_from`](crate::FromDLPack::share_from) builds the view directly.
//!
//! Building the user's type from a managed tensor (the allocator and `to_py_object` entries)
//! goes through [`FromDLPack`](crate::FromDLPack). The derive finds out whether a type implements it with
//! *autoref specialization* ([`probe`]): no attribute is needed; implement the trait and the
//! table's allocator / `to_py_object` build your type, otherwise they set a clear `TypeError`.
//! The non-owning `dltensor_from_py_object_no_sync` is provided when the type is a
//! `#[pyclass(frozen)]` whose shape and strides fields can be borrowed as `&[i64]` (e.g.
//! `Vec<i64>`, `Box<[i64]>`, `[i64; N]`, any `Deref<Target = [i64]>`); otherwise the entry is
//! NULL (the spec allows it). A non-frozen class's exports must hold a shared borrow of the
//! object for as long as they live ([`crate::export::access::SourceAccess::with_owner`]), which a bare
//! `DLTensor` filled into the caller's memory cannot: its consumers use the owning export, whose
//! manager block keeps the borrow (decision 0011).
//!
//! ## Tables that lend
//!
//! The spec makes the non-owning fill valid only until control returns, so a consumer that
//! keeps the tensor uses the owning export. A table that this copy of dlbind built (one
//! extension module's) for a *frozen* type whose shape and strides are stored in the object
//! (`i64` dims) is different. For host memory with no pending stream, the owning export does
//! nothing but keep a strong reference to the object in its manager: the memory stays valid as
//! long as the object lives, and the object cannot be given other data (frozen: no `&mut self`;
//! a type that mutates through interior mutability breaks both paths alike). So for such an
//! object whose data is writable, [`import_via_exchange_api_with`] calls the fill, checks the
//! result as every import does (`import::validate_dltensor`), copies shape and strides at once
//! and keeps a strong reference to the object: what the owning export would give, without the
//! managed tensor (its allocation and deleter). Everything else takes the owning
//! export: read-only data (the fill refuses it), device memory or a pending stream (the owning
//! export does the stream work), and every other table (other modules, even ones built with
//! dlbind, torch, tvm-ffi). Each lending table has a probe (the type check, read-only flag,
//! device, stream and dims) that picks the entry without raising.

mod consumer;
mod counters;
mod lookup;
pub mod probe;
pub mod producer;

pub use consumer::import_via_exchange_api_with;
pub(crate) use counters::note_same_type_view;
pub use counters::{
    exchange_imports, same_type_views, same_type_views_enabled, set_same_type_views,
};
#[cfg(feature = "test-util")]
pub use lookup::lookup_exchange_api;

use std::ffi::c_void;
use std::ptr;
use std::sync::Mutex;

use pyo3::PyClass;
use pyo3::ffi;
use pyo3::prelude::*;

use crate::export::DLPackSource;
use crate::export::access::SourceAccess;
use crate::ffi::{
    DLPACK_EXCHANGE_API_CAPSULE_NAME, DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION,
    DLPackExchangeAPI, DLPackExchangeAPIHeader, DLPackVersion,
};
use crate::import::ImportedTensor;

/// Builds a Python object of the user's type from an imported tensor: what the table's
/// `managed_tensor_allocator` and `managed_tensor_to_py_object_no_sync` call.
pub type Constructor = for<'py> fn(Python<'py>, ImportedTensor) -> PyResult<Bound<'py, PyAny>>;

/// What the derive tells the exchange table about a type (implemented by
/// `#[derive(DLPackExport)]`).
///
/// # Safety
/// `exchange_dims` must return exactly `dlpack_ndim()` shape and stride values equal to what
/// `dlpack_fill_shape` / `dlpack_fill_strides` write (strides filled, i.e. not the C-contiguous
/// default), stored inside `self` (valid as long as `self` is alive and not mutated).
pub unsafe trait ExchangeSource: DLPackSource {
    /// The constructor, when the type implements [`FromDLPack`](crate::FromDLPack).
    fn exchange_constructor() -> Option<Constructor>;
    /// Whether [`Self::exchange_dims`] can return `Some` (decides whether the table has a
    /// `dltensor_from_py_object_no_sync` entry).
    fn exchange_dims_supported() -> bool;
    /// Shape and strides (elements) borrowed from `self`, for the non-owning DLTensor fill.
    fn exchange_dims(&self) -> Option<(&[i64], &[i64])>;
}

/// The version of the tables dlbind publishes (generated constants).
pub const EXCHANGE_VERSION: DLPackVersion = DLPackVersion {
    major: DLPACK_MAJOR_VERSION,
    minor: DLPACK_MINOR_VERSION,
};

/// A leaked table pointer, shareable between threads (the table is immutable).
#[derive(Clone, Copy)]
struct TablePtr(&'static DLPackExchangeAPI);
// SAFETY: the table is never mutated after creation and holds only function pointers, plain
// integers and a NULL `prev_api`.
unsafe impl Send for TablePtr {}
// SAFETY: as above.
unsafe impl Sync for TablePtr {}

/// The tables [`exchange_api`] built: the type, the table, and for a table that *lends* (see
/// [`lends`]) its type's [`LendProbe`].
static TABLES: Mutex<Vec<(std::any::TypeId, TablePtr, Option<LendProbe>)>> = Mutex::new(Vec::new());

/// Whether an object may be lent through its lending table's non-owning fill: it has the table's
/// type (or a subclass), its data is writable host memory (`kDLCPU`) with no pending stream, and
/// its dims can be borrowed. Everything else goes to the owning export directly: read-only data
/// and borrowed-dims refusals would be an exception set and dropped (several times the cost of
/// the import), and device memory or a pending stream needs the owning export's stream work
/// (`export::managed`'s GPU planner), which the fill does not do.
///
/// # Safety
/// GIL held; `o` is a live object.
pub(crate) type LendProbe = unsafe fn(*mut ffi::PyObject) -> bool;

/// The [`LendProbe`] of `T`.
///
/// # Safety
/// As for [`LendProbe`].
unsafe fn lend_probe<T>(o: *mut ffi::PyObject) -> bool
where
    T: PyClass + ExchangeSource,
    T::Frozen: SourceAccess<T>,
{
    // SAFETY: caller contract (GIL held, live object).
    let o = unsafe { pyo3::Borrowed::from_ptr(Python::assume_attached(), o) };
    match o.cast::<T>() {
        Ok(src) => <T::Frozen as SourceAccess<T>>::with(&src, |s| {
            !s.dlpack_readonly()
                && s.dlpack_device().is_cpu()
                && s.dlpack_stream().is_none()
                && s.exchange_dims().is_some()
        })
        .unwrap_or(false),
        Err(_) => false,
    }
}

/// The process-lifetime exchange table of `T` (built and leaked on first use, once per type).
pub fn exchange_api<T>() -> &'static DLPackExchangeAPI
where
    T: PyClass + ExchangeSource,
    T::Frozen: SourceAccess<T>,
{
    let id = std::any::TypeId::of::<T>();
    let mut tables = TABLES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, t, _)) = tables.iter().find(|(i, _, _)| *i == id) {
        return t.0;
    }
    let table: &'static DLPackExchangeAPI = Box::leak(Box::new(DLPackExchangeAPI {
        header: DLPackExchangeAPIHeader {
            version: EXCHANGE_VERSION,
            prev_api: ptr::null_mut(),
        },
        managed_tensor_allocator: Some(producer::managed_tensor_allocator::<T>),
        managed_tensor_from_py_object_no_sync: Some(
            producer::managed_tensor_from_py_object_no_sync::<T>,
        ),
        managed_tensor_to_py_object_no_sync: Some(
            producer::managed_tensor_to_py_object_no_sync::<T>,
        ),
        // NULL for a non-frozen type: a bare DLTensor cannot hold the borrow its exports need
        // (see the module docs).
        dltensor_from_py_object_no_sync: if T::exchange_dims_supported()
            && <T::Frozen as SourceAccess<T>>::FROZEN
        {
            Some(producer::dltensor_from_py_object_no_sync::<T>)
        } else {
            None
        },
        current_work_stream: Some(producer::current_work_stream),
    }));
    // A frozen type's non-owning fill describes memory that stays as it is while the object is
    // alive, exactly what the owning export's strong reference guarantees (see [`lends`]). A
    // non-frozen type has no fill (above) and never lends.
    let lends = T::exchange_dims_supported() && <T::Frozen as SourceAccess<T>>::FROZEN;
    tables.push((
        id,
        TablePtr(table),
        lends.then_some(lend_probe::<T> as LendProbe),
    ));
    table
}

/// The value of `T.__dlpack_c_exchange_api__`: a PyCapsule named
/// [`DLPACK_EXCHANGE_API_CAPSULE_NAME`] pointing at `exchange_api::<T>` (no destructor: the
/// table lives for the whole process). The derive emits it as a class attribute.
pub fn exchange_api_capsule<T>(py: Python<'_>) -> PyResult<Py<PyAny>>
where
    T: PyClass + ExchangeSource,
    T::Frozen: SourceAccess<T>,
{
    // Runs once, when the type object is created: the place to refuse a GIL-less interpreter.
    crate::cpython::interp::require_gil(py)?;
    let table = exchange_api::<T>();
    // SAFETY: the name is a 'static C string (PyCapsule keeps the pointer); the pointer is a
    // leaked, never-freed table, so no destructor is needed.
    unsafe {
        let cap = ffi::PyCapsule_New(
            (table as *const DLPackExchangeAPI)
                .cast_mut()
                .cast::<c_void>(),
            DLPACK_EXCHANGE_API_CAPSULE_NAME.as_ptr(),
            None,
        );
        Ok(Bound::from_owned_ptr_or_err(py, cap)?.unbind())
    }
}

/// Whether `p` is a table [`exchange_api`] built (the registry is only read on this cold path:
/// the lookup result is cached per type).
fn is_own_table(p: *const DLPackExchangeAPI) -> bool {
    own_table(p).is_some()
}

/// The probe of `p` when it is a table [`exchange_api`] built for a frozen type with a
/// non-owning fill: a table that *lends* (see the module docs); `None` for every other table.
fn lends(p: *const DLPackExchangeAPI) -> Option<LendProbe> {
    own_table(p).flatten()
}

/// `p`'s registry entry (its lend probe, if any) when [`exchange_api`] built it.
fn own_table(p: *const DLPackExchangeAPI) -> Option<Option<LendProbe>> {
    let tables = TABLES.lock().unwrap_or_else(|e| e.into_inner());
    tables
        .iter()
        .find(|(_, t, _)| ptr::eq(t.0, p))
        .map(|(_, _, probe)| *probe)
}
