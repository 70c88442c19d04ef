//! `ndarray` both ways (feature `ndarray`, on by default: the same feature gives the derive its
//! `#[dlpack(array)]` fields and [`ImportedTensor::as_ndarray`]).
//!
//! **Export.** [`export`] turns an owned [`Array`], an [`ArcArray`] or a [`CowArray`] into a
//! DLPack tensor ([`ImportedTensor`], dlbind's owning handle, which any
//! [`FromDLPack`](crate::FromDLPack) type wraps without a copy and exports again through
//! `__dlpack__`). The array moves into the tensor and drops when its last consumer lets go; its
//! strides go out as they are (negative ones included). An `ArcArray` shared with other
//! clones is exported read-only (writing it would change what the clones see); a uniquely held
//! one, an `Array` and an owned `CowArray` are writable. A `CowArray` that borrows is copied
//! (the tensor cannot hold the borrow; `IS_COPIED` says so). [`export_view`] exports an
//! [`ArrayView`] of a frozen `#[pyclass]`'s data, read-only, kept alive by a strong reference
//! to the object.
//!
//! **Import.** [`view`] and [`view_mut`] (`unsafe`: the producer's memory may have other
//! handles) give an [`ArrayView`] / [`ArrayViewMut`] of a fixed
//! or dynamic dimension (`Ix1`..`Ix6`, `IxDyn`) that borrows the [`ImportedTensor`], so it
//! cannot outlive the producer's memory; [`NdTensor`] owns the tensor (the producer stays alive
//! as long as it does) and lends such views. Refused, with the spec's error: another dtype
//! (`UnsupportedDtype`), another rank (`UnsupportedLayout`), memory the host cannot read
//! (`UnsupportedDevice`), misaligned data (`UnsupportedLayout`), and for mutable views,
//! read-only data or strides under which two indices share an element (`UnsupportedLayout`).
//! Negative, zero and size-1 strides are honoured. Empty tensors (a 0 in any dimension) and 0-d
//! ones come and go like any other, for every element type.
//!
//! **`bool`** elements are never lent: a view checked when made could still see a byte other than
//! 0 or 1 that Python code, reached while the view lives, stores in the producer's memory (an
//! invalid `bool`, undefined behaviour). [`view`] refuses them (`UnsupportedDtype`); read their
//! bytes with `view::<u8, D>`, or copy them with [`to_array`], which checks each byte
//! (`MalformedTensor` for any other). [`NdTensor<bool, D>`](NdTensor) holds such a checked copy.
//!
//! ```
//! use dlbind::adapters::ndarray::{export, view};
//! use ndarray::{Array2, Ix2, s};
//!
//! let a = Array2::from_shape_fn((2, 3), |(i, j)| (10 * i + j) as f32);
//! let t = export(a.slice_move(s![.., ..;-1])).unwrap();   // negative strides, no copy
//! assert_eq!((t.shape(), t.strides()), (&[2i64, 3][..], &[3i64, -1][..]));
//! let v = view::<f32, Ix2>(&t).unwrap();
//! assert_eq!(v[[1, 0]], 12.0);
//! assert!(view::<f32, ndarray::Ix3>(&t).is_err());        // rank 2, not 3
//! assert!(view::<f64, Ix2>(&t).is_err());                 // float32, not float64
//! ```

/// The `ndarray` crate this adapter is built against (for a matching version).
pub use ::ndarray;

use std::ffi::c_void;
use std::marker::PhantomData;

use ndarray::{
    ArcArray, Array, ArrayBase, ArrayView, ArrayViewMut, CowArray, Dimension, IxDyn, RawData,
};

use crate::import::typed::lendable;
use pyo3::PyClass;
use pyo3::prelude::*;
use pyo3::pyclass::boolean_struct::True;

use super::rust_owned::{self, Layout};
use crate::error::DlpackError;
use crate::import::ImportedTensor;
use crate::spec::elements::DLPackElement;
use crate::spec::errors::FailureKind;

