//! The runtime's shape, checked on its source: a small public face, leaves that do not reach
//! up into the pipelines, and CPython internals in one place. A refactor that breaks one of these
//! rules fails here (see the crate docs' "How the crate reads").

use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `dir`, with its text.
fn files(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&p).unwrap();
                out.push((p, text));
            }
        }
    }
    assert!(!out.is_empty(), "no sources under {}", dir.display());
    out
}

/// Code lines only (comments and doc comments dropped).
fn code(text: &str) -> impl Iterator<Item = &str> {
    text.lines().filter(|l| !l.trim_start().starts_with("//"))
}

#[test]
fn at_most_eight_public_modules_and_one_hidden() {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let public: Vec<&str> = code(&lib)
        .filter(|l| l.starts_with("pub mod "))
        .map(|l| l.trim_start_matches("pub mod ").trim_end_matches(';'))
        .collect();
    assert!(public.len() <= 8, "{public:?}");
    for m in ["prelude", "spec", "tuning", "stats"] {
        assert!(public.contains(&m), "{m} is public: {public:?}");
    }
    assert!(lib.contains("#[doc(hidden)]\n#[path = \"private.rs\"]\npub mod __private;"));
}

/// Issue 33: `tuning` offers at most three knobs a user would set (each with a fast default);
/// the derive's machinery lives in `__private`, the `UncheckedExtent` promise at the root.
#[test]
fn tuning_has_at_most_three_knobs() {
    let text = std::fs::read_to_string(src().join("tuning.rs")).unwrap();
    let code: String = code(&text).collect::<Vec<_>>().join("\n");
    let mut names = Vec::new();
    for item in code.split(';') {
        let item = item.trim();
        if let Some(path) = item.strip_prefix("pub use ") {
            let list = path.rsplit("::").next().unwrap();
            names.extend(
                list.trim_matches(|c| c == '{' || c == '}')
                    .split(',')
                    .map(|n| n.split(" as ").last().unwrap().trim().to_string())
                    .filter(|n| !n.is_empty()),
            );
        } else {
            assert!(
                !item.starts_with("pub "),
                "tuning defines only re-exports: `{item}`"
            );
        }
    }
    assert!(names.len() <= 3, "tuning's public items: {names:?}");
    assert_eq!(
        names,
        ["set_pool_limit", "enable_freelist", "set_same_type_views"]
    );
}

#[test]
fn leaves_do_not_reach_into_the_pipelines() {
    // bridges, exchange and gpu may use the model (the traits, `ImportedTensor`, the managed
    // tensor builder) but not the entry points that call them.
    let upward = [
        "crate::import::order",
        "crate::import::typed",
        "crate::import::producer_call",
        "crate::import::from_dlpack",
        "crate::export::method",
        "crate::tuning",
        "crate::stats",
        "crate::__private",
    ];
    for leaf in ["bridges", "exchange", "gpu"] {
        for (path, text) in files(&src().join(leaf)) {
            for line in code(&text) {
                for u in upward {
                    assert!(
                        !line.contains(u),
                        "{}: `{}` reaches up ({u})",
                        path.display(),
                        line.trim()
                    );
                }
            }
        }
    }
}

#[test]
fn cpython_internals_live_in_one_module() {
    for (path, text) in files(&src()) {
        if path.starts_with(src().join("cpython")) {
            continue;
        }
        for line in code(&text) {
            // Declarations of CPython symbols, interned-name tables and GIL-state probes; using
            // what `cpython` declares (`crate::cpython::_PyType_Lookup`) is fine.
            for needle in [
                "extern \"C\" {",
                "fn _Py",
                "static NAMES",
                "PyOnceLock<Names>",
                "PyGILState_Check",
                "intern!(",
                "PyString::intern(",
            ] {
                assert!(
                    !line.contains(needle),
                    "{}: `{}`: CPython internals belong in src/cpython/",
                    path.display(),
                    line.trim()
                );
            }
        }
    }
    assert!(
        !src().join("python").exists(),
        "src/python/ is gone: its parts live in export/, import/ and cpython/"
    );
}

