//! candle (feature `candle`, candle-core on the CPU): candle tensors as DLPack tensors, and
//! DLPack tensors as candle tensors (a copy: see [`to_candle`]).
//!
//! **Export** ([`CandleTensor::from_tensor`]): a **copy** of a CPU tensor's elements into
//! memory dlbind owns, C-contiguous and writable, made under candle's storage lock. candle
//! writes storage in place through `&Tensor` (`zero_set`, `const_set`, `slice_set`, `Var::set`
//! in every optimizer step, ...), so memory candle keeps is not lent to Python safely; the
//! zero-copy view of it is [`CandleTensor::view_unchecked`], an `unsafe fn` whose contract
//! names those writes. Dtypes: `u8`, `u32`, `i16`, `i32`, `i64`, `bf16`, `f16`, `f32`, `f64`,
//! `f8e4m3` and `f8e8m0`. candle's sub-byte float types (`f6e2m3`, `f6e3m2`, `f4`), which it
//! stores one per byte, are refused (`UnsupportedDtype`). CUDA and Metal tensors are refused
//! (`UnsupportedDevice`): this build of candle has no CUDA storage (its `cuda` feature compiles
//! CUDA kernels with `nvcc`).
//!
//! **Import** ([`to_candle`]): candle's CPU storage is a `Vec` candle allocated, and candle
//! offers no way to own foreign memory, so the tensor is **copied** (once: a C-contiguous
//! source straight into candle's buffer, any other layout through dlbind's strided copy first).
//!
//! Empty tensors (a 0 in any dimension) and 0-d tensors go both ways.
//!
//! **`f8e4m3`**: candle-core 0.11's own `to_dtype(DType::F64)` of an `F8E4M3` tensor recurses
//! until the stack overflows and aborts the process (candle alone reproduces it). This adapter
//! copies bytes and never converts; a tensor [`to_candle`] gives as `F8E4M3` is converted through
//! `DType::F32`.

/// The `candle-core` crate this adapter is built against (for a matching version), under its
/// library name.
pub use ::candle_core;

use std::ffi::c_void;

use candle_core::{CpuStorage, DType, Storage};

use crate::alloc::AlignedBuffer;
use crate::copy::{ElemSize, contiguous_nbytes, copy_to_contiguous};
use crate::device::Device;
use crate::dtype::describe;
use crate::error::DlpackError;
use crate::export::DLPackSource;
use crate::ffi::DLDataType;
use crate::import::ImportedTensor;
use crate::layout::{c_strides, check_data_span};
use crate::spec::dtypes::dtype_by_name;
use crate::spec::elements::DLPackElement;
use crate::spec::errors::FailureKind;
use crate::storage::Buffer;

type Result<T> = std::result::Result<T, DlpackError>;

/// An error in the adapters' one form: `candle: <what was given>, wanted <what>`.
fn err(kind: FailureKind, msg: impl Into<String>) -> DlpackError {
    DlpackError::new(kind, format!("candle: {}", msg.into()))
}

/// A spec dtype by name (names the generated table has).
fn spec_dtype(name: &str) -> DLDataType {
    dtype_by_name(name)
        .unwrap_or_else(|| panic!("the spec's dtype table has no {name}"))
        .dtype
}

/// The DLPack dtype of a candle dtype, `None` for those with no DLPack layout.
fn dl_dtype_of(dt: DType) -> Option<DLDataType> {
    Some(match dt {
        DType::U8 => u8::DTYPE,
        DType::U32 => u32::DTYPE,
        DType::I16 => i16::DTYPE,
        DType::I32 => i32::DTYPE,
        DType::I64 => i64::DTYPE,
        DType::BF16 => half::bf16::DTYPE,
        DType::F16 => half::f16::DTYPE,
        DType::F32 => f32::DTYPE,
        DType::F64 => f64::DTYPE,
        DType::F8E4M3 => spec_dtype("float8_e4m3fn"),
        DType::F8E8M0 => spec_dtype("float8_e8m0fnu"),
        // F6E2M3, F6E3M2, F4 (one per byte) and any dtype a later candle adds.
        _ => return None,
    })
}

