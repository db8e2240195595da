#!/usr/bin/env bash
# `pinscope tune` against an exhaustive grid on the GPU (issue 14,
# docs/validation.md): on a CPU-starved job (pipeline_job.py --scenario
# input_starvation), a pin-thread-bound job (--scenario pin_thread) and the
# seed benchmark (tools/bench/seedbench.py, 0 workers), tune must find a
# setting within 5% of the grid's best (medians of 3) in at most a third of
# the grid's time. Grid and tune runs are measured alike: `pinscope run`
# with the hook's PINSCOPE_STOP_AFTER / PINSCOPE_STOP_WARMUP and its
# throughput line. Runs on the GPU machine from the repo root with .gpu
# carried (tools/gpu_fetch_debs.sh), like tools/gpu_pipeline.sh.
#
#   tools/gpu_tune.sh build,warm,starve,compare   # one call per job: tune, grid (~6 min)
#   tools/gpu_tune.sh build,warm,pin,compare
#   tools/gpu_tune.sh build,warm,seed,compare
#   OUT=all tools/gpu_tune.sh compare             # here, over the calls' files copied into all/
#
# A job's tune and grid run in the same call, on the same machine and memory
# (a fresh machine's first touches of memory are slower: `warm` touches 8 GiB
# first, as tools/gpu_pipeline.sh does). Each call stays under 9 minutes on a
# 16-core H200: runs take 5-7 s, most of it Python and CUDA start-up. The
# exhaustive grid over what tune can pick there (workers 0, 2, 4, 6, 8, 12, 15
# x pin_memory x PINSCOPE_PIN, 28 configs x 3) would take ~9 min per job on
# its own: the grid measures a subset of it (listed below), and
# `compare` prices the full grid at the measured runs' median wall; both
# times are in compare.json. A `compare` in the call itself judges that
# call's job.
#
# $OUT gets: tune-NAME.json (tune's result), tune-NAME.txt (its table and
# checks), grid-NAME.jsonl (one line per grid run), timing-NAME.jsonl (the
# tune's and the grid's wall time), compare.json and compare.txt, the log,
# and tune-NAME.tgz (each trial's job output, tune.json and first traces).
set -uo pipefail
phases="${1:-build,warm,starve}"
has() { [[ ",$phases," == *",$1,"* ]]; }
tag="${phases//,/_}"
OUT="${OUT:-/tmp/pinscope-out}"
W=/tmp/pst
REPS="${REPS:-3}"
BATCHES="${BATCHES:-40}"
WARMUP="${WARMUP:-8}"
BUDGET="${BUDGET:-120}"
mkdir -p "$OUT" "$W"
exec > >(tee -a "$OUT/tune-$tag.log") 2>&1
export PYTHONUNBUFFERED=1
PY=python3
PS=${PS:-/tmp/ps/bin/pinscope}
JOB=tests/gpu/pipeline_job.py
SEED=tools/bench/seedbench.py
step() { echo; echo "=== $* ($(date +%T))"; }
now() { date +%s%N; }

# The three jobs, as the user would run them (long enough for the hook to
# stop them after $BATCHES batches).
job() {
  case "$1" in
    starve) echo "$PY $JOB --scenario input_starvation --steps 1000 --warmup 0" ;;
    pin) echo "$PY $JOB --scenario pin_thread --steps 1000 --warmup 0" ;;
    seed) echo "$PY $SEED --configs 0f --samples 12800" ;;
  esac
}

if has build; then
  step "machine"; nvidia-smi -L; nproc; free -g | head -2; df -h /dev/shm | tail -1
  $PY -c 'import torch, sys; print("torch", torch.__version__, "python", sys.version.split()[0])'
  step "build"; bash tools/gpu_build.sh || exit 1
  step "calibrate"; $PS calibrate --output "$HOME/.cache/pinscope/calibration.json" | tail -6 || exit 1
fi
needs_build() { [ -x "$PS" ] || { echo "no build at $PS: run the build phase first"; exit 1; }; }

if has warm; then
  step "warm memory"
  $PY -c "
import mmap, time
t = time.time(); n = 8 << 30; m = mmap.mmap(-1, n)
for off in range(0, n, 4096): m[off] = 1
m.close(); print('touched 8 GiB in %.1f s' % (time.time() - t))"
fi

