//! Borrowing the Rust value behind a pyclass: `get()` for frozen classes (no borrow flag),
//! `try_borrow()` otherwise, selected at compile time through `PyClass::Frozen`.

use pyo3::PyClass;
use pyo3::prelude::*;
use pyo3::pyclass::boolean_struct::{False, True};

/// How to reach `&T` from `&Bound<T>`: implemented for PyO3's `True` (frozen classes, via
/// `Bound::get`) and `False` (via `Bound::try_borrow`). Every `#[pyclass]` satisfies
/// `T::Frozen: SourceAccess<T>`. `#[derive(DLPackExport)]` requires `frozen`; the `False` impl
/// serves hand-written `DLPackSource` impls on non-frozen classes, whose safety contract
/// forbids reallocating the data from `&mut self` while exports exist (the borrow is released
/// once the export is built).
pub trait SourceAccess<T: PyClass> {
    /// Whether the class is frozen (no `&mut self` access once created: what `T` lends stays
    /// as it is while the object is alive).
    const FROZEN: bool;
    /// Runs `f` with a shared reference to the value.
    fn with<R>(slf: &Bound<'_, T>, f: impl FnOnce(&T) -> R) -> PyResult<R>;
}

impl<T: PyClass<Frozen = True> + Sync> SourceAccess<T> for True {
    const FROZEN: bool = true;
    #[inline(always)]
    fn with<R>(slf: &Bound<'_, T>, f: impl FnOnce(&T) -> R) -> PyResult<R> {
        Ok(f(slf.get()))
    }
}

impl<T: PyClass<Frozen = False>> SourceAccess<T> for False {
    const FROZEN: bool = false;
    #[inline(always)]
    fn with<R>(slf: &Bound<'_, T>, f: impl FnOnce(&T) -> R) -> PyResult<R> {
        let r = slf.try_borrow()?;
        Ok(f(&r))
    }
}
