//! The validated, resolved IR: the one model every backend (and the derive
//! macro, through `dlbind-codegen` with `default-features = false`) reads.
//!
//! Build it with [`Ir::from_yaml`] (any spec text) or [`Ir::embedded`] (the
//! default DLPack 1.3 spec compiled into this crate).

use std::sync::OnceLock;

use serde::Serialize;

use crate::error::Result;

/// The default spec, embedded at compile time from this crate's copy (`codegen/spec/dlpack.yaml`)
/// of the project's `spec/dlpack.yaml`, so the published crate needs no file outside itself;
/// `dlbind generate` writes the copy and `dlbind check` verifies it (the project file `dlbind.yaml`).
pub const EMBEDDED_SPEC: &str = include_str!("../spec/dlpack.yaml");
/// The file name diagnostics use for the embedded spec.
pub const EMBEDDED_SPEC_PATH: &str = "spec/dlpack.yaml";

/// The whole validated spec.
#[derive(Debug, Clone, Serialize)]
pub struct Ir {
    pub name: String,
    pub version: Version,
    pub doc: String,
    pub c_header: CHeader,
    /// Capsule names (C strings), in spec order.
    pub capsules: Vec<NamedString>,
    /// `__dlpack_c_exchange_api__` (absent before DLPack 1.2/1.3).
    pub exchange_attribute: Option<NamedString>,
    /// Older names of that attribute that consumers also look up, in order.
    pub exchange_legacy_attributes: Vec<NamedString>,
    pub protocol: Protocol,
    /// Every C type, in declaration order.
    pub items: Vec<Item>,
    /// The enum whose value names the dtype table's `code` column uses (DLDataTypeCode).
    pub dtype_code_enum: String,
    pub dtypes: Vec<DType>,
    pub streams: Streams,
    pub exceptions: Vec<Exception>,
    pub failures: Vec<Failure>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
}

