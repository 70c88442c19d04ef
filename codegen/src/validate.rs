//! Lowering a [`Spec`] into the [`Ir`](crate::ir::Ir), with every semantic check.
//!
//! Problems are collected as (YAML path, message) pairs and turned into
//! `file:line:col` diagnostics through [`Positions`] only when there are any,
//! so a valid spec pays nothing for the second, marked parse.

use std::collections::{HashMap, HashSet};

use crate::error::{Diagnostic, Diagnostics, Error, Result};
use crate::ir::{self, FnParam, FnSig, Item, NamedKind, Prim, Ty};
use crate::positions::Positions;
use crate::spec::{self, Spec};

/// Parse `text` (named `file` in diagnostics), validate it and build the IR.
pub fn lower(text: &str, file: &str) -> Result<ir::Ir> {
    // CRLF and BOM-tolerant: serde_yaml handles both, positions stay line-based.
    let spec = match Spec::from_yaml(text) {
        Ok(s) => s,
        Err(e) => {
            return Err(Error::Spec(Diagnostics(vec![yaml_diagnostic(
                &e, text, file,
            )])));
        }
    };
    let mut cx = Lower { issues: Vec::new() };
    let ir = cx.lower(&spec);
    if cx.issues.is_empty()
        && let Some(ir) = ir
    {
        return Ok(ir);
    }
    let pos = Positions::parse(text);
    let mut diags: Vec<Diagnostic> = cx
        .issues
        .into_iter()
        .map(|(path, message)| {
            let (line, col) = pos.lookup(&path);
            Diagnostic {
                file: file.to_string(),
                line,
                col,
                message,
            }
        })
        .collect();
    diags.sort_by_key(|d| (d.line, d.col));
    diags.dedup();
    if diags.is_empty() {
        diags.push(Diagnostic {
            file: file.to_string(),
            line: 1,
            col: 1,
            message: "invalid spec".into(),
        });
    }
    Err(Error::Spec(Diagnostics(diags)))
}

/// A serde_yaml error as a diagnostic (its message without the trailing location).
fn yaml_diagnostic(e: &serde_yaml::Error, text: &str, file: &str) -> Diagnostic {
    let full = e.to_string();
    // "<problem> at line L column C[, while parsing <context> at line L2 column C2]"
    let mut message = match full.find(" at line ") {
        Some(i) => {
            let (head, rest) = full.split_at(i);
            match rest.find(", while parsing ") {
                Some(j) => {
                    let ctx = rest[j + 2..].replace(" at line ", " that starts at line ");
                    format!("{head} ({ctx})")
                }
                None => head.to_string(),
            }
        }
        None => full.clone(),
    };
    if message.is_empty() {
        message = "invalid YAML".into();
    }
    let (line, col) = e
        .location()
        .map(|l| {
            // libyaml moves an end-of-input mark to a new line: point at the real end
            if l.index() >= text.len() {
                end_position(text)
            } else {
                (l.line(), l.column())
            }
        })
        .or_else(|| {
            full.contains("more than one document")
                .then(|| second_document(text))
                .flatten()
        })
        .unwrap_or((1, 1));
    Diagnostic {
        file: file.to_string(),
        line,
        col,
        message: format!("malformed spec: {message}"),
    }
}

/// The (line, column) just past the last character, with YAML's line breaks.
fn end_position(text: &str) -> (usize, usize) {
    let (mut line, mut col, mut prev_cr) = (1, 1, false);
    for c in text.chars() {
        match c {
            '\n' if prev_cr => {}
            '\n' | '\r' | '\u{85}' | '\u{2028}' | '\u{2029}' => (line, col) = (line + 1, 1),
            _ => col += 1,
        }
        prev_cr = c == '\r';
    }
    (line, col)
}

/// Where a second YAML document starts (`---` after content or after another `---`,
/// or content after `...`): serde_yaml rejects such a text without a location.
fn second_document(text: &str) -> Option<(usize, usize)> {
    let (mut content, mut started, mut ended) = (false, false, false);
    for (i, line) in text.lines().enumerate() {
        let marker = |m: &str| {
            line.strip_prefix(m)
                .is_some_and(|r| r.is_empty() || r.starts_with([' ', '\t']))
        };
        if marker("---") {
            if content || started {
                return Some((i + 1, 1));
            }
            started = true;
            let rest = line[3..].trim_start();
            content = !rest.is_empty() && !rest.starts_with('#');
        } else if marker("...") {
            ended = content || started;
        } else {
            let t = line.trim_start();
            let blank = t.is_empty() || t.starts_with('#') || (line.starts_with('%') && !content);
            if !blank {
                if ended {
                    return Some((i + 1, 1));
                }
                content = true;
            }
        }
    }
    None
}

/// The largest struct size accepted (any larger cannot be an ABI struct; keeps the
/// layout arithmetic far from overflow on 32-bit hosts too).
const MAX_STRUCT_SIZE: usize = i32::MAX as usize;

