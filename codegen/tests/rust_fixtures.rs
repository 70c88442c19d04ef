//! The `custom` fixture's Rust output compiles and follows its spec (a user
//! spec with an extra device type that has its own stream rule).
#![deny(warnings)]

mod harness;

include_generated!("tests/fixtures/custom", "tests/fixtures/custom/spec.yaml");

#[test]
fn custom_device_and_stream_rule() {
    use stream_rules::{StreamAction, resolve_stream};
    assert_eq!(ffi::DLDeviceType::kDLAcme.name(), Some("kDLAcme"));
    assert_eq!(
        resolve_stream(ffi::DLDeviceType::kDLAcme, Some(7)),
        Ok(StreamAction::AcmeQueue(7))
    );
    assert!(resolve_stream(ffi::DLDeviceType::kDLAcme, Some(0)).is_err());
    assert_eq!(
        dtype_table::dtype_by_name("float32x4").unwrap().dtype.lanes,
        4
    );
    assert_eq!(<f32 as element::DLPackElement>::NAME, "float32");
}
