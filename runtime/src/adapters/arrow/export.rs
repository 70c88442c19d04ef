//! Export: an arrow array as a DLPack tensor ([`ArrowTensor`]): primitive arrays, nested
//! fixed-size lists and the `arrow.fixed_shape_tensor` extension type, viewed in place or copied.

use std::ffi::c_void;

use arrow_array::types::ArrowPrimitiveType;
use arrow_array::{Array, ArrayRef, BooleanArray, FixedSizeListArray, PrimitiveArray, make_array};
use arrow_buffer::ScalarBuffer;
use arrow_schema::{DataType, Field};

use crate::device::Device;
use crate::export::DLPackSource;
use crate::ffi::DLDataType;
use crate::layout::c_strides;
use crate::spec::elements::DLPackElement;
use crate::spec::errors::FailureKind;
use crate::storage::Buffer;

use super::metadata::{FIXED_SHAPE_TENSOR, TensorMetadata};
use super::{Result, checked_product, dl_dtype_of, err, no_panic, unsupported_arrow_type};

/// An arrow array seen as a DLPack tensor: host memory, element strides, kept alive by the
/// arrow buffer it views (or a copy it owns).
///
/// Use it directly as a [`DLPackSource`], or move its parts into a `#[derive(DLPackExport)]`
/// type: [`ArrowTensor::into_buffer`] for the `#[dlpack(data)]` [`Buffer`], with
/// [`dtype`](Self::dtype), [`shape`](Self::shape), [`strides`](Self::strides) and
/// [`readonly`](Self::readonly) for the other fields.
#[derive(Debug)]
pub struct ArrowTensor {
    buffer: Buffer,
    /// Bytes readable from the buffer's pointer on (for the export span check).
    bytes: usize,
    dtype: DLDataType,
    shape: Vec<i64>,
    strides: Vec<i64>,
    readonly: bool,
    copied: bool,
    /// Names of the dimensions after the outer one (`arrow.fixed_shape_tensor`'s `dim_names`).
    dim_names: Option<Vec<String>>,
}

/// The leaf values of an array: a primitive array, possibly below nested fixed-size lists.
struct Flat {
    /// The leaf array (already sliced to the elements the outer array addresses).
    leaf: ArrayRef,
    /// Shape: the outer length, then each list size.
    shape: Vec<i64>,
    /// Whether any level has a null.
    has_nulls: bool,
}

/// Walks nested fixed-size lists down to their leaf values.
fn flatten(array: &dyn Array) -> Result<Flat> {
    let too_long = |n: usize| {
        err(
            FailureKind::UnsupportedLayout,
            format!("arrow: an array of {n} elements, wanted at most i64::MAX"),
        )
    };
    let mut shape = vec![i64::try_from(array.len()).map_err(|_| too_long(array.len()))?];
    let mut has_nulls = array.null_count() > 0;
    let mut cur: ArrayRef = make_array(array.to_data());
    while let DataType::FixedSizeList(_, size) = cur.data_type() {
        let list = cur
            .as_any()
            .downcast_ref::<FixedSizeListArray>()
            .ok_or_else(|| err(FailureKind::UnsupportedLayout, "malformed FixedSizeList"))?;
        shape.push(i64::from(*size));
        let values = list.values().clone();
        has_nulls |= values.null_count() > 0;
        cur = values;
    }
    // Lists of size 0 hold no values whatever their length, so the lengths multiply beyond any
    // memory: checked.
    let numel = checked_product(shape.iter().copied()).ok_or_else(|| {
        err(
            FailureKind::UnsupportedLayout,
            format!("arrow: nested list lengths {shape:?}, wanted a product within i64"),
        )
    })?;
    if i64::try_from(cur.len()) != Ok(numel) {
        return Err(err(
            FailureKind::MalformedTensor,
            format!(
                "arrow list values hold {} elements where the shape {shape:?} needs {numel}",
                cur.len()
            ),
        ));
    }
    Ok(Flat {
        leaf: cur,
        shape,
        has_nulls,
    })
}

