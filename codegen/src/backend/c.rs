//! C backend: `generated/include/dlpack.h`, ABI-identical to upstream dlpack.h.

use std::collections::HashMap;

use serde::Serialize;

use super::{Output, banner, doc_lines, render_template};
use crate::error::Result;
use crate::ir::{FnSig, Ir, Item, Ty};

/// Renders C type expressions; knows where each struct is declared so that
/// references to incomplete (or self-referencing) structs use `struct Tag`.
struct CTypes {
    decl_index: HashMap<String, usize>,
}

impl CTypes {
    /// The abstract C type (no declarator), e.g. `const char*`.
    fn ty(&self, ty: &Ty, at: usize) -> String {
        self.decl(ty, "", at)
    }

    /// A C declaration of `name` with type `ty`, as used at item index `at`.
    fn decl(&self, ty: &Ty, name: &str, at: usize) -> String {
        let join = |t: String| {
            if name.is_empty() {
                t
            } else {
                format!("{t} {name}")
            }
        };
        match ty {
            Ty::Prim { prim } => join(prim.c_name().to_string()),
            Ty::Named { name: n, of } => {
                let incomplete = *of == crate::ir::NamedKind::Struct
                    && self.decl_index.get(n).is_some_and(|&i| i >= at);
                join(if incomplete {
                    format!("struct {n}")
                } else {
                    n.clone()
                })
            }
            Ty::Ptr { mutable, to } => {
                if let Ty::FnPtr { sig } = &**to {
                    return self.fn_decl(sig, &format!("*{name}"), at);
                }
                let inner = self.ty(to, at);
                let t = if *mutable {
                    format!("{inner}*")
                } else if inner.ends_with('*') {
                    format!("{inner} const*")
                } else {
                    format!("const {inner}*")
                };
                join(t)
            }
            Ty::FnPtr { sig } => self.fn_decl(sig, name, at),
        }
    }

    /// `R (*name)(params)`.
    fn fn_decl(&self, sig: &FnSig, name: &str, at: usize) -> String {
        let ret = sig
            .ret
            .as_ref()
            .map_or("void".to_string(), |r| self.ty(r, at));
        let params: Vec<String> = sig
            .params
            .iter()
            .map(|p| self.decl(&p.ty, &p.name, at))
            .collect();
        let params = if params.is_empty() {
            "void".to_string()
        } else {
            params.join(", ")
        };
        format!("{ret} (*{name})({params})")
    }
}

#[derive(Serialize)]
struct HeaderView {
    banner: String,
    guard: String,
    major_macro: String,
    minor_macro: String,
    major: u32,
    minor: u32,
    items: Vec<ItemView>,
}

#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum ItemView {
    Struct {
        name: String,
        doc: Vec<String>,
        tag: bool,
        fields: Vec<FieldView>,
    },
    Enum {
        name: String,
        doc: Vec<String>,
        cpp_underlying: Option<String>,
        values: Vec<ValueView>,
    },
    Fn {
        name: String,
        doc: Vec<String>,
        decl: String,
        params: Vec<String>,
    },
    Flags {
        name: String,
        doc: Vec<String>,
        values: Vec<ValueView>,
    },
}

#[derive(Serialize)]
struct FieldView {
    decl: String,
    doc: Vec<String>,
}

#[derive(Serialize)]
struct ValueView {
    name: String,
    value: String,
    doc: Vec<String>,
}

/// Render `include/dlpack.h`.
pub fn render(ir: &Ir, source: &str) -> Result<Vec<Output>> {
    let types = CTypes {
        decl_index: ir
            .items
            .iter()
            .enumerate()
            .map(|(i, it)| (it.name().to_string(), i))
            .collect(),
    };
    let items = ir
        .items
        .iter()
        .enumerate()
        .map(|(at, item)| match item {
            Item::Struct(s) => ItemView::Struct {
                name: s.name.clone(),
                doc: doc_lines(&s.doc),
                tag: s.c_tag,
                fields: s
                    .fields
                    .iter()
                    .map(|f| FieldView {
                        decl: types.decl(&f.ty, &f.name, at),
                        doc: doc_lines(&f.doc),
                    })
                    .collect(),
            },
            Item::Enum(e) => ItemView::Enum {
                name: e.name.clone(),
                doc: doc_lines(&e.doc),
                cpp_underlying: e.cpp_underlying.clone(),
                values: e
                    .values
                    .iter()
                    .map(|v| ValueView {
                        name: v.name.clone(),
                        value: format!("{}{}", v.value, e.c_suffix),
                        doc: doc_lines(&v.doc),
                    })
                    .collect(),
            },
            Item::Fn(f) => {
                let ret = f
                    .sig
                    .ret
                    .as_ref()
                    .map_or("void".to_string(), |r| types.ty(r, at));
                ItemView::Fn {
                    name: f.name.clone(),
                    doc: doc_lines(&f.doc),
                    decl: format!("{ret} (*{})", f.name),
                    params: f
                        .sig
                        .params
                        .iter()
                        .map(|p| types.decl(&p.ty, &p.name, at))
                        .collect(),
                }
            }
            Item::Flags(f) => ItemView::Flags {
                name: f.name.clone(),
                doc: doc_lines(&f.doc),
                values: f
                    .values
                    .iter()
                    .map(|v| ValueView {
                        name: v.name.clone(),
                        value: format!("(1{s} << {}{s})", v.bit, s = f.c_suffix),
                        doc: doc_lines(&v.doc),
                    })
                    .collect(),
            },
        })
        .collect();
    let view = HeaderView {
        banner: banner(source),
        guard: ir.c_header.guard.clone(),
        major_macro: ir.c_header.major_macro.clone(),
        minor_macro: ir.c_header.minor_macro.clone(),
        major: ir.version.major,
        minor: ir.version.minor,
        items,
    };
    Ok(vec![Output {
        path: "include/dlpack.h".into(),
        contents: render_template("c/header.h", &view)?,
    }])
}
