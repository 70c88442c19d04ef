#!/usr/bin/env bash
# The arrow, candle and cudarc adapters (issue 34): their Rust tests against the real crates, and
# clippy -D warnings, with the adapter features on. Called by scripts/test.sh; runs alone too.
#
#   scripts/test_adapters_b.sh            # cargo test + clippy (release, as test.sh builds)
#
# The pytest files (tests/python/test_adapter_{arrow,candle,cudarc}.py) run with the rest of the
# suite against the demo, whose default features include arrow and candle (cudarc: its `cuda`
# feature). The cudarc tests use the recording fake GPU runtime; the one real-GPU test prints
# why it skipped when no CUDA driver is present.
# Environment: CARGO_BUILD_JOBS, CARGO_TARGET_DIR (passed through to cargo).
set -euo pipefail
cd "$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

FEATURES="arrow,candle,cudarc,test-util"
TESTS=(--test adapter_arrow --test adapter_candle --test adapter_cudarc)

echo "== cargo test -p dlbind --features $FEATURES (adapter tests + the adapters' unit tests)"
cargo test --release -q -p dlbind --features "$FEATURES" "${TESTS[@]}"
cargo test --release -q -p dlbind --features "$FEATURES" --lib -- adapters::arrow adapters::candle adapters::cudarc

echo "== cargo clippy -p dlbind --features $FEATURES --all-targets -D warnings"
cargo clippy --release -q -p dlbind --features "$FEATURES" --all-targets -- -D warnings
echo "== cargo clippy -p dlbind-demo (default features: arrow, candle; and cuda: cudarc) -D warnings"
cargo clippy --release -q -p dlbind-demo --all-targets -- -D warnings
cargo clippy --release -q -p dlbind-demo --features cuda --all-targets -- -D warnings
echo "adapters (arrow, candle, cudarc): ok"
