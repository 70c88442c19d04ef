//! Walks two IRs side by side and classifies every difference.
//!
//! Rules (DLPack's own: a minor version only adds enum values; anything that moves, resizes,
//! renumbers or removes breaks binaries or their users):
//! - compatible: a new enum value, enum, flag, struct, fn typedef, dtype, stream rule or
//!   action, exception, failure kind, capsule name, keyword; a dtype gaining a numpy typestr,
//!   buffer format or Rust type; a device type becoming host-accessible; a minor version bump;
//! - break: anything removed or renumbered (a value, a flag bit), a field whose type, offset or
//!   size changed, a field added or removed, a struct whose size or alignment changed, a
//!   changed fn signature, a dtype whose code, bits or lanes changed, a changed stream rule, a
//!   failure mapped to another exception, a renamed capsule or attribute, a major version bump.
//!
//! Doc text is not compared.

use std::collections::HashSet;

use super::model::{Change, ChangeKind, Compat};
use crate::ir::{
    DType, Enum, FnSig, Ir, Item, Method, NamedString, StreamRule, Streams, Struct, Ty,
};

use ChangeKind::{Added, Changed, Removed};
use Compat::{Break, Compatible};

struct Out<'a>(&'a mut Vec<Change>);

impl Out<'_> {
    fn push(
        &mut self,
        kind: ChangeKind,
        compat: Compat,
        subject: &'static str,
        name: impl Into<String>,
        detail: impl Into<String>,
    ) {
        self.0.push(Change {
            kind,
            compat,
            subject,
            name: name.into(),
            detail: detail.into(),
        });
    }
}

/// Pairs two lists by key: calls `both` for items in both (new order), `added` for items only
/// in `new`, then `removed` for items only in `old` (old order).
fn pair<'a, T, K: Eq + std::hash::Hash>(
    old: impl IntoIterator<Item = &'a T> + Clone,
    new: impl IntoIterator<Item = &'a T> + Clone,
    key: impl Fn(&T) -> K,
    mut f: impl FnMut(Option<&'a T>, Option<&'a T>),
) where
    T: 'a,
{
    let new_keys: HashSet<K> = new.clone().into_iter().map(&key).collect();
    for n in new {
        let k = key(n);
        let o = old.clone().into_iter().find(|o| key(o) == k);
        f(o, Some(n));
    }
    for o in old {
        if !new_keys.contains(&key(o)) {
            f(Some(o), None);
        }
    }
}

pub(super) fn all(old: &Ir, new: &Ir, out: &mut Vec<Change>) {
    let mut out = Out(out);
    version(old, new, &mut out);
    items(old, new, &mut out);
    dtypes(old, new, &mut out);
    streams(&old.streams, &new.streams, &mut out);
    exceptions(old, new, &mut out);
    names(old, new, &mut out);
}

fn version(old: &Ir, new: &Ir, out: &mut Out) {
    let (a, b) = (old.version, new.version);
    if a == b {
        return;
    }
    let compat = if a.major == b.major {
        Compatible
    } else {
        Break
    };
    out.push(
        Changed,
        compat,
        "version",
        &new.name,
        format!("{}.{} -> {}.{}", a.major, a.minor, b.major, b.minor),
    );
}

/// A type expression in spec syntax (`*mut DLTensor`, `fn(self: *mut T)`).
fn spell(ty: &Ty) -> String {
    match ty {
        Ty::Prim { prim } => prim.spec_name().to_string(),
        Ty::Ptr { mutable, to } => {
            format!("*{} {}", if *mutable { "mut" } else { "const" }, spell(to))
        }
        Ty::Named { name, .. } => name.clone(),
        Ty::FnPtr { sig } => spell_sig(sig),
    }
}

fn spell_sig(sig: &FnSig) -> String {
    let params: Vec<String> = sig
        .params
        .iter()
        .map(|p| format!("{}: {}", p.name, spell(&p.ty)))
        .collect();
    match &sig.ret {
        Some(r) => format!("fn({}) -> {}", params.join(", "), spell(r)),
        None => format!("fn({})", params.join(", ")),
    }
}

