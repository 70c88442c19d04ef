//! Autoref specialization helpers for the derive (what `#[derive(DLPackExport)]` expands to).
//!
//! The derive cannot see trait impls or what a field type derefs to, so it emits method calls
//! on `&&&Probe::<X>::new()`; Rust's method resolution tries the impl on `&&Probe<X>` first (the
//! "specialised" one, applicable only when its bounds hold for the concrete `X`), then
//! `&Probe<X>`, then the fallback on `Probe<X>`. This only works with concrete types, which is
//! the case in the derive's expansion (`#[pyclass]` types are never generic).
//!
//! * [`ViaConstructor`] / [`NoConstructor`]: `dlbind_constructor()` is
//!   `Some(construct::<T>)` when `T: FromDLPack`, else `None`.
//! * [`DimsViaDeref`] / [`DimsViaArray`] / [`NoDims`]: `dlbind_dims()` is a function borrowing
//!   the field as `&[i64]` (`Deref<Target = [i64]>`, `[i64; N]`), else `None`.
//! * [`ExtentTrusted`] / [`ExtentOfData`]: `dlbind_extent(of_data)` is `None` when
//!   `T: UncheckedExtent` (the type vouches for its layout), else `of_data()` (the data field's
//!   byte count, for the export-side span check); `dlbind_trusted()` says which.

use std::marker::PhantomData;
use std::ops::Deref;

use pyo3::PyClass;
use pyo3::prelude::*;

use super::Constructor;
use crate::export::UncheckedExtent;
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

/// Level 1: `T: FromDLPack`.
pub trait ViaConstructor {
    /// The constructor.
    fn dlbind_constructor(&self) -> Option<Constructor>;
}
impl<T> ViaConstructor for &&Probe<T>
where
    T: FromDLPack + PyClass + Into<pyo3::PyClassInitializer<T>>,
{
    #[inline(always)]
    fn dlbind_constructor(&self) -> Option<Constructor> {
        Some(construct::<T>)
    }
}

/// Fallback: no constructor.
pub trait NoConstructor {
    /// `None`.
    fn dlbind_constructor(&self) -> Option<Constructor>;
}
impl<T> NoConstructor for Probe<T> {
    #[inline(always)]
    fn dlbind_constructor(&self) -> Option<Constructor> {
        None
    }
}

/// Borrows a field as dims.
pub type DimsFn<X> = fn(&X) -> &[i64];

fn deref_dims<X: Deref<Target = [i64]>>(x: &X) -> &[i64] {
    x
}

fn array_dims<const N: usize>(x: &[i64; N]) -> &[i64] {
    x
}

/// Level 1: `X: Deref<Target = [i64]>` (`Vec<i64>`, `Box<[i64]>`, `Arc<[i64]>`, …).
pub trait DimsViaDeref<X> {
    /// The borrowing function.
    fn dlbind_dims(&self) -> Option<DimsFn<X>>;
}
impl<X: Deref<Target = [i64]>> DimsViaDeref<X> for &&Probe<X> {
    #[inline(always)]
    fn dlbind_dims(&self) -> Option<DimsFn<X>> {
        Some(deref_dims::<X>)
    }
}

/// Level 2: `[i64; N]`.
pub trait DimsViaArray<X> {
    /// The borrowing function.
    fn dlbind_dims(&self) -> Option<DimsFn<X>>;
}
impl<const N: usize> DimsViaArray<[i64; N]> for &Probe<[i64; N]> {
    #[inline(always)]
    fn dlbind_dims(&self) -> Option<DimsFn<[i64; N]>> {
        Some(array_dims::<N>)
    }
}

/// Fallback: not borrowable as `&[i64]`.
pub trait NoDims<X> {
    /// `None`.
    fn dlbind_dims(&self) -> Option<DimsFn<X>>;
}
impl<X> NoDims<X> for Probe<X> {
    #[inline(always)]
    fn dlbind_dims(&self) -> Option<DimsFn<X>> {
        None
    }
}

/// Level 1: `T: UncheckedExtent`: exports skip the dtype and span checks.
pub trait ExtentTrusted {
    /// `true`: the type vouches for its layout.
    fn dlbind_trusted(&self) -> bool;
}
impl<T: UncheckedExtent> ExtentTrusted for &&Probe<T> {
    #[inline(always)]
    fn dlbind_trusted(&self) -> bool {
        true
    }
}

/// Fallback: exports check the layout against the data field's extent.
pub trait ExtentOfData {
    /// `false`: exports check the layout.
    fn dlbind_trusted(&self) -> bool;
}
impl<T> ExtentOfData for Probe<T> {
    #[inline(always)]
    fn dlbind_trusted(&self) -> bool {
        false
    }
}

