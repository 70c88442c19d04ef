//! The DLPack 1.3 C exchange API (`DLPackExchangeAPI`), both directions.
//!
//! * Producer: `#[derive(DLPackExport)]` puts `type(x).__dlpack_c_exchange_api__` (name from the
//!   spec IR) on the class: a PyCapsule named by the generated
//!   [`DLPACK_EXCHANGE_API_CAPSULE_NAME`] pointing at a per-type `DLPackExchangeAPI`, built once
//!   and leaked (process lifetime, as the spec requires). Its version is the generated
//!   `DLPACK_MAJOR_VERSION.DLPACK_MINOR_VERSION`, `prev_api` is NULL, and the functions are
//!   [`producer`]'s generic `extern "C"` functions monomorphised for the type.
//! * Consumer: [`import_via_exchange_api`] (called by [`crate::python::from_dlpack`]) looks the
//!   table up on the type without raising (`_PyType_Lookup`) — the standard name first, then the
//!   legacy `__c_dlpack_exchange_api__` older producers use (a capsule or an `int` address) —
//!   caches it per type, checks `header.version.major` (walking `prev_api`), and imports through
//!   `managed_tensor_from_py_object_no_sync`, or, for writable objects of a table this module
//!   built for a frozen type (a table that *lends*, below), through the non-owning
//!   `dltensor_from_py_object_no_sync`, keeping a strong reference to the object as the owning
//!   export would. Derived types publish only the standard name: every
//!   consumer that knows the legacy one (tvm-ffi) reads the standard one first.
//!   [`import_via_exchange_api_with`] is the same import handing the tensor to a closure, so
//!   that [`crate::python::from_dlpack_fastcall`] builds its result type in place.
//! * [`crate::python::from_dlpack_fastcall`] short-cuts the table for an object whose type is
//!   exactly the target type: [`FromManagedTensor::share_from`] builds the view directly.
//!
//! Building the user's type from a managed tensor (the allocator and `to_py_object` entries)
//! goes through [`FromManagedTensor`]. The derive finds out whether a type implements it with
//! *autoref specialization* ([`probe`]): no attribute is needed; implement the trait and the
//! table's allocator / `to_py_object` build your type, otherwise they set a clear `TypeError`.
//! The non-owning `dltensor_from_py_object_no_sync` is provided when the type's shape and
//! strides fields can be borrowed as `&[i64]` (e.g. `Vec<i64>`, `Box<[i64]>`, `[i64; N]`, any
//! `Deref<Target = [i64]>`); otherwise the entry is NULL (the spec allows it).
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
//! managed tensor (its allocation and deleter; ~15 ns of ~70). Everything else takes the owning
//! export: read-only data (the fill refuses it), device memory or a pending stream (the owning
//! export does the stream work), and every other table (other modules, even ones built with
//! dlbind, torch, tvm-ffi). Each lending table has a probe (the type check, read-only flag,
//! device, stream and dims) that picks the entry without raising.

pub mod probe;
pub mod producer;

use std::cell::Cell;
use std::ffi::c_void;
use std::ptr::{self, NonNull};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use pyo3::PyClass;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyString;

use crate::bridges::PythonView;
use crate::export::DLPackSource;
use crate::ffi::{
    DLManagedTensorVersioned, DLPACK_EXCHANGE_API_ATTR, DLPACK_EXCHANGE_API_CAPSULE_NAME,
    DLPACK_EXCHANGE_API_LEGACY_ATTRS, DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION,
    DLPackExchangeAPI, DLPackExchangeAPIHeader, DLPackVersion,
};
use crate::import::ImportedTensor;
use crate::python::SourceAccess;

/// Builds a Python object of the user's type from an imported tensor: what the table's
/// `managed_tensor_allocator` and `managed_tensor_to_py_object_no_sync` call.
pub type Constructor = for<'py> fn(Python<'py>, ImportedTensor) -> PyResult<Bound<'py, PyAny>>;

