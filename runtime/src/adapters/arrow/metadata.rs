//! The `arrow.fixed_shape_tensor` extension type's metadata ([`TensorMetadata`]), read and
//! written with the few lines of JSON it needs.

use crate::error::DlpackError;
use crate::spec::errors::FailureKind;

use super::{Result, err};

/// The canonical extension name.
pub(super) const FIXED_SHAPE_TENSOR: &str = "arrow.fixed_shape_tensor";

/// `ARROW:extension:metadata` of `arrow.fixed_shape_tensor`: a JSON object with `shape`
/// (physical, row-major), optional `dim_names` (of the physical dimensions) and optional
/// `permutation` (logical dimension `i` is physical dimension `permutation[i]`). Read and written
/// here (a few lines of JSON), not through arrow-schema's `canonical_extension_types`, whose
/// metadata writes `"dim_names": null` that its own reader then refuses (arrow-rs 60).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct TensorMetadata {
    pub(super) shape: Vec<usize>,
    pub(super) dim_names: Option<Vec<String>>,
    pub(super) permutation: Option<Vec<usize>>,
}

fn bad_meta(msg: impl std::fmt::Display) -> DlpackError {
    err(
        FailureKind::MalformedTensor,
        format!("arrow.fixed_shape_tensor metadata: {msg}"),
    )
}

/// A JSON value, as much of JSON as the metadata uses.
#[derive(Debug)]
enum Json {
    Null,
    Num(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
    Bool,
}

struct JsonParser<'a> {
    s: &'a [u8],
    i: usize,
}

impl JsonParser<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }
    fn eat(&mut self, c: u8) -> Result<()> {
        self.ws();
        if self.s.get(self.i) == Some(&c) {
            self.i += 1;
            Ok(())
        } else {
            Err(bad_meta(format!(
                "expected '{}' at byte {}",
                c as char, self.i
            )))
        }
    }
    fn value(&mut self, depth: usize) -> Result<Json> {
        if depth > 16 {
            return Err(bad_meta("nested too deeply"));
        }
        self.ws();
        match self.s.get(self.i) {
            Some(b'{') => {
                self.i += 1;
                let mut items = Vec::new();
                self.ws();
                if self.s.get(self.i) == Some(&b'}') {
                    self.i += 1;
                    return Ok(Json::Obj(items));
                }
                loop {
                    self.ws();
                    let Json::Str(k) = self.value(depth + 1)? else {
                        return Err(bad_meta("an object key is not a string"));
                    };
                    self.eat(b':')?;
                    items.push((k, self.value(depth + 1)?));
                    self.ws();
                    match self.s.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b'}') => {
                            self.i += 1;
                            return Ok(Json::Obj(items));
                        }
                        _ => return Err(bad_meta("unterminated object")),
                    }
                }
            }
            Some(b'[') => {
                self.i += 1;
                let mut items = Vec::new();
                self.ws();
                if self.s.get(self.i) == Some(&b']') {
                    self.i += 1;
                    return Ok(Json::Arr(items));
                }
                loop {
                    items.push(self.value(depth + 1)?);
                    self.ws();
                    match self.s.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b']') => {
                            self.i += 1;
                            return Ok(Json::Arr(items));
                        }
                        _ => return Err(bad_meta("unterminated array")),
                    }
                }
            }
            Some(b'"') => {
                self.i += 1;
                let mut out = String::new();
                loop {
                    let rest = std::str::from_utf8(&self.s[self.i..])
                        .map_err(|_| bad_meta("not UTF-8"))?;
                    let mut chars = rest.char_indices();
                    match chars.next() {
                        None => return Err(bad_meta("unterminated string")),
                        Some((_, '"')) => {
                            self.i += 1;
                            return Ok(Json::Str(out));
                        }
                        Some((_, '\\')) => {
                            let (_, e) = chars.next().ok_or_else(|| bad_meta("bad escape"))?;
                            self.i += 2;
                            out.push(match e {
                                'n' => '\n',
                                't' => '\t',
                                'r' => '\r',
                                'b' => '\u{8}',
                                'f' => '\u{c}',
                                'u' => {
                                    let hex = rest.get(2..6).ok_or_else(|| bad_meta("bad \\u"))?;
                                    self.i += 4;
                                    u32::from_str_radix(hex, 16)
                                        .ok()
                                        .and_then(char::from_u32)
                                        .unwrap_or('\u{fffd}')
                                }
                                c => c,
                            });
                        }
                        Some((_, c)) => {
                            self.i += c.len_utf8();
                            out.push(c);
                        }
                    }
                }
            }
            Some(b'n') if self.s[self.i..].starts_with(b"null") => {
                self.i += 4;
                Ok(Json::Null)
            }
            Some(b't') if self.s[self.i..].starts_with(b"true") => {
                self.i += 4;
                Ok(Json::Bool)
            }
            Some(b'f') if self.s[self.i..].starts_with(b"false") => {
                self.i += 5;
                Ok(Json::Bool)
            }
            Some(c) if *c == b'-' || c.is_ascii_digit() => {
                let start = self.i;
                while self.i < self.s.len()
                    && matches!(
                        self.s[self.i],
                        b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'
                    )
                {
                    self.i += 1;
                }
                let text = std::str::from_utf8(&self.s[start..self.i]).expect("ASCII");
                text.parse()
                    .map(Json::Num)
                    .map_err(|_| bad_meta(format!("bad number {text}")))
            }
            _ => Err(bad_meta(format!("unexpected input at byte {}", self.i))),
        }
    }
}

