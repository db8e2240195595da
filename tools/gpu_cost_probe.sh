#!/usr/bin/env bash
# Where pinscope's device tracing costs time on the GPU machine (issue 16,
# docs/benchmarks.md "Where the device tracing's time goes"). Runs from the
# repo root with .gpu carried (tools/gpu_fetch_debs.sh), in one device call:
#
#   DEADLINE=540 timeout 590 bash tools/gpu_cost_probe.sh build,bench,loop
#
#   build  tools/gpu_build.sh -> /tmp/ps (and /tmp/psbuild/bin/device_cost_bench)
#   bench  tools/bench/device_cost_bench against the real libcudart/libcupti
#          of the installed torch (K=300, C=4; K=1000 too)
#   loop   tools/bench/cupti_overhead.py --variant (mlp12: ~300 kernels/step; many: 1000+),
#          REPS (5) rounds interleaved over: no pinscope, pinscope default,
#          PINSCOPE_CUPTI=0, PINSCOPE_CUPTI_KERNELS=off, PINSCOPE_CUPTI_RUNTIME=0,
#          bare (kernels and runtime records off), torch.profiler (no pinscope)
#
# $OUT gets one tarball, gpu-cost-probe.tgz: the log, the bench tables,
# results.jsonl (one line per run) and summary.txt (medians and overheads).
# DEADLINE (seconds since the script began): later runs are skipped, so the
# pack at the end still happens inside the device call's limit.
set -uo pipefail
phases="${1:-build,bench,loop}"
has() { [[ ",$phases," == *",$1,"* ]]; }
OUT="${OUT:-/tmp/pinscope-out}"
W=/tmp/pscost
REPS="${REPS:-5}"
rm -rf "$W"; mkdir -p "$OUT" "$W"
exec > >(tee -a "$W/cost-probe.log") 2>&1
export PYTHONUNBUFFERED=1
PY=python3
PS=${PS:-/tmp/ps/bin/pinscope}
BENCH=${BENCH:-/tmp/psbuild/bin/device_cost_bench}
step() { echo; echo "=== $* ($(date +%T))"; }
pack() {
  step "pack"
  tar -C "$W" -czf "$OUT/gpu-cost-probe.tgz" . && ls -l "$OUT/gpu-cost-probe.tgz"
}
trap pack EXIT

step "machine"; nvidia-smi -L; nproc; free -g | head -2
$PY -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "python", sys.version.split()[0])'
if has build; then
  step "build"; bash tools/gpu_build.sh || exit 1
fi
[ -x "$PS" ] || { echo "no build at $PS: run the build phase first"; exit 1; }

if has bench; then
  step "device_cost_bench"
  # The CUDA runtime and CUPTI that torch loads (pip wheels: nvidia/cu13/lib).
  libdirs=$($PY -c 'import site; print(" ".join(site.getsitepackages()))')
  cudart=$(find $libdirs -path '*nvidia*' -name 'libcudart.so.1[23]' 2>/dev/null | head -1)
  # The CUPTI of the runtime's major version: triton carries a CUDA 12 one too.
  major=$(basename "$cudart" | sed 's/libcudart.so.//')
  cupti=$(find $libdirs -path '*nvidia*' -name "libcupti.so.$major" -not -path '*triton*' 2>/dev/null | head -1)
  echo "cudart=$cudart cupti=$cupti"
  # libunwind.so.8 of the build (next to libpinscope.so), so that the stack
  # rows unwind native frames as a traced job does.
  export LD_LIBRARY_PATH=/tmp/ps/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  if [ -x "$BENCH" ] && [ -n "$cudart" ] && [ -n "$cupti" ]; then
    timeout 120 "$BENCH" --cudart "$cudart" --cupti "$cupti" --kernels 300 --copies 4 --step-ms 4.43 |
      tee "$W/bench-k300.md"
    timeout 120 "$BENCH" --cudart "$cudart" --cupti "$cupti" --kernels 1000 --copies 4 --step-ms 10 |
      tee "$W/bench-k1000.md"
  else
    echo "bench skipped: $BENCH, cudart or cupti missing"
  fi
fi

# one NAME REP MODE VARIANT [ENV=V...]: a run of the loop; its JSON line -> results.jsonl.
one() {
  local rep="$1" mode="$2" variant="$3"; shift 3
  if [ "$SECONDS" -gt "${DEADLINE:-1000000}" ]; then echo "[$variant $mode r$rep] skipped: past DEADLINE"; return; fi
  local base="$W/$variant-$mode-r$rep" cmd=($PY tools/bench/cupti_overhead.py --variant "$variant" --mode "$mode" --rounds 5 --warmup 50)
  local rc
  if [ "$mode" = plain ] || [ "$mode" = profiler ]; then
    timeout -k 5 "${STEP_TIMEOUT:-120}" env "$@" "${cmd[@]}" > "$base.out" 2> "$base.err"; rc=$?
  else
    timeout -k 5 "${STEP_TIMEOUT:-120}" env "$@" "$PS" run --no-report -o "$base.run" -- "${cmd[@]}" \
      > "$base.out" 2> "$base.err"; rc=$?
  fi
  local job=$(grep '^{' "$base.out" | tail -1)
  echo "{\"rep\": $rep, \"mode\": \"$mode\", \"variant\": \"$variant\", \"rc\": $rc, \"job\": ${job:-null}}" >> "$W/results.jsonl"
  echo "[$variant $mode r$rep] exit $rc: $job"
  [ $rc -eq 0 ] || tail -5 "$base.err"
}

if has loop; then
  step "launch-bound loop, kernels per step (torch.profiler, once)"
  for v in mlp12 many; do $PY tools/bench/cupti_overhead.py --variant $v --rounds 1 --steps 20 --warmup 50 --count-kernels; done
  step "launch-bound loop: $REPS rounds, interleaved"
  for rep in $(seq "$REPS"); do
    for v in mlp12 many; do
      one "$rep" plain "$v"
      one "$rep" default "$v"
      one "$rep" cupti0 "$v" PINSCOPE_CUPTI=0
      one "$rep" kernels_off "$v" PINSCOPE_CUPTI_KERNELS=off
      one "$rep" runtime_off "$v" PINSCOPE_CUPTI_RUNTIME=0
      one "$rep" bare "$v" PINSCOPE_CUPTI_KERNELS=off PINSCOPE_CUPTI_RUNTIME=0
      one "$rep" profiler "$v"
    done
  done
  step "summary"
  $PY - "$W/results.jsonl" <<'PYEOF' | tee "$W/summary.txt"
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for r in runs:
    if r["rc"] == 0 and r["job"]:
        by.setdefault((r["variant"], r["mode"]), []).append(r["job"]["step_ms_median"])
for v in ("mlp12", "many"):
    plain = statistics.median(by.get((v, "plain"), [float("nan")]))
    print(f"{v}: ms/step, median of n (runs)")
    for m in ("plain", "default", "cupti0", "kernels_off", "runtime_off", "bare", "profiler"):
        xs = by.get((v, m), [])
        if not xs:
            print(f"  {m:12s} (no runs)"); continue
        med = statistics.median(xs)
        print(f"  {m:12s} {med:8.3f}  {100 * (med / plain - 1):+6.1f}%  n={len(xs)}  {sorted(xs)}")
PYEOF
fi
