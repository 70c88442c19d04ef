//! `dlbind`: generate or check DLPack bindings from a spec.
//!
//! ```text
//! dlbind generate [--spec P] [--out D] [--project F] [--verbose]
//! dlbind check    [--spec P] [--out D] [--project F]
//! dlbind diff OLD NEW
//! ```
//! Exit status: 0 ok, 1 stale files / I/O errors / an ABI break found by `diff`, 2 invalid spec
//! or usage.

use std::process::ExitCode;
use std::time::Instant;

use dlbind_codegen::{Builder, Error};

/// `println!` that ends the process quietly when stdout is closed (`dlbind generate | head -1`)
/// instead of panicking on the broken pipe.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        if writeln!(out, $($arg)*).is_err() {
            std::process::exit(0);
        }
    }};
}

/// The spec file used when `--spec` is not given and it exists: the path the embedded spec was
/// read from, relative to the current directory.
const DEFAULT_SPEC: &str = dlbind_codegen::ir::EMBEDDED_SPEC_PATH;
const DEFAULT_OUT: &str = "generated";
/// The project file listing the copies the crates ship (see `dlbind_codegen::project`).
const DEFAULT_PROJECT: &str = dlbind_codegen::project::DEFAULT_PROJECT_FILE;

const USAGE: &str = "usage:
  dlbind generate [--spec PATH] [--out DIR] [--project FILE] [--verbose]   write generated files
  dlbind check    [--spec PATH] [--out DIR] [--project FILE]               exit 1 with a diff if stale
  dlbind diff OLD NEW                                                      what changed between two specs;
                                                                           exit 1 if anything breaks the ABI

defaults: --spec spec/dlpack.yaml if it exists (else the spec embedded in dlbind), --out generated;
--project dlbind.yaml (the copies each crate ships) when it exists and neither --spec nor --out is given";

struct Args {
    command: String,
    spec: Option<String>,
    out: Option<String>,
    project: Option<String>,
    verbose: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let command = it.next().ok_or("missing command")?;
    if command == "-h" || command == "--help" || command == "help" {
        return Err(String::new());
    }
    if command != "generate" && command != "check" {
        return Err(format!("unknown command `{command}`"));
    }
    let mut args = Args {
        command,
        spec: None,
        out: None,
        project: None,
        verbose: false,
    };
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (a.clone(), None),
        };
        let mut value = |name: &str| {
            inline
                .clone()
                .or_else(|| it.next())
                .ok_or(format!("{name} needs a value"))
        };
        match flag.as_str() {
            "--spec" => args.spec = Some(value("--spec")?),
            "--out" => args.out = Some(value("--out")?),
            "--project" => args.project = Some(value("--project")?),
            "--verbose" | "-v" => args.verbose = true,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    Ok(args)
}

/// `dlbind diff OLD NEW`: prints every change and exits 0 (all compatible), 1 (an ABI break)
/// or 2 (a spec error, `file:line:col: message`; a usage error).
fn diff_main(rest: &[String]) -> ExitCode {
    if rest.iter().any(|a| a == "-h" || a == "--help") {
        say!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let [old, new] = rest else {
        eprintln!("dlbind: diff needs two spec files: dlbind diff OLD NEW\n{USAGE}");
        return ExitCode::from(2);
    };
    match dlbind_codegen::diff::compare_files(old.as_ref(), new.as_ref()) {
        Ok(report) => {
            say!("dlbind diff {old} {new}");
            for line in report.to_string().lines() {
                say!("{line}");
            }
            ExitCode::from(report.exit_code() as u8)
        }
        Err(e) => {
            eprintln!("{}", format_error(&e));
            // an unreadable file is as much a bad input as a malformed one
            ExitCode::from(2)
        }
    }
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.first().map(String::as_str) == Some("diff") {
        return diff_main(&argv[1..]);
    }
    let args = match parse_args() {
        Ok(a) => a,
        Err(msg) => {
            if msg.is_empty() {
                say!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            eprintln!("dlbind: {msg}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let mut builder = Builder::new();
    let spec_note = match &args.spec {
        Some(s) => {
            builder = builder.spec(s);
            format!("spec: {s}")
        }
        None if std::path::Path::new(DEFAULT_SPEC).exists() => {
            builder = builder.spec(DEFAULT_SPEC);
            format!("spec: {DEFAULT_SPEC}")
        }
        None => format!(
            "spec: the spec embedded in dlbind (no {DEFAULT_SPEC} in this directory; pass --spec to use another)"
        ),
    };
    // The project's copies go with the project's own spec and output directory: by default only
    // when neither is overridden (a fixture generated elsewhere must not overwrite them).
    let project = args.project.clone().or_else(|| {
        (args.spec.is_none()
            && args.out.is_none()
            && std::path::Path::new(DEFAULT_PROJECT).exists())
        .then(|| DEFAULT_PROJECT.to_string())
    });
    if let Some(p) = &project {
        builder = builder.project(p);
    }
    let out_dir = args.out.clone().unwrap_or_else(|| DEFAULT_OUT.to_string());
    builder = builder.out_dir(&out_dir);
    let start = Instant::now();
    let result = if args.command == "generate" {
        say!("{spec_note}");
        generate(&builder, &args, start)
    } else {
        check(&builder, &out_dir, &spec_note)
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("{}", format_error(&e));
            ExitCode::from(e.exit_code() as u8)
        }
    }
}

fn format_error(e: &Error) -> String {
    match e {
        Error::Spec(_) => e.to_string(),
        other => format!("dlbind: error: {other}"),
    }
}

fn generate(builder: &Builder, args: &Args, start: Instant) -> Result<ExitCode, Error> {
    // compile the templates first so --verbose can report that phase on its own
    let t = Instant::now();
    dlbind_codegen::templates::tera()?;
    let templates = t.elapsed();
    let g = builder.generate()?;
    let elapsed = start.elapsed();
    for f in &g.files {
        let mark = if g.changed.contains(f) {
            "wrote    "
        } else {
            "unchanged"
        };
        say!("{mark} {}", f.display());
    }
    say!(
        "generated {} files ({} changed)",
        g.files.len(),
        g.changed.len()
    );
    if args.verbose {
        say!(
            "elapsed: {:.2} ms (compile templates {:.2} ms, parse + validate + render {:.2} ms, write {:.2} ms)",
            elapsed.as_secs_f64() * 1e3,
            templates.as_secs_f64() * 1e3,
            g.render_time.as_secs_f64() * 1e3,
            (g.total_time - g.render_time).as_secs_f64() * 1e3
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn check(builder: &Builder, out_dir: &str, spec_note: &str) -> Result<ExitCode, Error> {
    if !std::path::Path::new(out_dir).is_dir() {
        // Usually `check` run outside the project root: one line instead of a diff per file.
        // The spec is still validated first (an invalid spec is the more useful error).
        builder.ir()?;
        eprintln!(
            "dlbind: no output directory `{out_dir}` here: nothing to check (run from the \
             directory that holds it, pass --out DIR, or run `dlbind generate` first; {spec_note})"
        );
        return Ok(ExitCode::from(1));
    }
    let report = builder.check()?;
    if report.is_clean() {
        say!("{} generated files are up to date", report.checked);
        return Ok(ExitCode::SUCCESS);
    }
    for (_, diff) in &report.stale {
        say!("{}", diff.trim_end_matches('\n'));
    }
    let names: Vec<&str> = report.stale.iter().map(|(p, _)| p.as_str()).collect();
    eprintln!(
        "dlbind: {} stale file(s): {}; run `dlbind generate`",
        names.len(),
        names.join(", ")
    );
    Ok(ExitCode::from(1))
}
