//! arrow-rs (feature `arrow`): arrow arrays as DLPack tensors and DLPack tensors as arrow
//! arrays, both without a copy.
//!
//! **Export** ([`ArrowTensor`]): a [`PrimitiveArray`] without nulls is a 1-D tensor, a
//! [`FixedSizeListArray`] of primitives (nested lists too) an N-D one, and the canonical
//! `arrow.fixed_shape_tensor` extension type an N-D tensor `(len, *logical_shape)` whose
//! `permutation` becomes strides. The tensor keeps the arrow buffer alive (an `Arc` clone) and
//! is read-only: arrow buffers are shared and immutable, except a [`PrimitiveArray`] given by
//! value whose buffer nothing else holds ([`ArrowTensor::from_primitive`]), exported writable.
//!
//! **Import** ([`to_arrow`], [`to_primitive`], [`to_fixed_shape_tensor`]): the arrow buffer is
//! [`arrow_buffer::Buffer::from_custom_allocation`] over the tensor's memory, with the
//! [`ImportedTensor`] (so the producer) kept alive until the last arrow buffer drops.
//!
//! Nothing is copied silently: nulls (arrow validity bitmaps, which DLPack cannot carry),
//! bit-packed booleans (DLPack `bool` is one byte per element), non-contiguous and misaligned
//! tensors are refused with a typed error unless `copy = true` is asked for. A copy zeroes the
//! elements under nulls (`0`, `0.0`, `false`) and unpacks or packs booleans.
//!
//! Empty arrays and tensors (a 0 in any dimension, list sizes of 0 included) go both ways for
//! every type; a 0-d tensor has no arrow form (`UnsupportedLayout`). No input makes arrow-rs
//! panic: what it would panic on is checked first (an empty buffer is arrow's own, aligned for
//! every type, never a dangling pointer; sizes are checked arithmetic), and a panic that still
//! came out of arrow-rs would be caught and returned as `InternalError`.

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::Arc;

use arrow_array::types::ArrowPrimitiveType;
use arrow_array::{Array, ArrayRef, BooleanArray, FixedSizeListArray, PrimitiveArray, make_array};
use arrow_buffer::{BooleanBuffer, ScalarBuffer};
use arrow_data::ArrayData;
use arrow_schema::extension::{EXTENSION_TYPE_METADATA_KEY, EXTENSION_TYPE_NAME_KEY};
use arrow_schema::{DataType, Field};

use crate::device::Device;
use crate::dtype::describe;
use crate::error::DlpackError;
use crate::export::DLPackSource;
use crate::ffi::DLDataType;
use crate::import::ImportedTensor;
use crate::layout::c_strides;
use crate::spec::elements::DLPackElement;
use crate::spec::errors::FailureKind;
use crate::storage::Buffer;

type Result<T> = std::result::Result<T, DlpackError>;

fn err(kind: FailureKind, msg: impl Into<String>) -> DlpackError {
    DlpackError::new(kind, msg.into())
}

/// Runs `f`, an entry point of this module, turning a panic (none is expected: the inputs
/// arrow-rs panics on are checked first) into an `InternalError` instead of unwinding into the
/// caller.
fn no_panic<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let msg = p
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Err(err(
            FailureKind::InternalError,
            format!("arrow: {what} panicked ({msg}), wanted an error"),
        ))
    })
}

/// The product of `dims`, or `None` when it overflows `i64`.
fn checked_product(dims: impl IntoIterator<Item = i64>) -> Option<i64> {
    dims.into_iter().try_fold(1i64, |n, d| n.checked_mul(d))
}

// ---------------------------------------------------------------------------------------------
// dtypes

/// The DLPack dtype and element bytes of an arrow primitive type dlbind can view in place.
fn dl_dtype_of(dt: &DataType) -> Option<(DLDataType, usize)> {
    Some(match dt {
        DataType::Int8 => (i8::DTYPE, 1),
        DataType::Int16 => (i16::DTYPE, 2),
        DataType::Int32 => (i32::DTYPE, 4),
        DataType::Int64 => (i64::DTYPE, 8),
        DataType::UInt8 => (u8::DTYPE, 1),
        DataType::UInt16 => (u16::DTYPE, 2),
        DataType::UInt32 => (u32::DTYPE, 4),
        DataType::UInt64 => (u64::DTYPE, 8),
        DataType::Float16 => (half::f16::DTYPE, 2),
        DataType::Float32 => (f32::DTYPE, 4),
        DataType::Float64 => (f64::DTYPE, 8),
        _ => return None,
    })
}

