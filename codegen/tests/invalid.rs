//! Invalid specs: every `tests/fixtures/invalid/<case>.yaml` must fail with the
//! diagnostics (message, line and column) stored in `<case>.expected`.

mod common;

use common::{assert_matches_file, root};
use dlbind_codegen::{Error, Ir};

const REQUIRED: &[&str] = &[
    "unknown_type",
    "duplicate_enum_name",
    "duplicate_enum_value",
    "duplicate_field",
    "flag_bit_reused",
    "dtype_bits_fp6",
    "dtype_bits_fp4",
    "stream_rule_unknown_device",
    "malformed_yaml",
    "truncated_yaml",
    "wrong_type_string_for_int",
    "wrong_type_map_for_list",
    "missing_required_key",
    "dtype_bits_out_of_range",
    "enum_value_negative_unsigned",
    "flag_bit_out_of_range",
    "version_major_negative",
    "multiple_documents",
    "dtype_code_out_of_range",
    "type_nested_too_deep",
    "items_conflicting",
    "tables_conflicting",
    "stream_rules_conflicting",
    "stream_pointers_without_carrier",
];

fn cases() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(root().join("tests/fixtures/invalid"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            e.file_name()
                .to_str()?
                .strip_suffix(".yaml")
                .map(str::to_string)
        })
        .collect();
    v.sort();
    v
}

#[test]
fn invalid_specs_fail_with_located_messages() {
    let cases = cases();
    for r in REQUIRED {
        assert!(cases.iter().any(|c| c == r), "missing invalid fixture {r}");
    }
    for case in cases {
        let rel = format!("tests/fixtures/invalid/{case}.yaml");
        let text = std::fs::read_to_string(root().join(&rel)).unwrap();
        let err = match Ir::from_yaml(&text, &rel) {
            Ok(_) => panic!("{rel} was accepted"),
            Err(e) => e,
        };
        let Error::Spec(_) = &err else {
            panic!("{rel}: not a spec error: {err}")
        };
        assert_eq!(err.exit_code(), 2);
        for d in err.diagnostics().unwrap() {
            assert!(d.line > 0 && d.col > 0, "{rel}: no position in {d}");
        }
        assert_matches_file(
            &root().join(format!("tests/fixtures/invalid/{case}.expected")),
            &format!("{err}\n"),
        );
    }
}

/// The position points at the offending token, not just somewhere in the file.
#[test]
fn positions_point_at_the_offending_token() {
    for (case, token) in [
        ("unknown_type", "DLIndex"),
        ("duplicate_enum_name", "kDLCUDA"),
        ("duplicate_enum_value", "2"),
        ("duplicate_field", "code"),
        ("flag_bit_reused", "0"),
        ("dtype_bits_fp6", "8"),
        ("dtype_bits_fp4", "8"),
        ("stream_rule_unknown_device", "kDLAcmee"),
        ("wrong_type_string_for_int", "two"),
        ("wrong_type_map_for_list", "{name: major"),
        ("missing_required_key", "{name: device_id}"),
        ("dtype_bits_out_of_range", "300"),
        ("enum_value_negative_unsigned", "-1"),
        ("flag_bit_out_of_range", "64"),
        ("version_major_negative", "-1"),
        ("multiple_documents", "---"),
        ("dtype_code_out_of_range", "kDLBfloat"),
        ("type_nested_too_deep", "\"*mut *mut"),
    ] {
        let rel = format!("tests/fixtures/invalid/{case}.yaml");
        let text = std::fs::read_to_string(root().join(&rel)).unwrap();
        let err = Ir::from_yaml(&text, &rel).unwrap_err();
        let d = &err.diagnostics().unwrap()[0];
        let line = text.lines().nth(d.line - 1).unwrap();
        let at: String = line.chars().skip(d.col - 1).collect();
        assert!(
            at.starts_with(token),
            "{case}: {d} points at `{at}`, expected `{token}`"
        );
    }
}

#[test]
fn shape_errors_never_panic() {
    for text in [
        "",
        "42",
        "[]",
        "name: x",
        "types: 3",
        "\u{feff}",
        "{{{",
        "name: [\n",
        "- - - -",
    ] {
        let err = Ir::from_yaml(text, "x.yaml").unwrap_err();
        assert_eq!(err.exit_code(), 2, "{text:?}: {err}");
        assert!(err.to_string().starts_with("x.yaml:"), "{err}");
    }
}
