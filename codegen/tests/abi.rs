//! ABI tests: every generated header compiles as C11 and C++17 with warnings as
//! errors, and a C program compiled against it prints sizeof/alignof/offsetof of
//! every struct field and the value of every enum constant and macro. Those
//! numbers must equal the IR's computed layout, the generated Rust layout
//! (`size_of`/`offset_of!` on `generated/rust/types.rs`, included below) and the
//! DLPack facts (DLTensor 48, DLManagedTensor 64, DLManagedTensorVersioned 80
//! with dl_tensor at 32, DLPackExchangeAPI 56, ...).

mod common;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{fixture_cases, root, scratch};
use dlbind_codegen::ir::{Ir, Item};

#[allow(dead_code, non_camel_case_types)]
mod ffi {
    include!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../generated/rust/types.rs"
    ));
}
#[allow(dead_code, non_camel_case_types)]
mod v11 {
    include!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/dlpack-1.1/rust/types.rs"
    ));
}
#[allow(dead_code, non_camel_case_types)]
mod custom {
    include!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/custom/rust/types.rs"
    ));
}

fn tool(var: &str, default: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| default.to_string())
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| {
        panic!("cannot run {cmd:?}: {e} (a C compiler is required; set CC/CXX)")
    });
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A C/C++ program printing every layout number and constant the IR knows.
fn probe_source(ir: &Ir, header: &Path) -> String {
    let mut s = String::new();
    writeln!(
        s,
        "#include <stdio.h>\n#include <stddef.h>\n#include \"{}\"",
        header.display()
    )
    .unwrap();
    s.push_str("#ifdef __cplusplus\n#define ALIGNOF(T) alignof(T)\n#else\n#define ALIGNOF(T) _Alignof(T)\n#endif\n");
    s.push_str("int main(void) {\n");
    let mut p = |key: String, expr: String| {
        writeln!(
            s,
            "  printf(\"%s %llu\\n\", \"{key}\", (unsigned long long)({expr}));"
        )
        .unwrap();
    };
    p(
        ir.c_header.major_macro.clone(),
        ir.c_header.major_macro.clone(),
    );
    p(
        ir.c_header.minor_macro.clone(),
        ir.c_header.minor_macro.clone(),
    );
    for item in &ir.items {
        match item {
            Item::Struct(st) => {
                p(
                    format!("sizeof {}", st.name),
                    format!("sizeof({})", st.name),
                );
                p(
                    format!("alignof {}", st.name),
                    format!("ALIGNOF({})", st.name),
                );
                for f in &st.fields {
                    p(
                        format!("offsetof {}.{}", st.name, f.name),
                        format!("offsetof({}, {})", st.name, f.name),
                    );
                    p(
                        format!("sizeof {}.{}", st.name, f.name),
                        format!("sizeof((({}*)0)->{})", st.name, f.name),
                    );
                }
            }
            Item::Enum(e) => {
                p(format!("sizeof {}", e.name), format!("sizeof({})", e.name));
                for v in &e.values {
                    // printed as signed via a cast through long long
                    p(format!("enum {}", v.name), format!("(long long){}", v.name));
                }
            }
            Item::Fn(f) => p(format!("sizeof {}", f.name), format!("sizeof({})", f.name)),
            Item::Flags(f) => {
                for v in &f.values {
                    p(format!("macro {}", v.name), v.name.clone());
                }
            }
        }
    }
    s.push_str("  return 0;\n}\n");
    s
}

