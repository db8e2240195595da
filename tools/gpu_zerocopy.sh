#!/usr/bin/env bash
# Issue 15's table on the GPU machine: the seed benchmark as the seed wrote it
# (tools/bench/seedbench.py, 3840 samples, batch 128) at 0, 4 and 8 workers,
# in four configurations, REPS rounds interleaved (every config once per
# round), medians per config; then a checksum check that the batches the GPU
# received under pinscope equal the plain run's. Runs from the repo root with
# .gpu carried (tools/gpu_fetch_debs.sh), like tools/gpu_pipeline.sh:
#
#   DEADLINE=450 tools/gpu_zerocopy.sh build,bench,check
#
# The configurations (NAME: how):
#   plain   no pinscope, pin_memory=False          ("no pinning")
#   pm      no pinscope, pin_memory=True           ("pin_memory=True")
#   pin     pinscope run, PINSCOPE_PIN=1, pin_memory=False (the worker-batch pool on)
#   nopool  the same with PINSCOPE_PIN_POOL=0 (pin-ahead registers every batch)
# While the pool is not built (issue 15, item 2), pin and nopool run the same
# code: their difference is the run-to-run spread.
#
# $OUT gets zerocopy.tgz: results.jsonl (one line per run), medians.txt (the
# table), checksums/*.json, the log, the calibration, and the traces of the
# first round's pinscope runs (for `pinscope report`: the pinning section's
# per-batch line). DEADLINE (seconds since start) skips later runs so that
# the pack still happens inside the device call.
set -uo pipefail
phases="${1:-build,bench,check}"
has() { [[ ",$phases," == *",$1,"* ]]; }
OUT="${OUT:-/tmp/pinscope-out}"
W=/tmp/pszc
REPS="${REPS:-3}"
WORKERS="${WORKERS:-0 4 8}"
SAMPLES="${SAMPLES:-3840}"
CONFIGS="${CONFIGS:-plain pm pin nopool}"
mkdir -p "$OUT" "$W/checksums"
exec > >(tee -a "$W/zerocopy.log") 2>&1
export PYTHONUNBUFFERED=1
PY=python3
PS=${PS:-/tmp/ps/bin/pinscope}
SEED=tools/bench/seedbench.py
step() { echo; echo "=== $* ($(date +%T))"; }

if has build; then
  step "machine"; nvidia-smi -L; nproc; free -g | head -2; df -h /dev/shm | tail -1
  $PY -c 'import torch, sys; print("torch", torch.__version__, "python", sys.version.split()[0])'
  step "build"; bash tools/gpu_build.sh || exit 1
  step "calibrate"; $PS calibrate --output "$HOME/.cache/pinscope/calibration.json" | tail -4
  cp "$HOME/.cache/pinscope/calibration.json" "$W/calibration.json" 2>/dev/null || true
fi
[ -x "$PS" ] || { echo "no build at $PS: run the build phase first"; exit 1; }

# launch CONFIG WORKERS DIR -- ARGS...: the seed benchmark in CONFIG.
launch() {
  local config="$1" w="$2" dir="$3"; shift 4
  local pm=f
  [ "$config" = pm ] && pm=t
  case "$config" in
    plain|pm) timeout -k 5 150 $PY $SEED --configs "$w$pm" "$@" ;;
    pin) timeout -k 5 150 env PINSCOPE_PIN=1 "$PS" run --no-report -o "$dir" -- \
           $PY $SEED --configs "${w}f" "$@" ;;
    nopool) timeout -k 5 150 env PINSCOPE_PIN=1 PINSCOPE_PIN_POOL=0 "$PS" run --no-report -o "$dir" -- \
              $PY $SEED --configs "${w}f" "$@" ;;
  esac
}

