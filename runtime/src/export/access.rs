//! Borrowing the Rust value behind a pyclass: `get()` for frozen classes (no borrow flag),
//! `try_borrow()` otherwise, selected at compile time through `PyClass::Frozen`; and the owner
//! an export keeps alive ([`SourceAccess::with_owner`]): the object itself for a frozen class, a
//! borrow guard ([`super::borrow`]) for a non-frozen one; or, for exports whose owner is a
//! managed tensor, a borrow the tensor's block keeps ([`with_held`]).

use std::any::TypeId;

use pyo3::PyClass;
use pyo3::prelude::*;
use pyo3::pyclass::boolean_struct::{False, True};

use super::borrow::HeldBorrow;

/// How to reach `&T` from `&Bound<T>`, and what an export of it keeps alive: implemented for
/// PyO3's `True` (frozen classes, via `Bound::get`) and `False` (via `Bound::try_borrow`).
/// Every `#[pyclass]` satisfies `T::Frozen: SourceAccess<T>` (a frozen one must be `Sync`, as
/// PyO3 requires for `Bound::get`). `#[derive(DLPackExport)]` and every runtime entry point
/// (`__dlpack__`, the exchange table, the bridges) dispatch through it, so a hand-written
/// [`DLPackSource`](crate::export::DLPackSource) impl on a non-frozen class gets the same
/// borrow-holding exports as a derived one.
pub trait SourceAccess<T: PyClass> {
    /// Whether the class is frozen (no `&mut self` access once created: what `T` lends stays
    /// as it is while the object is alive).
    const FROZEN: bool;
    /// Runs `f` with a shared reference to the value (a borrow that ends when `f` returns).
    fn with<R>(slf: &Bound<'_, T>, f: impl FnOnce(&T) -> R) -> PyResult<R>;
    /// Runs `f` with the *owner* an export of `slf` must keep alive for as long as a consumer
    /// holds the export, and a shared reference to the value:
    /// * frozen: `slf` itself (the zero-cost path: exactly `f(slf, slf.get())`);
    /// * not frozen: a new borrow guard, a hidden Python object holding a shared borrow of
    ///   `slf` (and a strong reference to it) until its last reference goes, so that
    ///   `&mut self` methods and setters fail with PyO3's borrow error (`RuntimeError: Already
    ///   borrowed`) while any export that keeps the owner lives (see `python::borrow`).
    ///
    /// An export that keeps no owner (a finished host copy) drops the guard, and so the borrow,
    /// when `f` returns. Fails with PyO3's borrow error when `slf` is mutably borrowed.
    fn with_owner<'py, R>(
        slf: &Bound<'py, T>,
        f: impl FnOnce(&Bound<'py, PyAny>, &T) -> R,
    ) -> PyResult<R>;
}

impl<T: PyClass<Frozen = True> + Sync> SourceAccess<T> for True {
    const FROZEN: bool = true;
    #[inline]
    fn with<R>(slf: &Bound<'_, T>, f: impl FnOnce(&T) -> R) -> PyResult<R> {
        Ok(f(slf.get()))
    }
    #[inline]
    fn with_owner<'py, R>(
        slf: &Bound<'py, T>,
        f: impl FnOnce(&Bound<'py, PyAny>, &T) -> R,
    ) -> PyResult<R> {
        Ok(f(slf.as_any(), slf.get()))
    }
}

impl<T: PyClass<Frozen = False>> SourceAccess<T> for False {
    const FROZEN: bool = false;
    #[inline]
    fn with<R>(slf: &Bound<'_, T>, f: impl FnOnce(&T) -> R) -> PyResult<R> {
        let r = slf.try_borrow()?;
        Ok(f(&r))
    }
    #[inline]
    fn with_owner<'py, R>(
        slf: &Bound<'py, T>,
        f: impl FnOnce(&Bound<'py, PyAny>, &T) -> R,
    ) -> PyResult<R> {
        // Two shared borrows: one moves into the guard (it lasts as long as the exports that
        // keep the guard), one serves `f` and ends with this call. The second cannot fail once
        // the first succeeded (no mutable borrow can start in between).
        let r = slf.try_borrow()?;
        let guard = super::borrow::hold(slf.try_borrow()?, None)?;
        Ok(f(&guard, &r))
    }
}

/// Runs `f` with a shared borrow of `slf` (a [`HeldBorrow`]: a `PyRef` of it, holding a strong
/// reference) and the value, for an export whose manager block keeps the borrow instead of a
/// guard object: `f` moves the borrow into the block (`build_managed`, through [`Keep`]), where
/// the tensor's deleter ends it, or drops it (a failed export, a host copy). One `try_borrow`
/// serves both. Fails with PyO3's borrow error when `slf` is mutably borrowed.
///
/// For non-frozen classes (a frozen one needs no borrow and exports `slf` itself, through
/// [`SourceAccess::with`]; this would work for it but count a borrow).
///
/// [`Keep`]: super::borrow::Keep
#[inline]
pub(crate) fn with_held<'py, T: PyClass, R>(
    slf: &Bound<'py, T>,
    f: impl FnOnce(HeldBorrow, &T) -> R,
) -> PyResult<R> {
    let r = slf.try_borrow()?;
    let src: *const T = &*r;
    let held = HeldBorrow::new(r);
    // SAFETY: `src` points at the value inside `slf`'s object, which `held` keeps alive and
    // shared-borrowed (no `&mut T` can be made while it lives). `f` moves `held` into an
    // export's block or drops it, in both cases after the export's last use of `src`
    // (`build_managed` decides that last); ending the borrow writes only PyO3's borrow flag,
    // outside the value, and cannot free the object (the caller's `slf` holds a reference), so
    // the value stays unchanged and in place for as long as `f` runs.
    Ok(f(held, unsafe { &*src }))
}

/// Whether `T` is a `#[pyclass(frozen)]`, for code whose bounds do not name [`SourceAccess`]
/// (a constant once monomorphised: the comparison folds away).
#[inline]
pub(crate) fn is_frozen<T: PyClass>() -> bool {
    TypeId::of::<T::Frozen>() == TypeId::of::<True>()
}