/// Compile `header` as C11 and C++17 (warnings are errors), run the probe in both, return its numbers.
fn probe(ir: &Ir, header: &Path, dir: &Path) -> BTreeMap<String, u64> {
    let cc = tool("CC", "cc");
    let cxx = tool("CXX", "c++");
    let c = dir.join("probe.c");
    let cpp = dir.join("probe.cpp");
    let src = probe_source(ir, header);
    std::fs::write(&c, &src).unwrap();
    std::fs::write(&cpp, &src).unwrap();
    // the header on its own, in both languages
    let only = dir.join("only.c");
    std::fs::write(
        &only,
        format!(
            "#include \"{}\"\nint dlbind_header_only;\n",
            header.display()
        ),
    )
    .unwrap();
    run(Command::new(&cc)
        .args([
            "-std=c11",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "-c",
            "-o",
        ])
        .arg(dir.join("only.o"))
        .arg(&only));
    let only_cpp = dir.join("only.cpp");
    std::fs::copy(&only, &only_cpp).unwrap();
    run(Command::new(&cxx)
        .args(["-std=c++17", "-Wall", "-Wextra", "-Werror", "-c", "-o"])
        .arg(dir.join("only_cpp.o"))
        .arg(&only_cpp));
    let exe_c = dir.join("probe_c");
    let exe_cpp = dir.join("probe_cpp");
    run(Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe_c)
        .arg(&c));
    run(Command::new(&cxx)
        .args(["-std=c++17", "-Wall", "-Werror", "-o"])
        .arg(&exe_cpp)
        .arg(&cpp));
    let out_c = run(&mut Command::new(&exe_c));
    let out_cpp = run(&mut Command::new(&exe_cpp));
    let parse = |out: &str| -> BTreeMap<String, u64> {
        out.lines()
            .map(|l| {
                let (k, v) = l.rsplit_once(' ').unwrap();
                (k.to_string(), v.parse().unwrap())
            })
            .collect()
    };
    let (m_c, m_cpp) = (parse(&out_c), parse(&out_cpp));
    // C and C++ agree on everything except the size of a C enum without a fixed underlying type
    for (k, v) in &m_c {
        assert_eq!(m_cpp.get(k), Some(v), "C and C++ disagree on {k}");
    }
    m_c
}

/// The C numbers equal the IR's layout and values.
fn compare_with_ir(ir: &Ir, c: &BTreeMap<String, u64>, what: &str) {
    let get = |k: &str| {
        *c.get(k)
            .unwrap_or_else(|| panic!("{what}: C probe lacks {k}"))
    };
    assert_eq!(get(&ir.c_header.major_macro), ir.version.major as u64);
    assert_eq!(get(&ir.c_header.minor_macro), ir.version.minor as u64);
    let mut field_enums = Vec::new();
    for item in &ir.items {
        match item {
            Item::Struct(st) => {
                assert_eq!(
                    get(&format!("sizeof {}", st.name)),
                    st.size as u64,
                    "{what}: sizeof {}",
                    st.name
                );
                assert_eq!(
                    get(&format!("alignof {}", st.name)),
                    st.align as u64,
                    "{what}: alignof {}",
                    st.name
                );
                for f in &st.fields {
                    let k = format!("{}.{}", st.name, f.name);
                    assert_eq!(
                        get(&format!("offsetof {k}")),
                        f.offset as u64,
                        "{what}: offsetof {k}"
                    );
                    assert_eq!(
                        get(&format!("sizeof {k}")),
                        f.size as u64,
                        "{what}: sizeof {k}"
                    );
                    if let dlbind_codegen::ir::Ty::Named {
                        name,
                        of: dlbind_codegen::ir::NamedKind::Enum,
                    } = &f.ty
                    {
                        field_enums.push(name.clone());
                    }
                }
            }
            Item::Enum(e) => {
                for v in &e.values {
                    assert_eq!(
                        get(&format!("enum {}", v.name)) as i64,
                        v.value,
                        "{what}: {}",
                        v.name
                    );
                }
            }
            Item::Fn(f) => assert_eq!(get(&format!("sizeof {}", f.name)), 8),
            Item::Flags(f) => {
                for v in &f.values {
                    assert_eq!(
                        get(&format!("macro {}", v.name)),
                        v.value,
                        "{what}: {}",
                        v.name
                    );
                }
            }
        }
    }
    // an enum stored in a struct field has the Rust repr's size in C too
    for name in field_enums {
        let e = ir.enum_named(&name).unwrap();
        assert_eq!(
            get(&format!("sizeof {name}")),
            e.repr.layout().unwrap().0 as u64,
            "{what}: sizeof {name}"
        );
    }
}

