//! The consumer's table lookup: `type(x).__dlpack_c_exchange_api__` (then the legacy names)
//! found without raising, its version chain walked, the result cached per type and thread.

use std::ptr;

use pyo3::ffi;
use pyo3::prelude::*;

use crate::cpython::api::type_lookup;
use crate::cpython::typecache::TypeCache;
use crate::ffi::{
    DLPACK_EXCHANGE_API_CAPSULE_NAME, DLPACK_MAJOR_VERSION, DLPackExchangeAPI,
    DLPackExchangeAPIHeader,
};

use super::{LendProbe, is_own_table, lends};

// The names older producers publish the table under (torch < 2.15 through tvm-ffi's
// `torch-c-dlpack-ext` addon, early tvm-ffi releases) come from the spec
// (`exchange_api.legacy_attributes` → the generated `DLPACK_EXCHANGE_API_LEGACY_ATTRS`) and are
// looked up after the standard [`DLPACK_EXCHANGE_API_ATTR`], in order. Their value is a capsule
// named [`DLPACK_EXCHANGE_API_CAPSULE_NAME`] or the table's address as a Python `int`.

/// What each type resolved to: `(table or 0, kind of table)`, keyed by type and version tag
/// (`cpython::typecache`), in [`TABLE_CACHE_SLOTS`] slots chosen by the type's address (so code
/// alternating between a few producer types keeps a hit for each). The table itself lives for
/// the whole process (spec), so a hit needs no lookup. Misses (types without a usable table)
/// are cached as 0. No Python object is kept: the attribute the table came from (a capsule or an
/// `int`) is released once read, in both build modes. That matters under abi3, where
/// `type_lookup` calls a descriptor's `__get__`, which may make a new object each time (what
/// the `__dlpack__` cache kept a dangling pointer to, issue 41): only the table's address, which
/// does not depend on that object living, and a kind (a tag and a function pointer) are stored.
static TABLE_CACHE: TypeCache<(usize, TableKind), TABLE_CACHE_SLOTS> =
    TypeCache::new((0, TableKind::Other));

/// What the consumer knows about a type's table beyond its address.
#[derive(Clone, Copy)]
pub(super) enum TableKind {
    /// Any producer's table: imported through its owning export.
    Other,
    /// A torch tensor type's table (see [`import_via_exchange_api_with`](super::import_via_exchange_api_with)).
    Torch,
    /// A table of this module that lends (see [`lends`]), with its type's probe.
    Lends(LendProbe),
}

/// Slots of the table cache (a power of two).
const TABLE_CACHE_SLOTS: usize = 8;

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
/// ([`exchange_api`](super::exchange_api)), or else lie in a readable segment of a loaded object (the
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

#[cfg(any(test, feature = "test-util"))]
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

/// torch's C tensor base class, under its current and its pre-2.3 name, in `torch._C`.
const TORCH_TENSOR_BASES: [&str; 2] = ["TensorBase", "_TensorBase"];

/// Whether `tp` is a torch tensor type (a subclass of torch's C tensor base), whose exchange
/// table exports more than its `__dlpack__` does (see
/// [`import_via_exchange_api_with`](super::import_via_exchange_api_with)). Only asked when `tp`
/// has a table; torch cannot be a base unless `torch._C` is imported. No struct field is read
/// (`PyType_IsSubtype` walks the MRO), so every build mode takes the same path.
///
/// # Safety
/// GIL held; `tp` is a live, ready type.
unsafe fn is_torch_tensor_type(py: Python<'_>, tp: *mut ffi::PyTypeObject) -> bool {
    use pyo3::types::PyType;
    // `sys.modules["torch._C"]` without importing `sys` or raising KeyError: an abi3 build, whose
    // table lookups are not cached, asks this on every import through a table.
    // SAFETY: GIL held (caller contract); both calls return borrowed references or NULL and
    // never leave an exception set.
    let torch_c = unsafe {
        let modules = ffi::PyImport_GetModuleDict();
        if modules.is_null() {
            return false;
        }
        let m = ffi::PyDict_GetItemString(modules, c"torch._C".as_ptr());
        if m.is_null() {
            return false;
        }
        Bound::from_borrowed_ptr(py, m)
    };
    TORCH_TENSOR_BASES.iter().any(|name| {
        torch_c
            .getattr(*name)
            .ok()
            .and_then(|b| b.cast_into::<PyType>().ok())
            // SAFETY: caller contract; both are live type objects.
            .is_some_and(|b| unsafe { ffi::PyType_IsSubtype(tp, b.as_type_ptr()) } != 0)
    })
}

/// `lookup_exchange_api`, and what kind of table it is.
///
/// # Safety
/// As for `lookup_exchange_api`.
///
/// The cache hit is inlined into the caller; the lookup itself is not ([`lookup_table_slow`]).
#[inline]
pub(super) unsafe fn lookup_table(
    py: Python<'_>,
    o: *mut ffi::PyObject,
) -> (*const DLPackExchangeAPI, TableKind) {
    // SAFETY: caller contract; type fields are plain reads; the cache is read with the GIL.
    unsafe {
        let tp = ffi::Py_TYPE(o);
        if let Some((table, kind)) = TABLE_CACHE.get(tp) {
            return (table as *const DLPackExchangeAPI, kind);
        }
        lookup_table_slow(py, tp)
    }
}

/// [`lookup_table`] past the cache: the type's attributes, then the cache entry.
///
/// # Safety
/// As for `lookup_exchange_api`; `tp` is the object's live type.
#[inline(never)]
unsafe fn lookup_table_slow(
    py: Python<'_>,
    tp: *mut ffi::PyTypeObject,
) -> (*const DLPackExchangeAPI, TableKind) {
    // SAFETY: caller contract; `type_lookup` never raises and returns a new reference (or NULL),
    // given back once the attribute has been read.
    unsafe {
        let names = crate::cpython::names::names(py);
        let name = &names.exchange_api;
        // A new reference or NULL, given back below once read: under abi3 that may free it (a
        // descriptor's `__get__` may have made it), so only the table's address is kept, and the
        // table lives for the process (spec).
        let attr = type_lookup(tp, name.as_ptr());
        let mut table = if attr.is_null() {
            ptr::null()
        } else {
            let t = supported_table(table_from_capsule(attr));
            ffi::Py_DECREF(attr);
            t
        };
        for legacy in &names.exchange_api_legacy {
            if !table.is_null() {
                break;
            }
            let attr = type_lookup(tp, legacy.as_ptr());
            if !attr.is_null() {
                let header = if ffi::PyLong_CheckExact(attr) != 0 {
                    table_from_int(attr)
                } else {
                    table_from_capsule(attr)
                };
                ffi::Py_DECREF(attr);
                table = supported_table(header);
            }
        }
        let kind = if table.is_null() {
            TableKind::Other
        } else if is_torch_tensor_type(py, tp) {
            TableKind::Torch
        } else if let Some(probe) = lends(table) {
            TableKind::Lends(probe)
        } else {
            TableKind::Other
        };
        TABLE_CACHE.set(tp, (table as usize, kind));
        (table, kind)
    }
}
