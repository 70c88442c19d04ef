//! Everything the derive's expansion names (`::dlbind::__private::…`), and nothing a user should
//! call: not a public API, exempt from semver. Keeping the expansion to this one module lets
//! every other module change without breaking derived code (serde's `_serde::__private`,
//! thiserror's `private.rs`).

pub use core::ffi::c_void;

pub use pyo3;

pub use crate::device::Device;
pub use crate::exchange::probe;
pub use crate::exchange::{Constructor, ExchangeSource, exchange_api_capsule};
pub use crate::export::access::SourceAccess;
pub use crate::export::memo::{ExportMemo, FixedDims, FixedProbe, NotFixed};
pub use crate::export::method::{
    dlpack_descriptor, dlpack_device_descriptor, dlpack_device_method, dlpack_fastcall,
    dlpack_method, install_fast_dlpack,
};
pub use crate::export::{DLPackSource, DataSource};
pub use crate::extent::Extent;
pub use crate::ffi::{DLDataType, DLDeviceType};
pub use crate::gpu::StreamHandle;
pub use crate::spec::elements::DLPackElement;
pub use crate::writability::{ReadonlyField, Writability};

/// What `#[derive(FromDLPack)]` expands to: its checks and field conversions.
pub mod derived {
    pub use crate::bridges::PythonView;
    pub use crate::cpython::freelist::{ReleasePython, Released};
    pub use crate::import::class_kind::ClassKind;
    pub use crate::import::derived::{DimsField, Want, check, dims, released};
    pub use crate::import::{FromDLPack, ImportedTensor, Slot, Written};
    pub use crate::storage::Buffer;
}

/// The older array protocols' entry points, as the derive's `#[pymethods]` call them.
pub mod bridges {
    pub use crate::bridges::{
        array_interface, cuda_array_interface, getbuffer, releasebuffer, sycl_usm_array_interface,
    };
}

mod sealed {
    /// Only dlbind implements [`super::DimValue`]: the derive's `unsafe impl ExchangeSource`
    /// trusts [`super::DimValue::as_i64s`] to borrow exactly the field it was given.
    pub trait Sealed {}
}

pub use crate::export::DeclaresUncheckedExtent;

/// Implemented by `#[dlbind::pymethods]` on the user's own block of a derived type: the derive's
/// methods went into that block. Every `#[derive(DLPackExport)]` asserts it
/// ([`assert_merged_pymethods`]), so a derived class whose block is a plain `#[pymethods]` (or
/// that has no block) fails with this message, not with PyO3's E0119 or a missing `__dlpack__`
/// (decision 0025).
#[diagnostic::on_unimplemented(
    message = "`{Self}` derives `DLPackExport`, but none of its blocks is marked `#[dlbind::pymethods]`",
    label = "the derived `__dlpack__` and other methods are merged into that block",
    note = "write `#[dlbind::pymethods]` in place of `#[pymethods]` on `{Self}`'s block, or, if it has none, add `#[dlbind::pymethods] impl {Self} {{}}`"
)]
pub trait MergedPyMethods {}

pub use dlbind_macros::__merge_pymethods as merge_pymethods;

/// What every `#[derive(DLPackExport)]` expands to (see [`MergedPyMethods`]).
pub const fn assert_merged_pymethods<T: MergedPyMethods>() {}

/// Attribute keys kept for crates that wrote them, each a deprecated item that the derive names
/// at the key's span, so the user's crate gets a `deprecated` warning there.
pub mod deprecated {
    /// What `#[dlpack(merge_pymethods)]` expands to.
    #[deprecated(
        note = "`#[dlpack(merge_pymethods)]` is the default: every derived class's methods go into its `#[dlbind::pymethods]` block; remove the key"
    )]
    pub const fn merge_pymethods() {}
}

/// What `#[dlpack(unchecked_extent)]` expands to: a compile error unless `T` vouches for its
/// exports' layout with an `unsafe impl UncheckedExtent` (the attribute alone is safe to write
/// and so never skips the span check). The bound is the unsafe trait itself, not a safe trait
/// implemented for it (issue 50: a safe impl of such a hidden trait for the user's own type
/// would have passed; its message is `UncheckedExtent`'s).
pub const fn assert_unchecked_extent<T: crate::export::UncheckedExtent>() {}

