//! The project file (`dlbind.yaml`): the copies of generated files, and of the spec, that the
//! crates of a project ship inside their own packages.
//!
//! A published crate cannot read files outside its package, so each crate carries what it
//! needs (as prost keeps `prost-types/src/protobuf.rs` inside the crate that ships it): the
//! runtime its generated Rust and the C header, the derive its table, the generator the spec
//! it embeds. `dlbind generate` writes every copy along with the output directory and
//! `dlbind check` fails when a copy differs from a fresh generation.
//!
//! ```yaml
//! copies:
//!   - {from: spec, to: codegen/spec/dlpack.yaml}                # the spec text itself
//!   - {from: rust/types.rs, to: runtime/src/generated/types.rs}  # an output, relative to --out
//! ```
//! `to` paths are relative to the directory holding the project file.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Error, Result};

/// `from` value that names the spec text rather than a generated output.
pub const FROM_SPEC: &str = "spec";

/// The default project file name, looked up in the current directory by the CLI.
pub const DEFAULT_PROJECT_FILE: &str = "dlbind.yaml";

/// A parsed project file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Project {
    /// The directory `to` paths are relative to (the project file's directory).
    pub root: PathBuf,
    pub copies: Vec<CopyRule>,
}

/// One copy: `from` (an output path such as `rust/types.rs`, or [`FROM_SPEC`]) to `to`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CopyRule {
    pub from: String,
    pub to: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProjectFile {
    #[serde(default)]
    copies: Vec<CopyRule>,
}

impl Project {
    /// Reads and parses `path`.
    pub fn load(path: &Path) -> Result<Project> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let file: ProjectFile = serde_yaml::from_str(&text)
            .map_err(|e| Error::Project(format!("{}: {e}", path.display())))?;
        for c in &file.copies {
            if Path::new(&c.to).is_absolute() || c.to.split(['/', '\\']).any(|p| p == "..") {
                return Err(Error::Project(format!(
                    "{}: copy destination `{}` must be a relative path inside the project",
                    path.display(),
                    c.to
                )));
            }
        }
        let root = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        Ok(Project {
            root,
            copies: file.copies,
        })
    }

    /// Where a copy goes.
    pub fn destination(&self, rule: &CopyRule) -> PathBuf {
        if self.root == Path::new(".") {
            PathBuf::from(&rule.to)
        } else {
            self.root.join(&rule.to)
        }
    }
}
