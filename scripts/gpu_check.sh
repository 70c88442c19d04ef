#!/usr/bin/env bash
# The GPU checks, for a session that is lent a GPU machine (see docs/gpu-integration.md).
#
#   scripts/gpu_check.sh prepare   # here: the cp312 demo wheel, the gpu_cuda test binary and the
#                                  # pinned wheels the GPU image lacks, into .gpu/ and .whl/
#   scripts/gpu_check.sh run       # there (carry .gpu and .whl): driver tests, CUDA pytest files,
#                                  # compute-sanitizer, the whole suite, bench/bench_gpu.py
#
# The GPU image has Python 3.12 with torch, CuPy and JAX but no Rust, so everything is built here.
# .gpu/ and .whl/ are listed in .git/info/exclude (they are build outputs, not sources).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
case "${1:-}" in
prepare)
  set -e
  PY312="${PY312:-$(command -v python3.12)}"
  mkdir -p .gpu .whl .git/info
  grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || printf '/.gpu/\n/.whl/\n' >> .git/info/exclude
  rm -f .gpu/*.whl
  "${MATURIN:-.venv/bin/maturin}" build --release -m examples/tensor/Cargo.toml -i "$PY312" --features cuda -o .gpu
  bin=$(PYO3_PYTHON="$PY312" cargo test -p dlbind --features cuda --test gpu_cuda --no-run --release \
        --message-format=json 2>/dev/null | python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable"): print(m["executable"])' | tail -1)
  cp "$bin" .gpu/gpu_cuda
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl numpy==2.4.6 apache-tvm-ffi==0.1.15.post2 \
    array-api-strict==2.6.1 ml_dtypes==0.6.0
  ls -la .gpu .whl ;;
run)
  export PYTHONUNBUFFERED=1
  T0=$SECONDS
  t() { echo "=== [$((SECONDS-T0)) s] $*"; }
  t "machine"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .whl/*.whl .gpu/dlbind_demo-*.whl || exit 1
  export PYTHONPATH=/tmp/site
  python3 -c "import sys, numpy, torch, cupy, jax; print(sys.version.split()[0], 'numpy', numpy.__version__, 'torch', torch.__version__, 'cupy', cupy.__version__, 'jax', jax.__version__)"
  t "rust gpu_cuda"; timeout 90 .gpu/gpu_cuda --test-threads=1 2>&1 | tail -12
  t "test_cuda + test_cuda_peers (JAX on the GPU)"
  JAX_PLATFORMS= timeout 120 python3 -m pytest -q -p no:cacheprovider -rs tests/python/test_cuda.py tests/python/test_cuda_peers.py 2>&1 | tail -12
  t "compute-sanitizer gpu_cuda"
  timeout 120 compute-sanitizer --tool memcheck --leak-check full .gpu/gpu_cuda --test-threads=1 2>&1 | grep -E "SUMMARY|test result" | tail -4
  t "compute-sanitizer test_cuda.py"
  JAX_PLATFORMS=cpu timeout 150 compute-sanitizer --tool memcheck --leak-check full python3 -m pytest -q -p no:cacheprovider tests/python/test_cuda.py 2>&1 | grep -E "SUMMARY|passed|failed" | tail -4
  t "whole suite (the slowest files last: the first lent run took 360 s there)"
  JAX_PLATFORMS=cpu timeout "${SUITE_TIMEOUT:-400}" python3 -m pytest -q -p no:cacheprovider -rs --durations=10 tests/python 2>&1 | tail -25
  t "bench_gpu"; timeout 90 python3 bench/bench_gpu.py 2>&1 | tail -12
  t "done" ;;
*) sed -n '2,10p' "$0"; exit 2 ;;
esac
