//! The safetensors adapter (`dlbind::adapters::safetensors`) against the real crate's parser:
//! every safetensors dtype maps to its DLPack dtype, tensors are read-only views of the file's
//! bytes (kept alive by each tensor), misaligned data is copied, bad files and names refused;
//! empty (a 0 in any dimension) and 0-d tensors of every dtype, aligned or not.
//! Files are written here byte by byte (the format: an 8-byte little-endian header length, a
//! JSON header, the data); `tests/python/test_adapter_safetensors.py` uses the Python package's
//! own files.
#![cfg(feature = "safetensors")]

mod common;

use std::sync::Arc;

use dlbind::adapters::live_rust_owned_tensors;
use dlbind::adapters::safetensors::safetensors::Dtype;
use dlbind::adapters::safetensors::{SafetensorsFile, dtype};
use dlbind::spec::errors::FailureKind;
use dlbind::spec::types::DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED;

/// A safetensors file: `(name, dtype, shape, bytes)` in order, the header padded with spaces
/// to `header_len` bytes when given.
fn file(entries: &[(&str, &str, &[usize], &[u8])], header_len: Option<usize>) -> Vec<u8> {
    let mut off = 0;
    let mut parts = Vec::new();
    for (name, dt, shape, data) in entries {
        parts.push(format!(
            "\"{name}\":{{\"dtype\":\"{dt}\",\"shape\":{shape:?},\"data_offsets\":[{off},{}]}}",
            off + data.len()
        ));
        off += data.len();
    }
    let mut header = format!("{{{}}}", parts.join(","));
    if let Some(n) = header_len {
        assert!(n >= header.len());
        header.push_str(&" ".repeat(n - header.len()));
    }
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    for (_, _, _, data) in entries {
        out.extend_from_slice(data);
    }
    out
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

#[test]
fn every_safetensors_dtype_maps_to_its_dlpack_dtype() {
    let _g = common::serial();
    let table = [
        (Dtype::BOOL, "bool"),
        (Dtype::F4, "float4_e2m1fn"),
        (Dtype::F6_E2M3, "float6_e2m3fn"),
        (Dtype::F6_E3M2, "float6_e3m2fn"),
        (Dtype::U8, "uint8"),
        (Dtype::I8, "int8"),
        (Dtype::F8_E5M2, "float8_e5m2"),
        (Dtype::F8_E4M3, "float8_e4m3fn"),
        (Dtype::F8_E8M0, "float8_e8m0fnu"),
        (Dtype::F8_E4M3FNUZ, "float8_e4m3fnuz"),
        (Dtype::F8_E5M2FNUZ, "float8_e5m2fnuz"),
        (Dtype::I16, "int16"),
        (Dtype::U16, "uint16"),
        (Dtype::F16, "float16"),
        (Dtype::BF16, "bfloat16"),
        (Dtype::I32, "int32"),
        (Dtype::U32, "uint32"),
        (Dtype::F32, "float32"),
        (Dtype::C64, "complex64"),
        (Dtype::F64, "float64"),
        (Dtype::I64, "int64"),
        (Dtype::U64, "uint64"),
    ];
    for (d, name) in table {
        let dl = dtype(d).unwrap();
        let info = dlbind::spec::dtypes::dtype_by_dl(dl).unwrap();
        assert_eq!(info.name, name, "{d:?}");
        assert_eq!(
            usize::from(dl.bits),
            d.bitsize(),
            "{d:?}: same element width"
        );
        dlbind::layout::validate_dtype(dl).unwrap();
    }
}

#[test]
fn tensors_are_read_only_views_that_keep_the_bytes() {
    let _g = common::serial();
    let a = f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let b: Vec<u8> = [7i64, -8].iter().flat_map(|x| x.to_le_bytes()).collect();
    // The header padded to 8 bytes, as the Python package writes it: every tensor aligned.
    let bytes: Arc<[u8]> = file(
        &[("b", "I64", &[2], &b), ("a", "F32", &[2, 3], &a)],
        Some(120),
    )
    .into();
    let st = SafetensorsFile::new(Arc::clone(&bytes)).unwrap();
    assert_eq!(st.names(), ["b", "a"]);
    let base = live_rust_owned_tensors();
    let ta = st.tensor("a").unwrap();
    assert!(ta.readonly());
    assert!(!ta.is_copied());
    assert_eq!(ta.shape(), &[2, 3]);
    assert_eq!(
        ta.as_slice::<f32>().unwrap(),
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    );
    let off = ta.data_ptr() as usize - bytes.as_ptr() as usize;
    assert_eq!(off, 8 + 120 + 16, "a view of the bytes, no copy");
    let tb = st.tensor("b").unwrap();
    assert_eq!(tb.as_slice::<i64>().unwrap(), &[7, -8]);
    assert_eq!(live_rust_owned_tensors(), base + 2);
    drop(st);
    assert_eq!(
        Arc::strong_count(&bytes),
        2,
        "the tensors keep the bytes (the file's own Arc of them)"
    );
    drop(ta);
    assert_eq!(Arc::strong_count(&bytes), 2);
    drop(tb);
    assert_eq!(Arc::strong_count(&bytes), 1);
    assert_eq!(live_rust_owned_tensors(), base);
}

/// `bytes` in 8-byte aligned storage: a `Vec<u8>` promises 1-byte alignment only (Miri gives
/// just that), and the tests place data at chosen offsets from an aligned start.
struct Aligned {
    words: Vec<u64>,
    len: usize,
}

impl AsRef<[u8]> for Aligned {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `words` holds at least `len` initialised bytes (`aligned`), any u64 is valid
        // as bytes, and the slice borrows `self`.
        unsafe { std::slice::from_raw_parts(self.words.as_ptr().cast::<u8>(), self.len) }
    }
}

