//! `ndarray` views of an [`ImportedTensor`] (feature `ndarray`).

use ndarray::{ArrayViewD, ArrayViewMutD, Axis, IxDyn, ShapeBuilder};

use super::tensor::ImportedTensor;
use crate::error::DlpackError;
use crate::spec::elements::DLPackElement;
use crate::spec::errors::FailureKind;

/// Pointer to the lowest-addressed element, absolute strides, and the axes to invert, for a
/// tensor with elements. Dims of size <= 1 get stride 0 and are never inverted: their stride is
/// never used to address anything, and validation lets it be any `i64` (`|i64::MIN|` would be
/// a negative `isize` stride for ndarray).
fn plan<T>(t: &ImportedTensor) -> (Vec<usize>, Vec<usize>, *mut T, Vec<usize>) {
    let shape: Vec<usize> = t.shape().iter().map(|&d| d as usize).collect();
    let mut strides = Vec::with_capacity(shape.len());
    let mut inverted = Vec::new();
    let mut p = t.typed_ptr::<T>();
    for (i, (&s, &n)) in t.strides().iter().zip(&shape).enumerate() {
        if n <= 1 {
            strides.push(0);
            continue;
        }
        if s < 0 {
            // Element j of this axis sits at p + j*s; start at the last one and walk up.
            p = p.wrapping_offset(s as isize * (n as isize - 1));
            inverted.push(i);
        }
        strides.push(s.unsigned_abs() as usize);
    }
    (shape, strides, p, inverted)
}

/// Whether two distinct indices may address the same element (sufficient test, not
/// necessary): ignoring dims of size <= 1 and taking the others by increasing `|stride|`, each
/// `|stride|` must exceed the extent `sum((n - 1) * |stride|)` of the smaller ones. Zero strides
/// on dims > 1 fail it too. Meaningful for tensors with elements only.
pub(super) fn strides_may_alias(shape: &[i64], strides: &[i64]) -> bool {
    let mut dims: Vec<(u64, u64)> = shape
        .iter()
        .zip(strides)
        .filter(|&(&n, _)| n > 1)
        .map(|(&n, &s)| (s.unsigned_abs(), n as u64))
        .collect();
    dims.sort_unstable();
    let mut extent = 0u64;
    for (s, n) in dims {
        if s <= extent {
            return true;
        }
        // Saturating: a saturated extent only makes the test refuse more.
        extent = extent.saturating_add((n - 1).saturating_mul(s));
    }
    false
}

fn empty_shape_error(what: &str, e: ndarray::ShapeError) -> DlpackError {
    DlpackError::new(
        FailureKind::UnsupportedLayout,
        format!("{what}: shape not representable by ndarray: {e}"),
    )
}

// Said outright: the automatic mark would read "crate features `ndarray`" (its module's
// condition joined with the hidden `test-util` one of `import`; lib.rs, decision 0026).
#[cfg_attr(docsrs, doc(cfg(feature = "ndarray")))]
impl ImportedTensor {
    /// An `ndarray` view (dtype `T`, host memory); negative, zero and size-1 strides are
    /// supported. `bool` elements are not lent (Python code may store any byte in the
    /// producer's memory while the view lives): `as_ndarray::<u8>()` reads their bytes,
    /// [`Self::to_vec`] or `adapters::ndarray::to_array` copy them, checking each byte.
    pub fn as_ndarray<T: DLPackElement>(&self) -> Result<ArrayViewD<'_, T>, DlpackError> {
        self.check_typed::<T>("as_ndarray")?;
        if self.numel() == 0 {
            // Strides of empty tensors are not validated: none is passed on (C-contiguous
            // view of an empty slice).
            let shape: Vec<usize> = self.shape().iter().map(|&d| d as usize).collect();
            return ArrayViewD::from_shape(IxDyn(&shape), &[])
                .map_err(|e| empty_shape_error("as_ndarray", e));
        }
        if !(self.data as usize).is_multiple_of(std::mem::align_of::<T>()) {
            return Err(DlpackError::new(
                FailureKind::UnsupportedLayout,
                "as_ndarray: data is not aligned",
            ));
        }
        let (shape, strides, p, inverted) = plan::<T>(self);
        // SAFETY: `p` is the lowest-addressed element of the producer's layout (validated at
        // import: the span fits isize::MAX bytes) and every element reached with the
        // non-negative strides from it is an element of the tensor, readable host memory
        // alive for `'_`.
        let mut v = unsafe {
            ArrayViewD::from_shape_ptr(IxDyn(&shape).strides(IxDyn(&strides)), p as *const T)
        };
        for ax in inverted {
            v.invert_axis(Axis(ax));
        }
        Ok(v)
    }

    /// A mutable `ndarray` view. Refused for read-only tensors and for layouts where two
    /// indices may share memory (zero strides on dims > 1, or any overlap: each `|stride|`,
    /// by increasing size, must exceed the extent of the smaller ones; dims of size 1 aside).
    ///
    /// # Safety
    /// The elements are the producer's memory, which more than this handle may reach: another
    /// import of the same object (two `from_dlpack` calls on one numpy array give two handles to
    /// the same bytes), the producer itself, Python code. While the result lives nothing else may
    /// read or write them (Rust's rule for `&mut`): no other handle of the same producer hands
    /// out a slice or view of them, and no Python code touches the array (rust-numpy's
    /// `as_slice_mut` asks the same).
    pub unsafe fn as_ndarray_mut<T: DLPackElement>(
        &mut self,
    ) -> Result<ArrayViewMutD<'_, T>, DlpackError> {
        if self.readonly {
            return Err(DlpackError::new(
                FailureKind::UnsupportedLayout,
                "as_ndarray_mut: tensor is read-only",
            ));
        }
        self.check_typed::<T>("as_ndarray_mut")?;
        if self.numel() == 0 {
            // As in `as_ndarray`: nothing to alias, strides not passed on.
            let shape: Vec<usize> = self.shape().iter().map(|&d| d as usize).collect();
            return ArrayViewMutD::from_shape(IxDyn(&shape), &mut [])
                .map_err(|e| empty_shape_error("as_ndarray_mut", e));
        }
        if self
            .shape()
            .iter()
            .zip(self.strides())
            .any(|(&n, &s)| n > 1 && s == 0)
        {
            return Err(DlpackError::new(
                FailureKind::UnsupportedLayout,
                "as_ndarray_mut: broadcast (zero) strides alias",
            ));
        }
        if strides_may_alias(self.shape(), self.strides()) {
            return Err(DlpackError::new(
                FailureKind::UnsupportedLayout,
                format!(
                    "as_ndarray_mut: strides {:?} for shape {:?} overlap (distinct indices may share an element)",
                    self.strides(),
                    self.shape()
                ),
            ));
        }
        if !(self.data as usize).is_multiple_of(std::mem::align_of::<T>()) {
            return Err(DlpackError::new(
                FailureKind::UnsupportedLayout,
                "as_ndarray_mut: data is not aligned",
            ));
        }
        let (shape, strides, p, inverted) = plan::<T>(self);
        // SAFETY: as for `as_ndarray`, plus exclusivity (`&mut self`), writability (not
        // read-only) and no aliasing (`strides_may_alias` is false: distinct indices address
        // distinct elements).
        let mut v =
            unsafe { ArrayViewMutD::from_shape_ptr(IxDyn(&shape).strides(IxDyn(&strides)), p) };
        for ax in inverted {
            v.invert_axis(Axis(ax));
        }
        Ok(v)
    }
}
