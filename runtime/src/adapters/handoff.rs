//! [`Handoff`]: an adapter's export handed to Python once, with its flags.
//!
//! A `#[pyclass]` that holds an export (a derived type's `Buffer`) lends its memory to every
//! consumer for as long as the object lives, so its exports never say `IS_COPIED` (DLPack: the
//! consumer owns the data outright), even when the memory is a copy an adapter made. A
//! `Handoff` instead gives the tensor itself away: the first `__dlpack__` call moves it into the
//! capsule, flags included (`IS_COPIED` when the adapter copied, `READ_ONLY` when the memory
//! must not be written), and every later call raises.
//!
//! Its `__dlpack__` is written by hand (PyO3's argument parsing, not the derive's fast path):
//! a handoff is made and consumed once, so its per-call cost does not matter. What to use when the copied flag matters
//! to the consumer (numpy's and dlbind's `from_dlpack(x, copy=True)` then take the copy as it is
//! instead of copying again).

use std::sync::Mutex;

use pyo3::prelude::*;

use super::rust_owned::{self, Layout};
use crate::device::Device;
use crate::error::DlpackError;
use crate::export::DLPackSource;
use crate::export::request::{read_only_legacy, reuse_flags};
use crate::ffi::{DLDeviceType, DLManagedTensor};
use crate::import::ImportedTensor;
use crate::spec::errors::FailureKind;
use crate::writability::Writability;

/// A host tensor handed to Python once, keeping its DLPack flags (`IS_COPIED`, `READ_ONLY`).
///
/// ```ignore
/// #[pyfunction]
/// fn evens(py: Python<'_>, a: Vec<f64>) -> PyResult<Handoff> {
///     let array = ndarray::Array1::from(a);
///     // A borrowing CowArray is copied by the export: the handoff says so (IS_COPIED).
///     let t = dlbind::adapters::ndarray::export(CowArray::from(array.slice(s![..;2])))?;
///     Ok(Handoff::new(t)?)
/// }
/// ```
///
/// Python sees a `dlbind.Handoff` with `__dlpack__` and `__dlpack_device__`. The first
/// `__dlpack__` takes the tensor; a second one raises the spec's error for a consumed capsule
/// (`ValueError`). With `max_version=(1, 0)` or later (numpy 2, PyTorch) the capsule carries
/// the flags; a legacy request (JAX 0.10) gets a legacy capsule, which has none: the tensor as
/// it is when it may be written, a private copy of it when it is read-only (`copy=False`:
/// `ReadOnlyLegacy`, BufferError), as for every export (decision 0024).
/// `copy=True` on a tensor that is not a copy makes one (C-contiguous, `IS_COPIED`);
/// `dl_device` other than the CPU and a `stream` are refused, as for any host export.
#[pyclass(frozen, module = "dlbind", name = "Handoff")]
pub struct Handoff {
    tensor: Mutex<Option<ImportedTensor>>,
}

impl std::fmt::Debug for Handoff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let taken = self.tensor.lock().map(|t| t.is_none()).unwrap_or(true);
        f.debug_struct("Handoff").field("taken", &taken).finish()
    }
}

impl Handoff {
    /// The tensor, handed over with its flags (an adapter's export: `is_copied()` says whether
    /// the adapter copied). Host memory only (`UnsupportedDevice` otherwise).
    pub fn new(t: ImportedTensor) -> Result<Handoff, DlpackError> {
        cpu_only(t.device())?;
        Ok(Handoff {
            tensor: Mutex::new(Some(t)),
        })
    }

    /// An adapter's export of its own type (`ArrowTensor`, `CandleTensor`): `copied` is what
    /// its `is_copied()` says. The layout is checked against what `src`'s storage vouches for,
    /// as every export is (`bridges::Snapshot::of`).
    #[cfg_attr(not(any(feature = "arrow", feature = "candle")), allow(dead_code))]
    pub(crate) fn from_source<S: DLPackSource + Send + 'static>(
        src: S,
        copied: bool,
    ) -> Result<Handoff, DlpackError> {
        let snap = crate::bridges::Snapshot::of(&src)?;
        cpu_only(snap.device)?;
        // SAFETY: `src` is a `DLPackSource` (an unsafe trait: its data pointer and the layout
        // it fills address memory it keeps valid and unmoved while it lives, writable only when
        // it says so), and the layout was just checked against the extent its storage vouches
        // for; the block owns `src` until the tensor's deleter drops it.
        let t = unsafe {
            rust_owned::export(src, move |s| {
                Ok(Layout {
                    data: s.dlpack_data_ptr(),
                    shape: snap.shape,
                    strides: Some(snap.strides),
                    dtype: snap.dtype,
                    readonly: snap.readonly,
                    copied,
                })
            })
        }?;
        Handoff::new(t)
    }

    /// Takes the tensor: a copy first when `copy=True` asks for one and it is not a copy, or
    /// when a `legacy` capsule (no READ_ONLY flag) is asked for memory known to be read-only
    /// and `copy=None` allows one (`copy=False`: `ReadOnlyLegacy`, the tensor stays).
    fn take(&self, copy: Option<bool>, legacy: bool) -> Result<ImportedTensor, DlpackError> {
        let mut slot = self
            .tensor
            .lock()
            .map_err(|_| DlpackError::new(FailureKind::InternalError, "Handoff: lock poisoned"))?;
        let Some(t) = slot.take() else {
            return Err(DlpackError::new(
                FailureKind::CapsuleConsumed,
                "Handoff: the tensor was handed over already (a Handoff exports once), wanted a \
                 Handoff that no consumer took yet",
            ));
        };
        // The export rule (`export::request`): memory a capsule of this kind cannot reuse.
        let not_reusable = reuse_flags(t.writability(), !legacy).is_none();
        if not_reusable && copy == Some(false) {
            *slot = Some(t);
            return Err(read_only_legacy(copy));
        }
        if not_reusable || (copy == Some(true) && !t.is_copied()) {
            let c = t.to_contiguous_copy();
            // On failure the tensor stays for another try.
            match c {
                Ok(c) => Ok(c),
                Err(e) => {
                    *slot = Some(t);
                    Err(e)
                }
            }
        } else {
            Ok(t)
        }
    }
}