/// The arrow type of a DLPack dtype (`bool` → `Boolean`, stored bit-packed).
fn arrow_type_of(dtype: DLDataType) -> Option<DataType> {
    let table = [
        (i8::DTYPE, DataType::Int8),
        (i16::DTYPE, DataType::Int16),
        (i32::DTYPE, DataType::Int32),
        (i64::DTYPE, DataType::Int64),
        (u8::DTYPE, DataType::UInt8),
        (u16::DTYPE, DataType::UInt16),
        (u32::DTYPE, DataType::UInt32),
        (u64::DTYPE, DataType::UInt64),
        (half::f16::DTYPE, DataType::Float16),
        (f32::DTYPE, DataType::Float32),
        (f64::DTYPE, DataType::Float64),
        (bool::DTYPE, DataType::Boolean),
    ];
    table.into_iter().find(|(d, _)| *d == dtype).map(|(_, t)| t)
}

fn unsupported_arrow_type(dt: &DataType) -> DlpackError {
    err(
        FailureKind::UnsupportedDtype,
        format!(
            "arrow type {dt} has no DLPack equivalent (supported: Int8..Int64, UInt8..UInt64, \
             Float16, Float32, Float64, and Boolean with copy=True)"
        ),
    )
}

// ---------------------------------------------------------------------------------------------
// The fixed shape tensor extension type's metadata

/// The canonical extension name.
const FIXED_SHAPE_TENSOR: &str = "arrow.fixed_shape_tensor";

/// `ARROW:extension:metadata` of `arrow.fixed_shape_tensor`: a JSON object with `shape`
/// (physical, row-major), optional `dim_names` (of the physical dimensions) and optional
/// `permutation` (logical dimension `i` is physical dimension `permutation[i]`). Read and written
/// here (a few lines of JSON), not through arrow-schema's `canonical_extension_types`, whose
/// metadata writes `"dim_names": null` that its own reader then refuses (arrow-rs 60).
#[derive(Debug, Clone, PartialEq)]
struct TensorMetadata {
    shape: Vec<usize>,
    dim_names: Option<Vec<String>>,
    permutation: Option<Vec<usize>>,
}

fn bad_meta(msg: impl std::fmt::Display) -> DlpackError {
    err(
        FailureKind::MalformedTensor,
        format!("arrow.fixed_shape_tensor metadata: {msg}"),
    )
}

/// A JSON value, as much of JSON as the metadata uses.
#[derive(Debug)]
enum Json {
    Null,
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
    Bool,
}

struct JsonParser<'a> {
    s: &'a [u8],
    i: usize,
}

