#!/usr/bin/env bash
# The demo's pytest suite at both ends of the PyO3 range dlbind's requirement admits (issue 42,
# decision 0017): the lowest (the version the requirement names, `pyo3 = "0.30.1"`) and the
# highest (what `cargo update -p pyo3` resolves to). When both are the same, it runs once and
# says so.
#
#   scripts/pyo3_range.sh             # both ends
#   scripts/pyo3_range.sh -- -k dtype # extra arguments after `--` go to pytest
#   scripts/pyo3_range.sh --skip-locked  # (scripts/test.sh) an end equal to the repository's
#                                        # Cargo.lock is not built again: the test command's own
#                                        # steps built and tested that one from the same tree
#
# The repository's Cargo.lock is never written: the script works on a copy of the working tree
# (tracked and untracked, not ignored, files) in <target>/pyo3-range/ws, with its own lockfile
# and target directory (<target>/pyo3-range/target, kept between runs), and checks at the end
# that Cargo.lock is byte for byte what it was. The demo is built with `maturin build` into a
# wheel, installed with `pip --target` into a scratch directory put first on PYTHONPATH: the
# venv's own installed demo is left alone.
#
# A PyO3 other than the audited one (AUDITED_PYO3 in runtime/build.rs) builds every frozen
# instance through PyO3's constructor; test_freelist.py's direct-path test then fails, which is
# the reminder to audit that release's class layout (decision 0017).
#
# Environment knobs (all optional):
#   VENV=/path/to/venv       interpreter, maturin, pytest and the peers; default: <repo>/.venv
#   CARGO_TARGET_DIR=...     parent of pyo3-range/; default: <repo>/target
#   DLBIND_PYTEST_ARGS=...   default: "-x -q -p no:cacheprovider -n 2"
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

PYTEST_EXTRA=()
SKIP_LOCKED=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --) shift; PYTEST_EXTRA=("$@"); break ;;
    --skip-locked) SKIP_LOCKED=1; shift ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) PYTEST_EXTRA+=("$1"); shift ;;
  esac
done

VENV="${VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"
MATURIN="$VENV/bin/maturin"
[[ -x "$PY" && -x "$MATURIN" ]] || { echo "pyo3_range: no $PY or $MATURIN (scripts/test.sh makes the venv)" >&2; exit 2; }
read -r -a PYTEST_ARGS <<< "${DLBIND_PYTEST_ARGS:--x -q -p no:cacheprovider -n 2}"
BASE="${CARGO_TARGET_DIR:-$ROOT/target}/pyo3-range"
WS="$BASE/ws"
export CARGO_TARGET_DIR="$BASE/target"
export PYO3_PYTHON="$PY" JAX_PLATFORMS="${JAX_PLATFORMS:-cpu}" PIP_DISABLE_PIP_VERSION_CHECK=1

