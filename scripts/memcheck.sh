#!/usr/bin/env bash
# Valgrind memcheck of dlbind_demo's DLPack export / import paths (issue 6).
#
#   scripts/memcheck.sh                 # CI subset (DLBIND_MEMCHECK_CYCLES, default 60 cycles, run
#                                       # twice: free lists on, then off with DLBIND_FREELIST=0;
#                                       # ~100 s; every path of the driver runs within 20 cycles)
#   scripts/memcheck.sh --full          # long run: 5000 cycles (~5 min)
#   scripts/memcheck.sh --cycles N      # any number of driver cycles
#   scripts/memcheck.sh --self-test     # plant a leak and a use-after-free in dlbind's memory
#                                       # (one run); passes only if the checker reports both
#   scripts/memcheck.sh --gen-supp      # regenerate tests/memcheck/python.supp from a baseline
#                                       # run of the driver without dlbind_demo
#   scripts/memcheck.sh --pytest [ARGS] # the pytest suite (default test_hostile.py, test_capsule.py,
#                                       # test_lookup_cache.py of tests/python; ~10 min) under memcheck
#
# Runs tests/memcheck/driver.py (not pytest) under valgrind --tool=memcheck with
# PYTHONMALLOC=malloc, --leak-check=full --errors-for-leak-kinds=definite, the suppressions in
# tests/memcheck/*.supp and XML output, then tests/memcheck/check.py fails on any invalid
# read / write / free, use of an uninitialised value or definitely lost block whose stack has a
# frame from the dlbind_demo extension (object file or Rust symbol matching `dlbind`).
# Needs dlbind_demo installed in the venv (scripts/test.sh step 4 or maturin develop).
#
# Environment: MEMCHECK_PYTHON (default <repo>/.venv/bin/python), VALGRIND (default valgrind),
# MEMCHECK_OUT (directory for the XML and logs; default a fresh /tmp/dlbind-memcheck.*),
# DLBIND_MEMCHECK_CYCLES (default cycles), MEMCHECK_EXTRA (extra driver arguments, e.g. --no-tvm),
# DLBIND_SKIP_MEMCHECK=1 (skip, as scripts/test.sh's step 5b does then).
# Exit: 0 clean (or valgrind missing: skipped with a message), 1 findings or the driver failed,
# 2 valgrind did not finish.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
HERE="$ROOT/tests/memcheck"
PY="${MEMCHECK_PYTHON:-$ROOT/.venv/bin/python}"
VALGRIND="${VALGRIND:-valgrind}"
CYCLES="${DLBIND_MEMCHECK_CYCLES:-60}"
MODE=run
while [[ $# -gt 0 ]]; do
  case "$1" in
    --full) CYCLES=5000 ;;
    --cycles) CYCLES="$2"; shift ;;
    --cycles=*) CYCLES="${1#*=}" ;;
    --self-test) MODE=selftest ;;
    --gen-supp) MODE=gensupp ;;
    --pytest) MODE=pytest; shift; PYTEST_ARGS=("$@"); break ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) echo "memcheck: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done

if [[ "${DLBIND_SKIP_MEMCHECK:-0}" == 1 ]]; then
  echo "memcheck: SKIPPED (DLBIND_SKIP_MEMCHECK=1)"
  exit 0
fi
if ! command -v "$VALGRIND" >/dev/null 2>&1; then
  echo "memcheck: SKIPPED: valgrind not found (install it: apt-get install valgrind)"
  exit 0
fi
OUT="${MEMCHECK_OUT:-$(mktemp -d /tmp/dlbind-memcheck.XXXXXX)}"
mkdir -p "$OUT"
# shellcheck disable=SC2206
EXTRA=(${MEMCHECK_EXTRA:-})

