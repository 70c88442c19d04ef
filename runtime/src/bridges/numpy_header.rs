//! The numpy fast path of `from_dlpack`: an object whose type is exactly `numpy.ndarray` is
//! imported by reading numpy's array header (`PyArrayObject_fields`, part of numpy's stable C
//! ABI since 1.7 and unchanged in 2.x) instead of calling `a.__dlpack__(...)` and consuming a
//! capsule. The result is what numpy's own `__dlpack__` would have given — same data pointer,
//! shape, element strides, dtype, CPU device, read-only exactly when the array is not writeable,
//! the array kept alive by a strong reference for the view's lifetime — without the capsule, the
//! manager allocation or the Python-level call (most of an import's cost; `bench/`).
//!
//! It only ever *accepts* what numpy's `__dlpack__` accepts, and otherwise steps aside
//! (returns `None`) so that the ordinary `__dlpack__` path runs and numpy raises its own error:
//! * the type must be exactly `numpy.ndarray` (subclasses may override `__dlpack__`);
//! * the dtype must map through the spec's generated `numpy` typestr column (bool, ints,
//!   float16/32/64, complex64/128 in native byte order: numpy's exportable set; longdouble,
//!   datetimes, strings, structured, ml_dtypes and non-native byte orders step aside);
//! * every byte stride of a dimension whose size is not 1 must be a multiple of the item size
//!   (numpy's rule);
//! * only for `device=None`/CPU and `copy` not `True` (decided by the caller).
//!
//! Safety of reading the header: the layout is not assumed blindly. The first time an object
//! whose type is named `numpy.ndarray` is seen, a probe array (Fortran-ordered 3×5 float32,
//! then made read-only) is built by calling that type and every header field is compared with
//! what numpy reports through Python (`shape`, `strides`, `dtype`, `__array_interface__`,
//! `flags.writeable`). Any mismatch or error disables the fast path for the process.
//!
//! Dtypes are cached per dtype object (numpy's builtin descriptors are singletons): up to
//! [`DESCR_CACHE`] descriptors are held by a strong reference (so their address is never
//! reused) with the `DLDataType` their `dtype.str` maps to — or "unsupported". A miss with a full
//! cache is resolved through `dtype.str` each time (slower, same result).
//!
//! The state is mutated only with the GIL held (like CPython's own per-type caches); atomics
//! make the reads well-defined. `DLBIND_NUMPY_FAST_PATH=0` in the environment at first use turns
//! the fast path off (every import then calls `__dlpack__`).

use std::ffi::{c_char, c_int, c_void};
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::typestr::dtype_from_typestr;
use crate::copy::ElemSize;
use crate::device::Device;
use crate::ffi::{DLDataType, DLTensor};
use crate::import::{MAX_NDIM, validate_layout};

/// `PyArrayObject_fields` (numpy/ndarraytypes.h): the leading fields of every ndarray.
#[repr(C)]
struct ArrayHeader {
    ob_base: ffi::PyObject,
    data: *mut c_char,
    nd: c_int,
    dimensions: *mut ffi::Py_ssize_t,
    strides: *mut ffi::Py_ssize_t,
    base: *mut ffi::PyObject,
    descr: *mut ffi::PyObject,
    flags: c_int,
}

/// `NPY_ARRAY_WRITEABLE`.
const NPY_ARRAY_WRITEABLE: c_int = 0x0400;

/// How many dtype objects are cached.
pub const DESCR_CACHE: usize = 32;

/// The `numpy.ndarray` type once verified; NULL before; [`DISABLED`] when the probe failed or
/// the environment turned the path off.
static NDARRAY: AtomicPtr<ffi::PyTypeObject> = AtomicPtr::new(std::ptr::null_mut());
const DISABLED: *mut ffi::PyTypeObject = std::ptr::dangling_mut::<ffi::PyTypeObject>();