# tune NAME: `pinscope tune` of the job, its wall time in timing-NAME.jsonl.
tune() {
  local name="$1" dir="$W/tune-$1"
  step "tune $name"
  rm -rf "$dir"
  local t0 rc ms
  t0=$(now)
  # shellcheck disable=SC2046
  timeout -k 10 $((BUDGET + 120)) "$PS" tune --budget "$BUDGET" --batches "$BATCHES" \
    --warmup "$WARMUP" --reps "$REPS" -o "$dir" -- $(job "$name") > "$OUT/tune-$name.txt"
  rc=$?
  ms=$(( ($(now) - t0) / 1000000 ))
  cat "$OUT/tune-$name.txt"
  cp "$dir/tune.json" "$OUT/tune-$name.json" 2>/dev/null
  echo "{\"what\": \"tune\", \"name\": \"$name\", \"rc\": $rc, \"wall_ms\": $ms}" >> "$OUT/timing-$name.jsonl"
  echo "[tune $name] exit $rc in $ms ms"
  (cd "$W" && tar czf "$OUT/tune-$name.tgz" tune-"$name"/tune.json tune-"$name"/*/job.* \
     tune-"$name"/*-r1/*.pstrace 2>/dev/null)
  if [ "$(stat -c %s "$OUT/tune-$name.tgz")" -gt 15000000 ]; then
    (cd "$W" && tar czf "$OUT/tune-$name.tgz" tune-"$name"/tune.json tune-"$name"/*/job.*)
  fi
}

