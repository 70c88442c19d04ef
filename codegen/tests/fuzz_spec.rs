//! Bounded fuzzing of the spec front end: the text → [`Ir`] path the CLI runs
//! (`Builder::ir` → `Ir::from_yaml` → `validate::lower`), plus rendering of
//! every mutated spec that validates (`backend::render_all`, as `generate` does).
//!
//! Each input must either be accepted or rejected with a spec error whose every
//! diagnostic renders as `<file>:<line>:<col>: <message>` with `line >= 1`,
//! `col >= 1` and `line` at most the text's line count + 1. A panic, any other
//! error kind, or a diagnostic of another shape fails the test.
//!
//! Targets (one `#[test]` each):
//! - `arbitrary_bytes`: random bytes (lossy UTF-8), or a soup of YAML tokens and spec keys;
//! - `mutated_specs`: 1–4 structured mutations of `spec/dlpack.yaml`,
//!   `tests/fixtures/*/spec.yaml` and `tests/fixtures/invalid/*.yaml` (truncation,
//!   line deletion / duplication / swaps, scalars replaced by values of another type
//!   or out of range, re-indentation, unknown and duplicate keys, colliding enum
//!   values and flag bits, ...).
//!
//! Budget: by default each target runs for about 3 s (at least 200 iterations) with a
//! seed taken from the clock. Environment:
//! - `DLBIND_FUZZ_ITERS=N`: run exactly N iterations per target (long runs);
//! - `DLBIND_FUZZ_SEED=S`: use seed S (decimal or 0x-hex), to reproduce a failure;
//! - `DLBIND_FUZZ_ONLY=I`: with the seed, run only iteration I.
//!
//! Iteration I of a target only depends on (seed, I). On a failure the test prints the
//! target, seed, iteration and input, and writes the input to
//! `$CARGO_TARGET_TMPDIR/fuzz_spec-<target>-<seed>-<iteration>.yaml`.
//!
//! Long run:
//!
//! ```text
//! DLBIND_FUZZ_ITERS=1000000 cargo test --release -p dlbind-codegen --test fuzz_spec -- --nocapture
//! ```

mod common;

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::{Duration, Instant};

use arbitrary::{Result as AResult, Unstructured};
use common::root;
use dlbind_codegen::{Error, Ir};

const DEFAULT_BUDGET: Duration = Duration::from_secs(3);
const MIN_ITERS: u64 = 200;
const FILE: &str = "fuzz/spec.yaml";

/// splitmix64: a tiny, good-enough PRNG that feeds `Unstructured`.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(n + 8);
        while v.len() < n {
            v.extend_from_slice(&self.next().to_le_bytes());
        }
        v.truncate(n);
        v
    }
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    if v == "random" {
        return None; // DLBIND_FUZZ_SEED=random: the caller seeds from the clock
    }
    let v = v.trim();
    let parsed = match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse(),
    };
    Some(parsed.unwrap_or_else(|_| panic!("{name}={v} is not an integer")))
}

/// The PRNG bytes of iteration `i` (independent of every other iteration).
fn iteration_bytes(seed: u64, i: u64, n: usize) -> Vec<u8> {
    let mut r = SplitMix64(seed ^ i.wrapping_mul(0xd134_2543_de82_ef95));
    r.next();
    r.bytes(n)
}