struct Lower {
    issues: Vec<(String, String)>,
}

/// What a declared type name is, where, and its layout (when known).
#[derive(Clone, Copy)]
struct Decl {
    kind: NamedKind,
    index: usize,
    c_tag: bool,
}

#[derive(Clone, Copy)]
struct Layout {
    size: usize,
    align: usize,
    pointer_free: bool,
}

impl Lower {
    fn err(&mut self, path: impl Into<String>, msg: impl Into<String>) {
        self.issues.push((path.into(), msg.into()));
    }

    fn lower(&mut self, s: &Spec) -> Option<ir::Ir> {
        // 1. declared names
        let mut decls: HashMap<String, Decl> = HashMap::new();
        let mut kinds = Vec::with_capacity(s.types.len());
        for (i, t) in s.types.iter().enumerate() {
            let named: Vec<(&str, &String)> = [
                ("struct", &t.struct_),
                ("enum", &t.enum_),
                ("fn", &t.fn_),
                ("flags", &t.flags),
            ]
            .into_iter()
            .filter_map(|(k, v)| v.as_ref().map(|v| (k, v)))
            .collect();
            if named.len() != 1 {
                self.err(
                    format!("types[{i}]"),
                    "each entry of `types` needs exactly one of `struct`, `enum`, `fn`, `flags`",
                );
                kinds.push(None);
                continue;
            }
            let (k, name) = named[0];
            kinds.push(Some((k, name.clone())));
            if !is_ident(name) {
                self.err(
                    format!("types[{i}].{k}"),
                    format!("`{name}` is not a valid C identifier"),
                );
            }
            let kind = match k {
                "struct" => NamedKind::Struct,
                "enum" => NamedKind::Enum,
                "fn" => NamedKind::Fn,
                // flags declare constants, not a type
                _ => continue,
            };
            if Prim::parse(name).is_some() {
                self.err(
                    format!("types[{i}].{k}"),
                    format!("`{name}` shadows a primitive type"),
                );
            }
            if decls
                .insert(
                    name.clone(),
                    Decl {
                        kind,
                        index: i,
                        c_tag: t.c_tag,
                    },
                )
                .is_some()
            {
                self.err(
                    format!("types[{i}].{k}"),
                    format!("duplicate type name `{name}`"),
                );
            }
        }

        // 2. items
        let mut items = Vec::new();
        let mut layouts: HashMap<String, Layout> = HashMap::new();
        let mut constants: HashMap<String, String> = HashMap::new(); // C-level identifiers
        for (i, t) in s.types.iter().enumerate() {
            let Some((k, name)) = kinds[i].clone() else {
                continue;
            };
            let base = format!("types[{i}]");
            match k {
                "struct" => {
                    if let Some(st) = self.lower_struct(i, &base, &name, t, &decls, &mut layouts) {
                        items.push(Item::Struct(st));
                    }
                }
                "enum" => {
                    if let Some(e) = self.lower_enum(&base, &name, t, &mut constants) {
                        layouts.insert(
                            name.clone(),
                            Layout {
                                size: 4,
                                align: 4,
                                pointer_free: true,
                            },
                        );
                        items.push(Item::Enum(e));
                    }
                }
                "fn" => {
                    let params: Vec<FnParam> = t
                        .params
                        .iter()
                        .enumerate()
                        .filter_map(|(j, p)| {
                            let ty = self.resolve(
                                &format!("{base}.params[{j}].type"),
                                &p.ty,
                                &decls,
                                i,
                                false,
                            )?;
                            Some(FnParam {
                                name: p.name.clone(),
                                ty,
                            })
                        })
                        .collect();
                    let ret = match t.returns.as_deref() {
                        None | Some("c_void") | Some("void") => None,
                        Some(r) => self
                            .resolve(&format!("{base}.returns"), r, &decls, i, false)
                            .map(Box::new),
                    };
                    layouts.insert(
                        name.clone(),
                        Layout {
                            size: 8,
                            align: 8,
                            pointer_free: false,
                        },
                    );
                    items.push(Item::Fn(ir::FnTypedef {
                        name: name.clone(),
                        doc: t.doc.clone(),
                        sig: FnSig { params, ret },
                    }));
                }
                _ => {
                    if let Some(f) = self.lower_flags(&base, &name, t, &mut constants) {
                        items.push(Item::Flags(f));
                    }
                }
            }
        }

        // 3. capsules, exchange attribute
        let mut consts = HashSet::new();
        for (i, c) in s.capsules.iter().enumerate() {
            if !consts.insert(c.name.clone()) {
                self.err(
                    format!("capsules[{i}].name"),
                    format!("duplicate constant name `{}`", c.name),
                );
            }
            if c.value.contains('\0') {
                self.err(
                    format!("capsules[{i}].value"),
                    "capsule names cannot contain NUL",
                );
            }
        }
        if let Some(x) = &s.exchange_api {
            if !consts.insert(x.attribute.name.clone()) {
                self.err(
                    "exchange_api.attribute.name",
                    format!("duplicate constant name `{}`", x.attribute.name),
                );
            }
            let mut values = HashSet::from([x.attribute.value.as_str()]);
            for (i, a) in x.legacy_attributes.iter().enumerate() {
                if !consts.insert(a.name.clone()) {
                    self.err(
                        format!("exchange_api.legacy_attributes[{i}].name"),
                        format!("duplicate constant name `{}`", a.name),
                    );
                }
                if !values.insert(a.value.as_str()) {
                    self.err(
                        format!("exchange_api.legacy_attributes[{i}].value"),
                        format!("attribute `{}` is listed twice", a.value),
                    );
                }
                if a.value.is_empty()
                    || !a
                        .value
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_')
                    || a.value.starts_with(|c: char| c.is_ascii_digit())
                {
                    self.err(
                        format!("exchange_api.legacy_attributes[{i}].value"),
                        format!("`{}` is not a Python attribute name", a.value),
                    );
                }
            }
        }

        // 4. protocol
        let protocol = ir::Protocol {
            dlpack: self.lower_method("protocol.dlpack", &s.protocol.dlpack),
            dlpack_device: self.lower_method("protocol.dlpack_device", &s.protocol.dlpack_device),
            from_dlpack: self.lower_method("protocol.from_dlpack", &s.protocol.from_dlpack),
        };
        let mut pconsts = HashSet::new();
        for (p, m) in [
            ("protocol.dlpack", &protocol.dlpack),
            ("protocol.dlpack_device", &protocol.dlpack_device),
            ("protocol.from_dlpack", &protocol.from_dlpack),
        ] {
            if let Some(c) = &m.const_name
                && !pconsts.insert(c.clone())
            {
                self.err(
                    format!("{p}.const"),
                    format!("duplicate constant name `{c}`"),
                );
            }
            for (j, k) in m.kwargs.iter().enumerate() {
                if !pconsts.insert(k.const_name.clone()) {
                    self.err(
                        format!("{p}.kwargs[{j}].const"),
                        format!("duplicate constant name `{}`", k.const_name),
                    );
                }
            }
        }

        // 5. dtypes
        let code_enum = items.iter().find_map(|it| match it {
            Item::Enum(e) if e.name == s.dtype_code_enum => Some(e.clone()),
            _ => None,
        });
        if code_enum.is_none() {
            self.err(
                "dtype_code_enum",
                format!("unknown enum `{}`", s.dtype_code_enum),
            );
        }
        let mut dtypes = Vec::new();
        let mut dnames = HashSet::new();
        let mut dkeys = HashMap::new();
        for (i, d) in s.dtypes.iter().enumerate() {
            let base = format!("dtypes[{i}]");
            if !dnames.insert(d.name.clone()) {
                self.err(
                    format!("{base}.name"),
                    format!("duplicate dtype name `{}`", d.name),
                );
            }
            let Some(ce) = &code_enum else { continue };
            let Some(code) = ce.value(&d.code) else {
                self.err(
                    format!("{base}.code"),
                    format!(
                        "unknown type code `{}` (not a value of {})",
                        d.code, ce.name
                    ),
                );
                continue;
            };
            let (lo, hi) = ce.repr.range();
            if !(lo..=hi).contains(&i128::from(code.value)) {
                // already reported on the enum
                continue;
            }
            if !(0..=i64::from(u8::MAX)).contains(&code.value) {
                self.err(
                    format!("{base}.code"),
                    format!(
                        "type code `{}` has value {}, which does not fit in the u8 `code` of DLDataType",
                        code.name, code.value
                    ),
                );
                continue;
            }
            if let Some(rule) = code.bits
                && d.bits != rule
            {
                self.err(
                    format!("{base}.bits"),
                    format!(
                        "dtype `{}` has bits={} but type code {} requires bits={rule}",
                        d.name, d.bits, code.name
                    ),
                );
            }
            if d.bits == 0 || d.lanes == 0 {
                self.err(
                    format!("{base}.bits"),
                    format!("dtype `{}` needs non-zero bits and lanes", d.name),
                );
            }
            let key = (code.value, d.bits, d.lanes);
            if let Some(prev) = dkeys.insert(key, d.name.clone()) {
                self.err(
                    format!("{base}.code"),
                    format!(
                        "dtype `{}` has the same (code, bits, lanes) as `{prev}`",
                        d.name
                    ),
                );
            }
            dtypes.push(ir::DType {
                name: d.name.clone(),
                code_name: d.code.clone(),
                code: code.value as u8,
                bits: d.bits,
                lanes: d.lanes,
                numpy: d.numpy.clone(),
                buffer: d.buffer.clone(),
                rust: d.rust.clone(),
                doc: d.doc.clone(),
            });
        }

        // 6. streams
        let streams = self.lower_streams(&s.streams, &items);

        // 7. exceptions
        let mut exc = HashSet::new();
        for (i, e) in s.exceptions.iter().enumerate() {
            if !exc.insert(e.name.clone()) {
                self.err(
                    format!("exceptions[{i}].name"),
                    format!("duplicate exception `{}`", e.name),
                );
            }
            // The name becomes a Rust variant and is looked up in Python's `builtins`.
            if !is_ident(&e.name) {
                self.err(
                    format!("exceptions[{i}].name"),
                    format!(
                        "`{}` is not an identifier (the name of a Python built-in exception)",
                        e.name
                    ),
                );
            }
        }
        let mut kinds_seen = HashSet::new();
        for (i, f) in s.failures.iter().enumerate() {
            if !kinds_seen.insert(f.kind.clone()) {
                self.err(
                    format!("failures[{i}].kind"),
                    format!("duplicate failure kind `{}`", f.kind),
                );
            }
            if !exc.contains(&f.exception) {
                self.err(
                    format!("failures[{i}].exception"),
                    format!("unknown exception `{}`", f.exception),
                );
            }
        }

        if !self.issues.is_empty() {
            return None;
        }
        Some(ir::Ir {
            name: s.name.clone(),
            version: ir::Version {
                major: s.version.major,
                minor: s.version.minor,
            },
            doc: s.doc.clone(),
            c_header: ir::CHeader {
                guard: s.c_header.guard.clone(),
                major_macro: s.c_header.version_macros.major.clone(),
                minor_macro: s.c_header.version_macros.minor.clone(),
            },
            capsules: s.capsules.iter().map(named).collect(),
            exchange_attribute: s.exchange_api.as_ref().map(|x| named(&x.attribute)),
            exchange_legacy_attributes: s
                .exchange_api
                .as_ref()
                .map(|x| x.legacy_attributes.iter().map(named).collect())
                .unwrap_or_default(),
            protocol,
            items,
            dtype_code_enum: s.dtype_code_enum.clone(),
            dtypes,
            streams: streams?,
            exceptions: s
                .exceptions
                .iter()
                .map(|e| ir::Exception {
                    name: e.name.clone(),
                    doc: e.doc.clone(),
                })
                .collect(),
            failures: s
                .failures
                .iter()
                .map(|f| ir::Failure {
                    kind: f.kind.clone(),
                    exception: f.exception.clone(),
                    description: f.description.clone(),
                })
                .collect(),
        })
    }