/// Whether the element at flat index `i` (C order over `shape`) is null at any level of `array`.
fn null_at_any_level(array: &dyn Array, shape: &[i64], i: usize) -> bool {
    // Level k's element index is i / prod(shape[k+1..]).
    let mut cur: ArrayRef = make_array(array.to_data());
    let mut inner: usize = shape.iter().skip(1).map(|&d| d as usize).product();
    let mut k = 0;
    loop {
        let idx = i.checked_div(inner).unwrap_or(0);
        if cur.is_null(idx) {
            return true;
        }
        match cur.as_any().downcast_ref::<FixedSizeListArray>() {
            Some(list) => {
                k += 1;
                inner = if k + 1 < shape.len() {
                    shape[k + 1..].iter().map(|&d| d as usize).product()
                } else {
                    1
                };
                cur = list.values().clone();
            }
            None => return false,
        }
    }
}

impl ArrowTensor {
    /// Any supported array: a [`PrimitiveArray`] (1-D), a [`BooleanArray`] (1-D, `copy` only:
    /// its bits are unpacked to bytes), or nested [`FixedSizeListArray`]s of those (N-D, the
    /// outer length first). Zero-copy and read-only unless `copy`; with `copy`, a fresh
    /// writable C-contiguous buffer in which nulls are zeroes.
    ///
    /// Errors: `UnsupportedDtype` for other arrow types, `CopyRequired` for nulls or booleans
    /// without `copy`.
    pub fn from_array(array: &dyn Array, copy: bool) -> Result<ArrowTensor> {
        no_panic("ArrowTensor::from_array", || {
            Self::from_array_inner(array, copy)
        })
    }

    fn from_array_inner(array: &dyn Array, copy: bool) -> Result<ArrowTensor> {
        let flat = flatten(array)?;
        let leaf_type = flat.leaf.data_type().clone();
        let is_bool = leaf_type == DataType::Boolean;
        if !is_bool && dl_dtype_of(&leaf_type).is_none() {
            return Err(unsupported_arrow_type(&leaf_type));
        }
        if !copy {
            if flat.has_nulls {
                return Err(err(
                    FailureKind::CopyRequired,
                    format!(
                        "an array with nulls ({} at the outer level), wanted none (DLPack cannot \
                         carry them); pass copy=True to export a copy with zeroes in their place",
                        array.null_count()
                    ),
                ));
            }
            if is_bool {
                return Err(err(
                    FailureKind::CopyRequired,
                    "booleans (bit-packed in arrow), wanted one byte per element (DLPack bool); \
                     pass copy=True to export an unpacked copy",
                ));
            }
            return Ok(Self::view_of(&flat));
        }
        Self::copy_of(array, &flat)
    }

    /// The zero-copy view of a validated leaf with no nulls.
    fn view_of(flat: &Flat) -> ArrowTensor {
        let data = flat.leaf.to_data();
        let (dtype, elem) = dl_dtype_of(data.data_type()).expect("checked by the caller");
        // `to_data` of a primitive array has one buffer, already sliced to the array's values,
        // except for an offset kept in the ArrayData.
        let values = &data.buffers()[0];
        let offset = data.offset() * elem;
        let ptr = values.as_ptr().wrapping_add(offset) as *mut c_void;
        let bytes = values.len().saturating_sub(offset);
        let owner = values.clone();
        // SAFETY: `ptr` is element 0 of the array's values inside `values`, an immutable arrow
        // buffer whose memory stays valid while the clone `owner` (an `Arc` of the allocation)
        // lives; the buffer is marked read-only, so no consumer writes memory arrow shares.
        let buffer = unsafe {
            Buffer::from_owner(
                owner,
                ptr,
                crate::Extent::from_start(bytes),
                Device::CPU,
                true,
            )
        };
        ArrowTensor {
            buffer,
            bytes,
            dtype,
            strides: c_strides(&flat.shape),
            shape: flat.shape.clone(),
            readonly: true,
            copied: false,
            dim_names: None,
        }
    }