/// Run `make` (input from random bytes) + `check` until the budget is spent.
fn fuzz(target: &str, make: impl Fn(&mut Unstructured) -> AResult<String>, render: bool) {
    let seed = env_u64("DLBIND_FUZZ_SEED").unwrap_or_else(|| {
        // Default: a fixed seed, so the test command is deterministic; `DLBIND_FUZZ_SEED=random`
        // explores new inputs (the seed is printed either way).
        if std::env::var("DLBIND_FUZZ_SEED").as_deref() != Ok("random") {
            return 0x00d1_b1d0_f022_5eed;
        }
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        SplitMix64(t.as_nanos() as u64 ^ u64::from(std::process::id())).next()
    });
    let iters = env_u64("DLBIND_FUZZ_ITERS");
    let only = env_u64("DLBIND_FUZZ_ONLY");
    let start = Instant::now();
    let (mut i, mut accepted) = (0u64, 0u64);
    loop {
        let done = match (only, iters) {
            (Some(o), _) => i > o,
            (None, Some(n)) => i >= n,
            (None, None) => i >= MIN_ITERS && start.elapsed() >= DEFAULT_BUDGET,
        };
        if done {
            break;
        }
        if only.is_some_and(|o| o != i) {
            i += 1;
            continue;
        }
        let raw = iteration_bytes(seed, i, 4096);
        let text = match catch_unwind(AssertUnwindSafe(|| make(&mut Unstructured::new(&raw)))) {
            Ok(text) => text.unwrap_or_default(),
            Err(_) => fail(
                target,
                seed,
                i,
                "",
                "the input generator (this harness) panicked",
            ),
        };
        match run_one(&text, render) {
            Ok(ok) => accepted += u64::from(ok),
            Err(problem) => fail(target, seed, i, &text, &problem),
        }
        i += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "fuzz_spec {target}: seed {seed:#x}, {i} iterations ({accepted} accepted) in {secs:.2} s, {:.0} iterations/s",
        i as f64 / secs.max(1e-9)
    );
}

fn fail(target: &str, seed: u64, i: u64, text: &str, problem: &str) -> ! {
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("fuzz_spec-{target}-{seed:#x}-{i}.yaml"));
    let saved = match std::fs::write(&path, text) {
        Ok(()) => format!("input written to {}", path.display()),
        Err(e) => format!("could not write {}: {e}", path.display()),
    };
    panic!(
        "fuzz_spec {target}: failure at seed {seed:#x}, iteration {i}\n\
         reproduce: DLBIND_FUZZ_SEED={seed:#x} DLBIND_FUZZ_ONLY={i} cargo test -p dlbind-codegen --test fuzz_spec {target}\n\
         {saved}\n{problem}\n--- input ({} bytes) ---\n{text}\n--- end of input ---",
        text.len()
    );
}

/// Validate (and, when accepted and `render`, render) one text; Ok(accepted) or the problem.
fn run_one(text: &str, render: bool) -> Result<bool, String> {
    let result = catch_unwind(AssertUnwindSafe(|| {
        let ir = Ir::from_yaml(text, FILE)?;
        if render {
            dlbind_codegen::backend::render_all(&ir, FILE)?;
        }
        Ok::<(), Error>(())
    }));
    match result {
        Err(payload) => {
            let msg = payload
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| payload.downcast_ref::<&str>().copied())
                .unwrap_or("<non-string panic payload>");
            Err(format!("panicked: {msg}"))
        }
        Ok(Ok(())) => Ok(true),
        Ok(Err(e)) => check_error(&e, text).map(|()| false),
    }
}

/// Line breaks as YAML counts them (LF, CRLF, lone CR, NEL, LS, PS).
fn yaml_line_count(text: &str) -> usize {
    let mut n = 1;
    let mut prev_cr = false;
    for c in text.chars() {
        match c {
            '\n' if prev_cr => {}
            '\n' | '\r' | '\u{85}' | '\u{2028}' | '\u{2029}' => n += 1,
            _ => {}
        }
        prev_cr = c == '\r';
    }
    n
}