    fn lower_struct(
        &mut self,
        index: usize,
        base: &str,
        name: &str,
        t: &spec::TypeItem,
        decls: &HashMap<String, Decl>,
        layouts: &mut HashMap<String, Layout>,
    ) -> Option<ir::Struct> {
        let issues_before = self.issues.len();
        let mut seen = HashSet::new();
        let mut fields = Vec::new();
        let (mut off, mut align, mut pointer_free, mut ok) = (0usize, 1usize, true, true);
        if t.fields.is_empty() {
            self.err(
                format!("{base}.struct"),
                format!("struct `{name}` has no fields"),
            );
        }
        for (j, f) in t.fields.iter().enumerate() {
            let fpath = format!("{base}.fields[{j}]");
            if !seen.insert(f.name.clone()) {
                self.err(
                    format!("{fpath}.name"),
                    format!("duplicate field `{}` in struct `{name}`", f.name),
                );
            }
            let Some(ty) = self.resolve(&format!("{fpath}.type"), &f.ty, decls, index, true) else {
                ok = false;
                continue;
            };
            let Some(l) = self.layout_of(&format!("{fpath}.type"), &ty, layouts) else {
                ok = false;
                continue;
            };
            // checked: structs embedding structs can grow exponentially
            let Some(offset) = off.div_ceil(l.align).checked_mul(l.align).filter(|o| {
                o.checked_add(l.size)
                    .is_some_and(|end| end <= MAX_STRUCT_SIZE)
            }) else {
                self.err(
                    format!("{fpath}.type"),
                    format!("struct `{name}` is too large (over {MAX_STRUCT_SIZE} bytes)"),
                );
                ok = false;
                break;
            };
            off = offset;
            fields.push(ir::StructField {
                name: f.name.clone(),
                ty,
                doc: f.doc.clone(),
                offset: off,
                size: l.size,
            });
            off += l.size;
            align = align.max(l.align);
            pointer_free &= l.pointer_free;
        }
        // a struct with errors gets no layout, so structs embedding it do not cascade
        if !ok || self.issues.len() > issues_before {
            return None;
        }
        let size = off.div_ceil(align) * align;
        if let Some(abi) = &t.abi
            && (abi.size != size || abi.align != align)
        {
            self.err(
                    format!("{base}.abi"),
                    format!(
                        "struct `{name}` is declared size {} align {} but its fields give size {size} align {align}",
                        abi.size, abi.align
                    ),
                );
        }
        layouts.insert(
            name.to_string(),
            Layout {
                size,
                align,
                pointer_free,
            },
        );
        Some(ir::Struct {
            name: name.to_string(),
            doc: t.doc.clone(),
            c_tag: t.c_tag,
            derive: t.derive.clone(),
            fields,
            size,
            align,
            pointer_free,
        })
    }

