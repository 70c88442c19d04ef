//! Import: a DLPack tensor as an arrow array over its memory ([`to_arrow`], [`to_primitive`],
//! [`to_fixed_shape_tensor`]), the [`ImportedTensor`] kept alive by the arrow buffer.

use std::ptr::NonNull;
use std::sync::Arc;

use arrow_array::types::ArrowPrimitiveType;
use arrow_array::{Array, ArrayRef, BooleanArray, FixedSizeListArray, PrimitiveArray, make_array};
use arrow_buffer::{BooleanBuffer, ScalarBuffer};
use arrow_data::ArrayData;
use arrow_schema::extension::{EXTENSION_TYPE_METADATA_KEY, EXTENSION_TYPE_NAME_KEY};
use arrow_schema::{DataType, Field};

use crate::dtype::describe;
use crate::import::ImportedTensor;
use crate::layout::c_strides;
use crate::spec::elements::DLPackElement;
use crate::spec::errors::FailureKind;

use super::metadata::{FIXED_SHAPE_TENSOR, TensorMetadata};
use super::{Result, arrow_type_of, checked_product, err, no_panic};

/// What an arrow buffer over an imported tensor keeps alive: the tensor (so the producer).
struct Keep(#[allow(dead_code)] ImportedTensor);

// SAFETY: arrow requires its owners to be unwind-safe when shared: `Keep` exposes nothing (no
// method reads it) and its only effect is the tensor's deleter on drop.
impl std::panic::RefUnwindSafe for Keep {}

/// Checks device and dtype, and makes the tensor C-contiguous and aligned (a copy when `copy`,
/// else an error). Returns the tensor to view and its arrow type.
fn prepare(t: ImportedTensor, copy: bool, c_order: bool) -> Result<(ImportedTensor, DataType)> {
    if !t.device().is_host_accessible() {
        return Err(err(
            FailureKind::UnsupportedDevice,
            format!(
                "tensor is on device {}, wanted host memory (where arrow arrays live)",
                t.device()
            ),
        ));
    }
    let ty = arrow_type_of(t.dtype()).ok_or_else(|| {
        err(
            FailureKind::UnsupportedDtype,
            format!(
                "tensor dtype is {}, which has no arrow equivalent, wanted an integer, float16/32/64 \
                 or bool",
                describe(t.dtype())
            ),
        )
    })?;
    if ty == DataType::Boolean && !copy {
        return Err(err(
            FailureKind::CopyRequired,
            "tensor dtype is bool (one byte per element), wanted bit-packed booleans (arrow's); \
             pass copy=True to import a packed copy",
        ));
    }
    let elem = t.dtype().bits as usize / 8;
    let aligned = t.numel() == 0 || (t.data_ptr() as usize).is_multiple_of(elem.max(1));
    let laid_out = if c_order {
        t.is_c_contiguous()
    } else {
        permuted_contiguous(t.shape(), t.strides()).is_some()
    };
    if laid_out && aligned {
        return Ok((t, ty));
    }
    if !copy {
        let what = if laid_out {
            format!("tensor data is not aligned to {elem} bytes, wanted aligned data for a view")
        } else {
            format!(
                "tensor layout (shape {:?}, strides {:?}), wanted {} for a view",
                t.shape(),
                t.strides(),
                if c_order {
                    "C-contiguous"
                } else {
                    "a permutation of a C-contiguous one"
                }
            )
        };
        return Err(err(
            FailureKind::CopyRequired,
            format!("{what}; pass copy=True"),
        ));
    }
    Ok((t.to_contiguous_copy()?, ty))
}

/// The arrow buffer over the tensor's `nbytes` bytes from element 0, keeping the tensor alive.
/// No bytes: arrow's own empty buffer (its pointer aligned for every arrow type; a tensor
/// without elements may have any pointer, NULL or dangling at 1, which arrow refuses as
/// misaligned for types wider than a byte), and the tensor is released now.
fn arrow_buffer(t: ImportedTensor, nbytes: usize) -> Result<arrow_buffer::Buffer> {
    if nbytes == 0 {
        return Ok(arrow_buffer::Buffer::from(
            arrow_buffer::MutableBuffer::new(0),
        ));
    }
    let Some(ptr) = NonNull::new(t.data_ptr().cast::<u8>()) else {
        return Err(err(
            FailureKind::MalformedTensor,
            format!("arrow: a NULL data pointer with {nbytes} bytes, wanted a host address"),
        ));
    };
    // SAFETY: `prepare` checked that the tensor is host memory laid out contiguously from
    // element 0 (no negative strides), so its `nbytes` bytes from `data_ptr` (non-NULL) are
    // readable for as long as the tensor lives, which the buffer's owner ensures.
    Ok(unsafe { arrow_buffer::Buffer::from_custom_allocation(ptr, nbytes, Arc::new(Keep(t))) })
}

/// The leaf values: a primitive array over the tensor's memory, or a packed boolean copy.
fn leaf_values(t: ImportedTensor, ty: &DataType) -> Result<ArrayRef> {
    let n = t.numel();
    if *ty == DataType::Boolean {
        // A checked copy (`bool` is never lent): a byte other than 0 and 1 is an error.
        let bools = t
            .to_vec::<bool>()
            .map_err(|e| super::super::reword("arrow", e))?;
        let bits = BooleanBuffer::from_iter(bools);
        return Ok(Arc::new(BooleanArray::new(bits, None)));
    }
    let elem = t.dtype().bits as usize / 8;
    let buf = arrow_buffer(t, n * elem)?;
    let data = ArrayData::builder(ty.clone())
        .len(n)
        .add_buffer(buf)
        .build()
        .map_err(|e| err(FailureKind::MalformedTensor, format!("arrow: {e}")))?;
    Ok(make_array(data))
}

/// Wraps `values` (the C-order elements of `shape`) into nested fixed-size lists of
/// `shape[1..]` (innermost last), the outer list `shape[0]` long. Each level's length is the
/// product of the dimensions outside it (not `values.len() / size`, which a 0 anywhere loses:
/// `(3, 0)` is 3 empty lists).
fn nest(mut values: ArrayRef, shape: &[i64]) -> Result<ArrayRef> {
    for k in (1..shape.len()).rev() {
        let d = shape[k];
        let size = i32::try_from(d).map_err(|_| {
            err(
                FailureKind::UnsupportedLayout,
                format!("arrow: dimension {d}, wanted at most an arrow FixedSizeList size (i32)"),
            )
        })?;
        let len = checked_product(shape[..k].iter().copied())
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| {
                err(
                    FailureKind::UnsupportedLayout,
                    format!("arrow: shape {shape:?}, wanted outer lengths within usize"),
                )
            })?;
        // Nullable items, as arrow's and pyarrow's list types default to (no value is null).
        let field = Arc::new(Field::new_list_field(values.data_type().clone(), true));
        let list = FixedSizeListArray::try_new_with_length(field, size, values, None, len)
            .map_err(|e| err(FailureKind::MalformedTensor, format!("arrow: {e}")))?;
        values = Arc::new(list);
    }
    Ok(values)
}

