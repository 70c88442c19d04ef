//! `safetensors` files as DLPack tensors (feature `safetensors`; the crate without `std`).
//!
//! [`SafetensorsFile`] parses a file's header (with the `safetensors` crate) over bytes it
//! keeps (a memory map, a `Vec<u8>`, `bytes::Bytes`: anything `AsRef<[u8]>`), and
//! [`SafetensorsFile::tensor`] exports one tensor as a read-only DLPack tensor over those bytes,
//! without a copy: the bytes stay alive as long as any exported tensor does. A tensor whose data
//! is not aligned for its element type (a header whose length is not a multiple of 8, an
//! offset that is not a multiple of the element size) is copied into aligned memory instead of
//! viewed (`IS_COPIED` is set; still read-only). Every safetensors dtype maps to a DLPack one
//! ([`dtype`]), the 8-, 6- and 4-bit floats included: `F4` is `float4_e2m1fn` and `F6_*` are
//! `float6_*`, stored packed as safetensors stores them (element `i` in bits `i * bits ..` of
//! the little-endian data), so `IS_SUBBYTE_TYPE_PADDED` is clear.
//!
//! Memory-mapping a file is `unsafe` (another process may change it under the map); that
//! decision stays with the caller, who maps it (`unsafe { memmap2::Mmap::map(&file)? }`, as the
//! demo's `safetensors_open` does) and hands the map over; any other bytes work the same:
//!
//! ```no_run
//! use dlbind::adapters::safetensors::SafetensorsFile;
//!
//! let bytes = std::fs::read("model.safetensors")?;      // or a memmap2::Mmap
//! let st = SafetensorsFile::new(bytes)?;
//! for name in st.names() {
//!     let t = st.tensor(name)?;                          // read-only, zero-copy
//!     println!("{name}: {:?} {:?}", t.shape(), t.dtype_info().map(|d| d.name));
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

/// The `safetensors` crate this adapter is built against (for a matching version).
pub use ::safetensors;

use std::ffi::c_void;
use std::sync::Arc;

use safetensors::tensor::{Metadata, TensorInfo};
use safetensors::{Dtype, SafeTensors};

use super::rust_owned::{self, Layout, check_inside};
use crate::alloc::AlignedBuffer;
use crate::error::DlpackError;
use crate::ffi::{DLDataType, DLDataTypeCode};
use crate::import::ImportedTensor;
use crate::spec::errors::FailureKind;

/// The DLPack dtype of a safetensors dtype (every one that `safetensors` 0.8 defines; a later
/// one is `UnsupportedDtype`). `F8_E4M3` is `float8_e4m3fn` (what torch and ml_dtypes write
/// under that name), `F8_E8M0` `float8_e8m0fnu`, `F4` `float4_e2m1fn` (MXFP4's element type).
pub fn dtype(d: Dtype) -> Result<DLDataType, DlpackError> {
    use DLDataTypeCode as C;
    let (code, bits) = match d {
        Dtype::BOOL => (C::kDLBool, 8),
        Dtype::F4 => (C::kDLFloat4_e2m1fn, 4),
        Dtype::F6_E2M3 => (C::kDLFloat6_e2m3fn, 6),
        Dtype::F6_E3M2 => (C::kDLFloat6_e3m2fn, 6),
        Dtype::U8 => (C::kDLUInt, 8),
        Dtype::I8 => (C::kDLInt, 8),
        Dtype::F8_E5M2 => (C::kDLFloat8_e5m2, 8),
        Dtype::F8_E4M3 => (C::kDLFloat8_e4m3fn, 8),
        Dtype::F8_E8M0 => (C::kDLFloat8_e8m0fnu, 8),
        Dtype::F8_E4M3FNUZ => (C::kDLFloat8_e4m3fnuz, 8),
        Dtype::F8_E5M2FNUZ => (C::kDLFloat8_e5m2fnuz, 8),
        Dtype::I16 => (C::kDLInt, 16),
        Dtype::U16 => (C::kDLUInt, 16),
        Dtype::F16 => (C::kDLFloat, 16),
        Dtype::BF16 => (C::kDLBfloat, 16),
        Dtype::I32 => (C::kDLInt, 32),
        Dtype::U32 => (C::kDLUInt, 32),
        Dtype::F32 => (C::kDLFloat, 32),
        Dtype::C64 => (C::kDLComplex, 64),
        Dtype::F64 => (C::kDLFloat, 64),
        Dtype::I64 => (C::kDLInt, 64),
        Dtype::U64 => (C::kDLUInt, 64),
        other => {
            return Err(DlpackError::new(
                FailureKind::UnsupportedDtype,
                format!("safetensors: dtype {other:?}, wanted one with a DLPack dtype in dlbind"),
            ));
        }
    };
    Ok(DLDataType {
        code: code.0,
        bits,
        lanes: 1,
    })
}