    fn layout_of(
        &mut self,
        path: &str,
        ty: &Ty,
        layouts: &HashMap<String, Layout>,
    ) -> Option<Layout> {
        match ty {
            Ty::Prim { prim } => match prim.layout() {
                Some((size, align)) => Some(Layout {
                    size,
                    align,
                    pointer_free: true,
                }),
                None => {
                    self.err(path, "`c_void` can only be used behind a pointer");
                    None
                }
            },
            Ty::Ptr { .. } | Ty::FnPtr { .. } => Some(Layout {
                size: 8,
                align: 8,
                pointer_free: false,
            }),
            Ty::Named { name, .. } => layouts.get(name).copied(),
        }
    }

    /// Parse and resolve a type expression. `in_struct`: by-value uses must be declared earlier.
    fn resolve(
        &mut self,
        path: &str,
        text: &str,
        decls: &HashMap<String, Decl>,
        at: usize,
        in_struct: bool,
    ) -> Option<Ty> {
        let expr = match TypeParser::new(text).parse_all() {
            Ok(e) => e,
            Err(m) => {
                let shown = match text.char_indices().nth(60) {
                    Some((cut, _)) => format!("{}...", &text[..cut]),
                    None => text.to_string(),
                };
                self.err(path, format!("bad type expression `{shown}`: {m}"));
                return None;
            }
        };
        self.resolve_expr(path, &expr, decls, at, in_struct, false)
    }

