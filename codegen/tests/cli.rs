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
    assert!(stdout.contains("generated 15 files"), "{stdout}");
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
    // a deleted file is named, not diffed line by line
    std::fs::remove_file(dir.join("docs/streams.md")).unwrap();
    let (code, stdout, err) = dlbind(&["check", "--out", out]);
    assert_eq!(code, 1);
    assert!(stdout.contains("missing: docs/streams.md"), "{stdout}");
    assert!(!stdout.contains("+# Stream rules"), "{stdout}");
    assert!(
        err.contains("2 stale file(s)") && err.contains("docs/streams.md"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn generate_names_the_spec_it_used() {
    let dir = scratch("cli-spec-note");
    let out = dir.to_str().unwrap();
    // run from the project root: the default spec file is there
    let (code, stdout, err) = dlbind(&["generate", "--out", out]);
    assert_eq!(code, 0, "{err}");
    assert!(
        stdout.lines().next() == Some("spec: spec/dlpack.yaml"),
        "{stdout}"
    );
    let (code, stdout, err) = dlbind(&[
        "generate",
        "--out",
        out,
        "--spec",
        "tests/fixtures/dlpack-1.1/spec.yaml",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        stdout.contains("spec: tests/fixtures/dlpack-1.1/spec.yaml"),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn check_without_an_output_directory_says_so_in_one_line() {
    let (code, stdout, err) = dlbind(&["check", "--out", "no/such/dir"]);
    assert_eq!(code, 1, "{err}");
    assert!(stdout.is_empty(), "no diffs expected: {stdout}");
    assert!(
        err.starts_with("dlbind: no output directory `no/such/dir` here")
            && err.trim_end().lines().count() == 1,
        "{err}"
    );
    // an invalid spec is still reported first (exit 2), whatever the output directory
    let (code, _, err) = dlbind(&[
        "check",
        "--spec",
        "tests/fixtures/invalid/malformed_yaml.yaml",
        "--out",
        "no/such/dir",
    ]);
    assert_eq!(code, 2, "{err}");
}

/// Asserts what the CLI prints for an invalid spec: exit status 2 and only lines of
/// the form `<rel>:<line>:<col>: <message>` with line and col >= 1, and no panic.
/// Returns the (line, col) of the first diagnostic.
fn assert_located(rel: &str, code: i32, err: &str) -> (usize, usize) {
    assert_eq!(code, 2, "{rel}: exit status {code}\n{err}");
    assert!(!err.contains("panicked"), "{rel}: {err}");
    assert!(!err.trim().is_empty(), "{rel}: nothing on stderr");
    let mut first = None;
    for line in err.lines() {
        let rest = line
            .strip_prefix(rel)
            .and_then(|r| r.strip_prefix(':'))
            .unwrap_or_else(|| panic!("{rel}: `{line}` does not start with `{rel}:`"));
        let mut parts = rest.splitn(3, ':');
        let mut num = || parts.next().and_then(|n| n.parse::<usize>().ok());
        let (l, c) = (num(), num());
        let message = parts.next().unwrap_or("");
        assert!(
            l.is_some_and(|l| l >= 1) && c.is_some_and(|c| c >= 1),
            "{rel}: no line:col >= 1 in `{line}`"
        );
        assert!(
            message.starts_with(' ') && message.trim().len() > 1,
            "{rel}: no message in `{line}`"
        );
        first.get_or_insert((l.unwrap(), c.unwrap()));
    }
    first.unwrap()
}

/// Each class of malformed spec, through the real binary (`check` and `generate`):
/// exit 2, `file:line:col: message` naming the offending key, the same text as the
/// fixture's `.expected`, no panic, nothing written.
#[test]
fn malformed_specs_exit_2_with_located_diagnostics() {
    let classes: &[(&str, &[&str])] = &[
        // truncated YAML
        ("truncated_yaml", &["malformed spec", "flow mapping"]),
        ("malformed_yaml", &["malformed spec", "flow mapping"]),
        // wrong types
        (
            "wrong_type_string_for_int",
            &["types[1].values[1].value", "string \"two\""],
        ),
        (
            "wrong_type_map_for_list",
            &["types[0].fields", "map, expected a sequence"],
        ),
        // missing required keys, unknown keys
        (
            "missing_required_key",
            &["types[2].fields[1]", "missing field `type`"],
        ),
        ("unknown_key", &["types[1]", "cpp_underlyng"]),
        // out-of-range values
        ("dtype_bits_out_of_range", &["dtypes[1].bits", "300"]),
        (
            "enum_value_negative_unsigned",
            &["value -1 of `kDLInt` does not fit in u8"],
        ),
        ("flag_bit_out_of_range", &["bit 64 does not fit in u64"]),
        ("version_major_negative", &["version.major", "`-1`"]),
        ("dtype_code_out_of_range", &["`kDLBfloat` has value 300"]),
        ("type_nested_too_deep", &["nested more than 32 levels deep"]),
        // conflicting definitions
        (
            "flag_bit_reused",
            &["flag bit 0", "DLPACK_FLAG_BITMASK_IS_COPIED"],
        ),
        ("duplicate_enum_value", &["duplicate enum value 2"]),
        ("multiple_documents", &["more than one document"]),
        // stream rules that contradict themselves
        (
            "stream_rules_conflicting",
            &[
                "duplicate stream action `NoSync`",
                "only one stream action can carry a value",
                "`AcmeQueue` carries a value; use `pointers_above`",
                "unknown stream action `Legacy`",
                "consumer default 0 is itself rejected",
                "stream value -2 is below the minimum -1",
                "duplicate stream value 1",
                "stream value 5 overlaps `pointers_above: 2`",
                "exactly one of `action` or `reason`",
                "duplicate stream rule for `kDLCUDA`",
            ],
        ),
        (
            "stream_pointers_without_carrier",
            &[
                "consumer default -5 is itself rejected",
                "`pointers_above` needs a stream action with `carries_value: true`",
            ],
        ),
    ];
    let dir = scratch("cli-malformed");
    let out = dir.to_str().unwrap();
    for (case, needles) in classes {
        let rel = format!("tests/fixtures/invalid/{case}.yaml");
        let text = std::fs::read_to_string(root().join(&rel)).unwrap();
        let expected =
            std::fs::read_to_string(root().join(format!("tests/fixtures/invalid/{case}.expected")))
                .unwrap()
                .replace("\r\n", "\n");
        for command in ["check", "generate"] {
            let (code, _, err) = dlbind(&[command, "--spec", &rel, "--out", out]);
            let (line, _) = assert_located(&rel, code, &err);
            assert!(
                line <= text.lines().count() + 1,
                "{rel}: line {line} is past the end\n{err}"
            );
            for needle in *needles {
                assert!(err.contains(needle), "{rel}: `{needle}` not in\n{err}");
            }
            assert_eq!(err.replace("\r\n", "\n"), expected, "{rel}: {command}");
        }
        assert!(
            std::fs::read_dir(&dir).unwrap().next().is_none(),
            "{rel}: generate wrote files for an invalid spec"
        );
    }
    // a truncated file points at its last line, not past it
    let rel = "tests/fixtures/invalid/truncated_yaml.yaml";
    let text = std::fs::read_to_string(root().join(rel)).unwrap();
    let (_, _, err) = dlbind(&["check", "--spec", rel]);
    let last = text.lines().count();
    let at = format!(
        "{rel}:{last}:{}: ",
        text.lines().last().unwrap().chars().count() + 1
    );
    assert!(err.starts_with(&at), "expected `{at}`\n{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every fixture under tests/fixtures/invalid, through the binary.
#[test]
fn every_invalid_fixture_exits_2() {
    let mut n = 0;
    for e in std::fs::read_dir(root().join("tests/fixtures/invalid"))
        .unwrap()
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.ends_with(".yaml") {
            continue;
        }
        let rel = format!("tests/fixtures/invalid/{name}");
        let (code, _, err) = dlbind(&["check", "--spec", &rel, "--out", "/nonexistent"]);
        assert_located(&rel, code, &err);
        n += 1;
    }
    assert!(n >= 20, "only {n} invalid fixtures");
}

/// The real spec cut at many points (mostly mid-line): a spec error located inside
/// the file, or (for a cut that leaves a valid spec) not a spec error at all.
#[test]
fn truncated_specs_never_panic() {
    let spec = std::fs::read_to_string(root().join("spec/dlpack.yaml")).unwrap();
    let dir = scratch("cli-truncated");
    let path = dir.join("cut.yaml");
    let rel = path.to_str().unwrap();
    let out = dir.join("out");
    for k in 1..40 {
        let mut at = spec.len() * k / 40 + 7;
        while !spec.is_char_boundary(at) {
            at += 1;
        }
        let cut = &spec[..at];
        std::fs::write(&path, cut).unwrap();
        let (code, _, err) = dlbind(&["check", "--spec", rel, "--out", out.to_str().unwrap()]);
        if dlbind_codegen::Ir::from_yaml(cut, rel).is_ok() {
            assert_ne!(code, 2, "cut at {at}: {err}");
            continue;
        }
        let (line, _) = assert_located(rel, code, &err);
        assert!(
            line <= cut.lines().count() + 1,
            "cut at {at}: line {line}\n{err}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A project file's copies are written by `generate` and verified by `check`; a stale or
/// missing copy fails `check` (exit 1, named), an unknown `from` is an error (exit 2).
#[test]
fn project_copies_are_written_and_checked() {
    let dir = scratch("project");
    let p = dir.join("dlbind.yaml");
    std::fs::write(
        &p,
        "copies:\n  - {from: spec, to: crate_a/spec.yaml}\n  - {from: rust/types.rs, to: crate_b/src/types.rs}\n",
    )
    .unwrap();
    let out = dir.join("gen");
    let (out_s, p_s) = (out.to_str().unwrap(), p.to_str().unwrap());
    let (code, stdout, err) = dlbind(&["generate", "--out", out_s, "--project", p_s]);
    assert_eq!(code, 0, "{err}");
    assert!(stdout.contains("generated 17 files"), "{stdout}");
    let types = std::fs::read_to_string(out.join("rust/types.rs")).unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.join("crate_b/src/types.rs")).unwrap(),
        types
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("crate_a/spec.yaml")).unwrap(),
        std::fs::read_to_string(root().join("spec/dlpack.yaml")).unwrap()
    );
    let (code, stdout, err) = dlbind(&["check", "--out", out_s, "--project", p_s]);
    assert_eq!(code, 0, "{stdout}{err}");
    assert!(
        stdout.contains("17 generated files are up to date"),
        "{stdout}"
    );
    // A hand edit of a copy is reported with a diff naming the copy.
    std::fs::write(
        dir.join("crate_b/src/types.rs"),
        types.replace("kDLTrn", "kDLTrain"),
    )
    .unwrap();
    let (code, stdout, err) = dlbind(&["check", "--out", out_s, "--project", p_s]);
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains("a/crate_b/src/types.rs"), "{stdout}");
    assert!(err.contains("crate_b/src/types.rs"), "{err}");
    std::fs::remove_file(dir.join("crate_a/spec.yaml")).unwrap();
    let (code, stdout, _) = dlbind(&["check", "--out", out_s, "--project", p_s]);
    assert_eq!(code, 1);
    assert!(stdout.contains("missing: crate_a/spec.yaml"), "{stdout}");
    // Unknown source, or a destination outside the project: exit 2, nothing written.
    std::fs::write(&p, "copies:\n  - {from: rust/nope.rs, to: x.rs}\n").unwrap();
    let (code, _, err) = dlbind(&["generate", "--out", out_s, "--project", p_s]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("rust/nope.rs") && err.contains("rust/types.rs"),
        "{err}"
    );
    std::fs::write(&p, "copies:\n  - {from: spec, to: ../escape.yaml}\n").unwrap();
    let (code, _, err) = dlbind(&["generate", "--out", out_s, "--project", p_s]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("relative path inside the project"), "{err}");
    assert!(!dir.join("../escape.yaml").exists());
}

/// `dlbind generate | head -1`: a reader that closes the pipe ends the run quietly (exit 0), not
/// with a panic on the broken pipe.
#[test]
fn closed_stdout_is_not_a_panic() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let dir = scratch("pipe");
    let mut child = Command::new(env!("CARGO_BIN_EXE_dlbind"))
        .args(["generate", "--out", dir.to_str().unwrap()])
        .current_dir(root())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run dlbind");
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("spec: "), "{first}");
    // The reader is gone (dropped above): the remaining lines hit a closed pipe.
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(0), "{err}");
}
