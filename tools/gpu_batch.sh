#!/usr/bin/env bash
# Several GPU checks in one device call (docs/validation.md), each phase with
# its own log, packed into one tarball ($OUT/batch.tgz: the device tool
# returns few files). From the repo root with .gpu carried:
#
#   OUT=$OUT DEADLINE=540 timeout 590 bash tools/gpu_batch.sh build,kinds,wheel,compress
#
#   build     tools/gpu_build.sh -> /tmp/ps
#   kinds     .gpu/bin/cupti_kind_bench (tools/bench/cupti_kind_bench.cu, built
#             here with nvcc): each CUPTI kind's cost on a launch-bound loop,
#             300 and 1,000 kernels a step, KIND_ROUNDS (5) rounds interleaved
#   wheel     tools/gpu_wheel_check.sh (the wheel in .gpu/wheel)
#   compress  SKIP_BUILD=1 tools/gpu_compress_check.sh
#   torch     tools/gpu_torch_tests.sh (PyTorch's own tests, three modes)
#   cost      tools/gpu_cost_final.sh loops,input (issue 16's table)
#   costlong  the launch-bound loop long enough (ROUNDS=10 x MLP_STEPS=300) that
#             most of it runs after the first device-record window, with the
#             pinscope of the wheel phase's venv (no build needed)
#   hang      tools/gpu_hang_probe.sh: the PyTorch tests that hung under the
#             preload, with parts of the shim off (HANG_MODES)
#
# A phase that would start past DEADLINE seconds is skipped, so the pack at
# the end happens inside the device call's limit.
set -uo pipefail
cd "$(dirname "$0")/.."
phases="${1:-build,kinds,wheel,compress}"
FINAL_OUT="${OUT:-/tmp/pinscope-out}"
B=/tmp/psbatch
rm -rf "$B"; mkdir -p "$B" "$FINAL_OUT"
exec > >(tee -a "$B/batch.log") 2>&1
step() { echo; echo "=== $* ($(date +%T), ${SECONDS} s)"; }
pack() { step "pack"; tar -C "$B" -czf "$FINAL_OUT/batch.tgz" . && ls -l "$FINAL_OUT/batch.tgz"; }
trap pack EXIT
left() { echo $(( ${DEADLINE:-100000} - SECONDS )); }
# phase NAME SECONDS_NEEDED CMD...: runs CMD with OUT=$B/NAME when that much time is left.
phase() {
  local name="$1" need="$2"; shift 2
  if [ "$(left)" -lt "$need" ]; then echo "[$name] skipped: $(left) s left, needs $need"; return; fi
  step "$name"; mkdir -p "$B/$name"
  OUT="$B/$name" "$@"; echo "[$name] exit $?"
}
step "machine"; nvidia-smi -L; nproc
for p in ${phases//,/ }; do
  case "$p" in
    build) phase build 60 bash tools/gpu_build.sh ;;
    kinds)
      libdirs=$(python3 -c 'import site; print(" ".join(site.getsitepackages()))')
      cudart=$(find $libdirs -path '*nvidia*' -name 'libcudart.so.1[23]' 2>/dev/null | head -1)
      major=$(basename "$cudart" | sed 's/libcudart.so.//')
      cupti=$(find $libdirs -path '*nvidia*' -name "libcupti.so.$major" -not -path '*triton*' 2>/dev/null | head -1)
      echo "cudart=$cudart cupti=$cupti"
      for k in 300 1000; do
        phase kinds-k$k 60 env LD_LIBRARY_PATH="$(dirname "$cudart")" timeout 240 .gpu/bin/cupti_kind_bench \
          --cupti "$cupti" --kernels $k --steps $((120000 / k)) --rounds "${KIND_ROUNDS:-5}"
      done ;;
    wheel) phase wheel 120 env DEADLINE=$(( $(left) - 10 )) timeout $(( $(left) - 5 )) bash tools/gpu_wheel_check.sh ;;
    compress) phase compress 150 env SKIP_BUILD=1 REPS="${COMPRESS_REPS:-2}" timeout $(( $(left) - 5 )) bash tools/gpu_compress_check.sh ;;
    torch) phase torch 200 env DEADLINE=$(( $(left) - 40 )) timeout $(( $(left) - 5 )) bash tools/gpu_torch_tests.sh ;;
    costlong) phase costlong 120 env DEADLINE=$(( $(left) - 20 )) PS="${COST_PS:-/tmp/pswheel/venv/bin/pinscope}" \
                ROUNDS="${ROUNDS:-10}" MLP_STEPS="${MLP_STEPS:-300}" VARIANTS="${VARIANTS:-mlp12}" PROFILER_REPS=0 \
                timeout $(( $(left) - 5 )) bash tools/gpu_cost_final.sh loops ;;
    cost) phase cost 150 env DEADLINE=$(( $(left) - 30 )) timeout $(( $(left) - 5 )) bash tools/gpu_cost_final.sh loops,input ;;
    hang) phase hang 60 env TEST_TIMEOUT="${HANG_TIMEOUT:-40}" MODES="${HANG_MODES:-default nvml0 cupti0}" \
            timeout $(( $(left) - 5 )) bash tools/gpu_hang_probe.sh ;;
    *) echo "unknown phase $p" ;;
  esac
done
