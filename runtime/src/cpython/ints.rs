//! Reading CPython's cached small ints (-5..=256) by identity: they are one contiguous static
//! array in CPython 3.11+ (`_PyRuntime`'s singletons), so an object inside that array is the
//! int at its index. Protocol arguments (`max_version=(1, 3)`, `dl_device=(1, 0)`, `stream=1`)
//! are such ints; reading them this way skips `PyLong_AsLongLongAndOverflow`. The layout is
//! verified at first use (every small int where the array says it is); where it does not hold,
//! [`small_int`] answers `None` and callers take the C API.

use std::sync::atomic::{AtomicUsize, Ordering};

use pyo3::ffi;

const FIRST: i64 = -5;
const COUNT: usize = 262; // -5..=256

/// Address of the cached `-5` (0: not checked yet; 1: no usable array) and the stride's log2
/// (the objects are a power of two apart: 32 bytes on 64-bit CPython 3.11-3.13).
static BASE: AtomicUsize = AtomicUsize::new(0);
static SHIFT: AtomicUsize = AtomicUsize::new(0);

/// The value of `o` when it is one of CPython's cached small ints, else `None`.
///
/// # Safety
/// The GIL is held; `o` is a live object.
#[inline]
pub(crate) unsafe fn small_int(o: *mut ffi::PyObject) -> Option<i64> {
    let mut base = BASE.load(Ordering::Relaxed);
    if base == 0 {
        // SAFETY: caller contract.
        base = unsafe { init() };
    }
    if base == 1 {
        return None;
    }
    let shift = SHIFT.load(Ordering::Relaxed);
    let off = (o as usize).wrapping_sub(base);
    let idx = off >> shift;
    (idx < COUNT && idx << shift == off).then_some(idx as i64 + FIRST)
}

/// Whether small ints are read by identity in this process (checked now if not yet).
///
/// # Safety
/// The GIL is held.
pub(crate) unsafe fn by_identity() -> bool {
    let mut base = BASE.load(Ordering::Relaxed);
    if base == 0 {
        // SAFETY: caller contract.
        base = unsafe { init() };
    }
    base > 1
}

/// Whether `major` and `minor` are both among CPython's cached small ints, with `major >= 1`:
/// a `max_version=(major, minor)` that asks for a versioned capsule. `false` also while the array
/// has not been checked yet (callers then take a path that calls [`small_int`]): nothing here
/// calls out, so a hot caller needs no stack frame for it.
///
/// # Safety
/// The GIL is held; `major` and `minor` are live objects.
#[inline]
pub(crate) unsafe fn small_major_at_least_1(
    major: *mut ffi::PyObject,
    minor: *mut ffi::PyObject,
) -> bool {
    let base = BASE.load(Ordering::Relaxed);
    if base <= 1 {
        return false;
    }
    let shift = SHIFT.load(Ordering::Relaxed);
    let end = COUNT << shift;
    let one = ((1 - FIRST) as usize) << shift;
    let (a, b) = (
        (major as usize).wrapping_sub(base),
        (minor as usize).wrapping_sub(base),
    );
    ((a | b) & ((1 << shift) - 1)) == 0 && b < end && a.wrapping_sub(one) < end - one
}

/// Checks the array once (a race repeats the same check) and returns the base (1: unusable).
///
/// # Safety
/// The GIL is held.
#[cold]
unsafe fn init() -> usize {
    // SAFETY: GIL held; `PyLong_FromLong` of a small value returns a new reference to the cached
    // object (or a fresh one on an interpreter without the cache, which the check then rejects);
    // each reference is released at once, the cached objects are immortal in practice.
    let addr = |v: i64| unsafe {
        let o = ffi::PyLong_FromLongLong(v);
        if o.is_null() {
            ffi::PyErr_Clear();
            return 0usize;
        }
        ffi::Py_DECREF(o);
        o as usize
    };
    let base = addr(FIRST);
    let stride = addr(FIRST + 1).wrapping_sub(base);
    let ok = base > 1
        && stride >= std::mem::size_of::<ffi::PyObject>()
        && stride < 1024
        && stride.is_power_of_two()
        && (0..COUNT).all(|i| addr(FIRST + i as i64) == base + i * stride);
    let base = if ok { base } else { 1 };
    SHIFT.store(stride.trailing_zeros() as usize, Ordering::Relaxed);
    BASE.store(base, Ordering::Relaxed);
    base
}

#[cfg(test)]
mod tests {
    #[test]
    fn small_ints_read_by_identity_match_their_values() {
        pyo3::Python::initialize();
        pyo3::Python::attach(|py| {
            use pyo3::IntoPyObject;
            for v in [-6i64, -5, -1, 0, 1, 3, 255, 256, 257, 1 << 40] {
                let o = v.into_pyobject(py).unwrap();
                // SAFETY: attached; `o` is live.
                let got = unsafe { super::small_int(o.as_ptr()) };
                if (-5..=256).contains(&v) {
                    assert_eq!(got, Some(v), "{v}");
                } else {
                    assert_eq!(got, None, "{v}");
                }
            }
            // Once `small_int` has checked the array, the pair check agrees with it.
            let vals = [-6i64, -5, -1, 0, 1, 2, 255, 256, 257];
            let objs: Vec<_> = vals.iter().map(|v| v.into_pyobject(py).unwrap()).collect();
            for (i, a) in objs.iter().enumerate() {
                for (j, b) in objs.iter().enumerate() {
                    let want = (1..=256).contains(&vals[i]) && (-5..=256).contains(&vals[j]);
                    // SAFETY: attached; live objects.
                    let got = unsafe { super::small_major_at_least_1(a.as_ptr(), b.as_ptr()) };
                    assert_eq!(got, want, "({}, {})", vals[i], vals[j]);
                }
            }
            let t = pyo3::types::PyBool::new(py, true);
            // SAFETY: as above.
            assert!(!unsafe { super::small_major_at_least_1(t.as_ptr(), objs[3].as_ptr()) });
            let t = pyo3::types::PyBool::new(py, true);
            // SAFETY: as above.
            let got = unsafe { super::small_int(t.as_ptr()) };
            assert_eq!(got, None, "True is not the int 1");
        });
    }
}
