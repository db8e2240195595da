#!/usr/bin/env bash
# Issue 16's benchmark (docs/benchmarks.md "pinscope's cost on the GPU"): in
# one device call, paired and interleaved, medians of REPS (5) runs each:
#
#   DEADLINE=520 timeout 590 bash tools/gpu_cost_final.sh build,loops,input,busy
#
#   build  tools/gpu_build.sh -> /tmp/ps
#   loops  tools/bench/cupti_overhead.py, launch-bound: mlp12 (~156 kernels a
#          step) and many (2,000+ kernels a step): no tool, pinscope's
#          default, torch.profiler (CPU+CUDA)
#          (VARIANTS="mlp12 many", PROFILER_REPS=3: the first reps that
#          also run torch.profiler; ROUNDS=5 rounds of MLP_STEPS=150 steps;
#          LOOP_MODES="plain pinscope" the modes of each rep)
#   input  tests/gpu/pipeline_job.py input_starvation (DataLoader-bound):
#          no tool, pinscope's default (INPUT_MODES replaces the modes,
#          INPUT_STEPS the steps, 60)
#   hf     tests/gpu/hf_trainer_job.py (issue 16's second row: the Hugging
#          Face Trainer, small BERT, batch 64, 4 workers, HF_STEPS=200
#          steps): no tool, pinscope's default (and, with HF_NOSTACKS=1,
#          PINSCOPE_STACKS=0); ms a step from the Trainer's
#          train_samples_per_second
#   turns  tools/bench/turns.py: per job of TURN_JOBS ("mlp12 many hf"), the
#          sides (no tool, pinscope's default; torch.profiler too on mlp12;
#          TURN_EXTRA="--side plain@again" adds a second no-tool side, the
#          spread of A against A; TURN_SIDES replaces the sides; TURN_EACH=5
#          runs 5 processes of each kind, and the kinds' 95% interval
#          resamples them; TURN_ARGS
#          more arguments, e.g. "--no-aslr --hashseed 0") take turns on the
#          GPU for TURN_SECONDS (90): the cost as the ratio of total turn
#          time, with its 95% interval; per kind also the steady pace (each
#          side's median turn) and the one-time excess above it
#   busy   tests/gpu/pipeline_job.py gpu_bound under PINSCOPE_CUPTI_KERNELS=all:
#          the kernel records' busy share and NVML's, from one run (the
#          report's --json: busy_fraction and nvml_busy_fraction); and the
#          same job at the default, for the busy share the report states
#
# PIN_CPUS=4-11: every run (no tool, pinscope, torch.profiler alike) under
# taskset -c PIN_CPUS, so that both sides of a pair run on the same cores.
#
# $OUT gets cost-final.tgz: the log, results.jsonl, summary.txt, the runs.
set -uo pipefail
phases="${1:-build,loops,input,busy}"
has() { [[ ",$phases," == *",$1,"* ]]; }
OUT="${OUT:-/tmp/pinscope-out}"
W=/tmp/pscostf
REPS="${REPS:-5}"
rm -rf "$W"; mkdir -p "$OUT" "$W"
exec > >(tee -a "$W/cost-final.log") 2>&1
export PYTHONUNBUFFERED=1
PY=${PY:-python3}
PS=${PS:-/tmp/ps/bin/pinscope}
step() { echo; echo "=== $* ($(date +%T))"; }
pack() {
  step "pack"
  find "$W" -name '*.pstrace' -size +20M -delete  # keep the tarball small
  tar -C "$W" -czf "$OUT/cost-final.tgz" . && ls -l "$OUT/cost-final.tgz"
}
trap pack EXIT

step "machine"; nvidia-smi -L; nproc
if has build; then step "build"; bash tools/gpu_build.sh || exit 1; fi
[ -x "$PS" ] || { echo "no build at $PS"; exit 1; }

