#!/usr/bin/env bash
# Builds pinscope and runs every test that needs no GPU (ctest), then builds
# the unit tests again with ASan and UBSan (PINSCOPE_SANITIZE, in
# BUILD_DIR-asan: no libpinscope.so, no preloaded e2e tests) and runs them.
# This is the test command of README.md and of CI (.ci/run).
#   tools/test.sh [BUILD_DIR]     (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
tools/deps.sh
build="${1:-build}"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo ${CUDA_HOME:+-DCUDAToolkit_ROOT=$CUDA_HOME}
cmake --build "$build" -j"$(nproc)"
ctest --test-dir "$build" --output-on-failure -j"$(nproc)" --timeout 600

# -O1 -g1 (line tables): sanitized code compiles about twice as fast as at
# -O2 -g, and its tests take seconds either way.
asan="${build%/}-asan"
cmake -S . -B "$asan" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPINSCOPE_SANITIZE=address,undefined \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  ${CUDA_HOME:+-DCUDAToolkit_ROOT=$CUDA_HOME}
cmake --build "$asan" -j"$(nproc)"
ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:strict_init_order=1}" \
  UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}" \
  ctest --test-dir "$asan" --output-on-failure -j"$(nproc)" --timeout 600
