//! The import order, written once. Every import — [`from_dlpack`] to an [`ImportedTensor`],
//! and the typed `from_dlpack` that builds the caller's own type — runs [`import`], which tries
//! in this order and takes the first that applies:
//!
//! 1. **same type** (typed imports of a `#[pyclass(frozen)]`, no `device`): `x` is exactly the
//!    caller's type → a direct view of its storage ([`FromDLPack::share_from`]);
//! 2. **numpy's header** (host or no `device`): `x` is exactly a `numpy.ndarray` → a view read
//!    from its array header, without calling `__dlpack__`;
//! 3. **the C exchange table** (`type(x).__dlpack_c_exchange_api__`, cached per type): its owning
//!    export, or for a table that lends, its non-owning fill plus a strong reference; a tensor
//!    on another device than the one asked for falls through to step 4;
//! 4. **the capsule / `__dlpack__`** (`producer_call`): with `max_version`, `dl_device`,
//!    `stream` and `copy` as the call needs;
//! 5. **the bridges** (inside step 4, when the type has no `__dlpack__`): CUDA array interface →
//!    SYCL USM interface → `__array_interface__` → the buffer protocol.
//!
//! `copy=True` skips steps 1–3 for the producer's copy, after first asking for a view of host
//! memory that dlbind copies itself ([`import`]'s first branch). The result is then checked
//! against `device` and `copy` ([`finish_import`]).
//!
//! [`FromDLPack::share_from`]: crate::FromDLPack::share_from

use pyo3::prelude::*;

use crate::bridges::PythonView;
use crate::device::Device;
use crate::error::DlpackError;
use crate::import::ImportedTensor;
use crate::spec::errors::FailureKind;

use super::producer_call::capsule_or_dlpack;

/// What an import builds: [`ImportedTensor`]s ([`AsTensor`]) or the caller's type (the typed
/// entry point's destination). [`import`] hands its result to exactly one method.
pub(super) trait Destination {
    /// The import's result (for the typed entry point, a bare object pointer: a `PyResult`
    /// returned through memory is copied with wide loads that stall on the narrow stores that
    /// just wrote it).
    type Out;
    /// Step 1: `x` as a view of the destination's own type, when it is one (`None`: not
    /// applicable).
    #[inline(always)]
    fn same_type(&self, x: &Bound<'_, PyAny>) -> Option<Self::Out> {
        let _ = x;
        None
    }
    /// A view of host memory a Python object keeps alive (steps 2 and 3).
    fn view(&self, v: &PythonView<'_, '_>) -> Self::Out;
    /// An imported tensor, or the error of the step that made it.
    fn tensor(&self, t: PyResult<ImportedTensor>) -> Self::Out;
}

/// The destination of [`from_dlpack`]: an [`ImportedTensor`].
pub(super) struct AsTensor;

impl Destination for AsTensor {
    type Out = PyResult<ImportedTensor>;
    #[inline(always)]
    fn view(&self, v: &PythonView<'_, '_>) -> Self::Out {
        // SAFETY: a view describes memory its owner keeps as it is while alive (numpy's header,
        // a lending table); the handle keeps a strong reference to the owner.
        Ok(unsafe { ImportedTensor::from_python_view(v) })
    }
    #[inline(always)]
    fn tensor(&self, t: PyResult<ImportedTensor>) -> Self::Out {
        t
    }
}

/// Whether memory on `here` serves a request for `device` (host-accessible memory counts as CPU).
#[inline(always)]
fn on_device(here: Device, device: Device) -> bool {
    here == device || (device == Device::CPU && here.is_host_accessible())
}

