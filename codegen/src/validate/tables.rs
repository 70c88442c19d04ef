//! Lowering the spec's tables: capsule and attribute names, the Python protocol, dtypes,
//! exceptions and failures.

use std::collections::{HashMap, HashSet};

use crate::ir::{self, Item};
use crate::spec::{self, Spec};

use super::{Lower, is_ident};

impl Lower {
    /// Step 3: capsule constants and the exchange-API attribute names are unique, capsule names
    /// have no NUL and legacy attribute values are Python identifiers.
    pub(super) fn check_constant_names(&mut self, s: &Spec) {
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
    }

    /// Step 4: the Python protocol (`__dlpack__`, `__dlpack_device__`, `from_dlpack`) with unique
    /// keyword and constant names.
    pub(super) fn lower_protocol(&mut self, p: &spec::Protocol) -> ir::Protocol {
        let protocol = ir::Protocol {
            dlpack: self.lower_method("protocol.dlpack", &p.dlpack),
            dlpack_device: self.lower_method("protocol.dlpack_device", &p.dlpack_device),
            from_dlpack: self.lower_method("protocol.from_dlpack", &p.from_dlpack),
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
        protocol
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

    /// Step 5: dtypes, checked against the type-code enum (value fits a `u8`, the code's bit rule,
    /// non-zero bits and lanes, one name and one `(code, bits, lanes)` each).
    pub(super) fn lower_dtypes(&mut self, s: &Spec, items: &[Item]) -> Vec<ir::DType> {
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
        dtypes
    }

    /// Step 7 (after the streams): exception names are unique identifiers and every failure kind
    /// is unique and maps to a declared exception.
    pub(super) fn check_exceptions(&mut self, s: &Spec) {
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
    }
}