/// A DLPack tensor as an arrow array, zero-copy: 1-D → a [`PrimitiveArray`], N-D → nested
/// [`FixedSizeListArray`]s (the outer length first; 2-D is one list level). A `bool` tensor
/// becomes a [`BooleanArray`] (packed: `copy` only).
///
/// Errors: `UnsupportedDevice` (not host memory), `UnsupportedDtype` (no arrow type),
/// `UnsupportedLayout` (rank 0), `CopyRequired` (a non-C-contiguous or misaligned tensor, or
/// booleans, without `copy`).
pub fn to_arrow(tensor: ImportedTensor, copy: bool) -> Result<ArrayRef> {
    no_panic("to_arrow", || {
        if tensor.ndim() == 0 {
            return Err(err(
                FailureKind::UnsupportedLayout,
                "a 0-d tensor, wanted rank >= 1 (an arrow array; reshape it to 1-d)",
            ));
        }
        let (t, ty) = prepare(tensor, copy, true)?;
        let shape = t.shape().to_vec();
        let values = leaf_values(t, &ty)?;
        nest(values, &shape)
    })
}

/// A 1-D tensor of `T::Native` as a [`PrimitiveArray<T>`] over its memory (zero-copy).
///
/// Errors: as [`to_arrow`], plus `UnsupportedDtype` when the dtype is not `T`'s and
/// `UnsupportedLayout` when the tensor is not 1-D.
pub fn to_primitive<T>(tensor: ImportedTensor, copy: bool) -> Result<PrimitiveArray<T>>
where
    T: ArrowPrimitiveType,
    T::Native: DLPackElement,
{
    no_panic("to_primitive", || to_primitive_inner(tensor, copy))
}