/// Implemented by array types that can be built from an imported DLPack tensor (the tensor owns
/// the memory; keep it alive, e.g. in a [`crate::storage::Buffer`]). Enables the exchange API's
/// allocator and `to_py_object` entries for `#[derive(DLPackExport)]` types; no attribute is
/// needed (the derive detects the impl).
pub trait FromManagedTensor: Sized {
    /// The value wrapping `tensor` (zero-copy).
    fn from_managed(py: Python<'_>, tensor: ImportedTensor) -> PyResult<Self>;

    /// A new value sharing `source`'s memory: what importing `source` (an object of this very
    /// type) through the type's own exchange table would give — same data pointer, shape,
    /// strides, dtype and device, read-only when `source` is, `source`'s memory kept alive —
    /// built directly, without the managed-tensor round trip (allocation of a manager, copies of
    /// shape and strides, deleter). Used by [`crate::python::from_dlpack_fastcall`] when the
    /// argument's type is exactly `Self`. `None` (the default): go through the table.
    #[inline]
    fn share_from(source: &Bound<'_, Self>) -> Option<PyResult<Self>>
    where
        Self: PyClass,
    {
        let _ = source;
        None
    }

    /// A new value viewing host memory owned by another Python object — an exact
    /// `numpy.ndarray` read through numpy's array header ([`crate::bridges::with_ndarray_view`]),
    /// or a writable host object of a lending exchange table (see the module docs) — keeping
    /// `view.owner` alive (e.g. with [`crate::storage::Buffer::view`]). Used by
    /// [`crate::python::from_dlpack_fastcall`] before any DLPack call. `None` (the default): the
    /// view is wrapped in an [`ImportedTensor`] and given to [`Self::from_managed`] (one
    /// allocation more).
    #[inline]
    fn from_python_view(view: &crate::bridges::PythonView<'_, '_>) -> Option<PyResult<Self>> {
        let _ = view;
        None
    }

    /// The Python object for a value [`crate::python::from_dlpack_fastcall`] made. The default
    /// is `Bound::new`; a frozen type with a free list can return
    /// [`crate::freelist::new_instance`] instead (the demo's `Tensor` does).
    #[inline]
    fn into_instance(py: Python<'_>, value: Self) -> PyResult<Bound<'_, Self>>
    where
        Self: PyClass + Into<pyo3::PyClassInitializer<Self>>,
    {
        Bound::new(py, value)
    }
}

/// What the derive tells the exchange table about a type (implemented by
/// `#[derive(DLPackExport)]`).
///
/// # Safety
/// `exchange_dims` must return exactly `dlpack_ndim()` shape and stride values equal to what
/// `dlpack_fill_shape` / `dlpack_fill_strides` write (strides filled, i.e. not the C-contiguous
/// default), stored inside `self` (valid as long as `self` is alive and not mutated).
pub unsafe trait ExchangeSource: DLPackSource {
    /// The constructor, when the type implements [`FromManagedTensor`].
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
        dltensor_from_py_object_no_sync: if T::exchange_dims_supported() {
            Some(producer::dltensor_from_py_object_no_sync::<T>)
        } else {
            None
        },
        current_work_stream: Some(producer::current_work_stream),
    }));
    // A frozen type's non-owning fill describes memory that stays as it is while the object is
    // alive, exactly what the owning export's strong reference guarantees (see [`lends`]).
    let lends = T::exchange_dims_supported() && <T::Frozen as SourceAccess<T>>::FROZEN;
    tables.push((
        id,
        TablePtr(table),
        lends.then_some(lend_probe::<T> as LendProbe),
    ));
    table
}