static DESCR_KEYS: [AtomicUsize; DESCR_CACHE] = [const { AtomicUsize::new(0) }; DESCR_CACHE];
/// `UNSUPPORTED` or `code | bits << 8 | lanes << 16`.
static DESCR_VALS: [AtomicU32; DESCR_CACHE] = [const { AtomicU32::new(0) }; DESCR_CACHE];
static DESCR_LEN: AtomicUsize = AtomicUsize::new(0);
/// The index of the entry [`dtype_of`] found last (checked first; entries never change once
/// written, and a key of 0 matches no dtype object).
static DESCR_LAST: AtomicUsize = AtomicUsize::new(0);
const UNSUPPORTED: u32 = u32::MAX;

/// How many imports took the fast path (tests check it is taken, and when it is not).
static FAST_IMPORTS: AtomicU64 = AtomicU64::new(0);

/// Whether `numpy.ndarray`'s header is read directly: `None` before the first ndarray import
/// probed it, then whether the probe accepted the layout (and the environment allows it).
pub(crate) fn header_path_state() -> Option<bool> {
    let t = NDARRAY.load(Ordering::Relaxed);
    (!t.is_null()).then_some(t != DISABLED)
}

/// How many imports took the numpy header fast path in this process.
pub fn numpy_fast_imports() -> u64 {
    FAST_IMPORTS.load(Ordering::Relaxed)
}

fn pack(d: DLDataType) -> u32 {
    d.code as u32 | (d.bits as u32) << 8 | (d.lanes as u32) << 16
}

fn unpack(v: u32) -> DLDataType {
    DLDataType {
        code: v as u8,
        bits: (v >> 8) as u8,
        lanes: (v >> 16) as u16,
    }
}

/// Whether `tp` is the verified `numpy.ndarray` type (verifying it the first time a type of
/// that name is seen).
#[inline(always)]
fn is_ndarray(py: Python<'_>, tp: *mut ffi::PyTypeObject) -> bool {
    let known = NDARRAY.load(Ordering::Relaxed);
    if known == tp {
        return true;
    }
    known.is_null() && first_ndarray_check(py, tp)
}

/// [`is_ndarray`] before the ndarray type is known: checks the name, then numpy's own account.
#[cold]
#[inline(never)]
fn first_ndarray_check(py: Python<'_>, tp: *mut ffi::PyTypeObject) -> bool {
    // SAFETY: `tp` is the type of a live object.
    if !unsafe { crate::cpython::api::type_name_is(py, tp, c"numpy.ndarray") } {
        return false;
    }
    let ok = std::env::var_os("DLBIND_NUMPY_FAST_PATH").is_none_or(|v| v != "0")
        && probe(py, tp).unwrap_or(false);
    if ok {
        // SAFETY: a live type object; the reference is kept for the rest of the process so the
        // pointer stays valid (numpy's ndarray type is static anyway).
        unsafe { ffi::Py_INCREF(tp.cast()) };
        NDARRAY.store(tp, Ordering::Relaxed);
    } else {
        NDARRAY.store(DISABLED, Ordering::Relaxed);
    }
    ok
}

/// Reads the header of `obj`, an instance of the ndarray type.
///
/// # Safety
/// `obj`'s type is the (verified) `numpy.ndarray` type.
unsafe fn header<'a>(obj: &'a Bound<'_, PyAny>) -> &'a ArrayHeader {
    // SAFETY: caller contract: the object starts with `PyArrayObject_fields`.
    unsafe { &*obj.as_ptr().cast::<ArrayHeader>() }
}