    fn resolve_expr(
        &mut self,
        path: &str,
        e: &TyExpr,
        decls: &HashMap<String, Decl>,
        at: usize,
        by_value: bool,
        behind_ptr: bool,
    ) -> Option<Ty> {
        match e {
            TyExpr::Name(n) => {
                if let Some(prim) = Prim::parse(n) {
                    return Some(Ty::Prim { prim });
                }
                let Some(d) = decls.get(n) else {
                    self.err(path, format!("unknown type `{n}`"));
                    return None;
                };
                if d.kind == NamedKind::Struct && d.index >= at {
                    if by_value && !behind_ptr {
                        self.err(
                            path,
                            format!("struct `{n}` is used by value before it is complete"),
                        );
                        return None;
                    }
                    if !d.c_tag {
                        self.err(
                            path,
                            format!("struct `{n}` is referenced before its definition; give it `c_tag: true`"),
                        );
                        return None;
                    }
                } else if d.index >= at && d.kind != NamedKind::Struct {
                    self.err(path, format!("`{n}` is used before its declaration"));
                    return None;
                }
                Some(Ty::Named {
                    name: n.clone(),
                    of: d.kind,
                })
            }
            TyExpr::Ptr(m, inner) => {
                let to = self.resolve_expr(path, inner, decls, at, by_value, true)?;
                Some(Ty::Ptr {
                    mutable: *m,
                    to: Box::new(to),
                })
            }
            TyExpr::Fn(params, ret) => {
                let mut ps = Vec::new();
                for (name, t) in params {
                    ps.push(FnParam {
                        name: name.clone(),
                        ty: self.resolve_expr(path, t, decls, at, by_value, true)?,
                    });
                }
                let ret = match ret {
                    None => None,
                    Some(r) if matches!(&**r, TyExpr::Name(n) if n == "c_void") => None,
                    Some(r) => Some(Box::new(
                        self.resolve_expr(path, r, decls, at, by_value, true)?,
                    )),
                };
                Some(Ty::FnPtr {
                    sig: FnSig { params: ps, ret },
                })
            }
        }
    }