# one KIND REP MODE NAME CMD...: MODE plain|profiler (no pinscope) or pinscope[:ENV=V,...]
one() {
  local kind="$1" rep="$2" mode="$3" name="$4"; shift 4
  if [ "$SECONDS" -gt "${DEADLINE:-1000000}" ]; then echo "[$name $mode r$rep] skipped: past DEADLINE"; return; fi
  local base="$W/$name-${mode//[:=,]/_}-r$rep" rc envs=() limit=120
  # torch.profiler's event processing of a 10 x 300-step loop ran past 120 s
  # on 2026-12-05 (exit 124 twice): it runs fewer rounds, with more time.
  [ "$mode" = profiler ] && limit=${PROFILER_TIMEOUT:-300}
  local pre=()
  [ -n "${PIN_CPUS:-}" ] && pre=(taskset -c "$PIN_CPUS")
  case "$mode" in
    plain|profiler) timeout -k 5 "$limit" "${pre[@]}" "$@" > "$base.out" 2> "$base.err"; rc=$? ;;
    pinscope*)
      IFS=, read -ra envs <<< "${mode#pinscope}"; envs=("${envs[@]#:}")
      timeout -k 5 120 "${pre[@]}" env "${envs[@]}" "$PS" run --no-report -o "$base.run" -- "$@" > "$base.out" 2> "$base.err"; rc=$? ;;
  esac
  local job=$(grep '^{' "$base.out" | tail -1)
  echo "{\"kind\": \"$kind\", \"rep\": $rep, \"mode\": \"$mode\", \"name\": \"$name\", \"rc\": $rc, \"job\": ${job:-null}}" >> "$W/results.jsonl"
  echo "[$name $mode r$rep] exit $rc: ${job:0:160}"
  [ $rc -eq 0 ] || tail -5 "$base.err"
}
LOOP="tools/bench/cupti_overhead.py --rounds ${ROUNDS:-5} --warmup 30"
JOB=tests/gpu/pipeline_job.py

for rep in $(seq "$REPS"); do
  if has busy && [ "$rep" = 1 ]; then
    one busy 1 "pinscope:PINSCOPE_CUPTI_KERNELS=all" gpu_bound $PY $JOB --scenario gpu_bound --steps 40
    one busy 1 pinscope gpu_bound $PY $JOB --scenario gpu_bound --steps 40
  fi
  if has loops; then
    for v in ${VARIANTS:-mlp12 many}; do
      steps=${MLP_STEPS:-150}; [ $v = many ] && steps=30
      # LOOP_MODES: the modes of each rep, e.g. "plain pinscope
      # pinscope:PINSCOPE_CUPTI=0" (pinscope[:ENV=V,...] as in one()).
      for m in ${LOOP_MODES:-plain pinscope}; do
        one loop "$rep" "$m" "$v" $PY $LOOP --variant $v --steps $steps --mode "${m%%:*}"
      done
      # torch.profiler for comparison: 3 runs of the mlp12 loop (its event
      # processing on 2,000-kernel steps takes longer than the call allows)
      if [ $v = mlp12 ] && [ "$rep" -le "${PROFILER_REPS:-3}" ]; then
        # Its own rounds (PROFILER_ROUNDS, 3): ms a step is a median over
        # rounds, comparable; its event processing grows with the steps.
        one loop "$rep" profiler "$v" $PY tools/bench/cupti_overhead.py --rounds "${PROFILER_ROUNDS:-3}" \
          --warmup 30 --variant $v --steps $steps --mode profiler
      fi
    done
  fi
  if has input; then
    # INPUT_MODES: the modes of each rep (as LOOP_MODES); INPUT_STEPS (60);
    # INPUT_ARGS: more of the job's flags (e.g. --worker-timing /tmp/wt.txt).
    for m in ${INPUT_MODES:-plain pinscope}; do
      one input "$rep" "$m" input_starvation $PY $JOB --scenario input_starvation --steps "${INPUT_STEPS:-60}" ${INPUT_ARGS:-}
    done
  fi
  if has hf; then
    one hf "$rep" plain hf_trainer $PY tests/gpu/hf_trainer_job.py --batch 64 --workers 4 --steps "${HF_STEPS:-200}"
    one hf "$rep" pinscope hf_trainer $PY tests/gpu/hf_trainer_job.py --batch 64 --workers 4 --steps "${HF_STEPS:-200}"
    # HF_NOSTACKS=1: also pinscope without call stacks, so that one call
    # splits a hook's time (the report's own-cost line: stacks, pointer
    # queries, the rest).
    if [ "${HF_NOSTACKS:-0}" = 1 ]; then
      one hf "$rep" pinscope:PINSCOPE_STACKS=0 hf_trainer $PY tests/gpu/hf_trainer_job.py --batch 64 --workers 4 --steps "${HF_STEPS:-200}"
    fi
  fi
