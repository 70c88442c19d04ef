//! Python backend: `generated/python/dlpack.pyi` (typing stubs).

use serde::Serialize;

use super::{ConstView, Output, banner, doc_lines, quoted, render_template};
use crate::error::Result;
use crate::ir::{Ir, Method};

#[derive(Serialize)]
struct PyiView {
    banner: String,
    major_macro: String,
    minor_macro: String,
    major: u32,
    minor: u32,
    enums: Vec<EnumView>,
    flags: Vec<ConstView>,
    capsules: Vec<ConstView>,
    attribute: Option<ConstView>,
    /// The exchange attribute itself (`__dlpack_c_exchange_api__`), for the protocol.
    attribute_name: Option<String>,
    legacy_attributes: Vec<ConstView>,
    dlpack: MethodView,
    dlpack_device: MethodView,
    from_dlpack: MethodView,
    dtypes: Vec<String>,
}

#[derive(Serialize)]
struct EnumView {
    name: String,
    doc: Vec<String>,
    values: Vec<ConstView>,
}

#[derive(Serialize)]
struct MethodView {
    name: String,
    doc: Vec<String>,
    returns: String,
    kwargs: Vec<String>,
}

fn method(m: &Method, default_ret: &str) -> MethodView {
    MethodView {
        name: m.name.clone(),
        doc: doc_lines(&m.doc),
        returns: m.returns.clone().unwrap_or_else(|| default_ret.to_string()),
        kwargs: m
            .kwargs
            .iter()
            .map(|k| format!("{}: {} = None", k.name, k.py_type))
            .collect(),
    }
}

/// Render `python/dlpack.pyi`.
pub fn render(ir: &Ir, source: &str) -> Result<Vec<Output>> {
    let view = PyiView {
        banner: banner(source),
        major_macro: ir.c_header.major_macro.clone(),
        minor_macro: ir.c_header.minor_macro.clone(),
        major: ir.version.major,
        minor: ir.version.minor,
        enums: ir
            .enums()
            .map(|e| EnumView {
                name: e.name.clone(),
                doc: doc_lines(&e.doc),
                values: e
                    .values
                    .iter()
                    .map(|v| ConstView::new(&v.name, v.value.to_string(), &v.doc))
                    .collect(),
            })
            .collect(),
        flags: ir
            .flags()
            .map(|f| ConstView::new(&f.name, f.value.to_string(), &f.doc))
            .collect(),
        capsules: ir
            .capsules
            .iter()
            .map(|c| ConstView::string(c, quoted))
            .collect(),
        attribute: ir
            .exchange_attribute
            .as_ref()
            .map(|a| ConstView::string(a, quoted)),
        attribute_name: ir.exchange_attribute.as_ref().map(|a| a.value.clone()),
        legacy_attributes: ir
            .exchange_legacy_attributes
            .iter()
            .map(|a| ConstView::string(a, quoted))
            .collect(),
        dlpack: method(&ir.protocol.dlpack, "PyCapsule"),
        dlpack_device: method(&ir.protocol.dlpack_device, "tuple[int, int]"),
        from_dlpack: method(&ir.protocol.from_dlpack, "Any"),
        dtypes: ir.dtypes.iter().map(|d| format!("{:?}", d.name)).collect(),
    };
    Ok(vec![Output {
        path: "python/dlpack.pyi".into(),
        contents: render_template("python/dlpack.pyi", &view)?,
    }])
}