/// Checks the assumed header layout against what numpy reports for a probe array.
fn probe(py: Python<'_>, tp: *mut ffi::PyTypeObject) -> PyResult<bool> {
    // SAFETY: a live type object (borrowed from a live instance).
    let ty = unsafe { Bound::from_borrowed_ptr(py, tp.cast()) };
    let kw = PyDict::new(py);
    kw.set_item("dtype", "float32")?;
    kw.set_item("order", "F")?;
    let a = ty.call(((3, 5),), Some(&kw))?;
    if a.get_type().as_ptr() != tp.cast() {
        return Ok(false);
    }
    let check = |a: &Bound<'_, PyAny>, writeable: bool| -> PyResult<bool> {
        // SAFETY: `a` is an instance of exactly `tp`; the header is only trusted after every
        // value read from it matched numpy's own account (an object of this size is at least
        // this large if it is an ndarray at all: ndarray's `tp_basicsize` is checked first).
        unsafe {
            if crate::cpython::api::type_basicsize(py, tp)
                .is_none_or(|n| n < std::mem::size_of::<ArrayHeader>())
            {
                return Ok(false);
            }
            let h = header(a);
            let shape: Vec<isize> = a.getattr("shape")?.extract()?;
            let strides: Vec<isize> = a.getattr("strides")?.extract()?;
            let data: usize = a
                .getattr("__array_interface__")?
                .get_item("data")?
                .get_item(0)?
                .extract()?;
            let dtype = a.getattr("dtype")?;
            Ok(h.nd == 2
                && shape == [3, 5]
                && strides == [4, 12]
                && std::slice::from_raw_parts(h.dimensions, 2) == shape.as_slice()
                && std::slice::from_raw_parts(h.strides, 2) == strides.as_slice()
                && h.data as usize == data
                && h.descr == dtype.as_ptr()
                && (h.flags & NPY_ARRAY_WRITEABLE != 0) == writeable)
        }
    };
    if !check(&a, true)? {
        return Ok(false);
    }
    a.getattr("flags")?.setattr("writeable", false)?;
    check(&a, false)
}

/// The `DLDataType` of a dtype object, through the cache (`None`: numpy's `__dlpack__` decides).
#[inline(always)]
fn dtype_of(descr: &Bound<'_, PyAny>) -> Option<DLDataType> {
    let key = descr.as_ptr() as usize;
    // The last dtype seen (a loop over arrays of one dtype asks only this).
    let last = DESCR_LAST.load(Ordering::Relaxed);
    if last < DESCR_CACHE && DESCR_KEYS[last].load(Ordering::Relaxed) == key {
        let v = DESCR_VALS[last].load(Ordering::Relaxed);
        return (v != UNSUPPORTED).then(|| unpack(v));
    }
    dtype_of_cached(descr, key)
}

/// [`dtype_of`] past the last-seen entry: the whole cache, then numpy's `dtype.str`.
#[inline(never)]
fn dtype_of_cached(descr: &Bound<'_, PyAny>, key: usize) -> Option<DLDataType> {
    let len = DESCR_LEN.load(Ordering::Acquire);
    for i in 0..len {
        if DESCR_KEYS[i].load(Ordering::Relaxed) == key {
            DESCR_LAST.store(i, Ordering::Relaxed);
            let v = DESCR_VALS[i].load(Ordering::Relaxed);
            return (v != UNSUPPORTED).then(|| unpack(v));
        }
    }
    let resolved = match descr.getattr("str").and_then(|s| s.extract::<String>()) {
        Ok(s) => dtype_from_typestr(&s)
            .ok()
            .or_else(|| ml_dtypes_dtype(descr, &s)),
        Err(_) => None,
    };
    // `dtype.str` may have run Python code (and let another thread insert): index afresh. The
    // stores below run without releasing the GIL, so an entry's key and value always match.
    let len = DESCR_LEN.load(Ordering::Acquire);
    // A free-threaded build does not insert: two threads could claim the same entry and pair
    // one's key with the other's dtype (it resolves every time instead).
    if len < DESCR_CACHE && cfg!(not(Py_GIL_DISABLED)) {
        // SAFETY: a live object; the reference is kept for the rest of the process (the cache
        // never evicts) so its address cannot be reused by another object.
        unsafe { ffi::Py_INCREF(descr.as_ptr()) };
        DESCR_KEYS[len].store(key, Ordering::Relaxed);
        DESCR_VALS[len].store(resolved.map_or(UNSUPPORTED, pack), Ordering::Relaxed);
        DESCR_LEN.store(len + 1, Ordering::Release);
        DESCR_LAST.store(len, Ordering::Relaxed);
    }
    resolved
}