/// Converts one shape/stride value of any integer type to the ABI's `i64`, and back (sealed:
/// implemented for the ten primitive integers).
pub trait DimValue: Copy + sealed::Sealed {
    /// Whether the values are the ABI's `i64` already ([`Self::as_i64s`] answers `Some`).
    const IS_I64: bool = false;
    /// The value as `i64` (wrapping for out-of-range `u64`/`usize`, which no real shape has).
    fn to_dim(self) -> i64;
    /// An imported `i64` value as this type, `None` when out of its range.
    fn from_dim(v: i64) -> Option<Self>;
    /// `s` itself as `&[i64]` when the values are `i64` (a field the C exchange table can lend
    /// without copying), else `None`.
    #[inline]
    fn as_i64s(s: &[Self]) -> Option<&[i64]> {
        let _ = s;
        None
    }
}

macro_rules! dim_value {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl DimValue for $t {
            #[inline]
            fn to_dim(self) -> i64 { self as i64 }
            #[inline]
            #[allow(irrefutable_let_patterns, clippy::useless_conversion)]
            fn from_dim(v: i64) -> Option<Self> { <$t>::try_from(v).ok() }
        }
    )*};
}
dim_value!(i8, i16, i32, isize, u8, u16, u32, u64, usize);

impl sealed::Sealed for i64 {}
impl DimValue for i64 {
    const IS_I64: bool = true;
    #[inline]
    fn to_dim(self) -> i64 {
        self
    }
    #[inline]
    fn from_dim(v: i64) -> Option<Self> {
        Some(v)
    }
    #[inline]
    fn as_i64s(s: &[Self]) -> Option<&[i64]> {
        Some(s)
    }
}

/// Whether the dims field that `f` borrows holds `i64` values (the exchange table's
/// `dltensor_from_py_object_no_sync` then lends it as it is). `f` is the derive's
/// `|s| &s.field[..]`: only its type is used.
#[inline(always)]
pub const fn dims_are_i64<S: ?Sized, T: DimValue>(f: fn(&S) -> &[T]) -> bool {
    let _ = f;
    T::IS_I64
}

/// A dims field borrowed as `&[i64]` when its values are `i64` ([`DimValue::as_i64s`]).
#[inline(always)]
pub fn borrowed_dims<T: DimValue>(s: &[T]) -> Option<&[i64]> {
    T::as_i64s(s)
}

/// The dtype of the elements of the data field's slice: the derive emits
/// `slice_dtype(&self.data[..])`, so the dtype is that of the elements the field holds (through
/// any alias), never one read off how the field's type is spelled (issue 50).
#[inline]
pub const fn slice_dtype<T: DLPackElement>(data: &[T]) -> DLDataType {
    let _ = data;
    T::DTYPE
}

/// The rank of a shape field: the derive emits `dims_len(&self.shape[..])`, the same borrow
/// [`fill_dims`] reads, through a call no trait in the user's scope can redirect (issue 50: a
/// method call `self.shape.len()` could resolve to a user's trait).
#[inline]
pub const fn dims_len<T: DimValue>(dims: &[T]) -> usize {
    dims.len()
}

/// Fills `out` from any integer slice (shape or strides fields).
///
/// Ranks 1 to 4 (nearly every export) are written with fixed-size stores: LLVM turns the
/// general loop into a call to `memcpy` (for `i64` fields), whose call and variable-length
/// stores cost more than the copy itself on the export path, depending on how the surrounding
/// code happens to be inlined.
#[inline]
pub fn fill_dims<T: DimValue>(src: &[T], out: &mut [i64]) {
    let n = out.len().min(src.len());
    match n {
        0 => {}
        1 => fill_fixed::<T, 1>(src, out),
        2 => fill_fixed::<T, 2>(src, out),
        3 => fill_fixed::<T, 3>(src, out),
        4 => fill_fixed::<T, 4>(src, out),
        _ => {
            for (o, &s) in out.iter_mut().zip(src) {
                *o = s.to_dim();
            }
        }
    }
}