/// The value of `T.__dlpack_c_exchange_api__`: a PyCapsule named
/// [`DLPACK_EXCHANGE_API_CAPSULE_NAME`] pointing at [`exchange_api::<T>`] (no destructor: the
/// table lives for the whole process). The derive emits it as a class attribute.
pub fn exchange_api_capsule<T>(py: Python<'_>) -> PyResult<Py<PyAny>>
where
    T: PyClass + ExchangeSource,
    T::Frozen: SourceAccess<T>,
{
    // Runs once, when the type object is created: the place to refuse a GIL-less interpreter.
    crate::interp::require_gil(py)?;
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

// ---------------------------------------------------------------------------------------------
// Consumer.
// ---------------------------------------------------------------------------------------------

unsafe extern "C" {
    /// CPython's method-cache lookup on a type's MRO: a borrowed reference or NULL, never raises.
    fn _PyType_Lookup(ty: *mut ffi::PyTypeObject, name: *mut ffi::PyObject) -> *mut ffi::PyObject;
}

static ATTR_NAME: PyOnceLock<Py<PyString>> = PyOnceLock::new();
static LEGACY_ATTR_NAMES: PyOnceLock<Vec<Py<PyString>>> = PyOnceLock::new();

// The names older producers publish the table under (torch < 2.15 through tvm-ffi's
// `torch-c-dlpack-ext` addon, early tvm-ffi releases) come from the spec
// (`exchange_api.legacy_attributes` → the generated `DLPACK_EXCHANGE_API_LEGACY_ATTRS`) and are
// looked up after the standard [`DLPACK_EXCHANGE_API_ATTR`], in order. Their value is a capsule
// named [`DLPACK_EXCHANGE_API_CAPSULE_NAME`] or the table's address as a Python `int`.

thread_local! {
    /// `(type, tp_version_tag, table or 0, kind of table)` this thread resolved, in
    /// [`TABLE_CACHE_SLOTS`] slots chosen by the type's address (so code alternating between a
    /// few producer types keeps a hit for each). A valid version tag is unique for the type's
    /// current MRO dicts (CPython bumps it on any change and never reuses one); the table itself
    /// lives for the whole process (spec), so a hit needs no lookup. Misses (types without a
    /// usable table) are cached as 0.
    static TABLE_CACHE: [Cell<(usize, u32, usize, TableKind)>; TABLE_CACHE_SLOTS] =
        const { [const { Cell::new((0, 0, 0, TableKind::Other)) }; TABLE_CACHE_SLOTS] };
}

/// What the consumer knows about a type's table beyond its address.
#[derive(Clone, Copy)]
enum TableKind {
    /// Any producer's table: imported through its owning export.
    Other,
    /// A torch tensor type's table (see [`import_via_exchange_api`]).
    Torch,
    /// A table of this module that lends (see [`lends`]), with its type's probe.
    Lends(LendProbe),
}

/// Slots of the per-thread table cache (a power of two).
const TABLE_CACHE_SLOTS: usize = 8;

/// The cache slot of a type: type objects are at least 64-byte apart heap or static objects.
#[inline(always)]
fn cache_slot(tp: *mut ffi::PyTypeObject) -> usize {
    ((tp as usize) >> 6) & (TABLE_CACHE_SLOTS - 1)
}

/// Imports through an exchange table, process-wide (see [`exchange_imports`]).
static IMPORTS: AtomicU64 = AtomicU64::new(0);

/// Same-type imports served by [`FromManagedTensor::share_from`] (see [`same_type_views`]).
static SAME_TYPE_VIEWS: AtomicU64 = AtomicU64::new(0);
/// Whether `from_dlpack_fastcall::<T>` may serve an exact `T` through `share_from`.
static SAME_TYPE_VIEWS_ON: AtomicBool = AtomicBool::new(true);
static SAME_TYPE_VIEWS_ENV: std::sync::Once = std::sync::Once::new();

/// How many tensors this process imported through a producer's C exchange table (tests and
/// diagnostics: shows whether `from_dlpack` took the table path, i.e. called the table's
/// owning export). Same-type imports that [`FromManagedTensor::share_from`] served do not call
/// the table and are counted by [`same_type_views`] instead.
pub fn exchange_imports() -> u64 {
    IMPORTS.load(Ordering::Relaxed)
}

/// How many `from_dlpack(x)` calls of a `T`'s fastcall function took an exact `T` as a direct
/// view of its storage ([`FromManagedTensor::share_from`]: what `T`'s own table would give,
/// without calling it).
pub fn same_type_views() -> u64 {
    SAME_TYPE_VIEWS.load(Ordering::Relaxed)
}

/// Turns the same-type shortcut of [`crate::python::from_dlpack_fastcall`] on or off (on by
/// default; `DLBIND_SAME_TYPE_VIEWS=0` in the environment at first use turns it off). Off, an
/// exact `T` is imported through `type(x).__dlpack_c_exchange_api__` like any other producer:
/// benchmarks and tests use it to time and check that path.
pub fn set_same_type_views(on: bool) {
    SAME_TYPE_VIEWS_ENV.call_once(|| {});
    SAME_TYPE_VIEWS_ON.store(on, Ordering::Relaxed);
}

/// Whether the same-type shortcut is on (see [`set_same_type_views`]).
#[inline(always)]
pub fn same_type_views_enabled() -> bool {
    if !SAME_TYPE_VIEWS_ENV.is_completed() {
        SAME_TYPE_VIEWS_ENV.call_once(|| {
            if std::env::var_os("DLBIND_SAME_TYPE_VIEWS").is_some_and(|v| v == "0") {
                SAME_TYPE_VIEWS_ON.store(false, Ordering::Relaxed);
            }
        });
    }
    SAME_TYPE_VIEWS_ON.load(Ordering::Relaxed)
}

/// Adds one to a diagnostics counter. Imports run with the GIL held, which orders the updates,
/// so a plain load + store does (no thread-local lookup, no locked add on the hot path; as for
/// `live_exports`, a free-threaded build would make the count approximate).
#[inline(always)]
fn count_one(counter: &AtomicU64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(1),
        Ordering::Relaxed,
    );
}

/// Counts one import in [`exchange_imports`].
#[inline(always)]
pub(crate) fn note_exchange_import() {
    count_one(&IMPORTS);
}

/// Counts one same-type view in [`same_type_views`].
#[inline(always)]
pub(crate) fn note_same_type_view() {
    count_one(&SAME_TYPE_VIEWS);
}

/// The first table in the `prev_api` chain whose major version is ours (NULL if none).
///
/// # Safety
/// `h` is NULL or a live exchange-API header whose chain is live (process-lifetime by spec).
unsafe fn supported_table(mut h: *const DLPackExchangeAPIHeader) -> *const DLPackExchangeAPI {
    // SAFETY: caller contract; only `version` and `prev_api` (the stable header) are read
    // until the major matches ours, which guarantees our struct layout.
    unsafe {
        let mut guard = 0;
        while !h.is_null() && guard < 64 {
            if (*h).version.major == DLPACK_MAJOR_VERSION {
                return h.cast::<DLPackExchangeAPI>();
            }
            h = (*h).prev_api;
            guard += 1;
        }
    }
    ptr::null()
}

/// A table pointer from a capsule named [`DLPACK_EXCHANGE_API_CAPSULE_NAME`] (any other object,
/// or another name: NULL). Never raises.
///
/// # Safety
/// GIL held; `attr` is a live object.
unsafe fn table_from_capsule(attr: *mut ffi::PyObject) -> *const DLPackExchangeAPIHeader {
    // SAFETY: caller contract; `PyCapsule_GetName` never raises on an exact capsule and the
    // pointer is fetched with that very name (an error is cleared, not left set).
    unsafe {
        if ffi::PyCapsule_CheckExact(attr) == 0 {
            return ptr::null();
        }
        let cname = ffi::PyCapsule_GetName(attr);
        let named = cname == DLPACK_EXCHANGE_API_CAPSULE_NAME.as_ptr()
            || (!cname.is_null()
                && libc::strcmp(cname, DLPACK_EXCHANGE_API_CAPSULE_NAME.as_ptr()) == 0);
        if !named {
            return ptr::null();
        }
        let p = ffi::PyCapsule_GetPointer(attr, cname);
        if p.is_null() {
            ffi::PyErr_Clear();
        }
        p.cast::<DLPackExchangeAPIHeader>()
    }
}

/// A table pointer from an exact `int` holding its address, as legacy producers publish it.
/// NULL (never raises; an OverflowError is cleared) unless the address can be a table. An `int`
/// is any number a Python class may hold, so it must be one of this process's dlbind tables
/// ([`exchange_api`]), or else lie in a readable segment of a loaded object (the
/// process-lifetime static a C extension exports, e.g. tvm-ffi's torch table) with our major
/// version (no `prev_api` chain is followed from an `int`) and its function pointers in
/// executable segments. A stray number (`__c_dlpack_exchange_api__ = 8`, a heap address, an
/// address in a library's unmapped gap) then falls back to `__dlpack__` instead of being
/// dereferenced. A table that passes these checks is trusted as tvm-ffi trusts it: function
/// pointers into code that is not the function they claim to be are not detected.
///
/// # Safety
/// GIL held; `attr` is a live exact `int`.
unsafe fn table_from_int(attr: *mut ffi::PyObject) -> *const DLPackExchangeAPIHeader {
    // SAFETY: caller contract.
    let v = unsafe { ffi::PyLong_AsUnsignedLongLong(attr) };
    // SAFETY: GIL held.
    unsafe {
        if !ffi::PyErr_Occurred().is_null() {
            ffi::PyErr_Clear();
        }
    }
    let table = match usize::try_from(v) {
        Ok(a)
            if a != 0 && a != usize::MAX && a % std::mem::align_of::<DLPackExchangeAPI>() == 0 =>
        {
            a as *const DLPackExchangeAPI
        }
        _ => return ptr::null(),
    };
    if is_own_table(table) {
        return table.cast();
    }
    if !segments::contains(
        table as usize,
        size_of::<DLPackExchangeAPI>(),
        segments::READ,
    ) {
        return ptr::null();
    }
    // SAFETY: the whole struct lies in a readable loaded segment (checked above); its function
    // pointers are only checked here, not called.
    let t = unsafe { table.read_unaligned() };
    if t.header.version.major != DLPACK_MAJOR_VERSION {
        return ptr::null();
    }
    let code = |f: Option<usize>| f.is_some_and(|f| segments::contains(f, 1, segments::EXEC));
    let required = [
        t.managed_tensor_allocator.map(|f| f as usize),
        t.managed_tensor_from_py_object_no_sync.map(|f| f as usize),
        t.managed_tensor_to_py_object_no_sync.map(|f| f as usize),
        t.current_work_stream.map(|f| f as usize),
    ];
    // The non-owning fill is the one entry the spec lets be NULL.
    let fill = t.dltensor_from_py_object_no_sync.map(|f| f as usize);
    if required.into_iter().all(code) && (fill.is_none() || code(fill)) {
        table.cast()
    } else {
        ptr::null()
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

/// The loaded objects' segments (`dl_iterate_phdr`): whether an address range lies inside one
/// `PT_LOAD` segment with the given permissions. Mapped segments only: the gaps a library
/// reserves between its segments (no access) are not in any.
#[cfg(target_os = "linux")]
mod segments {
    use std::ffi::{c_int, c_void};

    pub(super) const READ: u32 = libc::PF_R;
    pub(super) const EXEC: u32 = libc::PF_X;

    struct Query {
        start: usize,
        end: usize,
        flags: u32,
        found: bool,
    }

    /// Called once per loaded object; stops the walk (non-zero) when a segment holds the range.
    unsafe extern "C" fn visit(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: `dl_iterate_phdr` passes a valid `info` whose `dlpi_phdr` holds `dlpi_phnum`
        // headers, and our `data` (a live `Query`, see `contains`). Nothing here can panic.
        unsafe {
            let q = &mut *data.cast::<Query>();
            let info = &*info;
            for i in 0..usize::from(info.dlpi_phnum) {
                let ph = &*info.dlpi_phdr.add(i);
                if ph.p_type != libc::PT_LOAD || ph.p_flags & q.flags != q.flags {
                    continue;
                }
                let seg_start = (info.dlpi_addr as usize).wrapping_add(ph.p_vaddr as usize);
                let seg_end = seg_start.saturating_add(ph.p_memsz as usize);
                if seg_start <= q.start && q.end <= seg_end {
                    q.found = true;
                    return 1;
                }
            }
            0
        }
    }

    /// Whether `[addr, addr + len)` lies inside one loaded segment with all of `flags`.
    pub(super) fn contains(addr: usize, len: usize, flags: u32) -> bool {
        let Some(end) = addr.checked_add(len) else {
            return false;
        };
        let mut q = Query {
            start: addr,
            end,
            flags,
            found: false,
        };
        // SAFETY: `visit` matches the callback type and only uses `q` while this call runs.
        unsafe { libc::dl_iterate_phdr(Some(visit), (&raw mut q).cast::<c_void>()) };
        q.found
    }
}

/// Without `dl_iterate_phdr`, no foreign `int` address is trusted.
#[cfg(not(target_os = "linux"))]
mod segments {
    pub(super) const READ: u32 = 4;
    pub(super) const EXEC: u32 = 1;

    pub(super) fn contains(_addr: usize, _len: usize, _flags: u32) -> bool {
        false
    }
}

/// `type(obj).__dlpack_c_exchange_api__` resolved to a table we can use — or, when the type has
/// no usable table under that name, the legacy `__c_dlpack_exchange_api__` (a capsule, or the
/// table's address as an exact `int`, as older producers publish it). NULL when neither gives a
/// table whose `prev_api` chain has our major version. Never raises; cached per type and
/// thread (a few slots per thread, keyed by the type and its version tag).
///
/// # Safety
/// GIL held; `o` is a live object. A legacy `int` value is trusted to be the address of a
/// process-lifetime table, as every consumer of that legacy protocol (tvm-ffi) trusts it.
#[inline]
pub unsafe fn lookup_exchange_api(
    py: Python<'_>,
    o: *mut ffi::PyObject,
) -> *const DLPackExchangeAPI {
    // SAFETY: caller contract.
    unsafe { lookup_table(py, o).0 }
}

/// The types of torch tensors (any class whose MRO holds torch's C tensor base, under its
/// current and its pre-2.3 name).
const TORCH_TENSOR_BASES: [&std::ffi::CStr; 2] = [c"torch._C.TensorBase", c"torch._C._TensorBase"];

/// Whether `tp` is a torch tensor type, whose exchange table exports more than its `__dlpack__`
/// does (see [`import_via_exchange_api`]).
///
/// # Safety
/// GIL held; `tp` is a live, ready type.
unsafe fn is_torch_tensor_type(tp: *mut ffi::PyTypeObject) -> bool {
    // SAFETY: caller contract; `tp_mro` of a ready type is a tuple of types, `tp_name` a C string.
    unsafe {
        let mro = (*tp).tp_mro;
        if mro.is_null() || ffi::PyTuple_Check(mro) == 0 {
            return false;
        }
        (0..ffi::PyTuple_GET_SIZE(mro)).any(|i| {
            let t = ffi::PyTuple_GET_ITEM(mro, i).cast::<ffi::PyTypeObject>();
            let name = std::ffi::CStr::from_ptr((*t).tp_name);
            TORCH_TENSOR_BASES.contains(&name)
        })
    }
}

/// [`lookup_exchange_api`], and what kind of table it is.
///
/// # Safety
/// As for [`lookup_exchange_api`].
#[inline]
unsafe fn lookup_table(
    py: Python<'_>,
    o: *mut ffi::PyObject,
) -> (*const DLPackExchangeAPI, TableKind) {
    // SAFETY: caller contract; type fields are plain reads; `_PyType_Lookup` never raises and
    // returns a borrowed reference kept alive by the type's dict for the duration of the checks.
    unsafe {
        let tp = ffi::Py_TYPE(o);
        let valid = ffi::PyType_HasFeature(tp, ffi::Py_TPFLAGS_VALID_VERSION_TAG) != 0;
        let tag = (*tp).tp_version_tag;
        if valid && tag != 0 {
            let (ct, ctag, table, kind) = TABLE_CACHE.with(|c| c[cache_slot(tp)].get());
            if ct == tp as usize && ctag == tag {
                return (table as *const DLPackExchangeAPI, kind);
            }
        }
        let name = ATTR_NAME.get_or_init(py, || {
            PyString::intern(py, DLPACK_EXCHANGE_API_ATTR).unbind()
        });
        let attr = _PyType_Lookup(tp, name.as_ptr());
        let mut table = if attr.is_null() {
            ptr::null()
        } else {
            supported_table(table_from_capsule(attr))
        };
        let legacy = LEGACY_ATTR_NAMES.get_or_init(py, || {
            DLPACK_EXCHANGE_API_LEGACY_ATTRS
                .iter()
                .map(|n| PyString::intern(py, n).unbind())
                .collect()
        });
        for legacy in legacy {
            if !table.is_null() {
                break;
            }
            let attr = _PyType_Lookup(tp, legacy.as_ptr());
            if !attr.is_null() {
                let header = if ffi::PyLong_CheckExact(attr) != 0 {
                    table_from_int(attr)
                } else {
                    table_from_capsule(attr)
                };
                table = supported_table(header);
            }
        }
        let kind = if table.is_null() {
            TableKind::Other
        } else if is_torch_tensor_type(tp) {
            TableKind::Torch
        } else if let Some(probe) = lends(table) {
            TableKind::Lends(probe)
        } else {
            TableKind::Other
        };
        let valid = ffi::PyType_HasFeature(tp, ffi::Py_TPFLAGS_VALID_VERSION_TAG) != 0;
        let tag = (*tp).tp_version_tag;
        if valid && tag != 0 {
            TABLE_CACHE.with(|c| c[cache_slot(tp)].set((tp as usize, tag, table as usize, kind)));
        }
        (table, kind)
    }
}

/// Refuses a torch tensor whose negative bit (any dtype) or, when `complex`, conjugate bit is
/// set (`x.is_neg()`, `x.is_conj()`; torch sets the conjugate bit on complex tensors only, and a
/// torch without those methods has no such bits): its stored values are not its values. Each
/// question is a torch method call (~50 ns), so the conjugate one is asked only when it can be
/// yes.
fn refuse_torch_lazy_bits(obj: &Bound<'_, PyAny>, complex: bool) -> PyResult<()> {
    let py = obj.py();
    let checks = [
        (pyo3::intern!(py, "is_neg"), "negative", "resolve_neg", true),
        (
            pyo3::intern!(py, "is_conj"),
            "conjugate",
            "resolve_conj",
            complex,
        ),
    ];
    for (method, bit, fix, ask) in checks {
        if !ask {
            continue;
        }
        match obj.call_method0(method) {
            Ok(v) if v.is_truthy()? => {
                return Err(crate::error::DlpackError::new(
                    crate::failure::FailureKind::UnsupportedLayout,
                    format!(
                        "a torch tensor with the {bit} bit set cannot be imported zero-copy (its stored \
                         values are not its values); call x.{fix}() first"
                    ),
                )
                .into());
            }
            Ok(_) => {}
            Err(e) if e.is_instance_of::<pyo3::exceptions::PyAttributeError>(py) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Imports `obj` through its type's C exchange table: `Ok(None)` when the type has no usable
/// table or no `managed_tensor_from_py_object_no_sync` entry (the caller falls back to
/// `__dlpack__`), the producer's exception when the entry fails.
///
/// torch's table (seen in torch 2.15) exports a tensor whose conjugate or negative bit is set
/// as its stored values: `from_dlpack(x.conj())` through it would silently give the
/// unconjugated numbers (tvm-ffi does), where torch's `__dlpack__` refuses the conjugate bit
/// (BufferError) and exports the negative bit unresolved (numpy then shows the wrong sign).
/// dlbind refuses both for torch tensors that have a table (BufferError naming the bit and the
/// `resolve_*` call); other torch tensors take the table.
#[inline]
pub fn import_via_exchange_api(obj: &Bound<'_, PyAny>) -> PyResult<Option<ImportedTensor>> {
    import_via_exchange_api_with(
        obj,
        // SAFETY: a lending table's view describes memory its owner keeps as it is while alive;
        // the handle keeps a strong reference to the owner.
        |v| Ok(unsafe { ImportedTensor::from_python_view(v) }),
        Ok,
    )
    .transpose()
}

/// [`import_via_exchange_api`] handing the imported tensor to `f` (`None`: no usable table).
/// Inlined with `f` into the caller, so that the tensor handle is built where `f` uses it
/// (e.g. moved into the caller's array type) instead of being returned through a chain of
/// `Result<Option<…>>` values: those copies of a freshly written handle cost more than the
/// rest of the import (each wide copy of narrow fresh stores stalls the CPU).
///
/// A table of this module that *lends* (see the module docs) is asked for its non-owning
/// `dltensor_from_py_object_no_sync` fill when the object's data is writable (the fill refuses
/// read-only data, as a bare DLTensor has no read-only flag), and `lend` gets the filled tensor as a [`PythonView`] whose owner is `obj`: `lend` copies
/// shape and strides and keeps a strong reference to `obj`, which is what the table's owning
/// export would hold, without the managed tensor (allocation, deleter). Such a view has no
/// DLPack version ([`ImportedTensor::version`] is `None`, as for other views of Python
/// objects). If the fill fails anyway, its exception is dropped and the owning export is used
/// (which reports the failure, if it is one).
#[inline(always)]
pub fn import_via_exchange_api_with<R>(
    obj: &Bound<'_, PyAny>,
    lend: impl FnOnce(&PythonView<'_, '_>) -> PyResult<R>,
    f: impl FnOnce(ImportedTensor) -> PyResult<R>,
) -> Option<PyResult<R>> {
    let py = obj.py();
    // SAFETY: GIL held (bound object), `obj` is live.
    let (table, kind) = unsafe { lookup_table(py, obj.as_ptr()) };
    if table.is_null() {
        return None;
    }
    let torch = matches!(kind, TableKind::Torch);
    if let TableKind::Lends(probe) = kind
        // SAFETY: (the probe) GIL held, a live object.
        && unsafe { probe(obj.as_ptr()) }
    {
        // SAFETY: a table of ours (checked when cached), process-lifetime; `obj` has the type
        // the table was looked up on.
        if let Some(r) = unsafe { lend_through(obj, table, lend) } {
            note_exchange_import();
            return Some(r);
        }
    }
    // SAFETY: a table of our major version (checked), process-lifetime.
    let f_export = unsafe { (*table).managed_tensor_from_py_object_no_sync }?;
    // SAFETY: `f_export` is the table entry of `type(obj)` (looked up just above).
    Some(unsafe { export_through(obj, f_export) }.and_then(|m| {
        // SAFETY: on success we own `m` (the producer transferred it).
        let t = unsafe { ImportedTensor::from_managed_versioned(m) }?;
        if torch {
            // On refusal `t` drops here: the producer's deleter runs, exactly once.
            refuse_torch_lazy_bits(
                obj,
                t.dtype().code == crate::ffi::DLDataTypeCode::kDLComplex.0,
            )?;
        }
        note_exchange_import();
        f(t)
    }))
}

/// Calls a lending table's non-owning fill on `obj` and hands the result to `lend` (`None`:
/// the fill refused, its exception dropped).
///
/// # Safety
/// `table` is a table [`lends`] accepted, looked up on `type(obj)`.
#[inline(always)]
unsafe fn lend_through<R>(
    obj: &Bound<'_, PyAny>,
    table: *const DLPackExchangeAPI,
    lend: impl FnOnce(&PythonView<'_, '_>) -> PyResult<R>,
) -> Option<PyResult<R>> {
    // SAFETY: caller contract (a lending table has the entry).
    let fill = unsafe { (*table).dltensor_from_py_object_no_sync }?;
    let mut dl = std::mem::MaybeUninit::<crate::ffi::DLTensor>::uninit();
    // SAFETY: the entry's contract: a live object of the table's type, a writable DLTensor, the
    // GIL held (bound object).
    if unsafe { fill(obj.as_ptr().cast::<c_void>(), dl.as_mut_ptr()) } != 0 {
        // SAFETY: GIL held; the producer set an exception, dropped here (the owning export
        // follows and raises its own if the object cannot be exported).
        unsafe { ffi::PyErr_Clear() };
        return None;
    }
    // SAFETY: filled on success.
    let dl = unsafe { dl.assume_init_ref() };
    // The checks every import runs (`ImportedTensor::from_managed_versioned` runs them on the
    // owning export's tensor): on failure the owning export is used, and raises.
    // SAFETY: a filled DLTensor whose shape and strides (ndim values each) live in `obj`.
    if unsafe { crate::import::validate_dltensor(dl) }.is_err() {
        return None;
    }
    let ndim = usize::try_from(dl.ndim).ok()?;
    let (shape, strides): (&[i64], &[i64]) = if ndim == 0 {
        (&[], &[])
    } else if dl.shape.is_null() || dl.strides.is_null() {
        return None;
    } else {
        // SAFETY: the fill points shape and strides at `ndim` values stored in `obj`, which is
        // alive and frozen for the whole call (see [`lends`]).
        unsafe {
            (
                std::slice::from_raw_parts(dl.shape, ndim),
                std::slice::from_raw_parts(dl.strides, ndim),
            )
        }
    };
    let view = PythonView {
        owner: obj,
        data: dl
            .data
            .cast::<u8>()
            .wrapping_add(dl.byte_offset as usize)
            .cast(),
        shape,
        strides,
        dtype: dl.dtype,
        device: dl.device.into(),
        readonly: false,
    };
    Some(lend(&view))
}

/// Calls the table's owning export on `obj`: the producer's managed tensor, or its exception.
///
/// # Safety
/// `export` is the `managed_tensor_from_py_object_no_sync` entry of the table of `type(obj)`.
#[inline(always)]
unsafe fn export_through(
    obj: &Bound<'_, PyAny>,
    export: unsafe extern "C" fn(
        *mut c_void,
        *mut *mut DLManagedTensorVersioned,
    ) -> std::ffi::c_int,
) -> PyResult<NonNull<DLManagedTensorVersioned>> {
    let mut out: *mut DLManagedTensorVersioned = ptr::null_mut();
    // SAFETY: the producer's contract: a live object of the table's type (caller contract) and
    // a valid out pointer; the GIL is held (bound object).
    let rc = unsafe { export(obj.as_ptr().cast::<c_void>(), &mut out) };
    if rc != 0 {
        return Err(export_failed(obj.py()));
    }
    NonNull::new(out).ok_or_else(|| {
        crate::error::DlpackError::new(
            crate::failure::FailureKind::InternalError,
            "managed_tensor_from_py_object_no_sync returned NULL",
        )
        .into()
    })
}

#[cold]
#[inline(never)]
fn export_failed(py: Python<'_>) -> PyErr {
    PyErr::take(py).unwrap_or_else(|| {
        crate::error::DlpackError::new(
            crate::failure::FailureKind::InternalError,
            "managed_tensor_from_py_object_no_sync failed without an exception",
        )
        .into()
    })
}