/// Issue 32: every read of an interpreter struct layout, every private symbol and every
/// identity cache lives in `src/cpython/` (and numpy's array header in
/// `src/bridges/numpy_header.rs`). Elsewhere no type-object field (`tp_…`; the `Py_tp_…` slot
/// ids of the limited API's `PyType_Spec` are fine), no private `_Py…` symbol, no
/// `PyTuple_GET_…` macro, no object-header field and no `offset_of!`.
#[test]
fn interpreter_layouts_and_private_symbols_live_in_cpython() {
    let numpy = src().join("bridges").join("numpy_header.rs");
    let mut found = Vec::new();
    for (path, text) in files(&src()) {
        // (The generated ABI types assert DLPack's own struct offsets, not an interpreter's.)
        if path.starts_with(src().join("cpython"))
            || path.starts_with(src().join("generated"))
            || path == numpy
        {
            continue;
        }
        for line in code(&text) {
            let bare_tp = line
                .match_indices("tp_")
                .any(|(i, _)| !line[..i].ends_with("Py_"));
            let needles = [
                "_Py",
                "PyTuple_GET_",
                "offset_of!",
                "ob_refcnt",
                ".ob_type",
                "PyVectorcall_NARGS",
            ];
            if bare_tp || needles.iter().any(|n| line.contains(n)) {
                found.push(format!("{}: `{}`", path.display(), line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "interpreter internals outside src/cpython/:\n{}",
        found.join("\n")
    );
}

/// The checker above finds what it looks for (a test that can fail).
#[test]
fn the_internals_checker_would_see_a_field_read() {
    for (line, bad) in [
        ("let f = (*tp).tp_flags;", true),
        ("slot: ffi::Py_tp_dealloc,", false),
        ("let x = ffi::_PyType_Lookup(tp, n);", true),
        ("let n = ffi::PyTuple_GET_SIZE(t);", true),
        ("let n = crate::cpython::api::tuple_size(t);", false),
    ] {
        let bare_tp = line
            .match_indices("tp_")
            .any(|(i, _)| !line[..i].ends_with("Py_"));
        let hit = bare_tp || ["_Py", "PyTuple_GET_"].iter().any(|n| line.contains(n));
        assert_eq!(hit, bad, "{line}");
    }
}

#[test]
fn the_c_strides_rule_is_written_once() {
    // The C-contiguous stride loop (`acc` times each dimension) exists only in `layout.rs`.
    for (path, text) in files(&src()) {
        if path.ends_with("layout.rs") {
            continue;
        }
        let t: String = code(&text).collect::<Vec<_>>().join("\n");
        assert!(
            !(t.contains("acc.saturating_mul(")
                || t.contains("acc.wrapping_mul(")
                || t.contains("acc = acc.checked_mul(")),
            "{}: a copy of the C-strides rule (use crate::layout::c_strides_into)",
            path.display()
        );
    }
}

/// Issue 42: how long a source file may be before its first `#[cfg(test)]` line (the tests at
/// its end aside).
const MAX_LINES: usize = 800;

/// The lines of `text` before its first `#[cfg(test)]` line (all of them when it has none).
fn lines_before_tests(text: &str) -> usize {
    text.lines()
        .take_while(|l| !l.trim_start().starts_with("#[cfg(test)]"))
        .count()
}

/// Test-only files: those that say `#![cfg(test)]`, and those of modules declared under
/// `#[cfg(test)]` (`#[cfg(test)] mod tests;`, a `#[path]` honoured).
fn test_only_files(all: &[(PathBuf, String)]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for (path, text) in all {
        if text.lines().any(|l| l.trim() == "#![cfg(test)]") {
            out.push(path.clone());
        }
        let dir = path.parent().unwrap();
        // A `foo.rs`'s submodules live in `foo/`; a `mod.rs`'s or `lib.rs`'s beside it.
        let stem = path.file_stem().unwrap();
        let sub = if stem == "mod" || stem == "lib" {
            dir.to_path_buf()
        } else {
            dir.join(stem)
        };
        let (mut under_test, mut path_attr) = (false, None);
        for line in text.lines().map(str::trim) {
            if line == "#[cfg(test)]" {
                (under_test, path_attr) = (true, None);
                continue;
            }
            if !under_test {
                continue;
            }
            if let Some(p) = line
                .strip_prefix("#[path = \"")
                .and_then(|r| r.strip_suffix("\"]"))
            {
                path_attr = Some(dir.join(p));
                continue;
            }
            if line.starts_with("#[") || line.starts_with("//") {
                continue;
            }
            let decl = line
                .split_once("mod ")
                .filter(|(vis, _)| vis.is_empty() || vis.starts_with("pub"))
                .and_then(|(_, rest)| rest.strip_suffix(';'));
            if let Some(name) = decl {
                match path_attr.take() {
                    Some(p) => out.push(p),
                    None => {
                        out.push(sub.join(format!("{name}.rs")));
                        out.push(sub.join(name).join("mod.rs"));
                    }
                }
            }
            under_test = false;
        }
    }
    out
}

/// Issue 42: no file under `src/` has more than 800 lines before its first `#[cfg(test)]` line
/// (a module that grows past that splits along its seams into a folder of smaller ones). Test
/// files (`*tests.rs`) and test-only modules are exempt.
#[test]
fn no_source_file_over_800_lines() {
    let all = files(&src());
    let test_only = test_only_files(&all);
    let mut over = Vec::new();
    for (path, text) in &all {
        let rel = path.strip_prefix(src()).unwrap();
        if path.to_string_lossy().ends_with("tests.rs") || test_only.contains(path) {
            continue;
        }
        let n = lines_before_tests(text);
        if n > MAX_LINES {
            over.push(format!("src/{}: {n} lines", rel.display()));
        }
    }
    over.sort();
    assert!(
        over.is_empty(),
        "files over {MAX_LINES} lines before their first #[cfg(test)] (issue 42: split them into \
         a folder of modules):\n{}",
        over.join("\n")
    );
}

/// The length check above counts up to the tests and finds test-only modules (a test that can
/// fail).
#[test]
fn the_length_checker_stops_at_the_tests() {
    assert_eq!(lines_before_tests("a\nb\n#[cfg(test)]\nmod tests {}\n"), 2);
    assert_eq!(lines_before_tests("a\nb\nc\n"), 3);
    assert_eq!(lines_before_tests("a\n    #[cfg(test)]\n"), 1);
    let dir = Path::new("/s");
    let all = vec![
        (
            dir.join("lib.rs"),
            "mod a;\n#[cfg(test)]\nmod checks;\n#[cfg(test)]\n#[path = \"x/y.rs\"]\nmod y;\n"
                .to_string(),
        ),
        (
            dir.join("a.rs"),
            "#[cfg(test)]\npub(crate) mod more;\n".to_string(),
        ),
        (dir.join("b.rs"), "#![cfg(test)]\n".to_string()),
    ];
    let found = test_only_files(&all);
    for want in ["checks.rs", "checks/mod.rs", "x/y.rs", "a/more.rs", "b.rs"] {
        assert!(found.contains(&dir.join(want)), "{want}: {found:?}");
    }
    assert!(!found.contains(&dir.join("a.rs")), "{found:?}");
}
