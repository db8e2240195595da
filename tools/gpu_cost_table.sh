#!/usr/bin/env bash
# Issue 16's table in one device call, with the methods the twenty-second to
# twenty-eighth sessions settled on (docs/benchmarks.md), from the repo root
# with .gpu carried (.gpu/ps: the install to measure):
#
#   DEADLINE=520 timeout 590 bash tools/gpu_cost_table.sh
#
#   1. the launch-bound loops, measured inside one process: paired turns
#      (tools/gpu_paired.sh paired; TABLE_PAIRED, default three mlp12 runs
#      of 30 s and two many of 40 s), pinscope's default against no
#      recording in the same process
#   2. the input-bound DataLoader job and the GPU busy share
#      (tools/gpu_cost_final.sh input,busy): 5 pairs of 300-step
#      input_starvation runs, no tool and pinscope's default, each worker's
#      batch cycle timed; the gpu_bound job under kernel records and under
#      the default, for the busy share each gives
#   3. torch.profiler (CPU and CUDA activities) on mlp12, in turns against
#      no tool (tools/bench/turns.py), for comparison
#
# Each stage starts only while SECONDS is under its share of DEADLINE. $OUT
# gets paired.tgz, cost-final.tgz and profiler.tgz.
set -uo pipefail
OUT="${OUT:-/tmp/pinscope-out}"
export PS="${PS:-$PWD/.gpu/ps/bin/pinscope}"
PY=${PY:-python3}
CPUS=${PIN_CPUS:-2-9}
D=${DEADLINE:-520}
mkdir -p "$OUT"

# The loops: about 45 s an mlp12 run, 60 s a many run on the H100.
PAIRED="${TABLE_PAIRED:-mlp12:30 many:40 mlp12:30 many:40 mlp12:30}" \
  DEADLINE=$((D * 50 / 100)) OUT="$OUT" PIN_CPUS="$CPUS" bash tools/gpu_paired.sh paired

# The input-bound job and the busy shares: about 190 s.
if [ "$SECONDS" -lt $((D * 62 / 100)) ]; then
  OUT="$OUT" REPS=5 INPUT_STEPS=300 INPUT_ARGS="--worker-timing /tmp/wt.txt" \
    INPUT_MODES="plain pinscope" PIN_CPUS="$CPUS" DEADLINE=$((D * 85 / 100 - SECONDS)) \
    bash tools/gpu_cost_final.sh input,busy
else
  echo "[input,busy] skipped: past $((D * 62 / 100)) s"
fi

# torch.profiler, last: the table's comparison, measured many times before.
if [ "$SECONDS" -lt $((D - 50)) ]; then
  secs=$((D - SECONDS - 30)); [ $secs -gt 40 ] && secs=40
  echo; echo "=== torch.profiler: mlp12, $secs s ($(date +%T))"
  timeout -k 5 $((secs + 120)) $PY tools/bench/turns.py --job mlp12 --side plain --side profiler \
    --seconds "$secs" --ps "$PS" --out /tmp/prof --taskset "$CPUS" --hashseed 0 --main-cpu 5 \
    > /tmp/prof.json 2> /tmp/prof.err
  echo "exit $?"; grep -h "^  " /tmp/prof.err
  mkdir -p /tmp/profw && cp /tmp/prof.json /tmp/prof.err /tmp/profw/ && cp /tmp/prof/turns.jsonl /tmp/profw/ 2>/dev/null
  tar -C /tmp -czf "$OUT/profiler.tgz" profw
else
  echo "[profiler] skipped: past $((D - 50)) s"
fi
ls -l "$OUT"
