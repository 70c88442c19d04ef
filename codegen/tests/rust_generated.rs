//! `generated/rust/*.rs` compiles as the runtime includes it (Contract 1) and
//! behaves as `spec/dlpack.yaml` says.
#![deny(warnings)]

mod harness;

include_generated!("generated", "spec/dlpack.yaml");

use element::DLPackElement;
use harness::{half, num_complex};

#[test]
fn element_impls() {
    assert_eq!(
        <f32 as DLPackElement>::DTYPE,
        ffi::DLDataType {
            code: 2,
            bits: 32,
            lanes: 1
        }
    );
    assert_eq!(<f32 as DLPackElement>::NAME, "float32");
    assert_eq!(
        <bool as DLPackElement>::DTYPE,
        ffi::DLDataType {
            code: 6,
            bits: 8,
            lanes: 1
        }
    );
    assert_eq!(<u64 as DLPackElement>::NAME, "uint64");
    assert_eq!(
        <half::f16 as DLPackElement>::DTYPE,
        ffi::DLDataType {
            code: 2,
            bits: 16,
            lanes: 1
        }
    );
    assert_eq!(
        <half::bf16 as DLPackElement>::DTYPE,
        ffi::DLDataType {
            code: 4,
            bits: 16,
            lanes: 1
        }
    );
    assert_eq!(
        <num_complex::Complex<f32> as DLPackElement>::DTYPE,
        ffi::DLDataType {
            code: 5,
            bits: 64,
            lanes: 1
        }
    );
    assert_eq!(
        <num_complex::Complex<f64> as DLPackElement>::NAME,
        "complex128"
    );
}

#[test]
fn contract_1_constants() {
    assert_eq!(ffi::DLPACK_FLAG_BITMASK_READ_ONLY, 1u64);
    assert_eq!(ffi::DLPACK_FLAG_BITMASK_IS_COPIED, 2u64);
    assert_eq!(ffi::DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED, 4u64);
    assert_eq!(ffi::DLPACK_CAPSULE_NAME, c"dltensor");
    assert_eq!(ffi::DLPACK_USED_CAPSULE_NAME, c"used_dltensor");
    assert_eq!(
        ffi::DLPACK_EXCHANGE_API_CAPSULE_NAME,
        c"dlpack_exchange_api"
    );
    assert_eq!(ffi::DLPACK_EXCHANGE_API_ATTR, "__dlpack_c_exchange_api__");
    assert_eq!(ffi::DLDeviceType::kDLTrn, ffi::DLDeviceType(18));
    assert_eq!(
        ffi::DLDataTypeCode::kDLFloat4_e2m1fn,
        ffi::DLDataTypeCode(17)
    );
    use stream_rules::{StreamAction as A, resolve_stream};
    let cuda = ffi::DLDeviceType::kDLCUDA;
    let rocm = ffi::DLDeviceType::kDLROCM;
    assert_eq!(resolve_stream(cuda, None), Ok(A::LegacyDefault));
    assert_eq!(resolve_stream(cuda, Some(2)), Ok(A::PerThreadDefault));
    assert!(resolve_stream(cuda, Some(0)).is_err());
    assert_eq!(resolve_stream(rocm, None), Ok(A::DefaultStream));
    assert!(resolve_stream(rocm, Some(2)).is_err());
    assert_eq!(resolve_stream(rocm, Some(12345)), Ok(A::Pointer(12345)));
    assert!(resolve_stream(ffi::DLDeviceType::kDLCPU, Some(-1)).is_err());
    use failure::{FailureKind as F, PyExceptionKind as P};
    assert_eq!(F::CopyRequired.exception(), P::BufferError);
    assert_eq!(F::CapsuleConsumed.exception(), P::ValueError);
    assert_eq!(F::NoProtocol.exception(), P::AttributeError);
    assert_eq!(F::OutOfMemory.exception(), P::MemoryError);
    assert_eq!(F::BadArgumentType.exception(), P::TypeError);
}
