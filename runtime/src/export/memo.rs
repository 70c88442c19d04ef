//! A frozen instance's export check, remembered (decision 0022).
//!
//! Every export checks what it describes against what the storage vouches for
//! ([`check_source`](super::check_source): the device, the dtype, the shape and strides against
//! the extent). For an instance of a `#[pyclass(frozen)]` type none of that can change while the
//! instance lives: PyO3 gives no `&mut` to it, the dtype and device fields are plain values, the
//! shape and strides fields are containers whose `[..]` is the same while they are shared
//! ([`FixedDims`]), and a [`Buffer`](crate::Buffer)'s facts are worked out once when it is made.
//! So the first export that passes says so in the instance's own `Buffer` ([`ExportMemo`]), and
//! later exports of that instance read one flag instead of checking again.
//!
//! Who may read or set the flag: only `__dlpack__`'s frozen path (`export::method`), through
//! [`FrozenInstance`](super::borrow::FrozenInstance), which holds the instance the source is
//! part of. A Rust-side export of a value that is not (yet) in a Python object never looks at
//! it, so a value checked in Rust and then changed through `&mut` cannot carry a stale flag.
//! The flag lives in the `Buffer` value itself: a `Buffer` is not `Clone`, moves with its
//! struct, and every way of making one starts unchecked; a source whose storage could be shared
//! with another instance (`Arc`, a user's `DataSource`) has no flag.

use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::dims::Dims;
use crate::__private::DimValue;

/// Whether an export of the frozen instance that holds this value passed the check. Starts
/// unchecked; see the module documentation for who reads and sets it.
#[derive(Default)]
pub struct ExportMemo(AtomicBool);

impl ExportMemo {
    /// Unchecked.
    #[inline]
    pub const fn new() -> ExportMemo {
        ExportMemo(AtomicBool::new(false))
    }

    /// Whether an export of the instance passed the check. Relaxed: the flag only ever goes
    /// from false to true, and what it stands for (the instance's fields and the storage's
    /// facts) was fixed before the instance could reach any thread.
    #[inline(always)]
    pub(crate) fn passed(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// Remembers that an export of the instance passed the check.
    #[inline(always)]
    pub(crate) fn note_passed(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for ExportMemo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ExportMemo").field(&self.passed()).finish()
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A shape or strides container whose `[..]` gives the same values for as long as it is only
/// shared (no interior mutability; a different container could answer differently each time).
/// Sealed: dlbind's [`Dims`] and the standard owned containers of [`DimValue`]s.
pub trait FixedDims: sealed::Sealed {}

impl sealed::Sealed for Dims {}
impl FixedDims for Dims {}
impl<T: DimValue> sealed::Sealed for Vec<T> {}
impl<T: DimValue> FixedDims for Vec<T> {}
impl<T: DimValue> sealed::Sealed for Box<[T]> {}
impl<T: DimValue> FixedDims for Box<[T]> {}
impl<T: DimValue> sealed::Sealed for Arc<[T]> {}
impl<T: DimValue> FixedDims for Arc<[T]> {}
impl<T: DimValue, const N: usize> sealed::Sealed for [T; N] {}
impl<T: DimValue, const N: usize> FixedDims for [T; N] {}

/// Asks whether a field type is [`FixedDims`] without requiring it: the derive emits
/// `FixedProbe::of(&self.field).dlbind_fixed()` with [`NotFixed`] in scope. The type is the
/// field's own (inferred from the borrow, not from how the field's type is spelled), and Rust's
/// method resolution picks the inherent `dlbind_fixed` when the bound holds for it, else the
/// trait method of [`NotFixed`]. Both are found at the first step of the lookup (by value), so
/// no trait of the user's can come before them: one with a `dlbind_fixed` method that applies
/// to the probe makes the call ambiguous, a compile error (issue 50). The fallback only costs
/// speed (the export checks every time), never soundness.
pub struct FixedProbe<X: ?Sized>(PhantomData<fn() -> *const X>);

impl<X: ?Sized> FixedProbe<X> {
    /// The probe of the field type `X`.
    #[inline(always)]
    pub const fn new() -> Self {
        FixedProbe(PhantomData)
    }

    /// The probe of the type of `field` (what the derive emits: the type comes from the borrow).
    #[inline(always)]
    pub const fn of(field: &X) -> Self {
        let _ = field;
        FixedProbe(PhantomData)
    }
}

impl<X: FixedDims + ?Sized> FixedProbe<X> {
    /// `true`: the field type is [`FixedDims`] (inherent, so it comes before any trait method).
    #[inline(always)]
    pub const fn dlbind_fixed(self) -> bool {
        true
    }
}

impl<X: ?Sized> Default for FixedProbe<X> {
    fn default() -> Self {
        Self::new()
    }
}

impl<X: ?Sized> std::fmt::Debug for FixedProbe<X> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FixedProbe")
    }
}

/// See [`FixedProbe`]: any field type that is not [`FixedDims`].
pub trait NotFixed {
    /// `false`.
    fn dlbind_fixed(self) -> bool;
}
impl<T: ?Sized> NotFixed for FixedProbe<T> {
    #[inline(always)]
    fn dlbind_fixed(self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[allow(dead_code)]
    struct Shifting(std::sync::Mutex<Vec<i64>>);

    #[test]
    fn the_probe_answers_for_fixed_containers_only() {
        assert!(FixedProbe::<Dims>::new().dlbind_fixed());
        assert!(FixedProbe::<Vec<i64>>::new().dlbind_fixed());
        assert!(FixedProbe::<Vec<usize>>::new().dlbind_fixed());
        assert!(FixedProbe::<Box<[u32]>>::new().dlbind_fixed());
        assert!(FixedProbe::<Arc<[i64]>>::new().dlbind_fixed());
        assert!(FixedProbe::<[i64; 3]>::new().dlbind_fixed());
        assert!(!FixedProbe::<Shifting>::new().dlbind_fixed());
        assert!(!FixedProbe::<Vec<f32>>::new().dlbind_fixed());
        assert!(!FixedProbe::<std::cell::RefCell<Vec<i64>>>::new().dlbind_fixed());
    }

    #[test]
    fn a_memo_starts_unchecked_and_stays_checked() {
        let m = ExportMemo::new();
        assert!(!m.passed());
        m.note_passed();
        assert!(m.passed());
        assert!(!ExportMemo::default().passed());
    }
}
