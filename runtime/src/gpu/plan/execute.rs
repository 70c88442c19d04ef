//! [`execute_transfer`]: a [`TransferPlan`]'s steps applied to a [`DeviceRuntime`], and
//! [`run_transfer`] with the process-wide runtime.

use std::sync::Arc;

use crate::device::Device;
use crate::error::{DlpackError, Result};
use crate::gpu::{
    AllocKind, DevicePtr, DeviceRuntime, EventHandle, OwnedAllocation, StreamHandle,
    default_runtime,
};
use crate::spec::errors::FailureKind;

use super::{Buf, Step, TensorLayout, TransferKind, TransferPlan, c_strides};

/// The result of [`execute_transfer`].
#[derive(Debug)]
pub struct TransferOutcome {
    /// The fresh buffer to export (`None` for zero-copy and [`TransferKind::HostCopy`]). Keep it
    /// alive in the capsule's owner; it frees itself on drop.
    pub allocation: Option<OwnedAllocation>,
    /// The device the capsule reports.
    pub target: Device,
    /// Set `IS_COPIED`.
    pub is_copied: bool,
    /// The caller must still copy the (now host-ready) source with the CPU kernels.
    pub needs_host_copy: bool,
}

/// Applies `plan` for a tensor whose data pointer (byte offset included) is `src`.
///
/// On error, events are destroyed and scratch / destination buffers freed (after
/// synchronising the stream their copies were queued on).
pub fn execute_transfer(
    runtime: &Arc<dyn DeviceRuntime>,
    plan: &TransferPlan,
    src: DevicePtr,
    layout: &TensorLayout<'_>,
) -> Result<TransferOutcome> {
    let rt = runtime.as_ref();
    let mut dst: Option<OwnedAllocation> = None;
    let mut temp: Option<OwnedAllocation> = None;
    let mut event: Option<(Device, EventHandle)> = None;
    let mut last_stream: Option<(Device, StreamHandle)> = None;

    let result = (|| -> Result<()> {
        let ptr = |b: Buf,
                   dst: &Option<OwnedAllocation>,
                   temp: &Option<OwnedAllocation>|
         -> Result<DevicePtr> {
            match b {
                Buf::Src => Ok(src),
                Buf::Dst => dst
                    .as_ref()
                    .map(|a| a.ptr())
                    .ok_or_else(|| internal("Dst used before AllocDst")),
                Buf::Temp => temp
                    .as_ref()
                    .map(|a| a.ptr())
                    .ok_or_else(|| internal("Temp used before AllocTemp")),
            }
        };
        for step in &plan.steps {
            match *step {
                Step::AllocDst {
                    kind,
                    device,
                    bytes,
                } => {
                    let a = rt.alloc(kind, device, bytes)?;
                    dst = Some(OwnedAllocation::new(Arc::clone(runtime), a));
                }
                Step::AllocTemp { device, bytes } => {
                    let a = rt.alloc(AllocKind::Device, device, bytes)?;
                    temp = Some(OwnedAllocation::new(Arc::clone(runtime), a));
                }
                Step::RecordEvent { device, stream } => {
                    event = Some((device, rt.record_event(device, stream)?));
                }
                Step::WaitEvent { device, stream } => {
                    let (_, ev) = event.ok_or_else(|| internal("WaitEvent before RecordEvent"))?;
                    rt.wait_event(device, stream, ev)?;
                }
                Step::DestroyEvent { device } => {
                    if let Some((_, ev)) = event.take() {
                        rt.destroy_event(device, ev)?;
                    }
                }
                Step::StridedCopy { device, stream, to } => {
                    let to = ptr(to, &dst, &temp)?;
                    last_stream = Some((device, stream));
                    if layout.numel() > 0 {
                        let contiguous_strides;
                        let strides = match layout.strides {
                            Some(s) => s,
                            None => {
                                contiguous_strides = c_strides(layout.shape);
                                &contiguous_strides
                            }
                        };
                        rt.strided_copy_to_contiguous(
                            device,
                            src,
                            layout.shape,
                            strides,
                            layout.elem_bytes,
                            to,
                            stream,
                        )?;
                    }
                }
                Step::Copy {
                    device,
                    kind,
                    stream,
                    from,
                    to,
                    bytes,
                } => {
                    let (from, to) = (ptr(from, &dst, &temp)?, ptr(to, &dst, &temp)?);
                    last_stream = Some((device, stream));
                    if bytes > 0 {
                        rt.copy(device, kind, to, from, bytes, stream)?;
                    }
                }
                Step::SynchronizeStream { device, stream } => {
                    rt.synchronize_stream(device, stream)?;
                    last_stream = None;
                }
                Step::FreeTemp => {
                    if let Some(t) = temp.take() {
                        t.free()?;
                    }
                }
            }
        }
        Ok(())
    })();

    match result {
        Ok(()) => Ok(TransferOutcome {
            allocation: dst,
            target: plan.target,
            is_copied: plan.is_copied,
            needs_host_copy: plan.kind == TransferKind::HostCopy,
        }),
        Err(e) => {
            if let Some((device, ev)) = event.take() {
                let _ = rt.destroy_event(device, ev);
            }
            // Queued copies may still read / write the buffers: wait for their stream before
            // the buffers free themselves on drop.
            if let Some((device, stream)) = last_stream
                && (temp.is_some() || dst.is_some())
            {
                let _ = rt.synchronize_stream(device, stream);
            }
            drop(temp);
            drop(dst);
            Err(e)
        }
    }
}

/// [`execute_transfer`] with the process-wide runtime ([`default_runtime`]), fetched only
/// when the plan has steps: a zero-copy plan with nothing to synchronise (e.g. pinned memory
/// with no pending work, exported to CPU) works without a driver. This is what `__dlpack__`
/// calls after [`plan_transfer`]. Errors: `DeviceUnavailable` (BufferError) when steps need a
/// driver and there is none, plus the runtime's errors.
///
/// [`plan_transfer`]: super::plan_transfer
pub fn run_transfer(
    plan: &TransferPlan,
    src: DevicePtr,
    layout: &TensorLayout<'_>,
) -> Result<TransferOutcome> {
    if !plan.needs_runtime() {
        return Ok(TransferOutcome {
            allocation: None,
            target: plan.target,
            is_copied: plan.is_copied,
            needs_host_copy: plan.kind == TransferKind::HostCopy,
        });
    }
    let runtime = default_runtime()?;
    execute_transfer(&runtime, plan, src, layout)
}

fn internal(what: &str) -> DlpackError {
    DlpackError::new(
        FailureKind::BadArgumentValue,
        format!("dlbind internal error: malformed export plan ({what})"),
    )
}
