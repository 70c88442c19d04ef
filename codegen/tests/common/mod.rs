//! Shared helpers for the integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The workspace root (the parent of `codegen/`).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// `BLESS=1` rewrites expectations instead of comparing.
pub fn bless() -> bool {
    std::env::var_os("BLESS").is_some_and(|v| v != "0" && !v.is_empty())
}

/// Normalise line endings.
pub fn normalize(s: &str) -> String {
    s.replace("\r\n", "\n")
}

/// Compare `actual` with the file at `path`; with BLESS=1 write it instead.
pub fn assert_matches_file(path: &Path, actual: &str) {
    if bless() {
        std::fs::write(path, actual).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        return;
    }
    let expected = std::fs::read_to_string(path)
        .map(|s| normalize(&s))
        .unwrap_or_else(|e| panic!("{}: {e} (run with BLESS=1 to create it)", path.display()));
    if expected != normalize(actual) {
        panic!(
            "{} differs from the expectation (run with BLESS=1 to update):\n--- expected\n{expected}\n+++ actual\n{actual}",
            path.display()
        );
    }
}

/// Golden fixture cases: every folder under tests/fixtures with a spec.yaml.
pub fn fixture_cases() -> Vec<String> {
    let dir = root().join("tests/fixtures");
    let mut cases: Vec<String> = std::fs::read_dir(&dir)
        .expect("tests/fixtures")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("spec.yaml").is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    cases.sort();
    cases
}

/// A scratch directory for one test (under cargo's per-target tmp dir).
pub fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("dlbind-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}