say() { printf '\n--> [%s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }
T0=$SECONDS
LOCK_SUM="$(sha256sum Cargo.lock | cut -d' ' -f1)"
lock_unchanged() {
  if [[ "$(sha256sum "$ROOT/Cargo.lock" | cut -d' ' -f1)" == "$LOCK_SUM" ]]; then
    echo "Cargo.lock: unchanged (sha256 $LOCK_SUM)"
  else
    echo "!! Cargo.lock changed during the run (this script never writes it: another process did)" >&2
    return 1
  fi
}
SCRATCH="$(mktemp -d)"
trap 'rm -rf "$SCRATCH"' EXIT

# ------------------------------------------------------------- the working tree's copy
say "copy of the working tree in $WS"
rm -rf "$WS"
mkdir -p "$WS"
# Tracked and untracked files that exist (a deletion not yet committed is left out), mtimes kept
# so that cargo's fingerprints see unchanged files as unchanged from one run to the next.
git ls-files -z --cached --others --exclude-standard \
  | "$PY" -c 'import os, sys; sys.stdout.buffer.write(b"".join(p + b"\0" for p in sys.stdin.buffer.read().split(b"\0") if p and os.path.isfile(p)))' \
  | tar --null -T - -cf - | tar -xf - -C "$WS"
cp -p Cargo.lock "$WS/Cargo.lock"
REPO_LOCKED="$(sed -n '/^name = "pyo3"$/{n;s/^version = "\(.*\)"$/\1/p}' Cargo.lock)"

# The version a package's lockfile entry names.
locked() { "$PY" - "$WS/Cargo.lock" "$1" <<'EOF'
import sys, tomllib
lock = tomllib.load(open(sys.argv[1], "rb"))
print(" ".join(p["version"] for p in lock["package"] if p["name"] == sys.argv[2]))
EOF
}

# ------------------------------------------------------------- the range's ends
# Lowest: the version dlbind's requirement names (a caret requirement: `0.30.1` = >=0.30.1, <0.31).
REQ="$(cd "$WS" && cargo metadata -q --format-version 1 --no-deps | "$PY" -c '
import json, sys
meta = json.load(sys.stdin)
dlbind = next(p for p in meta["packages"] if p["name"] == "dlbind")
print(next(d["req"] for d in dlbind["dependencies"] if d["name"] == "pyo3" and d["kind"] is None))')"
LOWEST="${REQ#^}"
[[ "$LOWEST" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "pyo3_range: dlbind's pyo3 requirement '$REQ' is not a plain caret requirement" >&2; exit 2; }
# Highest: what the registry offers within the requirement.
say "highest pyo3 the requirement admits (cargo update -p pyo3)"
if ! (cd "$WS" && cargo update -q -p pyo3); then
  echo "!! cargo update could not reach the registry: using the highest pyo3 known offline"
  (cd "$WS" && cargo update -q --offline -p pyo3)
fi
HIGHEST="$(locked pyo3)"
[[ "$HIGHEST" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "pyo3_range: the lockfile holds pyo3 '$HIGHEST'" >&2; exit 2; }
AUDITED="$(sed -n 's/^const AUDITED_PYO3: &str = "\(.*\)";/\1/p' runtime/build.rs)"
if [[ "$LOWEST" == "$HIGHEST" ]]; then
  VERSIONS=("$LOWEST")
  echo "pyo3 requirement $REQ: lowest = highest = $LOWEST; one run"
else
  VERSIONS=("$LOWEST" "$HIGHEST")
  echo "pyo3 requirement $REQ: lowest $LOWEST, highest $HIGHEST; two runs"
fi

# ------------------------------------------------------------- one run per end
RESULTS=()
FAILED=0
for v in "${VERSIONS[@]}"; do
  t=$SECONDS
  say "pyo3 $v: cargo update -p pyo3 --precise $v (the copy's lockfile)"
  if ! (cd "$WS" && { cargo update -q -p pyo3 --precise "$v" 2>/dev/null \
                      || cargo update -q --offline -p pyo3 --precise "$v"; }); then
    RESULTS+=("pyo3 $v: cargo update FAILED"); FAILED=1; continue
  fi
  got="$(locked pyo3)"
  if [[ "$got" != "$v" ]]; then
    echo "!! the lockfile holds pyo3 $got, not $v"; RESULTS+=("pyo3 $v: lockfile FAILED"); FAILED=1; continue
  fi
  if [[ "$SKIP_LOCKED" == 1 && "$v" == "$REPO_LOCKED" ]]; then
    RESULTS+=("pyo3 $v: the repository's Cargo.lock version, built and tested by the test command's own steps")
    continue
  fi
  DESELECT=()
  if [[ "$v" != "$AUDITED" ]]; then
    echo "note: pyo3 $v is not the audited release ($AUDITED): the direct construction is off there (decision 0017); test_freelist.py's direct-path test is deselected, audit that release's class layout and bump AUDITED_PYO3"
    DESELECT=(--deselect "$WS/tests/python/test_freelist.py::test_the_demo_tensor_has_a_list_and_builds_directly")
  fi
  say "pyo3 $v: maturin build --profile ci (dlbind_demo)"
  wheels="$SCRATCH/wheels-$v" site="$SCRATCH/site-$v"
  if ! "$MATURIN" build -q --profile ci -m "$WS/examples/tensor/Cargo.toml" -i "$PY" \
      --auditwheel skip -o "$wheels"; then
    RESULTS+=("pyo3 $v: demo build FAILED"); FAILED=1; continue
  fi
  "$PY" -m pip install -q --no-deps --no-index --target "$site" "$wheels"/*.whl
  where="$(PYTHONPATH="$site" "$PY" -c 'import dlbind_demo as m; print(m.__file__)')"
  [[ "$where" == "$site"/* ]] || { echo "!! the demo imported from $where, not the scratch build"; FAILED=1; continue; }
  say "pyo3 $v: pytest tests/python ${PYTEST_ARGS[*]} ${PYTEST_EXTRA[*]}"
  if PYTHONPATH="$site" "$PY" -m pytest "$WS/tests/python" "${PYTEST_ARGS[@]}" ${DESELECT[@]+"${DESELECT[@]}"} ${PYTEST_EXTRA[@]+"${PYTEST_EXTRA[@]}"}; then
    RESULTS+=("pyo3 $v: passed ($((SECONDS - t)) s)")
  else
    RESULTS+=("pyo3 $v: pytest FAILED ($((SECONDS - t)) s)"); FAILED=1
  fi
done

say "summary ($((SECONDS - T0)) s)"
printf '  %s\n' "${RESULTS[@]}"
lock_unchanged || FAILED=1
exit "$FAILED"