fn aligned(bytes: Vec<u8>) -> Aligned {
    let mut words = vec![0u64; bytes.len().div_ceil(8)];
    for (w, c) in words.iter_mut().zip(bytes.chunks(8)) {
        let mut b = [0u8; 8];
        b[..c.len()].copy_from_slice(c);
        *w = u64::from_ne_bytes(b);
    }
    Aligned {
        words,
        len: bytes.len(),
    }
}

#[test]
fn misaligned_data_is_copied_never_viewed() {
    let _g = common::serial();
    let a = f32s(&[1.5, -2.5, 3.5]);
    // One byte of u8 first: `a` starts at an odd offset (header of 128 bytes: data at 136).
    let bytes = file(
        &[("pad", "U8", &[1], &[0xAB]), ("a", "F32", &[3], &a)],
        Some(128),
    );
    let st = SafetensorsFile::new(aligned(bytes)).unwrap();
    let t = st.tensor("a").unwrap();
    assert!(t.is_copied());
    assert!(t.readonly());
    assert_eq!((t.data_ptr() as usize) % 4, 0);
    assert_eq!(t.as_slice::<f32>().unwrap(), &[1.5, -2.5, 3.5]);
    // An odd header length misaligns everything after it (u8 still viewed: any address).
    let bytes = file(
        &[("a", "F32", &[3], &a), ("u", "U8", &[2], &[1, 2])],
        Some(125),
    );
    let st = SafetensorsFile::new(aligned(bytes)).unwrap();
    assert!(st.tensor("a").unwrap().is_copied());
    assert_eq!(
        st.tensor("a").unwrap().as_slice::<f32>().unwrap(),
        &[1.5, -2.5, 3.5]
    );
    assert!(!st.tensor("u").unwrap().is_copied());
}

#[test]
fn sub_byte_floats_stay_packed_and_say_so() {
    let _g = common::serial();
    // 6 fp4 values in 3 bytes, 4 fp6 values in 3 bytes, as safetensors stores them.
    let bytes = file(
        &[
            ("f4", "F4", &[2, 3], &[0x21, 0x43, 0x65]),
            ("f6", "F6_E2M3", &[4], &[0xff, 0x00, 0x0f]),
            ("f8", "F8_E4M3", &[2], &[0x38, 0xb8]),
        ],
        Some(256),
    );
    let st = SafetensorsFile::new(bytes).unwrap();
    let t = st.tensor("f4").unwrap();
    assert_eq!(t.dtype_info().unwrap().name, "float4_e2m1fn");
    assert_eq!(t.shape(), &[2, 3]);
    assert_eq!(
        t.flags() & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED,
        0,
        "packed"
    );
    // The packed bytes are the file's, unchanged.
    let c = t.to_contiguous_copy().unwrap();
    assert_eq!(
        c.as_slice::<u8>().err().map(|e| e.kind()),
        Some(FailureKind::UnsupportedDtype)
    );
    let t = st.tensor("f6").unwrap();
    assert_eq!(t.dtype_info().unwrap().name, "float6_e2m3fn");
    assert_eq!(t.flags() & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED, 0);
    let t = st.tensor("f8").unwrap();
    assert_eq!(t.dtype_info().unwrap().name, "float8_e4m3fn");
}

