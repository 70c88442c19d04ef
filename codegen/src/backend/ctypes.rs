//! ctypes backend: `generated/python/dlpack_ctypes.py`, the C ABI for pure-Python consumers:
//! `ctypes.Structure`s with their fields, enum and flag constants, capsule and attribute
//! names, and the pointer-reading helpers (capsule pointer, managed tensor, shape/strides,
//! exchange table). One template per node kind (`codegen/templates/python/ctypes_*.py`).

use serde::Serialize;

use super::{ConstView, Output, banner, doc_lines, quoted, render_template};
use crate::error::Result;
use crate::ir::{FnSig, Ir, Item, Prim, Ty};

fn prim(p: Prim) -> &'static str {
    match p {
        Prim::U8 => "ctypes.c_uint8",
        Prim::U16 => "ctypes.c_uint16",
        Prim::U32 => "ctypes.c_uint32",
        Prim::U64 => "ctypes.c_uint64",
        Prim::I8 => "ctypes.c_int8",
        Prim::I16 => "ctypes.c_int16",
        Prim::I32 => "ctypes.c_int32",
        Prim::I64 => "ctypes.c_int64",
        Prim::CInt => "ctypes.c_int",
        Prim::CChar => "ctypes.c_char",
        Prim::CVoid => "None",
    }
}

/// A type as a ctypes expression (`ctypes.POINTER(ctypes.c_int64)`, `ctypes.CFUNCTYPE(...)`).
pub fn ctype(ty: &Ty) -> String {
    match ty {
        Ty::Prim { prim: p } => prim(*p).to_string(),
        Ty::Named { name, .. } => name.clone(),
        Ty::Ptr { to, .. } => match &**to {
            Ty::Prim { prim: Prim::CVoid } => "ctypes.c_void_p".into(),
            Ty::Prim { prim: Prim::CChar } => "ctypes.c_char_p".into(),
            // a pointer to a function pointer type is a pointer to that CFUNCTYPE
            inner => format!("ctypes.POINTER({})", ctype(inner)),
        },
        Ty::FnPtr { sig } => cfunctype(sig),
    }
}

fn cfunctype(sig: &FnSig) -> String {
    let mut args = vec![sig.ret.as_deref().map_or("None".to_string(), ctype)];
    args.extend(sig.params.iter().map(|p| ctype(&p.ty)));
    format!("ctypes.CFUNCTYPE({})", args.join(", "))
}

#[derive(Serialize)]
struct CtypesView {
    banner: String,
    name: String,
    major_macro: String,
    minor_macro: String,
    major: u32,
    minor: u32,
    items: Vec<ItemView>,
    capsules: Vec<ConstView>,
    attributes: Vec<ConstView>,
    helpers: Helpers,
}

#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum ItemView {
    Struct {
        name: String,
        doc: Vec<String>,
        fields: Vec<(String, String)>,
        size: usize,
    },
    Enum {
        name: String,
        doc: Vec<String>,
        ty: String,
        values: Vec<ConstView>,
    },
    Fn {
        name: String,
        doc: Vec<String>,
        ty: String,
    },
    Flags {
        name: String,
        doc: Vec<String>,
        values: Vec<ConstView>,
    },
}

/// Which helpers the spec supports (each needs the structs and names it reads).
#[derive(Serialize, Default)]
struct Helpers {
    /// `DLTensor` with data/ndim/shape/strides/byte_offset.
    tensor: bool,
    /// (capsule const, used capsule const, struct) for the versioned and legacy capsules.
    versioned: Option<(String, String, String)>,
    legacy: Option<(String, String, String)>,
    /// (attribute const, capsule const, struct) of the C exchange table.
    exchange: Option<(String, String, String)>,
}

fn helpers(ir: &Ir) -> Helpers {
    let has_fields = |s: &str, fields: &[&str]| {
        ir.struct_named(s).is_some_and(|st| {
            fields
                .iter()
                .all(|f| st.fields.iter().any(|x| x.name == *f))
        })
    };
    let capsule = |n: &str| ir.capsules.iter().any(|c| c.name == n);
    let managed = |cap: &str, used: &str, s: &str| {
        (capsule(cap) && capsule(used) && has_fields(s, &["dl_tensor", "deleter"]))
            .then(|| (cap.to_string(), used.to_string(), s.to_string()))
    };
    let tensor = has_fields(
        "DLTensor",
        &["data", "ndim", "shape", "strides", "byte_offset"],
    );
    Helpers {
        tensor,
        versioned: managed(
            "DLPACK_VERSIONED_CAPSULE_NAME",
            "DLPACK_VERSIONED_USED_CAPSULE_NAME",
            "DLManagedTensorVersioned",
        )
        .filter(|_| tensor && has_fields("DLManagedTensorVersioned", &["version"])),
        legacy: managed(
            "DLPACK_CAPSULE_NAME",
            "DLPACK_USED_CAPSULE_NAME",
            "DLManagedTensor",
        )
        .filter(|_| tensor),
        exchange: match (&ir.exchange_attribute, ir.struct_named("DLPackExchangeAPI")) {
            (Some(a), Some(_)) if capsule("DLPACK_EXCHANGE_API_CAPSULE_NAME") => Some((
                a.name.clone(),
                "DLPACK_EXCHANGE_API_CAPSULE_NAME".into(),
                "DLPackExchangeAPI".into(),
            )),
            _ => None,
        },
    }
}

/// Render `python/dlpack_ctypes.py`.
pub fn render(ir: &Ir, source: &str) -> Result<Vec<Output>> {
    let items = ir
        .items
        .iter()
        .map(|item| match item {
            Item::Struct(s) => ItemView::Struct {
                name: s.name.clone(),
                doc: doc_lines(&s.doc),
                fields: s
                    .fields
                    .iter()
                    .map(|f| (f.name.clone(), ctype(&f.ty)))
                    .collect(),
                size: s.size,
            },
            Item::Enum(e) => ItemView::Enum {
                name: e.name.clone(),
                doc: doc_lines(&e.doc),
                ty: prim(e.repr).to_string(),
                values: e
                    .values
                    .iter()
                    .map(|v| ConstView::new(&v.name, v.value.to_string(), &v.doc))
                    .collect(),
            },
            Item::Fn(f) => ItemView::Fn {
                name: f.name.clone(),
                doc: doc_lines(&f.doc),
                ty: cfunctype(&f.sig),
            },
            Item::Flags(f) => ItemView::Flags {
                name: f.name.clone(),
                doc: doc_lines(&f.doc),
                values: f
                    .values
                    .iter()
                    .map(|v| ConstView::new(&v.name, format!("1 << {}", v.bit), &v.doc))
                    .collect(),
            },
        })
        .collect();
    let view = CtypesView {
        banner: banner(source),
        name: ir.name.clone(),
        major_macro: ir.c_header.major_macro.clone(),
        minor_macro: ir.c_header.minor_macro.clone(),
        major: ir.version.major,
        minor: ir.version.minor,
        items,
        capsules: ir
            .capsules
            .iter()
            .map(|c| ConstView::string(c, |s| format!("b{}", quoted(s))))
            .collect(),
        attributes: ir
            .exchange_attribute
            .iter()
            .chain(&ir.exchange_legacy_attributes)
            .map(|a| ConstView::string(a, quoted))
            .collect(),
        helpers: helpers(ir),
    };
    Ok(vec![Output {
        path: "python/dlpack_ctypes.py".into(),
        contents: render_template("python/dlpack_ctypes.py", &view)?,
    }])
}
