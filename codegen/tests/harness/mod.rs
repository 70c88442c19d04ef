//! Compiles a generated `rust/` folder into the including test crate exactly as
//! the runtime does (Contract 1: `ffi`, `dtype_table`, `element`, `stream_rules`,
//! `failure`, `protocol`), and checks its behaviour against the spec's IR.
//!
//! `half` and `num_complex` are stand-in modules so the test needs no extra
//! dependencies; the generated impls only name their types.

/// Stand-ins for `half::{f16, bf16}`.
#[allow(non_camel_case_types, dead_code)]
pub mod half {
    #[derive(Clone, Copy)]
    pub struct f16(pub u16);
    #[derive(Clone, Copy)]
    pub struct bf16(pub u16);
}

/// Stand-in for `num_complex::Complex`.
#[allow(dead_code)]
pub mod num_complex {
    #[derive(Clone, Copy)]
    pub struct Complex<T> {
        pub re: T,
        pub im: T,
    }
}

/// Include every generated Rust file of `$dir` (relative to the workspace root)
/// at the crate root, and define tests comparing it with the IR of `$spec`.
#[macro_export]
macro_rules! include_generated {
    ($dir:literal, $spec:literal) => {
        pub mod ffi {
            include!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../",
                $dir,
                "/rust/types.rs"
            ));
        }
        pub mod dtype_table {
            include!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../",
                $dir,
                "/rust/dtypes.rs"
            ));
        }
        pub mod element {
            /// # Safety
            /// As `dlbind::DLPackElement`.
            pub unsafe trait DLPackElement: Copy + Send + Sync + 'static {
                const DTYPE: $crate::ffi::DLDataType;
                const NAME: &'static str;
            }
            mod generated {
                #[allow(unused_imports)]
                use $crate::harness::{half, num_complex};
                include!(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/../",
                    $dir,
                    "/rust/elements.rs"
                ));
            }
        }
        pub mod stream_rules {
            include!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../",
                $dir,
                "/rust/streams.rs"
            ));
        }
        pub mod failure {
            include!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../",
                $dir,
                "/rust/errors.rs"
            ));
        }
        pub mod protocol {
            include!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../",
                $dir,
                "/rust/protocol.rs"
            ));
        }
        /// The derive's table (crate `dlbind-macros` ships a copy).
        #[allow(dead_code)]
        pub mod derive_table {
            include!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../",
                $dir,
                "/rust/derive_table.rs"
            ));
        }

        fn spec_ir() -> dlbind_codegen::Ir {
            let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../", $spec);
            dlbind_codegen::Ir::from_path(path).expect("spec")
        }

        #[test]
        fn dtype_table_matches_the_spec() {
            let ir = spec_ir();
            assert_eq!(dtype_table::DTYPES.len(), ir.dtypes.len());
            for (row, d) in dtype_table::DTYPES.iter().zip(&ir.dtypes) {
                assert_eq!(row.name, d.name);
                assert_eq!(
                    (row.dtype.code, row.dtype.bits, row.dtype.lanes),
                    (d.code, d.bits, d.lanes),
                    "{}",
                    d.name
                );
                assert_eq!(row.numpy_typestr, d.numpy.as_deref());
                assert_eq!(row.buffer_format, d.buffer.as_deref());
                assert_eq!(row.rust_type, d.rust.as_deref());
                assert_eq!(dtype_table::dtype_by_name(&d.name), Some(row));
                assert_eq!(dtype_table::dtype_by_dl(row.dtype), Some(row));
                if let Some(t) = &d.numpy {
                    assert_eq!(dtype_table::dtype_by_typestr(t), Some(row));
                }
                if let Some(f) = &d.buffer {
                    assert_eq!(dtype_table::dtype_by_buffer_format(f), Some(row));
                }
            }
            assert_eq!(dtype_table::dtype_by_name("no_such_dtype"), None);
            assert_eq!(dtype_table::dtype_by_typestr(">f4"), None);
            assert_eq!(
                dtype_table::dtype_by_dl(ffi::DLDataType {
                    code: 200,
                    bits: 8,
                    lanes: 1
                }),
                None
            );
            let codes = ir.dtype_code_enum().expect("code enum");
            for code in 0..=255u8 {
                let rule = codes
                    .values
                    .iter()
                    .find(|v| v.value == code as i64)
                    .and_then(|v| v.bits);
                assert_eq!(dtype_table::required_bits(code), rule, "code {code}");
            }
            let impls = include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../",
                $dir,
                "/rust/elements.rs"
            ))
            .matches("impl super::DLPackElement for ")
            .count();
            assert_eq!(impls, ir.dtypes.iter().filter(|d| d.rust.is_some()).count());
        }

        #[test]
        fn derive_table_matches_the_spec() {
            let ir = spec_ir();
            assert_eq!(derive_table::DTYPES.len(), ir.dtypes.len());
            for (&(name, code, bits, lanes, rust), d) in derive_table::DTYPES.iter().zip(&ir.dtypes)
            {
                assert_eq!(
                    (name, code, bits, lanes, rust),
                    (d.name.as_str(), d.code, d.bits, d.lanes, d.rust.as_deref())
                );
            }
            let dl = &ir.protocol.dlpack;
            assert_eq!(derive_table::DLPACK_METHOD, dl.name);
            assert_eq!(
                derive_table::DLPACK_DEVICE_METHOD,
                ir.protocol.dlpack_device.name
            );
            let kw = |c: &str| {
                dl.kwargs
                    .iter()
                    .find(|k| k.const_name == c)
                    .map(|k| k.name.as_str())
            };
            assert_eq!(derive_table::KW_STREAM, kw("KW_STREAM"));
            assert_eq!(derive_table::KW_MAX_VERSION, kw("KW_MAX_VERSION"));
            assert_eq!(derive_table::KW_DL_DEVICE, kw("KW_DL_DEVICE"));
            assert_eq!(derive_table::KW_COPY, kw("KW_COPY"));
            let names: Vec<&str> = dl.kwargs.iter().map(|k| k.name.as_str()).collect();
            assert_eq!(derive_table::DLPACK_KWARGS, names.as_slice());
            assert_eq!(
                derive_table::EXCHANGE_ATTR,
                ir.exchange_attribute.as_ref().map(|a| a.value.as_str())
            );
        }

        #[test]
        fn enums_match_the_spec() {
            let ir = spec_ir();
            let dev = ir.device_enum().expect("device enum");
            for v in &dev.values {
                assert_eq!(
                    ffi::DLDeviceType(v.value as i32).name(),
                    Some(v.name.as_str())
                );
            }
            assert_eq!(ffi::DLDeviceType(-7).name(), None);
            let codes = ir.dtype_code_enum().expect("code enum");
            for v in &codes.values {
                assert_eq!(
                    ffi::DLDataTypeCode(v.value as u8).name(),
                    Some(v.name.as_str())
                );
            }
        }

        #[test]
        fn stream_rules_match_the_spec() {
            use stream_rules::{StreamAction, consumer_default_stream, resolve_stream};
            let ir = spec_ir();
            let s = &ir.streams;
            let dev = ir.device_enum().expect("device enum");
            let mut devices: Vec<i64> = dev.values.iter().map(|v| v.value).collect();
            devices.extend([0, 5, 99, 1000, -1]);
            let streams = [
                None,
                Some(-5),
                Some(-2),
                Some(-1),
                Some(0),
                Some(1),
                Some(2),
                Some(3),
                Some(4),
                Some(1 << 40),
            ];
            let mut checked = 0;
            for &d in &devices {
                let dt = ffi::DLDeviceType(d as i32);
                let rule = s.rules.iter().find(|r| r.device_value == d);
                for &st in &streams {
                    // the spec's meaning, interpreted independently of the template
                    let expected: Result<String, ()> = match (rule, st) {
                        (_, Some(v)) if v < s.min => Err(()),
                        (None, None) => Ok(s.stream_less_none.clone()),
                        (None, Some(_)) => Err(()),
                        (Some(r), None) => Ok(r.none.clone()),
                        (Some(r), Some(v)) => match r.values.iter().find(|x| x.value == v) {
                            Some(x) => x.action.clone().ok_or(()),
                            None => match r.pointers_above {
                                Some(p) if v > p => {
                                    let carrier =
                                        s.actions.iter().find(|a| a.carries_value).unwrap();
                                    Ok(format!("{}({v})", carrier.name))
                                }
                                _ => Err(()),
                            },
                        },
                    };
                    let got = resolve_stream(dt, st);
                    match (&expected, &got) {
                        (Ok(name), Ok(action)) => {
                            assert_eq!(&format!("{action:?}"), name, "device {d} stream {st:?}")
                        }
                        (Err(()), Err(v)) => {
                            assert_eq!((v.device_type, v.stream), (dt, st));
                            assert!(!v.reason.is_empty());
                        }
                        _ => panic!("device {d} stream {st:?}: expected {expected:?}, got {got:?}"),
                    }
                    checked += 1;
                }
                assert_eq!(
                    consumer_default_stream(dt),
                    rule.and_then(|r| r.consumer_default),
                    "device {d}"
                );
            }
            assert!(checked > 50);
            let _ = StreamAction::None;
        }

        #[test]
        fn exception_mapping_matches_the_spec() {
            use failure::FailureKind;
            let ir = spec_ir();
            assert_eq!(FailureKind::ALL.len(), ir.failures.len());
            for (k, f) in FailureKind::ALL.iter().zip(&ir.failures) {
                assert_eq!(format!("{k:?}"), f.kind);
                assert_eq!(format!("{:?}", k.exception()), f.exception);
                assert_eq!(k.description(), f.description);
            }
        }

        #[test]
        fn protocol_names_match_the_spec() {
            let ir = spec_ir();
            let p = &ir.protocol;
            assert_eq!(protocol::DLPACK_METHOD, p.dlpack.name);
            assert_eq!(protocol::DLPACK_DEVICE_METHOD, p.dlpack_device.name);
            let kw: Vec<&str> = p.dlpack.kwargs.iter().map(|k| k.name.as_str()).collect();
            assert_eq!(
                kw,
                [
                    protocol::KW_STREAM,
                    protocol::KW_MAX_VERSION,
                    protocol::KW_DL_DEVICE,
                    protocol::KW_COPY
                ]
            );
            let kw: Vec<&str> = p
                .from_dlpack
                .kwargs
                .iter()
                .map(|k| k.name.as_str())
                .collect();
            assert_eq!(
                kw,
                [
                    protocol::FROM_DLPACK_KW_DEVICE,
                    protocol::FROM_DLPACK_KW_COPY
                ]
            );
            assert_eq!(ffi::DLPACK_MAJOR_VERSION, ir.version.major);
            assert_eq!(ffi::DLPACK_MINOR_VERSION, ir.version.minor);
            assert_eq!(
                ffi::DLPACK_VERSIONED_CAPSULE_NAME.to_str().unwrap(),
                "dltensor_versioned"
            );
            assert_eq!(
                ffi::DLPACK_VERSIONED_USED_CAPSULE_NAME.to_str().unwrap(),
                "used_dltensor_versioned"
            );
        }
    };
}
