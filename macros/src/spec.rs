//! The slice of the spec the derive needs, read from the generated table (`spec_source`).
//!
//! Everything the expansion takes from the spec goes through [`SpecView`]: the dtype table
//! (names, DLPack codes, Rust element types for messages) and the protocol's method and keyword names.
//! Validation and expansion take a `&SpecView`, so unit tests can pass a small fixture.

use std::sync::OnceLock;

/// One row of the spec's dtype table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DtypeEntry {
    /// Python name, e.g. `"float32"`, `"bfloat16"`.
    pub name: String,
    pub code: u8,
    pub bits: u8,
    pub lanes: u16,
    /// Rust element type, e.g. `"f32"`, `"half::bf16"`, `"num_complex::Complex<f32>"`.
    pub rust_type: Option<String>,
}

/// Names of the producer methods and their keyword-only parameters, in the order the runtime's
/// `dlpack_method(slf, stream, max_version, dl_device, copy)` takes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolNames {
    pub dlpack_method: String,
    pub dlpack_device_method: String,
    pub kw_stream: String,
    pub kw_max_version: String,
    pub kw_dl_device: String,
    pub kw_copy: String,
}

impl ProtocolNames {
    /// The four keyword names in the runtime's argument order.
    pub fn dlpack_kwargs(&self) -> [&str; 4] {
        [
            &self.kw_stream,
            &self.kw_max_version,
            &self.kw_dl_device,
            &self.kw_copy,
        ]
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecView {
    pub dtypes: Vec<DtypeEntry>,
    pub protocol: ProtocolNames,
    /// The type attribute holding the C exchange table (`__dlpack_c_exchange_api__`); `None`
    /// for specs older than DLPack 1.2/1.3 (then no table is emitted).
    pub exchange_attr: Option<String>,
}

impl SpecView {
    pub fn dtype_by_name(&self, name: &str) -> Option<&DtypeEntry> {
        self.dtypes.iter().find(|d| d.name == name)
    }

    /// Comma-separated dtype names, for error messages.
    pub fn dtype_names(&self) -> String {
        self.dtypes
            .iter()
            .map(|d| d.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Rust element types that have a DLPack dtype, for error messages.
    pub fn rust_type_names(&self) -> String {
        self.dtypes
            .iter()
            .filter_map(|d| d.rust_type.as_deref())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

static SPEC: OnceLock<Result<SpecView, String>> = OnceLock::new();

/// The generated table, lowered once per compiler process.
pub fn get() -> Result<&'static SpecView, String> {
    SPEC.get_or_init(load).as_ref().map_err(Clone::clone)
}

fn load() -> Result<SpecView, String> {
    crate::spec_source::load()
}

/// A small table with the same shape as the real one, for unit tests.
#[cfg(test)]
pub fn fixture() -> SpecView {
    let row = |name: &str, code, bits, rust: Option<&str>| DtypeEntry {
        name: name.into(),
        code,
        bits,
        lanes: 1,
        rust_type: rust.map(Into::into),
    };
    SpecView {
        dtypes: vec![
            row("bool", 6, 8, Some("bool")),
            row("int8", 0, 8, Some("i8")),
            row("int64", 0, 64, Some("i64")),
            row("uint8", 1, 8, Some("u8")),
            row("float16", 2, 16, Some("half::f16")),
            row("float32", 2, 32, Some("f32")),
            row("float64", 2, 64, Some("f64")),
            row("bfloat16", 4, 16, Some("half::bf16")),
            row("complex64", 5, 64, Some("num_complex::Complex<f32>")),
            row("float8_e4m3fn", 10, 8, None),
        ],
        protocol: ProtocolNames {
            dlpack_method: "__dlpack__".into(),
            dlpack_device_method: "__dlpack_device__".into(),
            kw_stream: "stream".into(),
            kw_max_version: "max_version".into(),
            kw_dl_device: "dl_device".into(),
            kw_copy: "copy".into(),
        },
        exchange_attr: Some("__dlpack_c_exchange_api__".into()),
    }
}