fn kind_name(item: &Item) -> &'static str {
    match item {
        Item::Struct(_) => "struct",
        Item::Enum(_) => "enum",
        Item::Fn(_) => "fn typedef",
        Item::Flags(_) => "flags",
    }
}

fn items(old: &Ir, new: &Ir, out: &mut Out) {
    pair(
        &old.items,
        &new.items,
        |i| i.name().to_string(),
        |o, n| match (o, n) {
            (Some(o), Some(n)) => item(o, n, new, out),
            (None, Some(n)) => {
                let detail = match n {
                    Item::Struct(s) => format!("size {}, align {}", s.size, s.align),
                    Item::Enum(e) => format!("{} values", e.values.len()),
                    Item::Fn(f) => spell_sig(&f.sig),
                    Item::Flags(f) => format!("{} flags", f.values.len()),
                };
                out.push(Added, Compatible, kind_name(n), n.name(), detail);
            }
            (Some(o), None) => out.push(Removed, Break, kind_name(o), o.name(), ""),
            (None, None) => {}
        },
    );
}

fn item(o: &Item, n: &Item, new: &Ir, out: &mut Out) {
    match (o, n) {
        (Item::Enum(a), Item::Enum(b)) => enums(a, b, new, out),
        (Item::Struct(a), Item::Struct(b)) => structs(a, b, out),
        (Item::Fn(a), Item::Fn(b)) => {
            if a.sig != b.sig {
                out.push(
                    Changed,
                    Break,
                    "fn typedef",
                    &b.name,
                    format!("{} -> {}", spell_sig(&a.sig), spell_sig(&b.sig)),
                );
            }
        }
        (Item::Flags(a), Item::Flags(b)) => {
            if a.ty != b.ty {
                out.push(
                    Changed,
                    Break,
                    "flags",
                    &b.name,
                    format!("type {} -> {}", a.ty.spec_name(), b.ty.spec_name()),
                );
            }
            pair(
                &a.values,
                &b.values,
                |f| f.name.clone(),
                |x, y| match (x, y) {
                    (Some(x), Some(y)) if x.bit != y.bit => out.push(
                        Changed,
                        Break,
                        "flag",
                        &y.name,
                        format!("bit {} -> {}", x.bit, y.bit),
                    ),
                    (None, Some(y)) => out.push(
                        Added,
                        Compatible,
                        "flag",
                        &y.name,
                        format!("bit {} ({:#x})", y.bit, y.value),
                    ),
                    (Some(x), None) => {
                        out.push(Removed, Break, "flag", &x.name, format!("bit {}", x.bit))
                    }
                    _ => {}
                },
            );
        }
        _ => out.push(
            Changed,
            Break,
            kind_name(n),
            n.name(),
            format!("was a {}", kind_name(o)),
        ),
    }
}