/// The spec dtype of an `ml_dtypes` dtype object (`bfloat16`, the `float8_*` types), whose
/// typestr (`"<V2"`, `"<f1"`) says nothing the spec's table knows: recognised by its registered scalar type (`dtype.type` is
/// `ml_dtypes.<name>` for a spec dtype `<name>` without a numpy typestr), never by its name. Only
/// whole-byte types: numpy stores the sub-byte ones (`float4_e2m1fn`, `float6_*`) one per byte,
/// which a plain DLPack dtype of 4 or 6 bits does not describe. `None` when `ml_dtypes` has not
/// been imported (then no array can have its dtypes) or the dtype is another void type.
#[cold]
fn ml_dtypes_dtype(descr: &Bound<'_, PyAny>, typestr: &str) -> Option<DLDataType> {
    // Native (little-endian on every platform numpy ships ml_dtypes for) or byte-order free.
    // The kind varies (`"<V2"` for bfloat16, `"<f1"` for float8_e5m2): the scalar type decides.
    if !(typestr.starts_with('<') || typestr.starts_with('|')) {
        return None;
    }
    let py = descr.py();
    let ml = py
        .import("sys")
        .ok()?
        .getattr("modules")
        .ok()?
        .get_item("ml_dtypes")
        .ok()?;
    let scalar = descr.getattr("type").ok()?;
    let itemsize: usize = descr.getattr("itemsize").ok()?.extract().ok()?;
    crate::spec::dtypes::DTYPES
        .iter()
        .filter(|d| d.numpy_typestr.is_none() && d.dtype.lanes == 1 && d.dtype.bits % 8 == 0)
        .find(|d| {
            itemsize * 8 == d.dtype.bits as usize && ml.getattr(d.name).is_ok_and(|t| t.is(&scalar))
        })
        .map(|d| d.dtype)
}

/// A zero-copy view of host memory owned by a Python object, described by that object (an exact
/// `numpy.ndarray` read through its header, or a lending exchange table's non-owning fill, see
/// `crate::exchange`). Validated: the layout passed `crate::import::validate_dltensor`'s
/// checks, the dtype is in the spec's table.
#[derive(Debug)]
#[non_exhaustive]
pub struct PythonView<'a, 'py> {
    /// The object owning the memory: keep a strong reference for as long as the view is used.
    pub owner: &'a Bound<'py, PyAny>,
    /// Element 0.
    pub data: *mut c_void,
    /// Elements per dimension.
    pub shape: &'a [i64],
    /// Strides in elements.
    pub strides: &'a [i64],
    /// The element type.
    pub dtype: DLDataType,
    /// Always [`Device::CPU`] today.
    pub device: Device,
    /// The memory must not be written (the array is not writeable).
    pub readonly: bool,
    /// The bytes the validated description addresses around element 0: what a
    /// [`crate::Buffer`] viewing it vouches for ([`crate::Buffer::view`]).
    pub extent: crate::Extent,
}

/// Reads `obj`'s numpy header when it is exactly a `numpy.ndarray` that numpy's `__dlpack__`
/// would export (see the module docs) and passes the view to `f`; `None` otherwise (nothing
/// was done). Errors of the layout check (arrays made with `as_strided` can describe anything)
/// are returned as `Some(Err(..))`, exactly as the capsule path would raise them.
///
/// The type check is inlined into the caller, so that an import of anything else pays two
/// loads and a compare for it, not a call.
#[inline(always)]
pub fn with_ndarray_view<R>(
    obj: &Bound<'_, PyAny>,
    f: impl FnOnce(&PythonView<'_, '_>) -> PyResult<R>,
) -> Option<PyResult<R>> {
    // SAFETY: reading the type of a live object.
    let tp = unsafe { ffi::Py_TYPE(obj.as_ptr()) };
    if !is_ndarray(obj.py(), tp) {
        return None;
    }
    ndarray_view(obj, f)
}

