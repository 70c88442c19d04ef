#!/usr/bin/env bash
# What a registry user gets (issue 21), run by scripts/test.sh step 6:
#   1. `cargo package` of the three published crates (dlbind, dlbind-macros, dlbind-codegen;
#      interdependent crates resolve through cargo's temporary registry); the demo and the UI
#      tests are `publish = false`. No verify build (`--no-verify`): each .crate is compiled from
#      its unpacked contents below anyway (dlbind and dlbind-macros by the downstream crate,
#      dlbind-codegen by `cargo install`), so cargo's verify build would compile each twice;
#   2. examples/downstream (a user's crate: `dlbind = "0.1"`, [patch.crates-io] pointing at the
#      unpacked .crate files), copied OUTSIDE the repository so nothing of this workspace (its
#      .cargo/config.toml) reaches the build, built with maturin and tested with pytest against
#      numpy and JAX; its build script compiles C against DEP_DLBIND_INCLUDE; its tests also run
#      the Python sessions of the READMEs packaged in the .crate files (the registry pages, whose
#      Rust blocks are its src/image.rs and src/matrix.rs);
#   3. the derive's spanned compile errors, from the packaged crates;
#   4. `cargo install` of the packaged dlbind-codegen, run in an empty directory, with the
#      `dlbind` commands of its packaged README as written;
#   5. the derive's dependency tree: no YAML parser, template engine or diff library.
#
#   --crate-only: step 2 alone, against the crates an earlier full run left in
#   target/packaged-crates (scripts/matrix.sh builds and tests the downstream crate so on each
#   interpreter of the matrix).
#
# Needs the test venv active (scripts/test.sh does it) and PYO3_PYTHON set.
# DOWNSTREAM_WORK=DIR (default ${TMPDIR:-/tmp}/dlbind-downstream) keeps the downstream build and
# the installed CLI between runs; it must lie outside the repository.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="${DOWNSTREAM_WORK:-${TMPDIR:-/tmp}/dlbind-downstream}"
case "$WORK/" in "$ROOT"/*) echo "DOWNSTREAM_WORK must lie outside $ROOT" >&2; exit 2 ;; esac
PY="${PYO3_PYTHON:?set PYO3_PYTHON (scripts/test.sh does)}"
FAILED=()
check() { local name="$1"; shift; if ! "$@"; then echo "!! $name FAILED"; FAILED+=("$name"); fi; }
say() { printf -- '--- [%s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }

CRATE_ONLY=0
[[ "${1:-}" == --crate-only ]] && CRATE_ONLY=1
# The packaged crates, kept for --crate-only runs (inside the repository's target directory, so
# the 3.14 chroot, which mounts the checkout, sees them too).
KEPT="$ROOT/target/packaged-crates"

# ------------------------------------------------------------------ 1. package
if [[ $CRATE_ONLY == 0 ]]; then
say "cargo package -p dlbind -p dlbind-macros -p dlbind-codegen (compiled from the .crate files below)"
cd "$ROOT"
# Nothing below reads a registry copy of our crates (the downstream crate and `cargo install` take
# the unpacked .crate files by path), so an older 0.1.0 left by an earlier run cannot be used.
mkdir -p "$WORK"
PKG_TARGET="$WORK/package-target"
rc=0
cargo package -p dlbind -p dlbind-macros -p dlbind-codegen --allow-dirty --no-verify --target-dir "$PKG_TARGET" \
  >"$WORK/package.log" 2>&1 || rc=$?
grep -v '^warning: ignoring \(test\|benchmark\)' "$WORK/package.log" | grep -v '^ *Compiling ' || true
if [[ $rc != 0 ]]; then echo "!! cargo package failed (exit $rc)"; exit 1; fi
PACKAGES="$PKG_TARGET/package"
for c in dlbind dlbind-macros dlbind-codegen; do
  echo "$c: $(tar tzf "$PACKAGES/$c-0.1.0.crate" | wc -l) files"
  # The registry page is the packaged README (Cargo.toml `readme`); tests read it from the .crate.
  tar tzf "$PACKAGES/$c-0.1.0.crate" | grep -x "$c-0.1.0/README.md" >/dev/null \
    || { echo "!! $c-0.1.0.crate has no README.md"; exit 1; }
done
rm -rf "$KEPT" && mkdir -p "$KEPT" && cp "$PACKAGES"/*.crate "$KEPT"/
else
  PACKAGES="$KEPT"
  [[ -f "$PACKAGES/dlbind-0.1.0.crate" ]] || { echo "!! no packaged crates in $PACKAGES: run scripts/downstream.sh once first"; exit 1; }
fi

# ------------------------------------------------------------------ 2. the downstream crate
say "examples/downstream against the packaged crates, in $WORK"
mkdir -p "$WORK"
rm -rf "$WORK/downstream"
cp -r "$ROOT/examples/downstream" "$WORK/downstream"
rm -rf "$WORK/downstream/packaged" && mkdir -p "$WORK/downstream/packaged"
for c in dlbind dlbind-macros; do
  # -m: extraction time as mtime (the .crate stores fixed mtimes, which cargo's fingerprint of a
  # path dependency would take for "unchanged" against an earlier build in $WORK/target).
  tar xzmf "$PACKAGES/$c-0.1.0.crate" -C "$WORK/downstream/packaged"
done
cd "$WORK/downstream"
# The user's build: no workspace config, no RUSTFLAGS, its own target directory.
export CARGO_TARGET_DIR="$WORK/target"
unset RUSTFLAGS CARGO_ENCODED_RUSTFLAGS
T=$SECONDS
maturin develop --release -m "$WORK/downstream/Cargo.toml"
echo "downstream build: $((SECONDS - T)) s"
check "downstream pytest" "$PY" -m pytest "$WORK/downstream/tests" -q -p no:cacheprovider -rfEs
if [[ $CRATE_ONLY == 1 ]]; then
  [[ ${#FAILED[@]} -gt 0 ]] && { echo "downstream FAILED: ${FAILED[*]}"; exit 1; }
  echo "downstream crate: built and tested on $("$PY" -c 'import sys; print(sys.version.split()[0])')"
  exit 0
fi

# ------------------------------------------------------------------ 3. spanned errors
say "the derive's compile errors from the packaged crates"
if cargo build --release --example fail_unknown_dtype >"$WORK/fail.log" 2>&1; then
  echo "!! examples/fail_unknown_dtype.rs compiled"; FAILED+=("derive errors")
else
  for want in 'unknown dtype `float33`' 'examples/fail_unknown_dtype.rs:7:18' \
              'unknown dlpack attribute `colour`' 'examples/fail_unknown_dtype.rs:18:20'; do
    grep -qF -- "$want" "$WORK/fail.log" || { echo "!! missing from the compile errors: $want"; cat "$WORK/fail.log"; FAILED+=("derive errors"); break; }
  done
  echo "spanned errors reported"
fi

# ------------------------------------------------------------------ 4. the CLI outside a checkout
say "cargo install of the packaged dlbind-codegen; dlbind in an empty directory"
rm -rf "$WORK/cli-src" && mkdir -p "$WORK/cli-src"
tar xzmf "$PACKAGES/dlbind-codegen-0.1.0.crate" -C "$WORK/cli-src"
# The packaged source, compiled here for the first time (debug: the CLI's speed is not under test);
# $PKG_TARGET keeps its dependencies (tera, serde_yaml, ...) between local runs.
CARGO_TARGET_DIR="$PKG_TARGET" cargo install --quiet --locked --force --debug \
  --path "$WORK/cli-src/dlbind-codegen-0.1.0" --root "$WORK/cli"
cli_checks() {
  local bin="$WORK/cli/bin/dlbind" d
  d="$(mktemp -d)"
  cd "$d"
  "$bin" generate --out gen >gen.txt && head -1 gen.txt | grep -q 'the spec embedded in dlbind' || return 1
  "$bin" generate --out gen | head -1 >/dev/null || return 1  # a closed pipe ends it quietly, no panic
  # The embedded spec generates exactly the repository's generated/ (same banners).
  # (__pycache__: bytecode a test run left in the checkout, ignored by git.)
  diff -r -x __pycache__ gen "$ROOT/generated" || return 1
  "$bin" check --out gen || return 1
  cp "$ROOT/tests/fixtures/custom/spec.yaml" my.yaml
  "$bin" generate --spec my.yaml --out gen2 >/dev/null || return 1
  grep -q kDLAcme gen2/include/dlpack.h || return 1
  "$bin" check --spec my.yaml --out gen2 || return 1
  printf 'name: x\nversion: {major: -1}\n' > bad.yaml
  local code=0; "$bin" check --spec bad.yaml --out gen2 2>err.txt || code=$?
  [[ $code == 2 ]] && grep -q '^bad.yaml:[0-9]*:[0-9]*: ' err.txt || { cat err.txt; return 1; }
  cd / && rm -rf "$d"
  echo "dlbind generate/check ran in an empty directory (embedded spec and --spec)"
}
# The packaged codegen README's ```sh block, its `dlbind` lines run as written, in order, in an
# empty directory holding the files they name (my.yaml: a custom spec; old.yaml, new.yaml: DLPack
# 1.3 and the current spec, a compatible change); each must exit 0.
cli_readme() {
  local bin="$WORK/cli/bin/dlbind" d line n=0
  d="$(mktemp -d)"
  cd "$d"
  cp "$ROOT/tests/fixtures/custom/spec.yaml" my.yaml
  cp "$ROOT/tests/fixtures/dlpack-1.3/spec.yaml" old.yaml
  cp "$ROOT/spec/dlpack.yaml" new.yaml
  while IFS= read -r line; do
    line="${line%%#*}"
    [[ "$line" == "dlbind "* ]] || continue
    n=$((n + 1))
    # shellcheck disable=SC2086  # the README's words, split as a shell would
    "$bin" ${line#dlbind } >out.txt 2>&1 || { echo "!! codegen README: \`$line\` failed"; cat out.txt; return 1; }
  done < <(sed -n '/^```sh$/,/^```$/p' "$WORK/cli-src/dlbind-codegen-0.1.0/README.md")
  [[ $n -ge 3 ]] || { echo "!! codegen README: $n dlbind commands in its sh block"; return 1; }
  diff -r -x __pycache__ generated "$ROOT/generated" >/dev/null || { echo "!! codegen README: generated/ differs"; return 1; }
  cd / && rm -rf "$d"
  echo "the codegen README's $n dlbind commands ran"
}
check "CLI outside a checkout" cli_checks
check "codegen README commands" cli_readme

# ------------------------------------------------------------------ 5. what the derive compiles
say "cargo tree -p dlbind-macros (in the downstream build)"
cd "$WORK/downstream"
TREE="$(cargo tree -p dlbind-macros -e normal,build --prefix none)"
echo "$TREE" | sort -u
if echo "$TREE" | grep -Eq '^(serde_yaml|saphyr|tera|similar|serde|dlbind-codegen) '; then
  echo "!! dlbind-macros compiles a YAML parser, template engine or diff library"; FAILED+=("macro deps")
fi

if [[ ${#FAILED[@]} -gt 0 ]]; then
  echo "downstream FAILED: ${FAILED[*]}"
  exit 1
fi
echo "downstream: all checks passed"