/// The first `N` values of `src` into `out` (both hold at least `N`).
#[inline]
fn fill_fixed<T: DimValue, const N: usize>(src: &[T], out: &mut [i64]) {
    let (src, out) = (&src[..N], &mut out[..N]);
    for i in 0..N {
        out[i] = src[i].to_dim();
    }
}

/// Helpers for `#[dlpack(array)]` fields (`ndarray` owned arrays).
#[cfg(feature = "ndarray")]
pub mod nd {
    pub use ndarray;
    use ndarray::{ArrayBase, Data, Dimension};

    use super::c_void;
    use crate::ffi::DLDataType;
    use crate::spec::elements::DLPackElement;

    /// Address of element 0.
    #[inline]
    pub fn data_ptr<S: Data, D: Dimension>(a: &ArrayBase<S, D>) -> *mut c_void {
        a.as_ptr() as *mut c_void
    }
    /// The element dtype.
    #[inline]
    pub fn dtype<S: Data, D: Dimension>(_a: &ArrayBase<S, D>) -> DLDataType
    where
        S::Elem: DLPackElement,
    {
        <S::Elem as DLPackElement>::DTYPE
    }
    /// Number of dimensions.
    #[inline]
    pub fn ndim<S: Data, D: Dimension>(a: &ArrayBase<S, D>) -> usize {
        a.ndim()
    }
    /// Writes the shape.
    #[inline]
    pub fn fill_shape<S: Data, D: Dimension>(a: &ArrayBase<S, D>, out: &mut [i64]) {
        super::fill_dims(a.shape(), out)
    }
    /// Writes the strides (elements, any sign). Always returns `true`.
    #[inline]
    pub fn fill_strides<S: Data, D: Dimension>(a: &ArrayBase<S, D>, out: &mut [i64]) -> bool {
        super::fill_dims(a.strides(), out);
        true
    }
}

/// Implemented by every `#[pyclass]`: the derive's compile-time check. A type that is not a
/// `#[pyclass]` fails here, with this message. Frozen or not, both work: a
/// `#[pyclass(frozen)]` is the zero-cost path (an export keeps the object itself alive), and a
/// plain `#[pyclass]`'s exports each hold a shared borrow of the object
/// ([`SourceAccess::with_owner`]), so that its `&mut self` methods and setters, which could
/// reallocate or free the data an export points at, fail with PyO3's borrow error while any
/// export lives.
#[diagnostic::on_unimplemented(
    message = "`{Self}` must be a #[pyclass] to derive DLPackExport",
    label = "not a #[pyclass]",
    note = "add `#[pyclass]` above `#[derive(DLPackExport)]` (`#[pyclass(frozen)]` for exports that need no borrow of the object)"
)]
pub trait AssertPyClass {}
impl<T: pyo3::PyClass> AssertPyClass for T {}

/// Compile-time check used by the derive: `T` must be a `#[pyclass]`.
#[inline]
pub const fn assert_pyclass<T: AssertPyClass>() {}

#[cfg(test)]
mod tests {
    use super::fill_dims;

    #[test]
    fn fill_dims_copies_every_rank_and_converts() {
        for n in 0..=9usize {
            let src: Vec<u32> = (0..n as u32).map(|v| 10 * v + 1).collect();
            let mut out = vec![-7i64; n];
            fill_dims(&src, &mut out);
            let want: Vec<i64> = src.iter().map(|&v| i64::from(v)).collect();
            assert_eq!(out, want, "rank {n}");
            let src64: Vec<i64> = (0..n as i64).map(|v| -3 * v).collect();
            let mut out = vec![99i64; n];
            fill_dims(&src64, &mut out);
            assert_eq!(out, src64, "rank {n}, i64");
        }
        // Lengths that differ: only the common prefix is written.
        let mut out = [5i64; 4];
        fill_dims(&[1u8, 2], &mut out);
        assert_eq!(out, [1, 2, 5, 5]);
        let mut out = [5i64; 2];
        fill_dims(&[1i16, -2, 3], &mut out);
        assert_eq!(out, [1, -2]);
    }
}