if has bench; then
  step "bench: workers $WORKERS x configs $CONFIGS, $REPS rounds, $SAMPLES samples"
  for rep in $(seq "$REPS"); do
    for w in $WORKERS; do
      for config in $CONFIGS; do
        name="w$w.$config"
        if [ "$SECONDS" -gt "${DEADLINE:-1000000}" ]; then echo "[$name r$rep] skipped: past DEADLINE"; continue; fi
        dir="$W/$name-r$rep"; rm -rf "$dir"
        launch "$config" "$w" "$dir" -- --samples "$SAMPLES" --json "$W/$name-r$rep.json" \
          > "$W/$name-r$rep.out" 2> "$W/$name-r$rep.err"
        rc=$?
        rate=$($PY -c "import json,sys; print(json.load(open(sys.argv[1]))[0]['samples_per_s'])" \
          "$W/$name-r$rep.json" 2>/dev/null || echo null)
        echo "{\"name\": \"$name\", \"workers\": $w, \"config\": \"$config\", \"rep\": $rep, \"rc\": $rc, \"samples_per_s\": $rate}" >> "$W/results.jsonl"
        echo "[$name r$rep] exit $rc: $rate samples/s"
        [ $rc -eq 0 ] || tail -5 "$W/$name-r$rep.err"
        # Keep the first round's traces only.
        [ "$rep" -eq 1 ] || rm -rf "$dir"
      done
    done
  done
  step "medians"
  $PY - "$W/results.jsonl" <<'PYEOF' | tee "$W/medians.txt"
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for r in runs:
    if r["rc"] == 0 and r["samples_per_s"] is not None:
        by.setdefault((r["workers"], r["config"]), []).append(r["samples_per_s"])
configs = ["plain", "pm", "pin", "nopool"]
print("| workers | " + " | ".join(configs) + " | pin / max(plain, pm) | pin / nopool |")
print("|---" * (len(configs) + 3) + "|")
for w in sorted({k[0] for k in by}):
    med = {c: statistics.median(by[(w, c)]) if by.get((w, c)) else None for c in configs}
    cells = [f"{med[c]:.0f} ({len(by.get((w, c), []))})" if med[c] else "-" for c in configs]
    best = max([v for v in (med["plain"], med["pm"]) if v] or [0])
    r1 = f"{med['pin'] / best:.2f}" if med["pin"] and best else "-"
    r2 = f"{med['pin'] / med['nopool']:.2f}" if med["pin"] and med["nopool"] else "-"
    print(f"| {w} | " + " | ".join(cells) + f" | {r1} | {r2} |")
PYEOF
fi

if has check; then
  # Deterministic samples, 640 of them (5 batches), per worker count: the
  # GPU's checksum of every batch under pinscope equals the plain run's.
  step "checksums"
  fails=0
  for w in $WORKERS; do
    for config in plain pm pin nopool; do
      [ "$SECONDS" -gt "${DEADLINE:-1000000}" ] && { echo "checksums skipped: past DEADLINE"; break 2; }
      launch "$config" "$w" "$W/check-w$w.$config" -- --samples 640 \
        --checksum "$W/checksums/w$w.$config.json" > "$W/check-w$w.$config.out" 2>&1 ||
        { echo "[check w$w $config] failed"; tail -5 "$W/check-w$w.$config.out"; fails=$((fails + 1)); }
    done
    for config in pm pin nopool; do
      # The file is keyed by the config string (e.g. "4f" / "4t"): compare the values.
      if $PY - "$W/checksums/w$w.plain.json" "$W/checksums/w$w.$config.json" <<'PYEOF'
import json, sys
a, b = (list(json.load(open(p)).values()) for p in sys.argv[1:3])
sys.exit(0 if a and a == b else 1)
PYEOF
      then echo "[check w$w $config] batches equal the plain run's"
      else echo "[check w$w $config] CHECKSUM MISMATCH against plain"; fails=$((fails + 1)); fi
    done
  done
  echo "checksum failures: $fails" | tee "$W/checksums/summary.txt"
fi

step "pack"
# The device tool brings back files of at most 16 MiB: split a larger tarball.
(cd "$W" && tar czf "$OUT/zerocopy.tgz" --exclude='check-*' \
  $(ls -d results.jsonl medians.txt checksums zerocopy.log calibration.json *-r1 2>/dev/null))
if [ "$(stat -c %s "$OUT/zerocopy.tgz")" -gt 15000000 ]; then
  split -b 15000000 -d "$OUT/zerocopy.tgz" "$OUT/zerocopy.tgz." && rm "$OUT/zerocopy.tgz"
fi
ls -la "$OUT"
