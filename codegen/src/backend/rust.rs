//! Rust backend: `generated/rust/{types,dtypes,elements,streams,errors,protocol}.rs`
//! (Contract 1 in docs/architecture.md).

use serde::Serialize;

use super::{ConstView, Output, banner, doc_lines, quoted, render_template, snake_case};
use crate::error::Result;
use crate::ir::{FnSig, Ir, Item, Ty};

/// Where the including crate puts `types.rs` (`dlbind::ffi`).
pub const FFI_PATH: &str = "crate::ffi";

const RUST_KEYWORDS: &[&str] = &[
    "as", "break", "const", "continue", "crate", "else", "enum", "extern", "false", "fn", "for",
    "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub", "ref", "return",
    "self", "Self", "static", "struct", "super", "trait", "true", "type", "unsafe", "use", "where",
    "while", "async", "await", "dyn", "gen",
];

/// A type as Rust source, with named types qualified by `prefix` (`""` inside types.rs).
pub fn rust_type(ty: &Ty, prefix: &str) -> String {
    match ty {
        Ty::Prim { prim } => prim.rust_name().to_string(),
        Ty::Ptr { mutable, to } => format!(
            "*{} {}",
            if *mutable { "mut" } else { "const" },
            rust_type(to, prefix)
        ),
        Ty::Named { name, .. } => format!("{prefix}{name}"),
        Ty::FnPtr { sig } => rust_fn_ptr(sig, prefix),
    }
}

/// `Option<unsafe extern "C" fn(a: A, b: B) -> R>` (C function pointers are nullable).
pub fn rust_fn_ptr(sig: &FnSig, prefix: &str) -> String {
    let params: Vec<String> = sig
        .params
        .iter()
        .map(|p| {
            let name = snake_case(&p.name);
            let ty = rust_type(&p.ty, prefix);
            if name.is_empty() || RUST_KEYWORDS.contains(&name.as_str()) {
                ty
            } else {
                format!("{name}: {ty}")
            }
        })
        .collect();
    let ret = match &sig.ret {
        Some(r) => format!(" -> {}", rust_type(r, prefix)),
        None => String::new(),
    };
    format!("Option<unsafe extern \"C\" fn({}){ret}>", params.join(", "))
}

#[derive(Serialize)]
struct TypesView {
    banner: String,
    major_const: String,
    minor_const: String,
    major: u32,
    minor: u32,
    items: Vec<ItemView>,
    capsules: Vec<ConstView>,
    attribute: Option<ConstView>,
    legacy_attributes: Vec<ConstView>,
    structs: Vec<StructView>,
}

#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum ItemView {
    Struct(StructView),
    Enum(EnumView),
    Fn(FnView),
    Flags(FlagsView),
}

#[derive(Serialize, Clone)]
struct StructView {
    name: String,
    doc: Vec<String>,
    derive: String,
    fields: Vec<FieldView>,
    size: usize,
    align: usize,
    pointer_free: bool,
}

#[derive(Serialize, Clone)]
struct FieldView {
    name: String,
    ty: String,
    doc: Vec<String>,
    offset: usize,
}

#[derive(Serialize)]
struct EnumView {
    name: String,
    doc: Vec<String>,
    repr: String,
    values: Vec<ValueView>,
    /// Values marked `host_accessible` (empty: no `is_host_accessible` method).
    host_accessible: Vec<ValueView>,
}

#[derive(Serialize)]
struct ValueView {
    name: String,
    value: String,
    doc: Vec<String>,
}

#[derive(Serialize)]
struct FnView {
    name: String,
    doc: Vec<String>,
    ty: String,
}

#[derive(Serialize)]
struct FlagsView {
    name: String,
    doc: Vec<String>,
    ty: String,
    values: Vec<ValueView>,
}