impl JsonParser<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }
    fn eat(&mut self, c: u8) -> Result<()> {
        self.ws();
        if self.s.get(self.i) == Some(&c) {
            self.i += 1;
            Ok(())
        } else {
            Err(bad_meta(format!(
                "expected '{}' at byte {}",
                c as char, self.i
            )))
        }
    }
    fn value(&mut self, depth: usize) -> Result<Json> {
        if depth > 16 {
            return Err(bad_meta("nested too deeply"));
        }
        self.ws();
        match self.s.get(self.i) {
            Some(b'{') => {
                self.i += 1;
                let mut items = Vec::new();
                self.ws();
                if self.s.get(self.i) == Some(&b'}') {
                    self.i += 1;
                    return Ok(Json::Obj(items));
                }
                loop {
                    self.ws();
                    let Json::Str(k) = self.value(depth + 1)? else {
                        return Err(bad_meta("an object key is not a string"));
                    };
                    self.eat(b':')?;
                    items.push((k, self.value(depth + 1)?));
                    self.ws();
                    match self.s.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b'}') => {
                            self.i += 1;
                            return Ok(Json::Obj(items));
                        }
                        _ => return Err(bad_meta("unterminated object")),
                    }
                }
            }
            Some(b'[') => {
                self.i += 1;
                let mut items = Vec::new();
                self.ws();
                if self.s.get(self.i) == Some(&b']') {
                    self.i += 1;
                    return Ok(Json::Arr(items));
                }
                loop {
                    items.push(self.value(depth + 1)?);
                    self.ws();
                    match self.s.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b']') => {
                            self.i += 1;
                            return Ok(Json::Arr(items));
                        }
                        _ => return Err(bad_meta("unterminated array")),
                    }
                }
            }
            Some(b'"') => {
                self.i += 1;
                let mut out = String::new();
                loop {
                    let rest = std::str::from_utf8(&self.s[self.i..])
                        .map_err(|_| bad_meta("not UTF-8"))?;
                    let mut chars = rest.char_indices();
                    match chars.next() {
                        None => return Err(bad_meta("unterminated string")),
                        Some((_, '"')) => {
                            self.i += 1;
                            return Ok(Json::Str(out));
                        }
                        Some((_, '\\')) => {
                            let (_, e) = chars.next().ok_or_else(|| bad_meta("bad escape"))?;
                            self.i += 2;
                            out.push(match e {
                                'n' => '\n',
                                't' => '\t',
                                'r' => '\r',
                                'b' => '\u{8}',
                                'f' => '\u{c}',
                                'u' => {
                                    let hex = rest.get(2..6).ok_or_else(|| bad_meta("bad \\u"))?;
                                    self.i += 4;
                                    u32::from_str_radix(hex, 16)
                                        .ok()
                                        .and_then(char::from_u32)
                                        .unwrap_or('\u{fffd}')
                                }
                                c => c,
                            });
                        }
                        Some((_, c)) => {
                            self.i += c.len_utf8();
                            out.push(c);
                        }
                    }
                }
            }
            Some(b'n') if self.s[self.i..].starts_with(b"null") => {
                self.i += 4;
                Ok(Json::Null)
            }
            Some(b't') if self.s[self.i..].starts_with(b"true") => {
                self.i += 4;
                Ok(Json::Bool)
            }
            Some(b'f') if self.s[self.i..].starts_with(b"false") => {
                self.i += 5;
                Ok(Json::Bool)
            }
            Some(c) if *c == b'-' || c.is_ascii_digit() => {
                let start = self.i;
                while self.i < self.s.len()
                    && matches!(
                        self.s[self.i],
                        b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'
                    )
                {
                    self.i += 1;
                }
                let text = std::str::from_utf8(&self.s[start..self.i]).expect("ASCII");
                text.parse()
                    .map(Json::Num)
                    .map_err(|_| bad_meta(format!("bad number {text}")))
            }
            _ => Err(bad_meta(format!("unexpected input at byte {}", self.i))),
        }
    }
}

fn json_usizes(v: &Json, what: &str) -> Result<Vec<usize>> {
    let Json::Arr(items) = v else {
        return Err(bad_meta(format!("{what} is not an array")));
    };
    items
        .iter()
        .map(|x| match x {
            Json::Num(n) if *n >= 0.0 && n.fract() == 0.0 && *n < 9.0e15 => Ok(*n as usize),
            _ => Err(bad_meta(format!(
                "{what} holds {x:?}, not a non-negative integer"
            ))),
        })
        .collect()
}

impl TensorMetadata {
    fn parse(text: &str) -> Result<TensorMetadata> {
        let mut p = JsonParser {
            s: text.as_bytes(),
            i: 0,
        };
        let Json::Obj(items) = p.value(0)? else {
            return Err(bad_meta("not a JSON object"));
        };
        let mut meta = TensorMetadata {
            shape: Vec::new(),
            dim_names: None,
            permutation: None,
        };
        let mut has_shape = false;
        for (k, v) in &items {
            match (k.as_str(), v) {
                (_, Json::Null) => {}
                ("shape", v) => {
                    meta.shape = json_usizes(v, "shape")?;
                    has_shape = true;
                }
                ("permutation", v) => meta.permutation = Some(json_usizes(v, "permutation")?),
                ("dim_names", Json::Arr(names)) => {
                    let names = names
                        .iter()
                        .map(|n| match n {
                            Json::Str(s) => Ok(s.clone()),
                            _ => Err(bad_meta("dim_names holds a non-string")),
                        })
                        .collect::<Result<Vec<_>>>()?;
                    meta.dim_names = Some(names);
                }
                ("dim_names", _) => return Err(bad_meta("dim_names is not an array")),
                _ => {}
            }
        }
        if !has_shape {
            return Err(bad_meta("no shape"));
        }
        let n = meta.shape.len();
        if let Some(perm) = &meta.permutation {
            let mut seen = vec![false; n];
            if perm.len() != n
                || perm
                    .iter()
                    .any(|&p| p >= n || std::mem::replace(&mut seen[p], true))
            {
                return Err(bad_meta(format!(
                    "permutation {perm:?} is not a permutation of 0..{n}"
                )));
            }
        }
        if meta.dim_names.as_ref().is_some_and(|d| d.len() != n) {
            return Err(bad_meta("dim_names and shape differ in length"));
        }
        Ok(meta)
    }