/// An `ndarray` array that [`export`] takes: [`Array`], [`ArcArray`] and [`CowArray`] of a
/// [`DLPackElement`] (sealed).
pub trait ExportArray: sealed::Sealed {
    /// The tensor over the array's memory.
    #[doc(hidden)]
    fn into_tensor(self) -> Result<ImportedTensor, DlpackError>;
}

mod sealed {
    pub trait Sealed {}
    impl<A, D: ndarray::Dimension> Sealed for ndarray::Array<A, D> {}
    impl<A, D: ndarray::Dimension> Sealed for ndarray::ArcArray<A, D> {}
    impl<A, D: ndarray::Dimension> Sealed for ndarray::CowArray<'_, A, D> {}
}

/// Shape and element strides of any array, as `i64`.
fn dims_of<S: RawData, D: Dimension>(a: &ArrayBase<S, D>) -> (Vec<i64>, Vec<i64>) {
    (
        a.shape().iter().map(|&n| n as i64).collect(),
        a.strides().iter().map(|&s| s as i64).collect(),
    )
}

/// The tensor over an array the tensor owns: `data` is element 0, taken by `ptr` from the
/// array in its final place.
///
/// # Safety
/// `ptr` returns element 0 of the array it is given (from `&mut`, so writes through it are
/// allowed unless `readonly`).
unsafe fn owned<O, S, D>(
    array: O,
    readonly: bool,
    copied: bool,
    get: impl FnOnce(&mut O) -> &mut ArrayBase<S, D>,
    ptr: impl FnOnce(&mut ArrayBase<S, D>) -> *mut c_void,
) -> Result<ImportedTensor, DlpackError>
where
    O: Send + 'static,
    S: RawData,
    S::Elem: DLPackElement,
    D: Dimension,
{
    // SAFETY: the array's elements live in its heap storage, which stays put and valid while
    // the array (the owner) lives and nobody else holds it (moved in); element 0 and the
    // array's own strides address exactly its elements. `readonly` is the caller's.
    unsafe {
        rust_owned::export(array, |o| {
            let a = get(o);
            let (shape, strides) = dims_of(a);
            let data = ptr(a);
            Ok(Layout {
                data,
                shape,
                strides: Some(strides),
                dtype: S::Elem::DTYPE,
                readonly,
                copied,
            })
        })
    }
}

impl<A: DLPackElement + Send + 'static, D: Dimension + 'static> ExportArray for Array<A, D> {
    fn into_tensor(self) -> Result<ImportedTensor, DlpackError> {
        // SAFETY: `as_mut_ptr` of the owned array is element 0, from `&mut`.
        unsafe { owned(self, false, false, |a| a, |a| a.as_mut_ptr().cast()) }
    }
}

impl<A: DLPackElement + Send + Sync + 'static, D: Dimension + 'static> ExportArray
    for ArcArray<A, D>
{
    fn into_tensor(self) -> Result<ImportedTensor, DlpackError> {
        // Held alone (and moved in here, so nobody can clone it any more): writable. Shared:
        // the other clones read the same memory (and copy it before they write it), so the
        // tensor is read-only.
        if self.is_unique() {
            // SAFETY: unique, so `as_mut_ptr` does not copy and gives element 0 from `&mut`.
            unsafe { owned(self, false, false, |a| a, |a| a.as_mut_ptr().cast()) }
        } else {
            // SAFETY: element 0; read-only, never written through.
            unsafe { owned(self, true, false, |a| a, |a| a.as_ptr() as *mut c_void) }
        }
    }
}

impl<A: DLPackElement + Clone + Send + 'static, D: Dimension + 'static> ExportArray
    for CowArray<'_, A, D>
{
    fn into_tensor(self) -> Result<ImportedTensor, DlpackError> {
        let copied = self.is_view();
        // An owned CowArray becomes its `Array` without a copy; a borrowing one is copied.
        let a: Array<A, D> = self.into_owned();
        // SAFETY: as for `Array`.
        unsafe { owned(a, false, copied, |a| a, |a| a.as_mut_ptr().cast()) }
    }
}

