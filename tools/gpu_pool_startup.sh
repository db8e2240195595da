#!/usr/bin/env bash
# Issue 15's open cell (docs/benchmarks.md, "On the H200, 2026-12-05"): the
# pool with pin_memory=True at 4 workers, 0.75x of pin_memory=True alone over
# the seed loop. Both traced, so that the trace without the pool shows what
# torch's pin thread's cudaHostAlloc costs when no slot is being made:
#   pm      pinscope run (recording only), pin_memory=True
#   poolpm  pinscope run, PINSCOPE_PIN=1 PINSCOPE_PIN_POOL=1, pin_memory=True
# ROUNDS (2) interleaved, seedbench --configs 4t --samples SAMPLES (2560).
# Needs no build: the wheel that tools/build_wheel.sh --out .gpu/wheel made
# here (glibc only), unpacked into /tmp/pw. Carry [".gpu"]:
#
#   OUT=$OUT timeout 170 bash tools/gpu_pool_startup.sh
#
# $OUT gets pool-startup.tgz: each run's root trace, its JSON line, the log.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/pinscope-out}"
W=/tmp/pw
ROUNDS="${ROUNDS:-2}"
SAMPLES="${SAMPLES:-2560}"
rm -rf "$W"; mkdir -p "$OUT" "$W/x" "$W/p/bin" "$W/keep"
exec > >(tee -a "$W/keep/pool-startup.log") 2>&1
export PYTHONUNBUFFERED=1
python3 -m zipfile -e .gpu/wheel/pinscope-*.whl "$W/x" || exit 2
cp -r "$W"/x/pinscope-*.data/data/* "$W/p/"
cp "$W"/x/pinscope-*.data/scripts/pinscope "$W/p/bin/" && chmod +x "$W/p/bin/pinscope"
PS="$W/p/bin/pinscope"
for r in $(seq "$ROUNDS"); do
  for c in pm poolpm; do
    envs=(PINSCOPE_PIN=0)
    [ "$c" = poolpm ] && envs=(PINSCOPE_PIN=1 PINSCOPE_PIN_POOL=1)
    timeout -k 5 60 env "${envs[@]}" "$PS" run --no-report -o "$W/$c-r$r" -- \
      python3 tools/bench/seedbench.py --configs 4t --samples "$SAMPLES" --json "$W/keep/$c-r$r.json" \
      > "$W/keep/$c-r$r.out" 2>&1
    echo "[$c r$r] exit $?: $(grep -o '[0-9]* samples/s' "$W/keep/$c-r$r.out" | tr '\n' ' ')"
    root=$(ls "$W/$c-r$r"/*.pstrace 2>/dev/null | sort -t/ -k5 -n | head -1)
    [ -n "$root" ] && cp "$root" "$W/keep/$c-r$r.pstrace"
  done
done
tar -C "$W/keep" -czf "$OUT/pool-startup.tgz" . && ls -l "$OUT"
