#!/usr/bin/env bash
# The README's own types, exactly as written there, on one interpreter: `Frame` (module `frames`)
# and `Samples` (module `my_arrays`) from examples/downstream, built as a user builds them
# (outside this workspace, so none of its .cargo/config.toml reaches the build; release profile
# of the downstream crate, no tuning call), against this checkout's dlbind and dlbind-macros.
# Then the instruction rows of both (bench/bench_instructions.py), written as this interpreter's
# section of bench/results-readme-types.md. Never a pass/fail test.
#
#   bench/readme_types.sh PYTHON     # e.g. .venv/bin/python, .venv-py3.13/bin/python: a venv
#                                    # with the pinned peers and maturin (scripts/matrix.sh's)
#   scripts/py314.sh run 'bench/readme_types.sh .venv-py3.14/bin/python'   # 3.14, in its chroot
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
V="$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
WORK="${TMPDIR:-/var/tmp}/dlbind-readme-types-py$V"
case "$WORK/" in "$ROOT"/*) echo "TMPDIR must lie outside $ROOT" >&2; exit 2 ;; esac
rm -rf "$WORK/downstream" && mkdir -p "$WORK"
cp -r "$ROOT/examples/downstream" "$WORK/downstream"
# The crate's [patch.crates-io] points at packaged copies (scripts/downstream.sh); here at the
# checkout's crates, which compile the same sources.
sed -i "s#^dlbind = { path = .*#dlbind = { path = \"$ROOT/runtime\" }#; s#^dlbind-macros = { path = .*#dlbind-macros = { path = \"$ROOT/macros\" }#" \
  "$WORK/downstream/Cargo.toml"
grep -q "path = \"$ROOT/runtime\"" "$WORK/downstream/Cargo.toml" || { echo "could not patch the downstream crate" >&2; exit 1; }
unset RUSTFLAGS CARGO_ENCODED_RUSTFLAGS
export PYO3_PYTHON="$PY"
(cd "$WORK/downstream" && CARGO_TARGET_DIR="$WORK/target" "$(dirname "$PY")/maturin" build --release -q -o "$WORK/wheels")
rm -rf "$WORK/site" && "$PY" -m zipfile -e "$(ls -t "$WORK"/wheels/dlbind_downstream-*.whl | head -1)" "$WORK/site"
# One shared library, two modules: a link named frames<EXT_SUFFIX> makes `frames` importable.
so="$(ls "$WORK"/site/my_arrays/my_arrays*.so)"
ln -sf "$so" "$WORK/site/frames$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
cd "$ROOT"
PYTHONPATH="$WORK/site" JAX_PLATFORMS=cpu "$PY" bench/bench_instructions.py --module frames --module my_arrays \
  --rows export_legacy,export_versioned,device,np_from_ours,import_numpy,import_own,import_foreign_table,plain_export_versioned,plain_device,plain_np_from_ours \
  --per-interpreter bench/results-readme-types.md
