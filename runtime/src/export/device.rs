//! Exports that involve a GPU (a non-CPU source, a non-CPU `dl_device`, or a source that reports
//! a producer stream) go through the GPU planner ([`crate::gpu::plan_transfer`]): it orders the
//! producer's and the consumer's streams and, for copies, fills a buffer allocated through the
//! [`DeviceRuntime`] that the tensor then owns. Host copies use the CPU copy kernels.

use std::ffi::c_void;

use super::DLPackSource;
use super::request::ExportPlan;
use crate::layout::c_strides_into;
use std::sync::Arc;

use crate::alloc::AlignedBuffer;
use crate::copy::{contiguous_nbytes, copy_to_contiguous};
use crate::device::Device;
use crate::dtype::elem_size;
use crate::error::DlpackError;
use crate::ffi::DLDataType;
use crate::gpu::{self, DeviceRuntime, OwnedAllocation, TensorLayout};
use crate::spec::errors::FailureKind;

/// The data an export points at, when it is not simply the source's own host memory.
pub(super) struct Prepared {
    pub(super) data: *mut c_void,
    pub(super) device: Device,
    /// A host copy the tensor owns.
    pub(super) copy: Option<AlignedBuffer>,
    /// A GPU runtime's buffer the tensor owns.
    pub(super) device_copy: Option<Box<OwnedAllocation>>,
    /// The data was copied on the host (finished; the owner is not needed).
    pub(super) host_copied: bool,
}

/// Whether an export needs the GPU planner: a non-CPU source or target, or a source that
/// reports a stream with pending work.
#[inline]
pub(super) fn gpu_involved<S: DLPackSource + ?Sized>(src: &S, plan: &ExportPlan) -> bool {
    !(src.dlpack_device().is_cpu() && plan.device.is_cpu()) || src.dlpack_stream().is_some()
}

/// Copies and device work for an export (everything but "host memory as it is"): the GPU
/// planner when a GPU is involved (a device source or target, or a pending producer stream),
/// then the CPU copy kernels for host copies. Rewrites `strides` to C-contiguous after a copy.
#[cold]
#[inline(never)]
pub(super) fn prepare_data<S: DLPackSource + ?Sized>(
    src: &S,
    shape: &[i64],
    strides: &mut [i64],
    dtype: DLDataType,
    plan: &ExportPlan,
    stream: Option<i64>,
    runtime: Option<&Arc<dyn DeviceRuntime>>,
) -> Result<Prepared, DlpackError> {
    let mut out = Prepared {
        data: src.dlpack_data_ptr(),
        device: plan.device,
        copy: None,
        device_copy: None,
        host_copied: plan.copy,
    };
    if gpu_involved(src, plan) {
        let done = run_device_plan(src, shape, strides, dtype, plan, stream, runtime)?;
        if done.is_copied != plan.copy {
            return Err(DlpackError::new(
                FailureKind::BadArgumentValue,
                "dlbind internal error: the GPU planner and the negotiation disagree about a copy",
            ));
        }
        out.device = done.target;
        out.host_copied = done.needs_host_copy;
        if let Some(a) = done.allocation {
            out.data = a.ptr() as usize as *mut c_void;
            c_strides_into(shape, strides);
            out.device_copy = Some(Box::new(a));
        }
    }
    if out.host_copied {
        let elem = elem_size(dtype)?;
        let nbytes = contiguous_nbytes(shape, elem)?;
        let buf = AlignedBuffer::uninit(nbytes)?;
        // SAFETY: host copies are only planned for host-accessible memory (made ready for the
        // host by the GPU plan's steps, if any); `src`'s contract makes every element reachable
        // from its data pointer with these shape/strides readable; `buf` is a fresh allocation
        // of `nbytes` bytes (no overlap).
        unsafe {
            copy_to_contiguous(
                out.data.cast::<u8>(),
                shape,
                strides,
                elem,
                buf.as_mut_ptr(),
                nbytes,
            )
        }?;
        c_strides_into(shape, strides);
        out.data = buf.as_mut_ptr().cast::<c_void>();
        out.copy = Some(buf);
    }
    Ok(out)
}

/// Plans and runs the device side of an export (GPU planner + runtime): stream ordering and,
/// for device copies, a fresh buffer. `shape` / `strides` are the source's (elements).
/// Out of line and cold: host exports (the hot path) never come here.
pub(super) fn run_device_plan<S: DLPackSource + ?Sized>(
    src: &S,
    shape: &[i64],
    strides: &[i64],
    dtype: DLDataType,
    plan: &ExportPlan,
    stream: Option<i64>,
    runtime: Option<&Arc<dyn DeviceRuntime>>,
) -> Result<gpu::TransferOutcome, DlpackError> {
    let contiguous = crate::layout::is_c_contiguous(shape, strides);
    // Sub-byte dtypes move as whole bytes, which only a C-contiguous layout allows.
    let (flat, layout) = match elem_size(dtype)? {
        crate::copy::ElemSize::Bytes(b) => (
            None,
            TensorLayout {
                shape,
                strides: Some(strides),
                elem_bytes: b,
            },
        ),
        elem @ crate::copy::ElemSize::SubByte { .. } => {
            if !contiguous {
                return Err(DlpackError::new(
                    FailureKind::UnsupportedLayout,
                    format!(
                        "a non-contiguous {} tensor cannot be copied by a device runtime (sub-byte elements)",
                        crate::dtype::describe(dtype)
                    ),
                ));
            }
            let n = contiguous_nbytes(shape, elem)? as i64;
            (
                Some([n]),
                TensorLayout {
                    shape: &[],
                    strides: None,
                    elem_bytes: 1,
                },
            )
        }
    };
    let layout = match &flat {
        Some(n) => TensorLayout {
            shape: &n[..],
            ..layout
        },
        None => layout,
    };
    let req = gpu::TransferRequest {
        device: src.dlpack_device(),
        producer_stream: src.dlpack_stream(),
        dl_device: Some(plan.device),
        stream,
        copy: Some(plan.copy),
        contiguous,
        bytes: layout.nbytes(),
    };
    let gplan = gpu::plan_transfer(&req)?;
    let ptr = src.dlpack_data_ptr() as usize as gpu::DevicePtr;
    match runtime {
        Some(rt) if gplan.needs_runtime() => gpu::execute_transfer(rt, &gplan, ptr, &layout),
        _ => gpu::run_transfer(&gplan, ptr, &layout),
    }
}