    fn lower_enum(
        &mut self,
        base: &str,
        name: &str,
        t: &spec::TypeItem,
        constants: &mut HashMap<String, String>,
    ) -> Option<ir::Enum> {
        let repr = match t.repr.as_deref().map(|r| (r, Prim::parse(r))) {
            Some((_, Some(p))) if p.layout().is_some() && p != Prim::CChar => p,
            Some((r, _)) => {
                self.err(
                    format!("{base}.repr"),
                    format!("enum repr must be an integer type, not `{r}`"),
                );
                return None;
            }
            None => {
                self.err(
                    format!("{base}.enum"),
                    format!("enum `{name}` needs a `repr` (e.g. i32)"),
                );
                return None;
            }
        };
        let (lo, hi) = repr.range();
        let mut values = Vec::new();
        let mut by_value: HashMap<i64, String> = HashMap::new();
        for (j, v) in t.values.iter().enumerate() {
            let vp = format!("{base}.values[{j}]");
            if let Some(owner) = constants.insert(v.name.clone(), name.to_string()) {
                self.err(
                    format!("{vp}.name"),
                    format!(
                        "duplicate enum name `{}` (already defined in `{owner}`)",
                        v.name
                    ),
                );
            }
            if v.bit.is_some() {
                self.err(format!("{vp}.bit"), "`bit` is only valid for flags");
            }
            let Some(value) = v.value else {
                self.err(
                    format!("{vp}.name"),
                    format!("enum value `{}` needs a `value`", v.name),
                );
                continue;
            };
            if (value as i128) < lo || (value as i128) > hi {
                self.err(
                    format!("{vp}.value"),
                    format!(
                        "value {value} of `{}` does not fit in {}",
                        v.name,
                        repr.spec_name()
                    ),
                );
            }
            if let Some(prev) = by_value.insert(value, v.name.clone()) {
                self.err(
                    format!("{vp}.value"),
                    format!(
                        "duplicate enum value {value} in `{name}`: `{}` and `{prev}`",
                        v.name
                    ),
                );
            }
            if v.bits == Some(0) {
                self.err(format!("{vp}.bits"), "a bits rule must be positive");
            }
            values.push(ir::EnumValue {
                name: v.name.clone(),
                value,
                bits: v.bits,
                doc: v.doc.clone(),
            });
        }
        if values.is_empty() {
            self.err(
                format!("{base}.enum"),
                format!("enum `{name}` has no values"),
            );
        }
        Some(ir::Enum {
            name: name.to_string(),
            doc: t.doc.clone(),
            repr,
            cpp_underlying: t.cpp_underlying.clone(),
            c_suffix: t.c_suffix.clone().unwrap_or_default(),
            values,
        })
    }

    fn lower_flags(
        &mut self,
        base: &str,
        name: &str,
        t: &spec::TypeItem,
        constants: &mut HashMap<String, String>,
    ) -> Option<ir::Flags> {
        let ty = match t.ty.as_deref().map(Prim::parse) {
            Some(Some(p)) if p.layout().is_some() && !p.is_signed() => p,
            _ => {
                self.err(
                    format!("{base}.type"),
                    "flags need an unsigned integer `type` (e.g. u64)",
                );
                return None;
            }
        };
        let width = ty.layout().map(|l| l.0 * 8).unwrap_or(64) as u32;
        let mut bits: HashMap<u32, String> = HashMap::new();
        let mut values = Vec::new();
        for (j, v) in t.values.iter().enumerate() {
            let vp = format!("{base}.values[{j}]");
            if let Some(owner) = constants.insert(v.name.clone(), name.to_string()) {
                self.err(
                    format!("{vp}.name"),
                    format!(
                        "duplicate flag name `{}` (already defined in `{owner}`)",
                        v.name
                    ),
                );
            }
            let Some(bit) = v.bit else {
                self.err(
                    format!("{vp}.name"),
                    format!("flag `{}` needs a `bit`", v.name),
                );
                continue;
            };
            if bit >= width {
                self.err(
                    format!("{vp}.bit"),
                    format!("bit {bit} does not fit in {}", ty.spec_name()),
                );
                continue;
            }
            if let Some(prev) = bits.insert(bit, v.name.clone()) {
                self.err(
                    format!("{vp}.bit"),
                    format!("flag bit {bit} of `{}` is already used by `{prev}`", v.name),
                );
            }
            values.push(ir::Flag {
                name: v.name.clone(),
                bit,
                value: 1u64 << bit,
                doc: v.doc.clone(),
            });
        }
        Some(ir::Flags {
            name: name.to_string(),
            doc: t.doc.clone(),
            ty,
            c_suffix: t.c_suffix.clone().unwrap_or_default(),
            values,
        })
    }

    fn lower_method(&mut self, path: &str, m: &spec::Method) -> ir::Method {
        let mut seen = HashSet::new();
        for (j, k) in m.kwargs.iter().enumerate() {
            if !seen.insert(k.name.clone()) {
                self.err(
                    format!("{path}.kwargs[{j}].name"),
                    format!("duplicate keyword `{}`", k.name),
                );
            }
        }
        ir::Method {
            name: m.name.clone(),
            const_name: m.r#const.clone(),
            doc: m.doc.clone(),
            returns: m.returns.clone(),
            kwargs: m
                .kwargs
                .iter()
                .map(|k| ir::Kwarg {
                    name: k.name.clone(),
                    const_name: k.r#const.clone(),
                    py_type: k.py_type.clone(),
                    doc: k.doc.clone(),
                })
                .collect(),
        }
    }