/// Exports an owned array as a DLPack tensor without a copy (a borrowing [`CowArray`] is
/// copied): see the [module docs](self) for which arrays are writable.
pub fn export<X: ExportArray>(array: X) -> Result<ImportedTensor, DlpackError> {
    array.into_tensor()
}

/// Exports a read-only [`ArrayView`] of data that `owner`, a frozen `#[pyclass]`, holds: `view`
/// picks the view from the object's value, and the tensor keeps a strong reference to the
/// object (the view's memory stays valid as long as the object does: a frozen class has no
/// `&mut self`, and a view that borrows from the value cannot come from behind a lock).
///
/// ```
/// use dlbind::adapters::ndarray::export_view;
/// use dlbind::prelude::*;
/// use ndarray::{Array2, s};
///
/// #[pyclass(frozen)]
/// struct Weights { w: Array2<f32> }
///
/// Python::initialize();
/// Python::attach(|py| {
///     let obj = Bound::new(py, Weights { w: Array2::ones((4, 3)) }).unwrap();
///     let t = export_view(&obj, |w| w.w.slice(s![1..3, ..])).unwrap();
///     assert_eq!(t.shape(), &[2, 3]);
///     assert!(t.readonly());
///     assert_eq!(obj.get_refcnt(), 2);   // the tensor holds the object
///     drop(t);
///     assert_eq!(obj.get_refcnt(), 1);
/// });
/// ```
pub fn export_view<C, A, D>(
    owner: &Bound<'_, C>,
    view: impl for<'a> FnOnce(&'a C) -> ArrayView<'a, A, D>,
) -> Result<ImportedTensor, DlpackError>
where
    C: PyClass<Frozen = True> + Sync,
    A: DLPackElement,
    D: Dimension,
{
    let v = view(owner.get());
    let (shape, strides) = dims_of(&v);
    let data = v.as_ptr() as *mut c_void;
    drop(v);
    let keep: Py<C> = owner.clone().unbind();
    // SAFETY: the view's elements belong to memory the object's value borrows from (or to
    // 'static memory): a frozen class's value is never mutably borrowed while the object
    // lives, and the tensor keeps the object alive. Read-only: other Rust code reads the value
    // through `&C`.
    unsafe {
        rust_owned::export(keep, move |_| {
            Ok(Layout {
                data,
                shape,
                strides: Some(strides),
                dtype: A::DTYPE,
                readonly: true,
                copied: false,
            })
        })
    }
}

/// The `D` in messages: `"Ix2"`, `"IxDyn"`.
fn dim_name<D: Dimension>() -> String {
    match D::NDIM {
        Some(n) => format!("Ix{n}"),
        None => "IxDyn".to_string(),
    }
}

/// Refuses a tensor whose rank is not `D`'s.
fn check_rank<D: Dimension>(t: &ImportedTensor) -> Result<(), DlpackError> {
    match D::NDIM {
        Some(n) if n != t.ndim() => Err(DlpackError::new(
            FailureKind::UnsupportedLayout,
            format!(
                "ndarray: the tensor has {} dimension(s) (shape {:?}), wanted {n} for ndarray::{}",
                t.ndim(),
                t.shape(),
                dim_name::<D>()
            ),
        )),
        _ => Ok(()),
    }
}

/// A shape error after the rank check (none is expected: the view's dims are the tensor's).
fn shape_error<D: Dimension>(e: ndarray::ShapeError) -> DlpackError {
    DlpackError::new(
        FailureKind::UnsupportedLayout,
        format!(
            "ndarray: {e}, wanted a shape for ndarray::{}",
            dim_name::<D>()
        ),
    )
}