/// [`with_ndarray_view`] once `obj` is known to be exactly the verified ndarray type.
#[inline]
fn ndarray_view<R>(
    obj: &Bound<'_, PyAny>,
    f: impl FnOnce(&PythonView<'_, '_>) -> PyResult<R>,
) -> Option<PyResult<R>> {
    let py = obj.py();
    // SAFETY: the exact, verified ndarray type (the caller checked).
    let h = unsafe { header(obj) };
    if !(0..=MAX_NDIM).contains(&h.nd) {
        return None;
    }
    // SAFETY: `descr` is a live dtype object owned by the array.
    let descr = unsafe { Bound::from_borrowed_ptr(py, h.descr) };
    let dtype = dtype_of(&descr)?;
    // Every dtype with a numpy typestr in the spec's table is whole bytes, one lane.
    let item = (dtype.bits / 8) as i64;
    if item == 0 || dtype.bits % 8 != 0 || dtype.lanes != 1 {
        return None;
    }
    let n = h.nd as usize;
    // SAFETY: numpy keeps `nd` dimensions and strides (NULL only when nd == 0).
    let (shape, strides) = unsafe {
        if n == 0 {
            (&[][..], &[][..])
        } else {
            (
                std::slice::from_raw_parts(h.dimensions, n),
                std::slice::from_raw_parts(h.strides, n),
            )
        }
    };
    // `[shape.., element strides..]`: on the stack for up to 8 dimensions.
    // Not zeroed first: the loops below write every one of the `2 * n` values before the
    // slices are read.
    let mut small = [MaybeUninit::<i64>::uninit(); 16];
    let mut big = Vec::new();
    let meta: &mut [MaybeUninit<i64>] = if n <= 8 {
        &mut small[..2 * n]
    } else {
        big.resize(2 * n, MaybeUninit::uninit());
        &mut big
    };
    // Byte strides to element strides. The spec's typestr dtypes are 1, 2, 4, 8 or 16 bytes: a
    // mask and an arithmetic shift (exact for multiples, negative ones included) instead of
    // two checked signed divisions per dimension.
    if item.count_ones() == 1 {
        let (mask, shift) = (item - 1, item.trailing_zeros());
        for i in 0..n {
            let (d, s) = (shape[i] as i64, strides[i] as i64);
            if s & mask != 0 {
                if d != 1 {
                    return None;
                }
                // A size-1 dimension's stride is never used to address anything; it is
                // truncated as numpy's own export does.
                meta[n + i] = MaybeUninit::new(s / item);
            } else {
                meta[n + i] = MaybeUninit::new(s >> shift);
            }
            meta[i] = MaybeUninit::new(d);
        }
    } else {
        for i in 0..n {
            let (d, s) = (shape[i] as i64, strides[i] as i64);
            if d != 1 && s % item != 0 {
                return None;
            }
            meta[i] = MaybeUninit::new(d);
            meta[n + i] = MaybeUninit::new(s / item);
        }
    }
    // SAFETY: both loops above wrote all `2 * n` values (or returned early); `MaybeUninit<i64>`
    // has the layout of `i64`.
    let meta: &[i64] = unsafe { &*(meta as *const [MaybeUninit<i64>] as *const [i64]) };
    let (shape, strides) = meta.split_at(n);
    let data = h.data.cast::<c_void>();
    let t = DLTensor {
        data,
        device: Device::CPU.to_dl(),
        ndim: n as i32,
        dtype,
        shape: shape.as_ptr().cast_mut(),
        strides: strides.as_ptr().cast_mut(),
        byte_offset: 0,
    };
    // The layout checks every import gets (arrays made with `as_strided` can describe anything).
    // SAFETY: shape and strides hold `n` values each; the dtype came from the spec's table.
    let extent = match unsafe { validate_layout(&t, ElemSize::Bytes(item as usize)) } {
        Ok(extent) => extent,
        Err(e) => return Some(Err(e.into())),
    };
    FAST_IMPORTS.fetch_add(1, Ordering::Relaxed);
    let view = PythonView {
        owner: obj,
        data,
        shape,
        strides,
        dtype,
        device: Device::CPU,
        readonly: h.flags & NPY_ARRAY_WRITEABLE == 0,
        extent,
    };
    Some(f(&view))
}
