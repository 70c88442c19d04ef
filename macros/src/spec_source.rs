//! Lowers the generated derive table into the [`SpecView`] the derive reads. The only module
//! that knows the table's shape.
//!
//! The table (`src/generated/derive_table.rs`) is this crate's copy of dlbind's generated
//! `generated/rust/derive_table.rs`: plain constants (dtype rows, protocol names), so the derive
//! compiles no YAML parser or template engine, as uniffi's macros read the small `uniffi_meta`
//! rather than the generator. `dlbind generate` writes the copy and `dlbind check` verifies it.

use crate::spec::{DtypeEntry, ProtocolNames, SpecView};

/// The generated table, included verbatim.
mod table {
    include!("generated/derive_table.rs");
}

pub fn load() -> Result<SpecView, String> {
    lower(&Table {
        dtypes: table::DTYPES,
        dlpack_method: table::DLPACK_METHOD,
        dlpack_device_method: table::DLPACK_DEVICE_METHOD,
        kw: [
            ("KW_STREAM", table::KW_STREAM),
            ("KW_MAX_VERSION", table::KW_MAX_VERSION),
            ("KW_DL_DEVICE", table::KW_DL_DEVICE),
            ("KW_COPY", table::KW_COPY),
        ],
        kwargs: table::DLPACK_KWARGS,
        exchange_attr: table::EXCHANGE_ATTR,
    })
}

/// The generated constants, gathered so tests can lower other tables.
pub struct Table {
    pub dtypes: &'static [table::DtypeRow],
    pub dlpack_method: &'static str,
    pub dlpack_device_method: &'static str,
    /// (role const, keyword) in the runtime's `dlpack_method` argument order.
    pub kw: [(&'static str, Option<&'static str>); 4],
    pub kwargs: &'static [&'static str],
    pub exchange_attr: Option<&'static str>,
}

pub fn lower(t: &Table) -> Result<SpecView, String> {
    let dtypes = t
        .dtypes
        .iter()
        .map(|&(name, code, bits, lanes, rust)| DtypeEntry {
            name: name.into(),
            code,
            bits,
            lanes,
            rust_type: rust.map(Into::into),
        })
        .collect();
    if t.kwargs.len() != 4 {
        return Err(format!(
            "`{}` has {} keywords; the runtime's dlpack_method takes 4 (stream, max_version, \
             dl_device, copy)",
            t.dlpack_method,
            t.kwargs.len()
        ));
    }
    // The runtime's `dlpack_method` takes the keywords by role; the spec names each role by the
    // Rust constant that holds the keyword (KW_STREAM, …), so match on that, not on position.
    let kw = |i: usize| -> Result<String, String> {
        let (konst, name) = t.kw[i];
        name.map(Into::into)
            .ok_or_else(|| format!("`{}` has no keyword with const `{konst}`", t.dlpack_method))
    };
    Ok(SpecView {
        dtypes,
        protocol: ProtocolNames {
            dlpack_method: t.dlpack_method.into(),
            dlpack_device_method: t.dlpack_device_method.into(),
            kw_stream: kw(0)?,
            kw_max_version: kw(1)?,
            kw_dl_device: kw(2)?,
            kw_copy: kw(3)?,
        },
        exchange_attr: t.exchange_attr.map(Into::into),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_table_lowers() {
        let spec = load().expect("generated table");
        let f32_ = spec.dtype_by_name("float32").expect("float32");
        assert_eq!((f32_.code, f32_.bits, f32_.lanes), (2, 32, 1));
        assert!(spec.dtype_by_name("bfloat16").is_some());
        assert_eq!(
            spec.protocol.dlpack_kwargs(),
            ["stream", "max_version", "dl_device", "copy"]
        );
        assert_eq!(spec.protocol.dlpack_method, "__dlpack__");
        assert_eq!(spec.protocol.dlpack_device_method, "__dlpack_device__");
        assert_eq!(
            spec.exchange_attr.as_deref(),
            Some("__dlpack_c_exchange_api__")
        );
        let row = |n: &str| spec.dtypes.iter().find(|d| d.name == n).unwrap();
        assert_eq!(row("bfloat16").rust_type.as_deref(), Some("half::bf16"));
        assert_eq!(
            row("complex128").rust_type.as_deref(),
            Some("num_complex::Complex<f64>")
        );
    }

    fn table() -> Table {
        Table {
            dtypes: &[("float32", 2, 32, 1, Some("f32"))],
            dlpack_method: "__dlpack__",
            dlpack_device_method: "__dlpack_device__",
            kw: [
                ("KW_STREAM", Some("s")),
                ("KW_MAX_VERSION", Some("mv")),
                ("KW_DL_DEVICE", Some("dd")),
                ("KW_COPY", Some("c")),
            ],
            kwargs: &["s", "mv", "dd", "c"],
            exchange_attr: None,
        }
    }

    #[test]
    fn keywords_are_taken_by_role() {
        let spec = lower(&table()).unwrap();
        assert_eq!(spec.protocol.dlpack_kwargs(), ["s", "mv", "dd", "c"]);
        assert_eq!(spec.exchange_attr, None);
    }

    #[test]
    fn a_missing_role_or_keyword_count_is_an_error() {
        let mut t = table();
        t.kw[3].1 = None;
        let e = lower(&t).unwrap_err();
        assert!(e.contains("no keyword with const `KW_COPY`"), "{e}");
        let mut t = table();
        t.kwargs = &["s", "mv", "dd"];
        let e = lower(&t).unwrap_err();
        assert!(e.contains("has 3 keywords"), "{e}");
    }
}
