//! [`Dims`]: shape or strides stored inline for up to [`INLINE`] dimensions, so importing or
//! viewing a tensor allocates nothing for its shape and strides. The derive accepts it as a
//! `#[dlpack(shape)]` / `#[dlpack(strides)]` field because it derefs to `[i64]`.

use std::ops::{Deref, DerefMut};

/// Dimensions stored without a heap allocation.
pub const INLINE: usize = 6;

#[derive(Clone, PartialEq, Eq)]
pub enum Dims {
    /// `len` is a full word: a byte-wide field makes every copy of a `Dims` read bytes 1..8 with
    /// overlapping narrow loads, which stall on the stores that just wrote them.
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
    #[inline(always)]
    pub unsafe fn clone_to(&self, dst: *mut Dims) {
        match self {
            // SAFETY: an inline `Dims` owns nothing, so a bitwise copy is a clone; `dst` is
            // valid and apart from `self` (caller).
            Dims::Inline { .. } => unsafe { std::ptr::copy_nonoverlapping(self, dst, 1) },
            // SAFETY: as above.
            Dims::Heap(_) => unsafe { dst.write(self.clone()) },
        }
    }

    /// Whether the values are stored inline (dropping the `Dims` frees nothing).
    #[inline]
    pub fn is_inline(&self) -> bool {
        matches!(self, Dims::Inline { .. })
    }

    /// Writes `Dims::from_slice(s)` to `dst` (uninitialised) in place: the inline array is
    /// zeroed where it lives and the values are copied into it one by one (no array built on
    /// the stack and then copied, no call).
    ///
    /// # Safety
    /// `dst` is valid for writes of a `Dims`.
    #[inline(always)]
    pub unsafe fn write_from_slice(dst: *mut Dims, s: &[i64]) {
        if s.len() > INLINE {
            // SAFETY: caller contract.
            unsafe { dst.write(Dims::Heap(s.into())) };
            return;
        }
        // SAFETY: caller contract; the value written is then borrowed mutably only here.
        unsafe {
            dst.write(Dims::Inline {
                len: s.len(),
                vals: [0; INLINE],
            });
            if let Dims::Inline { vals, .. } = &mut *dst {
                for (d, &v) in vals.iter_mut().zip(s) {
                    *d = v;
                }
            }
        }
    }

    pub fn from_slice(s: &[i64]) -> Dims {
        if s.len() <= INLINE {
            // Element by element, not `copy_from_slice`: a variable-length `memcpy` writes
            // with narrow, overlapping stores that the next (wide) copy of the array stalls on.
            let vals: [i64; INLINE] = std::array::from_fn(|i| s.get(i).copied().unwrap_or(0));
            Dims::Inline { len: s.len(), vals }
        } else {
            Dims::Heap(s.into())
        }
    }
}

impl Deref for Dims {
    type Target = [i64];
    #[inline]
    fn deref(&self) -> &[i64] {
        match self {
            Dims::Inline { len, vals } => &vals[..*len],
            Dims::Heap(v) => v,
        }
    }
}

impl DerefMut for Dims {
    #[inline]
    fn deref_mut(&mut self) -> &mut [i64] {
        match self {
            Dims::Inline { len, vals } => &mut vals[..*len],
            Dims::Heap(v) => v,
        }
    }
}

impl From<Vec<i64>> for Dims {
    fn from(v: Vec<i64>) -> Dims {
        if v.len() <= INLINE {
            Dims::from_slice(&v)
        } else {
            Dims::Heap(v.into_boxed_slice())
        }
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
        assert!(matches!(d, Dims::Inline { len: 2, .. }));
        assert_eq!(&*d, &[2, 3]);
        let h: Dims = (0..9).collect();
        assert!(matches!(h, Dims::Heap(_)));
        assert_eq!(h.len(), 9);
        let mut e = Dims::from_slice(&[]);
        assert!(e.is_empty());
        e = Dims::from(vec![1, 2, 3]);
        e[1] = 7;
        assert_eq!(&e[..], &[1, 7, 3]);
    }
}
