//! What `#[derive(FromDLPack)]` expands to (named through `::dlbind::__private::derived`): the
//! checks a derived type's import makes against what its fields can hold, and the conversions
//! of the imported shape, strides and read-only flag into the field types.
//!
//! The derive builds the value from any import (a capsule or an exchange table's owning export,
//! a view of numpy's header or of a lending table, a view of an object of the same type) through
//! these, so that every path checks the same things: the dtype a fixed-dtype type exports, the
//! contiguity a type without a strides field assumes, the CPU a type without a device field
//! reports, and the writability a type that never exports read-only memory promises.

use pyo3::prelude::*;

use crate::device::Device;
use crate::dtype::describe;
use crate::error::DlpackError;
use crate::ffi::DLDataType;
use crate::layout::is_c_contiguous;
use crate::__private::DimValue;
use crate::spec::errors::FailureKind;

/// What a derived type's fields can hold, from its `#[dlpack(...)]` roles (constants in the
/// expansion, so the checks that do not apply compile away).
#[derive(Debug, Clone, Copy)]
pub struct Want {
    /// The type's name, for messages.
    pub name: &'static str,
    /// The struct-level `#[dlpack(dtype = "...")]`, when the dtype is fixed.
    pub dtype: Option<DLDataType>,
    /// Whether the type has a strides field (else the tensor must be C-contiguous).
    pub strided: bool,
    /// Whether the type has a device field (else the tensor must be on the CPU).
    pub any_device: bool,
    /// Whether the type can say "read-only" (a readonly field, or `#[dlpack(readonly)]`).
    pub readonly_ok: bool,
}

fn refused(kind: FailureKind, msg: String) -> PyErr {
    DlpackError::new(kind, msg).into()
}

/// Whether a tensor with these properties fits the type: `Ok(())`, or the error saying why not
/// (the exception the spec maps its failure to).
#[inline(always)]
pub fn check(
    want: &Want,
    dtype: DLDataType,
    shape: &[i64],
    strides: &[i64],
    device: Device,
    readonly: bool,
) -> PyResult<()> {
    if let Some(d) = want.dtype
        && d != dtype
    {
        return Err(refused(
            FailureKind::UnsupportedDtype,
            format!(
                "{}: the tensor's dtype is {}, not {}",
                want.name,
                describe(dtype),
                describe(d)
            ),
        ));
    }
    if !want.strided && !is_c_contiguous(shape, strides) {
        return Err(refused(
            FailureKind::UnsupportedLayout,
            format!(
                "{} has no strides field, so the tensor must be C-contiguous (copy=True gives a \
                 contiguous copy)",
                want.name
            ),
        ));
    }
    if !want.any_device && device != Device::CPU {
        return Err(refused(
            FailureKind::UnsupportedDevice,
            format!(
                "{} has no device field, so the tensor must be on the CPU, not {device}",
                want.name
            ),
        ));
    }
    if !want.readonly_ok && readonly {
        return Err(refused(
            FailureKind::UnsupportedLayout,
            format!(
                "{} exports its data as writable and has no readonly field: it cannot hold \
                 read-only memory (copy=True gives a writable copy)",
                want.name
            ),
        ));
    }
    Ok(())
}

mod sealed {
    /// Only dlbind implements [`super::DimsField`]: the derived import trusts
    /// [`super::DimsField::IN_PLACE`] and `write_in_place` to initialise the field (issue 50).
    pub trait Sealed {}
    impl<T: crate::__private::DimValue> Sealed for Vec<T> {}
    impl<T: crate::__private::DimValue> Sealed for Box<[T]> {}
    impl<T: crate::__private::DimValue + Default, const N: usize> Sealed for [T; N] {}
    impl Sealed for crate::dims::Dims {}
}

