#!/usr/bin/env bash
# The API docs as docs.rs builds them (issue 51; decision 0026), for each published crate
# (dlbind, dlbind-macros, dlbind-codegen), then checks of the HTML that came out.
#
#   scripts/docsrs.sh       # scripts/test.sh runs it as step 3c (DLBIND_SKIP_DOCSRS=1 skips it)
#
# What docs.rs runs (rust-lang/docs.rs: crates/lib/metadata, the rustwide builder), reproduced:
# a nightly toolchain; `cargo rustdoc --lib -Zrustdoc-map` with the features, `all-features`,
# `no-default-features`, `rustc-args`, `rustdoc-args`, `cargo-args` and default target of the
# crate's `[package.metadata.docs.rs]` (read from Cargo.toml through `cargo metadata`: the table
# is the one source of truth); rustdoc flags `--cfg docsrs` (docs.rs passes it itself, to
# rustdoc only, never to rustc), then the table's `rustdoc-args`, `-Z unstable-options` and
# `--extern-html-root-takes-precedence`; dependencies' links to docs.rs; `DOCS_RS=1` in the
# environment; no PYO3_* variable and no virtualenv, so that PyO3's build script configures
# itself from `python`/`python3` on PATH, as on docs.rs (its build image is Ubuntu 24.04:
# python3 is CPython 3.12). Not reproduced: the output layout flags (`--static-root-path`,
# `--resource-suffix`, `--emit`), the other targets (dlbind's table builds one), the scraped
# examples (none of the crates has examples), the build from the packaged .crate (the sources
# are the same files, `include` in each Cargo.toml) and docs.rs's `--cap-lints warn`: here
# every rustdoc warning, a broken intra-doc link included, is an error (`-D warnings`).
#
# Then, for each crate, from its sources and its HTML: every `pub mod` / `pub use` gated by
# `#[cfg(feature = "X")]` (not doc(hidden)) is on the page and carries "Available on crate
# feature X only" (and X must be one the table builds); each feature the table names is marked
# somewhere, or is required by one that is; no mark names `test-util`; the pages listed in
# EXPECT below carry their marks.
#
# Without a nightly toolchain it says that the docs.rs build was skipped, and why, and exits 0.
#
# Environment knobs (all optional):
#   DLBIND_DOCSRS_TOOLCHAIN=nightly  the toolchain docs.rs's build is emulated with
#   DLBIND_DOCSRS_PYTHON=python3.12  the interpreter PyO3 configures from (default: `python`,
#                                    else `python3`, on PATH, as on docs.rs; it must be 3.11+)
#   CARGO_TARGET_DIR=...             default <repo>/target; this build goes to its docsrs/
#                                    subdirectory, apart from the stable builds
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

TOOLCHAIN="${DLBIND_DOCSRS_TOOLCHAIN:-nightly}"
skip() {
  echo "docs.rs build SKIPPED: $*"
  exit 0
}
fail() {
  echo "!! docs.rs build: $*" >&2
  exit 1
}

# Pages that no source scan finds (an impl in a private module, a re-export without a cfg):
# crate, page under the crate's doc directory, the feature its mark names ("-": no mark, the
# page must only exist).
EXPECT=(
  "dlbind struct.ImportedTensor.html ndarray"
  "dlbind adapters/struct.Handoff.html -"
  "dlbind gpu/fn.zeros.html -"
)

command -v rustup >/dev/null 2>&1 || skip "rustup is not installed (docs.rs builds with a nightly toolchain: rustup toolchain install nightly)"
cargo "+$TOOLCHAIN" --version >/dev/null 2>&1 \
  || skip "no '$TOOLCHAIN' toolchain (docs.rs builds with nightly rustdoc: rustup toolchain install nightly)"
command -v python3 >/dev/null 2>&1 || fail "python3 is needed to read the docs.rs metadata"

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}/docsrs"
TARGET_DIR="$CARGO_TARGET_DIR"
T0=$SECONDS
echo "toolchain: $(rustup run "$TOOLCHAIN" rustdoc --version)"

# The interpreter PyO3's build script will find (pyo3-build-config: PYO3_PYTHON, else a
# virtualenv's, else `python`, else `python3`); docs.rs sets none of the first two.
if [[ -n "${DLBIND_DOCSRS_PYTHON:-}" ]]; then
  PYO3_FOR_DOCS="$(command -v "$DLBIND_DOCSRS_PYTHON" || true)"
  [[ -n "$PYO3_FOR_DOCS" ]] || fail "DLBIND_DOCSRS_PYTHON=$DLBIND_DOCSRS_PYTHON is not on PATH"
