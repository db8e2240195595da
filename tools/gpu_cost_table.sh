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
#      no tool (gpu_cost_final.sh turns: tools/bench/turns.py), for
#      comparison
#
# Each stage starts only while SECONDS is under its share of DEADLINE. $OUT
# gets paired.tgz and cost-final.tgz (the profiler's turns in turns-mlp12/
# and turns.jsonl).
set -uo pipefail
OUT="${OUT:-/tmp/pinscope-out}"
export PS="${PS:-$PWD/.gpu/ps/bin/pinscope}"
CPUS=${PIN_CPUS:-2-9}
D=${DEADLINE:-520}
mkdir -p "$OUT"

# The loops: about 45 s an mlp12 run, 60 s a many run on the H100.
PAIRED="${TABLE_PAIRED:-mlp12:30 many:40 mlp12:30 many:40 mlp12:30}" \
  DEADLINE=$((D * 50 / 100)) OUT="$OUT" PIN_CPUS="$CPUS" bash tools/gpu_paired.sh paired

# The input-bound job and the busy shares (about 190 s), then torch.profiler
# on mlp12 in turns against no tool (gpu_cost_final.sh's turns phase, about
# 60 s; the table's comparison, measured many times before, so last).
if [ "$SECONDS" -lt $((D * 62 / 100)) ]; then
  OUT="$OUT" REPS=5 INPUT_STEPS=300 INPUT_ARGS="--worker-timing /tmp/wt.txt" \
    INPUT_MODES="plain pinscope" PIN_CPUS="$CPUS" DEADLINE=$((D - 70 - SECONDS)) \
    TURN_JOBS=mlp12 TURN_SIDES="--side plain --side profiler" TURN_SECONDS=40 \
    TURN_ARGS="--hashseed 0 --main-cpu 5" bash tools/gpu_cost_final.sh input,busy,turns
else
  echo "[input,busy,turns] skipped: past $((D * 62 / 100)) s"
fi
ls -l "$OUT"
