#!/usr/bin/env bash
# The adapters (issue 34), Rust side: their integration tests against the real crates (ndarray,
# image, safetensors, arrow, candle, cudarc on the recording fake GPU runtime), the adapters'
# unit tests and doc examples, clippy -D warnings and rustdoc with every adapter feature on.
# Called by scripts/test.sh (step 3b); runs alone too. One feature set for all of them, in the
# release profile the rest of the test command builds, so nothing is compiled twice.
#
# The Python side is tests/python/test_adapter_*.py, in the pytest run against the demo (whose
# default features include arrow, candle, image and safetensors; cudarc: its `cuda` feature).
# The one real-GPU test prints why it skipped when no CUDA driver is present.
# Environment: CARGO_TARGET_DIR, CARGO_BUILD_JOBS (passed through to cargo).
set -euo pipefail
cd "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

FEATURES="ndarray,image,safetensors,arrow,candle,cudarc,test-util"
TESTS=(--test adapter_ndarray --test adapter_image --test adapter_safetensors
       --test adapter_arrow --test adapter_candle --test adapter_cudarc)

echo "== cargo test -p dlbind --features $FEATURES: adapter tests, unit tests, doc examples"
cargo test --release -q -p dlbind --features "$FEATURES" "${TESTS[@]}"
cargo test --release -q -p dlbind --features "$FEATURES" --lib -- adapters::
cargo test --release -q -p dlbind --features "$FEATURES" --doc adapters::

echo "== cargo clippy -D warnings: dlbind with every adapter, the demo with and without cuda"
cargo clippy --release -q -p dlbind --features "$FEATURES" --all-targets -- -D warnings
cargo clippy --release -q -p dlbind-demo --all-targets -- -D warnings
cargo clippy --release -q -p dlbind-demo --features cuda --all-targets -- -D warnings

echo "== rustdoc -D warnings with every adapter"
RUSTDOCFLAGS="-D warnings" cargo doc -q --no-deps -p dlbind --features "${FEATURES%,test-util}" --document-private-items
echo "adapters: ok"