else
  PYO3_FOR_DOCS=""
  for exe in python python3; do
    if "$exe" --version 2>&1 | grep -q '^Python 3'; then PYO3_FOR_DOCS="$(command -v "$exe")"; break; fi
  done
  [[ -n "$PYO3_FOR_DOCS" ]] || fail "no python or python3 on PATH for PyO3's build script (docs.rs has python3 3.12)"
fi
PYVER="$("$PYO3_FOR_DOCS" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
echo "PyO3 configures from: $PYO3_FOR_DOCS ($PYVER; docs.rs: python3, 3.12)"
"$PYO3_FOR_DOCS" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || fail "$PYO3_FOR_DOCS is Python $PYVER: dlbind needs 3.11+ (docs.rs has 3.12); set DLBIND_DOCSRS_PYTHON"

# The plan, one line per published crate with a library, from `cargo metadata`:
# name \t lib name \t proc-macro (0/1) \t default target \t cargo arguments (JSON list).
PLAN="$(cargo "+$TOOLCHAIN" metadata --format-version 1 --no-deps --locked | python3 -c '
import json, sys
HOST = "x86_64-unknown-linux-gnu"  # docs.rs builds on it; the default default-target
meta = json.load(sys.stdin)
for p in sorted(meta["packages"], key=lambda p: p["name"]):
    if p["publish"] == []:
        continue  # publish = false: never on docs.rs
    lib = next((t for t in p["targets"] if {"lib", "proc-macro"} & set(t["kind"])), None)
    if lib is None:
        continue
    rs = ((p.get("metadata") or {}).get("docs") or {}).get("rs") or {}
    proc_macro = "proc-macro" in lib["kind"]
    args = ["rustdoc", "-p", p["name"], "--lib", "-Zrustdoc-map", "--locked"]
    if rs.get("features"):
        args += ["--features", " ".join(rs["features"])]
    if rs.get("all-features"):
        args.append("--all-features")
    if rs.get("no-default-features"):
        args.append("--no-default-features")
    rustc_args = rs.get("rustc-args", [])
    if rustc_args:
        flags = json.dumps(rustc_args)
        args += ["--config", "build.rustflags=" + flags]
        if not proc_macro:
            args += ["-Zhost-config", "-Ztarget-applies-to-host", "--config", "host.rustflags=" + flags]
    rustdoc = ["--cfg", "docsrs"] + rs.get("rustdoc-args", []) + ["-Z", "unstable-options",
               "--extern-html-root-takes-precedence", "-D", "warnings",
               "-D", "rustdoc::broken_intra_doc_links"]
    args += ["--config", "build.rustdocflags=" + json.dumps(rustdoc)]
    args += rs.get("cargo-args", [])
    target = rs.get("default-target") or (rs.get("targets") or [HOST])[0]
    print("\t".join([p["name"], lib["name"].replace("-", "_"), str(int(proc_macro)), target,
                     json.dumps(args)]))
')" || fail "cargo metadata failed"
[[ -n "$PLAN" ]] || fail "no published crate found"

INSTALLED_TARGETS="$(rustup target list --installed --toolchain "$TOOLCHAIN" 2>/dev/null || true)"
HOST_TARGET="$(rustup run "$TOOLCHAIN" rustc -vV | sed -n 's/^host: //p')"

# docs.rs's environment: DOCS_RS=1; none of the caller's flags or PyO3 settings (RUSTDOCFLAGS
# would replace the `build.rustdocflags` above), PATH's interpreter for PyO3.
DOCS_ENV=(env -u RUSTFLAGS -u CARGO_ENCODED_RUSTFLAGS -u RUSTDOCFLAGS -u CARGO_ENCODED_RUSTDOCFLAGS
  -u PYO3_CONFIG_FILE -u PYO3_NO_PYTHON -u PYO3_CROSS -u PYO3_CROSS_LIB_DIR
  -u PYO3_CROSS_PYTHON_VERSION -u PYO3_CROSS_PYTHON_IMPLEMENTATION -u VIRTUAL_ENV -u CONDA_PREFIX
  DOCS_RS=1)
if [[ -n "${DLBIND_DOCSRS_PYTHON:-}" ]]; then
  DOCS_ENV+=(PYO3_PYTHON="$PYO3_FOR_DOCS")
else
  DOCS_ENV=("${DOCS_ENV[0]}" -u PYO3_PYTHON "${DOCS_ENV[@]:1}")
fi