SUPP=()
for f in "$HERE"/*.supp; do [[ -f "$f" ]] && SUPP+=("--suppressions=$f"); done

# vg NAME [valgrind options] -- driver arguments: one driver run under memcheck, XML in $OUT/NAME.xml.
# (PROGRAM overrides the driver: `PROGRAM="-m pytest" vg ...` runs pytest instead.)
vg() {
  local name="$1"; shift
  local vgopts=()
  while [[ "$1" != -- ]]; do vgopts+=("$1"); shift; done
  shift
  local t0=$SECONDS rc=0
  PYTHONMALLOC=malloc PYTHONFAULTHANDLER=1 "$VALGRIND" --tool=memcheck \
    --leak-check=full --show-leak-kinds=definite --errors-for-leak-kinds=definite \
    --num-callers=40 --xml=yes --xml-file="$OUT/$name.xml" --log-file="$OUT/$name.log" \
    ${SUPP[@]+"${SUPP[@]}"} ${vgopts[@]+"${vgopts[@]}"} \
    "$PY" ${PROGRAM:-"$HERE/driver.py"} "$@" >"$OUT/$name.out" 2>&1 || rc=$?
  echo "memcheck: [$name] driver $* -> exit $rc in $((SECONDS - t0)) s ($OUT/$name.{xml,log,out})"
  sed 's/^/    /' "$OUT/$name.out" | tail -n 20
  return "$rc"
}

case "$MODE" in
  gensupp)
    SUPP=()
    vg baseline --gen-suppressions=all -- --no-demo --cycles 20 ${EXTRA[@]+"${EXTRA[@]}"} || true
    "$PY" "$HERE/check.py" "$OUT/baseline.xml" --write-supp "$HERE/python.supp"
    ;;
  selftest)
    # One driver run plants both bugs (a leak, then a use after free); the checker must fail on
    # each kind. (Two runs would pay the imports under valgrind twice, ~40 s each.)
    drc=0; vg inject-both -- --cycles 1 --inject both ${EXTRA[@]+"${EXTRA[@]}"} || drc=$?
    crc=0; "$PY" "$HERE/check.py" "$OUT/inject-both.xml" >"$OUT/inject-both.check" 2>&1 || crc=$?
    head -n 1 "$OUT/inject-both.check"
    ok=1
    for want in Leak_DefinitelyLost 'Invalid(Read|Free)'; do
      if [[ $crc == 1 ]] && grep -Eq "^  \[$want\]" "$OUT/inject-both.check"; then
        echo "memcheck: self-test $want: caught (checker exit 1, driver exit $drc)"
      else
        echo "memcheck: self-test $want: NOT caught (checker exit $crc); see $OUT/inject-both.check"
        ok=0
      fi
    done
    [[ $ok == 1 ]] && { echo "memcheck: self-test PASSED"; exit 0; }
    echo "memcheck: self-test FAILED"; exit 1
    ;;
  pytest)
    T0=$SECONDS
    [[ ${#PYTEST_ARGS[@]} -gt 0 ]] || PYTEST_ARGS=("$ROOT/tests/python/test_hostile.py" "$ROOT/tests/python/test_capsule.py"
      "$ROOT/tests/python/test_lookup_cache.py")
    drc=0; PROGRAM="-m pytest" vg pytest -- -q -p no:cacheprovider -x "${PYTEST_ARGS[@]}" || drc=$?
    crc=0; "$PY" "$HERE/check.py" "$OUT/pytest.xml" || crc=$?
    if [[ $crc != 0 || $drc != 0 ]]; then
      echo "memcheck: FAILED (pytest exit $drc, checker exit $crc) after $((SECONDS - T0)) s; XML and log in $OUT"
      exit 1
    fi
    echo "memcheck: PASSED (pytest ${PYTEST_ARGS[*]}) in $((SECONDS - T0)) s"
    ;;
  run)
    # Twice: as users run it, then with the free lists off (DLBIND_FREELIST=0), where every
    # released object is really freed, so a use after release of one is an invalid access.
    T0=$SECONDS
    for run in driver driver-nofreelist; do
      drc=0
      if [[ $run == driver ]]; then
        vg "$run" -- --cycles "$CYCLES" ${EXTRA[@]+"${EXTRA[@]}"} || drc=$?
      else
        DLBIND_FREELIST=0 vg "$run" -- --cycles "$CYCLES" ${EXTRA[@]+"${EXTRA[@]}"} || drc=$?
      fi
      crc=0; "$PY" "$HERE/check.py" "$OUT/$run.xml" || crc=$?
      if [[ $crc == 0 && $drc != 0 ]]; then
        echo "memcheck: FAILED: the driver exited $drc under valgrind ($run; output above, $OUT/$run.out)"
        exit 1
      fi
      if [[ $crc != 0 ]]; then
        echo "memcheck: FAILED ($run, checker exit $crc) after $((SECONDS - T0)) s; XML and log in $OUT"
        exit "$crc"
      fi
    done
    echo "memcheck: PASSED ($CYCLES cycles, free lists on and off) in $((SECONDS - T0)) s"
    ;;
esac