#[derive(Debug, Clone, Serialize)]
pub struct CHeader {
    pub guard: String,
    pub major_macro: String,
    pub minor_macro: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct NamedString {
    pub name: String,
    pub value: String,
    pub doc: String,
}

/// The Python protocol names.
#[derive(Debug, Clone, Serialize)]
pub struct Protocol {
    /// `__dlpack__` and its keyword-only arguments, in order.
    pub dlpack: Method,
    /// `__dlpack_device__`.
    pub dlpack_device: Method,
    /// `from_dlpack` and its keyword arguments.
    pub from_dlpack: Method,
}

#[derive(Debug, Clone, Serialize)]
pub struct Method {
    /// Python name, e.g. `__dlpack__`.
    pub name: String,
    /// Rust constant holding the name, e.g. `DLPACK_METHOD`.
    pub const_name: Option<String>,
    pub doc: String,
    pub returns: Option<String>,
    pub kwargs: Vec<Kwarg>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Kwarg {
    /// Python keyword, e.g. `max_version`.
    pub name: String,
    /// Rust constant holding it, e.g. `KW_MAX_VERSION`.
    pub const_name: String,
    /// Python annotation for stubs, e.g. `tuple[int, int] | None`.
    pub py_type: String,
    pub doc: String,
}

/// One C declaration.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Item {
    Struct(Struct),
    Enum(Enum),
    Fn(FnTypedef),
    Flags(Flags),
}

impl Item {
    pub fn name(&self) -> &str {
        match self {
            Item::Struct(s) => &s.name,
            Item::Enum(e) => &e.name,
            Item::Fn(f) => &f.name,
            Item::Flags(f) => &f.name,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Struct {
    pub name: String,
    pub doc: String,
    pub c_tag: bool,
    pub derive: Vec<String>,
    pub fields: Vec<StructField>,
    /// Computed C layout for 64-bit targets (LP64 / LLP64).
    pub size: usize,
    pub align: usize,
    /// True when the layout does not depend on the pointer width.
    pub pointer_free: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct StructField {
    pub name: String,
    pub ty: Ty,
    pub doc: String,
    /// Computed offset on 64-bit targets.
    pub offset: usize,
    pub size: usize,
}

/// An open enum (a newtype over its representation in Rust).
#[derive(Debug, Clone, Serialize)]
pub struct Enum {
    pub name: String,
    pub doc: String,
    pub repr: Prim,
    pub cpp_underlying: Option<String>,
    pub c_suffix: String,
    pub values: Vec<EnumValue>,
}

impl Enum {
    pub fn value(&self, name: &str) -> Option<&EnumValue> {
        self.values.iter().find(|v| v.name == name)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct EnumValue {
    pub name: String,
    pub value: i64,
    /// The only valid `bits` for this data type code (FP8/bool 8, FP6 6, FP4 4).
    pub bits: Option<u8>,
    /// The CPU can read memory of this device type directly (`host_accessible: true`).
    pub host_accessible: bool,
    pub doc: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct FnTypedef {
    pub name: String,
    pub doc: String,
    pub sig: FnSig,
}

#[derive(Debug, Clone, Serialize)]
pub struct Flags {
    pub name: String,
    pub doc: String,
    pub ty: Prim,
    /// C suffix of the shifted literals (`UL` gives `(1UL << 0UL)`).
    pub c_suffix: String,
    pub values: Vec<Flag>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Flag {
    pub name: String,
    pub bit: u32,
    pub value: u64,
    pub doc: String,
}

/// Primitive C types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Prim {
    U8,
    U16,
    U32,
    U64,
    I8,
    I16,
    I32,
    I64,
    CInt,
    CChar,
    CVoid,
}

impl Prim {
    pub fn parse(s: &str) -> Option<Prim> {
        Some(match s {
            "u8" => Prim::U8,
            "u16" => Prim::U16,
            "u32" => Prim::U32,
            "u64" => Prim::U64,
            "i8" => Prim::I8,
            "i16" => Prim::I16,
            "i32" => Prim::I32,
            "i64" => Prim::I64,
            "c_int" => Prim::CInt,
            "c_char" => Prim::CChar,
            "c_void" => Prim::CVoid,
            _ => return None,
        })
    }

    /// The spec spelling (`u32`, `c_int`, ...).
    pub fn spec_name(self) -> &'static str {
        match self {
            Prim::U8 => "u8",
            Prim::U16 => "u16",
            Prim::U32 => "u32",
            Prim::U64 => "u64",
            Prim::I8 => "i8",
            Prim::I16 => "i16",
            Prim::I32 => "i32",
            Prim::I64 => "i64",
            Prim::CInt => "c_int",
            Prim::CChar => "c_char",
            Prim::CVoid => "c_void",
        }
    }

    pub fn c_name(self) -> &'static str {
        match self {
            Prim::U8 => "uint8_t",
            Prim::U16 => "uint16_t",
            Prim::U32 => "uint32_t",
            Prim::U64 => "uint64_t",
            Prim::I8 => "int8_t",
            Prim::I16 => "int16_t",
            Prim::I32 => "int32_t",
            Prim::I64 => "int64_t",
            Prim::CInt => "int",
            Prim::CChar => "char",
            Prim::CVoid => "void",
        }
    }

    pub fn rust_name(self) -> &'static str {
        match self {
            Prim::U8 => "u8",
            Prim::U16 => "u16",
            Prim::U32 => "u32",
            Prim::U64 => "u64",
            Prim::I8 => "i8",
            Prim::I16 => "i16",
            Prim::I32 => "i32",
            Prim::I64 => "i64",
            Prim::CInt => "core::ffi::c_int",
            Prim::CChar => "core::ffi::c_char",
            Prim::CVoid => "core::ffi::c_void",
        }
    }

    /// (size, align) in bytes; `c_void` has none.
    pub fn layout(self) -> Option<(usize, usize)> {
        Some(match self {
            Prim::U8 | Prim::I8 | Prim::CChar => (1, 1),
            Prim::U16 | Prim::I16 => (2, 2),
            Prim::U32 | Prim::I32 | Prim::CInt => (4, 4),
            Prim::U64 | Prim::I64 => (8, 8),
            Prim::CVoid => return None,
        })
    }

    pub fn is_signed(self) -> bool {
        matches!(
            self,
            Prim::I8 | Prim::I16 | Prim::I32 | Prim::I64 | Prim::CInt | Prim::CChar
        )
    }

    /// The value range of an integer primitive.
    pub fn range(self) -> (i128, i128) {
        match self {
            Prim::U8 => (0, u8::MAX as i128),
            Prim::U16 => (0, u16::MAX as i128),
            Prim::U32 => (0, u32::MAX as i128),
            Prim::U64 => (0, u64::MAX as i128),
            Prim::I8 | Prim::CChar => (i8::MIN as i128, i8::MAX as i128),
            Prim::I16 => (i16::MIN as i128, i16::MAX as i128),
            Prim::I32 | Prim::CInt => (i32::MIN as i128, i32::MAX as i128),
            Prim::I64 => (i64::MIN as i128, i64::MAX as i128),
            Prim::CVoid => (0, 0),
        }
    }
}

/// What a type name refers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NamedKind {
    Struct,
    Enum,
    Fn,
}

/// A resolved type expression.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Ty {
    Prim { prim: Prim },
    Ptr { mutable: bool, to: Box<Ty> },
    Named { name: String, of: NamedKind },
    FnPtr { sig: FnSig },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FnSig {
    pub params: Vec<FnParam>,
    /// `None` for `void`.
    pub ret: Option<Box<Ty>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FnParam {
    /// The C parameter name (may be empty).
    pub name: String,
    pub ty: Ty,
}

#[derive(Debug, Clone, Serialize)]
pub struct DType {
    /// Python name (`float32`, `bfloat16`, `float8_e4m3fn`).
    pub name: String,
    /// The DLDataTypeCode value name (`kDLFloat`).
    pub code_name: String,
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
    pub numpy: Option<String>,
    pub buffer: Option<String>,
    pub rust: Option<String>,
    pub doc: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Streams {
    /// The device enum the rules key on (DLDeviceType).
    pub device_enum: String,
    pub actions: Vec<StreamActionDef>,
    /// Values below this are invalid on every device.
    pub min: i64,
    pub below_min_reason: String,
    /// Action for `None` on a stream-less device.
    pub stream_less_none: String,
    pub stream_less_reason: String,
    /// Why a value no rule lists (between the minimum and the pointer range) is rejected.
    pub unlisted_reason: String,
    pub rules: Vec<StreamRule>,
}

#[derive(Debug, Clone, Serialize)]
pub struct StreamActionDef {
    pub name: String,
    pub carries_value: bool,
    pub doc: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct StreamRule {
    /// Device value name (`kDLCUDA`) and its numeric value.
    pub device: String,
    pub device_value: i64,
    /// Action for `stream=None`.
    pub none: String,
    /// What a consumer should pass for this device.
    pub consumer_default: Option<i64>,
    pub values: Vec<StreamValue>,
    /// Values strictly above this are stream handles (the action that carries a value).
    pub pointers_above: Option<i64>,
    pub doc: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct StreamValue {
    pub value: i64,
    /// Accepted with this action...
    pub action: Option<String>,
    /// ...or rejected with this reason.
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Exception {
    pub name: String,
    pub doc: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Failure {
    pub kind: String,
    pub exception: String,
    pub description: String,
}

impl Ir {
    /// Parse and validate spec text. `file` names the spec in diagnostics.
    pub fn from_yaml(text: &str, file: &str) -> Result<Ir> {
        crate::validate::lower(text, file)
    }

    /// Read, parse and validate a spec file.
    pub fn from_path(path: impl AsRef<std::path::Path>) -> Result<Ir> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| crate::error::Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Ir::from_yaml(&text, &path.display().to_string())
    }

    /// The embedded default spec (DLPack 1.3), parsed once.
    ///
    /// The embedded spec is validated by this crate's tests, so this cannot fail
    /// in a released build; use [`Ir::try_embedded`] to handle the error anyway.
    pub fn embedded() -> &'static Ir {
        match Ir::try_embedded() {
            Ok(ir) => ir,
            Err(e) => panic!("the embedded spec is invalid: {e}"),
        }
    }

    /// The embedded default spec, or its validation error.
    pub fn try_embedded() -> Result<&'static Ir> {
        use crate::error::{Diagnostic, Diagnostics, Error};
        static IR: OnceLock<std::result::Result<Ir, Diagnostics>> = OnceLock::new();
        IR.get_or_init(|| {
            Ir::from_yaml(EMBEDDED_SPEC, EMBEDDED_SPEC_PATH).map_err(|e| match e {
                Error::Spec(d) => d,
                other => Diagnostics(vec![Diagnostic {
                    file: EMBEDDED_SPEC_PATH.to_string(),
                    line: 1,
                    col: 1,
                    message: other.to_string(),
                }]),
            })
        })
        .as_ref()
        .map_err(|d| Error::Spec(d.clone()))
    }

    pub fn structs(&self) -> impl Iterator<Item = &Struct> {
        self.items.iter().filter_map(|i| match i {
            Item::Struct(s) => Some(s),
            _ => None,
        })
    }

    pub fn enums(&self) -> impl Iterator<Item = &Enum> {
        self.items.iter().filter_map(|i| match i {
            Item::Enum(e) => Some(e),
            _ => None,
        })
    }

    pub fn flags(&self) -> impl Iterator<Item = &Flag> {
        self.items
            .iter()
            .filter_map(|i| match i {
                Item::Flags(f) => Some(f.values.iter()),
                _ => None,
            })
            .flatten()
    }

    pub fn enum_named(&self, name: &str) -> Option<&Enum> {
        self.enums().find(|e| e.name == name)
    }

    pub fn struct_named(&self, name: &str) -> Option<&Struct> {
        self.structs().find(|s| s.name == name)
    }

    /// The device-type enum the stream rules refer to.
    pub fn device_enum(&self) -> Option<&Enum> {
        self.enum_named(&self.streams.device_enum)
    }

    /// The enum holding data type codes (the one whose values name the dtypes' codes).
    pub fn dtype_code_enum(&self) -> Option<&Enum> {
        self.enum_named(&self.dtype_code_enum)
    }

    pub fn dtype_by_name(&self, name: &str) -> Option<&DType> {
        self.dtypes.iter().find(|d| d.name == name)
    }
}
