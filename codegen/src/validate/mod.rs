//! Lowering a [`Spec`] into the [`Ir`](crate::ir::Ir), with every semantic check.
//!
//! Problems are collected as (YAML path, message) pairs and turned into
//! `file:line:col` diagnostics through [`Positions`] only when there are any,
//! so a valid spec pays nothing for the second, marked parse.

use crate::error::{Diagnostic, Diagnostics, Error, Result};
use crate::ir::{self, NamedKind};
use crate::positions::Positions;
use crate::spec::{self, Spec};

mod items;
mod streams;
mod tables;
mod type_expr;

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
        let (decls, kinds) = self.declare_names(s);
        let items = self.lower_items(s, &decls, &kinds);
        self.check_constant_names(s);
        let protocol = self.lower_protocol(&s.protocol);
        let dtypes = self.lower_dtypes(s, &items);
        let streams = self.lower_streams(&s.streams, &items);
        self.check_exceptions(s);
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