/// Imports `x` into `dest`, in the order of the module docs.
#[inline(always)]
pub(super) fn import<D: Destination>(
    x: &Bound<'_, PyAny>,
    device: Option<Device>,
    copy: Option<bool>,
    dest: &D,
) -> D::Out {
    if copy == Some(true) {
        // dlbind copies host memory itself (C-contiguous, aligned, parallel kernels), so the
        // producer is first asked for a zero-copy view; only memory the host cannot read is
        // re-requested with copy=True, so that the producer copies it on its own device.
        if device.is_none_or(|d| d == Device::CPU) {
            match import(x, device, None, &AsTensor) {
                Ok(view) if view.device().is_host_accessible() => {
                    return dest.tensor(finish_import(view, device, copy));
                }
                Ok(view) => drop(view),
                Err(e) => return dest.tensor(Err(e)),
            }
        }
        return dest.tensor(
            capsule_or_dlpack(x, device, copy).and_then(|t| finish_import(t, device, copy)),
        );
    }
    // 1. The caller's own type.
    if device.is_none()
        && let Some(out) = dest.same_type(x)
    {
        return out;
    }
    // 2. numpy's header.
    if device.is_none_or(|d| d == Device::CPU)
        && let Some(r) = crate::bridges::with_ndarray_view(x, |v| Ok(dest.view(v)))
    {
        return r.unwrap_or_else(|e| dest.tensor(Err(e)));
    }
    // 3. The C exchange table, with the view or handle moved straight into the destination.
    match device {
        None => {
            // The handle goes into the destination where it is built (the closure inlined: an
            // outlined one takes the ~100-byte handle through memory, copied twice).
            if let Some(r) = crate::exchange::import_via_exchange_api_with(
                x,
                |v| Ok(dest.view(v)),
                #[inline(always)]
                |t| Ok(dest.tensor(Ok(t))),
            ) {
                return r.unwrap_or_else(|e| dest.tensor(Err(e)));
            }
        }
        Some(d) => {
            // A tensor on another device falls through to `__dlpack__`, which is asked for
            // `dl_device` and decides.
            if let Some(r) = crate::exchange::import_via_exchange_api_with(
                x,
                |v| Ok(on_device(v.device, d).then(|| dest.view(v))),
                |t| Ok(on_device(t.device(), d).then(|| dest.tensor(Ok(t)))),
            ) {
                match r {
                    Ok(Some(out)) => return out,
                    Ok(None) => {}
                    Err(e) => return dest.tensor(Err(e)),
                }
            }
        }
    }
    // 4 and 5. The capsule, `__dlpack__`, the bridges.
    dest.tensor(capsule_or_dlpack(x, device, copy).and_then(|t| finish_import(t, device, copy)))
}

/// Imports any DLPack producer (or a raw DLPack capsule) as an [`ImportedTensor`].
///
/// Calls `type(obj).__dlpack__(obj, max_version=(1, 3)[, dl_device=…, stream=…][, copy=…])`
/// (vectorcall, interned names). On `TypeError` — a producer that predates the keywords — it
/// retries `__dlpack__()` when `device` is `None` and `copy` is not `False`. With
/// `copy=Some(true)` the result never aliases the producer: if the producer did not set
/// IS_COPIED (or is legacy-only), dlbind copies into a fresh, writable host buffer.
/// `device`: the result must be on that device (host-accessible memory counts as CPU);
/// otherwise BufferError. For devices with streams, the consumer's stream is passed
/// (`gpu::consumer_stream_for`: the generated default unless a GPU runtime reports a current
/// stream). No `__dlpack__` → AttributeError.
#[inline]
pub fn from_dlpack(
    obj: &Bound<'_, PyAny>,
    device: Option<Device>,
    copy: Option<bool>,
) -> PyResult<ImportedTensor> {
    // A free-threaded build refuses to run with the GIL off (dlbind's caches rely on it), here
    // as in every entry point a module sets up.
    #[cfg(Py_GIL_DISABLED)]
    crate::cpython::interp::require_gil(obj.py())?;
    import(obj, device, copy, &AsTensor)
}

/// Applies `device` / `copy` to a freshly imported tensor (nothing to do when neither was asked).
#[inline(always)]
fn finish_import(
    tensor: ImportedTensor,
    device: Option<Device>,
    copy: Option<bool>,
) -> PyResult<ImportedTensor> {
    if let Some(d) = device {
        let here = tensor.device();
        if !on_device(here, d) {
            return Err(DlpackError::new(
                FailureKind::UnsupportedDevice,
                format!("the producer returned a tensor on device {here}, not the requested {d}"),
            )
            .into());
        }
    }
    if copy == Some(true) && !tensor.is_copied() {
        // Legacy producers cannot say whether they copied; versioned ones that did not set
        // IS_COPIED may alias. Copy ourselves so the result never aliases.
        return Ok(tensor.to_contiguous_copy()?);
    }
    Ok(tensor)
}