/// The candle dtype of a DLPack dtype.
fn candle_dtype_of(dtype: DLDataType) -> Option<DType> {
    [
        DType::U8,
        DType::U32,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::BF16,
        DType::F16,
        DType::F32,
        DType::F64,
        DType::F8E4M3,
        DType::F8E8M0,
    ]
    .into_iter()
    .find(|&d| dl_dtype_of(d) == Some(dtype))
}

/// Element 0 of a CPU storage's buffer and its length in bytes.
fn cpu_bytes(s: &CpuStorage) -> (*const u8, usize) {
    fn raw<T>(v: &[T]) -> (*const u8, usize) {
        (v.as_ptr().cast::<u8>(), std::mem::size_of_val(v))
    }
    match s {
        CpuStorage::U8(v) => raw(v),
        CpuStorage::U32(v) => raw(v),
        CpuStorage::I16(v) => raw(v),
        CpuStorage::I32(v) => raw(v),
        CpuStorage::I64(v) => raw(v),
        CpuStorage::BF16(v) => raw(v),
        CpuStorage::F16(v) => raw(v),
        CpuStorage::F32(v) => raw(v),
        CpuStorage::F64(v) => raw(v),
        CpuStorage::F8E4M3(v) => raw(v),
        CpuStorage::F6E2M3(v)
        | CpuStorage::F6E3M2(v)
        | CpuStorage::F4(v)
        | CpuStorage::F8E8M0(v) => raw(v),
    }
}

/// A CPU tensor's storage as candle's lock shows it: element 0 of the tensor, the bytes from
/// there to the end of the storage, and candle's layout as DLPack shape and element strides.
struct Located {
    ptr: *const u8,
    bytes: usize,
    elem: usize,
    dtype: DLDataType,
    shape: Vec<i64>,
    strides: Vec<i64>,
}

/// Reads a tensor's dtype, storage and layout under the storage lock `storage` holds, checking
/// that the layout stays inside the storage (the extent check every export runs).
fn locate(
    tensor: &candle_core::Tensor,
    storage: &Storage,
    layout: &candle_core::Layout,
) -> Result<Located> {
    let dtype = dl_dtype_of(tensor.dtype()).ok_or_else(|| {
        err(
            FailureKind::UnsupportedDtype,
            format!(
                "tensor dtype is {:?} (stored one element per byte), wanted one with a DLPack \
                 layout (sub-byte floats are packed in DLPack)",
                tensor.dtype()
            ),
        )
    })?;
    let Storage::Cpu(cpu) = storage else {
        return Err(err(
            FailureKind::UnsupportedDevice,
            format!(
                "tensor is on {:?}, wanted the CPU (candle's CUDA storage needs candle's \
                 `cuda` feature)",
                tensor.device().location()
            ),
        ));
    };
    let elem = tensor.dtype().size_in_bytes();
    let (base, len) = cpu_bytes(cpu);
    let shape: Vec<i64> = layout.dims().iter().map(|&d| d as i64).collect();
    let strides: Vec<i64> = layout.stride().iter().map(|&s| s as i64).collect();
    let bytes = layout
        .start_offset()
        .checked_mul(elem)
        .and_then(|start| len.checked_sub(start))
        .ok_or_else(|| {
            err(
                FailureKind::MalformedTensor,
                format!(
                    "start offset {} is past the storage's {len} bytes, wanted one inside it",
                    layout.start_offset()
                ),
            )
        })?;
    check_data_span(
        &shape,
        &strides,
        dtype,
        Some(crate::Extent::from_start(bytes)),
    )?;
    Ok(Located {
        // In bounds or one past the end: `bytes` was taken from `len` above.
        ptr: base.wrapping_add(len - bytes),
        bytes,
        elem,
        dtype,
        shape,
        strides,
    })
}

/// A candle CPU tensor as a DLPack tensor: a copy dlbind owns ([`from_tensor`](Self::from_tensor))
/// or a read-only view of candle's storage kept alive by a clone of the tensor
/// ([`view_unchecked`](Self::view_unchecked)).
///
/// Use it as a [`DLPackSource`], or move its parts into a `#[derive(DLPackExport)]` type:
/// [`CandleTensor::into_buffer`] for the `#[dlpack(data)]` [`Buffer`], with
/// [`dtype`](Self::dtype), [`shape`](Self::shape), [`strides`](Self::strides) and
/// [`readonly`](Self::readonly).
#[derive(Debug)]
pub struct CandleTensor {
    buffer: Buffer,
    /// Bytes readable from element 0 on (a view: the storage after the start offset).
    bytes: usize,
    dtype: DLDataType,
    shape: Vec<i64>,
    strides: Vec<i64>,
    readonly: bool,
    copied: bool,
}