fn fixture_probe(case: &str) -> (Ir, BTreeMap<String, u64>) {
    let ir = Ir::from_path(root().join(format!("tests/fixtures/{case}/spec.yaml"))).unwrap();
    let dir = scratch(&format!("abi-{case}"));
    let header: PathBuf = root().join(format!("tests/fixtures/{case}/include/dlpack.h"));
    let c = probe(&ir, &header, &dir);
    compare_with_ir(&ir, &c, case);
    let _ = std::fs::remove_dir_all(&dir);
    (ir, c)
}

/// DLPack 1.3 facts (x86-64 SysV and Win64; any 64-bit target).
const SIZES: &[(&str, u64, u64)] = &[
    ("DLPackVersion", 8, 4),
    ("DLDevice", 8, 4),
    ("DLDataType", 4, 2),
    ("DLTensor", 48, 8),
    ("DLManagedTensor", 64, 8),
    ("DLManagedTensorVersioned", 80, 8),
    ("DLPackExchangeAPIHeader", 16, 8),
    ("DLPackExchangeAPI", 56, 8),
];

macro_rules! rust_offsets {
    ($($t:ident . $f:ident = $off:literal),* $(,)?) => {
        &[$((stringify!($t), stringify!($f), core::mem::offset_of!(ffi::$t, $f) as u64, $off)),*]
    };
}

const RUST_SIZES: &[(&str, usize, usize)] = &[
    (
        "DLPackVersion",
        size_of::<ffi::DLPackVersion>(),
        align_of::<ffi::DLPackVersion>(),
    ),
    (
        "DLDevice",
        size_of::<ffi::DLDevice>(),
        align_of::<ffi::DLDevice>(),
    ),
    (
        "DLDataType",
        size_of::<ffi::DLDataType>(),
        align_of::<ffi::DLDataType>(),
    ),
    (
        "DLTensor",
        size_of::<ffi::DLTensor>(),
        align_of::<ffi::DLTensor>(),
    ),
    (
        "DLManagedTensor",
        size_of::<ffi::DLManagedTensor>(),
        align_of::<ffi::DLManagedTensor>(),
    ),
    (
        "DLManagedTensorVersioned",
        size_of::<ffi::DLManagedTensorVersioned>(),
        align_of::<ffi::DLManagedTensorVersioned>(),
    ),
    (
        "DLPackExchangeAPIHeader",
        size_of::<ffi::DLPackExchangeAPIHeader>(),
        align_of::<ffi::DLPackExchangeAPIHeader>(),
    ),
    (
        "DLPackExchangeAPI",
        size_of::<ffi::DLPackExchangeAPI>(),
        align_of::<ffi::DLPackExchangeAPI>(),
    ),
];