fn enums(a: &Enum, b: &Enum, new: &Ir, out: &mut Out) {
    if a.repr != b.repr {
        out.push(
            Changed,
            Break,
            "enum",
            &b.name,
            format!("repr {} -> {}", a.repr.spec_name(), b.repr.spec_name()),
        );
    }
    let is_device_enum = new.streams.device_enum == b.name;
    pair(
        &a.values,
        &b.values,
        |v| v.name.clone(),
        |x, y| {
            let name = |n: &str| format!("{}::{n}", b.name);
            match (x, y) {
                (Some(x), Some(y)) => {
                    if x.value != y.value {
                        out.push(
                            Changed,
                            Break,
                            "enum value",
                            name(&y.name),
                            format!("renumbered {} -> {}", x.value, y.value),
                        );
                    }
                    if x.bits != y.bits {
                        let show = |b: Option<u8>| b.map_or("none".to_string(), |b| b.to_string());
                        let compat = if y.bits.is_none() { Compatible } else { Break };
                        out.push(
                            Changed,
                            compat,
                            "enum value",
                            name(&y.name),
                            format!("bits rule {} -> {}", show(x.bits), show(y.bits)),
                        );
                    }
                    if x.host_accessible != y.host_accessible {
                        let compat = if y.host_accessible { Compatible } else { Break };
                        let yn = |h: bool| if h { "yes" } else { "no" };
                        out.push(
                            Changed,
                            compat,
                            "enum value",
                            name(&y.name),
                            format!(
                                "host-accessible {} -> {}",
                                yn(x.host_accessible),
                                yn(y.host_accessible)
                            ),
                        );
                    }
                }
                (None, Some(y)) => {
                    let mut detail = y.value.to_string();
                    if let Some(bits) = y.bits {
                        detail += &format!(", bits must be {bits}");
                    }
                    if y.host_accessible {
                        detail += ", host-accessible";
                    }
                    if is_device_enum && !new.streams.rules.iter().any(|r| r.device == y.name) {
                        detail += ", stream-less";
                    }
                    out.push(Added, Compatible, "enum value", name(&y.name), detail);
                }
                (Some(x), None) => out.push(
                    Removed,
                    Break,
                    "enum value",
                    name(&x.name),
                    x.value.to_string(),
                ),
                (None, None) => {}
            }
        },
    );
}

fn structs(a: &Struct, b: &Struct, out: &mut Out) {
    if a.size != b.size {
        out.push(
            Changed,
            Break,
            "struct",
            &b.name,
            format!("size {} -> {}", a.size, b.size),
        );
    }
    if a.align != b.align {
        out.push(
            Changed,
            Break,
            "struct",
            &b.name,
            format!("align {} -> {}", a.align, b.align),
        );
    }
    pair(
        &a.fields,
        &b.fields,
        |f| f.name.clone(),
        |x, y| {
            let name = |n: &str| format!("{}.{n}", b.name);
            match (x, y) {
                (Some(x), Some(y)) => {
                    let mut what = Vec::new();
                    if x.ty != y.ty {
                        what.push(format!("type {} -> {}", spell(&x.ty), spell(&y.ty)));
                    }
                    if x.offset != y.offset {
                        what.push(format!("offset {} -> {}", x.offset, y.offset));
                    }
                    if x.size != y.size {
                        what.push(format!("size {} -> {}", x.size, y.size));
                    }
                    if !what.is_empty() {
                        out.push(Changed, Break, "field", name(&y.name), what.join(", "));
                    }
                }
                (None, Some(y)) => out.push(
                    Added,
                    Break,
                    "field",
                    name(&y.name),
                    format!("{} at offset {}", spell(&y.ty), y.offset),
                ),
                (Some(x), None) => out.push(
                    Removed,
                    Break,
                    "field",
                    name(&x.name),
                    format!("{} at offset {}", spell(&x.ty), x.offset),
                ),
                (None, None) => {}
            }
        },
    );
}

fn dtypes(old: &Ir, new: &Ir, out: &mut Out) {
    let dl = |d: &DType| {
        format!(
            "{} ({}), {} bits, {} lane{}",
            d.code_name,
            d.code,
            d.bits,
            d.lanes,
            if d.lanes == 1 { "" } else { "s" }
        )
    };
    pair(
        &old.dtypes,
        &new.dtypes,
        |d| d.name.clone(),
        |x, y| match (x, y) {
            (Some(x), Some(y)) => {
                if (x.code, x.bits, x.lanes) != (y.code, y.bits, y.lanes) {
                    out.push(
                        Changed,
                        Break,
                        "dtype",
                        &y.name,
                        format!("{} -> {}", dl(x), dl(y)),
                    );
                }
                for (what, a, b) in [
                    ("numpy typestr", &x.numpy, &y.numpy),
                    ("buffer format", &x.buffer, &y.buffer),
                    ("Rust type", &x.rust, &y.rust),
                ] {
                    if a != b {
                        let show = |s: &Option<String>| s.clone().unwrap_or_else(|| "none".into());
                        let compat = if a.is_none() { Compatible } else { Break };
                        out.push(
                            Changed,
                            compat,
                            "dtype",
                            &y.name,
                            format!("{what} {} -> {}", show(a), show(b)),
                        );
                    }
                }
            }
            (None, Some(y)) => {
                let mut detail = dl(y);
                for (what, v) in [
                    ("numpy", &y.numpy),
                    ("buffer", &y.buffer),
                    ("Rust", &y.rust),
                ] {
                    if let Some(v) = v {
                        detail += &format!(", {what} {v}");
                    }
                }
                out.push(Added, Compatible, "dtype", &y.name, detail);
            }
            (Some(x), None) => out.push(Removed, Break, "dtype", &x.name, dl(x)),
            (None, None) => {}
        },
    );
}

