#!/usr/bin/env bash
# Miri over the parts of the runtime that do not call into Python (issue 41): the copy kernels,
# layout and extents, dims, dtypes, the host allocator, the proof-token import slots, the
# adapters' Rust-side tests and the DLTensor validation fuzzer. docs/manual/testing.md says what
# runs, what does not and why.
#
#   scripts/miri.sh        # scripts/test.sh runs it as step 3b (DLBIND_SKIP_MIRI=1 skips it)
#
# Needs a rustup nightly toolchain with the miri and rust-src components; installs the
# components when they are missing. Where it cannot (no rustup, no nightly, no network, a
# nightly without Miri), it prints why and exits 0: the step is skipped, not failed.
#
# Tree Borrows (-Zmiri-tree-borrows): the copies run on rayon, whose crossbeam-epoch code trips
# Stacked Borrows in a way its maintainers document. Isolation stays on (no host files, clock
# or environment): the fuzzer's iteration count is set inside Miri (-Zmiri-env-set).
#
# Environment knobs (all optional):
#   DLBIND_MIRI_TOOLCHAIN=nightly   the toolchain to run Miri from
#   CARGO_TARGET_DIR=...            default <repo>/target; cargo miri builds into its miri/
#                                   subdirectory, apart from the ci-profile build
#   DLBIND_MIRI_JOBS=1              run the two test lanes one after the other (default: side by
#                                   side, one core each)
#   MIRIFLAGS=...                   more Miri flags, after the ones above
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

TOOLCHAIN="${DLBIND_MIRI_TOOLCHAIN:-nightly}"
skip() {
  echo "Miri step SKIPPED: $*"
  exit 0
}

command -v rustup >/dev/null 2>&1 || skip "rustup is not installed (Miri comes as a rustup component of a nightly toolchain)"
rustup run "$TOOLCHAIN" rustc --version >/dev/null 2>&1 \
  || skip "no '$TOOLCHAIN' toolchain (rustup toolchain install nightly --component miri,rust-src)"
installed="$(rustup component list --toolchain "$TOOLCHAIN" --installed 2>/dev/null || true)"
if ! grep -q '^miri' <<<"$installed" || ! grep -q '^rust-src' <<<"$installed"; then
  echo "installing the miri and rust-src components of '$TOOLCHAIN'"
  rustup component add miri rust-src --toolchain "$TOOLCHAIN" \
    || skip "could not install miri + rust-src for '$TOOLCHAIN' (no network, or this nightly ships no Miri)"
fi
# Miri's own sysroot (built once per toolchain into ~/.cache/miri, ~1 min; it fetches the
# standard library's dependencies, so it too needs the network the first time).
cargo "+$TOOLCHAIN" miri setup \
  || skip "cargo miri setup failed (no network to fetch the sysroot's crates?): run 'cargo +$TOOLCHAIN miri setup' to see why"

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
export MIRIFLAGS="-Zmiri-tree-borrows -Zmiri-env-set=DLBIND_FUZZ_ITERS=30 ${MIRIFLAGS:-}"
# The adapters whose Rust side runs under Miri (cudarc's tests all embed Python).
FEATURES="ndarray,image,safetensors,arrow,candle"
MIRI=(cargo "+$TOOLCHAIN" miri test -p dlbind --features "$FEATURES" --no-fail-fast)

# The library's unit tests, by module. Everything else in lib.rs's test binary either calls into
# Python (cpython, error, export::capsule) or is outside this step's scope; a test in these
# modules that is too slow under Miri says so with #[cfg_attr(miri, ignore = "...")].
LIB_MODULES=(alloc:: copy:: dims:: dtype:: layout:: extent:: storage:: import::slot adapters::)
# Integration test binaries whose Python-calling tests are ignored under Miri (each says so;
# `common::serial()` takes only its lock there).
TESTS=(adapter_arrow adapter_candle adapter_image adapter_ndarray adapter_safetensors fuzz_dltensor)
# Miri interprets on one thread: two lanes of about the same length (CPU seconds on the 2-vCPU
# VM: lib 125, ndarray 86, safetensors 45, candle 26, fuzz_dltensor 20, image 13, arrow 12) run
# side by side; DLBIND_MIRI_JOBS=1 runs them one after the other.
LANE1=(lib adapter_candle adapter_arrow)
LANE2=(adapter_ndarray adapter_safetensors adapter_image fuzz_dltensor)

T0=$SECONDS
echo "MIRIFLAGS=$MIRIFLAGS"
echo "--- build: cargo +$TOOLCHAIN miri test --no-run --lib ${TESTS[*]/#/--test=}"
"${MIRI[@]}" --no-run --lib "${TESTS[@]/#/--test=}" || exit 1
echo "built in $((SECONDS - T0)) s"

# Runs the lib tests of LIB_MODULES (for `lib`) and the named test binaries.
run_lane() {
  local rc=0 tests=() t
  for t in "$@"; do
    if [[ "$t" == lib ]]; then
      "${MIRI[@]}" --lib -- "${LIB_MODULES[@]}" || rc=1
    else
      tests+=("--test=$t")
    fi
  done
  if [[ ${#tests[@]} -gt 0 ]]; then
    "${MIRI[@]}" "${tests[@]}" || rc=1
  fi
  return "$rc"
}

status=0
if [[ "${DLBIND_MIRI_JOBS:-2}" == 1 ]]; then
  run_lane "${LANE1[@]}" || status=1
  run_lane "${LANE2[@]}" || status=1
else
  LOGS="$(mktemp -d)"
  T1=$SECONDS
  { rc=0; run_lane "${LANE1[@]}" >"$LOGS/1" 2>&1 || rc=1; echo "$rc $((SECONDS - T1))" >"$LOGS/1.rc"; } &
  { rc=0; run_lane "${LANE2[@]}" >"$LOGS/2" 2>&1 || rc=1; echo "$rc $((SECONDS - T1))" >"$LOGS/2.rc"; } &
  wait
  for n in 1 2; do
    read -r rc secs <"$LOGS/$n.rc"
    lane="LANE$n[*]"
    echo "--- lane $n: ${!lane} (exit $rc, $secs s)"
    cat "$LOGS/$n"
    [[ "$rc" == 0 ]] || status=1
  done
  rm -rf "$LOGS"
fi
echo "Miri: $((SECONDS - T0)) s"
exit "$status"
