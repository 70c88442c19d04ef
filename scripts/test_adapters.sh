#!/usr/bin/env bash
# The adapters (issue 34), Rust side: their integration tests against the real crates (ndarray,
# image, safetensors, arrow, candle, cudarc on the recording fake GPU runtime), the adapters'
# unit tests and doc examples, clippy -D warnings and rustdoc with every adapter feature on.
# scripts/test.sh runs the same tests, lints and docs in its one every-feature build (steps 2b
# and 3); this script runs the adapters' share alone, in the same `ci` profile.
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
cargo test --profile ci -q -p dlbind --features "$FEATURES" "${TESTS[@]}"
cargo test --profile ci -q -p dlbind --features "$FEATURES" --lib -- adapters::
cargo test --profile ci -q -p dlbind --features "$FEATURES" --doc adapters::

echo "== cargo clippy -D warnings: dlbind with every adapter, the demo with and without cuda"
cargo clippy --profile ci -q -p dlbind --features "$FEATURES" --all-targets -- -D warnings
cargo clippy --profile ci -q -p dlbind-demo --all-targets -- -D warnings
cargo clippy --profile ci -q -p dlbind-demo --features cuda --all-targets -- -D warnings

echo "== rustdoc -D warnings with every adapter"
RUSTDOCFLAGS="-D warnings" cargo doc -q --no-deps -p dlbind --features "${FEATURES%,test-util}" --document-private-items
echo "adapters: ok"