fn rule_summary(r: &StreamRule) -> String {
    let mut parts = vec![format!("None -> {}", r.none)];
    for v in &r.values {
        parts.push(match (&v.action, &v.reason) {
            (Some(a), _) => format!("{} -> {a}", v.value),
            _ => format!("{} rejected", v.value),
        });
    }
    if let Some(p) = r.pointers_above {
        parts.push(format!("> {p} pointer"));
    }
    parts.join(", ")
}

/// What a rule does with one stream value: `None` is `stream=None`.
fn outcome(r: &StreamRule, value: Option<i64>) -> String {
    let Some(v) = value else {
        return r.none.clone();
    };
    if let Some(sv) = r.values.iter().find(|sv| sv.value == v) {
        return sv.action.clone().unwrap_or_else(|| "rejected".into());
    }
    match r.pointers_above {
        Some(p) if v > p => "pointer".into(),
        _ => "rejected".into(),
    }
}

/// The same device's rule in both specs: one change per stream value handled differently.
fn rule(x: &StreamRule, y: &StreamRule, out: &mut Out) {
    let mut probes: Vec<Option<i64>> = vec![None];
    for r in [x, y] {
        probes.extend(r.values.iter().map(|v| Some(v.value)));
        if let Some(p) = r.pointers_above {
            probes.push(Some(p + 1));
        }
    }
    probes.sort();
    probes.dedup();
    for p in probes {
        let (a, b) = (outcome(x, p), outcome(y, p));
        if a != b {
            let which = p.map_or("None".to_string(), |v| v.to_string());
            out.push(
                Changed,
                Break,
                "stream rule",
                &y.device,
                format!("stream={which}: {a} -> {b}"),
            );
        }
    }
    if x.consumer_default != y.consumer_default {
        let cd = |r: &StreamRule| {
            r.consumer_default
                .map_or("None".to_string(), |v| v.to_string())
        };
        out.push(
            Changed,
            Break,
            "stream rule",
            &y.device,
            format!("consumer passes {} -> {}", cd(x), cd(y)),
        );
    }
}

fn streams(a: &Streams, b: &Streams, out: &mut Out) {
    if a.min != b.min {
        out.push(
            Changed,
            Break,
            "stream rule",
            "every device",
            format!("minimum {} -> {}", a.min, b.min),
        );
    }
    if a.stream_less_none != b.stream_less_none {
        out.push(
            Changed,
            Break,
            "stream rule",
            "stream-less devices",
            format!(
                "None -> {} (was {})",
                b.stream_less_none, a.stream_less_none
            ),
        );
    }
    pair(
        &a.actions,
        &b.actions,
        |x| x.name.clone(),
        |x, y| match (x, y) {
            (Some(x), Some(y)) if x.carries_value != y.carries_value => out.push(
                Changed,
                Break,
                "stream action",
                &y.name,
                format!(
                    "carries a value: {} -> {}",
                    x.carries_value, y.carries_value
                ),
            ),
            (None, Some(y)) => out.push(Added, Compatible, "stream action", &y.name, ""),
            (Some(x), None) => out.push(Removed, Break, "stream action", &x.name, ""),
            _ => {}
        },
    );
    pair(
        &a.rules,
        &b.rules,
        |r| r.device.clone(),
        |x, y| match (x, y) {
            (Some(x), Some(y)) => rule(x, y, out),
            (None, Some(y)) => {
                out.push(Added, Compatible, "stream rule", &y.device, rule_summary(y))
            }
            (Some(x), None) => out.push(
                Removed,
                Break,
                "stream rule",
                &x.device,
                "the device becomes stream-less",
            ),
            (None, None) => {}
        },
    );
}

