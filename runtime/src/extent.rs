//! Extents, computed one way: the bytes a shape and strides address around element 0
//! ([`reach`]), and the bytes a storage vouches for around it ([`Extent`]). Imports (the
//! producer's description, the array interfaces), exports (every path checks the user's shape
//! and strides against its storage), adapters and copies all measure with [`reach`].
//!
//! Strides are in elements, any sign. Element positions are `i128` (capped: a reach past 2^67
//! elements is refused, no such memory exists); bytes are `u64`, rounded out for sub-byte
//! elements (packed: element `k` of `bits` bits occupies bits `k * bits .. (k + 1) * bits` from
//! element 0's first bit).

use crate::copy::ElemSize;

/// The bytes a storage vouches for around its data pointer (element 0): `below` bytes before
/// it and `above` bytes from it on (element 0's own bytes included) may be addressed, and stay
/// valid while the storage lives. A slice or a fresh allocation has `below == 0`; a view with
/// negative strides, or one that starts inside its owner's memory, has bytes below.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Extent {
    /// Bytes that may be addressed before the data pointer.
    pub below: usize,
    /// Bytes that may be addressed from the data pointer on.
    pub above: usize,
}

impl Extent {
    /// Nothing may be addressed (only empty tensors fit).
    pub const EMPTY: Extent = Extent { below: 0, above: 0 };

    /// `below` bytes before the data pointer and `above` from it on.
    #[inline]
    pub const fn new(below: usize, above: usize) -> Extent {
        Extent { below, above }
    }

    /// `nbytes` from the data pointer on, none before it (a slice, an allocation's start).
    #[inline]
    pub const fn from_start(nbytes: usize) -> Extent {
        Extent {
            below: 0,
            above: nbytes,
        }
    }

    /// Whether every byte `r` addresses lies inside this extent.
    #[inline]
    pub const fn covers(self, r: Reach) -> bool {
        r.below <= self.below as u64 && r.above <= self.above as u64
    }

    /// The same memory seen from `offset` bytes further on (a view whose element 0 lies inside
    /// it), or `None` when that point is outside the extent.
    #[inline]
    pub fn shifted(self, offset: isize) -> Option<Extent> {
        if offset >= 0 {
            let o = offset as usize;
            (o <= self.above).then(|| Extent {
                below: self.below.saturating_add(o),
                above: self.above - o,
            })
        } else {
            let o = offset.unsigned_abs();
            (o <= self.below).then(|| Extent {
                below: self.below - o,
                above: self.above.saturating_add(o),
            })
        }
    }

    /// The extent that is exactly what `r` addresses.
    #[inline]
    pub fn of_reach(r: Reach) -> Option<Extent> {
        Some(Extent {
            below: usize::try_from(r.below).ok()?,
            above: usize::try_from(r.above).ok()?,
        })
    }
}

/// The bytes a tensor addresses around element 0: `below` before element 0's first byte,
/// `above` from it on (element 0 included). An empty tensor (a 0 in its shape) addresses
/// nothing: [`Reach::NOTHING`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Reach {
    /// Bytes before element 0.
    pub below: u64,
    /// Bytes from element 0 on.
    pub above: u64,
}

impl Reach {
    /// What an empty tensor addresses.
    pub const NOTHING: Reach = Reach { below: 0, above: 0 };

    /// Bytes from the lowest to the highest addressed byte.
    #[inline]
    pub const fn span(self) -> Option<u64> {
        self.below.checked_add(self.above)
    }
}

/// Why a shape and strides address no definite range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReachError {
    /// A negative dimension.
    NegativeDim,
    /// The reach does not fit in `i64` elements or `u64` bytes.
    Overflow,
}

/// The bytes `shape` and `strides` (elements; `None`: C-contiguous) address at `elem`'s width.
/// A negative dimension is refused even when another one is 0; an empty tensor addresses
/// nothing (its strides are not looked at); a dimension of 1 adds nothing whatever its stride.
#[inline]
pub fn reach(shape: &[i64], strides: Option<&[i64]>, elem: ElemSize) -> Result<Reach, ReachError> {
    match reach_fast(shape, strides, elem) {
        Some(r) => Ok(r),
        None => reach_exact(shape, strides, elem),
    }
}

/// [`reach`] for the common case, in registers: whole-byte elements, every dimension at least
/// 1, and positions and bytes that fit 64 bits; `None` sends anything else (empty tensors,
/// negative dimensions, sub-byte elements, overflow) to [`reach_exact`], which decides.
#[inline]
fn reach_fast(shape: &[i64], strides: Option<&[i64]>, elem: ElemSize) -> Option<Reach> {
    let ElemSize::Bytes(b) = elem else {
        return None;
    };
    let (mut lo, mut hi) = (0i64, 0i64);
    match strides {
        Some(strides) => {
            for (&d, &s) in shape.iter().zip(strides) {
                if d <= 1 {
                    if d < 1 {
                        return None;
                    }
                    continue;
                }
                let r = (d - 1).checked_mul(s)?;
                if r < 0 {
                    lo = lo.checked_add(r)?;
                } else {
                    hi = hi.checked_add(r)?;
                }
            }
        }
        None => {
            let mut n: i64 = 1;
            for &d in shape {
                if d < 1 {
                    return None;
                }
                n = n.checked_mul(d)?;
            }
            hi = n - 1;
        }
    }
    let b = b as u64;
    Some(Reach {
        below: lo.unsigned_abs().checked_mul(b)?,
        // `hi < i64::MAX`, so `hi + 1` fits u64.
        above: (hi as u64 + 1).checked_mul(b)?,
    })
}

