//! [`plan_transfer`]: the decision table of the module docs, one [`Planner`] method per row.

use crate::device::Device;
use crate::error::{DlpackError, Result};
use crate::ffi::DLDeviceType;
use crate::gpu::{AllocKind, CopyKind, StreamHandle};
use crate::spec::errors::FailureKind;
use crate::spec::streams::{StreamAction, consumer_default_stream, resolve_stream};

use super::streams::device_default_stream;
use super::{
    Buf, Step, TransferKind, TransferPlan, TransferRequest, consumer_handle, context_device, err,
    has_gpu_context, is_stream_device, is_type, same_stream,
};

/// Decides what `__dlpack__` must do. Pure; see the module docs for the table.
///
/// Errors: `InvalidStream` (ValueError) for a stream the target device's rules reject,
/// `CopyRequired` (BufferError) for copy=False when a copy is needed, `UnsupportedDevice`
/// (BufferError) for pairs this runtime cannot serve, `UnsupportedLayout` for a
/// non-contiguous host → device copy.
pub fn plan_transfer(req: &TransferRequest) -> Result<TransferPlan> {
    let src = req.device;
    let target = req.dl_device.unwrap_or(src);
    let action = match resolve_stream(target.device_type, req.stream) {
        Ok(action) => action,
        Err(v) => {
            // Device and copy errors (BufferError) win over a bad stream, as in
            // `export::request`: plan again with the target's default stream first.
            let probe = TransferRequest {
                stream: consumer_default_stream(target.device_type),
                ..*req
            };
            plan_transfer(&probe)?;
            return Err(v.into());
        }
    };
    let p = Planner {
        req,
        src,
        target,
        // Only GPU memory (device, pinned, managed, ROCm host) has producer streams; a stream
        // reported for anything else is ignored. Memory on a device with streams whose source
        // reports none is taken to be ready on the device's default stream, the one
        // `stream=None` stands for (CUDA: legacy, ROCm: 0): a view imported for that stream, or a
        // host-to-device copy dlbind queued on it, may still be in flight there, so a consumer
        // on another stream waits for it (an event; nothing when it is the same stream).
        producer: if !has_gpu_context(src) {
            None
        } else if is_stream_device(src) {
            req.producer_stream.or_else(|| device_default_stream(src))
        } else {
            req.producer_stream
        },
        consumer: consumer_handle(action),
        no_sync: action == StreamAction::NoSync,
        want_copy: req.copy == Some(true),
        forbid_copy: req.copy == Some(false),
    };
    if target == src {
        return if is_stream_device(src) {
            p.same_stream_device()
        } else {
            p.same_streamless_device()
        };
    }
    let target_is_pinned = is_type(target, DLDeviceType::kDLCUDAHost);
    if is_type(src, DLDeviceType::kDLCUDA) && (target.is_cpu() || target_is_pinned) {
        return p.device_to_host(target_is_pinned);
    }
    if target.is_cpu() && src.is_host_accessible() && !src.is_cpu() {
        return Ok(p.host_accessible_to_cpu());
    }
    if src.is_cpu() && is_type(target, DLDeviceType::kDLCUDA) {
        return p.host_to_device();
    }
    Err(p.unsupported(""))
}

/// One export request being planned: the devices, the two streams and the copy wish, with one
/// method per case of the module's table.
struct Planner<'a> {
    req: &'a TransferRequest,
    src: Device,
    target: Device,
    /// The producer's pending stream (GPU memory only).
    producer: Option<StreamHandle>,
    /// The consumer's stream (`None`: none, or `-1`: no synchronisation).
    consumer: Option<StreamHandle>,
    /// The consumer asked for no synchronisation (`stream=-1`).
    no_sync: bool,
    want_copy: bool,
    forbid_copy: bool,
}