/// A handoff describes host memory only (the tensors it builds say `kDLCPU`).
fn cpu_only(device: Device) -> Result<(), DlpackError> {
    if device == Device::CPU {
        return Ok(());
    }
    Err(DlpackError::new(
        FailureKind::UnsupportedDevice,
        format!("Handoff: a tensor on {device}, wanted one in CPU memory"),
    ))
}

/// `max_version` as `(major, minor)`, `None` when absent.
fn parse_max_version(v: Option<&Bound<'_, PyAny>>) -> PyResult<Option<(i64, i64)>> {
    match v {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) => v.extract::<(i64, i64)>().map(Some).map_err(|_| {
            DlpackError::new(
                FailureKind::BadArgumentType,
                "Handoff: max_version is not a (major, minor) tuple of ints",
            )
            .into()
        }),
    }
}

#[pymethods]
impl Handoff {
    /// DLPack export, once: the tensor moves into the capsule with its flags.
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__(
        &self,
        py: Python<'_>,
        stream: Option<&Bound<'_, PyAny>>,
        max_version: Option<&Bound<'_, PyAny>>,
        dl_device: Option<&Bound<'_, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        if stream.is_some_and(|s| !s.is_none()) {
            return Err(DlpackError::new(
                FailureKind::InvalidStream,
                "Handoff: a stream was given for CPU memory, wanted None",
            )
            .into());
        }
        if let Some(d) = dl_device.filter(|d| !d.is_none()) {
            let d: (i32, i32) = d.extract().map_err(|_| {
                PyErr::from(DlpackError::new(
                    FailureKind::BadArgumentType,
                    "Handoff: dl_device is not a (device_type, device_id) tuple of ints",
                ))
            })?;
            if d != (DLDeviceType::kDLCPU.0, 0) {
                return Err(DlpackError::new(
                    FailureKind::UnsupportedDevice,
                    format!("Handoff: dl_device {d:?}, wanted the CPU (1, 0)"),
                )
                .into());
            }
        }
        let legacy = !matches!(parse_max_version(max_version)?, Some((major, _)) if major >= 1);
        let t = self.take(copy, legacy)?;
        let layout = Layout {
            data: t.data_ptr(),
            shape: t.shape().to_vec(),
            strides: Some(t.strides().to_vec()),
            dtype: t.dtype(),
            // A legacy capsule of memory of unknown writability (itself a legacy import) loses
            // nothing it had; known read-only memory was copied by `take` for one.
            readonly: if legacy {
                t.writability() == Writability::ReadOnly
            } else {
                t.readonly()
            },
            copied: t.is_copied(),
        };
        // SAFETY: `t` owns its memory (its producer's tensor or dlbind's copy), valid and
        // unmoved until it drops, and its own layout (validated when it was made) addresses it;
        // the block owns `t` until the new tensor's deleter drops it. Writable only when `t`
        // is (`readonly` above; a legacy struct refuses read-only memory, and `take` copied
        // known read-only memory for one).
        unsafe {
            if legacy {
                let m = rust_owned::export_raw_as::<DLManagedTensor, _>(t, move |_| Ok(layout))?;
                // SAFETY: the GIL is held; `m` is a live tensor nobody else holds.
                crate::export::wrap_capsule(py, m)
            } else {
                let m = rust_owned::export_raw(t, move |_| Ok(layout))?;
                // SAFETY: the GIL is held; `m` is a live tensor nobody else holds.
                crate::export::wrap_capsule(py, m)
            }
        }
    }

    /// `(kDLCPU, 0)`.
    fn __dlpack_device__(&self) -> (i32, i32) {
        (DLDeviceType::kDLCPU.0, 0)
    }

    fn __repr__(&self) -> String {
        format!("{self:?}")
    }
}
