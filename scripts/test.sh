#!/usr/bin/env bash
# The one test command for dlbind (CI runs it through .ci/run on a clean clone).
#
#   scripts/test.sh                 # everything
#   scripts/test.sh -- -k dtype     # extra arguments after `--` go to pytest
#
# Needs only: Rust (cargo), python3 (3.11) with venv + pip, a C compiler.
# Installs the pinned Python peers into .venv (skipped when the stamp matches),
# checks that generated/ is up to date, runs the Rust tests, builds the demo
# extension with maturin and runs the pytest suite, then checks what a registry user gets
# (scripts/downstream.sh: cargo package, a user's crate built against the packaged crates,
# the installed CLI).
#
# Environment knobs (all optional):
#   PYTHON=python3.11        interpreter used to create .venv
#   VENV=/path/to/venv       default: <repo>/.venv
#   CARGO_TARGET_DIR=...     default: <repo>/target
#   CARGO_BUILD_JOBS=N       passed through to cargo / maturin
#   DLBIND_SKIP_RUST=1       skip steps 2-3c (codegen check, lint, cargo test, Miri, docs.rs build)
#   DLBIND_SKIP_MIRI=1       skip step 3b (Miri over the Rust-only tests, scripts/miri.sh, ~7 min cold; skipped anyway without a nightly toolchain)
#   DLBIND_SKIP_DOCSRS=1     skip step 3c (the docs as docs.rs builds them, and their feature marks, scripts/docsrs.sh, ~3.5 min cold; skipped anyway without a nightly toolchain)
#   DLBIND_SKIP_DOWNSTREAM=1 skip step 6 (packaging + the downstream crate, ~1.6 min cold)
#   DLBIND_SKIP_PYO3_RANGE=1 skip step 6b (the demo against the PyO3 range's other end, when one exists)
#   DLBIND_SKIP_MEMCHECK=1   skip step 5b (valgrind memcheck subset + checker self-test, ~2 min; skipped anyway without valgrind)
#   DLBIND_SKIP_MATRIX=1     skip step 7 (the interpreter matrix: 3.12, 3.13, 3.14, abi3, targets, 3.14t)
#   DLBIND_MATRIX="3.13 abi3" run only these matrix entries (default: all of them)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

PYTEST_EXTRA=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --) shift; PYTEST_EXTRA=("$@"); break ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) PYTEST_EXTRA+=("$1"); shift ;;
  esac
done

PYTHON="${PYTHON:-python3}"
VENV="${VENV:-$ROOT/.venv}"
REQS="$ROOT/scripts/requirements-test.txt"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
export JAX_PLATFORMS="${JAX_PLATFORMS:-cpu}"
export PIP_DISABLE_PIP_VERSION_CHECK=1
# Every build here uses the `ci` profile (Cargo.toml: release without LTO), so the codegen check,
# the lints' build scripts, the tests, the demo and the matrix share their artifacts.
PROFILE=(--profile ci)
# ALL_FEATURES: every feature of the workspace (the default set is linted on its own as well).
# shellcheck source=scripts/features.sh
source "$ROOT/scripts/features.sh"