fn types_view(ir: &Ir, source: &str) -> TypesView {
    let mut structs = Vec::new();
    let items = ir
        .items
        .iter()
        .map(|item| match item {
            Item::Struct(s) => {
                let v = StructView {
                    name: s.name.clone(),
                    doc: doc_lines(&s.doc),
                    derive: s.derive.join(", "),
                    fields: s
                        .fields
                        .iter()
                        .map(|f| FieldView {
                            name: f.name.clone(),
                            ty: rust_type(&f.ty, ""),
                            doc: doc_lines(&f.doc),
                            offset: f.offset,
                        })
                        .collect(),
                    size: s.size,
                    align: s.align,
                    pointer_free: s.pointer_free,
                };
                structs.push(v.clone());
                ItemView::Struct(v)
            }
            Item::Enum(e) => ItemView::Enum(EnumView {
                name: e.name.clone(),
                doc: doc_lines(&e.doc),
                repr: e.repr.rust_name().to_string(),
                values: e
                    .values
                    .iter()
                    .map(|v| ValueView {
                        name: v.name.clone(),
                        value: v.value.to_string(),
                        doc: doc_lines(&v.doc),
                    })
                    .collect(),
                host_accessible: e
                    .values
                    .iter()
                    .filter(|v| v.host_accessible)
                    .map(|v| ValueView {
                        name: v.name.clone(),
                        value: v.value.to_string(),
                        doc: Vec::new(),
                    })
                    .collect(),
            }),
            Item::Fn(f) => ItemView::Fn(FnView {
                name: f.name.clone(),
                doc: doc_lines(&f.doc),
                ty: rust_fn_ptr(&f.sig, ""),
            }),
            Item::Flags(f) => ItemView::Flags(FlagsView {
                name: f.name.clone(),
                doc: doc_lines(&f.doc),
                ty: f.ty.rust_name().to_string(),
                values: f
                    .values
                    .iter()
                    .map(|v| ValueView {
                        name: v.name.clone(),
                        value: v.value.to_string(),
                        doc: doc_lines(&v.doc),
                    })
                    .collect(),
            }),
        })
        .collect();
    TypesView {
        banner: banner(source),
        major_const: ir.c_header.major_macro.clone(),
        minor_const: ir.c_header.minor_macro.clone(),
        major: ir.version.major,
        minor: ir.version.minor,
        items,
        capsules: ir
            .capsules
            .iter()
            .map(|c| ConstView::string(c, |v| format!("c{v:?}")))
            .collect(),
        attribute: ir
            .exchange_attribute
            .as_ref()
            .map(|a| ConstView::string(a, quoted)),
        legacy_attributes: ir
            .exchange_legacy_attributes
            .iter()
            .map(|a| ConstView::string(a, quoted))
            .collect(),
        structs,
    }
}

#[derive(Serialize)]
struct DTypesView {
    banner: String,
    ffi: &'static str,
    dtypes: Vec<DTypeView>,
    bit_rules: Vec<(i64, u8, String)>,
}

#[derive(Serialize)]
struct DTypeView {
    index: usize,
    name: String,
    code: u8,
    code_name: String,
    bits: u8,
    lanes: u16,
    numpy: String,
    buffer: String,
    rust: String,
    rust_type: Option<String>,
    numpy_raw: Option<String>,
    buffer_raw: Option<String>,
    doc: Vec<String>,
}

fn opt_str(s: &Option<String>) -> String {
    match s {
        Some(s) => format!("Some({s:?})"),
        None => "None".to_string(),
    }
}

fn dtypes_view(ir: &Ir, source: &str) -> DTypesView {
    let bit_rules = ir
        .dtype_code_enum()
        .map(|e| {
            e.values
                .iter()
                .filter_map(|v| v.bits.map(|b| (v.value, b, v.name.clone())))
                .collect()
        })
        .unwrap_or_default();
    DTypesView {
        banner: banner(source),
        ffi: FFI_PATH,
        dtypes: ir
            .dtypes
            .iter()
            .enumerate()
            .map(|(index, d)| DTypeView {
                index,
                name: d.name.clone(),
                code: d.code,
                code_name: d.code_name.clone(),
                bits: d.bits,
                lanes: d.lanes,
                numpy: opt_str(&d.numpy),
                buffer: opt_str(&d.buffer),
                rust: opt_str(&d.rust),
                rust_type: d.rust.clone(),
                numpy_raw: d.numpy.clone().map(|s| format!("{s:?}")),
                buffer_raw: d.buffer.clone().map(|s| format!("{s:?}")),
                doc: doc_lines(&d.doc),
            })
            .collect(),
        bit_rules,
    }
}

#[derive(Serialize)]
struct StreamsView {
    banner: String,
    ffi: &'static str,
    device_enum: String,
    actions: Vec<ActionView>,
    min: i64,
    below_min_reason: String,
    stream_less_none: String,
    stream_less_reason: String,
    unlisted_reason: String,
    carrier: Option<String>,
    rules: Vec<RuleView>,
}

#[derive(Serialize)]
struct ActionView {
    name: String,
    carries_value: bool,
    doc: Vec<String>,
}

#[derive(Serialize)]
struct RuleView {
    device: String,
    none: String,
    consumer_default: Option<i64>,
    arms: Vec<ArmView>,
    pointers_above: Option<i64>,
}

#[derive(Serialize)]
struct ArmView {
    value: i64,
    action: Option<String>,
    reason: Option<String>,
}

fn streams_view(ir: &Ir, source: &str) -> StreamsView {
    let s = &ir.streams;
    StreamsView {
        banner: banner(source),
        ffi: FFI_PATH,
        device_enum: s.device_enum.clone(),
        actions: s
            .actions
            .iter()
            .map(|a| ActionView {
                name: a.name.clone(),
                carries_value: a.carries_value,
                doc: doc_lines(&a.doc),
            })
            .collect(),
        min: s.min,
        below_min_reason: format!("{:?}", s.below_min_reason),
        stream_less_none: s.stream_less_none.clone(),
        stream_less_reason: format!("{:?}", s.stream_less_reason),
        unlisted_reason: format!("{:?}", s.unlisted_reason),
        carrier: s
            .actions
            .iter()
            .find(|a| a.carries_value)
            .map(|a| a.name.clone()),
        rules: s
            .rules
            .iter()
            .map(|r| RuleView {
                device: r.device.clone(),
                none: r.none.clone(),
                consumer_default: r.consumer_default,
                arms: r
                    .values
                    .iter()
                    .map(|v| ArmView {
                        value: v.value,
                        action: v.action.clone(),
                        reason: v.reason.as_ref().map(|r| format!("{r:?}")),
                    })
                    .collect(),
                pointers_above: r.pointers_above,
            })
            .collect(),
    }
}

