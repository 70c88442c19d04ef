#!/usr/bin/env bash
# The ndarray, image and safetensors adapters (issue 34), Rust side: their integration tests
# against the real crates, the adapters' unit tests and doc examples, and clippy -D warnings
# with the three features (the lead's scripts/test.sh calls this; the Python side is
# tests/python/test_adapter_{ndarray,image,safetensors}.py in the pytest run).
#
#   scripts/test_adapters_a.sh            # from the repository root
#
# Environment: CARGO_TARGET_DIR as usual; CARGO (default cargo).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
CARGO="${CARGO:-cargo}"
FEATURES="ndarray,image,safetensors,test-util"

echo "== adapters (ndarray, image, safetensors): integration tests"
"$CARGO" test -p dlbind --features "$FEATURES" \
  --test adapter_ndarray --test adapter_image --test adapter_safetensors
echo "== adapters: unit tests (adapters::rust_owned)"
"$CARGO" test -p dlbind --features "$FEATURES" --lib adapters::
echo "== adapters: doc examples"
"$CARGO" test -p dlbind --features "$FEATURES" --doc adapters::
echo "== adapters: clippy -D warnings"
"$CARGO" clippy --release -p dlbind --features "$FEATURES" --lib \
  --test adapter_ndarray --test adapter_image --test adapter_safetensors -- -D warnings
"$CARGO" clippy --release -p dlbind-demo -- -D warnings
echo "== adapters: rustdoc -D warnings"
RUSTDOCFLAGS="-D warnings" "$CARGO" doc --no-deps -p dlbind --features ndarray,image,safetensors --document-private-items
echo "adapters (ndarray, image, safetensors): ok"