status=0
DOC_DIRS=()
while IFS=$'\t' read -r name lib proc_macro target args_json; do
  mapfile -t ARGS < <(python3 -c 'import json, sys; print("\n".join(json.loads(sys.argv[1])))' "$args_json")
  if [[ "$proc_macro" == 1 ]]; then
    doc_dir="$TARGET_DIR/doc"  # docs.rs builds proc-macros for the host, without --target
  else
    if ! grep -qx "$target" <<<"$INSTALLED_TARGETS"; then
      echo "note: target $target is not installed for '$TOOLCHAIN': documenting for $HOST_TARGET"
      target="$HOST_TARGET"
    fi
    ARGS+=(--target "$target"
      "--config=doc.extern-map.registries.crates-io=\"https://docs.rs/{pkg_name}/{version}/$target\"")
    doc_dir="$TARGET_DIR/$target/doc"
  fi
  # No page of an earlier run may stand in for one this run did not write.
  rm -rf "${doc_dir:?}/$lib"
  echo "--- $name: cargo +$TOOLCHAIN ${ARGS[*]}"
  T1=$SECONDS
  if "${DOCS_ENV[@]}" cargo "+$TOOLCHAIN" "${ARGS[@]}"; then
    echo "--- $name documented in $((SECONDS - T1)) s: $doc_dir/$lib/index.html"
    DOC_DIRS+=("$name"$'\t'"$lib"$'\t'"$doc_dir")
  else
    echo "!! $name: the docs.rs build failed"
    status=1
  fi
done <<<"$PLAN"

# The checks of the HTML.
DOCS_BUILT="$(printf '%s\n' ${DOC_DIRS[@]+"${DOC_DIRS[@]}"})" python3 - "$ROOT" "${EXPECT[@]}" <<'PY' || status=1
import glob, json, os, re, subprocess, sys

root, expect = sys.argv[1], sys.argv[2:]
meta = json.loads(subprocess.run(
    ["cargo", "metadata", "--format-version", "1", "--no-deps", "--locked"],
    cwd=root, check=True, capture_output=True, text=True).stdout)
packages = {p["name"]: p for p in meta["packages"]}
MARK = re.compile(r'Available on <strong>(.*?)</strong>', re.S)
CFG_FEATURE = re.compile(r'#\[cfg\(feature\s*=\s*"([^"]+)"\)\]')
problems = []


def marks(path):
    with open(path, encoding="utf-8") as f:
        return MARK.findall(f.read())


def has_mark(path, feature):
    return any(m == "crate feature <code>%s</code>" % feature for m in marks(path))


def module_path(src_dir, file):
    rel = os.path.relpath(file, src_dir)[:-len(".rs")].split(os.sep)
    if rel[-1] in ("lib", "mod", "main"):
        rel = rel[:-1]
    return rel


def gated_items(src_dir):
    """(feature, module path, kind, name) for each `pub mod` / `pub use` item whose attributes
    are `#[cfg(feature = "X")]` (and not `#[doc(hidden)]`)."""
    for file in sorted(glob.glob(os.path.join(src_dir, "**", "*.rs"), recursive=True)):
        with open(file, encoding="utf-8") as f:
            text = f.read()
        # An item and the attribute and doc-comment lines right above it.
        for m in re.finditer(r'((?:^[ \t]*(?:#\[[^\n]*\]|//[^\n]*)[ \t]*\n)+)[ \t]*pub (mod|use) ([^;{]+(?:\{[^}]*\})?)\s*;',
                             text, re.M):
            attrs, kind, body = m.groups()
            if "doc(hidden)" in attrs:
                continue
            features = CFG_FEATURE.findall(attrs)
            if len(features) != 1:
                continue
            mod = module_path(src_dir, file)
            if kind == "mod":
                yield features[0], mod, "mod", body.strip()
            else:
                body = " ".join(body.split())
                if "{" in body:
                    names = body[body.index("{") + 1:body.rindex("}")].split(",")
                else:
                    names = [body.rsplit("::", 1)[-1]]
                for n in (n.strip() for n in names):
                    n = n.split(" as ")[-1].strip()
                    if n and n not in ("*", "_", "self") and "::" not in n:
                        yield features[0], mod, "use", n


def enabled_features(pkg, rs):
    """Every feature the docs.rs build of `pkg` turns on, implied ones included."""
    feats = pkg["features"]
    if rs.get("all-features"):
        todo = list(feats)
    else:
        todo = list(rs.get("features", []))
        if not rs.get("no-default-features") and "default" in feats:
            todo.append("default")
    seen = set()
    while todo:
        f = todo.pop()
        if f in seen or f not in feats:
            continue
        seen.add(f)
        todo += [g for g in feats[f] if not g.startswith("dep:") and "/" not in g]
    seen.discard("default")
    return seen


