//! Autoref specialization for the one fact the derive cannot be told otherwise: whether the type
//! implements [`FromDLPack`] (the C exchange table's constructor). That impl comes from
//! `#[derive(FromDLPack)]` or from the user's hand, neither of which `#[derive(DLPackExport)]`
//! can see, and an attribute would only repeat it (and, when forgotten, silently drop the
//! table's constructor). Every other fact comes from an attribute (`unchecked_extent`) or from
//! PyO3's own `PyClass::Frozen` (`SourceAccess`, `derived::ClassKind`); see
//! docs/decisions/0020-facts-from-attributes-and-pyo3.md.
//!
//! The derive emits `Probe::<Self>::new().dlbind_constructor()` with [`NoConstructor`] in scope:
//! Rust's method resolution tries the inherent method first (applicable only when its bounds
//! hold for the concrete `T`), then the trait methods at the same step, ours the fallback. No
//! trait of the user's scope can come first (issue 50). This only works with concrete types,
//! which is the case in the derive's expansion (`#[pyclass]` types are never generic).

use std::marker::PhantomData;

use pyo3::PyClass;
use pyo3::prelude::*;

use super::Constructor;
use crate::import::FromDLPack;
use crate::import::ImportedTensor;

/// A type-level probe (zero-sized).
pub struct Probe<X: ?Sized>(PhantomData<fn() -> *const X>);

impl<X: ?Sized> Probe<X> {
    /// The probe.
    #[inline(always)]
    pub const fn new() -> Self {
        Probe(PhantomData)
    }
}

impl<X: ?Sized> Default for Probe<X> {
    fn default() -> Self {
        Self::new()
    }
}

impl<X: ?Sized> std::fmt::Debug for Probe<X> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Probe")
    }
}

/// Builds the Python object of `T` (a `#[pyclass]`) from an imported tensor.
pub fn construct<'py, T>(py: Python<'py>, t: ImportedTensor) -> PyResult<Bound<'py, PyAny>>
where
    T: FromDLPack + PyClass + Into<pyo3::PyClassInitializer<T>>,
{
    let v = T::from_imported(py, t)?;
    Ok(Bound::new(py, v)?.into_any())
}

impl<T> Probe<T>
where
    T: FromDLPack + PyClass + Into<pyo3::PyClassInitializer<T>>,
{
    /// `T: FromDLPack`: its constructor. Inherent, so that Rust's method resolution picks it
    /// before any trait method when the bounds hold.
    #[inline(always)]
    pub fn dlbind_constructor(self) -> Option<Constructor> {
        Some(construct::<T>)
    }
}

/// Fallback: no constructor. Found at the same step of the method lookup as any trait of the
/// user's that could apply to the probe (by value), so such a trait makes the derive's call
/// ambiguous (a compile error) instead of answering for it.
pub trait NoConstructor {
    /// `None`.
    fn dlbind_constructor(self) -> Option<Constructor>;
}
impl<T> NoConstructor for Probe<T> {
    #[inline(always)]
    fn dlbind_constructor(self) -> Option<Constructor> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constructor_probe_without_impl_is_none() {
        #[pyclass(crate = "pyo3")]
        struct NoCtor;
        assert!(Probe::<NoCtor>::new().dlbind_constructor().is_none());

        #[pyclass(crate = "pyo3")]
        struct WithCtor;
        impl FromDLPack for WithCtor {
            fn from_imported(_py: Python<'_>, _t: ImportedTensor) -> PyResult<Self> {
                Ok(WithCtor)
            }
        }
        assert!(Probe::<WithCtor>::new().dlbind_constructor().is_some());
    }
}
