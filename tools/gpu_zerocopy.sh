#!/usr/bin/env bash
# Issue 15's table and checks on the GPU machine, in one device call of at
# most 10 minutes: the pool of registered slots (PINSCOPE_PIN_POOL=1,
# docs/zero-copy-pool.md) against no pinning, pin_memory=True and
# PINSCOPE_PIN=1 without the pool. Runs from the repo root with .gpu carried
# (tools/gpu_fetch_debs.sh), like tools/gpu_pipeline.sh:
#
#   tools/gpu_zerocopy.sh                      # build,semantics,check,bench
#   DEADLINE=540 REPS=3 tools/gpu_zerocopy.sh build,bench
#
# Phases:
#   build      tools/gpu_build.sh into /tmp/ps, then pinscope calibrate
#   semantics  tests/gpu/pinning_check.py hazard, data and loader (4 workers)
#              under PINSCOPE_PIN=1 PINSCOPE_PIN_POOL=1; the loader's batch
#              checksums against a run without pinscope
#   check      seedbench --checksum (deterministic samples) at 4 and 8 workers:
#              every batch the GPU received under the pool (and under
#              PINSCOPE_PIN=1 without it) equals the plain run's
#   bench      JOBS (seed: tools/bench/seedbench.py as the seed wrote it;
#              train: the same with --train, a training-shaped job) x CONFIGS x
#              WORKERS (0 4 8 12), REPS rounds interleaved (every job and
#              config once per round, each process running all worker counts
#              of its config), medians per cell and the paired ratios (per
#              round, then their median)
# The configurations (NAME: how):
#   plain   no pinscope, pin_memory=False                 ("no pinning")
#   pm      no pinscope, pin_memory=True                  ("pin_memory=True")
#   pin     pinscope run, PINSCOPE_PIN=1, pin_memory=False
#   pool    pinscope run, PINSCOPE_PIN=1 PINSCOPE_PIN_POOL=1, pin_memory=False
#   pinpm   pinscope run, PINSCOPE_PIN=1, pin_memory=True
#   poolpm  pinscope run, PINSCOPE_PIN=1 PINSCOPE_PIN_POOL=1, pin_memory=True
#
# $OUT gets summary.txt (the tables, the checks, the report's per-batch
# pinning lines of the first round's pool runs), and zerocopy.tgz:
# results.jsonl (one line per job, config, worker count and round), the log,
# the calibration, checksums/, semantics/, and the first round's traces of
# the pool runs (for `pinscope report`). DEADLINE (seconds since start,
# default 540) skips later runs so that the summary and the pack still
# happen inside the device call.
set -uo pipefail
phases="${1:-build,semantics,check,bench}"
has() { [[ ",$phases," == *",$1,"* ]]; }
OUT="${OUT:-/tmp/pinscope-out}"
W=/tmp/pszc
REPS="${REPS:-3}"
WORKERS="${WORKERS:-0 4 8 12}"
JOBS="${JOBS:-seed train}"
SAMPLES="${SAMPLES:-3840}"  # the seed benchmark as the seed wrote it
CONFIGS="${CONFIGS:-plain pm pin pool pinpm poolpm}"
DEADLINE="${DEADLINE:-540}"
mkdir -p "$OUT" "$W/checksums" "$W/semantics"
exec > >(tee -a "$W/zerocopy.log") 2>&1
export PYTHONUNBUFFERED=1
PY=python3
PS=${PS:-/tmp/ps/bin/pinscope}
SEED=tools/bench/seedbench.py
SUMMARY="$W/summary.txt"
step() { echo; echo "=== $* ($(date +%T), ${SECONDS}s)"; }
late() { [ "$SECONDS" -gt "$DEADLINE" ]; }

if has build; then
  step "machine"; nvidia-smi -L; nproc; free -g | head -2; df -h /dev/shm | tail -1
  $PY -c 'import torch, sys; print("torch", torch.__version__, "python", sys.version.split()[0])'
  step "build"; bash tools/gpu_build.sh || exit 1
  step "calibrate"; $PS calibrate --output "$HOME/.cache/pinscope/calibration.json" | tail -4
  cp "$HOME/.cache/pinscope/calibration.json" "$W/calibration.json" 2>/dev/null || true
fi
[ -x "$PS" ] || { echo "no build at $PS: run the build phase first"; exit 1; }
: > "$SUMMARY"