impl Planner<'_> {
    fn plan(&self, kind: TransferKind, is_copied: bool, steps: Vec<Step>) -> TransferPlan {
        TransferPlan {
            kind,
            target: self.target,
            is_copied,
            consumer_stream: self.consumer,
            steps,
        }
    }

    fn unsupported(&self, why: &str) -> DlpackError {
        err(
            FailureKind::UnsupportedDevice,
            format!(
                "cannot export a tensor on {} to dl_device={}{why}",
                self.src, self.target
            ),
        )
    }

    fn copy_required(&self) -> DlpackError {
        err(
            FailureKind::CopyRequired,
            format!(
                "exporting a tensor on {} to dl_device={} needs a copy, but copy=False",
                self.src, self.target
            ),
        )
    }

    /// Same device with streams (CUDA, ROCm): zero-copy with the streams ordered, or (CUDA,
    /// copy=True) a device copy on the consumer stream after it waited for the producer's.
    fn same_stream_device(&self) -> Result<TransferPlan> {
        let (dev, req) = (self.src, self.req);
        let mut steps = Vec::new();
        if !self.want_copy {
            if let Some(b) = self.consumer {
                order_streams(&mut steps, dev, self.producer, b);
            }
            return Ok(self.plan(TransferKind::ZeroCopy, false, steps));
        }
        if !is_type(dev, DLDeviceType::kDLCUDA) {
            return Err(self.unsupported(" with copy=True: no runtime for this device type"));
        }
        steps.push(Step::AllocDst {
            kind: AllocKind::Device,
            device: dev,
            bytes: req.bytes,
        });
        // The copy runs on the consumer stream B after B waited for A; for -1 it runs on A
        // and A is synchronised.
        let copy_stream = match self.consumer {
            Some(b) => {
                order_streams(&mut steps, dev, self.producer, b);
                b
            }
            None => self.producer.unwrap_or(StreamHandle::LEGACY),
        };
        push_device_copy(&mut steps, dev, copy_stream, req, CopyKind::D2D);
        if self.no_sync {
            steps.push(Step::SynchronizeStream {
                device: dev,
                stream: copy_stream,
            });
        }
        Ok(self.plan(TransferKind::SameDevice, true, steps))
    }

    /// Same stream-less device (CPU, CUDAHost, CUDAManaged, ROCMHost, others): zero-copy after
    /// the producer's stream is synchronised, a host copy for CPU, a device copy for pinned or
    /// managed memory.
    fn same_streamless_device(&self) -> Result<TransferPlan> {
        let (src, req) = (self.src, self.req);
        let mut steps = Vec::new();
        let ctx = context_device(src);
        if !self.want_copy {
            if let Some(a) = self.producer {
                steps.push(Step::SynchronizeStream {
                    device: ctx,
                    stream: a,
                });
            }
            return Ok(self.plan(TransferKind::ZeroCopy, false, steps));
        }
        if src.is_cpu() {
            return Ok(self.plan(TransferKind::HostCopy, true, steps));
        }
        if is_type(src, DLDeviceType::kDLCUDAHost) || is_type(src, DLDeviceType::kDLCUDAManaged) {
            let kind = AllocKind::for_device(src).unwrap_or(AllocKind::PinnedHost);
            let stream = self.producer.unwrap_or(StreamHandle::LEGACY);
            steps.push(Step::AllocDst {
                kind,
                device: ctx,
                bytes: req.bytes,
            });
            push_device_copy(&mut steps, ctx, stream, req, CopyKind::D2D);
            steps.push(Step::SynchronizeStream {
                device: ctx,
                stream,
            });
            return Ok(self.plan(TransferKind::SameDevice, true, steps));
        }
        Err(self.unsupported(" with copy=True: no runtime for this device type"))
    }

    /// CUDA → CPU / CUDAHost: device-to-host copy into pinned memory (through a contiguous
    /// device temporary for strided data).
    fn device_to_host(&self, target_is_pinned: bool) -> Result<TransferPlan> {
        if self.forbid_copy {
            return Err(self.copy_required());
        }
        let (dev, req) = (self.src, self.req);
        let mut steps = Vec::new();
        // Stream-less target: the copy is ordered after the producer's work by running on
        // the producer stream, which is then synchronised.
        let stream = self.producer.unwrap_or(StreamHandle::LEGACY);
        steps.push(Step::AllocDst {
            kind: AllocKind::PinnedHost,
            device: dev,
            bytes: req.bytes,
        });
        if req.contiguous {
            steps.push(Step::Copy {
                device: dev,
                kind: CopyKind::D2H,
                stream,
                from: Buf::Src,
                to: Buf::Dst,
                bytes: req.bytes,
            });
            steps.push(Step::SynchronizeStream {
                device: dev,
                stream,
            });
        } else {
            steps.push(Step::AllocTemp {
                device: dev,
                bytes: req.bytes,
            });
            steps.push(Step::StridedCopy {
                device: dev,
                stream,
                to: Buf::Temp,
            });
            steps.push(Step::Copy {
                device: dev,
                kind: CopyKind::D2H,
                stream,
                from: Buf::Temp,
                to: Buf::Dst,
                bytes: req.bytes,
            });
            steps.push(Step::SynchronizeStream {
                device: dev,
                stream,
            });
            steps.push(Step::FreeTemp);
        }
        Ok(TransferPlan {
            kind: TransferKind::DeviceToHost,
            target: if target_is_pinned {
                self.target
            } else {
                Device::CPU
            },
            is_copied: true,
            consumer_stream: None,
            steps,
        })
    }

    /// Host-accessible GPU memory (pinned, managed, ROCm host) → CPU: no copy needed, the
    /// producer's stream synchronised.
    fn host_accessible_to_cpu(&self) -> TransferPlan {
        let mut steps = Vec::new();
        if let Some(a) = self.producer {
            steps.push(Step::SynchronizeStream {
                device: context_device(self.src),
                stream: a,
            });
        }
        let kind = if self.want_copy {
            TransferKind::HostCopy
        } else {
            TransferKind::ZeroCopy
        };
        self.plan(kind, self.want_copy, steps)
    }

    /// CPU → CUDA: host-to-device copy on the consumer stream (synchronised when the consumer
    /// gave none). C-contiguous data only.
    fn host_to_device(&self) -> Result<TransferPlan> {
        if self.forbid_copy {
            return Err(self.copy_required());
        }
        let (dev, req) = (self.target, self.req);
        if !req.contiguous {
            return Err(err(
                FailureKind::UnsupportedLayout,
                format!(
                    "a host-to-device export to {dev} needs a C-contiguous tensor; make it contiguous first"
                ),
            ));
        }
        let stream = self.consumer.unwrap_or(StreamHandle::LEGACY);
        let mut steps = vec![
            Step::AllocDst {
                kind: AllocKind::Device,
                device: dev,
                bytes: req.bytes,
            },
            Step::Copy {
                device: dev,
                kind: CopyKind::H2D,
                stream,
                from: Buf::Src,
                to: Buf::Dst,
                bytes: req.bytes,
            },
        ];
        if self.consumer.is_none() {
            steps.push(Step::SynchronizeStream {
                device: dev,
                stream,
            });
        }
        Ok(self.plan(TransferKind::HostToDevice, true, steps))
    }
}

/// Steps that make work of producer stream `producer` visible on consumer stream `consumer`.
fn order_streams(
    steps: &mut Vec<Step>,
    device: Device,
    producer: Option<StreamHandle>,
    consumer: StreamHandle,
) {
    if let Some(a) = producer
        && !same_stream(device, a, consumer)
    {
        steps.push(Step::RecordEvent { device, stream: a });
        steps.push(Step::WaitEvent {
            device,
            stream: consumer,
        });
        steps.push(Step::DestroyEvent { device });
    }
}

fn push_device_copy(
    steps: &mut Vec<Step>,
    dev: Device,
    stream: StreamHandle,
    req: &TransferRequest,
    kind: CopyKind,
) {
    if req.contiguous {
        steps.push(Step::Copy {
            device: dev,
            kind,
            stream,
            from: Buf::Src,
            to: Buf::Dst,
            bytes: req.bytes,
        });
    } else {
        steps.push(Step::StridedCopy {
            device: dev,
            stream,
            to: Buf::Dst,
        });
    }
}
