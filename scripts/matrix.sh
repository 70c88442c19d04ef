#!/usr/bin/env bash
# The interpreter matrix (issue 32), run by scripts/test.sh after its CPython 3.11 run:
#
#   scripts/matrix.sh                  # every entry: 3.12 3.13 3.14 abi3 targets 3.14t
#   scripts/matrix.sh 3.13 abi3        # some of them
#
# Entries:
#   3.12, 3.13  pyenv's interpreters (or python3.X on PATH)           } full API: a venv with the
#   3.14        Debian sid's python3.14 in a chroot (scripts/py314.sh) } pinned peers, the demo
#               built with maturin and the whole pytest suite; on 3.14 (DLBIND_MATRIX_RUST_ON)
#               also the instruction smoke run, `cargo test -p dlbind` (the Rust tests that embed the
#               interpreter) and the downstream crate built against the packaged crates
#               (scripts/downstream.sh --crate-only) and its tests
#   abi3        two wheels of the demo built with pyo3/abi3-py311: the default one (the limited
#               API alone; abi3audit must find nothing) with the whole pytest suite under 3.11
#               and the tests that reach the shortcuts under 3.12, 3.13 and 3.14, and one with
#               dlbind's abi3-layouts feature with those tests under 3.11, 3.12, 3.13 and 3.14
#               (3.14 in the chroot); 3.14 also builds an abi3-py314
#               wheel with a class declared immutable_type (in its full-API entry)
#   targets     other operating systems, built but not run (no such machine here): macOS
#               (aarch64-apple-darwin) compiles dlbind and the demo (cargo check, a PyO3 config
#               file for CPython 3.11); Windows (x86_64-pc-windows-gnu, MinGW-w64) cross-compiles
#               the demo's abi3 wheel with maturin (its .pyd imports python3.dll and no
#               python3X.dll) and the downstream crate with the full API of CPython 3.11
#               (python311.dll). The targets' standard libraries come from rustup, MinGW-w64 from
#               apt-get (as root); where they cannot be had, the entry says why and skips
#   3.14t       free-threaded 3.14: compile check only (no such interpreter can be had here; PyO3
#               0.30 refuses 3.13t), through a PYO3_CONFIG_FILE with Py_GIL_DISABLED
#
# A missing interpreter fails its entry, naming it: the matrix is never narrowed silently.
# Needs what scripts/test.sh sets up: the packaged crates from its downstream step (for
# --crate-only) and its environment (CARGO_TARGET_DIR, PIP settings).
# Each pytest run uses pytest-xdist with DLBIND_PYTEST_WORKERS workers (default 2; 0: none), and
# prints the shortcut table of its interpreter and build mode first (test_interpreters.py checks
# it; its own print is not shown from a worker).
# Environment: DLBIND_MATRIX_SKIP_DOWNSTREAM=1 skips the downstream crate in each entry;
# DLBIND_MATRIX_RUST_ON (default "3.14") names the full-API entries that also run the Rust tests
# and the downstream crate ("3.12 3.13 3.14": all of them, ~8 min more).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
REQS="$ROOT/scripts/requirements-test.txt"
export JAX_PLATFORMS="${JAX_PLATFORMS:-cpu}"
export PIP_DISABLE_PIP_VERSION_CHECK=1
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
# shellcheck source=scripts/features.sh
source "$ROOT/scripts/features.sh"

WORKERS="${DLBIND_PYTEST_WORKERS:-2}"
XDIST=()
[[ "$WORKERS" != 0 ]] && XDIST=(-n "$WORKERS")
SHORTCUTS='import dlbind_demo as m
for n, a, d in m._testing.shortcuts(): print("  " + ("on " if a else "off") + "  " + n.ljust(24) + " " + d)'

# The Rust test targets that embed CPython (run per interpreter by full_api_entry).
PY_RUST_TESTS=(--lib --test '*_py' --test gpu_export --test import_checks --test import_raw)

FAILED=()
check() { local name="$1"; shift; if ! "$@"; then echo "!! $name FAILED"; FAILED+=("$name"); fi; }
say() { printf '\n--> [%s] %s\n' "$(date -u +%H:%M:%S)" "$*"; }

