//! [`Dims`]: shape or strides stored inline for up to six dimensions, so importing or viewing a
//! tensor allocates nothing for its shape and strides (a `Vec<i64>` field costs two allocations
//! and two frees per import, about half of a `from_dlpack` call). The derives accept it as a
//! `#[dlpack(shape)]` / `#[dlpack(strides)]` field: it derefs to `[i64]`.

use std::ops::{Deref, DerefMut};

/// Dimensions stored without a heap allocation.
const INLINE: usize = 6;

/// A shape or strides: up to six values inline, more on the heap; derefs to `[i64]`. Build it
/// with [`Dims::from_slice`], `From<Vec<i64>>`, `From<&[i64]>` or `collect()`.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Dims(Repr);

#[derive(Clone, PartialEq, Eq, Hash)]
enum Repr {
    /// `len` is a full word: a byte-wide field makes every copy of a `Dims` read bytes 1..8 with
    /// overlapping narrow loads, which stall on the stores that just wrote them. Invariant:
    /// `len <= INLINE` (the two constructors check it; nothing changes `len` afterwards).
    Inline {
        len: usize,
        vals: [i64; INLINE],
    },
    Heap(Box<[i64]>),
}

impl Dims {
    /// Writes a clone of `self` to `dst` (uninitialised): inline values are copied from here to
    /// there directly, without the clone-then-move of `dst.write(self.clone())`.
    ///
    /// # Safety
    /// `dst` is valid for writes of a `Dims` and does not overlap `self`.
    #[doc(hidden)]
    #[inline]
    pub unsafe fn clone_to(&self, dst: *mut Dims) {
        match &self.0 {
            // SAFETY: an inline `Dims` owns nothing, so a bitwise copy is a clone; `dst` is
            // valid and apart from `self` (caller).
            Repr::Inline { .. } => unsafe { std::ptr::copy_nonoverlapping(self, dst, 1) },
            // SAFETY: as above.
            Repr::Heap(_) => unsafe { dst.write(self.clone()) },
        }
    }

    /// Whether the values are stored inline (dropping the `Dims` frees nothing).
    #[inline]
    pub fn is_inline(&self) -> bool {
        matches!(self.0, Repr::Inline { .. })
    }

    /// Writes `Dims::from_slice(s)` to `dst` (uninitialised) in place: the inline array is
    /// zeroed where it lives and the values are copied into it one by one (no array built on
    /// the stack and then copied, no call).
    ///
    /// # Safety
    /// `dst` is valid for writes of a `Dims`.
    #[doc(hidden)]
    #[inline]
    pub unsafe fn write_from_slice(dst: *mut Dims, s: &[i64]) {
        if s.len() > INLINE {
            // SAFETY: caller contract.
            unsafe { dst.write(Dims(Repr::Heap(s.into()))) };
            return;
        }
        // SAFETY: caller contract; the value written is then borrowed mutably only here.
        unsafe {
            dst.write(Dims(Repr::Inline {
                len: s.len(),
                vals: [0; INLINE],
            }));
            if let Repr::Inline { vals, .. } = &mut (*dst).0 {
                for (d, &v) in vals.iter_mut().zip(s) {
                    *d = v;
                }
            }
        }
    }

    /// The values of `s`.
    #[inline]
    pub fn from_slice(s: &[i64]) -> Dims {
        if s.len() <= INLINE {
            // Element by element, not `copy_from_slice`: a variable-length `memcpy` writes
            // with narrow, overlapping stores that the next (wide) copy of the array stalls on.
            let vals: [i64; INLINE] = std::array::from_fn(|i| s.get(i).copied().unwrap_or(0));
            Dims(Repr::Inline { len: s.len(), vals })
        } else {
            Dims(Repr::Heap(s.into()))
        }
    }
}

impl Default for Dims {
    /// No dimensions (a scalar's shape).
    fn default() -> Dims {
        Dims::from_slice(&[])
    }
}

impl Deref for Dims {
    type Target = [i64];
    #[inline]
    fn deref(&self) -> &[i64] {
        match &self.0 {
            Repr::Inline { len, vals } => {
                // SAFETY: `Repr::Inline`'s invariant (no bounds check on every export).
                unsafe { std::hint::assert_unchecked(*len <= INLINE) };
                &vals[..*len]
            }
            Repr::Heap(v) => v,
        }
    }
}

impl DerefMut for Dims {
    #[inline]
    fn deref_mut(&mut self) -> &mut [i64] {
        match &mut self.0 {
            Repr::Inline { len, vals } => {
                // SAFETY: `Repr::Inline`'s invariant.
                unsafe { std::hint::assert_unchecked(*len <= INLINE) };
                &mut vals[..*len]
            }
            Repr::Heap(v) => v,
        }
    }
}

impl From<Vec<i64>> for Dims {
    fn from(v: Vec<i64>) -> Dims {
        if v.len() <= INLINE {
            Dims::from_slice(&v)
        } else {
            Dims(Repr::Heap(v.into_boxed_slice()))
        }
    }
}

impl From<&[i64]> for Dims {
    #[inline]
    fn from(s: &[i64]) -> Dims {
        Dims::from_slice(s)
    }
}

impl<const N: usize> From<[i64; N]> for Dims {
    #[inline]
    fn from(a: [i64; N]) -> Dims {
        Dims::from_slice(&a)
    }
}

impl FromIterator<i64> for Dims {
    fn from_iter<I: IntoIterator<Item = i64>>(iter: I) -> Dims {
        Dims::from(iter.into_iter().collect::<Vec<_>>())
    }
}

impl std::fmt::Debug for Dims {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_and_heap() {
        let d = Dims::from_slice(&[2, 3]);
        assert!(d.is_inline() && matches!(d.0, Repr::Inline { len: 2, .. }));
        assert_eq!(&*d, &[2, 3]);
        let h: Dims = (0..9).collect();
        assert!(!h.is_inline());
        assert_eq!(h.len(), 9);
        let mut e = Dims::default();
        assert!(e.is_empty());
        e = Dims::from(vec![1, 2, 3]);
        e[1] = 7;
        assert_eq!(&e[..], &[1, 7, 3]);
        assert_eq!(Dims::from([4, 5]), Dims::from(&[4i64, 5][..]));
    }

    #[test]
    fn in_place_writes_match_the_values() {
        for n in [0usize, 1, 3, 6, 7, 10] {
            let s: Vec<i64> = (0..n as i64).map(|v| v * 3 - 1).collect();
            let mut out = std::mem::MaybeUninit::<Dims>::uninit();
            // SAFETY: `out` is valid for writes of a `Dims`.
            let d = unsafe {
                Dims::write_from_slice(out.as_mut_ptr(), &s);
                out.assume_init()
            };
            assert_eq!((&d[..], d.is_inline()), (&s[..], n <= INLINE));
            let mut copy = std::mem::MaybeUninit::<Dims>::uninit();
            // SAFETY: `copy` is valid for writes and apart from `d`.
            let c = unsafe {
                d.clone_to(copy.as_mut_ptr());
                copy.assume_init()
            };
            assert_eq!(c, d);
        }
    }
}