#[test]
fn bad_files_and_names_are_refused() {
    let _g = common::serial();
    let e = SafetensorsFile::new(vec![1u8, 2, 3]).unwrap_err();
    assert_eq!(e.kind(), FailureKind::MalformedTensor);
    // Offsets that do not match the shape: the crate's validation.
    let mut bytes = file(&[("a", "F32", &[3], &f32s(&[1.0, 2.0, 3.0]))], Some(64));
    bytes.truncate(bytes.len() - 4);
    let e = SafetensorsFile::new(bytes).unwrap_err();
    assert_eq!(e.kind(), FailureKind::MalformedTensor);
    assert!(
        e.message().starts_with("safetensors: malformed header"),
        "{}",
        e.message()
    );
    let st = SafetensorsFile::new(file(&[("a", "U8", &[1], &[1])], None)).unwrap();
    let e = st.tensor("nope").unwrap_err();
    assert_eq!(e.kind(), FailureKind::BadArgumentValue);
    assert_eq!(
        e.exception(),
        dlbind::spec::errors::PyExceptionKind::ValueError
    );
    // An empty tensor.
    let st = SafetensorsFile::new(file(&[("e", "F64", &[0, 4], &[])], None)).unwrap();
    assert_eq!(st.tensor("e").unwrap().shape(), &[0, 4]);
}

/// Every safetensors dtype the adapter maps.
const ALL: [Dtype; 22] = [
    Dtype::BOOL,
    Dtype::F4,
    Dtype::F6_E2M3,
    Dtype::F6_E3M2,
    Dtype::U8,
    Dtype::I8,
    Dtype::F8_E5M2,
    Dtype::F8_E4M3,
    Dtype::F8_E8M0,
    Dtype::F8_E4M3FNUZ,
    Dtype::F8_E5M2FNUZ,
    Dtype::I16,
    Dtype::U16,
    Dtype::F16,
    Dtype::BF16,
    Dtype::I32,
    Dtype::U32,
    Dtype::F32,
    Dtype::C64,
    Dtype::F64,
    Dtype::I64,
    Dtype::U64,
];

#[test]
fn empty_and_zero_d_tensors_of_every_dtype() {
    let _g = common::serial();
    let base = live_rust_owned_tensors();
    // Under Miri, every third dtype (all 22 take 100 s there).
    for d in ALL.into_iter().step_by(if cfg!(miri) { 3 } else { 1 }) {
        let name = format!("{d:?}");
        let bits = d.bitsize();
        // A 0-d tensor is one element: whole bytes only (safetensors stores no partial byte).
        let scalar: Vec<u8> = (1..=(bits / 8) as u8).collect();
        let mut entries: Vec<(&str, &str, &[usize], &[u8])> = vec![
            ("e0", &name, &[0], &[]),
            ("e1", &name, &[0, 3], &[]),
            ("e2", &name, &[3, 0], &[]),
        ];
        if bits % 8 == 0 {
            entries.push(("s", &name, &[], &scalar));
        }
        // Last: an empty tensor whose data starts at the very end of the file.
        entries.push(("end", &name, &[2, 0, 5], &[]));
        // An 8-byte header (every tensor aligned: views) and an odd one (misaligned: copies).
        for header in [512, 509] {
            let bytes = file(&entries, Some(header));
            let len = bytes.len();
            let st = SafetensorsFile::new(bytes).unwrap();
            for (tn, _, shape, data) in &entries {
                let what = format!("{name} {tn} (header {header})");
                let t = st.tensor(tn).unwrap();
                let want: Vec<i64> = shape.iter().map(|&n| n as i64).collect();
                assert_eq!(t.shape(), &want[..], "{what}");
                assert_eq!(t.dtype(), dtype(d).unwrap(), "{what}");
                assert_eq!(t.numel(), shape.iter().product::<usize>(), "{what}");
                assert!(t.readonly(), "{what}");
                // SAFETY: the tensor's `data.len()` bytes from element 0 (C-contiguous, whole
                // bytes: a 0-d tensor's one element, nothing for an empty one), alive while `t`.
                let got =
                    unsafe { std::slice::from_raw_parts(t.data_ptr().cast::<u8>(), data.len()) };
                assert_eq!(got, *data, "{what}");
                let c = t.to_contiguous_copy().unwrap();
                assert_eq!(c.shape(), &want[..], "{what}");
            }
            let end = st.tensor("end").unwrap();
            if header == 512 && !end.is_copied() {
                assert_eq!(
                    end.data_ptr() as usize - (st.tensor("e0").unwrap().data_ptr() as usize),
                    len - 8 - header,
                    "{name}: viewed at the end of the bytes"
                );
            }
        }
    }
    assert_eq!(live_rust_owned_tensors(), base, "every owner dropped once");
}

#[test]
fn a_zero_d_sub_byte_tensor_is_refused_by_the_format() {
    let _g = common::serial();
    for d in [Dtype::F4, Dtype::F6_E2M3, Dtype::F6_E3M2] {
        let name = format!("{d:?}");
        // One element of 4 or 6 bits is not a whole byte: safetensors refuses the header.
        let e = SafetensorsFile::new(file(&[("s", &name, &[], &[0x0f])], None)).unwrap_err();
        assert_eq!(e.kind(), FailureKind::MalformedTensor, "{name}");
        assert!(
            e.message().starts_with("safetensors: malformed header"),
            "{e}"
        );
    }
}