# launch CONFIG DIR -- ARGS...: one process in CONFIG; ARGS carry --configs.
# pm/pinpm/poolpm get the configs' "f" turned into "t" by the caller.
launch() {
  local config="$1" dir="$2"; shift 3
  case "$config" in
    plain|pm) timeout -k 5 200 $PY $SEED "$@" ;;
    pin|pinpm) timeout -k 5 200 env PINSCOPE_PIN=1 PINSCOPE_PIN_POOL=0 "$PS" run --no-report -o "$dir" -- $PY $SEED "$@" ;;
    pool|poolpm) timeout -k 5 200 env PINSCOPE_PIN=1 PINSCOPE_PIN_POOL=1 "$PS" run --no-report \
                   -o "$dir" -- $PY $SEED "$@" ;;
  esac
}
# The --configs list of CONFIG over WORKERS: "0f,4f,..." or "0t,4t,...".
cfglist() {
  local pm=f w out=""
  case "$1" in pm|pinpm|poolpm) pm=t ;; esac
  for w in $WORKERS; do out="$out${out:+,}$w$pm"; done
  echo "$out"
}

if has semantics; then
  step "semantics: pinning_check.py under PINSCOPE_PIN=1 PINSCOPE_PIN_POOL=1"
  sem() {  # sem NAME -- ARGS: under the pool, into $W/semantics/NAME
    local name="$1"; shift 2
    timeout -k 5 150 env PINSCOPE_PIN=1 PINSCOPE_PIN_POOL=1 "$PS" run --no-report \
      -o "$W/semantics/$name" -- $PY tests/gpu/pinning_check.py "$@" > "$W/semantics/$name.out" 2>&1
    local rc=$?
    echo "[semantics $name] exit $rc, $(grep -c '^PASS' "$W/semantics/$name.out") PASS," \
      "$(grep -c '^FAIL' "$W/semantics/$name.out") FAIL" | tee -a "$SUMMARY"
    grep '^FAIL' "$W/semantics/$name.out" | head -5 | tee -a "$SUMMARY"
    [ "$name" = loader ] || rm -rf "$W/semantics/$name"  # the loader's trace is kept
  }
  sem hazard -- hazard
  sem data -- data
  sem loader -- loader --workers 4 --json "$W/semantics/loader_pool.json"
  timeout -k 5 150 $PY tests/gpu/pinning_check.py loader --workers 4 \
    --json "$W/semantics/loader_nopin.json" > "$W/semantics/loader_nopin.out" 2>&1
  if cmp -s "$W/semantics/loader_nopin.json" "$W/semantics/loader_pool.json"; then
    echo "[semantics loader] PASS batches bit-identical with and without pinscope (pool on)" | tee -a "$SUMMARY"
  else
    echo "[semantics loader] FAIL batches differ from the run without pinscope" | tee -a "$SUMMARY"
  fi
fi

if has check; then
  step "checksums: deterministic samples, 640 (5 batches) per worker count"
  fails=0
  for w in 4 8; do
    for config in plain pin pool; do
      late && { echo "checksums skipped: past DEADLINE" | tee -a "$SUMMARY"; break 2; }
      launch "$config" "$W/check-w$w.$config" -- --configs "${w}f" --samples 640 \
        --checksum "$W/checksums/w$w.$config.json" > "$W/check-w$w.$config.out" 2>&1 ||
        { echo "[check w$w $config] failed"; tail -5 "$W/check-w$w.$config.out"; fails=$((fails + 1)); }
    done
    for config in pin pool; do
      if $PY - "$W/checksums/w$w.plain.json" "$W/checksums/w$w.$config.json" <<'PYEOF'
import json, sys
a, b = (list(json.load(open(p)).values()) for p in sys.argv[1:3])
sys.exit(0 if a and a == b else 1)
PYEOF
      then echo "[check w$w $config] batches equal the plain run's"
      else echo "[check w$w $config] CHECKSUM MISMATCH against plain"; fails=$((fails + 1)); fi
    done
  done
  echo "checksum failures: $fails" | tee -a "$SUMMARY"
fi

