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
#[inline(always)]
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
            let t = pyo3::types::PyBool::new(py, true);
            // SAFETY: as above.
            assert_eq!(unsafe { super::small_int(t.as_ptr()) }, None, "True is not the int 1");
        });
    }
}