    /// A C-contiguous copy, nulls zeroed, booleans unpacked.
    fn copy_of(array: &dyn Array, flat: &Flat) -> Result<ArrowTensor> {
        let n = flat.leaf.len();
        let leaf = flat.leaf.to_data();
        let (dtype, elem) = match dl_dtype_of(leaf.data_type()) {
            Some(d) => d,
            None => (bool::DTYPE, 1),
        };
        let nbytes = n * elem;
        let mut buffer = Buffer::zeroed(nbytes)?;
        let out = buffer
            .owned_bytes_mut()
            .expect("Buffer::zeroed owns its memory");
        if dtype == bool::DTYPE {
            let bools = BooleanArray::from(leaf.clone());
            for (o, v) in out.iter_mut().zip(bools.values().iter()) {
                *o = u8::from(v);
            }
        } else {
            let values = &leaf.buffers()[0];
            let start = leaf.offset() * elem;
            out.copy_from_slice(&values.as_slice()[start..start + nbytes]);
        }
        if flat.has_nulls {
            for i in 0..n {
                if null_at_any_level(array, &flat.shape, i) {
                    out[i * elem..(i + 1) * elem].fill(0);
                }
            }
        }
        Ok(ArrowTensor {
            buffer,
            bytes: nbytes,
            dtype,
            strides: c_strides(&flat.shape),
            shape: flat.shape.clone(),
            readonly: false,
            copied: true,
            dim_names: None,
        })
    }

    /// A [`PrimitiveArray`] given by value: when no other array shares its buffer (and arrow
    /// allocated it), the tensor takes the buffer over and is **writable**; otherwise as
    /// [`from_array`](Self::from_array) (read-only view).
    pub fn from_primitive<T>(array: PrimitiveArray<T>, copy: bool) -> Result<ArrowTensor>
    where
        T: ArrowPrimitiveType,
        T::Native: DLPackElement,
    {
        no_panic("ArrowTensor::from_primitive", || {
            Self::from_primitive_inner(array, copy)
        })
    }

    fn from_primitive_inner<T>(array: PrimitiveArray<T>, copy: bool) -> Result<ArrowTensor>
    where
        T: ArrowPrimitiveType,
        T::Native: DLPackElement,
    {
        if copy || array.null_count() > 0 || dl_dtype_of(array.data_type()).is_none() {
            return Self::from_array(&array, copy);
        }
        let len = i64::try_from(array.len()).map_err(|_| {
            err(
                FailureKind::UnsupportedLayout,
                format!(
                    "arrow: an array of {} elements, wanted at most i64::MAX",
                    array.len()
                ),
            )
        })?;
        let (_, values, _) = array.into_parts();
        match values.into_inner().into_mutable() {
            Ok(mut owned) => {
                let ptr = owned.as_mut_ptr().cast::<c_void>();
                let bytes = owned.len();
                // SAFETY: `owned` is the only handle to a native arrow allocation (into_mutable
                // checked the count and the deallocation kind); a `MutableBuffer` never moves
                // its memory unless grown, and nobody can grow it once it is the owner.
                let buffer = unsafe {
                    Buffer::from_owner(
                        owned,
                        ptr,
                        crate::Extent::from_start(bytes),
                        Device::CPU,
                        false,
                    )
                };
                Ok(ArrowTensor {
                    buffer,
                    bytes,
                    dtype: T::Native::DTYPE,
                    shape: vec![len],
                    strides: vec![1],
                    readonly: false,
                    copied: false,
                    dim_names: None,
                })
            }
            Err(shared) => {
                let array = PrimitiveArray::<T>::new(ScalarBuffer::from(shared), None);
                Self::from_array_inner(&array, false)
            }
        }
    }

    /// An array of the `arrow.fixed_shape_tensor` extension type described by `field` (its
    /// `ARROW:extension:*` metadata): shape `(len, *logical_shape)`, the permutation turned into
    /// strides (logical dimension `i` is physical dimension `permutation[i]`). Without the
    /// extension metadata on `field`, as [`from_array`](Self::from_array).
    ///
    /// Errors: as [`from_array`](Self::from_array), plus `MalformedTensor` for metadata that
    /// does not match the storage (a list size other than the shape's product).
    pub fn from_field(field: &Field, array: &dyn Array, copy: bool) -> Result<ArrowTensor> {
        no_panic("ArrowTensor::from_field", || {
            Self::from_field_inner(field, array, copy)
        })
    }

