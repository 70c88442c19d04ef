# Sourced by scripts/test.sh and scripts/matrix.sh: every feature of the workspace, in one set.
# Each test, lint, doc and compile-check run builds dlbind once with it (the features are
# additive), so these runs share their artifacts.
# shellcheck disable=SC2034
ALL_FEATURES="dlbind/ndarray,dlbind/image,dlbind/safetensors,dlbind/arrow,dlbind/candle,dlbind/cudarc,dlbind/test-util,dlbind-demo/cuda"