/// A shape or strides field's type, built from the imported values. Sealed: the four kinds
/// below are all (a wrong `IN_PLACE` or `write_in_place` would leave a field uninitialised).
#[diagnostic::on_unimplemented(
    message = "`#[derive(FromDLPack)]` cannot build a `{Self}` shape or strides field",
    label = "use `dlbind::Dims`, or a `Vec<_>`, `Box<[_]>` or `[_; N]` of an integer type",
    note = "or write `impl FromDLPack` by hand"
)]
pub trait DimsField: Sized + Clone + sealed::Sealed {
    /// The field's value, or `None` when the values do not fit it (rank, range).
    fn from_dims(d: &[i64]) -> Option<Self>;
    /// Whether [`from_dims`](Self::from_dims) never fails: the in-place import then writes the
    /// field where it lives ([`write_in_place`](Self::write_in_place)) instead of building it
    /// first and moving it in (`Dims`: the inline array is not built on the stack and copied).
    const IN_PLACE: bool = false;
    /// Writes `from_dims(d)`'s value to `dst`; called only when [`IN_PLACE`](Self::IN_PLACE).
    ///
    /// # Safety
    /// `dst` is valid for writes of a `Self`.
    #[inline(always)]
    unsafe fn write_in_place(dst: *mut Self, d: &[i64]) {
        let v = Self::from_dims(d).expect("DimsField::IN_PLACE types always convert");
        // SAFETY: caller contract.
        unsafe { dst.write(v) }
    }
    /// Writes a clone of `src` to `dst` (the same-type view's fields).
    ///
    /// # Safety
    /// `dst` is valid for writes of a `Self` and does not overlap `src`.
    #[inline(always)]
    unsafe fn clone_to(src: &Self, dst: *mut Self) {
        // SAFETY: caller contract.
        unsafe { dst.write(src.clone()) }
    }
    /// Whether dropping the value would free nothing (the derived direct release then skips
    /// the drop: [`Released::Nothing`](crate::cpython::freelist::Released::Nothing)).
    fn owns_nothing(&self) -> bool;
}

impl<T: DimValue> DimsField for Vec<T> {
    #[inline(always)]
    fn from_dims(d: &[i64]) -> Option<Self> {
        d.iter().map(|&v| T::from_dim(v)).collect()
    }
    #[inline(always)]
    fn owns_nothing(&self) -> bool {
        self.capacity() == 0
    }
}

impl<T: DimValue> DimsField for Box<[T]> {
    #[inline(always)]
    fn from_dims(d: &[i64]) -> Option<Self> {
        d.iter().map(|&v| T::from_dim(v)).collect()
    }
    #[inline(always)]
    fn owns_nothing(&self) -> bool {
        self.is_empty()
    }
}

impl<T: DimValue + Default, const N: usize> DimsField for [T; N] {
    #[inline(always)]
    fn from_dims(d: &[i64]) -> Option<Self> {
        if d.len() != N {
            return None;
        }
        let mut out = [T::default(); N];
        for (o, &v) in out.iter_mut().zip(d) {
            *o = T::from_dim(v)?;
        }
        Some(out)
    }
    #[inline(always)]
    fn owns_nothing(&self) -> bool {
        true
    }
}

impl DimsField for crate::dims::Dims {
    #[inline(always)]
    fn from_dims(d: &[i64]) -> Option<Self> {
        Some(crate::dims::Dims::from_slice(d))
    }
    const IN_PLACE: bool = true;
    #[inline(always)]
    unsafe fn write_in_place(dst: *mut Self, d: &[i64]) {
        // SAFETY: caller contract.
        unsafe { crate::dims::Dims::write_from_slice(dst, d) }
    }
    #[inline(always)]
    unsafe fn clone_to(src: &Self, dst: *mut Self) {
        // SAFETY: caller contract.
        unsafe { src.clone_to(dst) }
    }
    #[inline(always)]
    fn owns_nothing(&self) -> bool {
        self.is_inline()
    }
}

/// What the derived direct release says of a value whose buffer gave its Python reference back:
/// nothing left to drop when the buffer and every dims field own nothing.
#[inline(always)]
pub fn released(
    buffer_owns_nothing: bool,
    dims_own_nothing: bool,
) -> crate::cpython::freelist::Released {
    if buffer_owns_nothing && dims_own_nothing {
        crate::cpython::freelist::Released::Nothing
    } else {
        crate::cpython::freelist::Released::Drop
    }
}

/// The shape (`what` = "shape") or strides field's value, or the error naming the type.
#[inline(always)]
pub fn dims<F: DimsField>(want: &Want, what: &str, d: &[i64]) -> PyResult<F> {
    F::from_dims(d).ok_or_else(|| {
        refused(
            FailureKind::UnsupportedLayout,
            format!(
                "{}: the tensor's {what} {d:?} does not fit the {what} field ({})",
                want.name,
                std::any::type_name::<F>()
            ),
        )
    })
}
