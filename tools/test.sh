#!/usr/bin/env bash
# Builds pinscope and runs every test that needs no GPU (ctest). This is the
# test command of README.md and of CI (.ci/run).
#   tools/test.sh [BUILD_DIR]     (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
tools/deps.sh
build="${1:-build}"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo ${CUDA_HOME:+-DCUDAToolkit_ROOT=$CUDA_HOME}
cmake --build "$build" -j"$(nproc)"
ctest --test-dir "$build" --output-on-failure -j"$(nproc)" --timeout 600
