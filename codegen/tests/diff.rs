//! `dlbind diff`: golden reports for 1.1 -> 1.3, 1.3 -> the current spec and a set of breaking
//! edits (`tests/fixtures/diff/`), and the CLI's exit codes (0 compatible, 1 break, 2 bad input).
//! `BLESS=1 cargo test -p dlbind-codegen --test diff` rewrites the expected reports.

mod common;

use std::process::Command;

use common::{assert_matches_file, root, scratch};
use dlbind_codegen::Ir;
use dlbind_codegen::diff::{Compat, compare};

const V11: &str = "tests/fixtures/dlpack-1.1/spec.yaml";
const V13: &str = "tests/fixtures/dlpack-1.3/spec.yaml";
const CURRENT: &str = "spec/dlpack.yaml";

fn ir(rel: &str) -> Ir {
    Ir::from_path(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

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
fn v1_1_to_v1_3_is_compatible() {
    let report = compare(&ir(V11), &ir(V13));
    assert!(!report.has_breaks(), "{report}");
    assert_matches_file(
        &root().join("tests/fixtures/diff/1.1-to-1.3.expected"),
        &report.to_string(),
    );
    let text = report.to_string();
    for needle in [
        "DLDeviceType::kDLTrn: 18",
        "struct            DLPackExchangeAPI: size 56, align 8",
        "version           DLPack: 1.1 -> 1.3",
    ] {
        assert!(text.contains(needle), "{needle} missing:\n{text}");
    }
}

#[test]
fn v1_3_to_current_adds_upstream_main_only() {
    let report = compare(&ir(V13), &ir(CURRENT));
    assert!(!report.has_breaks(), "{report}");
    assert_matches_file(
        &root().join("tests/fixtures/diff/1.3-to-current.expected"),
        &report.to_string(),
    );
    let names: Vec<&str> = report.changes.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "DLDeviceType::kDLTPU",
            "DLDeviceType::kDLTPUHost",
            "DLDeviceType::kDLAscend",
            "DLDataTypeCode::kDLBcomplex",
            "bcomplex32"
        ]
    );
    // and through the binary: exit 0, the same report after a header line
    let (code, out, err) = dlbind(&["diff", V13, CURRENT]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        format!("dlbind diff {V13} {CURRENT}\n{report}"),
        "CLI output"
    );
}

#[test]
fn identical_specs_have_no_changes() {
    let report = compare(&ir(CURRENT), &ir(CURRENT));
    assert!(report.changes.is_empty());
    assert_eq!(report.to_string(), "no changes\n");
    assert_eq!(dlbind(&["diff", CURRENT, CURRENT]).0, 0);
}

/// One edit of the v1.3 spec each: (case, [(find, replace), ...]). Every case must report at
/// least one break; the full report is golden.
const BREAKING: &[(&str, &[(&str, &str)])] = &[
    (
        "enum_value_renumbered",
        &[("{name: kDLTrn, value: 18,", "{name: kDLTrn, value: 22,")],
    ),
    (
        "enum_value_removed",
        &[(
            "      - {name: kDLMAIA, value: 17, doc: Microsoft MAIA device.}\n",
            "",
        )],
    ),
    (
        "enum_value_renamed",
        &[(
            "{name: kDLExtDev, value: 12,",
            "{name: kDLExtDevice, value: 12,",
        )],
    ),
    (
        "field_type_changed",
        &[
            ("{name: ndim, type: i32,", "{name: ndim, type: i64,"),
            ("abi: {size: 48, align: 8}", "abi: {size: 56, align: 8}"),
            ("abi: {size: 64, align: 8}", "abi: {size: 72, align: 8}"),
            ("abi: {size: 80, align: 8}", "abi: {size: 88, align: 8}"),
        ],
    ),
    (
        "field_removed",
        &[
            (
                "      - {name: byte_offset, type: u64, doc: Offset in bytes from `data` to the first element.}\n",
                "",
            ),
            ("abi: {size: 48, align: 8}", "abi: {size: 40, align: 8}"),
            ("abi: {size: 64, align: 8}", "abi: {size: 56, align: 8}"),
            ("abi: {size: 80, align: 8}", "abi: {size: 72, align: 8}"),
        ],
    ),
    (
        "flag_bit_moved",
        &[(
            "name: DLPACK_FLAG_BITMASK_IS_COPIED\n        bit: 1",
            "name: DLPACK_FLAG_BITMASK_IS_COPIED\n        bit: 3",
        )],
    ),
    (
        "dtype_lanes_changed",
        &[(
            "{name: float16,    code: kDLFloat, bits: 16,",
            "{name: float16,    code: kDLFloat, bits: 16, lanes: 2,",
        )],
    ),
    (
        "dtype_removed",
        &[(
            "  - {name: complex128, code: kDLComplex, bits: 128, numpy: \"<c16\", buffer: Zd, rust: \"num_complex::Complex<f64>\"}\n",
            "",
        )],
    ),
    (
        "stream_rule_changed",
        &[(
            "        - {value: 2, action: PerThreadDefault}\n",
            "        - {value: 2, reason: no per-thread stream}\n",
        )],
    ),
    (
        "exception_remapped",
        &[(
            "{kind: CopyRequired, exception: BufferError,",
            "{kind: CopyRequired, exception: ValueError,",
        )],
    ),
    (
        "capsule_renamed",
        &[("value: dltensor_versioned\n", "value: dltensor_v2\n")],
    ),
    (
        "major_version",
        &[(
            "version: {major: 1, minor: 3}",
            "version: {major: 2, minor: 0}",
        )],
    ),
];

