//! `__dlpack__` negotiation in pure Rust: what the consumer asked for ([`ExportRequest`]) and
//! what the producer will do ([`ExportPlan`]). No Python here, so it is unit-tested directly.
//!
//! Every rule below is the array API 2024.12 / DLPack 1.3 text (see `docs/architecture.md`):
//! * `max_version` `None` or major < 1 → legacy `"dltensor"`; major ≥ 1 → versioned at
//!   the generated `DLPACK_MAJOR_VERSION.DLPACK_MINOR_VERSION`.
//! * `dl_device`: the source's own device, or `(kDLCPU, 0)` for host-accessible memory
//!   (CUDAHost / CUDAManaged / ROCMHost) without a copy; anything else needs a cross-device copy,
//!   which the GPU planner ([`crate::gpu::plan_transfer`]) must be able to serve (else
//!   `UnsupportedDevice`); `export::managed` runs it.
//! * `stream`: validated with the generated `resolve_stream` for the **target** device.
//! * `copy=True` → a real copy (IS_COPIED when versioned; a legacy capsule carries no flags,
//!   so a legacy copy is made without one, as numpy does); `copy=False` when a copy would be
//!   needed → `CopyRequired`.
//! * read-only data + legacy request: the legacy capsule has no READ_ONLY flag, so the memory
//!   cannot be reused; `copy=None` ("reuse the existing memory buffer if possible and copy
//!   otherwise") gets a private, writable copy (no flags, as a legacy `copy=True`), `copy=False`
//!   `ReadOnlyLegacy` (BufferError), as does a device no runtime can copy on. Versioned →
//!   READ_ONLY, zero-copy. Data of unknown writability (a legacy import) → READ_ONLY when
//!   versioned, as it is when legacy (it loses nothing it had). Decision 0024.

use crate::device::Device;
use crate::error::DlpackError;
use crate::ffi::{
    DLPACK_FLAG_BITMASK_IS_COPIED, DLPACK_FLAG_BITMASK_READ_ONLY, DLPACK_MAJOR_VERSION,
    DLPACK_MINOR_VERSION, DLPackVersion,
};
use crate::spec::errors::FailureKind;
use crate::spec::streams::{StreamAction, resolve_stream};
use crate::writability::Writability;

/// The version dlbind writes into versioned capsules (from the generated constants).
pub const EXPORT_VERSION: DLPackVersion = DLPackVersion {
    major: DLPACK_MAJOR_VERSION,
    minor: DLPACK_MINOR_VERSION,
};

/// The parsed keyword arguments of `__dlpack__` (types already checked).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExportRequest {
    /// `max_version` as given; `None` = not given / `None`. Majors beyond `i64` saturate.
    pub max_version: Option<(i64, i64)>,
    /// `copy`: `None` = copy only if needed, `Some(true)` = always, `Some(false)` = never.
    pub copy: Option<bool>,
    /// `dl_device`: the target device; `None` = the source's device.
    pub dl_device: Option<Device>,
    /// `stream`: `None` or an int.
    pub stream: Option<i64>,
}

impl ExportRequest {
    /// `__dlpack__()` with no arguments.
    pub const DEFAULT: ExportRequest = ExportRequest {
        max_version: None,
        copy: None,
        dl_device: None,
        stream: None,
    };

    /// `__dlpack__(max_version=(1, 0))`: what any `max_version` with a major of at least 1 and
    /// nothing else asks for (only the major decides, [`Self::wants_versioned`]).
    pub(crate) const VERSIONED: ExportRequest = ExportRequest {
        max_version: Some((1, 0)),
        ..ExportRequest::DEFAULT
    };

    /// Whether a versioned capsule is requested (`max_version[0] >= 1`).
    pub const fn wants_versioned(&self) -> bool {
        match self.max_version {
            Some((major, _)) => major >= 1,
            None => false,
        }
    }
}

/// What the source is, as far as negotiation cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourceInfo {
    pub device: Device,
    pub writability: Writability,
}