fn json_usizes(v: &Json, what: &str) -> Result<Vec<usize>> {
    let Json::Arr(items) = v else {
        return Err(bad_meta(format!("{what} is not an array")));
    };
    items
        .iter()
        .map(|x| match x {
            Json::Num(n) if *n >= 0.0 && n.fract() == 0.0 && *n < 9.0e15 => Ok(*n as usize),
            _ => Err(bad_meta(format!(
                "{what} holds {x:?}, not a non-negative integer"
            ))),
        })
        .collect()
}

impl TensorMetadata {
    pub(super) fn parse(text: &str) -> Result<TensorMetadata> {
        let mut p = JsonParser {
            s: text.as_bytes(),
            i: 0,
        };
        let Json::Obj(items) = p.value(0)? else {
            return Err(bad_meta("not a JSON object"));
        };
        let mut meta = TensorMetadata {
            shape: Vec::new(),
            dim_names: None,
            permutation: None,
        };
        let mut has_shape = false;
        for (k, v) in &items {
            match (k.as_str(), v) {
                (_, Json::Null) => {}
                ("shape", v) => {
                    meta.shape = json_usizes(v, "shape")?;
                    has_shape = true;
                }
                ("permutation", v) => meta.permutation = Some(json_usizes(v, "permutation")?),
                ("dim_names", Json::Arr(names)) => {
                    let names = names
                        .iter()
                        .map(|n| match n {
                            Json::Str(s) => Ok(s.clone()),
                            _ => Err(bad_meta("dim_names holds a non-string")),
                        })
                        .collect::<Result<Vec<_>>>()?;
                    meta.dim_names = Some(names);
                }
                ("dim_names", _) => return Err(bad_meta("dim_names is not an array")),
                _ => {}
            }
        }
        if !has_shape {
            return Err(bad_meta("no shape"));
        }
        let n = meta.shape.len();
        if let Some(perm) = &meta.permutation {
            let mut seen = vec![false; n];
            if perm.len() != n
                || perm
                    .iter()
                    .any(|&p| p >= n || std::mem::replace(&mut seen[p], true))
            {
                return Err(bad_meta(format!(
                    "permutation {perm:?} is not a permutation of 0..{n}"
                )));
            }
        }
        if meta.dim_names.as_ref().is_some_and(|d| d.len() != n) {
            return Err(bad_meta("dim_names and shape differ in length"));
        }
        Ok(meta)
    }

    pub(super) fn to_json(&self) -> String {
        let list = |v: &[usize]| v.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
        let mut s = format!("{{\"shape\":[{}]", list(&self.shape));
        if let Some(p) = &self.permutation {
            s.push_str(&format!(",\"permutation\":[{}]", list(p)));
        }
        s.push('}');
        s
    }

    /// The names of the logical dimensions (`dim_names` name the physical ones).
    pub(super) fn logical_names(&self) -> Option<Vec<String>> {
        let names = self.dim_names.as_ref()?;
        Some(match &self.permutation {
            Some(p) => p.iter().map(|&i| names[i].clone()).collect(),
            None => names.clone(),
        })
    }
}