# grid NAME CONFIG...: REPS rounds over the configs (A B C A B C ...), each a
# `pinscope run` stopped after $BATCHES batches. CONFIG = label|ENV=V ...
# with the effective settings in the label: w<workers>p<pin_memory>P<PINSCOPE_PIN>.
grid() {
  local name="$1"; shift
  step "grid $name ($# configs x $REPS)"
  local t0=$(now)
  for rep in $(seq "$REPS"); do
    for spec in "$@"; do
      IFS='|' read -r label envs <<< "$spec"
      local dir="$W/grid-$name-$label-r$rep" rate="$W/grid-$name-$label-r$rep.rate"
      rm -rf "$dir" "$rate"
      # As tune measures a trial (tune::TrialRunLength): twice the batches
      # the workers queue ahead (k x prefetch 2) untimed and timed, at least.
      local k=${label#w}; k=${k%%p*}
      local warm=$(( WARMUP > 4 * k ? WARMUP : 4 * k ))
      local timed=$(( BATCHES - WARMUP > 4 * k ? BATCHES - WARMUP : 4 * k ))
      local s0=$(now)
      # shellcheck disable=SC2046,SC2086
      timeout -k 5 150 env $envs PINSCOPE_STOP_AFTER="$((warm + timed))" PINSCOPE_STOP_WARMUP="$warm" \
        PINSCOPE_THROUGHPUT="$rate" "$PS" run --no-report -o "$dir" -- $(job "$name") \
        > "$dir.out" 2> "$dir.err"
      local rc=$? ms=$(( ($(now) - s0) / 1000000 ))
      local hook=$(tail -1 "$rate" 2>/dev/null)
      echo "{\"name\": \"$name\", \"config\": \"$label\", \"rep\": $rep, \"rc\": $rc, \"wall_ms\": $ms, \"env\": \"$envs\", \"hook\": ${hook:-null}}" >> "$OUT/grid-$name.jsonl"
      echo "[$name $label r$rep] exit $rc in $ms ms: $hook"
      rm -rf "$dir"  # the grid's traces are not needed, only its rates
    done
  done
  echo "{\"what\": \"grid\", \"name\": \"$name\", \"wall_ms\": $(( ($(now) - t0) / 1000000 ))}" >> "$OUT/timing-$name.jsonl"
}
S=PINSCOPE_SET_NUM_WORKERS M=PINSCOPE_SET_PIN_MEMORY

if has starve; then
  # input_starvation: 2 workers, pin_memory=False as written.
  needs_build
  tune starve
  grid starve "w2p0P0|" "w4p0P0|$S=4" "w8p0P0|$S=8" "w12p0P0|$S=12" "w15p0P0|$S=15" \
    "w2p1P0|$M=1" "w8p1P0|$S=8 $M=1" "w15p1P0|$S=15 $M=1"
fi
if has pin; then
  # pin_thread: 12 workers, pin_memory=True as written.
  needs_build
  tune pin
  grid pin "w12p1P0|" "w12p0P0|$M=0" "w12p0P1|$M=0 PINSCOPE_PIN=1" "w12p1P1|PINSCOPE_PIN=1" \
    "w8p0P1|$S=8 $M=0 PINSCOPE_PIN=1" "w15p0P1|$S=15 $M=0 PINSCOPE_PIN=1"
fi
if has seed; then
  # the seed benchmark: 0 workers, pin_memory=False as written.
  needs_build
  tune seed
  grid seed "w0p0P0|" "w4p0P0|$S=4" "w8p0P0|$S=8" "w12p0P0|$S=12" "w4p1P0|$S=4 $M=1" \
    "w8p1P0|$S=8 $M=1" "w12p1P0|$S=12 $M=1" "w8p0P1|$S=8 PINSCOPE_PIN=1" "w12p0P1|$S=12 PINSCOPE_PIN=1"
fi

if has compare; then
  step "compare"
  $PY - "$OUT" <<'PYEOF' | tee "$OUT/compare.txt"
import json, os, statistics, sys
out = sys.argv[1]
def lines(prefix):
    rows = []
    for f in sorted(os.listdir(out)):
        if f.startswith(prefix) and f.endswith(".jsonl"):
            rows += [json.loads(l) for l in open(os.path.join(out, f)) if l.strip()]
    return rows
grid, timing = lines("grid-"), lines("timing-")
result = {}
for name in ("starve", "pin", "seed"):
    rates = {}
    for g in grid:
        if g["name"] == name and g["rc"] == 0 and g.get("hook") and g["hook"].get("samples_per_s"):
            rates.setdefault(g["config"], []).append(g["hook"]["samples_per_s"])
    medians = {c: statistics.median(v) for c, v in rates.items()}
    run_ms = [g["wall_ms"] for g in grid if g["name"] == name and g["rc"] == 0]
    grid_ms = sum(t["wall_ms"] for t in timing if t["name"] == name and t["what"] == "grid")
    # The exhaustive grid over what tune can pick on 16 cores: the worker
    # counts the model re-times (0, 2, 4, 6, 8, 12, 15) x pin_memory x
    # PINSCOPE_PIN, medians of REPS. Only a subset is measured (to fit the
    # call); its time is this many runs at the measured runs' median wall.
    full_configs = 7 * 2 * 2
    reps = max([g["rep"] for g in grid if g["name"] == name] or [3])
    full_ms = full_configs * reps * statistics.median(run_ms) if run_ms else 0
    tune_ms = sum(t["wall_ms"] for t in timing if t["name"] == name and t["what"] == "tune")
    path = os.path.join(out, "tune-%s.json" % name)
    if not medians or not os.path.exists(path):
        print(name, ": missing grid or tune results"); continue
    t = json.load(open(path))
    b = t["best"]["settings"] if t.get("best") else None
    key = "w%dp%dP%d" % (b["num_workers"], int(b["pin_memory"]), int(b["pinscope_pin"])) if b else None
    best_config = max(medians, key=medians.get)
    tune_on_grid = medians.get(key)
    tune_own = t["trials"][t["best"]["index"]]["median"] if t.get("best") else None
    within = (tune_on_grid or tune_own or 0) >= 0.95 * medians[best_config]
    r = {"grid_best": best_config, "grid_best_samples_per_s": medians[best_config],
         "tune_best": key, "tune_best_on_grid": tune_on_grid, "tune_best_own_median": tune_own,
         "tune_vs_grid_best": (tune_on_grid or tune_own or 0) / medians[best_config],
         "within_5pct": within, "tune_s": tune_ms / 1000, "grid_s": grid_ms / 1000,
         "grid_configs": len(medians), "full_grid_configs": full_configs,
         "full_grid_s": full_ms / 1000, "time_ratio": tune_ms / full_ms if full_ms else None,
         "time_ratio_measured_grid": tune_ms / grid_ms if grid_ms else None,
         "a_third_of_the_grid": bool(full_ms) and tune_ms <= full_ms / 3,
         "grid_medians": medians, "tune_trials": [x["label"] for x in t["trials"]],
         "tune_stop": t.get("stop_reason")}
    result[name] = r
    print("%-7s grid best %-9s %8.0f samples/s | tune %-9s %s (%.3f of the grid's best) | "
          "tune %.0f s, full grid %.0f s (%.2f; the %d configs measured took %.0f s) | %s" % (
              name, best_config, medians[best_config], key,
              "on the grid %.0f" % tune_on_grid if tune_on_grid else "own %.0f" % (tune_own or 0),
              r["tune_vs_grid_best"], r["tune_s"], r["full_grid_s"], r["time_ratio"] or 0,
              len(medians), r["grid_s"],
              "PASS" if within and r["a_third_of_the_grid"] else "FAIL"))
json.dump(result, open(os.path.join(out, "compare.json"), "w"), indent=1)
PYEOF
fi
ls -la "$OUT"