/// How the export will be produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExportPlan {
    /// `DLManagedTensorVersioned` in a `"dltensor_versioned"` capsule, else legacy.
    pub versioned: bool,
    /// Whether the data is copied into a fresh host buffer.
    pub copy: bool,
    /// Flags for the versioned struct (0 for legacy).
    pub flags: u64,
    /// The device the exported tensor reports.
    pub device: Device,
    /// What the stream argument asks for on the target device.
    pub stream: StreamAction,
}

/// Decides how to serve `req` for a source described by `src`.
///
/// Which device pairs can be served with a copy is answered by the GPU planner
/// ([`crate::gpu::can_copy`]), the one place that knows the device runtimes; whether a driver
/// is actually present is only known when the copy runs (`DeviceUnavailable`, BufferError).
#[inline(always)]
pub fn plan_export(req: &ExportRequest, src: SourceInfo) -> Result<ExportPlan, DlpackError> {
    let versioned = req.wants_versioned();
    if req.dl_device.is_none()
        && req.copy.is_none()
        && req.stream.is_none()
        && src.device == Device::CPU
    {
        // The common call (`x.__dlpack__()` or only `max_version`) of host memory: no device,
        // copy or stream question arises, only the version and the read-only rule below (the
        // same answers as the general path; the stream rule folds to a constant).
        let stream = resolve_stream(Device::CPU.device_type, None).map_err(DlpackError::from)?;
        if let Some(flags) = reuse_flags(src.writability, versioned) {
            return Ok(ExportPlan {
                versioned,
                copy: false,
                flags,
                device: Device::CPU,
                stream,
            });
        }
        // Read-only memory asked for in a legacy capsule: not reusable, so the general path
        // below plans its copy (this path's exports stay copy-free, which the callers' as-is
        // branch folds).
    }
    let target = req.dl_device.unwrap_or(src.device);

    // Device: the same device, or host-accessible memory viewed as (kDLCPU, 0), needs no copy.
    let same_memory =
        target == src.device || (target == Device::CPU && src.device.is_host_accessible());
    let cross_device = !same_memory;
    if cross_device {
        if req.copy == Some(false) && crate::gpu::can_copy(src.device, target) {
            return Err(DlpackError::new(
                FailureKind::CopyRequired,
                format!(
                    "exporting from device {} to {target} requires a copy, but copy=False",
                    src.device
                ),
            ));
        }
        if !crate::gpu::can_copy(src.device, target) {
            return Err(DlpackError::new(
                FailureKind::UnsupportedDevice,
                format!(
                    "unsupported device requested: cannot export from device {} to {target}",
                    src.device
                ),
            ));
        }
    }

    // Stream: validated for the device the consumer will use.
    let stream = resolve_stream(target.device_type, req.stream).map_err(DlpackError::from)?;

    let mut copy = cross_device || req.copy == Some(true);
    if copy && !cross_device {
        // A same-device copy (copy=True): fine into plain host memory; pinned/managed/device
        // memory needs a device runtime that can allocate there (issue 4).
        if !crate::gpu::can_copy(src.device, target) {
            return Err(DlpackError::new(
                FailureKind::UnsupportedDevice,
                format!(
                    "copy=True is not supported for memory on device {}",
                    src.device
                ),
            ));
        }
    }

    let mut flags = 0;
    if copy {
        // A fresh buffer is writable. Legacy capsules cannot carry IS_COPIED (numpy's choice:
        // copy anyway, without a flag).
        if versioned {
            flags |= DLPACK_FLAG_BITMASK_IS_COPIED;
        }
    } else {
        match reuse_flags(src.writability, versioned) {
            Some(f) => flags |= f,
            // Reuse is not possible (read-only memory, a legacy capsule): a private copy when
            // the consumer allows one and a runtime can make it on this device.
            None if req.copy.is_none() && crate::gpu::can_copy(src.device, target) => copy = true,
            None => return Err(read_only_legacy(req.copy)),
        }
    }

    Ok(ExportPlan {
        versioned,
        copy,
        flags,
        device: target,
        stream,
    })
}