    fn lower_streams(&mut self, s: &spec::Streams, items: &[Item]) -> Option<ir::Streams> {
        let dev = items.iter().find_map(|i| match i {
            Item::Enum(e) if e.name == s.device_enum => Some(e),
            _ => None,
        });
        if dev.is_none() {
            self.err(
                "streams.device_enum",
                format!("unknown enum `{}`", s.device_enum),
            );
        }
        let mut actions = HashMap::new();
        let mut carrier = None;
        for (i, a) in s.actions.iter().enumerate() {
            if actions.insert(a.name.clone(), a.carries_value).is_some() {
                self.err(
                    format!("streams.actions[{i}].name"),
                    format!("duplicate stream action `{}`", a.name),
                );
            }
            if a.carries_value {
                if carrier.is_some() {
                    self.err(
                        format!("streams.actions[{i}].carries_value"),
                        "only one stream action can carry a value",
                    );
                }
                carrier = Some(a.name.clone());
            }
        }
        let check_action = |this: &mut Self, path: String, name: &str, allow_carrier: bool| {
            match actions.get(name) {
                None => this.err(path, format!("unknown stream action `{name}`")),
                Some(true) if !allow_carrier => this.err(
                    path,
                    format!("stream action `{name}` carries a value; use `pointers_above`"),
                ),
                _ => {}
            }
        };
        check_action(
            self,
            "streams.stream_less.none".into(),
            &s.stream_less.none,
            false,
        );
        let mut rules = Vec::new();
        let mut devices = HashSet::new();
        for (i, r) in s.rules.iter().enumerate() {
            let rp = format!("streams.rules[{i}]");
            let device_value = match dev.and_then(|d| d.value(&r.device)) {
                Some(v) => v.value,
                None => {
                    self.err(
                        format!("{rp}.device"),
                        format!(
                            "stream rule for unknown device `{}` (not a value of {})",
                            r.device, s.device_enum
                        ),
                    );
                    continue;
                }
            };
            if !devices.insert(r.device.clone()) {
                self.err(
                    format!("{rp}.device"),
                    format!("duplicate stream rule for `{}`", r.device),
                );
            }
            check_action(self, format!("{rp}.none"), &r.none, false);
            let mut seen = HashSet::new();
            for (j, v) in r.values.iter().enumerate() {
                let vp = format!("{rp}.values[{j}]");
                if !seen.insert(v.value) {
                    self.err(
                        format!("{vp}.value"),
                        format!("duplicate stream value {}", v.value),
                    );
                }
                if v.value < s.below_min.min {
                    self.err(
                        format!("{vp}.value"),
                        format!(
                            "stream value {} is below the minimum {}",
                            v.value, s.below_min.min
                        ),
                    );
                }
                if let Some(p) = r.pointers_above
                    && v.value > p
                {
                    self.err(
                        format!("{vp}.value"),
                        format!("stream value {} overlaps `pointers_above: {p}`", v.value),
                    );
                }
                match (&v.action, &v.reason) {
                    (Some(a), None) => check_action(self, format!("{vp}.action"), a, false),
                    (None, Some(_)) => {}
                    _ => self.err(
                        vp.clone(),
                        "a stream value needs exactly one of `action` or `reason`",
                    ),
                }
            }
            if r.pointers_above.is_some() && carrier.is_none() {
                self.err(
                    format!("{rp}.pointers_above"),
                    "`pointers_above` needs a stream action with `carries_value: true`",
                );
            }
            if let Some(c) = r.consumer_default
                && (c < s.below_min.min
                    || r.values.iter().any(|v| v.value == c && v.reason.is_some()))
            {
                self.err(
                    format!("{rp}.consumer_default"),
                    format!("consumer default {c} is itself rejected"),
                );
            }
            rules.push(ir::StreamRule {
                device: r.device.clone(),
                device_value,
                none: r.none.clone(),
                consumer_default: r.consumer_default,
                values: r
                    .values
                    .iter()
                    .map(|v| ir::StreamValue {
                        value: v.value,
                        action: v.action.clone(),
                        reason: v.reason.clone(),
                    })
                    .collect(),
                pointers_above: r.pointers_above,
                doc: r.doc.clone(),
            });
        }
        Some(ir::Streams {
            device_enum: s.device_enum.clone(),
            actions: s
                .actions
                .iter()
                .map(|a| ir::StreamActionDef {
                    name: a.name.clone(),
                    carries_value: a.carries_value,
                    doc: a.doc.clone(),
                })
                .collect(),
            min: s.below_min.min,
            below_min_reason: s.below_min.reason.clone(),
            stream_less_none: s.stream_less.none.clone(),
            stream_less_reason: s.stream_less.reason.clone(),
            unlisted_reason: s.unlisted_reason.clone(),
            rules,
        })
    }
}

fn named(n: &spec::NamedString) -> ir::NamedString {
    ir::NamedString {
        name: n.name.clone(),
        value: n.value.clone(),
        doc: n.doc.clone(),
    }
}

fn is_ident(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(ch) if ch == '_' || ch.is_ascii_alphabetic())
        && c.all(|ch| ch == '_' || ch.is_ascii_alphanumeric())
}

/// An unresolved type expression.
#[derive(Debug, Clone, PartialEq)]
enum TyExpr {
    Name(String),
    Ptr(bool, Box<TyExpr>),
    Fn(Vec<(String, TyExpr)>, Option<Box<TyExpr>>),
}

