//! Lowering `types`: declared names first (so that any item can refer to any other), then
//! structs (C layout computed and checked), enums, flags and function typedefs.

use std::collections::{HashMap, HashSet};

use crate::ir::{self, FnParam, FnSig, Item, NamedKind, Prim, Ty};
use crate::spec::{self, Spec};

use super::type_expr::{TyExpr, TypeParser};
use super::{Decl, Layout, Lower, MAX_STRUCT_SIZE, is_ident};

/// A `types` entry's kind and name (`None`: the entry declared none or several).
pub(super) type Kinds = Vec<Option<(&'static str, String)>>;

impl Lower {
    /// Step 1: every `types` entry declares one name (struct, enum, fn or flags), a valid C
    /// identifier that shadows no primitive and is declared once.
    pub(super) fn declare_names(&mut self, s: &Spec) -> (HashMap<String, Decl>, Kinds) {
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
        (decls, kinds)
    }

    /// Step 2: each declared entry lowered in spec order (structs may refer to any declared name).
    pub(super) fn lower_items(
        &mut self,
        s: &Spec,
        decls: &HashMap<String, Decl>,
        kinds: &Kinds,
    ) -> Vec<Item> {
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
                    if let Some(st) = self.lower_struct(i, &base, &name, t, decls, &mut layouts) {
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
                                decls,
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
                            .resolve(&format!("{base}.returns"), r, decls, i, false)
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
        items
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
            if v.host_accessible && (v.bits.is_some()) {
                self.err(
                    format!("{vp}.host_accessible"),
                    "`host_accessible` describes a device type, not a data type code with a bits rule",
                );
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
                host_accessible: v.host_accessible,
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
}
