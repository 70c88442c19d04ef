//! `Device`: where an array's memory lives (a DLPack `DLDevice` with a friendlier API).
//!
//! Device-type constants come from the generated [`DLDeviceType`] (an open newtype: unknown
//! values from newer producers are representable).

use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::ffi::{DLDevice, DLDeviceType};

/// A device: DLPack device type and ordinal.
///
/// Aligned to 8 bytes so that it moves as one 64-bit word (the export hot path copies it
/// through several small structs; two 32-bit stores read back as one 64-bit load stall the
/// store buffer).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[repr(C, align(8))]
pub struct Device {
    pub device_type: DLDeviceType,
    pub device_id: i32,
}

impl Default for Device {
    fn default() -> Self {
        Device::CPU
    }
}

impl Device {
    /// Host memory (`kDLCPU`, id 0).
    pub const CPU: Device = Device::new(DLDeviceType::kDLCPU, 0);
    /// Pinned host memory (`kDLCUDAHost`, id 0).
    pub const CUDA_HOST: Device = Device::new(DLDeviceType::kDLCUDAHost, 0);
    /// CUDA managed (unified) memory (`kDLCUDAManaged`, id 0).
    pub const CUDA_MANAGED: Device = Device::new(DLDeviceType::kDLCUDAManaged, 0);
    /// ROCm pinned host memory (`kDLROCMHost`, id 0).
    pub const ROCM_HOST: Device = Device::new(DLDeviceType::kDLROCMHost, 0);

    /// Any device type and ordinal.
    pub const fn new(device_type: DLDeviceType, device_id: i32) -> Device {
        Device {
            device_type,
            device_id,
        }
    }
    /// CUDA device memory on GPU `id`.
    pub const fn cuda(id: i32) -> Device {
        Device::new(DLDeviceType::kDLCUDA, id)
    }
    /// Pinned host memory (`kDLCUDAHost`), reported with ordinal `id` (normally 0).
    pub const fn cuda_host(id: i32) -> Device {
        Device::new(DLDeviceType::kDLCUDAHost, id)
    }
    /// CUDA managed memory (`kDLCUDAManaged`), ordinal `id` (normally 0).
    pub const fn cuda_managed(id: i32) -> Device {
        Device::new(DLDeviceType::kDLCUDAManaged, id)
    }
    /// ROCm device memory on GPU `id`.
    pub const fn rocm(id: i32) -> Device {
        Device::new(DLDeviceType::kDLROCM, id)
    }
    /// ROCm pinned host memory, ordinal `id` (normally 0).
    pub const fn rocm_host(id: i32) -> Device {
        Device::new(DLDeviceType::kDLROCMHost, id)
    }
    /// oneAPI (SYCL USM) memory on device `id`.
    pub const fn oneapi(id: i32) -> Device {
        Device::new(DLDeviceType::kDLOneAPI, id)
    }
    /// Metal memory on device `id`.
    pub const fn metal(id: i32) -> Device {
        Device::new(DLDeviceType::kDLMetal, id)
    }

    /// Plain host memory (`kDLCPU`).
    pub const fn is_cpu(self) -> bool {
        self.device_type.0 == DLDeviceType::kDLCPU.0
    }

    /// Memory the CPU can read and write directly: the device types the spec marks
    /// `host_accessible` (`kDLCPU`, `kDLCUDAHost`, `kDLCUDAManaged`, `kDLROCMHost`, ...). Such
    /// memory may be exported to `(kDLCPU, 0)` without a copy.
    pub const fn is_host_accessible(self) -> bool {
        self.device_type.is_host_accessible()
    }

    /// The C header's name of the device type (`"kDLCUDA"`), `None` for values this spec
    /// version does not know.
    pub const fn type_name(self) -> Option<&'static str> {
        self.device_type.name()
    }

    /// `(device_type, device_id)` as `__dlpack_device__` returns it.
    pub const fn to_tuple(self) -> (i32, i32) {
        (self.device_type.0, self.device_id)
    }

    /// From a `(device_type, device_id)` tuple.
    pub const fn from_tuple(t: (i32, i32)) -> Device {
        Device::new(DLDeviceType(t.0), t.1)
    }

    /// The ABI struct.
    pub const fn to_dl(self) -> DLDevice {
        DLDevice {
            device_type: self.device_type,
            device_id: self.device_id,
        }
    }

    /// Reads a device argument as `from_dlpack(x, device=…)` does: Python `None` (or no
    /// argument) → `None`, the string `"cpu"`, or a `(device_type, device_id)` tuple of ints.
    /// Another type → TypeError; an unknown string → ValueError (the spec's mapping).
    pub fn from_py_arg(arg: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Device>> {
        crate::args::parse_device_arg(arg)
    }

    /// A Python `(device_type, device_id)` tuple of ints.
    pub fn to_py_tuple<'py>(self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, [self.device_type.0, self.device_id])
    }
}

impl From<DLDevice> for Device {
    fn from(d: DLDevice) -> Self {
        Device::new(d.device_type, d.device_id)
    }
}

impl From<Device> for DLDevice {
    fn from(d: Device) -> Self {
        d.to_dl()
    }
}

impl From<Device> for (i32, i32) {
    fn from(d: Device) -> Self {
        d.to_tuple()
    }
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "({}, {})", self.device_type.0, self.device_id)?;
        if let Some(name) = self.type_name() {
            write!(f, " [{name}]")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consts_come_from_generated_types() {
        assert_eq!(Device::CPU.device_type, DLDeviceType::kDLCPU);
        assert_eq!(Device::cuda(3).to_tuple(), (DLDeviceType::kDLCUDA.0, 3));
        assert!(Device::CUDA_HOST.is_host_accessible());
        assert!(Device::CUDA_MANAGED.is_host_accessible());
        assert!(Device::ROCM_HOST.is_host_accessible());
        assert!(!Device::cuda(0).is_host_accessible());
        let dl: DLDevice = Device::rocm(1).into();
        assert_eq!(Device::from(dl), Device::rocm(1));
        assert_eq!(
            Device::from_tuple(Device::oneapi(2).to_tuple()),
            Device::oneapi(2)
        );
    }
}