fn to_primitive_inner<T>(tensor: ImportedTensor, copy: bool) -> Result<PrimitiveArray<T>>
where
    T: ArrowPrimitiveType,
    T::Native: DLPackElement,
{
    if tensor.dtype() != T::Native::DTYPE {
        return Err(err(
            FailureKind::UnsupportedDtype,
            format!(
                "tensor dtype is {}, wanted {} ({})",
                describe(tensor.dtype()),
                T::Native::NAME,
                T::DATA_TYPE
            ),
        ));
    }
    if tensor.ndim() != 1 {
        return Err(err(
            FailureKind::UnsupportedLayout,
            format!(
                "tensor has {} dimensions, wanted 1 (a PrimitiveArray is 1-D)",
                tensor.ndim()
            ),
        ));
    }
    let (t, _) = prepare(tensor, copy, true)?;
    let n = t.numel();
    let buf = arrow_buffer(t, n * std::mem::size_of::<T::Native>())?;
    // What `ScalarBuffer::new` would panic on: checked here (`prepare` and `arrow_buffer`
    // already give an aligned buffer of exactly `n` elements).
    if !(buf.as_ptr() as usize).is_multiple_of(std::mem::align_of::<T::Native>())
        || buf.len() != n * std::mem::size_of::<T::Native>()
    {
        return Err(err(
            FailureKind::InternalError,
            format!(
                "arrow: a buffer of {} bytes at {:p}, wanted {n} aligned {} elements",
                buf.len(),
                buf.as_ptr(),
                T::Native::NAME
            ),
        ));
    }
    PrimitiveArray::<T>::try_new(ScalarBuffer::new(buf, 0, n), None)
        .map_err(|e| err(FailureKind::MalformedTensor, format!("arrow: {e}")))
}

/// For logical `shape`/`strides` of a tensor's element dimensions, the physical (row-major)
/// order: `Some(order)` with `order[j]` the logical dimension stored `j`-th, when the strides
/// are a permutation of C-contiguous ones (size-1 dimensions anywhere).
pub(super) fn permuted_contiguous(shape: &[i64], strides: &[i64]) -> Option<Vec<usize>> {
    if shape.contains(&0) {
        return Some((0..shape.len()).collect());
    }
    let mut order: Vec<usize> = (0..shape.len()).collect();
    // Outermost first: larger strides first; size-1 dimensions keep their logical place.
    order.sort_by(|&a, &b| {
        let key = |i: usize| {
            if shape[i] == 1 {
                None
            } else {
                Some(strides[i])
            }
        };
        match (key(a), key(b)) {
            (Some(x), Some(y)) => y.cmp(&x).then(a.cmp(&b)),
            _ => a.cmp(&b),
        }
    });
    let physical: Vec<i64> = order.iter().map(|&i| shape[i]).collect();
    let want = c_strides(&physical);
    order
        .iter()
        .zip(&want)
        .all(|(&i, &w)| shape[i] == 1 || strides[i] == w)
        .then_some(order)
}

/// Whether a tensor of rank ≥ 2 is stored as `arrow.fixed_shape_tensor` stores it: the outer
/// dimension outermost and the element dimensions a permutation of a C-contiguous layout. An
/// empty tensor always is (its strides address nothing).
fn stored_in_order(t: &ImportedTensor) -> bool {
    let (shape, strides) = (t.shape(), t.strides());
    if t.numel() == 0 {
        return true;
    }
    let inner: i64 = shape[1..].iter().product();
    let elems_ok = permuted_contiguous(&shape[1..], &strides[1..]).is_some();
    elems_ok && (shape[0] <= 1 || strides[0] == inner)
}