step() { printf '\n==> [%s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }
T0=$SECONDS
# Checks (steps 2, 3, 5) keep going after a failure so one run reports everything;
# setup steps (1, 4) stop the script. The exit status is non-zero if anything failed.
FAILED=()
check() { local name="$1"; shift; if ! "$@"; then echo "!! $name FAILED"; FAILED+=("$name"); fi; }

# ---------------------------------------------------------------- 1. venv
step "1/7 Python venv with pinned peers ($VENV)"
if [[ ! -x "$VENV/bin/python" ]]; then
  "$PYTHON" -m venv "$VENV"
fi
# shellcheck disable=SC1091
source "$VENV/bin/activate"
PY="$VENV/bin/python"
STAMP="$VENV/.dlbind-requirements.sha256"
WANT="$( { cat "$REQS"; "$PY" -c 'import sys; print(sys.version)'; } | sha256sum | cut -d' ' -f1)"
if [[ -f "$STAMP" && "$(cat "$STAMP")" == "$WANT" ]]; then
  echo "requirements unchanged (stamp $STAMP); skipping pip install"
else
  "$PY" -m pip install -q -r "$REQS"
  "$PY" - <<'PYEOF'
import numpy, jax, jax.numpy as jnp, pyarrow, array_api_strict, ml_dtypes, tvm_ffi, yaml, pytest, hypothesis, Cython, mypy
jnp.zeros(3).block_until_ready()
print("peers:", "numpy", numpy.__version__, "| jax", jax.__version__, "| pyarrow", pyarrow.__version__,
      "| array_api_strict", array_api_strict.__version__, "| ml_dtypes", ml_dtypes.__version__,
      "| tvm_ffi", tvm_ffi.__version__)
PYEOF
  echo "$WANT" > "$STAMP"
fi
# pyo3's build script and maturin must agree on the interpreter so the build is shared.
export PYO3_PYTHON="$PY"

# The matrix's venvs and the 3.14 chroot are downloads: made in the background now, beside the
# Rust steps (scripts/matrix.sh --prepare; ~4 min cold, mostly waiting on the network), and
# waited for before step 7. Its log is printed there.
if [[ "${DLBIND_SKIP_MATRIX:-0}" != 1 ]]; then
  PREP_LOG="$(mktemp)"
  # shellcheck disable=SC2086
  "$ROOT/scripts/matrix.sh" --prepare ${DLBIND_MATRIX:-} >"$PREP_LOG" 2>&1 &
  PREP_PID=$!
fi

if [[ "${DLBIND_SKIP_RUST:-0}" != 1 ]]; then
  # ------------------------------------------------------------ 2. codegen
  step "2/7 generated/ is up to date (dlbind-codegen check)"
  check "codegen check" cargo run "${PROFILE[@]}" -q -p dlbind-codegen -- check

  # ------------------------------------------------------------ 2b. lint
  # rustfmt's default style (no rustfmt.toml) and clippy with warnings as errors. Each skips,
  # saying so, on a toolchain installed without that component.
  step "2b/7 cargo fmt --check, cargo clippy -D warnings, cargo doc -D warnings"
  if cargo fmt --version >/dev/null 2>&1; then
    check "cargo fmt" cargo fmt --all --check
  else
    echo "rustfmt is not installed with this toolchain: format check skipped"
  fi
  if cargo clippy --version >/dev/null 2>&1; then
    check "cargo clippy" cargo clippy "${PROFILE[@]}" -q --workspace --all-targets -- -D warnings
    check "cargo clippy (every feature)" cargo clippy "${PROFILE[@]}" -q --workspace --all-targets \
      --features "$ALL_FEATURES" -- -D warnings
  else
    echo "clippy is not installed with this toolchain: lint skipped"
  fi
  # API docs build without a broken intra-doc link or another rustdoc warning, private items
  # included (their docs are the newcomer's map of the runtime).
  check "cargo doc" env RUSTDOCFLAGS="-D warnings" cargo doc -q --workspace --no-deps --document-private-items \
    --features "${ALL_FEATURES/,dlbind\/test-util/}"

  # ------------------------------------------------------------ 3. cargo test
  # One build with every feature: the runtime, codegen, derive and UI tests, the adapters' tests
  # against the real crates (issue 34; scripts/test_adapters.sh runs them alone), and the GPU
  # paths (cudarc, dynamic loading), which build without CUDA and whose integration tests skip
  # with a printed reason when no driver is present. The embedded-Python tests import numpy from
  # the venv (DLBIND_TEST_SITE: there a missing numpy fails them instead of skipping).
  # (The derive's UI tests build their cases with trybuild in the dev profile: without debug
  # info, ~15 s sooner.)
  step "3/7 cargo test --workspace --profile ci --no-fail-fast (every feature)"
  check "cargo test" env CARGO_PROFILE_DEV_DEBUG=0 DLBIND_TEST_SITE="$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
    cargo test --workspace "${PROFILE[@]}" --no-fail-fast --features "$ALL_FEATURES"

  # ------------------------------------------------------------ 3b. Miri
  # The Rust-only tests (copies, layout and extents, dims, dtypes, the allocator, the adapters'
  # Rust side, the DLTensor fuzzer) under Miri with Tree Borrows, on the nightly toolchain
  # (installs the miri component if missing; prints why and passes where it cannot). Its own
  # build, in $CARGO_TARGET_DIR/miri. What runs and why: docs/manual/testing.md.
  # It runs in the background beside steps 4-6 (Miri interprets on one thread, and memcheck,
  # the smoke run and the packaging leave a core idle); its log is printed, and its result
  # counted, before step 7.
  if [[ "${DLBIND_SKIP_MIRI:-0}" != 1 ]]; then
    step "3b/7 Miri (scripts/miri.sh), in the background until step 7"
    MIRI_LOG="$(mktemp)"
    "$ROOT/scripts/miri.sh" >"$MIRI_LOG" 2>&1 &
    MIRI_PID=$!
  else
    step "3b/7 skipped (DLBIND_SKIP_MIRI=1)"
  fi

  # ------------------------------------------------------------ 3c. docs.rs
  # The three crates' API docs as docs.rs builds them (nightly rustdoc, `--cfg docsrs`, DOCS_RS=1,
  # the features of each crate's [package.metadata.docs.rs]), every rustdoc warning an error, then
  # checks that each feature-gated item is on the page with its "Available on crate feature X
  # only" mark (decision 0026; prints why and passes without a nightly toolchain). Its own build,
  # in $CARGO_TARGET_DIR/docsrs. In the background beside Miri and steps 4-6, at a lower priority
  # than them; its log is printed, and its result counted, before step 7.
  if [[ "${DLBIND_SKIP_DOCSRS:-0}" != 1 ]]; then
    step "3c/7 docs.rs build (scripts/docsrs.sh), in the background until step 7"
    DOCSRS_LOG="$(mktemp)"
    nice -n 10 "$ROOT/scripts/docsrs.sh" >"$DOCSRS_LOG" 2>&1 &
    DOCSRS_PID=$!
  else
    step "3c/7 skipped (DLBIND_SKIP_DOCSRS=1)"
  fi
else
  step "2-3c/7 skipped (DLBIND_SKIP_RUST=1)"
fi

# ---------------------------------------------------------------- 4. demo
step "4/7 build + install dlbind_demo (maturin develop --profile ci)"
maturin develop "${PROFILE[@]}" -m "$ROOT/examples/tensor/Cargo.toml"
"$PY" -c 'import dlbind_demo; print("dlbind_demo from", dlbind_demo.__file__)'

# ---------------------------------------------------------------- 5. pytest
step "5/7 pytest tests/python"
# Two pytest-xdist workers (DLBIND_PYTEST_WORKERS; 0: none), as in the matrix.
XDIST=(); [[ "${DLBIND_PYTEST_WORKERS:-2}" != 0 ]] && XDIST=(-n "${DLBIND_PYTEST_WORKERS:-2}")
check "pytest" "$PY" -m pytest "$ROOT/tests/python" -q -p no:cacheprovider -rfEs "${XDIST[@]}" ${PYTEST_EXTRA[@]+"${PYTEST_EXTRA[@]}"}

# ---------------------------------------------------------------- 5b. memcheck
step "5b/7 valgrind memcheck subset (scripts/memcheck.sh; --full for the long run)"
check "memcheck" env MEMCHECK_PYTHON="$PY" "$ROOT/scripts/memcheck.sh"
# The checker itself: a planted leak and a planted double free must both be reported (~20 s).
check "memcheck self-test" env MEMCHECK_PYTHON="$PY" "$ROOT/scripts/memcheck.sh" --self-test

# ---------------------------------------------------------------- 5c. benchmark smoke runs
# The benchmarks are information, never pass/fail on their numbers; they run here once, small,
# so that they cannot rot: the instruction counter (callgrind, N = 200, a few rows; without
# valgrind it says so and exits 0), its table written to a scratch copy of bench/results.md.
step "5c/7 benchmark smoke run (bench/bench_instructions.py --quick)"
SMOKE_DIR="$(mktemp -d)"
cp "$ROOT/bench/results.md" "$SMOKE_DIR/results.md"
check "bench_instructions smoke run" "$PY" "$ROOT/bench/bench_instructions.py" --quick --write "$SMOKE_DIR/results.md"
check "bench_instructions smoke table written" grep -q "BEGIN bench_instructions.py" "$SMOKE_DIR/results.md"
# Reports anyone can reproduce (issue 52): no absolute machine path in bench/results*.md.
check "bench reports hold no machine paths" "$PY" "$ROOT/bench/check_reports.py"
rm -rf "$SMOKE_DIR"

# ---------------------------------------------------------------- 6. packaging
if [[ "${DLBIND_SKIP_DOWNSTREAM:-0}" != 1 ]]; then
  step "6/7 packaged crates, the downstream crate, the installed CLI (scripts/downstream.sh)"
  check "downstream" "$ROOT/scripts/downstream.sh"
else
  step "6/7 skipped (DLBIND_SKIP_DOWNSTREAM=1)"
fi

# ---------------------------------------------------------------- 6b. the PyO3 range
# The demo and the pytest suite at both ends of the PyO3 range dlbind's requirement admits
# (issue 42, decision 0017): an end equal to Cargo.lock's pyo3 is what steps 4-5 built and
# tested; any other is built in a copy of the tree and tested (scripts/pyo3_range.sh).
if [[ "${DLBIND_SKIP_PYO3_RANGE:-0}" != 1 ]]; then
  step "6b/7 both ends of the PyO3 range (scripts/pyo3_range.sh --skip-locked)"
  check "pyo3 range" env VENV="$VENV" "$ROOT/scripts/pyo3_range.sh" --skip-locked
else
  step "6b/7 skipped (DLBIND_SKIP_PYO3_RANGE=1)"
fi

# ---------------------------------------------------------------- 3b. Miri's result
if [[ -n "${MIRI_PID:-}" ]]; then
  step "3b/7 Miri: waiting for it, then its log"
  MIRI_RC=0; wait "$MIRI_PID" || MIRI_RC=$?
  cat "$MIRI_LOG"; rm -f "$MIRI_LOG"
  if [[ "$MIRI_RC" != 0 ]]; then echo "!! miri FAILED"; FAILED+=("miri"); fi
fi

# ---------------------------------------------------------------- 3c. docs.rs's result
if [[ -n "${DOCSRS_PID:-}" ]]; then
  step "3c/7 docs.rs build: waiting for it, then its log"
  DOCSRS_RC=0; wait "$DOCSRS_PID" || DOCSRS_RC=$?
  cat "$DOCSRS_LOG"; rm -f "$DOCSRS_LOG"
  if [[ "$DOCSRS_RC" != 0 ]]; then echo "!! docs.rs build FAILED"; FAILED+=("docs.rs build"); fi
fi

# ---------------------------------------------------------------- 7. interpreter matrix
# Every other CPython a user runs (issue 32): 3.12, 3.13 (pyenv), 3.14 (Debian sid chroot), one
# abi3 wheel under 3.11-3.14, compile checks of macOS and of the Windows refusal, and of
# free-threaded 3.14t. Runs last: it leaves the abi3 demo in .venv.
if [[ -n "${PREP_PID:-}" ]]; then
  wait "$PREP_PID" || true
  echo "matrix venvs, made in the background:"; cat "$PREP_LOG"; rm -f "$PREP_LOG"
fi
if [[ "${DLBIND_SKIP_MATRIX:-0}" != 1 ]]; then
  step "7/7 interpreter matrix (scripts/matrix.sh ${DLBIND_MATRIX:-3.12 3.13 3.14 abi3 targets 3.14t})"
  export DLBIND_MATRIX_SKIP_DOWNSTREAM="${DLBIND_MATRIX_SKIP_DOWNSTREAM:-${DLBIND_SKIP_DOWNSTREAM:-0}}"
  # shellcheck disable=SC2086
  check "interpreter matrix" "$ROOT/scripts/matrix.sh" ${DLBIND_MATRIX:-}
else
  step "7/7 skipped (DLBIND_SKIP_MATRIX=1)"
fi

if [[ ${#FAILED[@]} -gt 0 ]]; then
  step "FAILED after $((SECONDS - T0)) s: ${FAILED[*]}"
  exit 1
fi
step "all steps passed in $((SECONDS - T0)) s"