#[derive(Serialize)]
struct ErrorsView {
    banner: String,
    exceptions: Vec<ActionView>,
    failures: Vec<FailureView>,
}

#[derive(Serialize)]
struct FailureView {
    kind: String,
    exception: String,
    description: String,
    doc: Vec<String>,
}

#[derive(Serialize)]
struct ProtocolView {
    banner: String,
    consts: Vec<ConstView>,
}

fn protocol_view(ir: &Ir, source: &str) -> ProtocolView {
    let mut consts = Vec::new();
    for m in [
        &ir.protocol.dlpack,
        &ir.protocol.dlpack_device,
        &ir.protocol.from_dlpack,
    ] {
        if let Some(c) = &m.const_name {
            consts.push(ConstView::new(c, quoted(&m.name), &m.doc));
        }
        for k in &m.kwargs {
            let mut doc = vec![format!("Keyword `{}` of `{}`.", k.name, m.name)];
            doc.extend(doc_lines(&k.doc));
            consts.push(ConstView {
                name: k.const_name.clone(),
                value: format!("{:?}", k.name),
                doc,
            });
        }
    }
    ProtocolView {
        banner: banner(source),
        consts,
    }
}

#[derive(Serialize)]
struct DeriveRowView {
    name: String,
    code: u8,
    bits: u8,
    lanes: u16,
    rust: String,
}

#[derive(Serialize)]
struct DeriveTableView {
    banner: String,
    dtypes: Vec<DeriveRowView>,
    dlpack_method: String,
    dlpack_device_method: String,
    kw_stream: String,
    kw_max_version: String,
    kw_dl_device: String,
    kw_copy: String,
    kwargs: Vec<String>,
    exchange_attr: String,
}

/// The derive's table (`rust/derive_table.rs`): dtype rows and protocol names, as Rust literals.
fn derive_table_view(ir: &Ir, source: &str) -> DeriveTableView {
    let dl = &ir.protocol.dlpack;
    let some = |s: Option<&str>| s.map_or_else(|| "None".to_string(), |s| format!("Some({s:?})"));
    let kw = |konst: &str| {
        some(
            dl.kwargs
                .iter()
                .find(|k| k.const_name == konst)
                .map(|k| k.name.as_str()),
        )
    };
    DeriveTableView {
        banner: banner(source),
        dtypes: ir
            .dtypes
            .iter()
            .map(|d| DeriveRowView {
                name: quoted(&d.name),
                code: d.code,
                bits: d.bits,
                lanes: d.lanes,
                rust: some(d.rust.as_deref()),
            })
            .collect(),
        dlpack_method: quoted(&dl.name),
        dlpack_device_method: quoted(&ir.protocol.dlpack_device.name),
        kw_stream: kw("KW_STREAM"),
        kw_max_version: kw("KW_MAX_VERSION"),
        kw_dl_device: kw("KW_DL_DEVICE"),
        kw_copy: kw("KW_COPY"),
        kwargs: dl.kwargs.iter().map(|k| quoted(&k.name)).collect(),
        exchange_attr: some(ir.exchange_attribute.as_ref().map(|a| a.value.as_str())),
    }
}

/// Render the Rust files: the runtime's six and the derive's table.
pub fn render(ir: &Ir, source: &str) -> Result<Vec<Output>> {
    let dt = dtypes_view(ir, source);
    let errors = ErrorsView {
        banner: banner(source),
        exceptions: ir
            .exceptions
            .iter()
            .map(|e| ActionView {
                name: e.name.clone(),
                carries_value: false,
                doc: doc_lines(&e.doc),
            })
            .collect(),
        failures: ir
            .failures
            .iter()
            .map(|f| FailureView {
                kind: f.kind.clone(),
                exception: f.exception.clone(),
                description: format!("{:?}", f.description),
                doc: doc_lines(&f.description),
            })
            .collect(),
    };
    Ok(vec![
        Output {
            path: "rust/types.rs".into(),
            contents: render_template("rust/types.rs", &types_view(ir, source))?,
        },
        Output {
            path: "rust/dtypes.rs".into(),
            contents: render_template("rust/dtypes.rs", &dt)?,
        },
        Output {
            path: "rust/elements.rs".into(),
            contents: render_template("rust/elements.rs", &dt)?,
        },
        Output {
            path: "rust/streams.rs".into(),
            contents: render_template("rust/streams.rs", &streams_view(ir, source))?,
        },
        Output {
            path: "rust/errors.rs".into(),
            contents: render_template("rust/errors.rs", &errors)?,
        },
        Output {
            path: "rust/protocol.rs".into(),
            contents: render_template("rust/protocol.rs", &protocol_view(ir, source))?,
        },
        Output {
            path: "rust/derive_table.rs".into(),
            contents: render_template("rust/derive_table.rs", &derive_table_view(ir, source))?,
        },
    ])
}