/// Level 1 of the frozen probe (`#[derive(FromDLPack)]`): `T` is a `#[pyclass(frozen)]`, so the
/// value of a `Bound<T>` can be read without a borrow (`dlbind_frozen`), and instances come from
/// its free list (`cpython::freelist::new_instance`, `dlbind_instance`).
pub trait ViaFrozen<T> {
    /// `Some(b.get())`.
    fn dlbind_frozen<'a>(&self, b: &'a Bound<'_, T>) -> Option<&'a T>;
    /// `cpython::freelist::new_instance_tracked` (`track`: whether the instance must be
    /// GC-tracked, `FromDLPack::__dlbind_needs_tracking`, asked of the value in place).
    fn dlbind_instance<'py>(
        &self,
        py: Python<'py>,
        v: T,
        track: impl FnOnce(&T) -> bool,
    ) -> PyResult<Bound<'py, T>>;
}
impl<T> ViaFrozen<T> for &Probe<T>
where
    T: PyClass<Frozen = pyo3::pyclass::boolean_struct::True>
        + Sync
        + Into<pyo3::PyClassInitializer<T>>,
{
    #[inline(always)]
    fn dlbind_frozen<'a>(&self, b: &'a Bound<'_, T>) -> Option<&'a T> {
        Some(b.get())
    }
    #[inline(always)]
    fn dlbind_instance<'py>(
        &self,
        py: Python<'py>,
        v: T,
        track: impl FnOnce(&T) -> bool,
    ) -> PyResult<Bound<'py, T>> {
        crate::cpython::freelist::new_instance_tracked(py, v, track)
    }
}

/// Fallback of the frozen probe: a plain `#[pyclass]` (its value is read under a borrow; the
/// same-type shortcuts, which need a frozen type, are declined).
pub trait NotFrozen<T> {
    /// `None`.
    fn dlbind_frozen<'a>(&self, b: &'a Bound<'_, T>) -> Option<&'a T>;
    /// `Bound::new` (always GC-tracked).
    fn dlbind_instance<'py>(
        &self,
        py: Python<'py>,
        v: T,
        track: impl FnOnce(&T) -> bool,
    ) -> PyResult<Bound<'py, T>>;
}
impl<T> NotFrozen<T> for Probe<T>
where
    T: PyClass + Into<pyo3::PyClassInitializer<T>>,
{
    #[inline(always)]
    fn dlbind_frozen<'a>(&self, b: &'a Bound<'_, T>) -> Option<&'a T> {
        let _ = b;
        None
    }
    #[inline(always)]
    fn dlbind_instance<'py>(
        &self,
        py: Python<'py>,
        v: T,
        track: impl FnOnce(&T) -> bool,
    ) -> PyResult<Bound<'py, T>> {
        let _ = track;
        Bound::new(py, v)
    }
}

/// Level 1 of the release probe (`#[derive(FromDLPack)]`'s setup): a frozen type with a free
/// list and a `ReleasePython` impl gets the direct release.
pub trait ViaRelease<T> {
    /// `cpython::freelist::enable_direct_release`, its refusal ignored (no
    /// free list: the type keeps PyO3's deallocation).
    fn dlbind_direct_release(&self, py: Python<'_>);
}
impl<T> ViaRelease<T> for &Probe<T>
where
    T: crate::cpython::freelist::ReleasePython
        + PyClass<Frozen = pyo3::pyclass::boolean_struct::True>,
{
    #[inline]
    fn dlbind_direct_release(&self, py: Python<'_>) {
        let _ = crate::cpython::freelist::enable_direct_release::<T>(py);
    }
}

/// Fallback of the release probe: nothing.
pub trait NoRelease<T> {
    /// Nothing.
    fn dlbind_direct_release(&self, py: Python<'_>);
}
impl<T> NoRelease<T> for Probe<T> {
    #[inline]
    fn dlbind_direct_release(&self, py: Python<'_>) {
        let _ = py;
    }
}

#[cfg(test)]
#[allow(clippy::needless_borrow)] // the extra references are the point (autoref specialization)
mod tests {
    use super::*;

    #[test]
    fn dims_probe_picks_the_most_specific_impl() {
        let v = vec![1i64, 2];
        let f = (&&&Probe::<Vec<i64>>::new())
            .dlbind_dims()
            .expect("Vec<i64>");
        assert_eq!(f(&v), &[1, 2]);
        let a = [3i64, 4, 5];
        let f = (&&&Probe::<[i64; 3]>::new())
            .dlbind_dims()
            .expect("[i64; 3]");
        assert_eq!(f(&a), &[3, 4, 5]);
        let b: Box<[i64]> = vec![7].into();
        assert!((&&&Probe::<Box<[i64]>>::new()).dlbind_dims().is_some());
        let _ = b;
        assert!((&&&Probe::<Vec<usize>>::new()).dlbind_dims().is_none());
        assert!((&&&Probe::<[u32; 2]>::new()).dlbind_dims().is_none());
    }

    #[test]
    fn extent_probe_skips_only_types_that_vouch() {
        struct Checked;
        struct Vouched;
        // SAFETY: test type, never exported.
        unsafe impl UncheckedExtent for Vouched {}
        assert!(!(&&&Probe::<Checked>::new()).dlbind_trusted());
        assert!((&&&Probe::<Vouched>::new()).dlbind_trusted());
    }

    #[test]
    fn constructor_probe_without_impl_is_none() {
        #[pyclass(crate = "pyo3")]
        struct NoCtor;
        assert!((&&&Probe::<NoCtor>::new()).dlbind_constructor().is_none());

        #[pyclass(crate = "pyo3")]
        struct WithCtor;
        impl FromDLPack for WithCtor {
            fn from_imported(_py: Python<'_>, _t: ImportedTensor) -> PyResult<Self> {
                Ok(WithCtor)
            }
        }
        assert!((&&&Probe::<WithCtor>::new()).dlbind_constructor().is_some());
    }
}