    fn from_field_inner(field: &Field, array: &dyn Array, copy: bool) -> Result<ArrowTensor> {
        if field.extension_type_name() != Some(FIXED_SHAPE_TENSOR) {
            return Self::from_array_inner(array, copy);
        }
        let ext = TensorMetadata::parse(field.extension_type_metadata().unwrap_or(""))?;
        let physical: Vec<i64> = ext.shape.iter().map(|&d| d as i64).collect();
        // `None` (overflow) matches no list size.
        let list_size = checked_product(physical.iter().copied());
        match array.data_type() {
            DataType::FixedSizeList(_, size) if Some(i64::from(*size)) == list_size => {}
            other => {
                return Err(err(
                    FailureKind::MalformedTensor,
                    format!(
                        "arrow.fixed_shape_tensor of shape {physical:?} needs FixedSizeList storage \
                         of size {}, found {other}",
                        list_size.map_or_else(|| "beyond i64".to_owned(), |n| n.to_string())
                    ),
                ));
            }
        }
        let mut t = Self::from_array_inner(array, copy)?;
        // `t` is (len, list_size); reshape to (len, *physical) in C order, then permute.
        let len = t.shape[0];
        let mut shape = vec![len];
        shape.extend_from_slice(&physical);
        let strides = c_strides(&shape);
        let (mut lshape, mut lstrides) = (vec![len], vec![strides[0]]);
        match &ext.permutation {
            Some(perm) => {
                for &p in perm {
                    lshape.push(shape[p + 1]);
                    lstrides.push(strides[p + 1]);
                }
            }
            None => {
                lshape = shape;
                lstrides = strides;
            }
        }
        t.shape = lshape;
        t.strides = lstrides;
        t.dim_names = ext.logical_names();
        Ok(t)
    }

    /// The element dtype.
    pub fn dtype(&self) -> DLDataType {
        self.dtype
    }
    /// The shape.
    pub fn shape(&self) -> &[i64] {
        &self.shape
    }
    /// The strides, in elements.
    pub fn strides(&self) -> &[i64] {
        &self.strides
    }
    /// Whether consumers must not write (every view of shared arrow memory).
    pub fn readonly(&self) -> bool {
        self.readonly
    }
    /// The names of the dimensions after the outer one, in the tensor's (logical) order, from an
    /// `arrow.fixed_shape_tensor`'s `dim_names`.
    pub fn dim_names(&self) -> Option<&[String]> {
        self.dim_names.as_deref()
    }
    /// Whether the data is a copy (`copy = true`) rather than the arrow buffer itself.
    pub fn is_copied(&self) -> bool {
        self.copied
    }
    /// The memory: element 0 of the tensor, kept valid by the arrow buffer (or the copy)
    /// inside, for a `#[dlpack(data)]` field.
    pub fn into_buffer(self) -> Buffer {
        self.buffer
    }
    /// The tensor handed to Python once, with its flags: `IS_COPIED` when it is a copy
    /// ([`Self::is_copied`]), `READ_ONLY` when consumers must not write
    /// ([`crate::adapters::Handoff`]; a `#[pyclass]` holding [`Self::into_buffer`] lends the
    /// memory instead, without `IS_COPIED`).
    pub fn into_handoff(
        self,
    ) -> std::result::Result<crate::adapters::Handoff, crate::error::DlpackError> {
        let copied = self.copied;
        crate::adapters::Handoff::from_source(self, copied)
    }
}

// SAFETY: the buffer's pointer is element 0 of a C-contiguous or permuted-contiguous layout
// (non-negative strides) over `bytes` bytes it keeps valid (an arrow buffer clone or an owned
// copy); shape and strides are filled with exactly `ndim` values; the span is reported for the
// export check.
unsafe impl DLPackSource for ArrowTensor {
    fn dlpack_data_ptr(&self) -> *mut c_void {
        self.buffer.data_ptr()
    }
    fn dlpack_dtype(&self) -> DLDataType {
        self.dtype
    }
    fn dlpack_ndim(&self) -> usize {
        self.shape.len()
    }
    fn dlpack_fill_shape(&self, out: &mut [i64]) {
        out.copy_from_slice(&self.shape);
    }
    fn dlpack_fill_strides(&self, out: &mut [i64]) -> bool {
        out.copy_from_slice(&self.strides);
        true
    }
    fn dlpack_readonly(&self) -> bool {
        self.readonly
    }
    fn __dlbind_storage(&self) -> Option<(crate::Extent, Device)> {
        Some((crate::Extent::from_start(self.bytes), Device::CPU))
    }
}
