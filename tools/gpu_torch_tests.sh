#!/usr/bin/env bash
# The PyTorch-tests GPU check (issue 17, docs/validation.md): PyTorch's own
# DataLoader tests (all of test_dataloader.py) and the CUDA copy tests of
# test_cuda.py and test_torch.py (picked by name: to, copy, pin, pinned,
# non_blocking, is_pinned, memory), run plain, preloaded (LD_PRELOAD
# libpinscope.so, PINSCOPE_OUT set) and under PINSCOPE_PIN=1
# PINSCOPE_PIN_MIN=4K (every copy's buffer pinned); outcomes compared per
# test id (tools/torch_tests.py). Each file's tests are sharded over
# processes (cores / 3 per mode for the largest file), as many at once as
# cores; a test running TEST_TIMEOUT (30) s is `timeout` in that mode. A
# test that differs is run again alone in each mode, in time kept for that.
# What counts is a difference between modes: version skew between the test
# files (2.6) and the installed torch fails a test in every mode; names the
# installed torch.testing._internal lacks are supplied as 2.6 defined them
# (tools/torch_tests_compat.py, every mode alike, listed in the summary).
#
# Runs on the GPU machine from the repo root with .gpu carried: the test
# files in .gpu/ext/torch-tests (tools/gpu_fetch_torch_tests.sh, here) and,
# when the shim is not built yet at $PS_PREFIX (/tmp/ps), the .debs of
# tools/gpu_fetch_debs.sh for tools/gpu_build.sh (as gpu_pipeline.sh's build).
#
#   OUT=$OUT DEADLINE=540 timeout 590 bash tools/gpu_torch_tests.sh   (carry [".gpu"])
#
# The pool of registered slots (issue 15) against PyTorch's DataLoader tests:
#   TORCH_TEST_MODES=plain,pool TORCH_TEST_FILES=test_dataloader.py ... gpu_torch_tests.sh
#
# Here, as far as a CPU goes (Debian 12's torch 1.13 with its own tests):
#   tools/gpu_fetch_torch_tests.sh --version 1.13 /tmp/tt113
#   PY=/usr/bin/python3 TORCH_TESTS=/tmp/tt113 PS_PREFIX=build \
#     TORCH_TEST_FILES=test_dataloader.py tools/gpu_torch_tests.sh
# and for the pool, whose torch never calls CUDA there, with the CUDA
# runtime double loaded and copied through in every mode (--cudart):
#   ... TORCH_TEST_MODES=plain,pool TORCH_TEST_CUDART=build/fake_cudart13/libcudart.so.13
#
# TORCH_TEST_ARGS: more of tools/torch_tests.py's options (--shards 8
# --reserve 60, say).
#
# DEADLINE: seconds since the start by which everything, the pack included,
# is done (default 540, inside one device call). $OUT gets one file,
# torch-tests.tgz: the log, summary.txt, outcomes.tsv, every test process's
# log. The summary ends with per file how many tests ran in every mode and
# "complete: N of M tests ran in every mode". Exit status:
# tools/torch_tests.py's (0 no difference and every test ran in every mode,
# 1 a difference or tests left unrun, 2 no check).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/pinscope-out}"
W=/tmp/pstt
PREFIX=${PS_PREFIX:-/tmp/ps}
TESTS=${TORCH_TESTS:-.gpu/ext/torch-tests}
PY=${PY:-python3}
DEADLINE=${DEADLINE:-540}
rm -rf "$W"; mkdir -p "$OUT" "$W"
exec > >(tee -a "$W/torch-tests.log") 2>&1
step() { echo; echo "=== $* ($(date +%T), ${SECONDS} s)"; }
pack() {
  step "pack"
  (cd "$W" && tar czf "$OUT/torch-tests.tgz" --exclude='runs' .)
  ls -la "$OUT"
}

step "machine"
nvidia-smi -L 2>/dev/null || echo "no nvidia-smi"
nproc
$PY -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda,
  "available", torch.cuda.is_available(), "python", sys.version.split()[0])' || { echo "no torch in $PY"; pack; exit 2; }
$PY -c 'import pytest; print("pytest", pytest.__version__)' 2>/dev/null || echo "no pytest: the unittest driver runs the tests"
if [ ! -f "$TESTS/test_dataloader.py" ]; then
  echo "no $TESTS/test_dataloader.py: run tools/gpu_fetch_torch_tests.sh where there is network, carry .gpu"
  pack; exit 2
fi
cat "$TESTS/SOURCE" 2>/dev/null

if [ ! -f "$PREFIX/lib/libpinscope.so" ]; then
  step "build"; PINSCOPE_PREFIX="$PREFIX" bash tools/gpu_build.sh || { pack; exit 2; }
fi

step "tests"
left=$(( DEADLINE - SECONDS - 30 ))
[ "$left" -gt 60 ] || { echo "DEADLINE=$DEADLINE leaves ${left} s for the tests"; pack; exit 2; }
$PY tools/torch_tests.py run --tests "$TESTS" --shim "$PREFIX/lib/libpinscope.so" \
  --pinscope "$PREFIX/bin/pinscope" --work "$W" --python "$(command -v "$PY")" \
  --time "$left" --test-timeout "${TEST_TIMEOUT:-30}" \
  --files "${TORCH_TEST_FILES:-test_dataloader.py,test_cuda.py,test_torch.py}" \
  --modes "${TORCH_TEST_MODES:-plain,preload,pin}" ${TORCH_TEST_CUDART:+--cudart "$TORCH_TEST_CUDART"} \
  ${TORCH_TEST_ARGS:-}
rc=$?
echo "torch_tests.py exit $rc"
pack
exit $rc