/// [`reach`] decided exactly, for what [`reach_fast`] leaves.
#[cold]
#[inline(never)]
fn reach_exact(
    shape: &[i64],
    strides: Option<&[i64]>,
    elem: ElemSize,
) -> Result<Reach, ReachError> {
    // Element positions: `lo <= 0 <= hi`, the lowest and highest element addressed. One
    // dimension's reach fits in i128 (|(d - 1) * s| < 2^126), and the sums are capped at
    // `LIMIT` elements, past which no element width (>= 1 bit) gives a byte count in u64.
    const LIMIT: i128 = 1 << 67;
    let (mut lo, mut hi) = (0i128, 0i128);
    let (mut empty, mut negative, mut overflow) = (false, false, false);
    match strides {
        Some(strides) => {
            for (&d, &s) in shape.iter().zip(strides) {
                if d <= 1 {
                    empty |= d == 0;
                    negative |= d < 0;
                    continue;
                }
                // |r| < 2^126, and `lo`, `hi` stay within LIMIT + 1 of zero (clamped once past
                // it), so no sum can wrap however many dimensions follow (issue 50).
                let r = i128::from(d - 1) * i128::from(s);
                if r < 0 {
                    lo = (lo + r).max(-LIMIT - 1);
                } else {
                    hi = (hi + r).min(LIMIT + 1);
                }
                overflow |= lo < -LIMIT || hi > LIMIT;
            }
        }
        None => {
            let mut n: i128 = 1;
            for &d in shape {
                empty |= d == 0;
                negative |= d < 0;
                // Checked: `n <= LIMIT` times a dimension below 2^63 can pass i128's range.
                match n.checked_mul(i128::from(d.max(1))) {
                    Some(m) if m <= LIMIT => n = m,
                    _ => {
                        overflow = true;
                        n = 1;
                    }
                }
            }
            hi = n - 1;
        }
    }
    if negative {
        return Err(ReachError::NegativeDim);
    }
    if empty {
        return Ok(Reach::NOTHING);
    }
    if overflow {
        return Err(ReachError::Overflow);
    }
    // `-LIMIT <= lo <= 0 <= hi <= LIMIT`, so the products fit in u128.
    let bits = match elem {
        ElemSize::Bytes(b) => 8 * b as u128,
        ElemSize::SubByte { bits } => u128::from(bits),
    };
    let below = (lo.unsigned_abs() * bits).div_ceil(8);
    let above = ((hi as u128 + 1) * bits).div_ceil(8);
    match (u64::try_from(below), u64::try_from(above)) {
        (Ok(below), Ok(above)) => Ok(Reach { below, above }),
        _ => Err(ReachError::Overflow),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 50: products and sums that would pass i128's range are overflow, never a wrapped
    /// (small) reach. Without the checks, `[2^62, 8, 2^62 + 2^58]` wraps in the contiguous
    /// product, and five strided dimensions of reach 2^126 wrap the sum.
    #[test]
    fn reach_exact_never_wraps() {
        let shape = [1i64 << 62, 8, (1 << 62) + (1 << 58)];
        for e in [
            ElemSize::Bytes(1),
            ElemSize::Bytes(4),
            ElemSize::SubByte { bits: 4 },
        ] {
            assert_eq!(reach(&shape, None, e), Err(ReachError::Overflow), "{e:?}");
            assert_eq!(
                reach_exact(&shape, None, e),
                Err(ReachError::Overflow),
                "{e:?}"
            );
        }
        let big = [i64::MAX; 5];
        for strides in [[i64::MAX; 5], [i64::MIN + 1; 5]] {
            assert_eq!(
                reach(&big, Some(&strides), ElemSize::Bytes(1)),
                Err(ReachError::Overflow),
                "{strides:?}"
            );
        }
        // Overflow is still overflow after a dimension that alone fits.
        let mixed = [1i64 << 40, 1 << 40, 2, 3];
        assert_eq!(
            reach(&mixed, None, ElemSize::Bytes(8)),
            Err(ReachError::Overflow)
        );
    }

    const F32: ElemSize = ElemSize::Bytes(4);
    const FP4: ElemSize = ElemSize::SubByte { bits: 4 };

    fn r(shape: &[i64], strides: &[i64], e: ElemSize) -> Result<Reach, ReachError> {
        reach(shape, Some(strides), e)
    }

    #[test]
    fn contiguous_and_strided_agree() {
        assert_eq!(
            r(&[3, 4], &[4, 1], F32),
            Ok(Reach {
                below: 0,
                above: 48
            })
        );
        assert_eq!(
            reach(&[3, 4], None, F32),
            Ok(Reach {
                below: 0,
                above: 48
            })
        );
        assert_eq!(
            r(&[4, 3], &[1, 4], F32),
            Ok(Reach {
                below: 0,
                above: 48
            })
        );
        assert_eq!(
            reach(&[], None, F32),
            Ok(Reach { below: 0, above: 4 }),
            "0-d: one element"
        );
    }

    #[test]
    fn negative_strides_reach_below() {
        assert_eq!(r(&[3], &[-1], F32), Ok(Reach { below: 8, above: 4 }));
        assert_eq!(
            r(&[2, 3], &[-3, 1], F32),
            Ok(Reach {
                below: 12,
                above: 12
            })
        );
        assert_eq!(r(&[5], &[-1], FP4), Ok(Reach { below: 2, above: 1 }));
    }

    #[test]
    fn empty_negative_and_overflow() {
        assert_eq!(r(&[0, 5], &[7, 1], F32), Ok(Reach::NOTHING));
        assert_eq!(reach(&[0, i64::MAX, 4], None, F32), Ok(Reach::NOTHING));
        assert_eq!(r(&[0, -1], &[1, 1], F32), Err(ReachError::NegativeDim));
        assert_eq!(reach(&[-1], None, F32), Err(ReachError::NegativeDim));
        assert_eq!(
            r(&[1 << 62, 4], &[1 << 62, 1], F32),
            Err(ReachError::Overflow)
        );
        assert_eq!(
            r(&[3; 40], &[i64::MAX; 40], FP4),
            Err(ReachError::Overflow),
            "capped sums"
        );
        assert_eq!(
            reach(&[1 << 40, 1 << 40], None, F32),
            Err(ReachError::Overflow)
        );
        assert_eq!(
            r(&[1, 7], &[i64::MIN, 1], F32),
            Ok(Reach {
                below: 0,
                above: 28
            }),
            "dim 1"
        );
        assert_eq!(
            r(&[5], &[1], FP4),
            Ok(Reach { below: 0, above: 3 }),
            "packed"
        );
        // i64::MAX elements of 8 bytes do not fit u64 bytes; of 4 bits they do.
        assert_eq!(
            r(&[i64::MAX], &[1], ElemSize::Bytes(8)),
            Err(ReachError::Overflow)
        );
        assert!(
            r(&[3, 2], &[i64::MAX / 2 + 1, -4], FP4).is_ok(),
            "past i64 elements, in u64 bytes"
        );
    }

    #[cfg_attr(miri, ignore = "11,907 cases of safe arithmetic: minutes under Miri")]
    #[test]
    fn the_fast_path_agrees_with_the_exact_one() {
        let dims = [-1i64, 0, 1, 2, 3, 1 << 31, i64::MAX];
        let strides = [i64::MIN, -(1 << 40), -3, -1, 0, 1, 2, 1 << 40, i64::MAX];
        let elems = [
            ElemSize::Bytes(1),
            ElemSize::Bytes(8),
            ElemSize::Bytes(1 << 20),
        ];
        let mut fast = 0;
        for &d0 in &dims {
            for &d1 in &dims {
                for &s0 in &strides {
                    for &s1 in &strides {
                        for e in elems {
                            let (sh, st) = ([d0, d1], [s0, s1]);
                            let exact = reach_exact(&sh, Some(&st), e);
                            if let Some(r) = reach_fast(&sh, Some(&st), e) {
                                assert_eq!(Ok(r), exact, "{sh:?} {st:?} {e:?}");
                                fast += 1;
                            }
                            assert_eq!(reach(&sh, Some(&st), e), exact);
                            if let Some(r) = reach_fast(&sh, None, e) {
                                assert_eq!(Ok(r), reach_exact(&sh, None, e), "{sh:?} {e:?}");
                            }
                        }
                    }
                }
            }
        }
        assert!(
            fast > 1000,
            "the fast path decides the common cases ({fast})"
        );
    }

    #[test]
    fn extents_cover_and_shift() {
        let e = Extent::from_start(48);
        assert!(e.covers(Reach {
            below: 0,
            above: 48
        }));
        assert!(!e.covers(Reach {
            below: 0,
            above: 49
        }));
        assert!(!e.covers(Reach { below: 1, above: 4 }));
        assert!(e.covers(Reach::NOTHING));
        assert!(Extent::EMPTY.covers(Reach::NOTHING));
        assert!(!Extent::EMPTY.covers(Reach { below: 0, above: 1 }));
        assert_eq!(e.shifted(8), Some(Extent::new(8, 40)));
        assert_eq!(e.shifted(48), Some(Extent::new(48, 0)));
        assert_eq!(e.shifted(49), None);
        assert_eq!(e.shifted(-1), None);
        assert_eq!(Extent::new(8, 40).shifted(-8), Some(Extent::from_start(48)));
    }
}