/// Recursive-descent parser for the spec's type expressions
/// (`u32`, `*mut *mut T`, `*const c_char`, `fn(a: T, b: U) -> R`).
struct TypeParser<'a> {
    s: &'a str,
    pos: usize,
    /// Current nesting of `ty`, bounded so that deep nesting is an error, not a stack overflow.
    depth: usize,
}

/// The deepest nesting of pointers and function types accepted in a type expression.
const MAX_TYPE_DEPTH: usize = 32;

impl<'a> TypeParser<'a> {
    fn new(s: &'a str) -> Self {
        TypeParser {
            s,
            pos: 0,
            depth: 0,
        }
    }

    fn ws(&mut self) {
        while self.s[self.pos..].starts_with(char::is_whitespace) {
            self.pos += self.s[self.pos..].chars().next().map_or(1, char::len_utf8);
        }
    }

    fn eat(&mut self, tok: &str) -> bool {
        self.ws();
        if self.s[self.pos..].starts_with(tok) {
            self.pos += tok.len();
            true
        } else {
            false
        }
    }

    fn ident(&mut self) -> Option<String> {
        self.ws();
        let rest = &self.s[self.pos..];
        let n = rest
            .find(|c: char| !(c == '_' || c.is_ascii_alphanumeric()))
            .unwrap_or(rest.len());
        if n == 0 || rest.starts_with(|c: char| c.is_ascii_digit()) {
            return None;
        }
        self.pos += n;
        Some(rest[..n].to_string())
    }

    fn parse_all(mut self) -> std::result::Result<TyExpr, String> {
        let t = self.ty()?;
        self.ws();
        if self.pos != self.s.len() {
            return Err(format!("unexpected `{}`", &self.s[self.pos..]));
        }
        Ok(t)
    }

    fn ty(&mut self) -> std::result::Result<TyExpr, String> {
        if self.depth >= MAX_TYPE_DEPTH {
            return Err(format!("nested more than {MAX_TYPE_DEPTH} levels deep"));
        }
        self.depth += 1;
        let t = self.ty_inner();
        self.depth -= 1;
        t
    }

    fn ty_inner(&mut self) -> std::result::Result<TyExpr, String> {
        if self.eat("*") {
            let m = match self.ident().as_deref() {
                Some("mut") => true,
                Some("const") => false,
                _ => return Err("expected `mut` or `const` after `*`".into()),
            };
            return Ok(TyExpr::Ptr(m, Box::new(self.ty()?)));
        }
        let save = self.pos;
        match self.ident() {
            Some(f) if f == "fn" && self.eat("(") => {
                let mut params = Vec::new();
                if !self.eat(")") {
                    loop {
                        let save = self.pos;
                        let name = match self.ident() {
                            Some(n) if self.eat(":") => n,
                            _ => {
                                self.pos = save;
                                String::new()
                            }
                        };
                        params.push((name, self.ty()?));
                        if self.eat(")") {
                            break;
                        }
                        if !self.eat(",") {
                            return Err("expected `,` or `)` in parameter list".into());
                        }
                        if self.eat(")") {
                            break;
                        }
                    }
                }
                let ret = if self.eat("->") {
                    Some(Box::new(self.ty()?))
                } else {
                    None
                };
                Ok(TyExpr::Fn(params, ret))
            }
            Some(n) => Ok(TyExpr::Name(n)),
            None => {
                self.pos = save;
                Err("expected a type".into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_type_expressions() {
        assert_eq!(
            TypeParser::new("u32").parse_all(),
            Ok(TyExpr::Name("u32".into()))
        );
        assert_eq!(
            TypeParser::new("*mut *mut X").parse_all(),
            Ok(TyExpr::Ptr(
                true,
                Box::new(TyExpr::Ptr(true, Box::new(TyExpr::Name("X".into()))))
            ))
        );
        let f = TypeParser::new("fn(a: *const c_char, u8) -> c_int")
            .parse_all()
            .unwrap();
        assert!(
            matches!(f, TyExpr::Fn(ref p, Some(_)) if p.len() == 2 && p[0].0 == "a" && p[1].0.is_empty())
        );
        assert!(TypeParser::new("*X").parse_all().is_err());
        assert!(TypeParser::new("fn(a: u8").parse_all().is_err());
        assert!(TypeParser::new("u8 u8").parse_all().is_err());
        // deep nesting is an error, not a stack overflow
        let deep = format!("{}u8", "*mut ".repeat(100_000));
        assert!(TypeParser::new(&deep).parse_all().is_err());
        let deep = format!("{}u8{}", "fn(".repeat(100_000), ")".repeat(100_000));
        assert!(TypeParser::new(&deep).parse_all().is_err());
        let ok = format!("{}u8", "*mut ".repeat(MAX_TYPE_DEPTH - 1));
        assert!(TypeParser::new(&ok).parse_all().is_ok());
    }
}