/// The read-only rule for memory exported as it is: the flags its capsule carries, or `None`
/// when it cannot be reused (known read-only memory asked for in a legacy capsule, which has no
/// READ_ONLY flag). READ_ONLY in a versioned capsule unless the data is writable; a legacy
/// capsule (no flags) for writable data and for data of unknown writability (a legacy import:
/// it loses nothing it had).
#[inline]
pub(crate) fn reuse_flags(w: Writability, versioned: bool) -> Option<u64> {
    match w {
        Writability::Writable => Some(0),
        _ if versioned => Some(DLPACK_FLAG_BITMASK_READ_ONLY),
        Writability::Unknown => Some(0),
        Writability::ReadOnly => None,
    }
}

/// The `ReadOnlyLegacy` error: read-only memory asked for in a legacy capsule, and no copy
/// allowed (`copy=False`) or possible (no runtime copies on its device). Out of line.
#[cold]
#[inline(never)]
pub(crate) fn read_only_legacy(copy: Option<bool>) -> DlpackError {
    let why = if copy == Some(false) {
        "and copy=False forbids the copy that would serve it (pass copy=None, or max_version=(1, 0) or newer)"
    } else {
        "and no copy can be made on its device (pass max_version=(1, 0) or newer)"
    };
    DlpackError::new(
        FailureKind::ReadOnlyLegacy,
        format!(
            "cannot export a read-only array without max_version >= (1, 0): the legacy DLPack capsule cannot \
             signal read-only, {why}"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ffi::DLDeviceType;

    const CPU_RW: SourceInfo = SourceInfo {
        device: Device::CPU,
        writability: Writability::Writable,
    };
    const CPU_RO: SourceInfo = SourceInfo {
        device: Device::CPU,
        writability: Writability::ReadOnly,
    };

    fn req(
        max_version: Option<(i64, i64)>,
        copy: Option<bool>,
        dl_device: Option<Device>,
        stream: Option<i64>,
    ) -> ExportRequest {
        ExportRequest {
            max_version,
            copy,
            dl_device,
            stream,
        }
    }

    fn kind(r: Result<ExportPlan, DlpackError>) -> FailureKind {
        r.expect_err("expected an error").kind()
    }

    #[test]
    fn max_version_selects_abi() {
        for mv in [None, Some((0, 0)), Some((0, 8)), Some((-5, 3))] {
            let p = plan_export(&req(mv, None, None, None), CPU_RW).unwrap();
            assert!(!p.versioned, "{mv:?}");
            assert_eq!(p.flags, 0);
        }
        for mv in [
            Some((1, 0)),
            Some((1, 3)),
            Some((2, 0)),
            Some((100, 3)),
            Some((i64::MAX, 0)),
        ] {
            let p = plan_export(&req(mv, None, None, None), CPU_RW).unwrap();
            assert!(p.versioned, "{mv:?}");
            assert!(!p.copy);
        }
        assert_eq!(EXPORT_VERSION.major, DLPACK_MAJOR_VERSION);
        assert_eq!(EXPORT_VERSION.minor, DLPACK_MINOR_VERSION);
    }

    #[test]
    fn unknown_writability_leaves_legacy_and_versioned_read_only() {
        let unknown = SourceInfo {
            device: Device::CPU,
            writability: Writability::Unknown,
        };
        // Both paths of plan_export: the host fast path and the general one (copy=False).
        for copy in [None, Some(false)] {
            let p = plan_export(&req(None, copy, None, None), unknown).unwrap();
            assert!(!p.versioned && !p.copy && p.flags == 0, "{copy:?}");
            let p = plan_export(&req(Some((1, 0)), copy, None, None), unknown).unwrap();
            assert!(p.versioned && !p.copy, "{copy:?}");
            assert_eq!(p.flags, DLPACK_FLAG_BITMASK_READ_ONLY, "{copy:?}");
        }
    }

    #[test]
    fn readonly_rules() {
        // A legacy request for known read-only memory cannot reuse it (no READ_ONLY flag):
        // copy=None gets a private, writable copy, from both paths of plan_export (the host
        // fast path, and the general one that `dl_device=(kDLCPU, 0)` takes), with no flags.
        for mv in [None, Some((0, 9)), Some((-1, 0))] {
            for dl_device in [None, Some(Device::CPU)] {
                let p = plan_export(&req(mv, None, dl_device, None), CPU_RO).unwrap();
                assert!(p.copy && !p.versioned && p.flags == 0, "{mv:?} {dl_device:?}");
                assert_eq!(p.device, Device::CPU);
                // copy=False forbids the copy: the spec's ReadOnlyLegacy, naming copy=False.
                let e = plan_export(&req(mv, Some(false), dl_device, None), CPU_RO).unwrap_err();
                assert_eq!(e.kind(), FailureKind::ReadOnlyLegacy, "{mv:?} {dl_device:?}");
                assert!(e.to_string().contains("copy=False"), "{e}");
            }
        }
        // Versioned: zero-copy with READ_ONLY, whatever copy says but True.
        for c in [None, Some(false)] {
            let p = plan_export(&req(Some((1, 0)), c, None, None), CPU_RO).unwrap();
            assert!(!p.copy && p.flags == DLPACK_FLAG_BITMASK_READ_ONLY, "{c:?}");
        }
        // A copy is writable, so read-only data can be copied even into a legacy capsule.
        let p = plan_export(&req(None, Some(true), None, None), CPU_RO).unwrap();
        assert!(p.copy && !p.versioned && p.flags == 0);
        let p = plan_export(&req(Some((1, 3)), Some(true), None, None), CPU_RO).unwrap();
        assert_eq!(p.flags, DLPACK_FLAG_BITMASK_IS_COPIED);
        // Read-only device memory: a legacy copy=None is a same-device copy where a runtime
        // serves one (CUDA), and ReadOnlyLegacy where none does (ROCm), never a flagless view.
        let ro = |device| SourceInfo {
            device,
            writability: Writability::ReadOnly,
        };
        let p = plan_export(&req(None, None, None, Some(1)), ro(Device::cuda(0))).unwrap();
        assert!(p.copy && !p.versioned && p.flags == 0 && p.device == Device::cuda(0));
        let e = plan_export(&req(None, None, None, Some(0)), ro(Device::rocm(0))).unwrap_err();
        assert_eq!(e.kind(), FailureKind::ReadOnlyLegacy);
        assert!(e.to_string().contains("no copy can be made"), "{e}");
        // Pinned host memory viewed as (kDLCPU, 0): a host copy.
        let p = plan_export(
            &req(None, None, Some(Device::CPU), None),
            ro(Device::CUDA_HOST),
        )
        .unwrap();
        assert!(p.copy && p.flags == 0 && p.device == Device::CPU);
    }

    #[test]
    fn read_only_memory_never_leaves_flagless_uncopied() {
        // Exhaustively over the request space: whenever the plan reuses known read-only
        // memory, the capsule is versioned and says READ_ONLY.
        let devices = [
            None,
            Some(Device::CPU),
            Some(Device::cuda(0)),
            Some(Device::CUDA_HOST),
        ];
        let versions = [None, Some((0, 0)), Some((1, 0)), Some((2, 5))];
        for src_dev in [Device::CPU, Device::cuda(0), Device::CUDA_HOST, Device::rocm(0)] {
            let src = SourceInfo {
                device: src_dev,
                writability: Writability::ReadOnly,
            };
            for mv in versions {
                for copy in [None, Some(true), Some(false)] {
                    for dl in devices {
                        for stream in [None, Some(1)] {
                            if let Ok(p) = plan_export(&req(mv, copy, dl, stream), src) {
                                assert!(
                                    p.copy || (p.versioned && p.flags & DLPACK_FLAG_BITMASK_READ_ONLY != 0),
                                    "{src_dev} {mv:?} {copy:?} {dl:?} {stream:?}: {p:?}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn copy_rules() {
        let p = plan_export(&req(Some((1, 0)), Some(true), None, None), CPU_RW).unwrap();
        assert!(p.copy);
        assert_eq!(p.flags, DLPACK_FLAG_BITMASK_IS_COPIED);
        let p = plan_export(&req(None, Some(true), None, None), CPU_RW).unwrap();
        assert!(p.copy && p.flags == 0, "legacy copy carries no flags");
        for c in [None, Some(false)] {
            let p = plan_export(&req(Some((1, 0)), c, None, None), CPU_RW).unwrap();
            assert!(!p.copy && p.flags == 0);
        }
    }

    #[test]
    fn device_rules() {
        // Own device and (kDLCPU, 0) are fine.
        for d in [None, Some(Device::CPU)] {
            let p = plan_export(&req(None, None, d, None), CPU_RW).unwrap();
            assert_eq!(p.device, Device::CPU);
        }
        // Devices no runtime can copy to are refused with BufferError (UnsupportedDevice),
        // whatever copy says.
        for d in [
            Device::new(DLDeviceType(9), 0),
            Device::new(DLDeviceType::kDLCPU, 1 << 30),
            Device::rocm(0),
            Device::oneapi(0),
        ] {
            for c in [None, Some(true), Some(false)] {
                let k = kind(plan_export(&req(Some((1, 0)), c, Some(d), None), CPU_RW));
                assert_eq!(k, FailureKind::UnsupportedDevice, "{d:?} {c:?}");
                assert_eq!(
                    k.exception(),
                    crate::spec::errors::PyExceptionKind::BufferError
                );
            }
        }
        // Host → CUDA is a host-to-device copy (the GPU planner serves it); copy=False refuses.
        let p = plan_export(
            &req(Some((1, 0)), None, Some(Device::cuda(0)), Some(1)),
            CPU_RW,
        )
        .unwrap();
        assert!(p.copy && p.flags == DLPACK_FLAG_BITMASK_IS_COPIED && p.device == Device::cuda(0));
        assert_eq!(
            kind(plan_export(
                &req(Some((1, 0)), Some(false), Some(Device::cuda(0)), Some(1)),
                CPU_RW
            )),
            FailureKind::CopyRequired
        );
        // Host-accessible memory is exported to CPU without a copy, even with copy=False.
        for src in [Device::CUDA_HOST, Device::CUDA_MANAGED, Device::ROCM_HOST] {
            let s = SourceInfo {
                device: src,
                writability: Writability::Writable,
            };
            let p =
                plan_export(&req(Some((1, 0)), Some(false), Some(Device::CPU), None), s).unwrap();
            assert!(!p.copy);
            assert_eq!(p.device, Device::CPU);
            // copy=True on such memory is a host copy.
            let p =
                plan_export(&req(Some((1, 0)), Some(true), Some(Device::CPU), None), s).unwrap();
            assert!(p.copy);
        }
        // CUDA memory → CPU: a device-to-host copy, IS_COPIED; copy=False → CopyRequired.
        let s = SourceInfo {
            device: Device::cuda(0),
            writability: Writability::Writable,
        };
        let p = plan_export(&req(Some((1, 0)), None, Some(Device::CPU), None), s).unwrap();
        assert!(p.copy && p.flags == DLPACK_FLAG_BITMASK_IS_COPIED && p.device == Device::CPU);
        assert_eq!(
            kind(plan_export(
                &req(Some((1, 0)), Some(false), Some(Device::CPU), None),
                s
            )),
            FailureKind::CopyRequired
        );
        // Same-device copies of CUDA memory are served; ROCm ones are not (no runtime).
        assert!(
            plan_export(&req(Some((1, 0)), Some(true), None, Some(1)), s)
                .unwrap()
                .copy
        );
        let r = SourceInfo {
            device: Device::rocm(0),
            writability: Writability::Writable,
        };
        assert_eq!(
            kind(plan_export(
                &req(Some((1, 0)), Some(true), None, Some(0)),
                r
            )),
            FailureKind::UnsupportedDevice
        );
        // Another GPU is not served (no peer copies).
        assert_eq!(
            kind(plan_export(
                &req(Some((1, 0)), None, Some(Device::cuda(1)), Some(1)),
                s
            )),
            FailureKind::UnsupportedDevice
        );
        // Zero-copy export of device memory on its own device is fine.
        let p = plan_export(&req(Some((1, 0)), None, None, Some(1)), s).unwrap();
        assert_eq!(p.device, Device::cuda(0));
        assert!(!p.copy);
    }

    #[test]
    fn device_decisions_agree_with_the_gpu_planner() {
        // One source of truth: for every pair, the negotiation layer serves a cross-device
        // request exactly when the GPU planner can copy it.
        let devices = [
            Device::CPU,
            Device::cuda(0),
            Device::cuda(1),
            Device::CUDA_HOST,
            Device::CUDA_MANAGED,
            Device::rocm(0),
            Device::ROCM_HOST,
            Device::oneapi(0),
        ];
        for from in devices {
            for to in devices {
                let s = SourceInfo {
                    device: from,
                    writability: Writability::Writable,
                };
                let stream = crate::spec::streams::consumer_default_stream(to.device_type);
                let ours = plan_export(&req(Some((1, 0)), Some(true), Some(to), stream), s);
                assert_eq!(
                    ours.is_ok(),
                    crate::gpu::can_copy(from, to),
                    "{from} -> {to}: {ours:?}"
                );
            }
        }
    }

    #[test]
    fn streams_follow_generated_rules_for_target_device() {
        use crate::spec::streams::resolve_stream;
        // CPU: only None.
        assert_eq!(
            plan_export(&req(None, None, None, None), CPU_RW)
                .unwrap()
                .stream,
            resolve_stream(DLDeviceType::kDLCPU, None).unwrap()
        );
        for s in [-1, 0, 1, 2, 7] {
            let e = plan_export(&req(None, None, None, Some(s)), CPU_RW).unwrap_err();
            assert_eq!(e.kind(), FailureKind::InvalidStream);
            assert_eq!(
                e.exception(),
                crate::spec::errors::PyExceptionKind::ValueError
            );
        }
        // CUDA source: every stream value is checked by the generated table, nothing else.
        let cuda = SourceInfo {
            device: Device::cuda(0),
            writability: Writability::Writable,
        };
        for s in [
            None,
            Some(-1),
            Some(0),
            Some(1),
            Some(2),
            Some(3),
            Some(1 << 40),
        ] {
            let ours = plan_export(&req(Some((1, 0)), None, None, s), cuda).map(|p| p.stream);
            let generated = resolve_stream(DLDeviceType::kDLCUDA, s);
            assert_eq!(ours.is_ok(), generated.is_ok(), "{s:?}");
            if let (Ok(a), Ok(b)) = (ours, generated) {
                assert_eq!(a, b);
            }
        }
        let rocm = SourceInfo {
            device: Device::rocm(0),
            writability: Writability::Writable,
        };
        for s in [None, Some(-1), Some(0), Some(1), Some(2), Some(3)] {
            let ours = plan_export(&req(Some((1, 0)), None, None, s), rocm).map(|p| p.stream);
            assert_eq!(
                ours.is_ok(),
                resolve_stream(DLDeviceType::kDLROCM, s).is_ok(),
                "{s:?}"
            );
        }
        // The stream is checked against the target: managed memory exported to CPU takes None only.
        let managed = SourceInfo {
            device: Device::CUDA_MANAGED,
            writability: Writability::Writable,
        };
        assert!(
            plan_export(
                &req(Some((1, 0)), None, Some(Device::CPU), Some(1)),
                managed
            )
            .is_err()
        );
        assert!(plan_export(&req(Some((1, 0)), None, Some(Device::CPU), None), managed).is_ok());
    }
}