fn exceptions(old: &Ir, new: &Ir, out: &mut Out) {
    pair(
        &old.exceptions,
        &new.exceptions,
        |e| e.name.clone(),
        |x, y| match (x, y) {
            (None, Some(y)) => out.push(Added, Compatible, "exception", &y.name, ""),
            (Some(x), None) => out.push(Removed, Break, "exception", &x.name, ""),
            _ => {}
        },
    );
    pair(
        &old.failures,
        &new.failures,
        |f| f.kind.clone(),
        |x, y| match (x, y) {
            (Some(x), Some(y)) if x.exception != y.exception => out.push(
                Changed,
                Break,
                "failure",
                &y.kind,
                format!("{} -> {}", x.exception, y.exception),
            ),
            (None, Some(y)) => out.push(Added, Compatible, "failure", &y.kind, &y.exception),
            (Some(x), None) => out.push(Removed, Break, "failure", &x.kind, &x.exception),
            _ => {}
        },
    );
}

fn named_strings(subject: &'static str, a: &[NamedString], b: &[NamedString], out: &mut Out) {
    pair(
        a,
        b,
        |s| s.name.clone(),
        |x, y| match (x, y) {
            (Some(x), Some(y)) if x.value != y.value => out.push(
                Changed,
                Break,
                subject,
                &y.name,
                format!("{:?} -> {:?}", x.value, y.value),
            ),
            (None, Some(y)) => out.push(
                Added,
                Compatible,
                subject,
                &y.name,
                format!("{:?}", y.value),
            ),
            (Some(x), None) => out.push(Removed, Break, subject, &x.name, format!("{:?}", x.value)),
            _ => {}
        },
    );
}

fn method(a: &Method, b: &Method, out: &mut Out) {
    if a.name != b.name {
        out.push(
            Changed,
            Break,
            "method",
            &b.name,
            format!("renamed from {}", a.name),
        );
    }
    pair(
        &a.kwargs,
        &b.kwargs,
        |k| k.name.clone(),
        |x, y| {
            let name = |k: &str| format!("{}({k}=)", b.name);
            match (x, y) {
                (Some(x), Some(y)) if x.py_type != y.py_type => out.push(
                    Changed,
                    Break,
                    "keyword",
                    name(&y.name),
                    format!("{} -> {}", x.py_type, y.py_type),
                ),
                (None, Some(y)) => {
                    out.push(Added, Compatible, "keyword", name(&y.name), &y.py_type)
                }
                (Some(x), None) => out.push(Removed, Break, "keyword", name(&x.name), &x.py_type),
                _ => {}
            }
        },
    );
}

fn names(old: &Ir, new: &Ir, out: &mut Out) {
    named_strings("capsule name", &old.capsules, &new.capsules, out);
    let opt = |a: &Option<NamedString>| a.iter().cloned().collect::<Vec<_>>();
    named_strings(
        "attribute",
        &opt(&old.exchange_attribute),
        &opt(&new.exchange_attribute),
        out,
    );
    named_strings(
        "legacy attribute",
        &old.exchange_legacy_attributes,
        &new.exchange_legacy_attributes,
        out,
    );
    let (a, b) = (&old.protocol, &new.protocol);
    method(&a.dlpack, &b.dlpack, out);
    method(&a.dlpack_device, &b.dlpack_device, out);
    method(&a.from_dlpack, &b.from_dlpack, out);
}