/// The refusal of `bool` (and any element type not valid for every byte) in a view.
fn not_lendable<A: DLPackElement, D: Dimension>() -> DlpackError {
    DlpackError::new(
        FailureKind::UnsupportedDtype,
        format!(
            "ndarray: {} elements borrowed from the producer's memory, wanted an element type \
             valid for every byte (Python code may store any byte there while the view lives): \
             view them as u8 (view::<u8, ndarray::{}>), or copy them with to_array, which checks \
             each byte",
            A::NAME,
            dim_name::<D>()
        ),
    )
}

/// A read-only [`ArrayView`] of `t` with element type `A` and dimension `D`, borrowing `t`:
/// see the [module docs](self) for what is refused (`bool` among it: use [`to_array`]).
pub fn view<A: DLPackElement, D: Dimension>(
    t: &ImportedTensor,
) -> Result<ArrayView<'_, A, D>, DlpackError> {
    check_rank::<D>(t)?;
    if !lendable::<A>() {
        return Err(not_lendable::<A, D>());
    }
    t.as_ndarray::<A>()
        .map_err(|e| super::reword("ndarray", e))?
        .into_dimensionality::<D>()
        .map_err(shape_error::<D>)
}

/// A mutable [`ArrayViewMut`] of `t`, borrowing it exclusively: refused for read-only data
/// and for strides under which two indices share an element, besides what [`view`] refuses.
///
/// # Safety
/// The elements are the producer's memory, which more than this handle may reach: another
/// import of the same object (two `from_dlpack` calls on one numpy array give two handles to
/// the same bytes), the producer itself, Python code. While the result lives nothing else may
/// read or write them (Rust's rule for `&mut`): no other handle of the same producer hands
/// out a slice or view of them, and no Python code touches the array (rust-numpy's
/// `as_slice_mut` asks the same).
pub unsafe fn view_mut<A: DLPackElement, D: Dimension>(
    t: &mut ImportedTensor,
) -> Result<ArrayViewMut<'_, A, D>, DlpackError> {
    check_rank::<D>(t)?;
    if !lendable::<A>() {
        return Err(not_lendable::<A, D>());
    }
    // SAFETY: the caller's contract is `as_ndarray_mut`'s.
    unsafe { t.as_ndarray_mut::<A>() }
        .map_err(|e| super::reword("ndarray", e))?
        .into_dimensionality::<D>()
        .map_err(shape_error::<D>)
}

/// An owned [`Array`] of `t`'s elements in C order (a copy, from any layout), with element
/// type `A` and dimension `D`: refused as [`view`] refuses, but for `bool`, whose bytes are
/// checked as they are copied (`MalformedTensor` for a byte other than 0 and 1).
///
/// ```
/// use dlbind::adapters::ndarray::{export, to_array, view};
/// use ndarray::{Ix2, array};
///
/// let t = export(array![[true, false], [false, true]]).unwrap();
/// assert!(view::<bool, Ix2>(&t).is_err());               // bool is never lent
/// assert_eq!(view::<u8, Ix2>(&t).unwrap(), array![[1u8, 0], [0, 1]]);
/// assert_eq!(to_array::<bool, Ix2>(&t).unwrap(), array![[true, false], [false, true]]);
/// ```
pub fn to_array<A: DLPackElement, D: Dimension>(
    t: &ImportedTensor,
) -> Result<Array<A, D>, DlpackError> {
    check_rank::<D>(t)?;
    let shape: Vec<usize> = t.shape().iter().map(|&d| d as usize).collect();
    let v = t.to_vec::<A>().map_err(|e| super::reword("ndarray", e))?;
    Array::from_shape_vec(IxDyn(&shape), v)
        .map_err(shape_error::<D>)?
        .into_dimensionality::<D>()
        .map_err(shape_error::<D>)
}

