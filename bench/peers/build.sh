#!/usr/bin/env bash
# Peer extensions for the instruction benchmark (issue 52): a nanobind module (bench/peers/nanobind)
# and a dlpark module (bench/peers/dlpark), built for ONE interpreter into a directory outside the
# repository, for `bench/bench_instructions.py --peers DIR`. Measurement harnesses only: never a
# test, never shipped, not part of scripts/test.sh (whose `--quick` smoke run needs none of this).
#
#   bench/peers/build.sh PYTHON                # full API: nanobind NB_STATIC LTO NOSTRIP (CMake
#                                              # Release), dlpark 0.10.0 + PyO3 0.30.1 (maturin
#                                              # --release, lto = "fat")
#   bench/peers/build.sh PYTHON --stable-abi   # nanobind STABLE_ABI (CPython >= 3.12 only),
#                                              # dlpark with PyO3's abi3-py311
#   scripts/py314.sh run 'bench/peers/build.sh .venv-py3.14/bin/python'   # 3.14, in its chroot
#
# Output: DIR = $DLBIND_PEERS_DIR, default ${TMPDIR:-/var/tmp}/dlbind-peers-pyX.Y (full API) or
# ...-pyX.Y-abi3; DIR/site holds the modules (nb_peer, dlpark_peer), DIR/peers.json what was built
# and, for a peer that did not build, why (the benchmark lists it in the table's notes), DIR/logs
# the build logs. The last line printed is DIR. Build tools come from PyPI, pinned, into a side
# venv ${TMPDIR:-/var/tmp}/dlbind-peers-tools-pyX.Y made from PYTHON (the project's venvs stay as
# they are); a C++ compiler (g++) and Rust (cargo) must be on PATH (in scripts/py314.sh's chroot,
# which has gcc only, g++ is installed with apt-get on the first build). One job at a time
# (CARGO_BUILD_JOBS=1, ninja -j1) unless DLBIND_PEERS_JOBS says otherwise.
# Exit status: 0 when the script ran (whether or not each peer built: see peers.json), 2 on usage.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
[[ $# -ge 1 ]] || { sed -n '2,22p' "$0"; exit 2; }
PY="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
MODE=full
case "${2:-}" in --stable-abi) MODE=abi3 ;; "") ;; *) echo "unknown option $2" >&2; exit 2 ;; esac
V="$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" || { echo "cannot run $PY" >&2; exit 2; }
BASE="${TMPDIR:-/var/tmp}"
OUT="${DLBIND_PEERS_DIR:-$BASE/dlbind-peers-py$V$([[ $MODE == abi3 ]] && echo -abi3)}"
TOOLS="$BASE/dlbind-peers-tools-py$V"
JOBS="${DLBIND_PEERS_JOBS:-1}"
case "$OUT/" in "$ROOT"/*) echo "the output directory must lie outside $ROOT" >&2; exit 2 ;; esac
# Pinned build tools (PyPI) and peer versions (the dlpark crate pins dlpark and PyO3 exactly).
NANOBIND=3.1.0 CMAKE=4.4.4 NINJA=1.13.2 MATURIN=1.16.0
mkdir -p "$OUT/site" "$OUT/logs" "$OUT/status"
rm -f "$OUT"/status/*.json "$OUT"/site/nb_peer* "$OUT"/site/dlpark_peer*
unset RUSTFLAGS CARGO_ENCODED_RUSTFLAGS
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-$JOBS}"

# status NAME ok|failed VERSION DETAIL: one peer's line of peers.json
status() {
  "$PY" - "$OUT/status/$1.json" "$1" "$2" "$3" "$4" <<'PYEOF'
import json, sys
path, name, st, ver, detail = sys.argv[1:]
json.dump({"name": name, "status": st, "version": ver, "detail": detail}, open(path, "w"))
PYEOF
}
# why LOG: the last informative lines of a failed step's log, one line
why() { grep -v '^\s*$' "$1" | tail -4 | tr '\n' ' ' | cut -c1-400; }

echo "peers: python $V ($MODE) -> $OUT"
tools_ok=1
if [[ ! -x "$TOOLS/bin/python" ]] && ! "$PY" -m venv "$TOOLS" >"$OUT/logs/venv.log" 2>&1; then
  tools_ok=0; tools_why="python -m venv failed: $(why "$OUT/logs/venv.log")"
elif ! "$TOOLS/bin/python" -m pip install -q --disable-pip-version-check "nanobind==$NANOBIND" \
    "cmake==$CMAKE" "ninja==$NINJA" "maturin==$MATURIN" >"$OUT/logs/tools.log" 2>&1; then
  tools_ok=0; tools_why="pip install of the build tools failed: $(why "$OUT/logs/tools.log")"
fi

# --- nanobind -------------------------------------------------------------------------------
nb() {
  local log="$OUT/logs/nanobind.log" b="$OUT/build-nanobind" abi=OFF
  [[ $tools_ok == 1 ]] || { status nanobind failed "$NANOBIND" "$tools_why"; return; }
  if [[ $MODE == abi3 ]]; then
    abi=ON
    if [[ "$("$PY" -c 'import sys; print(int(sys.version_info >= (3, 12)))')" != 1 ]]; then
      status nanobind failed "$NANOBIND" "nanobind's STABLE_ABI needs CPython >= 3.12 in its default (linked) mode; below it nanobind builds a full-API module instead"
      return
    fi
  fi
  local cxx="${CXX:-$(command -v g++ || command -v c++ || true)}"
  if [[ -z $cxx && -f /.dlbind-ready ]]; then
    # Inside scripts/py314.sh's chroot (its marker file), which carries gcc but no g++: install
    # g++ there now, on demand, so the chroot grows only for whoever builds the peers.
    echo "peers: no C++ compiler in the 3.14 chroot: apt-get install g++"
    if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null \
       && { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends g++ \
            || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends g++; }; } \
            >"$OUT/logs/apt-gxx.log" 2>&1; then
      cxx="$(command -v g++ || true)"
    else
      status nanobind failed "$NANOBIND" "no C++ compiler in the 3.14 chroot, and apt-get install g++ failed there: $(why "$OUT/logs/apt-gxx.log")"
      return
    fi
  fi
  [[ -n $cxx ]] || { status nanobind failed "$NANOBIND" "no C++ compiler (g++/c++) on PATH"; return; }
  rm -rf "$b"
  if "$TOOLS/bin/cmake" -S "$ROOT/bench/peers/nanobind" -B "$b" -G Ninja -DCMAKE_MAKE_PROGRAM="$TOOLS/bin/ninja" \
       -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$cxx" -DPython_EXECUTABLE="$TOOLS/bin/python" \
       -DPEER_STABLE_ABI=$abi >"$log" 2>&1 \
     && "$TOOLS/bin/cmake" --build "$b" -j "$JOBS" >>"$log" 2>&1; then
    local so; so="$(ls "$b"/nb_peer*.so 2>/dev/null | head -1)"
    if [[ -z $so ]]; then status nanobind failed "$NANOBIND" "no nb_peer*.so after the build"; return; fi
    if [[ $MODE == abi3 && $so != *.abi3.so ]]; then
      status nanobind failed "$NANOBIND" "asked for STABLE_ABI, got $(basename "$so")"; return
    fi
    cp "$so" "$OUT/site/"
    status nanobind ok "$NANOBIND" "CMake Release, nanobind_add_module($([[ $abi == ON ]] && echo 'STABLE_ABI ')NB_STATIC LTO NOSTRIP), $("$cxx" --version | head -1); $(basename "$so")"
  else
    status nanobind failed "$NANOBIND" "build failed: $(why "$log")"
  fi
}

# --- dlpark ---------------------------------------------------------------------------------
dp() {
  local log="$OUT/logs/dlpark.log" src="$OUT/src-dlpark" feat=()
  [[ $tools_ok == 1 ]] || { status dlpark failed 0.10.0 "$tools_why"; return; }
  command -v cargo >/dev/null || { status dlpark failed 0.10.0 "no cargo on PATH"; return; }
  [[ $MODE == abi3 ]] && feat=(--features abi3)
  # Built from a copy outside the repository: none of the workspace's .cargo/config.toml applies.
  rm -rf "$src" "$OUT/wheels-dlpark" && cp -r "$ROOT/bench/peers/dlpark" "$src" && rm -rf "$src/target"
  if (cd "$src" && PYO3_PYTHON="$PY" CARGO_TARGET_DIR="$OUT/target-dlpark" \
        "$TOOLS/bin/maturin" build --release --locked -i "$PY" "${feat[@]}" -o "$OUT/wheels-dlpark") >"$log" 2>&1; then
    local whl; whl="$(ls -t "$OUT"/wheels-dlpark/*.whl | head -1)"
    "$PY" -m zipfile -e "$whl" "$OUT/site" && rm -rf "$OUT"/site/dlpark_peer-*.dist-info
    status dlpark ok 0.10.0 "PyO3 0.30.1$([[ $MODE == abi3 ]] && echo ' abi3-py311'), maturin $MATURIN --release, lto = \"fat\", codegen-units = 1; $(basename "$whl")"
  else
    status dlpark failed 0.10.0 "build failed: $(why "$log")"
  fi
}

nb
dp
"$PY" - "$OUT" "$V" "$MODE" <<'PYEOF'
import glob, json, os, sys
out, v, mode = sys.argv[1:]
peers = [json.load(open(f)) for f in sorted(glob.glob(os.path.join(out, "status", "*.json")))]
mods = {"nanobind": "nb_peer", "dlpark": "dlpark_peer"}
for p in peers:
    p["module"] = mods[p["name"]]
json.dump({"python": v, "mode": mode, "peers": peers}, open(os.path.join(out, "peers.json"), "w"), indent=1)
for p in peers:
    print(f"  {p['name']}: {p['status']}: {p['detail']}")
PYEOF
echo "$OUT"