# The interpreter of a host entry, or empty.
host_python() {
  local v="$1" p
  for p in "$HOME"/.pyenv/versions/"$v".*/bin/python"$v" "$(command -v "python$v" || true)"; do
    [[ -n "$p" && -x "$p" ]] && { echo "$p"; return 0; }
  done
  return 0
}

# venv DIR from PYTHON with the pinned peers (a stamp skips the install when unchanged).
make_venv() {
  local python="$1" venv="$2"
  [[ -x "$venv/bin/python" ]] || "$python" -m venv "$venv"
  local stamp="$venv/.dlbind-requirements.sha256" want
  want="$( { cat "$REQS"; "$venv/bin/python" -c 'import sys; print(sys.version)'; } | sha256sum | cut -d' ' -f1)"
  if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    echo "venv $venv: requirements unchanged"
  else
    "$venv/bin/python" -m pip install -q -r "$REQS"
    echo "$want" > "$stamp"
  fi
}

# A PyO3 config file (FILE IMPLEMENTATION VERSION BUILD_FLAGS): it stands in for an interpreter
# that cannot be run here, for compile checks (cargo check links nothing).
pyo3_config() {
  printf '%s\n' "implementation=$2" "version=$3" shared=true abi3=false "build_flags=$4" \
    suppress_build_script_link_lines=true pointer_width=64 > "$1"
}

