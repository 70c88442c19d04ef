//! What a derived import does differently for a frozen class, chosen at compile time through
//! PyO3's own `PyClass::Frozen` (`True` / `False`), as [`SourceAccess`] does for exports: the
//! same-type shortcuts read a frozen source without a borrow, instances come from the type's
//! free list, and the direct release is set up. A plain class reads under a borrow (the
//! shortcuts that need a frozen value are declined), is built by PyO3, and keeps PyO3's release.
//!
//! `#[derive(FromDLPack)]` names it as `<<Self as PyClass>::Frozen as ClassKind<Self>>::…`; like
//! [`SourceAccess`], a frozen class must be `Sync` (PyO3 requires it for `Bound::get`, and for
//! every class not declared `unsendable`).
//!
//! [`SourceAccess`]: crate::export::access::SourceAccess

use pyo3::PyClass;
use pyo3::prelude::*;
use pyo3::pyclass::boolean_struct::{False, True};

use crate::cpython::freelist::{ReleasePython, enable_direct_release, new_instance_tracked};

/// The frozen-or-not half of a derived import (see the module docs).
#[diagnostic::on_unimplemented(
    message = "`#[derive(FromDLPack)]` on a `#[pyclass(frozen)]` type needs it to be `Sync`",
    note = "a frozen class's value is read through `Bound::get`, which PyO3 allows for `Sync` types only; drop `unsendable` or `frozen`"
)]
pub trait ClassKind<T: PyClass> {
    /// The value of `b` without a borrow: `Some` for a frozen class, `None` otherwise.
    fn frozen_ref<'a>(b: &'a Bound<'_, T>) -> Option<&'a T>;

    /// A new instance holding `v`: from the type's free list for a frozen class (`track`,
    /// asked of the value in place: whether the instance must be GC-tracked), PyO3's
    /// constructor (always tracked) otherwise.
    fn instance<'py>(
        py: Python<'py>,
        v: T,
        track: impl FnOnce(&T) -> bool,
    ) -> PyResult<Bound<'py, T>>
    where
        T: Into<pyo3::PyClassInitializer<T>>;

    /// Sets up the direct release for a frozen class (its refusal ignored: the type then
    /// keeps PyO3's deallocation); nothing for a plain class.
    fn direct_release(py: Python<'_>)
    where
        T: ReleasePython;
}

impl<T: PyClass<Frozen = True> + Sync> ClassKind<T> for True {
    #[inline(always)]
    fn frozen_ref<'a>(b: &'a Bound<'_, T>) -> Option<&'a T> {
        Some(b.get())
    }

    #[inline(always)]
    fn instance<'py>(
        py: Python<'py>,
        v: T,
        track: impl FnOnce(&T) -> bool,
    ) -> PyResult<Bound<'py, T>>
    where
        T: Into<pyo3::PyClassInitializer<T>>,
    {
        new_instance_tracked(py, v, track)
    }

    #[inline]
    fn direct_release(py: Python<'_>)
    where
        T: ReleasePython,
    {
        let _ = enable_direct_release::<T>(py);
    }
}

impl<T: PyClass<Frozen = False>> ClassKind<T> for False {
    #[inline(always)]
    fn frozen_ref<'a>(b: &'a Bound<'_, T>) -> Option<&'a T> {
        let _ = b;
        None
    }

    #[inline(always)]
    fn instance<'py>(
        py: Python<'py>,
        v: T,
        track: impl FnOnce(&T) -> bool,
    ) -> PyResult<Bound<'py, T>>
    where
        T: Into<pyo3::PyClassInitializer<T>>,
    {
        let _ = track;
        Bound::new(py, v)
    }

    #[inline]
    fn direct_release(py: Python<'_>)
    where
        T: ReleasePython,
    {
        let _ = py;
    }
}
