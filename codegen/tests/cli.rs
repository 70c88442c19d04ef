//! The `dlbind` binary: exit codes, diagnostics, generate output, check diffs.

mod common;

use std::process::Command;

use common::{root, scratch};

fn dlbind(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_dlbind"))
        .args(args)
        .current_dir(root())
        .output()
        .expect("run dlbind");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn invalid_spec_exits_2_with_file_line_col() {
    let (code, _, err) = dlbind(&[
        "generate",
        "--spec",
        "tests/fixtures/invalid/duplicate_enum_value.yaml",
        "--out",
        "/nonexistent",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.starts_with("tests/fixtures/invalid/duplicate_enum_value.yaml:"),
        "{err}"
    );
    let (code, _, err) = dlbind(&[
        "check",
        "--spec",
        "tests/fixtures/invalid/malformed_yaml.yaml",
    ]);
    assert_eq!(code, 2, "{err}");
    let pos: Vec<&str> = err.splitn(4, ':').collect();
    assert!(
        pos[1].parse::<usize>().unwrap() > 0 && pos[2].parse::<usize>().unwrap() > 0,
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn usage_errors_exit_2() {
    assert_eq!(dlbind(&["frobnicate"]).0, 2);
    assert_eq!(dlbind(&["generate", "--bogus"]).0, 2);
    assert_eq!(dlbind(&["generate", "--spec"]).0, 2);
    assert_eq!(dlbind(&[]).0, 2);
    assert_eq!(dlbind(&["--help"]).0, 0);
}

#[test]
fn missing_spec_is_an_error_not_a_panic() {
    let (code, _, err) = dlbind(&["check", "--spec", "no/such/spec.yaml"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("no/such/spec.yaml") && !err.contains("panicked"),
        "{err}"
    );
}

#[test]
fn generate_then_check() {
    let dir = scratch("cli");
    let out = dir.to_str().unwrap();
    let (code, stdout, err) = dlbind(&["generate", "--out", out, "--verbose"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        stdout.contains("rust/types.rs") && stdout.contains("include/dlpack.h"),
        "{stdout}"
    );
    assert!(stdout.contains("generated 12 files"), "{stdout}");
    assert!(stdout.contains("elapsed:"), "{stdout}");
    let (code, stdout, _) = dlbind(&["check", "--out", out]);
    assert_eq!(code, 0, "{stdout}");
    // make one file stale: check prints a unified diff and exits 1
    let pyi = dir.join("python/dlpack.pyi");
    let text = std::fs::read_to_string(&pyi)
        .unwrap()
        .replace("kDLTrn = 18", "kDLTrn = 19");
    std::fs::write(&pyi, text).unwrap();
    let (code, stdout, err) = dlbind(&["check", "--out", out]);
    assert_eq!(code, 1);
    assert!(
        stdout.contains("--- a/") && stdout.contains("+++ b/") && stdout.contains("@@"),
        "{stdout}"
    );
    assert!(
        stdout.contains("-    kDLTrn = 19") && stdout.contains("+    kDLTrn = 18"),
        "{stdout}"
    );
    assert!(err.contains("python/dlpack.pyi"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