/// An imported tensor checked once as an array of `A` with dimension `D`, owning the producer's
/// tensor (its memory stays valid as long as this value; the producer's deleter runs when it
/// drops), and lending [`ArrayView`]s / [`ArrayViewMut`]s of it.
///
/// `NdTensor<bool, D>` is the exception, since `bool` elements are never lent (see the
/// [module docs](self)): [`new`](Self::new) copies them once, checking each byte
/// ([`to_array`]), and [`view`](Self::view) lends that copy, which only this value reaches (a
/// snapshot: later writes to the producer's memory are not seen); [`view_mut`](Self::view_mut)
/// is refused, since its writes would not reach the producer (`NdTensor<u8, D>` writes the
/// bytes).
///
/// ```
/// use dlbind::adapters::ndarray::{NdTensor, export};
/// use ndarray::{Ix1, array};
///
/// let t = export(array![1.0f64, 2.0, 3.0]).unwrap();
/// let mut nd = NdTensor::<f64, Ix1>::new(t).unwrap();
/// // SAFETY: `nd` is the only handle of this memory (exported just above, imported once).
/// unsafe { nd.view_mut() }.unwrap().mapv_inplace(|x| x * 2.0);
/// assert_eq!(nd.view().unwrap().sum(), 12.0);
/// ```
pub struct NdTensor<A, D: Dimension = IxDyn> {
    tensor: ImportedTensor,
    /// The checked copy of elements that are not lent (`bool`); `None` for every other type.
    copy: Option<Array<A, D>>,
    _elem: PhantomData<fn() -> (A, D)>,
}

impl<A: DLPackElement, D: Dimension> NdTensor<A, D> {
    /// Checks `tensor` as an array of `A` with dimension `D` (what [`view`] refuses, this
    /// refuses; `bool` elements are copied once and checked instead, see the type's docs).
    pub fn new(tensor: ImportedTensor) -> Result<Self, DlpackError> {
        let copy = if lendable::<A>() {
            view::<A, D>(&tensor)?;
            None
        } else {
            Some(to_array::<A, D>(&tensor)?)
        };
        Ok(NdTensor {
            tensor,
            copy,
            _elem: PhantomData,
        })
    }

    /// Imports `obj` (anything [`from_dlpack`](crate::from_dlpack) takes) as an array of `A`
    /// with dimension `D`; the error is the spec's Python exception.
    pub fn from_py(obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(Self::new(crate::from_dlpack(obj, None, None)?)?)
    }

    /// A read-only view (for `bool`, of the checked copy [`new`](Self::new) made).
    pub fn view(&self) -> Result<ArrayView<'_, A, D>, DlpackError> {
        match &self.copy {
            Some(a) => Ok(a.view()),
            None => view::<A, D>(&self.tensor),
        }
    }

    /// A mutable view: refused for read-only data, for strides under which two indices share
    /// an element, and for `bool` (`NdTensor<u8, D>` writes those bytes).
    ///
    /// # Safety
    /// The elements are the producer's memory, which more than this handle may reach: another
    /// import of the same object (two `from_dlpack` calls on one numpy array give two handles to
    /// the same bytes), the producer itself, Python code. While the result lives nothing else may
    /// read or write them (Rust's rule for `&mut`): no other handle of the same producer hands
    /// out a slice or view of them, and no Python code touches the array (rust-numpy's
    /// `as_slice_mut` asks the same).
    pub unsafe fn view_mut(&mut self) -> Result<ArrayViewMut<'_, A, D>, DlpackError> {
        if self.copy.is_some() {
            return Err(not_lendable::<A, D>());
        }
        // SAFETY: the caller's contract.
        unsafe { view_mut::<A, D>(&mut self.tensor) }
    }

    /// The tensor (shape, strides, device, flags).
    pub fn tensor(&self) -> &ImportedTensor {
        &self.tensor
    }

    /// Gives the tensor back.
    pub fn into_tensor(self) -> ImportedTensor {
        self.tensor
    }
}

impl<A, D: Dimension> std::fmt::Debug for NdTensor<A, D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NdTensor")
            .field("dim", &dim_name::<D>())
            .field("tensor", &self.tensor)
            .finish()
    }
}