done
if has turns; then
  for job in ${TURN_JOBS:-mlp12 many hf}; do
    if [ "$SECONDS" -gt "${DEADLINE:-1000000}" ]; then echo "[turns $job] skipped: past DEADLINE"; continue; fi
    sides=(--side plain --side pinscope)
    [ "$job" = mlp12 ] && sides+=(--side profiler)
    # shellcheck disable=SC2206
    [ -n "${TURN_SIDES:-}" ] && sides=($TURN_SIDES)
    # TURN_EACH=N: N processes of each kind (plain@1 pinscope@1 ... plain@N
    # pinscope@N), so that the kinds' interval holds the spread between two
    # processes of one job; torch.profiler once more on mlp12.
    if [ -n "${TURN_EACH:-}" ]; then
      sides=()
      for i in $(seq "$TURN_EACH"); do sides+=(--side "plain@$i" --side "pinscope@$i"); done
      [ "$job" = mlp12 ] && sides+=(--side profiler)
    fi
    # shellcheck disable=SC2206
    [ -n "${TURN_EXTRA:-}" ] && sides+=($TURN_EXTRA)
    # shellcheck disable=SC2206
    [ -n "${TURN_ARGS:-}" ] && sides+=($TURN_ARGS)
    step "turns: $job (${sides[*]})"
    timeout -k 5 $(( ${TURN_SECONDS:-90} + 240 )) $PY tools/bench/turns.py --job "$job" "${sides[@]}" \
      --seconds "${TURN_SECONDS:-90}" --ps "$PS" --out "$W/turns-$job" ${PIN_CPUS:+--taskset "$PIN_CPUS"} |
      tee -a "$W/turns.jsonl"
  done
fi
if has busy; then
  step "busy shares"
  for r in "$W"/gpu_bound-*.run; do
    echo "$r"; "$PS" report --json "$r" 2>/dev/null | $PY -c '
import json, sys
d = json.load(sys.stdin)
for x in d.get("device_activity", []):
    print("  device", x["device_id"], "source", x.get("busy_source"), "busy", x["busy_fraction"],
          "active", x["active_busy_fraction"], "nvml", x.get("nvml_busy_fraction"),
          "samples", x.get("nvml_samples"), "period_ns", x.get("nvml_period_ns"))
g = d.get("pipeline", {}).get("gpu", {})
print("  pipeline gpu", g, "verdict", d.get("verdict", {}).get("kind", d.get("verdict")))' | tee -a "$W/busy.txt"
  done
fi

# pinscope's own cost as each traced run's report states it (Counters:
# hook time per call, call stacks, pinscope's threads; docs/report.md).
step "own cost, as the reports state it"
for r in "$W"/*.run "$W"/turns-*/*.run; do
  compgen -G "$r/*.pstrace" > /dev/null || continue  # no trace (no CUDA call)
  "$PS" report --json "$r" 2>/dev/null | $PY -c '
import json, sys
d = json.load(sys.stdin)
o = d.get("own_cost")
name = sys.argv[1].rsplit("/", 1)[-1]
# Where the device-record windows fell (docs/device-activity.md): the first
# one opens at the first hooked CUDA call, after any start-up.
for x in d.get("device_activity", []):
    w = x.get("device_windows")
    if w:
        print("  %s: %d window(s), first after %.2f s, %.1f%% of the life recorded, %d host calls between" % (
            name, w["windows"], w.get("before_first_ns", 0) / 1e9, 100 * w["recorded_fraction"],
            w["host_calls_between"]))
if not o:
    print("  %s: no own_cost (a shim before the counters)" % name)
    sys.exit()
loop = o.get("loop")
in_loop = ("; in the steady loop %.1f us a step (%.2f%% of its %.2f ms step)" % (
    loop["hook_ns_per_step"] / 1e3, 100 * loop["hook_fraction_of_step"], loop["step_ns"] / 1e6)
    if loop else "; no steady loop with two flushes")