for line in os.environ["DOCS_BUILT"].split("\n"):
    if not line:
        continue
    name, lib, doc_dir = line.split("\t")
    pkg = packages[name]
    rs = ((pkg.get("metadata") or {}).get("docs") or {}).get("rs") or {}
    crate_dir = os.path.join(doc_dir, lib)
    src_dir = os.path.dirname(next(t["src_path"] for t in pkg["targets"]
                                   if {"lib", "proc-macro"} & set(t["kind"])))
    enabled = enabled_features(pkg, rs)
    pages = glob.glob(os.path.join(crate_dir, "**", "*.html"), recursive=True)
    counts = {}
    for page in pages:
        for m in marks(page):
            if "test-util" in m:
                problems.append("%s: %s: a mark names the internal feature test-util (%s): "
                                "lib.rs hides it with doc(auto_cfg(hide(...)))"
                                % (name, os.path.relpath(page, doc_dir), re.sub("<[^>]+>", "", m)))
            if m.startswith("crate features ") and m.count("<code>") < 2:
                problems.append("%s: %s: a mark lists one feature as several (%s): "
                                "say it with #[cfg_attr(docsrs, doc(cfg(...)))]"
                                % (name, os.path.relpath(page, doc_dir), re.sub("<[^>]+>", "", m)))
            for f in re.findall(r"<code>([^<]+)</code>", m) if m.startswith("crate feature") else []:
                if f in pkg["features"]:  # not the features of a re-exported crate's items
                    counts[f] = counts.get(f, 0) + 1
    if "test-util" in enabled:
        problems.append("%s: [package.metadata.docs.rs] turns on test-util (internal, not covered "
                        "by semver): list the user-facing features instead" % name)
    # Each gated public item: on the page, with its mark.
    checked = 0
    for feature, mod, kind, item in gated_items(src_dir):
        if feature == "test-util":
            continue
        where = "::".join([lib] + mod + [item])
        if feature not in enabled:
            problems.append("%s: %s needs feature %s, which docs.rs does not build: add it to "
                            "[package.metadata.docs.rs] features" % (name, where, feature))
            continue
        parent = os.path.join(crate_dir, *mod)
        if not os.path.exists(os.path.join(parent, "index.html")):
            continue  # inside a private module: not on the page under this path
        if kind == "mod":
            found = [os.path.join(parent, item, "index.html")]
            found = [p for p in found if os.path.exists(p)]
        else:
            found = glob.glob(os.path.join(parent, "*.%s.html" % item)) + \
                glob.glob(os.path.join(parent, item, "index.html"))
        if not found and kind == "use":
            # A re-export of a public item is listed, not inlined: its line in the module's
            # "Re-exports" carries the short form of the mark.
            with open(os.path.join(parent, "index.html"), encoding="utf-8") as f:
                line = re.search(r'<dt id="reexport\.%s">(.*?)</dt>' % re.escape(item), f.read(), re.S)
            if line is None:
                problems.append("%s: %s (feature %s) is not on the page" % (name, where, feature))
            elif 'title="Available on crate feature `%s` only"' % feature not in line.group(1):
                problems.append('%s: the re-export %s has no "Available on crate feature %s only" mark'
                                % (name, where, feature))
        elif not found:
            problems.append("%s: %s (feature %s) is not on the page" % (name, where, feature))
        elif not has_mark(found[0], feature):
            problems.append('%s: %s has no "Available on crate feature %s only" mark'
                            % (name, os.path.relpath(found[0], doc_dir), feature))
        checked += 1
    # Each feature the table names: marked somewhere, or required by a marked one.
    covered = set(counts)
    todo = list(counts)
    while todo:
        for g in pkg["features"].get(todo.pop(), []):
            if g in pkg["features"] and g not in covered:
                covered.add(g)
                todo.append(g)
    for f in rs.get("features", []):
        if f not in covered:
            problems.append("%s: feature %s is in [package.metadata.docs.rs] but marks no item on "
                            "the page (and no marked feature requires it)" % (name, f))
    for e in expect:
        crate, page, feature = e.split()
        if crate != name:
            continue
        path = os.path.join(crate_dir, page)
        if not os.path.exists(path):
            problems.append("%s: %s is not on the page" % (name, page))
        elif feature != "-" and not has_mark(path, feature):
            problems.append('%s: %s has no "Available on crate feature %s only" mark'
                            % (name, page, feature))
        checked += 1
    print("%s: %d pages, %d gated or listed items checked; marks by feature: %s" % (
        name, len(pages), checked,
        ", ".join("%s %d" % kv for kv in sorted(counts.items())) or "none"))

for p in problems:
    print("!! " + p)
sys.exit(1 if problems else 0)
PY

echo "docs.rs build and checks: $((SECONDS - T0)) s"
if [[ "$status" != 0 ]]; then
  echo "!! docs.rs build FAILED"
fi
exit "$status"