impl CandleTensor {
    /// A copy of a CPU tensor's elements (any layout candle makes: offsets, transposes,
    /// broadcasts) into memory dlbind owns: C-contiguous, writable, [`is_copied`](Self::is_copied).
    /// The copy is made under candle's storage lock, so no in-place candle write interleaves
    /// with it, and none reaches it afterwards.
    ///
    /// Errors: `UnsupportedDevice` for CUDA and Metal tensors, `UnsupportedDtype` for candle's
    /// sub-byte floats, `OutOfMemory`.
    pub fn from_tensor(tensor: &candle_core::Tensor) -> Result<CandleTensor> {
        let (storage, layout) = tensor.storage_and_layout();
        let at = locate(tensor, &storage, layout)?;
        let nbytes = contiguous_nbytes(&at.shape, ElemSize::Bytes(at.elem))?;
        let copy = AlignedBuffer::uninit(nbytes)?;
        // SAFETY: `locate` checked that every element the shape and strides address from
        // `at.ptr` lies in the storage's `Vec`, which the read guard `storage` keeps alive and
        // unwritten (candle's in-place writes take the write lock) until it drops below;
        // `copy` is a fresh allocation of `nbytes` bytes, so the two do not overlap.
        unsafe {
            copy_to_contiguous(
                at.ptr,
                &at.shape,
                &at.strides,
                ElemSize::Bytes(at.elem),
                copy.as_mut_ptr(),
                nbytes,
            )?;
        }
        drop(storage);
        Ok(CandleTensor {
            buffer: Buffer::from_aligned(copy),
            bytes: nbytes,
            dtype: at.dtype,
            strides: c_strides(&at.shape),
            shape: at.shape,
            readonly: false,
            copied: true,
        })
    }

    /// A zero-copy, read-only view of a CPU tensor's storage with candle's layout (start offset,
    /// element strides, zero strides of broadcasts), kept alive by a clone of the tensor.
    ///
    /// Errors: as [`from_tensor`](Self::from_tensor) (no `OutOfMemory`).
    ///
    /// # Safety
    /// The view reads candle's storage without candle's lock. From this call until the view,
    /// its [`Buffer`] and every export of them are gone (a Python consumer: until its last
    /// array over the memory is freed), nothing may write that storage: no in-place candle
    /// operation on this tensor or on any tensor or `Var` sharing its storage (its clones,
    /// views such as `reshape`, `narrow`, `t`, `i`, `detach`, `broadcast_as`, the `Var` it came
    /// from), on any thread. In candle-core 0.11 these are `Tensor::const_set`, `zero_set`,
    /// `one_set`, `slice_set`, `scatter_set`, `scatter_add_set`, `inplace_op1`, `inplace_op2`,
    /// `inplace_op3` and `Var::set` (which candle-nn's optimizers call on every step). It holds,
    /// for example, when the clone the view keeps is the storage's last handle (every other
    /// tensor sharing it dropped).
    pub unsafe fn view_unchecked(tensor: &candle_core::Tensor) -> Result<CandleTensor> {
        let (storage, layout) = tensor.storage_and_layout();
        let at = locate(tensor, &storage, layout)?;
        drop(storage);
        let owner = tensor.clone();
        // SAFETY: `at.ptr` is element `start_offset` of the storage's `Vec`, which lives in the
        // tensor's `Arc<RwLock<Storage>>`, kept by `owner`; candle never reallocates a storage's
        // `Vec` (in-place operations write into it), so the memory stays put while `owner`
        // lives, and the shape and strides stay inside it (`locate`). The caller promises no
        // write while the buffer and its exports live; exported read-only, so consumers do not
        // write either.
        let buffer = unsafe {
            Buffer::from_owner(
                owner,
                at.ptr.cast_mut().cast::<c_void>(),
                crate::Extent::from_start(at.bytes),
                Device::CPU,
                true,
            )
        };
        Ok(CandleTensor {
            buffer,
            bytes: at.bytes,
            dtype: at.dtype,
            shape: at.shape,
            strides: at.strides,
            readonly: true,
            copied: false,
        })
    }