if loop and loop.get("pointer_queries"):
    in_loop += ", of it pointer queries %.1f us (%.1f a step)" % (
        loop["pointer_query_ns"] * loop["step_ns"] / loop["span_ns"] / 1e3,
        loop["pointer_queries"] * loop["step_ns"] / loop["span_ns"])
# CUPTI switched on or off on the program threads (shims since the eighteenth
# session): a window attach and detach, inside the hook time.
if loop and loop.get("cupti_switches"):
    in_loop += ", of it CUPTI switches %.1f us (%d in the span, %.1f ms)" % (
        loop["cupti_switch_ns"] * loop["step_ns"] / loop["span_ns"] / 1e3,
        loop["cupti_switches"], loop["cupti_switch_ns"] / 1e6)
# Of the hooks: the driver queries classifying pointers (shims since
# 2026-12-05, the seventeenth session).
queries = ("; pointer queries %d, %.2f us each" % (
    o["pointer_queries"], o["pointer_query_ns"] / o["pointer_queries"] / 1e3)
    if o.get("pointer_queries") else "")
if o.get("cupti_switches"):
    queries += "; CUPTI switches %d, %.1f ms" % (o["cupti_switches"], o["cupti_switch_ns"] / 1e6)
# What each device-record window cost the loop, measured in it (the report
# since the eighteenth session: own_cost.device_windows).
dw = o.get("device_windows")
if dw:
    for w in dw["windows"]:
        if w.get("paused"):
            queries += "; window %.0f ms: the loop paused near it (a gap of %.1f ms), not measured" % (
                w["length_ns"] / 1e6, w["longest_interval_ns"] / 1e6)
            continue
        queries += "; window %.0f ms: %+.1f ms in it (%d intervals), %+.1f ms in the %.1f s after" % (
            w["length_ns"] / 1e6, w["excess_in_ns"] / 1e6, w["intervals_in"],
            w["excess_after_ns"] / 1e6, dw["after_ns"] / 1e9)
print("  %s: %d hooks, %.2f us a call, %.3f%% of the run%s; stacks %.1f ms%s; own threads %.1f ms CPU" % (
    name, o["hook_calls"], o["hook_ns"] / max(1, o["hook_calls"]) / 1e3, 100 * o["hook_fraction_of_run"],
    in_loop, o["stack_capture_ns"] / 1e6, queries, o["own_threads_cpu_ns"] / 1e6))' "$r" | tee -a "$W/own-cost.txt"
done

step "summary"
[ -s "$W/results.jsonl" ] && $PY - "$W/results.jsonl" <<'PYEOF' | tee "$W/summary.txt"
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
def StepMs(j):
    # The loops print their step; the HF Trainer its samples/s over train().
    if "train_samples_per_second" in j:
        return 1000.0 * j["batch"] / j["train_samples_per_second"]
    return j.get("step_ms_median", j.get("step_ms"))
by = {}
for r in runs:
    j = r["job"]
    if r["rc"] != 0 or not j: continue
    v = StepMs(j)
    by.setdefault((r["name"], r["mode"]), []).append(v)
for name in sorted({k[0] for k in by}):
    base = by.get((name, "plain"))
    print(f"{name}: ms/step, median of n runs (overhead vs no tool)")
    for (n, m), xs in sorted(by.items()):
        if n != name: continue
        med = statistics.median(xs)
        over = f"{100 * (med / statistics.median(base) - 1):+6.2f}%" if base else ""
        print(f"  {m:40s} {med:9.3f} {over}  n={len(xs)} {sorted(xs)}")
    # paired: per rep, pinscope / plain
    if base:
        pairs = {}
        for r in runs:
            if r["name"] == name and r["rc"] == 0 and r["job"] and r["mode"] in ("plain", "pinscope"):
                pairs.setdefault(r["rep"], {})[r["mode"]] = StepMs(r["job"])
        ratios = [p["pinscope"] / p["plain"] for p in pairs.values() if len(p) == 2]
        if ratios:
            print(f"  paired pinscope/plain: median {100 * (statistics.median(ratios) - 1):+.2f}% of {len(ratios)} pairs {[round(x, 4) for x in sorted(ratios)]}")
PYEOF