/// The alignment an element of `d` needs to be viewed (a complex number: its part's).
fn alignment(d: DLDataType) -> usize {
    let bytes = (usize::from(d.bits) / 8).max(1);
    if d.code == DLDataTypeCode::kDLComplex.0 {
        bytes / 2
    } else {
        bytes
    }
}

fn malformed(e: safetensors::SafeTensorError) -> DlpackError {
    DlpackError::new(
        FailureKind::MalformedTensor,
        format!("safetensors: malformed header ({e}), wanted a safetensors file"),
    )
}

/// A safetensors file's bytes and parsed header: hands out its tensors as DLPack tensors.
pub struct SafetensorsFile {
    /// What keeps the bytes valid; shared with every exported tensor.
    bytes: Arc<dyn AsRef<[u8]> + Send + Sync>,
    /// The bytes (`as_ref` read once, in the `Arc`).
    base: *const u8,
    len: usize,
    /// Where the data section starts (8 + header length).
    data_start: usize,
    metadata: Metadata,
    /// The tensors' names, in file order.
    names: Vec<String>,
}

// SAFETY: `base` is only an address into memory the `Arc` (Send + Sync) keeps valid; it is
// read, never written.
unsafe impl Send for SafetensorsFile {}
// SAFETY: as above.
unsafe impl Sync for SafetensorsFile {}

impl std::fmt::Debug for SafetensorsFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SafetensorsFile")
            .field("len", &self.len)
            .field("tensors", &self.names())
            .finish()
    }
}

