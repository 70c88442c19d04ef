#!/usr/bin/env bash
# The speed a user gets (issue 21, point 4). The workspace's .cargo/config.toml adds a
# code-placement flag (-x86-branches-within-32B-boundaries) that does not reach a crate that
# depends on dlbind. This builds the PACKAGED dlbind-demo crate (the same source) as a user
# would: outside the repository, against the unpacked dlbind .crate files, no RUSTFLAGS. Then
# it runs the instruction-count and timeit benchmarks on the workspace build and on the user
# build (the user build's dlbind_demo is put first on PYTHONPATH), plus the downstream module.
#
#   bench/user_build.sh [OUTDIR]      # default /tmp/dlbind-user-build; needs scripts/test.sh's
#                                     # venv with dlbind_demo and the downstream crate's my_arrays
#                                     # installed (scripts/downstream.sh)
# Never a pass/fail test.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-/tmp/dlbind-user-build}"
PY="$ROOT/.venv/bin/python"
export PYO3_PYTHON="$PY" JAX_PLATFORMS=cpu
MAIN_TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
cd "$ROOT" && cargo package --workspace --allow-dirty --no-verify -q 2>/dev/null
# Fresh result files: `--write` replaces only its own marked section and would keep older tables.
rm -rf "$OUT/src" "$OUT/site" "$OUT"/instr-*.md "$OUT"/timeit-*.md && mkdir -p "$OUT/src" "$OUT/site"
for c in dlbind dlbind-macros dlbind-demo; do
  tar xzmf "$MAIN_TARGET/package/$c-0.1.0.crate" -C "$OUT/src"
done
demo="$OUT/src/dlbind-demo-0.1.0"
cp "$ROOT/examples/tensor/pyproject.toml" "$demo/"
cat >> "$demo/Cargo.toml" <<'TOML'

[workspace]

[patch.crates-io]
dlbind = { path = "../dlbind-0.1.0" }
dlbind-macros = { path = "../dlbind-macros-0.1.0" }
TOML
# The workspace's release profile, which the packaged manifest does not carry.
printf '\n[profile.release]\nlto = "thin"\ncodegen-units = 4\n' >> "$demo/Cargo.toml"
cd "$demo"
unset RUSTFLAGS CARGO_ENCODED_RUSTFLAGS
CARGO_TARGET_DIR="$OUT/target" "$ROOT/.venv/bin/maturin" build --release -q -o "$OUT/wheels" -m "$demo/Cargo.toml"
"$PY" -m zipfile -e "$(ls -t "$OUT"/wheels/dlbind_demo-*.whl | head -1)" "$OUT/site"
cd "$ROOT"
echo "== instruction counts: workspace build of dlbind_demo, and the downstream module"
# The downstream crate's `frames` (the README's `Frame`, exactly as written) lives in the shared
# library `my_arrays` (src/root.rs); a link named frames<EXT_SUFFIX> makes it importable by name.
FRAMES="$OUT/frames-site" && rm -rf "$FRAMES" && mkdir -p "$FRAMES"
ln -s "$("$PY" -c 'import my_arrays; print(getattr(my_arrays, "my_arrays", my_arrays).__file__)')" \
  "$FRAMES/frames$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')"
PYTHONPATH="$FRAMES" "$PY" bench/bench_instructions.py --module dlbind_demo --module frames --write "$OUT/instr-workspace.md"
echo "== instruction counts: user build of dlbind_demo"
PYTHONPATH="$OUT/site" "$PY" bench/bench_instructions.py --module dlbind_demo --write "$OUT/instr-user.md"
echo "== timeit: workspace build, then user build"
"$PY" bench/bench_dlpack.py --out "$OUT/timeit-workspace.md"
PYTHONPATH="$OUT/site" "$PY" bench/bench_dlpack.py --out "$OUT/timeit-user.md"
echo "results in $OUT"