    /// The element dtype.
    pub fn dtype(&self) -> DLDataType {
        self.dtype
    }
    /// The shape.
    pub fn shape(&self) -> &[i64] {
        &self.shape
    }
    /// The strides, in elements (C-contiguous for a copy, candle's layout for a view).
    pub fn strides(&self) -> &[i64] {
        &self.strides
    }
    /// Whether consumers must not write: a view of candle's storage is read-only, a copy is not.
    pub fn readonly(&self) -> bool {
        self.readonly
    }
    /// Whether the data is a copy dlbind owns rather than candle's storage.
    pub fn is_copied(&self) -> bool {
        self.copied
    }
    /// The memory (element 0 of the tensor: the copy, or candle's storage kept valid by a clone
    /// of the tensor), for a `#[dlpack(data)]` field; read-only ([`Buffer::readonly`]) for a
    /// view.
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

// SAFETY: element 0 is the start of the copy the buffer owns, or inside the storage kept alive
// by the buffer's owner (a view, whose caller promised no writes while it lives); the layout
// addresses only elements from there (non-negative strides) within `bytes` bytes, checked when
// the tensor was made and by every export; exactly `ndim` shape and stride values are written.
unsafe impl DLPackSource for CandleTensor {
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

/// A DLPack tensor as a candle CPU tensor: always a **copy** into a buffer candle owns (candle
/// cannot own foreign memory), C-contiguous, with the tensor's shape and dtype. The imported
/// tensor is left untouched (drop it to release the producer).
///
/// Errors: `UnsupportedDevice` for memory the host cannot read, `UnsupportedDtype` for dtypes
/// candle lacks (`bool`, `int8`, `uint16`, `uint64`, complex, sub-byte floats, ...).
pub fn to_candle(tensor: &ImportedTensor) -> Result<candle_core::Tensor> {
    let dtype = candle_dtype_of(tensor.dtype()).ok_or_else(|| {
        err(
            FailureKind::UnsupportedDtype,
            format!(
                "tensor dtype is {}, wanted one candle has (u8, u32, i16, i32, i64, bf16, f16, \
                 f32, f64, float8_e4m3fn, float8_e8m0fnu)",
                describe(tensor.dtype())
            ),
        )
    })?;
    if !tensor.device().is_host_accessible() {
        return Err(err(
            FailureKind::UnsupportedDevice,
            format!(
                "tensor is on device {}, wanted host memory (candle tensors are built on the \
                 CPU)",
                tensor.device()
            ),
        ));
    }
    let shape: Vec<usize> = tensor.shape().iter().map(|&d| d as usize).collect();
    let copied;
    let src = if tensor.is_c_contiguous() {
        tensor
    } else {
        copied = tensor.to_contiguous_copy()?;
        &copied
    };
    let nbytes = src.numel() * dtype.size_in_bytes();
    let bytes: &[u8] = if nbytes == 0 {
        &[]
    } else {
        // SAFETY: host-readable memory (checked above), C-contiguous from element 0, `numel`
        // elements of `dtype`'s width: `nbytes` bytes, alive while `src` is borrowed.
        unsafe { std::slice::from_raw_parts(src.data_ptr().cast::<u8>(), nbytes) }
    };
    candle_core::Tensor::from_raw_buffer(bytes, dtype, &shape, &candle_core::Device::Cpu)
        .map_err(|e| err(FailureKind::MalformedTensor, e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtype_tables_agree() {
        for d in [
            DType::U8,
            DType::U32,
            DType::I16,
            DType::I32,
            DType::I64,
            DType::BF16,
            DType::F16,
            DType::F32,
            DType::F64,
            DType::F8E4M3,
            DType::F8E8M0,
        ] {
            let dl = dl_dtype_of(d).unwrap();
            assert_eq!(candle_dtype_of(dl), Some(d));
            assert_eq!(usize::from(dl.bits) / 8, d.size_in_bytes(), "{d:?} width");
        }
        assert_eq!(dl_dtype_of(DType::F4), None);
        assert_eq!(candle_dtype_of(bool::DTYPE), None);
    }
}
