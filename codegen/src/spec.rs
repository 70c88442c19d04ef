//! The raw serde model of a spec file (`spec/dlpack.yaml`).
//!
//! This mirrors the YAML one-to-one and checks nothing beyond shape; the
//! semantic checks live in [`crate::validate`], which lowers a [`Spec`] into the
//! [`crate::ir::Ir`]. Unknown keys are rejected so that typos surface as errors.

use serde::Deserialize;

/// The whole spec document.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    pub name: String,
    pub version: Version,
    #[serde(default)]
    pub doc: String,
    pub c_header: CHeader,
    #[serde(default)]
    pub capsules: Vec<NamedString>,
    #[serde(default)]
    pub exchange_api: Option<ExchangeApi>,
    pub protocol: Protocol,
    pub types: Vec<TypeItem>,
    /// The enum whose value names `dtypes[].code` refers to.
    pub dtype_code_enum: String,
    #[serde(default)]
    pub dtypes: Vec<DType>,
    pub streams: Streams,
    #[serde(default)]
    pub exceptions: Vec<Exception>,
    #[serde(default)]
    pub failures: Vec<Failure>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CHeader {
    pub guard: String,
    pub version_macros: VersionMacros,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VersionMacros {
    pub major: String,
    pub minor: String,
}

/// A named string constant (capsule names, the exchange attribute).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NamedString {
    pub name: String,
    pub value: String,
    #[serde(default)]
    pub doc: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExchangeApi {
    pub attribute: NamedString,
    /// Older attribute names consumers also look up (after `attribute`), e.g. tvm-ffi's.
    #[serde(default)]
    pub legacy_attributes: Vec<NamedString>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Protocol {
    pub dlpack: Method,
    pub dlpack_device: Method,
    pub from_dlpack: Method,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Method {
    pub name: String,
    #[serde(default)]
    pub r#const: Option<String>,
    #[serde(default)]
    pub doc: String,
    #[serde(default)]
    pub returns: Option<String>,
    #[serde(default)]
    pub kwargs: Vec<Kwarg>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Kwarg {
    pub name: String,
    pub r#const: String,
    pub py_type: String,
    #[serde(default)]
    pub doc: String,
}

/// One entry of `types:`; exactly one of `struct`, `enum`, `fn`, `flags` names it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TypeItem {
    #[serde(default, rename = "struct")]
    pub struct_: Option<String>,
    #[serde(default, rename = "enum")]
    pub enum_: Option<String>,
    #[serde(default, rename = "fn")]
    pub fn_: Option<String>,
    #[serde(default)]
    pub flags: Option<String>,
    #[serde(default)]
    pub doc: String,
    /// enum: C literal suffix (`U`); flags: suffix of the shifted literals (`UL`).
    #[serde(default)]
    pub c_suffix: Option<String>,
    /// struct: emit a C struct tag (`typedef struct Name {...} Name;`).
    #[serde(default)]
    pub c_tag: bool,
    /// struct: Rust derives.
    #[serde(default)]
    pub derive: Vec<String>,
    /// struct: expected size/align on 64-bit targets (checked against the computed layout).
    #[serde(default)]
    pub abi: Option<Abi>,
    #[serde(default)]
    pub fields: Vec<Field>,
    /// enum: Rust representation (`i32`, `u8`, ...).
    #[serde(default)]
    pub repr: Option<String>,
    /// enum: C++ underlying type (`typedef enum : int32_t {` under `__cplusplus`).
    #[serde(default)]
    pub cpp_underlying: Option<String>,
    /// enum values, or flag values.
    #[serde(default)]
    pub values: Vec<EnumOrFlagValue>,
    /// fn: return type; flags: value type.
    #[serde(default)]
    pub returns: Option<String>,
    #[serde(default)]
    pub params: Vec<Param>,
    /// flags: the integer type of the flag word.
    #[serde(default, rename = "type")]
    pub ty: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Abi {
    pub size: usize,
    pub align: usize,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Field {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: String,
    #[serde(default)]
    pub doc: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Param {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: String,
}

/// An enum value (`value`, optional `bits` rule) or a flag (`bit`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnumOrFlagValue {
    pub name: String,
    #[serde(default)]
    pub value: Option<i64>,
    #[serde(default)]
    pub bit: Option<u32>,
    /// enum DLDataTypeCode: the only valid `bits` for this code.
    #[serde(default)]
    pub bits: Option<u8>,
    /// enum DLDeviceType: the CPU can read this memory directly (pinned or managed host
    /// memory), so host-only paths (buffer protocol, host copies) accept it.
    #[serde(default)]
    pub host_accessible: bool,
    #[serde(default)]
    pub doc: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DType {
    pub name: String,
    pub code: String,
    pub bits: u8,
    #[serde(default = "one")]
    pub lanes: u16,
    #[serde(default)]
    pub numpy: Option<String>,
    #[serde(default)]
    pub buffer: Option<String>,
    #[serde(default)]
    pub rust: Option<String>,
    #[serde(default)]
    pub doc: String,
}

fn one() -> u16 {
    1
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Streams {
    pub device_enum: String,
    pub actions: Vec<StreamAction>,
    pub below_min: BelowMin,
    pub stream_less: StreamLess,
    /// Why a value in [min, pointers_above] that no rule lists is rejected.
    pub unlisted_reason: String,
    #[serde(default)]
    pub rules: Vec<StreamRule>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamAction {
    pub name: String,
    #[serde(default)]
    pub carries_value: bool,
    #[serde(default)]
    pub doc: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BelowMin {
    pub min: i64,
    pub reason: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamLess {
    pub none: String,
    pub reason: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamRule {
    pub device: String,
    pub none: String,
    #[serde(default)]
    pub consumer_default: Option<i64>,
    #[serde(default)]
    pub values: Vec<StreamValue>,
    #[serde(default)]
    pub pointers_above: Option<i64>,
    #[serde(default)]
    pub doc: String,
}

/// One special stream value: either an `action` or a rejection `reason`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamValue {
    pub value: i64,
    #[serde(default)]
    pub action: Option<String>,
    #[serde(default)]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Exception {
    pub name: String,
    #[serde(default)]
    pub doc: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Failure {
    pub kind: String,
    pub exception: String,
    pub description: String,
}

impl Spec {
    /// Deserialize a spec from YAML text (shape only, no semantic checks).
    pub fn from_yaml(text: &str) -> Result<Spec, serde_yaml::Error> {
        serde_yaml::from_str(text)
    }
}