    fn to_json(&self) -> String {
        let list = |v: &[usize]| v.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
        let mut s = format!("{{\"shape\":[{}]", list(&self.shape));
        if let Some(p) = &self.permutation {
            s.push_str(&format!(",\"permutation\":[{}]", list(p)));
        }
        s.push('}');
        s
    }

    /// The names of the logical dimensions (`dim_names` name the physical ones).
    fn logical_names(&self) -> Option<Vec<String>> {
        let names = self.dim_names.as_ref()?;
        Some(match &self.permutation {
            Some(p) => p.iter().map(|&i| names[i].clone()).collect(),
            None => names.clone(),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Export

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
                        "the arrow array has nulls ({} at the outer level), which DLPack cannot \
                         carry; pass copy=True to export a copy with zeroes in their place",
                        array.null_count()
                    ),
                ));
            }
            if is_bool {
                return Err(err(
                    FailureKind::CopyRequired,
                    "arrow booleans are bit-packed and DLPack bool is one byte per element; pass \
                     copy=True to export an unpacked copy",
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

// ---------------------------------------------------------------------------------------------
// Import

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
                "arrow arrays live in host memory; the tensor is on device {}",
                t.device()
            ),
        ));
    }
    let ty = arrow_type_of(t.dtype()).ok_or_else(|| {
        err(
            FailureKind::UnsupportedDtype,
            format!(
                "DLPack dtype {} has no arrow equivalent",
                describe(t.dtype())
            ),
        )
    })?;
    if ty == DataType::Boolean && !copy {
        return Err(err(
            FailureKind::CopyRequired,
            "DLPack bool is one byte per element and arrow booleans are bit-packed; pass \
             copy=True to import a packed copy",
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
            format!("its data is not aligned to {elem} bytes")
        } else {
            format!(
                "its layout (shape {:?}, strides {:?}) is not {}",
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
            format!("an arrow array cannot view this tensor: {what}; pass copy=True"),
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
            .map_err(|e| err(e.kind(), format!("arrow: {}", e.message())))?;
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
                "a 0-d tensor is not an arrow array; reshape it to 1-d",
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
                "the tensor's dtype is {}, not {} ({})",
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
                "a PrimitiveArray is 1-D; the tensor has {} dimensions",
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
fn permuted_contiguous(shape: &[i64], strides: &[i64]) -> Option<Vec<usize>> {
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
                "arrow.fixed_shape_tensor needs a tensor of rank >= 2 (outer length, then the \
                 element shape); this one has rank {}",
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
                "arrow.fixed_shape_tensor stores elements one after another; the outer dimension \
                 of strides {:?} is not outermost; pass copy=True",
                t.strides()
            ),
        ));
    }
    if ty == DataType::Boolean {
        return Err(err(
            FailureKind::UnsupportedDtype,
            "arrow.fixed_shape_tensor of booleans is not supported",
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

/// A [`NullBuffer`] helper kept for tests of null handling: arrays with nulls in their values.
#[cfg(test)]
fn with_nulls<T: ArrowPrimitiveType>(values: Vec<T::Native>, valid: &[bool]) -> PrimitiveArray<T> {
    use arrow_buffer::NullBuffer;
    PrimitiveArray::<T>::new(
        ScalarBuffer::from(values),
        Some(NullBuffer::from(valid.to_vec())),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::types::{
        Float16Type, Float32Type, Float64Type, Int8Type, Int16Type, Int32Type, Int64Type,
        UInt8Type, UInt16Type, UInt32Type, UInt64Type,
    };

    #[test]
    fn permuted_contiguous_finds_the_physical_order() {
        assert_eq!(permuted_contiguous(&[3, 4], &[4, 1]), Some(vec![0, 1]));
        assert_eq!(permuted_contiguous(&[4, 3], &[1, 4]), Some(vec![1, 0]));
        assert_eq!(
            permuted_contiguous(&[2, 3, 4], &[1, 8, 2]),
            Some(vec![1, 2, 0])
        );
        assert_eq!(permuted_contiguous(&[3, 4], &[8, 1]), None, "a gap");
        assert_eq!(
            permuted_contiguous(&[3, 1, 4], &[4, 99, 1]),
            Some(vec![0, 1, 2])
        );
    }

    #[test]
    fn tensor_metadata_reads_what_pyarrow_writes() {
        let m =
            TensorMetadata::parse(r#"{"shape":[3,4],"dim_names":["C","H"],"permutation":[1,0]}"#)
                .unwrap();
        assert_eq!(m.shape, vec![3, 4]);
        assert_eq!(m.permutation, Some(vec![1, 0]));
        assert_eq!(
            m.logical_names(),
            Some(vec!["H".to_owned(), "C".to_owned()])
        );
        let m = TensorMetadata::parse(r#" { "shape" : [ 2 ] , "dim_names" : null } "#).unwrap();
        assert_eq!((m.shape, m.dim_names), (vec![2], None));
        let m = TensorMetadata::parse(r#"{"shape":[2,2],"dim_names":["a\"b","\u00e9"]}"#).unwrap();
        assert_eq!(
            m.dim_names.unwrap(),
            vec!["a\"b".to_owned(), "é".to_owned()]
        );
        for bad in [
            "",
            "[]",
            r#"{"shape":[2],"permutation":[1]}"#,
            r#"{"shape":[2,2],"permutation":[0,0]}"#,
            r#"{"shape":[-1]}"#,
            r#"{"shape":[2.5]}"#,
            r#"{"dim_names":["a"]}"#,
            r#"{"shape":[2],"dim_names":["a","b"]}"#,
            r#"{"shape":[2"#,
        ] {
            let e = TensorMetadata::parse(bad).unwrap_err();
            assert_eq!(e.kind(), FailureKind::MalformedTensor, "{bad}");
        }
        let m = TensorMetadata {
            shape: vec![3, 4],
            dim_names: None,
            permutation: Some(vec![1, 0]),
        };
        assert_eq!(m.to_json(), r#"{"shape":[3,4],"permutation":[1,0]}"#);
        assert_eq!(TensorMetadata::parse(&m.to_json()).unwrap(), m);
    }

    #[test]
    fn nulls_zeroed_in_copies_only() {
        let a = with_nulls::<Int32Type>(vec![1, 2, 3], &[true, false, true]);
        let e = ArrowTensor::from_array(&a, false).unwrap_err();
        assert_eq!(e.kind(), FailureKind::CopyRequired);
        let t = ArrowTensor::from_array(&a, true).unwrap();
        assert!(t.is_copied() && !t.readonly());
        let b = t.into_buffer();
        // SAFETY: a copy of 3 i32s owned by the buffer.
        let v = unsafe { std::slice::from_raw_parts(b.data_ptr().cast::<i32>(), 3) };
        assert_eq!(v, &[1, 0, 3]);
    }

    #[test]
    fn type_table_round_trips() {
        for dt in [
            Int8Type::DATA_TYPE,
            Int16Type::DATA_TYPE,
            Int32Type::DATA_TYPE,
            Int64Type::DATA_TYPE,
            UInt8Type::DATA_TYPE,
            UInt16Type::DATA_TYPE,
            UInt32Type::DATA_TYPE,
            UInt64Type::DATA_TYPE,
            Float16Type::DATA_TYPE,
            Float32Type::DATA_TYPE,
            Float64Type::DATA_TYPE,
        ] {
            let (dl, _) = dl_dtype_of(&dt).unwrap();
            assert_eq!(arrow_type_of(dl), Some(dt));
        }
    }
}