/// A tensor of rank ≥ 2 as an `arrow.fixed_shape_tensor` array: element `i` is `tensor[i]`.
/// Returns the field (extension name and metadata: the physical shape and, when the element
/// dimensions are stored in another order, the permutation) and its `FixedSizeList` storage,
/// over the tensor's memory. The element dimensions may be any permutation of a C-contiguous
/// layout (a transposed numpy view exports as is); the outer dimension must be outermost.
///
/// Errors: as [`to_arrow`]; `UnsupportedLayout` for rank < 2.
pub fn to_fixed_shape_tensor(
    tensor: ImportedTensor,
    copy: bool,
) -> Result<(Field, FixedSizeListArray)> {
    no_panic("to_fixed_shape_tensor", || {
        to_fixed_shape_tensor_inner(tensor, copy)
    })
}

fn to_fixed_shape_tensor_inner(
    tensor: ImportedTensor,
    copy: bool,
) -> Result<(Field, FixedSizeListArray)> {
    if tensor.ndim() < 2 {
        return Err(err(
            FailureKind::UnsupportedLayout,
            format!(
                "a tensor of rank {}, wanted rank >= 2 for arrow.fixed_shape_tensor (outer \
                 length, then the element shape)",
                tensor.ndim()
            ),
        ));
    }
    // The outer dimension must be outermost and the element dimensions permuted-contiguous.
    let outer_ok = stored_in_order(&tensor);
    let tensor = if outer_ok || !copy {
        tensor
    } else {
        tensor.to_contiguous_copy()?
    };
    let (t, ty) = prepare(tensor, copy, false)?;
    // Checked on what is viewed (a producer's IS_COPIED flag says nothing about the layout).
    if !stored_in_order(&t) {
        return Err(err(
            FailureKind::CopyRequired,
            format!(
                "strides {:?} whose outer dimension is not outermost, wanted it outermost \
                 (arrow.fixed_shape_tensor stores elements one after another); pass copy=True",
                t.strides()
            ),
        ));
    }
    if ty == DataType::Boolean {
        return Err(err(
            FailureKind::UnsupportedDtype,
            "tensor dtype is bool, wanted another for arrow.fixed_shape_tensor (booleans are not \
             supported)",
        ));
    }
    let shape = t.shape().to_vec();
    // An empty tensor's strides address nothing (any values): its elements are in C order.
    let order = if t.numel() == 0 {
        (0..shape.len() - 1).collect()
    } else {
        permuted_contiguous(&shape[1..], &t.strides()[1..]).ok_or_else(|| {
            err(
                FailureKind::InternalError,
                format!(
                    "arrow: strides {:?}, wanted a permuted C-contiguous layout",
                    t.strides()
                ),
            )
        })?
    };
    let physical: Vec<usize> = order.iter().map(|&i| shape[i + 1] as usize).collect();
    // Logical dimension i is physical dimension perm[i].
    let mut perm = vec![0usize; order.len()];
    for (j, &i) in order.iter().enumerate() {
        perm[i] = j;
    }
    let identity = perm.iter().enumerate().all(|(i, &p)| i == p);
    let meta = TensorMetadata {
        shape: physical.clone(),
        dim_names: None,
        permutation: (!identity).then_some(perm),
    }
    .to_json();
    let list_size: i64 = physical.iter().map(|&d| d as i64).product();
    let values = leaf_values(t, &ty)?;
    let storage = nest(values, &[shape[0], list_size])?;
    let list = storage
        .as_any()
        .downcast_ref::<FixedSizeListArray>()
        .expect("nest builds a FixedSizeListArray")
        .clone();
    let field = Field::new("tensor", list.data_type().clone(), false).with_metadata(
        [
            (
                EXTENSION_TYPE_NAME_KEY.to_owned(),
                FIXED_SHAPE_TENSOR.to_owned(),
            ),
            (EXTENSION_TYPE_METADATA_KEY.to_owned(), meta),
        ]
        .into_iter()
        .collect::<std::collections::HashMap<String, String>>(),
    );
    Ok((field, list))
}