# One full-API entry, run where its interpreter is (the host, or inside the 3.14 chroot).
# $1: version; $2: interpreter; $3: target directory.
full_api_entry() {
  local v="$1" python="$2" target="$3"
  local venv="$ROOT/.venv-py$v" fails=()
  fcheck() { local name="$1"; shift; if ! "$@"; then echo "!! $v: $name FAILED"; fails+=("$name"); fi; }
  say "$v: venv with the pinned peers ($venv)"
  make_venv "$python" "$venv"
  local py="$venv/bin/python"
  export PYO3_PYTHON="$py" CARGO_TARGET_DIR="$target"
  # The Rust tests embed this interpreter: its shared library may sit outside the loader's path
  # (pyenv's lib/).
  LD_LIBRARY_PATH="$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("LIBDIR") or "")')${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export LD_LIBRARY_PATH
  # The Rust tests and the downstream crate run on the interpreters in DLBIND_MATRIX_RUST_ON
  # (default 3.14, the newest; 3.11, the oldest, ran them in test.sh steps 3 and 6): each is a
  # build of dlbind and PyO3 for that interpreter, ~4 min; the demo's whole pytest suite runs on
  # every interpreter and exercises the same interpreter-specific code through the demo.
  local rust_here=0
  [[ " ${DLBIND_MATRIX_RUST_ON:-3.14} " == *" $v "* ]] && rust_here=1
  if [[ "$rust_here" == 1 ]]; then
    say "$v: cargo test -p dlbind --features test-util, the tests that embed CPython $v"
    # The embedded interpreter imports numpy from this venv; there a missing numpy fails a test.
    # Only the test binaries that call into the interpreter (PY_RUST_TESTS): the others (the
    # adapters', which need features this build leaves out, the fuzzers, the GPU planner, the
    # layering scan) do the same on every interpreter and ran in step 3.
    fcheck "cargo test" env DLBIND_TEST_SITE="$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
      cargo test -q --profile ci -p dlbind --features test-util --no-fail-fast "${PY_RUST_TESTS[@]}"
  else
    say "$v: Rust tests and downstream crate not run here (DLBIND_MATRIX_RUST_ON=${DLBIND_MATRIX_RUST_ON:-3.14})"
  fi
  say "$v: dlbind_demo (maturin develop --profile ci), pytest tests/python"
  ( source "$venv/bin/activate" && maturin develop -q --profile ci -m "$ROOT/examples/tensor/Cargo.toml" ) \
    || { echo "!! $v: demo build FAILED"; return 1; }
  "$py" -c "$SHORTCUTS"
  fcheck "pytest" "$py" -m pytest "$ROOT/tests/python" -q -p no:cacheprovider -rfE "${XDIST[@]}"
  # The instruction counter's smoke run, where the Rust tests run: it differs between
  # interpreters only in the function it toggles callgrind on (3.14: PyRun_SimpleString), and
  # 3.11's ran in test.sh step 5c.
  if [[ "$rust_here" == 1 ]]; then
    say "$v: instruction smoke run"
    local smoke; smoke="$(mktemp -d)"; cp "$ROOT/bench/results.md" "$smoke/results.md"
    fcheck "bench smoke" "$py" "$ROOT/bench/bench_instructions.py" --quick --write "$smoke/results.md"
    rm -rf "$smoke"
  fi
  if [[ "$v" == 3.14 ]]; then
    # A class declared `immutable_type` in one abi3 wheel for 3.14 (the first abi3 version PyO3
    # accepts it in): dlbind cannot re-bind its methods there, and they must keep working.
    say "$v: abi3-py314 wheel with the demo's immutable_type class"
    local iw; iw="$(mktemp -d)"
    if ( source "$venv/bin/activate" && maturin build -q --profile ci -m "$ROOT/examples/tensor/Cargo.toml" \
           --no-default-features --features abi3-py314,immutable-type -i "$py" -o "$iw/wheel" ) \
       && "$py" -m zipfile -e "$iw"/wheel/*.whl "$iw/site"; then
      fcheck "pytest (immutable_type, abi3-py314)" env PYTHONPATH="$iw/site" \
        "$py" -m pytest "$ROOT/tests/python/test_immutable_type.py" "$ROOT/tests/python/test_interpreters.py" -q -p no:cacheprovider -rfEs
    else
      echo "!! $v: abi3-py314 wheel build FAILED"; fails+=("abi3-py314 wheel")
    fi
    rm -rf "$iw"
  fi
  if [[ "${DLBIND_MATRIX_SKIP_DOWNSTREAM:-0}" != 1 && "$rust_here" == 1 ]]; then
    say "$v: the downstream crate against the packaged crates"
    fcheck "downstream" env PYO3_PYTHON="$py" DOWNSTREAM_WORK="${DOWNSTREAM_WORK_BASE:-/var/tmp}/dlbind-downstream-py$v" \
      bash -c "source '$venv/bin/activate' && '$ROOT/scripts/downstream.sh' --crate-only"
  fi
  if [[ ${#fails[@]} -gt 0 ]]; then echo "!! $v: ${fails[*]}"; return 1; fi
  echo "$v: every check passed"
}

# The tests that reach the abi3-layouts shortcuts (capsules, the method descriptor's entry,
# keyword calls, foreign `__dlpack__` lookups, finalisation, hostile producers).
LAYOUT_TESTS=(test_interpreters.py test_capsule.py test_kwnames_cache.py test_lookup_cache.py
              test_negotiation.py test_versioned_fast.py test_lifetime.py test_hostile.py test_interop.py)

# The abi3 wheels under one interpreter's venv: the default (pure limited API) wheel with the
# whole suite on the oldest interpreter (3.11, the version it is built for) and LAYOUT_TESTS on
# the others (its code is the same on every version: no run-time version branch is left in it;
# 3.14's whole suite runs in its full-API entry), then the
# abi3-layouts wheel, whose shortcuts depend on the running version, with LAYOUT_TESTS on each.
abi3_run() {
  local v="$1" wheel="$2" layouts_wheel="$3"
  local venv="$ROOT/.venv-py$v" fails=()
  [[ "$v" == 3.11 ]] && venv="$ROOT/.venv"
  local py="$venv/bin/python"
  "$py" -m pip install -q --force-reinstall --no-deps "$wheel"
  "$py" -c 'import dlbind_demo, sys; print("abi3 dlbind_demo on", sys.version.split()[0], "from", dlbind_demo.__file__)'
  "$py" -c "$SHORTCUTS"
  if [[ "$v" == 3.11 ]]; then
    "$py" -m pytest "$ROOT/tests/python" -q -p no:cacheprovider -rfE "${XDIST[@]}" || fails+=("pytest")
  else
    ( cd "$ROOT/tests/python" && "$py" -m pytest "${LAYOUT_TESTS[@]}" -q -p no:cacheprovider -rfE "${XDIST[@]}" ) \
      || fails+=("pytest")
  fi
  "$py" -m pip install -q --force-reinstall --no-deps "$layouts_wheel"
  echo "abi3 wheel with abi3-layouts on $v:"
  "$py" -c "$SHORTCUTS"
  ( cd "$ROOT/tests/python" && "$py" -m pytest "${LAYOUT_TESTS[@]}" -q -p no:cacheprovider -rfE "${XDIST[@]}" ) \
    || fails+=("pytest (abi3-layouts)")
  if [[ ${#fails[@]} -gt 0 ]]; then echo "!! abi3 on $v: ${fails[*]}"; return 1; fi
  echo "abi3 on $v: every check passed"
}

# Windows (decision 0019), cross-compiled with MinGW-w64 and linked, never run: the demo's abi3
# wheel (maturin, pyo3/abi3-py311; the adapters are left out to keep the entry short: they are
# platform-independent Rust, compile-checked for macOS), whose .pyd must import python3.dll and
# no python3X.dll, and the downstream crate with the full API of CPython 3.11 (a PyO3 config file
# naming python311.dll; dlbind links CPython's private functions from it by raw-dylib, as PyO3
# links the public ones). Both in the shared target directory with the ci profile.
# $1: the target triple.
windows_entry() {
  local t="$1" x missing=()
  for x in x86_64-w64-mingw32-gcc x86_64-w64-mingw32-dlltool x86_64-w64-mingw32-objdump; do
    command -v "$x" >/dev/null || missing+=("$x")
  done
  if [[ ${#missing[@]} -gt 0 ]]; then
    if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null; then
      echo "SKIPPED: Windows ($t): ${missing[*]} missing, and this is not root with apt-get to install" \
           "MinGW-w64 (Debian: apt-get install gcc-mingw-w64-x86-64)"
      return 0
    fi
    say "Windows ($t): ${missing[*]} missing: apt-get install gcc-mingw-w64-x86-64"
    if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
             gcc-mingw-w64-x86-64; } >"$TARGET/apt-mingw.log" 2>&1; then
      tail -5 "$TARGET/apt-mingw.log"
      echo "SKIPPED: Windows ($t): apt-get could not install gcc-mingw-w64-x86-64 (log: $TARGET/apt-mingw.log)"
      return 0
    fi
  fi

  say "Windows ($t): the demo's abi3 wheel (maturin build --target $t)"
  local out="$TARGET/windows-wheel"
  rm -rf "$out"
  # No interpreter: maturin builds an abi3 wheel for another OS without one. pyo3's
  # generate-import-lib changes nothing in PyO3 0.30 (it links python3.dll by raw-dylib), and
  # keeps the build from needing an import library should a later PyO3 want one again.
  ( source "$ROOT/.venv/bin/activate" && unset PYO3_PYTHON PYO3_CONFIG_FILE \
      && CARGO_TARGET_DIR="$TARGET" maturin build -q --profile ci --target "$t" \
           -m "$ROOT/examples/tensor/Cargo.toml" --no-default-features --features abi3,pyo3/generate-import-lib \
           -o "$out" ) || { echo "!! Windows: the demo's abi3 wheel did not build"; return 1; }
  local wheel; wheel="$(ls "$out"/*-abi3-win_amd64.whl 2>/dev/null || true)"
  [[ -n "$wheel" ]] || { ls "$out"; echo "!! Windows: no *-abi3-win_amd64.whl in $out"; return 1; }
  "$ROOT/.venv/bin/python" -m zipfile -e "$wheel" "$out/unpacked"
  local pyd; pyd="$(find "$out/unpacked" -name '*.pyd')"
  [[ -n "$pyd" && "$(wc -l <<<"$pyd")" == 1 ]] \
    || { echo "!! Windows: the wheel holds no single .pyd: ${pyd:-none}"; return 1; }
  local dlls; dlls="$(x86_64-w64-mingw32-objdump -p "$pyd" | sed -n 's/^[[:space:]]*DLL Name: //p')"
  echo "$(basename "$wheel"): ${pyd#"$out/unpacked/"} imports $(tr '\n' ' ' <<<"$dlls")"
  grep -qix 'python3\.dll' <<<"$dlls" || { echo "!! Windows: the abi3 .pyd does not import python3.dll"; return 1; }
  if grep -iE '^python3[0-9]+t?(_d)?\.dll$' <<<"$dlls"; then
    echo "!! Windows: the abi3 .pyd imports a version's DLL (above), not python3.dll alone"; return 1
  fi

  say "Windows ($t): the downstream crate, full API of CPython 3.11 (python311.dll)"
  local wcfg="$TARGET/pyo3-config-3.11-windows.txt" ds="$TARGET/windows-downstream"
  printf '%s\n' implementation=CPython version=3.11 shared=true abi3=false lib_name=python311 \
    build_flags= suppress_build_script_link_lines=false pointer_width=64 > "$wcfg"
  # A copy whose [patch.crates-io] names the workspace's crates (scripts/downstream.sh builds the
  # packaged ones, on Linux), with the workspace's ci profile so that it shares the target
  # directory's artifacts.
  rm -rf "$ds" && cp -r "$ROOT/examples/downstream" "$ds" && rm -rf "$ds/packaged" "$ds/target"
  sed -i -e "s#^dlbind = { path = \"packaged/dlbind-0.1.0\" }#dlbind = { path = \"$ROOT/runtime\" }#" \
         -e "s#^dlbind-macros = { path = \"packaged/dlbind-macros-0.1.0\" }#dlbind-macros = { path = \"$ROOT/macros\" }#" \
         "$ds/Cargo.toml"
  if [[ "$(grep -c "path = \"$ROOT/" "$ds/Cargo.toml")" != 2 ]]; then
    grep -A3 'patch.crates-io' "$ds/Cargo.toml"; echo "!! Windows: the downstream crate's [patch.crates-io] was not rewritten"; return 1
  fi
  sed -n '/^\[profile\.ci/,/^$/p' "$ROOT/Cargo.toml" >> "$ds/Cargo.toml"
  ( cd "$ds" && PYO3_CONFIG_FILE="$wcfg" CARGO_TARGET_DIR="$TARGET" \
      cargo build -q --profile ci --target "$t" --lib ) \
    || { echo "!! Windows: the downstream crate did not build"; return 1; }
  local dll="$TARGET/$t/ci/my_arrays.dll"
  [[ -f "$dll" ]] || { echo "!! Windows: no $dll"; return 1; }
  dlls="$(x86_64-w64-mingw32-objdump -p "$dll" | sed -n 's/^[[:space:]]*DLL Name: //p')"
  echo "downstream my_arrays.dll imports $(tr '\n' ' ' <<<"$dlls")"
  grep -qix 'python311\.dll' <<<"$dlls" || { echo "!! Windows: the downstream crate does not import python311.dll"; return 1; }
  echo "Windows: the demo's abi3 wheel and the downstream crate cross-compile for $t (not run)"
}

entry() {
  local e="$1"
  case "$e" in
    3.12|3.13)
      local p; p="$(host_python "$e")"
      if [[ -z "$p" ]]; then
        echo "!! CPython $e is missing (looked for ~/.pyenv/versions/$e.*/bin/python$e and python$e on PATH)"
        return 1
      fi
      full_api_entry "$e" "$p" "$TARGET"
      ;;
    3.14)
      "$ROOT/scripts/py314.sh" run "scripts/matrix.sh --inside 3.14 '$TARGET'" \
        || { echo "!! the CPython 3.14 entry failed (scripts/py314.sh: exit 3 means no chroot, so no 3.14)"; return 1; }
      ;;
    abi3)
      local f
      for f in abi3 abi3-layouts; do
        say "abi3: clippy -D warnings of dlbind, the derive and the demo with dlbind-demo/$f"
        PYO3_PYTHON="$ROOT/.venv/bin/python" CARGO_TARGET_DIR="$TARGET" \
          cargo clippy -q --profile ci -p dlbind -p dlbind-macros -p dlbind-demo --features "dlbind-demo/$f" \
          -- -D warnings || { echo "!! abi3 clippy ($f) FAILED"; return 1; }
      done
      # The default wheel (pyo3/abi3-py311, the limited API of 3.11 alone) and the one with
      # dlbind's layout shortcuts (abi3-layouts).
      local out="$TARGET/abi3-wheel" wheels=()
      rm -rf "$out"
      for f in abi3 abi3-layouts; do
        say "abi3: wheel with dlbind-demo/$f"
        ( source "$ROOT/.venv/bin/activate" && PYO3_PYTHON="$ROOT/.venv/bin/python" \
            maturin build -q --profile ci -m "$ROOT/examples/tensor/Cargo.toml" --features "$f" \
            -i "$ROOT/.venv/bin/python" -o "$out/$f" ) || { echo "!! abi3 wheel build ($f) FAILED"; return 1; }
        wheels+=("$(ls "$out/$f"/*-abi3-*.whl)")
      done
      local wheel="${wheels[0]}" layouts_wheel="${wheels[1]}"
      echo "built $wheel and $layouts_wheel"
      # The default wheel is pure stable ABI: abi3audit finds no symbol outside the limited API
      # of 3.11 (issue 42). The abi3-layouts wheel finds its extra functions by name at run
      # time, so it links nothing more either; its report is printed.
      say "abi3audit (fails on any finding in the default wheel)"
      "$ROOT/.venv/bin/abi3audit" --strict --summary --verbose "$wheel" \
        || { echo "!! abi3audit: the default abi3 wheel uses more than the limited API"; return 1; }
      "$ROOT/.venv/bin/abi3audit" --summary "$layouts_wheel" || echo "abi3audit: findings in the abi3-layouts wheel (information)"
      local rc=0 v
      for v in 3.11 3.12 3.13; do
        say "abi3 wheels on $v"
        if [[ "$v" != 3.11 ]]; then
          local p; p="$(host_python "$v")"
          [[ -n "$p" ]] || { echo "!! CPython $v is missing"; rc=1; continue; }
          make_venv "$p" "$ROOT/.venv-py$v"
        fi
        abi3_run "$v" "$wheel" "$layouts_wheel" || rc=1
      done
      say "abi3 wheels on 3.14 (chroot)"
      "$ROOT/scripts/py314.sh" run "scripts/matrix.sh --inside-abi3 3.14 $wheel $layouts_wheel" || rc=1
      # The full-API demo goes back into the 3.11 venv for what runs after.
      return $rc
      ;;
    targets)
      local cfg="$TARGET/pyo3-config-3.11-cross.txt" t
      mkdir -p "$TARGET"
      pyo3_config "$cfg" CPython 3.11 ""
      for t in aarch64-apple-darwin x86_64-pc-windows-gnu; do
        if ! rustup target list --installed 2>/dev/null | grep -qx "$t" \
            && ! rustup target add "$t" >/dev/null 2>&1; then
          echo "SKIPPED: $t: rustup could not install its standard library (no rustup, or no network)"
          continue
        fi
        case "$t" in
          *-apple-*)
            say "macOS ($t): dlbind and the demo compile"
            PYO3_CONFIG_FILE="$cfg" CARGO_TARGET_DIR="$TARGET" cargo check -q --profile ci --target "$t" \
              -p dlbind -p dlbind-demo --features dlbind/test-util || return 1
            echo "macOS: dlbind and dlbind-demo compile for $t" ;;
          *-windows-*)
            windows_entry "$t" || return 1 ;;
        esac
      done
      ;;
    3.14t)
      say "3.14t: compile check (PYO3_CONFIG_FILE, Py_GIL_DISABLED)"
      local cfg="$TARGET/pyo3-config-3.14t.txt"
      mkdir -p "$TARGET"
      pyo3_config "$cfg" CPython 3.14 Py_GIL_DISABLED
      # In the shared target directory, with the lints' profile and feature set, so that only
      # PyO3's dependents are checked again (the dependencies' metadata is the lints'). PyO3's
      # build script runs again for this configuration (it reruns when PYO3_CONFIG_FILE
      # changes), and again for the next build after it: so this entry runs last.
      PYO3_CONFIG_FILE="$cfg" CARGO_TARGET_DIR="$TARGET" \
        cargo check -q --profile ci --workspace --all-targets --features "$ALL_FEATURES" || return 1
      # An unsupported interpreter is refused by name, not by errors deep inside dlbind.
      say "PyPy: refused with dlbind's compile_error!"
      local pypy="$TARGET/pyo3-config-pypy.txt" log="$TARGET/pypy-check.log"
      pyo3_config "$pypy" PyPy 3.11 ""
      if PYO3_CONFIG_FILE="$pypy" CARGO_TARGET_DIR="$TARGET" \
          cargo check -q --profile ci --workspace --features "$ALL_FEATURES" >"$log" 2>&1; then
        echo "!! dlbind compiled for PyPy"; return 1
      fi
      grep -q "dlbind supports CPython only: PyPy is not supported" "$log" \
        || { tail -20 "$log"; echo "!! PyPy: not refused by dlbind's message"; return 1; }
      echo "PyPy refused: $(grep -m1 'PyPy is not supported' "$log" | sed 's/^ *//')"
      ;;
    *) echo "unknown matrix entry $e"; return 2 ;;
  esac
}

