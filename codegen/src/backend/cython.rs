//! Cython backend: `generated/cython/dlpack.pxd`, `cdef extern from "dlpack.h"` declarations
//! of every struct, enum, flag and function typedef, plus the capsule and attribute names as
//! static C strings. One template per node kind (`codegen/templates/cython/`).

use serde::Serialize;

use super::{ConstView, Output, banner, doc_lines, render_template};
use crate::error::Result;
use crate::ir::{FnSig, Ir, Item, Prim, Ty};

/// Cython spelling of a primitive.
fn prim(p: Prim) -> &'static str {
    match p {
        Prim::CInt => "int",
        Prim::CChar => "char",
        Prim::CVoid => "void",
        other => other.c_name(),
    }
}

/// A C declarator in Cython syntax: `ty` declaring `name` (`int64_t* shape`,
/// `void (*deleter)(DLManagedTensor*)`). `name` may be empty (an abstract declarator).
pub fn declare(ty: &Ty, name: &str) -> String {
    match ty {
        Ty::Prim { prim: p } => join(prim(*p), name),
        Ty::Named { name: n, .. } => join(n, name),
        Ty::Ptr { mutable, to } => {
            let cst = if *mutable { "" } else { "const " };
            match &**to {
                Ty::FnPtr { .. } => declare(to, &format!("*{name}")),
                inner => format!("{cst}{}", declare(inner, &format!("*{name}"))),
            }
        }
        Ty::FnPtr { sig } => fn_declarator(sig, &format!("(*{name})")),
    }
}

/// `int64_t` + `**out` -> `int64_t** out`; `void` + `(*f)` -> `void (*f)`.
fn join(ty: &str, name: &str) -> String {
    let rest = name.trim_start_matches('*');
    let stars = &name[..name.len() - rest.len()];
    if rest.is_empty() {
        format!("{ty}{stars}")
    } else {
        format!("{ty}{stars} {rest}")
    }
}

/// `R name(params)`; parameters are unnamed inside inline function pointers (Cython reads a
/// parameter named like a type or a keyword, e.g. `self`, badly), named in typedefs.
fn fn_declarator(sig: &FnSig, name: &str) -> String {
    let params: Vec<String> = sig.params.iter().map(|p| declare(&p.ty, "")).collect();
    let ret = sig
        .ret
        .as_deref()
        .map_or("void".to_string(), |r| declare(r, ""));
    let params = if params.is_empty() {
        "void".to_string()
    } else {
        params.join(", ")
    };
    format!("{} {name}({params})", ret)
}

#[derive(Serialize)]
struct PxdView {
    banner: String,
    name: String,
    major_macro: String,
    minor_macro: String,
    major: u32,
    minor: u32,
    items: Vec<ItemView>,
    /// Capsule and attribute names: (name, C string literal, doc).
    strings: Vec<ConstView>,
}

#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum ItemView {
    Struct {
        name: String,
        doc: Vec<String>,
        fields: Vec<String>,
    },
    Enum {
        name: String,
        doc: Vec<String>,
        values: Vec<ConstView>,
    },
    Fn {
        name: String,
        doc: Vec<String>,
        decl: String,
    },
    Flags {
        name: String,
        doc: Vec<String>,
        ty: String,
        values: Vec<ConstView>,
    },
}

/// Render `cython/dlpack.pxd`.
pub fn render(ir: &Ir, source: &str) -> Result<Vec<Output>> {
    let items = ir
        .items
        .iter()
        .map(|item| match item {
            Item::Struct(s) => ItemView::Struct {
                name: s.name.clone(),
                doc: doc_lines(&s.doc),
                fields: s.fields.iter().map(|f| declare(&f.ty, &f.name)).collect(),
            },
            Item::Enum(e) => ItemView::Enum {
                name: e.name.clone(),
                doc: doc_lines(&e.doc),
                values: e
                    .values
                    .iter()
                    .map(|v| ConstView::new(&v.name, v.value.to_string(), &v.doc))
                    .collect(),
            },
            Item::Fn(f) => {
                // typedefs keep their parameter names (they document the C API)
                let params: Vec<String> = f
                    .sig
                    .params
                    .iter()
                    .map(|p| declare(&p.ty, &p.name))
                    .collect();
                let ret = f
                    .sig
                    .ret
                    .as_deref()
                    .map_or("void".to_string(), |r| declare(r, ""));
                ItemView::Fn {
                    name: f.name.clone(),
                    doc: doc_lines(&f.doc),
                    decl: format!("{ret} (*{})({})", f.name, params.join(", ")),
                }
            }
            Item::Flags(f) => ItemView::Flags {
                name: f.name.clone(),
                doc: doc_lines(&f.doc),
                ty: prim(f.ty).to_string(),
                values: f
                    .values
                    .iter()
                    .map(|v| ConstView::new(&v.name, v.value.to_string(), &v.doc))
                    .collect(),
            },
        })
        .collect();
    let c_string = |s: &str| format!("{s:?}");
    let mut strings: Vec<ConstView> = ir
        .capsules
        .iter()
        .map(|c| ConstView::string(c, c_string))
        .collect();
    strings.extend(
        ir.exchange_attribute
            .iter()
            .chain(&ir.exchange_legacy_attributes)
            .map(|a| ConstView::string(a, c_string)),
    );
    let view = PxdView {
        banner: banner(source),
        name: ir.name.clone(),
        major_macro: ir.c_header.major_macro.clone(),
        minor_macro: ir.c_header.minor_macro.clone(),
        major: ir.version.major,
        minor: ir.version.minor,
        items,
        strings,
    };
    Ok(vec![Output {
        path: "cython/dlpack.pxd".into(),
        contents: render_template("cython/dlpack.pxd", &view)?,
    }])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declarators() {
        let i64p = Ty::Ptr {
            mutable: true,
            to: Box::new(Ty::Prim { prim: Prim::I64 }),
        };
        assert_eq!(declare(&i64p, "shape"), "int64_t* shape");
        let cstr = Ty::Ptr {
            mutable: false,
            to: Box::new(Ty::Prim { prim: Prim::CChar }),
        };
        assert_eq!(declare(&cstr, ""), "const char*");
        let f = Ty::FnPtr {
            sig: FnSig {
                params: vec![crate::ir::FnParam {
                    name: "self".into(),
                    ty: i64p.clone(),
                }],
                ret: None,
            },
        };
        assert_eq!(declare(&f, "deleter"), "void (*deleter)(int64_t*)");
        let pp = Ty::Ptr {
            mutable: true,
            to: Box::new(i64p),
        };
        assert_eq!(declare(&pp, "out"), "int64_t** out");
    }
}