#[test]
fn generated_header_matches_rust_layout_and_facts() {
    let ir = Ir::from_path(root().join("spec/dlpack.yaml")).unwrap();
    let dir = scratch("abi-generated");
    let c = probe(&ir, &root().join("generated/include/dlpack.h"), &dir);
    compare_with_ir(&ir, &c, "generated");

    // (struct, field, Rust offset_of!, fact)
    let offsets: &[(&str, &str, u64, u64)] = rust_offsets![
        DLPackVersion.major = 0,
        DLPackVersion.minor = 4,
        DLDevice.device_type = 0,
        DLDevice.device_id = 4,
        DLDataType.code = 0,
        DLDataType.bits = 1,
        DLDataType.lanes = 2,
        DLTensor.data = 0,
        DLTensor.device = 8,
        DLTensor.ndim = 16,
        DLTensor.dtype = 20,
        DLTensor.shape = 24,
        DLTensor.strides = 32,
        DLTensor.byte_offset = 40,
        DLManagedTensor.dl_tensor = 0,
        DLManagedTensor.manager_ctx = 48,
        DLManagedTensor.deleter = 56,
        DLManagedTensorVersioned.version = 0,
        DLManagedTensorVersioned.manager_ctx = 8,
        DLManagedTensorVersioned.deleter = 16,
        DLManagedTensorVersioned.flags = 24,
        DLManagedTensorVersioned.dl_tensor = 32,
        DLPackExchangeAPIHeader.version = 0,
        DLPackExchangeAPIHeader.prev_api = 8,
        DLPackExchangeAPI.header = 0,
        DLPackExchangeAPI.managed_tensor_allocator = 16,
        DLPackExchangeAPI.managed_tensor_from_py_object_no_sync = 24,
        DLPackExchangeAPI.managed_tensor_to_py_object_no_sync = 32,
        DLPackExchangeAPI.dltensor_from_py_object_no_sync = 40,
        DLPackExchangeAPI.current_work_stream = 48,
    ];
    for &(st, f, rust, fact) in offsets {
        let key = format!("offsetof {st}.{f}");
        assert_eq!(rust, fact, "Rust {key}");
        assert_eq!(c[&key], fact, "C {key}");
    }
    // the fact table covers every field the header has
    let c_fields = c.keys().filter(|k| k.starts_with("offsetof ")).count();
    assert_eq!(c_fields, offsets.len(), "fields without a fact");
    for (&(name, size, align), &(rname, rsize, ralign)) in SIZES.iter().zip(RUST_SIZES) {
        assert_eq!(name, rname);
        assert_eq!(
            (c[&format!("sizeof {name}")], c[&format!("alignof {name}")]),
            (size, align),
            "C {name}"
        );
        assert_eq!((rsize as u64, ralign as u64), (size, align), "Rust {name}");
    }
    assert_eq!(
        c.keys().filter(|k| k.starts_with("alignof ")).count(),
        SIZES.len()
    );
    assert_eq!(size_of::<ffi::DLDeviceType>(), 4);
    assert_eq!(c["sizeof DLDeviceType"], 4);
    assert_eq!(size_of::<ffi::DLPackManagedTensorAllocator>(), 8);

    // enum and macro values: C == facts == Rust
    let devices: &[(&str, u64, ffi::DLDeviceType)] = &[
        ("kDLCPU", 1, ffi::DLDeviceType::kDLCPU),
        ("kDLCUDA", 2, ffi::DLDeviceType::kDLCUDA),
        ("kDLCUDAHost", 3, ffi::DLDeviceType::kDLCUDAHost),
        ("kDLOpenCL", 4, ffi::DLDeviceType::kDLOpenCL),
        ("kDLVulkan", 7, ffi::DLDeviceType::kDLVulkan),
        ("kDLMetal", 8, ffi::DLDeviceType::kDLMetal),
        ("kDLVPI", 9, ffi::DLDeviceType::kDLVPI),
        ("kDLROCM", 10, ffi::DLDeviceType::kDLROCM),
        ("kDLROCMHost", 11, ffi::DLDeviceType::kDLROCMHost),
        ("kDLExtDev", 12, ffi::DLDeviceType::kDLExtDev),
        ("kDLCUDAManaged", 13, ffi::DLDeviceType::kDLCUDAManaged),
        ("kDLOneAPI", 14, ffi::DLDeviceType::kDLOneAPI),
        ("kDLWebGPU", 15, ffi::DLDeviceType::kDLWebGPU),
        ("kDLHexagon", 16, ffi::DLDeviceType::kDLHexagon),
        ("kDLMAIA", 17, ffi::DLDeviceType::kDLMAIA),
        ("kDLTrn", 18, ffi::DLDeviceType::kDLTrn),
        // upstream main after v1.3 (94485e2)
        ("kDLTPU", 19, ffi::DLDeviceType::kDLTPU),
        ("kDLTPUHost", 20, ffi::DLDeviceType::kDLTPUHost),
        ("kDLAscend", 21, ffi::DLDeviceType::kDLAscend),
    ];
    for &(name, v, r) in devices {
        assert_eq!(c[&format!("enum {name}")], v, "C {name}");
        assert_eq!(r.0 as u64, v, "Rust {name}");
    }
    let codes = [
        "kDLInt",
        "kDLUInt",
        "kDLFloat",
        "kDLOpaqueHandle",
        "kDLBfloat",
        "kDLComplex",
        "kDLBool",
        "kDLFloat8_e3m4",
        "kDLFloat8_e4m3",
        "kDLFloat8_e4m3b11fnuz",
        "kDLFloat8_e4m3fn",
        "kDLFloat8_e4m3fnuz",
        "kDLFloat8_e5m2",
        "kDLFloat8_e5m2fnuz",
        "kDLFloat8_e8m0fnu",
        "kDLFloat6_e2m3fn",
        "kDLFloat6_e3m2fn",
        "kDLFloat4_e2m1fn",
        // upstream main after v1.3 (94485e2)
        "kDLBcomplex",
    ];
    for (v, name) in codes.iter().enumerate() {
        assert_eq!(c[&format!("enum {name}")], v as u64, "C {name}");
        assert_eq!(
            ffi::DLDataTypeCode(v as u8).name(),
            Some(*name),
            "Rust {name}"
        );
    }
    assert_eq!(
        c.keys().filter(|k| k.starts_with("enum ")).count(),
        devices.len() + codes.len()
    );
    for (name, v, r) in [
        (
            "DLPACK_FLAG_BITMASK_READ_ONLY",
            1,
            ffi::DLPACK_FLAG_BITMASK_READ_ONLY,
        ),
        (
            "DLPACK_FLAG_BITMASK_IS_COPIED",
            2,
            ffi::DLPACK_FLAG_BITMASK_IS_COPIED,
        ),
        (
            "DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED",
            4,
            ffi::DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED,
        ),
    ] {
        assert_eq!((c[&format!("macro {name}")], r), (v, v), "{name}");
    }
    assert_eq!(
        (c["DLPACK_MAJOR_VERSION"], c["DLPACK_MINOR_VERSION"]),
        (1, 3)
    );
    assert_eq!(
        (ffi::DLPACK_MAJOR_VERSION, ffi::DLPACK_MINOR_VERSION),
        (1, 3)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn fixture_headers_compile_and_match_their_rust_layout() {
    for case in fixture_cases() {
        let (_, c) = fixture_probe(&case);
        match case.as_str() {
            "dlpack-1.1" => {
                assert_eq!(
                    (c["DLPACK_MAJOR_VERSION"], c["DLPACK_MINOR_VERSION"]),
                    (1, 1)
                );
                assert!(
                    !c.contains_key("enum kDLTrn") && !c.contains_key("sizeof DLPackExchangeAPI")
                );
                assert_eq!(
                    c["sizeof DLManagedTensorVersioned"],
                    size_of::<v11::DLManagedTensorVersioned>() as u64
                );
                assert_eq!(
                    c["offsetof DLManagedTensorVersioned.dl_tensor"],
                    core::mem::offset_of!(v11::DLManagedTensorVersioned, dl_tensor) as u64
                );
                assert_eq!(
                    c["sizeof DLManagedTensor"],
                    size_of::<v11::DLManagedTensor>() as u64
                );
            }
            "custom" => {
                assert_eq!(c["enum kDLAcme"], custom::DLDeviceType::kDLAcme.0 as u64);
                assert_eq!(c["sizeof DLTensor"], size_of::<custom::DLTensor>() as u64);
                assert_eq!(
                    c["offsetof DLManagedTensorVersioned.flags"],
                    core::mem::offset_of!(custom::DLManagedTensorVersioned, flags) as u64
                );
            }
            _ => {}
        }
    }
}

/// Code written against upstream dlpack.h 1.3 (its type names, field names,
/// typedef signatures, macro names) compiles unchanged against the generated
/// header, as C11 and as C++17, with warnings as errors.
const UPSTREAM_USAGE: &str = r#"
#include <stddef.h>
#include "HEADER"

static void set_error(void* error_ctx, const char* kind, const char* message) { (void)error_ctx; (void)kind; (void)message; }
static int my_alloc(DLTensor* prototype, DLManagedTensorVersioned** out, void* error_ctx,
                    void (*SetError)(void* error_ctx, const char* kind, const char* message)) {
  (void)prototype; *out = NULL; SetError(error_ctx, "MemoryError", "none"); return -1;
}
static int my_from(void* py_object, DLManagedTensorVersioned** out) { (void)py_object; *out = NULL; return 0; }
static int my_to(DLManagedTensorVersioned* tensor, void** out_py_object) { (void)tensor; *out_py_object = NULL; return 0; }
static int my_dltensor(void* py_object, DLTensor* out) { (void)py_object; (void)out; return 0; }
static int my_stream(DLDeviceType device_type, int32_t device_id, void** out_current_stream) {
  (void)device_type; (void)device_id; *out_current_stream = NULL; return 0;
}
static void my_deleter(struct DLManagedTensorVersioned* self) { (void)self; }
static void my_legacy_deleter(struct DLManagedTensor* self) { (void)self; }

int main(void) {
  DLPackExchangeAPI api;
  DLManagedTensorVersioned mt;
  DLManagedTensor legacy;
  DLDataTypeCode code = kDLFloat4_e2m1fn;
  DLDeviceType dev = kDLTrn;
  DLPackManagedTensorAllocator alloc = my_alloc;
  int64_t shape[1] = {4};
  int64_t strides[1] = {1};
  api.header.version.major = DLPACK_MAJOR_VERSION;
  api.header.version.minor = DLPACK_MINOR_VERSION;
  api.header.prev_api = NULL;
  api.managed_tensor_allocator = my_alloc;
  api.managed_tensor_from_py_object_no_sync = my_from;
  api.managed_tensor_to_py_object_no_sync = my_to;
  api.dltensor_from_py_object_no_sync = my_dltensor;
  api.current_work_stream = my_stream;
  mt.version.major = DLPACK_MAJOR_VERSION;
  mt.version.minor = DLPACK_MINOR_VERSION;
  mt.manager_ctx = NULL;
  mt.deleter = my_deleter;
  mt.flags = DLPACK_FLAG_BITMASK_READ_ONLY | DLPACK_FLAG_BITMASK_IS_COPIED | DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED;
  mt.dl_tensor.data = NULL;
  mt.dl_tensor.device.device_type = kDLCUDA;
  mt.dl_tensor.device.device_id = 0;
  mt.dl_tensor.ndim = 1;
  mt.dl_tensor.dtype.code = (uint8_t)kDLFloat;
  mt.dl_tensor.dtype.bits = 32;
  mt.dl_tensor.dtype.lanes = 1;
  mt.dl_tensor.shape = shape;
  mt.dl_tensor.strides = strides;
  mt.dl_tensor.byte_offset = 0;
  legacy.dl_tensor = mt.dl_tensor;
  legacy.manager_ctx = NULL;
  legacy.deleter = my_legacy_deleter;
  mt.deleter(&mt);
  legacy.deleter(&legacy);
  {
    DLManagedTensorVersioned* out = NULL;
    void* stream = NULL;
    (void)alloc(&mt.dl_tensor, &out, NULL, set_error);
    (void)api.current_work_stream(dev, 0, &stream);
    (void)api.dltensor_from_py_object_no_sync(NULL, &legacy.dl_tensor);
  }
  return (code == kDLFloat4_e2m1fn && dev == kDLTrn && api.header.prev_api == NULL) ? 0 : 1;
}
"#;

#[test]
fn upstream_style_code_compiles_against_the_generated_header() {
    let dir = scratch("abi-usage");
    let header = root().join("generated/include/dlpack.h");
    let src = UPSTREAM_USAGE.replace("HEADER", &header.display().to_string());
    let c = dir.join("usage.c");
    let cpp = dir.join("usage.cpp");
    std::fs::write(&c, &src).unwrap();
    std::fs::write(&cpp, &src).unwrap();
    let (exe_c, exe_cpp) = (dir.join("usage_c"), dir.join("usage_cpp"));
    run(Command::new(tool("CC", "cc"))
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-o"])
        .arg(&exe_c)
        .arg(&c));
    run(Command::new(tool("CXX", "c++"))
        .args(["-std=c++17", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe_cpp)
        .arg(&cpp));
    run(&mut Command::new(&exe_c));
    run(&mut Command::new(&exe_cpp));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The interpreter for the ctypes checks: `DLBIND_PYTHON`, else the test venv's, else `python3`.
fn python() -> Option<std::path::PathBuf> {
    let candidates = [
        std::env::var_os("DLBIND_PYTHON").map(PathBuf::from),
        Some(root().join(".venv/bin/python")),
        Some(PathBuf::from("python3")),
    ];
    candidates.into_iter().flatten().find(|p| {
        Command::new(p)
            .args(["-c", "import ctypes"])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// A Python program printing, from the generated ctypes module, the same keys the C probe
/// prints (sizes, alignments, offsets, field sizes, enum values, flag macros).
fn ctypes_probe_source(ir: &Ir) -> String {
    let mut s = String::from(
        "import ctypes, importlib.util, sys\n\
         spec = importlib.util.spec_from_file_location('dlpack_ctypes', sys.argv[1])\n\
         m = importlib.util.module_from_spec(spec)\n\
         spec.loader.exec_module(m)\n",
    );
    let mut p = |key: String, expr: String| writeln!(s, "print({key:?}, int({expr}))").unwrap();
    for mac in [&ir.c_header.major_macro, &ir.c_header.minor_macro] {
        p(mac.clone(), format!("m.{mac}"));
    }
    for item in &ir.items {
        match item {
            Item::Struct(st) => {
                let n = &st.name;
                p(format!("sizeof {n}"), format!("ctypes.sizeof(m.{n})"));
                p(format!("alignof {n}"), format!("ctypes.alignment(m.{n})"));
                for f in &st.fields {
                    let k = format!("{n}.{}", f.name);
                    p(format!("offsetof {k}"), format!("m.{k}.offset"));
                    p(format!("sizeof {k}"), format!("m.{k}.size"));
                }
            }
            Item::Enum(e) => {
                for v in &e.values {
                    p(format!("enum {}", v.name), format!("m.{}", v.name));
                }
            }
            Item::Fn(f) => p(
                format!("sizeof {}", f.name),
                format!("ctypes.sizeof(m.{})", f.name),
            ),
            Item::Flags(f) => {
                for v in &f.values {
                    p(format!("macro {}", v.name), format!("m.{}", v.name));
                }
            }
        }
    }
    s
}

/// `generated/python/dlpack_ctypes.py` (and each fixture's): every size, alignment, offset,
/// enum value and flag equals what the C program compiled against the generated header prints.
#[test]
fn ctypes_module_matches_the_c_probe() {
    let Some(py) = python() else {
        eprintln!(
            "SKIPPED ctypes_module_matches_the_c_probe: no Python interpreter (set DLBIND_PYTHON)"
        );
        return;
    };
    let mut cases: Vec<(String, String)> = fixture_cases()
        .into_iter()
        .map(|c| {
            (
                format!("tests/fixtures/{c}/spec.yaml"),
                format!("tests/fixtures/{c}"),
            )
        })
        .collect();
    cases.push(("spec/dlpack.yaml".into(), "generated".into()));
    for (spec, out) in cases {
        let ir = Ir::from_path(root().join(&spec)).unwrap();
        let dir = scratch(&format!("ctypes-{}", out.replace('/', "-")));
        let c = probe(&ir, &root().join(format!("{out}/include/dlpack.h")), &dir);
        let script = dir.join("probe_ctypes.py");
        std::fs::write(&script, ctypes_probe_source(&ir)).unwrap();
        let printed = run(Command::new(&py)
            .arg(&script)
            .arg(root().join(format!("{out}/python/dlpack_ctypes.py"))));
        let mut n = 0;
        for line in printed.lines() {
            let (k, v) = line.rsplit_once(' ').unwrap();
            let v: u64 = v.parse::<i64>().unwrap() as u64;
            assert_eq!(
                c.get(k),
                Some(&v),
                "{out}: ctypes {k} = {v}, C says {:?}",
                c.get(k)
            );
            n += 1;
        }
        // everything the C probe prints except the C size of an enum type has a ctypes twin
        let expected = c
            .keys()
            .filter(|k| !ir.enums().any(|e| **k == format!("sizeof {}", e.name)))
            .count();
        assert_eq!(
            n, expected,
            "{out}: ctypes printed {n} of {expected} numbers"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