impl SafetensorsFile {
    /// Parses the header of the safetensors file `bytes` holds (`MalformedTensor` when it is
    /// not one). `bytes` is kept, unmoved, until this value and every tensor exported from it
    /// are gone; its `as_ref` is called once.
    pub fn new<B: AsRef<[u8]> + Send + Sync + 'static>(bytes: B) -> Result<Self, DlpackError> {
        let bytes: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(bytes);
        let (base, len) = {
            let s: &[u8] = (*bytes).as_ref();
            (s.as_ptr(), s.len())
        };
        // SAFETY: `len` bytes from `base`, kept by `bytes` (an `Arc`, never given out mutably).
        let s = unsafe { std::slice::from_raw_parts(base, len) };
        let (n, metadata) = SafeTensors::read_metadata(s).map_err(malformed)?;
        Ok(SafetensorsFile {
            bytes,
            base,
            len,
            data_start: 8 + n,
            names: metadata.offset_keys(),
            metadata,
        })
    }

    /// The tensors' names, in the order of their data in the file.
    pub fn names(&self) -> Vec<&str> {
        self.names.iter().map(String::as_str).collect()
    }

    fn info(&self, name: &str) -> Result<&TensorInfo, DlpackError> {
        self.metadata.info(name).ok_or_else(|| {
            DlpackError::new(
                FailureKind::BadArgumentValue,
                format!(
                    "safetensors: no tensor named {name:?}, wanted one of the file's {:?}",
                    self.names
                ),
            )
        })
    }

    /// The tensor `name` as a read-only DLPack tensor over the file's bytes (copied when its
    /// data is misaligned): `BadArgumentValue` for a name the file does not have.
    pub fn tensor(&self, name: &str) -> Result<ImportedTensor, DlpackError> {
        let info = self.info(name)?;
        let dt = dtype(info.dtype)?;
        let shape: Vec<i64> = info
            .shape
            .iter()
            .map(|&n| {
                i64::try_from(n).map_err(|_| {
                    DlpackError::new(
                        FailureKind::MalformedTensor,
                        format!("safetensors: tensor {name:?} has dimension {n}, wanted at most i64::MAX"),
                    )
                })
            })
            .collect::<Result<_, _>>()?;
        let (begin, end) = info.data_offsets;
        let (Some(start), Some(stop)) = (
            self.data_start.checked_add(begin),
            self.data_start.checked_add(end),
        ) else {
            return Err(self.outside(name));
        };
        if start > stop || stop > self.len {
            return Err(self.outside(name));
        }
        let nbytes = stop - start;
        // Whole-byte dtypes: the shape's elements fill the byte range exactly (the header was
        // validated by `safetensors`, checked again here); sub-byte ones are packed.
        let numel: i128 = shape.iter().map(|&n| i128::from(n)).product();
        if numel * i128::from(dt.bits) != 8 * nbytes as i128 {
            return Err(self.outside(name));
        }
        if bytes_elements(dt) {
            let strides = crate::layout::c_strides(&shape);
            check_inside(
                &format!("safetensors: tensor {name:?}"),
                &shape,
                &strides,
                0,
                nbytes / (usize::from(dt.bits) / 8),
            )?;
        }
        // SAFETY: `start <= len`.
        let data = unsafe { self.base.add(start) };
        if !(data as usize).is_multiple_of(alignment(dt)) {
            return copy_of(data, nbytes, shape, dt);
        }
        let keep = Arc::clone(&self.bytes);
        // SAFETY: the tensor's bytes are `start..stop` of the file's bytes, which `keep` keeps
        // valid and unmoved (never given out mutably); read-only.
        unsafe {
            rust_owned::export(keep, move |_| {
                Ok(Layout {
                    data: data as *mut c_void,
                    shape,
                    strides: None,
                    dtype: dt,
                    readonly: true,
                    copied: false,
                })
            })
        }
    }

    fn outside(&self, name: &str) -> DlpackError {
        DlpackError::new(
            FailureKind::MalformedTensor,
            format!(
                "safetensors: tensor {name:?} has data offsets that do not match its shape and \
                 dtype, wanted a range of the file's {} bytes that does",
                self.len
            ),
        )
    }
}

/// Whether `d` is a whole number of bytes.
fn bytes_elements(d: DLDataType) -> bool {
    d.bits.is_multiple_of(8)
}

/// A read-only, aligned copy of `nbytes` bytes from `data`.
fn copy_of(
    data: *const u8,
    nbytes: usize,
    shape: Vec<i64>,
    dt: DLDataType,
) -> Result<ImportedTensor, DlpackError> {
    let buf = AlignedBuffer::uninit(nbytes)?;
    // SAFETY: `nbytes` readable bytes from `data` (inside the file, checked by the caller) into
    // a fresh buffer of `nbytes` bytes; the two do not overlap.
    unsafe { std::ptr::copy_nonoverlapping(data, buf.as_mut_ptr(), nbytes) };
    // SAFETY: the buffer (64-byte aligned, `nbytes` bytes) holds the C-contiguous elements
    // and stays put while the owner lives.
    unsafe {
        rust_owned::export(buf, move |b| {
            Ok(Layout {
                data: b.as_mut_ptr().cast::<c_void>(),
                shape,
                strides: None,
                dtype: dt,
                readonly: true,
                copied: true,
            })
        })
    }
}