if has bench; then
  step "bench: jobs $JOBS x configs $CONFIGS x workers $WORKERS, $REPS rounds, $SAMPLES samples"
  for rep in $(seq "$REPS"); do
    for job in $JOBS; do
      train=""
      [ "$job" = train ] && train=--train
      for config in $CONFIGS; do
        name="$job.$config"
        if late; then echo "[$name r$rep] skipped: past DEADLINE"; continue; fi
        dir="$W/$name-r$rep"; rm -rf "$dir"
        launch "$config" "$dir" -- --configs "$(cfglist "$config")" $train --samples "$SAMPLES" \
          --json "$W/$name-r$rep.json" > "$W/$name-r$rep.out" 2> "$W/$name-r$rep.err"
        rc=$?
        $PY - "$W/$name-r$rep.json" "$job" "$config" "$rep" "$rc" >> "$W/results.jsonl" <<'PYEOF'
import json, sys
path, job, config, rep, rc = sys.argv[1:6]
try:
    runs = json.load(open(path))
except Exception:
    runs = []
for r in runs:
    print(json.dumps({"job": job, "config": config, "rep": int(rep), "rc": int(rc),
                      "workers": r["num_workers"], "samples_per_s": r["samples_per_s"],
                      "steady_samples_per_s": r["steady_samples_per_s"]}))
PYEOF
        echo "[$name r$rep] exit $rc: $(grep -o '[0-9]* samples/s (' "$W/$name-r$rep.out" | tr -d '(' | tr '\n' ' ')"
        [ $rc -eq 0 ] || tail -5 "$W/$name-r$rep.err"
        # Keep the first round's pool traces only (the report's per-batch line).
        case "$config" in pool|poolpm) [ "$rep" -eq 1 ] || rm -rf "$dir" ;; *) rm -rf "$dir" ;; esac
      done
    done
  done
  step "medians"
  $PY - "$W/results.jsonl" <<'PYEOF' | tee -a "$SUMMARY"
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ok = [r for r in runs if r["rc"] == 0]
configs = ["plain", "pm", "pin", "pool", "pinpm", "poolpm"]
def cell(job, w, c, rep=None, key="samples_per_s"):
    v = [r[key] for r in ok if r["job"] == job and r["workers"] == w and r["config"] == c
         and (rep is None or r["rep"] == rep)]
    return v
for key in ("samples_per_s", "steady_samples_per_s"):
    for job in sorted({r["job"] for r in ok}):
        print(f"\n{job}: {key} (median of n rounds; ratios: median over rounds of the paired ratio)")
        print("| workers | " + " | ".join(configs) +
              " | pool / max(plain, pm) | pool / pin | poolpm / pm |")
        print("|---" * (len(configs) + 4) + "|")
        for w in sorted({r["workers"] for r in ok if r["job"] == job}):
            med = {}
            for c in configs:
                v = cell(job, w, c, key=key)
                med[c] = f"{statistics.median(v):.0f} ({len(v)})" if v else "-"
            def paired(num, den):
                ratios = []
                for rep in sorted({r["rep"] for r in ok}):
                    a = cell(job, w, num, rep, key)
                    bs = [cell(job, w, d, rep, key) for d in den]
                    if a and all(bs):
                        ratios.append(a[0] / max(b[0] for b in bs))
                return f"{statistics.median(ratios):.2f} ({len(ratios)})" if ratios else "-"
            print(f"| {w} | " + " | ".join(med[c] for c in configs) + " | " +
                  paired("pool", ["plain", "pm"]) + " | " + paired("pool", ["pin"]) + " | " +
                  paired("poolpm", ["pm"]) + " |")
PYEOF
  step "the report's per-batch pinning line, first round's pool runs"
  for dir in "$W"/*.pool-r1 "$W"/*.poolpm-r1; do
    [ -d "$dir" ] || continue
    echo "--- $(basename "$dir")" | tee -a "$SUMMARY"
    "$PS" report "$dir" 2>/dev/null | grep -A4 -e "Per batch" -e "batch segments the program received" | tee -a "$SUMMARY"
  done
fi

step "pack"
cp "$SUMMARY" "$OUT/summary.txt"
# The device tool brings back files of at most 16 MiB: split a larger tarball.
(cd "$W" && tar czf "$OUT/zerocopy.tgz" --exclude='check-*' \
  $(ls -d results.jsonl summary.txt checksums semantics zerocopy.log calibration.json *pool*-r1 2>/dev/null))
if [ "$(stat -c %s "$OUT/zerocopy.tgz")" -gt 15000000 ]; then
  split -b 15000000 -d "$OUT/zerocopy.tgz" "$OUT/zerocopy.tgz." && rm "$OUT/zerocopy.tgz"
fi
ls -la "$OUT"