case "${1:-}" in
  --inside)  # inside the chroot
    # The host's target directory when the chroot sees it (it mounts the checkout at the same
    # path): the crates that do not depend on pyo3 (candle, arrow, proptest, ...) are reused,
    # only pyo3's dependents are rebuilt for this interpreter, as between host entries. The
    # chroot runs binaries the host built (older glibc: fine); what it links itself is rebuilt
    # by the host's next build, whose pyo3 configuration differs.
    target="${3:-}"
    case "$target/" in "$ROOT"/*) ;; *) target="$ROOT/target/chroot-py$2" ;; esac
    full_api_entry "$2" "/usr/bin/python$2" "$target"; exit $? ;;
  --inside-abi3)
    make_venv "/usr/bin/python$2" "$ROOT/.venv-py$2"
    abi3_run "$2" "$3" "$4"; exit $? ;;
  --inside-venv)  # inside the chroot: only the venv (--prepare)
    make_venv "/usr/bin/python$2" "$ROOT/.venv-py$2"; exit $? ;;
  --prepare)
    # What the entries need from the network, made ahead (scripts/test.sh starts this in the
    # background at its step 1, while the Rust steps keep the cores busy): the venvs of 3.12
    # and 3.13, the 3.14 chroot and its venv. Each entry makes them again when this did not
    # (stamps skip what is done), so a failure here only costs time; it is printed.
    shift
    want=" ${*:-3.12 3.13 3.14 abi3} "
    for v in 3.12 3.13; do
      [[ "$want" == *" $v "* || "$want" == *" abi3 "* ]] || continue
      p="$(host_python "$v")"
      if [[ -n "$p" ]]; then make_venv "$p" "$ROOT/.venv-py$v" || echo "prepare: venv $v failed"; fi
    done
    if [[ "$want" == *" 3.14 "* || "$want" == *" abi3 "* ]]; then
      "$ROOT/scripts/py314.sh" run "scripts/matrix.sh --inside-venv 3.14" || echo "prepare: 3.14 chroot or venv failed"
    fi
    exit 0 ;;
esac

ENTRIES=("$@")
[[ ${#ENTRIES[@]} -gt 0 ]] || ENTRIES=(3.12 3.13 3.14 abi3 targets 3.14t)
T0=$SECONDS
for e in "${ENTRIES[@]}"; do
  T=$SECONDS
  say "matrix entry $e"
  check "matrix $e" entry "$e"
  echo "matrix entry $e: $((SECONDS - T)) s"
done
if [[ ${#FAILED[@]} -gt 0 ]]; then
  echo "matrix FAILED after $((SECONDS - T0)) s: ${FAILED[*]}"
  exit 1
fi
echo "matrix: every entry passed in $((SECONDS - T0)) s"
