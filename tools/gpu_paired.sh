#!/usr/bin/env bash
# Issue 16, the twenty-fifth session's method (docs/benchmarks.md): what
# recording costs a job, measured inside one process, and where a hook's
# time goes. One device call, from the repo root, with prebuilt installs
# carried in .gpu (tools/gpu_paired.sh's callers build them on the
# development machine: .gpu/ps, and .gpu/ps-phases with libpinscope.so
# built with -DPINSCOPE_PHASES=ON):
#
#   DEADLINE=480 timeout 560 bash tools/gpu_paired.sh hooks,paired
#
#   hooks   the Hugging Face Trainer (tests/gpu/hf_trainer_job.py, batch 64,
#           4 workers, HF_STEPS=700) under each install: the phases build
#           writes each hook phase's time to stderr at exit; the other's
#           trace gives the hooks a step by kind (tools/bench/loop_counters.py)
#   paired  tools/bench/turns.py with one side, `paired` (under pinscope
#           run; its turns alternate without recording and with it,
#           pinscope_recording_pause), for each entry of PAIRED
#           ("JOB:SECONDS[:VARIANT]" ..., default: hf three times, mlp12
#           twice, many once), one after the other: no other process, no
#           idle GPU between turns
#
# $OUT gets paired.tgz (every log, turns.jsonl and report JSON; traces
# over 20 MB left out) and nothing else: the device tool returns a few files.
set -uo pipefail
phases="${1:-hooks,paired}"
has() { [[ ",$phases," == *",$1,"* ]]; }
OUT="${OUT:-/tmp/pinscope-out}"
W="$OUT/w"
rm -rf "$W"; mkdir -p "$W"
exec > >(tee -a "$W/paired.log") 2>&1
export PYTHONUNBUFFERED=1
PY=${PY:-python3}
PS=${PS:-$PWD/.gpu/ps/bin/pinscope}
PSP=${PSP:-$PWD/.gpu/ps-phases/bin/pinscope}
CPUS=${PIN_CPUS:-2-9}
step() { echo; echo "=== $* ($(date +%T))"; }
pack() {
  step "pack"
  find "$W" -name '*.pstrace' -size +20M -delete
  tar -C "$OUT" -czf "$OUT/paired.tgz" w && rm -rf "$W" && ls -l "$OUT/paired.tgz"
}
trap pack EXIT
late() { [ "$SECONDS" -gt "${DEADLINE:-1000000}" ] && echo "[$1] skipped: past DEADLINE"; }

step "machine"; nvidia-smi -L; nproc
if has hooks; then
  HF=(tests/gpu/hf_trainer_job.py --batch 64 --workers 4 --steps "${HF_STEPS:-700}")
  for v in phases plain; do
    late "hooks $v" && continue
    ps=$PS; [ $v = phases ] && ps=$PSP
    step "hooks: hf under $v"
    timeout -k 5 200 taskset -c "$CPUS" "$ps" run --no-report -o "$W/hf_$v.run" -- $PY "${HF[@]}" \
      > "$W/hf_$v.log" 2>&1
    echo "exit $?"; grep -h "^pinscope phases" "$W/hf_$v.log" | sort -k4,4 -s
    "$PS" report --json "$W/hf_$v.run" > "$W/hf_$v.json" 2>/dev/null
  done
fi
if has paired; then
  n=0
  for entry in ${PAIRED:-hf:40 mlp12:30 hf:40 many:40 hf:40 mlp12:30}; do
    IFS=: read -r job secs variant <<< "$entry"
    n=$((n + 1)); late "paired $entry" && continue
    side=paired${variant:+:$variant}
    step "paired $n: $job, $secs s, $side"
    timeout -k 5 $((secs + 150)) $PY tools/bench/turns.py --job "$job" --side "$side" \
      --seconds "$secs" --ps "$PS" --out "$W/paired-$n-$job" --taskset "$CPUS" \
      --hashseed 0 --main-cpu 5 > "$W/paired-$n-$job.json" 2> "$W/paired-$n-$job.err"
    echo "exit $?"; grep -h "^  paired" "$W/paired-$n-$job.err"
    for r in "$W/paired-$n-$job"/*.run; do
      "$PS" report --json "$r" > "$r.json" 2>/dev/null
    done
  done
  # Each job's runs pooled (turns.py --pool; the windows are taken apart
  # where this machine's Python reads the traces, else on the development
  # machine from paired.tgz).
  for job in $(ls -d "$W"/paired-*-*/ 2>/dev/null | sed 's|.*/paired-[0-9]*-||; s|/$||' | sort -u); do
    step "pooled: $job"
    $PY tools/bench/turns.py --pool "$W"/paired-*-"$job"/turns.jsonl 2>&1 >/dev/null | grep -v "^turns.py"
  done
fi