/// Must be a spec error (exit status 2) whose diagnostics all have the CLI's shape.
fn check_error(e: &Error, text: &str) -> Result<(), String> {
    let Some(diags) = e.diagnostics() else {
        return Err(format!("not a spec error: {e}"));
    };
    if e.exit_code() != 2 {
        return Err(format!("exit code {} for a spec error: {e}", e.exit_code()));
    }
    if diags.is_empty() {
        return Err("spec error without diagnostics".into());
    }
    let max_line = yaml_line_count(text) + 1;
    for d in diags {
        let shown = d.to_string();
        if d.file != FILE || d.line < 1 || d.col < 1 || d.line > max_line {
            return Err(format!(
                "bad position {}:{} (text has {} lines): {shown}",
                d.line,
                d.col,
                max_line - 1
            ));
        }
        let prefix = format!("{FILE}:{}:{}: ", d.line, d.col);
        let message = shown.strip_prefix(&prefix).unwrap_or("");
        if message.trim().is_empty()
            || message.contains(['\n', '\r', '\u{85}', '\u{2028}', '\u{2029}'])
        {
            return Err(format!(
                "diagnostic not of the form `file:line:col: message`: {shown:?}"
            ));
        }
    }
    // what the CLI prints: one located diagnostic per line
    for line in e.to_string().lines() {
        let mut parts = line.splitn(4, ':');
        let ok = parts.next() == Some(FILE)
            && parts
                .next()
                .and_then(|l| l.parse::<usize>().ok())
                .is_some_and(|l| l >= 1)
            && parts
                .next()
                .and_then(|c| c.parse::<usize>().ok())
                .is_some_and(|c| c >= 1)
            && parts
                .next()
                .is_some_and(|m| m.starts_with(' ') && m.len() > 1);
        if !ok {
            return Err(format!(
                "rendered diagnostic line of the wrong shape: {line:?}"
            ));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// inputs

/// How many specs at the start of [`corpus`] are valid.
const VALID_SEEDS: usize = 4;

/// The seed corpus: the real spec, the golden fixture specs, the invalid fixtures.
fn corpus() -> Vec<String> {
    let root = root();
    let read = |p: &std::path::Path| {
        std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    };
    let mut v = vec![read(&root.join("spec/dlpack.yaml"))];
    v.extend(
        common::fixture_cases()
            .iter()
            .map(|c| read(&root.join(format!("tests/fixtures/{c}/spec.yaml")))),
    );
    let mut invalid: Vec<_> = std::fs::read_dir(root.join("tests/fixtures/invalid"))
        .expect("tests/fixtures/invalid")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    invalid.sort();
    assert_eq!(
        v.len(),
        VALID_SEEDS,
        "valid seeds: spec/dlpack.yaml and the golden fixtures"
    );
    v.extend(invalid.iter().map(|p| read(p)));
    assert!(v.len() > VALID_SEEDS, "no invalid fixtures");
    v
}

#[rustfmt::skip]
const KEYS: &[&str] = &[
    "name", "version", "major", "minor", "doc", "c_header", "guard", "version_macros",
    "capsules", "value", "exchange_api", "attribute", "legacy_attributes", "protocol", "dlpack",
    "dlpack_device", "from_dlpack", "const", "returns", "kwargs", "py_type", "types", "struct",
    "enum", "fn", "flags", "c_suffix", "c_tag", "derive", "abi", "size", "align", "fields",
    "type", "repr", "cpp_underlying", "values", "params", "bit", "bits", "lanes",
    "dtype_code_enum", "dtypes", "code", "numpy", "buffer", "rust", "streams", "device_enum",
    "actions", "carries_value", "below_min", "min", "reason", "stream_less", "none",
    "unlisted_reason", "rules", "device", "consumer_default", "pointers_above", "action",
    "exceptions", "failures", "kind", "exception", "description", "bogus", "Name", "types ",
    "<<",
];

/// Replacement scalars: other types, out of range, YAML oddities, type expressions.
#[rustfmt::skip]
const SCALARS: &[&str] = &[
    "-1", "-2", "-129", "-2147483649", "-9223372036854775808", "-9223372036854775809", "0", "1",
    "2", "4", "6", "7", "8", "15", "16", "31", "32", "63", "64", "65", "127", "128", "255",
    "256", "300", "65535", "65536", "2147483647", "2147483648", "4294967295", "4294967296",
    "9223372036854775807", "9223372036854775808", "18446744073709551615",
    "18446744073709551616", "99999999999999999999", "0x10", "0o17", "0b101", "1_000", "+5",
    "1.5", "-0.0", "1e308", "1e400", ".nan", ".inf", "-.inf", "null", "~", "", "true", "false",
    "yes", "\"str\"", "'str'", "\"\"", "[]", "{}", "[1, 2]", "{a: 1}", "[[[]]]", "\"\\0\"",
    "\"\\u0000x\"", "\"a\\nb\"", "*mut", "*const *mut c_void", "fn(", "fn()", "fn(a: u8) -> u8",
    "fn(fn(fn(u8)))", "*mut *mut *mut *mut DLTensor", "c_void", "u8 u8", "i64", "u64", "c_char",
    "DLTensor", "DLDevice", "DLDeviceType", "DLPackFlags", "kDLCPU", "kDLCUDA", "kDLInt",
    "None", "Pointer", "BufferError", "!!binary aGk=", "!!str 5", "!!int x", "!!float 1",
    "&a 1", "*a", "|\n  block", ">-", "@", "`", "%", "? x", "é", "\u{feff}", "\t", "名前",
];

#[rustfmt::skip]
const TOKENS: &[&str] = &[
    "\n", "\n", "\n", " ", " ", "  ", "    ", "- ", ": ", ":", ",", "{", "}", "[", "]", "\"",
    "'", "#", "&a ", "*a", "!!str ", "!!map", "---\n", "...\n", "? ", "|", ">", "\t", "\r",
    "\r\n", "%YAML 1.2\n", "<<: ", "\\", "\u{feff}", "\0", "é",
];

fn arbitrary_text(u: &mut Unstructured) -> AResult<String> {
    if u.ratio(1, 2)? {
        let n = u.int_in_range(0..=2048usize)?;
        let bytes = u.bytes(n.min(u.len()))?;
        return Ok(String::from_utf8_lossy(bytes).into_owned());
    }
    let mut s = String::new();
    for _ in 0..u.int_in_range(0..=200usize)? {
        match u.int_in_range(0..=3u8)? {
            0 => s.push_str(u.choose(KEYS)?),
            1 => s.push_str(u.choose(SCALARS)?),
            _ => s.push_str(u.choose(TOKENS)?),
        }
    }
    Ok(s)
}

/// A byte range of a text.
type Span = (usize, usize);

/// Byte spans of values (after `key: ` or `- `) and of keys, found line by line.
fn spans(text: &str) -> (Vec<Span>, Vec<Span>) {
    let (mut values, mut keys) = (Vec::new(), Vec::new());
    let mut off = 0;
    for line in text.split_inclusive('\n') {
        let b = line.as_bytes();
        let end_of_line = line.trim_end_matches(['\n', '\r']).len();
        let mut i = 0;
        while i < end_of_line {
            let after_colon = b[i] == b':' && (i + 1 >= end_of_line || b[i + 1] == b' ');
            let dash = b[i] == b'-'
                && i + 1 < end_of_line
                && b[i + 1] == b' '
                && line[..i].trim_start().is_empty();
            if after_colon {
                // the key: identifier characters before the colon
                let k = line[..i]
                    .char_indices()
                    .rev()
                    .find(|&(_, c)| !(c.is_ascii_alphanumeric() || c == '_'))
                    .map_or(0, |(p, c)| p + c.len_utf8());
                if k < i {
                    keys.push((off + k, off + i));
                }
            }
            if after_colon || dash {
                let mut s = i + 1;
                while s < end_of_line && b[s] == b' ' {
                    s += 1;
                }
                let mut e = s;
                let quoted = s < end_of_line && (b[s] == b'"' || b[s] == b'\'');
                if quoted {
                    e = line[s + 1..end_of_line]
                        .find(b[s] as char)
                        .map_or(end_of_line, |p| s + p + 2);
                } else {
                    while e < end_of_line && !matches!(b[e], b',' | b'}' | b']' | b'#') {
                        if b[e] == b':' && (e + 1 >= end_of_line || b[e + 1] == b' ') {
                            break;
                        }
                        e += 1;
                    }
                }
                if e > s && !matches!(b[s], b'{' | b'[') {
                    values.push((off + s, off + e));
                }
                i = s.max(i + 1);
                continue;
            }
            i += 1;
        }
        off += line.len();
    }
    (values, keys)
}

fn lines_of(text: &str) -> Vec<String> {
    text.split_inclusive('\n').map(str::to_string).collect()
}

fn floor_char(s: &str, mut i: usize) -> usize {
    i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// One structured mutation of `text`.
fn mutate(u: &mut Unstructured, text: &str, corpus: &[String]) -> AResult<String> {
    let mut lines = lines_of(text);
    let n = lines.len();
    let line_ix =
        |u: &mut Unstructured| -> AResult<usize> { u.int_in_range(0..=n.saturating_sub(1)) };
    let (values, keys) = spans(text);
    let replace =
        |span: (usize, usize), with: &str| format!("{}{with}{}", &text[..span.0], &text[span.1..]);
    Ok(match u.int_in_range(0..=15u8)? {
        // truncate at a random byte (possibly inside a UTF-8 sequence)
        0 => {
            let at = u.int_in_range(0..=text.len())?;
            String::from_utf8_lossy(&text.as_bytes()[..at]).into_owned()
        }
        // delete, duplicate, swap, move lines
        1 if n > 0 => {
            let i = line_ix(u)?;
            let k = u.int_in_range(1..=3usize)?.min(n - i);
            lines.drain(i..i + k);
            lines.concat()
        }
        2 if n > 0 => {
            let i = line_ix(u)?;
            let l = lines[i].clone();
            lines.insert(i, l);
            lines.concat()
        }
        3 if n > 0 => {
            let (i, j) = (line_ix(u)?, line_ix(u)?);
            lines.swap(i, j);
            lines.concat()
        }
        4 if n > 0 => {
            let i = line_ix(u)?;
            let l = lines.remove(i);
            let j = u.int_in_range(0..=lines.len())?;
            lines.insert(j, l);
            lines.concat()
        }
        // a scalar replaced by a value of another type / out of range
        5..=7 if !values.is_empty() => {
            let span = *u.choose(&values)?;
            replace(span, u.choose(SCALARS)?)
        }
        // a scalar replaced by another scalar of the file (collisions: same enum value,
        // same flag bit, same name, same device ...)
        8 if !values.is_empty() => {
            let span = *u.choose(&values)?;
            let from = *u.choose(&values)?;
            replace(span, &text[from.0..from.1])
        }
        // a small integer (enum values and flag bits collide, or leave the range)
        9 if !values.is_empty() => {
            let span = *u.choose(&values)?;
            let v = u.int_in_range(-3..=70i64)?;
            replace(span, &v.to_string())
        }
        // a key renamed (unknown key, duplicate key, missing key)
        10 if !keys.is_empty() => {
            let span = *u.choose(&keys)?;
            let with = if u.ratio(1, 2)? {
                u.choose(KEYS)?.to_string()
            } else {
                let from = *u.choose(&keys)?;
                text[from.0..from.1].to_string()
            };
            replace(span, &with)
        }
        // re-indent a line
        11 if n > 0 => {
            let i = line_ix(u)?;
            let l = &lines[i];
            let body = l.trim_start_matches([' ', '\t']);
            let indent = l.len() - body.len();
            let new_indent = match u.int_in_range(0..=4u8)? {
                0 => indent.saturating_sub(1),
                1 => indent.saturating_sub(2),
                2 => indent + 1,
                3 => indent + 2,
                _ => 0,
            };
            let tab = if u.ratio(1, 10)? { "\t" } else { "" };
            lines[i] = format!("{tab}{}{body}", " ".repeat(new_indent));
            lines.concat()
        }
        // an extra key next to a line (unknown key, or a duplicate of a known one)
        12 if n > 0 => {
            let i = line_ix(u)?;
            let l = &lines[i];
            let indent = l.len() - l.trim_start_matches(' ').len();
            let indent = if l.trim_start().starts_with("- ") {
                indent + 2
            } else {
                indent
            };
            let key = u.choose(KEYS)?;
            let value = u.choose(SCALARS)?;
            lines.insert(i + 1, format!("{}{key}: {value}\n", " ".repeat(indent)));
            lines.concat()
        }
        // a key added inside a flow mapping `{...}`
        13 => {
            let opens: Vec<usize> = text.match_indices('{').map(|(i, _)| i).collect();
            if opens.is_empty() {
                text.to_string()
            } else {
                let at = *u.choose(&opens)? + 1;
                let key = if u.ratio(1, 2)? && !keys.is_empty() {
                    let k = *u.choose(&keys)?;
                    text[k.0..k.1].to_string()
                } else {
                    u.choose(KEYS)?.to_string()
                };
                format!(
                    "{}{key}: {}, {}",
                    &text[..at],
                    u.choose(SCALARS)?,
                    &text[at..]
                )
            }
        }
        // a YAML token or random bytes at a random place
        14 => {
            let at = floor_char(text, u.int_in_range(0..=text.len())?);
            let ins = if u.ratio(1, 3)? {
                let k = u.int_in_range(1..=8usize)?;
                String::from_utf8_lossy(u.bytes(k.min(u.len()))?).into_owned()
            } else {
                u.choose(TOKENS)?.to_string()
            };
            format!("{}{ins}{}", &text[..at], &text[at..])
        }
        // splice: a line range from another corpus file
        _ => {
            let other = lines_of(u.choose(corpus)?);
            if other.is_empty() || n == 0 {
                return Ok(text.to_string());
            }
            let a = u.int_in_range(0..=other.len() - 1)?;
            let b = (a + u.int_in_range(1..=12usize)?).min(other.len());
            let at = u.int_in_range(0..=n)?;
            let drop = u.int_in_range(0..=3usize)?.min(n - at);
            lines.splice(at..at + drop, other[a..b].iter().cloned());
            lines.concat()
        }
    })
}

fn mutated_text(u: &mut Unstructured, corpus: &[String]) -> AResult<String> {
    // mostly the valid specs (corpus[..VALID_SEEDS]), so that mutations reach validation
    let pool = if u.ratio(3, 4)? {
        &corpus[..VALID_SEEDS]
    } else {
        corpus
    };
    let mut text = u.choose(pool)?.clone();
    for _ in 0..u.int_in_range(1..=4u8)? {
        text = mutate(u, &text, corpus)?;
    }
    Ok(text)
}

// ---------------------------------------------------------------------------
// targets

#[test]
fn arbitrary_bytes() {
    fuzz("arbitrary_bytes", arbitrary_text, true);
}

#[test]
fn mutated_specs() {
    let corpus = corpus();
    fuzz("mutated_specs", |u| mutated_text(u, &corpus), true);
}

/// The harness itself: the corpus validates (or fails cleanly), mutations do change it,
/// and the span finder sees the values that matter.
#[test]
fn harness_sanity() {
    let corpus = corpus();
    let spec = &corpus[0];
    assert!(Ir::from_yaml(spec, FILE).is_ok());
    for (i, text) in corpus.iter().enumerate() {
        let accepted = run_one(text, false).unwrap_or_else(|p| panic!("{p}"));
        assert_eq!(
            accepted,
            i < VALID_SEEDS,
            "corpus[{i}] accepted: {accepted}"
        );
    }
    let (values, keys) = spans(spec);
    let vals: Vec<&str> = values.iter().map(|&(a, b)| &spec[a..b]).collect();
    let ks: Vec<&str> = keys.iter().map(|&(a, b)| &spec[a..b]).collect();
    for v in ["1", "3", "DLPack", "kDLCPU", "u64", "\"*mut c_void\"", "-1"] {
        assert!(vals.contains(&v), "span finder misses value {v}");
    }
    for k in ["major", "bit", "value", "bits", "repr", "pointers_above"] {
        assert!(ks.contains(&k), "span finder misses key {k}");
    }
    let mut changed = 0;
    for i in 0..200 {
        let raw = iteration_bytes(1, i, 4096);
        let mut u = Unstructured::new(&raw);
        let t = mutated_text(&mut u, &corpus).unwrap();
        changed += usize::from(!corpus.contains(&t));
    }
    assert!(
        changed > 150,
        "only {changed}/200 mutations changed the input"
    );
    assert_eq!(yaml_line_count("a\r\nb\rc\nd"), 4);
}

/// Inputs the fuzzer (or a review prompted by it) found, minimised.
#[test]
fn regressions() {
    let fixture = |case: &str| {
        let text =
            std::fs::read_to_string(root().join(format!("tests/fixtures/invalid/{case}.yaml")))
                .unwrap();
        let expected =
            std::fs::read_to_string(root().join(format!("tests/fixtures/invalid/{case}.expected")))
                .unwrap()
                .replace(&format!("tests/fixtures/invalid/{case}.yaml"), FILE)
                .replace("\r\n", "\n");
        (text, expected)
    };
    let render = |text: &str| match run_one(text, true) {
        Ok(true) => panic!("accepted:\n{text}"),
        Ok(false) => format!("{}\n", Ir::from_yaml(text, FILE).unwrap_err()),
        Err(problem) => panic!("{problem}"),
    };

    // a line break inside a quoted key or value is escaped: one diagnostic per line
    let err = render("name: x\n\"a\\nb\": 1\n");
    assert!(err.contains("unknown field `a\\nb`"), "{err}");
    let (text, _) = fixture("stream_rule_unknown_device");
    let err = render(&text.replace("device: kDLAcmee", "device: \"kDLAc\\r\\nmee\""));
    assert!(err.contains("unknown device `kDLAc\\r\\nmee`"), "{err}");

    // texts libyaml accepts but saphyr (positions) rejects keep their positions:
    // a flow mapping continued on a less indented line (lone CR) ...
    let (text, expected) = fixture("abi_mismatch");
    let cr = text.replace("{kind: InvalidStream,", "{kind: \rInvalidStream,");
    assert_ne!(cr, text);
    assert_eq!(render(&cr), expected);
    // ... and a byte order mark inside the document
    let (text, expected) = fixture("struct_used_before_definition");
    let bom = text.replacen("embeds a", "embeds a\u{feff}", 1);
    assert_ne!(bom, text);
    assert_eq!(render(&bom), expected);

    // a second document is located at its `---` (serde_yaml gives no location)
    let (text, _) = fixture("abi_mismatch");
    let two = format!("{text}---\nname: again\n");
    let err = render(&two);
    let line = two.lines().count() - 1;
    assert!(err.starts_with(&format!("{FILE}:{line}:1: ")), "{err}");

    // a truncated file is located at the end of its last line, not on a line past it
    let cut = "name: x\nversion: {major: 1";
    assert_eq!(
        render(cut),
        format!(
            "{FILE}:2:19: malformed spec: did not find expected ',' or '}}' (while parsing a flow mapping that starts at line 2 column 10)\n"
        )
    );

    // deeply nested type expressions: an error, not a stack overflow
    let spec = std::fs::read_to_string(root().join("spec/dlpack.yaml")).unwrap();
    for deep in [
        format!("{}i64", "*mut ".repeat(100_000)),
        format!("{}{}", "fn(".repeat(100_000), ")".repeat(100_000)),
    ] {
        let text = spec.replacen("type: \"*mut i64\"", &format!("type: \"{deep}\""), 1);
        assert_ne!(text, spec);
        assert!(render(&text).contains("nested more than 32 levels deep"));
    }

    // structs embedding structs grow exponentially: an error, not an overflow
    let mut nested =
        String::from("  - struct: S0\n    fields:\n      - {name: a, type: \"*mut u8\"}\n");
    for i in 1..70 {
        nested += &format!(
            "  - struct: S{i}\n    fields:\n      - {{name: a, type: S{p}}}\n      - {{name: b, type: S{p}}}\n",
            p = i - 1
        );
    }
    let text = spec.replacen(
        "  - struct: DLDataType\n",
        &format!("{nested}  - struct: DLDataType\n"),
        1,
    );
    let err = render(&text);
    assert!(err.contains("struct `S28` is too large"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}
