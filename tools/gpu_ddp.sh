#!/usr/bin/env bash
# Issue 20 on GPUs: a DDP job (tests/gpu/ddp_job.py, NCCL, one rank per GPU)
# whose rank 1 DataLoader is starved (1 worker where the others have 8),
# run under `pinscope run -- python3 -m torch.distributed.run`, REPS times,
# then with the fix the report names applied to the straggler (its top
# change's num_workers), REPS times, interleaved (base fix base fix ...).
# Records the straggler the report named, its reason, the predicted job
# step and the measured one (medians), for docs/validation.md.
# From the repo root with .gpu carried, on a 2-GPU machine:
#
#   tools/gpu_ddp.sh build,ddp                       # nvidia-h200-x2
#   NPROC=1 SLOW_RANK=0 tools/gpu_ddp.sh build,ddp   # one-GPU smoke (nvidia-h200):
#                                                    # one rank, no straggler to name
#
# $OUT gets ddp.log, ddp.jsonl (one line per run: config, rep, the job's
# measured step, the report's ranks object) and summary.json.
set -uo pipefail
phases="${1:-build,ddp}"
has() { [[ ",$phases," == *",$1,"* ]]; }
OUT="${OUT:-/tmp/pinscope-out}"
W=/tmp/psddp
REPS="${REPS:-3}"
NPROC="${NPROC:-2}"
SLOW_RANK="${SLOW_RANK:-1}"
WORKERS="${WORKERS:-8}"
SLOW_WORKERS="${SLOW_WORKERS:-1}"
mkdir -p "$OUT" "$W"
exec > >(tee -a "$OUT/ddp.log") 2>&1
export PYTHONUNBUFFERED=1
PY=python3
PS=${PS:-/tmp/ps/bin/pinscope}
JOB=tests/gpu/ddp_job.py
step() { echo; echo "=== $* ($(date +%T))"; }

if has build; then
  step "machine"; nvidia-smi -L; nproc; free -g | head -2; df -h /dev/shm | tail -1
  $PY -c 'import torch; print("torch", torch.__version__, "gpus", torch.cuda.device_count())'
  step "build"; bash tools/gpu_build.sh || exit 1
  step "calibrate"; $PS calibrate --output "$HOME/.cache/pinscope/calibration.json" | tail -3
fi
[ -x "$PS" ] || { echo "no build at $PS: run the build phase first"; exit 1; }
gpus=$($PY -c 'import torch; print(torch.cuda.device_count())')
if [ "$gpus" -lt "$NPROC" ]; then echo "needs $NPROC GPUs, this machine has $gpus"; exit 1; fi

# run NAME REP SLOW_WORKERS: one job under pinscope run into $W/NAME-rREP;
# appends the job's JSON line and the report's ranks to ddp.jsonl.
run() {
  local name="$1" rep="$2" slow="$3" dir="$W/$1-r$2"
  rm -rf "$dir"
  # Every kernel recorded (not sampled windows): the NCCL kernels are the collectives.
  PINSCOPE_CUPTI_KERNELS="${KERNELS:-all}" timeout -k 5 "${STEP_TIMEOUT:-300}" \
    "$PS" run --no-report -o "$dir" -- \
    $PY -m torch.distributed.run --standalone --nproc_per_node "$NPROC" $JOB \
    --workers "$WORKERS" --slow-rank "$SLOW_RANK" --slow-workers "$slow" \
    > "$dir.out" 2> "$dir.err"
  local rc=$?
  local job=$(grep '^{' "$dir.out" | tail -1)
  "$PS" report --json "$dir" > "$dir.json" 2> "$dir.report.err"
  local ranks=$($PY -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1])).get("ranks")))' "$dir.json" 2>/dev/null)
  echo "{\"name\": \"$name\", \"rep\": $rep, \"rc\": $rc, \"slow_workers\": $slow, \"job\": ${job:-null}, \"ranks\": ${ranks:-null}}" >> "$OUT/ddp.jsonl"
  echo "[$name r$rep] exit $rc: ${job:-no result}"
  [ $rc -eq 0 ] || tail -8 "$dir.err"
}

if has ddp; then
  rm -f "$OUT/ddp.jsonl"
  step "baseline r1: rank $SLOW_RANK with $SLOW_WORKERS worker(s), the others $WORKERS"
  run base 1 "$SLOW_WORKERS"
  "$PS" report "$W/base-r1" | sed -n '/^Verdict/,/^Rank 0 /p'
  # The fix the report names for the straggler (its top change), else the
  # other ranks' worker count.
  fix=$($PY - "$W/base-r1.json" "$SLOW_RANK" "$WORKERS" <<'PY'
import json, re, sys
j = json.load(open(sys.argv[1])); slow = int(sys.argv[2]); n = sys.argv[3]
ranks = j.get("ranks") or {}
for r in ranks.get("ranks", []):
    top = r.get("top_change") or {}
    m = re.match(r"num_workers=(\d+)$", top.get("change", ""))
    if r["rank"] == slow and m:
        n = m.group(1)
print(n)
PY
)
  step "the fix: rank $SLOW_RANK gets $fix workers"
  run fix 1 "$fix"
  for rep in $(seq 2 "$REPS"); do run base "$rep" "$SLOW_WORKERS"; run fix "$rep" "$fix"; done
  step "summary"
  $PY - "$OUT/ddp.jsonl" "$OUT/summary.json" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def med(name, key):
    v = [r["job"][key] for r in rows if r["name"] == name and r["rc"] == 0 and r["job"]]
    return statistics.median(v) if v else None
base = [r for r in rows if r["name"] == "base" and r["ranks"]]
named = [(r["ranks"]["straggler"] or {}).get("rank") for r in base]
pred = [r["ranks"]["straggler"]["fixed_job_step_ns"] / 1e6 for r in base if r["ranks"]["straggler"]]
b, f = med("base", "step_ms"), med("fix", "step_ms")
out = {"straggler_named": named, "reason": [(r["ranks"]["straggler"] or {}).get("reason") for r in base],
       "base_step_ms": b, "fixed_step_ms": f,
       "measured_speedup": round(b / f, 3) if b and f else None,
       "predicted_job_step_ms": round(statistics.median(pred), 3) if pred else None,
       "predicted_speedup": round(b / statistics.median(pred), 3) if pred and b else None,
       "fix_slow_workers": [r["slow_workers"] for r in rows if r["name"] == "fix"][:1]}
print(json.dumps(out, indent=1)); json.dump(out, open(sys.argv[2], "w"), indent=1)
PY
  cp "$W/base-r1.json" "$OUT/report-base-r1.json" 2>/dev/null
fi
