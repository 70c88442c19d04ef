//! The spec's type expressions (`u32`, `*mut *mut T`, `*const c_char`, `fn(a: T) -> R`) and
//! their recursive-descent parser.

/// An unresolved type expression.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum TyExpr {
    Name(String),
    Ptr(bool, Box<TyExpr>),
    Fn(Vec<(String, TyExpr)>, Option<Box<TyExpr>>),
}

/// Recursive-descent parser for the spec's type expressions
/// (`u32`, `*mut *mut T`, `*const c_char`, `fn(a: T, b: U) -> R`).
pub(super) struct TypeParser<'a> {
    s: &'a str,
    pos: usize,
    /// Current nesting of `ty`, bounded so that deep nesting is an error, not a stack overflow.
    depth: usize,
}

/// The deepest nesting of pointers and function types accepted in a type expression.
const MAX_TYPE_DEPTH: usize = 32;

impl<'a> TypeParser<'a> {
    pub(super) fn new(s: &'a str) -> Self {
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

    pub(super) fn parse_all(mut self) -> std::result::Result<TyExpr, String> {
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