fn edited(case: &str, edits: &[(&str, &str)]) -> String {
    let mut text = std::fs::read_to_string(root().join(V13)).unwrap();
    for (find, replace) in edits {
        assert!(text.contains(find), "{case}: `{find}` not in {V13}");
        text = text.replacen(find, replace, 1);
    }
    text
}

#[test]
fn breaking_edits_are_classified_as_breaks() {
    let old = ir(V13);
    for (case, edits) in BREAKING {
        let text = edited(case, edits);
        let new = Ir::from_yaml(&text, &format!("{case}.yaml"))
            .unwrap_or_else(|e| panic!("{case}: the edited spec is invalid: {e}"));
        let report = compare(&old, &new);
        assert!(report.has_breaks(), "{case}: no break found:\n{report}");
        assert_eq!(report.exit_code(), 1);
        assert!(report.changes.iter().any(|c| c.compat == Compat::Break));
        assert_matches_file(
            &root().join(format!("tests/fixtures/diff/breaking/{case}.expected")),
            &report.to_string(),
        );
    }
}

#[test]
fn a_break_exits_1_through_the_binary() {
    let dir = scratch("diff-break");
    let path = dir.join("renumbered.yaml");
    std::fs::write(&path, edited("cli", BREAKING[0].1)).unwrap();
    let (code, out, err) = dlbind(&["diff", V13, path.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains(
            "BREAK       changed  enum value        DLDeviceType::kDLTrn: renumbered 18 -> 22"
        ),
        "{out}"
    );
    assert!(
        out.ends_with("0 compatible, 1 breaking: ABI break\n"),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A malformed or invalid spec on either side: exit 2, `file:line:col: message`, no panic.
#[test]
fn bad_specs_exit_2_naming_file_and_position() {
    for (case, side) in [
        ("malformed_yaml", 0),
        ("truncated_yaml", 1),
        ("duplicate_enum_value", 1),
        ("duplicate_enum_name", 0),
        ("unknown_key", 1),
        ("upstream_value_declared_twice", 1),
        ("upstream_code_reused", 0),
    ] {
        let bad = format!("tests/fixtures/invalid/{case}.yaml");
        let args = if side == 0 {
            ["diff", bad.as_str(), CURRENT]
        } else {
            ["diff", CURRENT, bad.as_str()]
        };
        let (code, out, err) = dlbind(&args);
        assert_eq!(code, 2, "{case}: {out}{err}");
        assert!(!err.contains("panicked"), "{case}: {err}");
        let expected =
            std::fs::read_to_string(root().join(format!("tests/fixtures/invalid/{case}.expected")))
                .unwrap();
        assert_eq!(err, expected, "{case}");
        let first = err.lines().next().unwrap();
        let mut parts = first.splitn(4, ':');
        assert_eq!(parts.next(), Some(bad.as_str()), "{case}: {first}");
        assert!(
            parts.next().unwrap().parse::<usize>().unwrap() > 0,
            "{first}"
        );
        assert!(
            parts.next().unwrap().parse::<usize>().unwrap() > 0,
            "{first}"
        );
    }
}

#[test]
fn usage_and_missing_files_exit_2() {
    for args in [
        &["diff"][..],
        &["diff", CURRENT][..],
        &["diff", CURRENT, CURRENT, CURRENT][..],
    ] {
        let (code, _, err) = dlbind(args);
        assert_eq!(code, 2, "{args:?}");
        assert!(err.contains("dlbind diff OLD NEW"), "{err}");
    }
    let (code, _, err) = dlbind(&["diff", "no/such/spec.yaml", CURRENT]);
    assert_eq!(code, 2);
    assert!(
        err.contains("no/such/spec.yaml") && !err.contains("panicked"),
        "{err}"
    );
}

/// The report the README and the guide show is the one the binary prints.
#[test]
fn readme_and_guide_show_the_real_report() {
    let (_, out, _) = dlbind(&["diff", V13, CURRENT]);
    let cmd = format!("-- diff {V13} {CURRENT}\n");
    for doc in ["README.md", "docs/guide/following-upstream.md"] {
        let text = std::fs::read_to_string(root().join(doc)).unwrap();
        let start = text
            .find(&cmd)
            .unwrap_or_else(|| panic!("{doc} does not run `dlbind diff {V13} {CURRENT}`"));
        let rest = &text[start + cmd.len()..];
        let rest = rest.strip_prefix("```\n\n```text\n").unwrap_or(rest);
        let shown = &rest[..rest.find("```").unwrap()];
        assert_eq!(
            shown, out,
            "{doc} shows another report than `dlbind diff` prints"
        );
    }
}
