//! Errors of the generator. Spec problems carry `file:line:col` diagnostics.

use std::fmt;
use std::path::PathBuf;

/// One located problem in a spec file; displays as `file:line:col: message`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub file: String,
    /// 1-based line (0 when unknown).
    pub line: usize,
    /// 1-based column (0 when unknown).
    pub col: usize,
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}: ", self.file, self.line, self.col)?;
        // one diagnostic per line: line breaks and control characters the message
        // quotes from the spec (e.g. a key `"a\nb"`) are shown escaped
        for c in self.message.chars() {
            match c {
                '\n' => f.write_str("\\n")?,
                '\r' => f.write_str("\\r")?,
                c if c != '\t' && (c.is_control() || c == '\u{2028}' || c == '\u{2029}') => {
                    write!(f, "{}", c.escape_unicode())?
                }
                c => write!(f, "{c}")?,
            }
        }
        Ok(())
    }
}

/// A list of diagnostics, one per line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

/// Everything that can go wrong in `dlbind`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The spec is malformed YAML, has the wrong shape, or fails validation.
    #[error("{0}")]
    Spec(Diagnostics),
    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A template failed to render (a bug in dlbind, reported rather than panicking).
    #[error("template error: {0}")]
    Template(String),
    /// The project file (`dlbind.yaml`) is unreadable or names an unknown output.
    #[error("{0}")]
    Project(String),
    /// `check` found generated files that differ from a fresh generation.
    #[error("{} generated file(s) are stale: {}", .0.len(), .0.join(", "))]
    Stale(Vec<String>),
}

impl Error {
    /// The process exit status the CLI uses for this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Spec(_) | Error::Project(_) => 2,
            _ => 1,
        }
    }

    /// The diagnostics when this is a spec error.
    pub fn diagnostics(&self) -> Option<&[Diagnostic]> {
        match self {
            Error::Spec(d) => Some(&d.0),
            _ => None,
        }
    }
}

#[cfg(feature = "generate")]
impl From<tera::Error> for Error {
    fn from(e: tera::Error) -> Self {
        use std::error::Error as _;
        let mut msg = e.to_string();
        let mut src = e.source();
        while let Some(s) = src {
            msg.push_str(": ");
            msg.push_str(&s.to_string());
            src = s.source();
        }
        Error::Template(msg)
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
