#!/usr/bin/env bash
# Runs on the GPU machine, from the repo root, with the bundle that
# tools/make_gpu_bundle.sh made (.gpu/). Phases (one or more, comma-separated,
# in one device call):
#   tools/gpu_validate.sh validate   # GPU suite: copies, processes, stacks,
#                                    # CUPTI, pinning correctness; example traces
#   tools/gpu_validate.sh bench      # benchmarks for docs/benchmarks.md
#   tools/gpu_validate.sh ab         # paired A/B runs (pinning at 0 workers,
#                                    # cost with pin_memory, CUPTI modes)
#   tools/gpu_validate.sh pairs4     # paired runs at 4 workers: PINSCOPE_PIN=1
#                                    # pin_memory=False vs pin_memory=True
#   tools/gpu_validate.sh ahead      # pin-ahead: loader batches bit-identical,
#                                    # PIN=1 with/without PINSCOPE_PIN_AHEAD vs
#                                    # pin_memory=True at 4 and 8 workers
#   tools/gpu_validate.sh train      # training-shaped job: PIN=1 pin_memory=False
#                                    # vs pin_memory=True, 4 and 8 workers
#   tools/gpu_validate.sh cost       # paired runs, pinscope vs none on
#                                    # pin_memory=True jobs: steady-state
#                                    # samples/s and CPU per sample
# Everything lands in $OUT (the device tool brings it back): a log, JSON
# results, and the run folders packed in one tarball. The checks that read
# traces run afterwards on any machine (tests/gpu/*_check.py, docs/validation.md).
set -uo pipefail
phases="${1:-validate}"
has() { [ "$phases" = all ] || [[ ",$phases," == *",$1,"* ]]; }
phase="${phases//,/_}"   # names the log and the tarball (the device tool brings back only plain names: no "+")
OUT="${OUT:-/tmp/pinscope-out}"
W=/tmp/psw
rm -rf "$W"; mkdir -p "$W" "$OUT"
exec > >(tee "$OUT/$phase.log") 2>&1
export PYTHONUNBUFFERED=1
export PATH="$PWD/.gpu/prefix/bin:$PATH"
PY=python3
step() { echo; echo "=== $* ($(date +%T))"; }

step "machine"
nvidia-smi -L; nproc; free -g | head -2; df -h /dev/shm | tail -1
$PY -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.version.cuda, "python", sys.version.split()[0])'
ldd .gpu/prefix/bin/pinscope | grep -E "not found|protobuf|unwind|dw" ; ldd .gpu/prefix/lib/libpinscope.so
pinscope --version

# Copy the calibration into each run folder (pinscope run does it too).
export PINSCOPE_CALIBRATION="$W/calibration.json"

run() {  # run NAME [ENV=V...] -- CMD...: pinscope run into $W/NAME, no report
  local name="$1"; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  local t0=$(date +%s%N)
  timeout -k 5 "${STEP_TIMEOUT:-120}" env "${envs[@]}" pinscope run --no-report -o "$W/$name" -- "$@"
  local rc=$?
  echo "[$name] exit $rc in $(( ($(date +%s%N) - t0) / 1000000 )) ms"
  return $rc
}

pack() { tar czf "$OUT/runs-$phase.tgz" -C "$W" .; }  # what a time-out would lose
# The validate phase calibrates with its output in the log; the others quietly, once.
has validate || pinscope calibrate --output "$W/calibration.json" >/dev/null

if has validate; then
  step "shim from source on this machine (g++ $(g++ -dumpversion), cmake $(cmake --version | head -1))"
  rm -rf /tmp/deps /tmp/srcbuild; mkdir -p /tmp/deps
  for d in .gpu/debs/*.deb; do dpkg -x "$d" /tmp/deps; done
  (cmake -S . -B /tmp/srcbuild -DPINSCOPE_BUILD_ANALYZER=OFF -DPINSCOPE_BUILD_TESTS=OFF \
     -DCMAKE_PREFIX_PATH=/tmp/deps/usr >/tmp/srcbuild.log 2>&1 &&
   cmake --build /tmp/srcbuild -j16 >>/tmp/srcbuild.log 2>&1 &&
   echo "source build OK: $(ls -la /tmp/srcbuild/lib/libpinscope.so)" || { echo "source build FAILED"; tail -20 /tmp/srcbuild.log; }) > /tmp/srcbuild.result 2>&1 &
  srcbuild_pid=$!

  step "calibrate"
  pinscope calibrate --output "$W/calibration.json"

  step "issue 2: known copies"
  run copies -- $PY tests/gpu/copies_known.py "$W/copies.expected.json"
  cp "$W/copies.expected.json" "$W/copies/expected.json" 2>/dev/null

  step "issue 2/3/6: seed benchmark, num_workers=0 (example trace) and 4"
  run seed0 -- $PY tools/bench/seedbench.py --samples 1280 --configs 0f
  run seed4 -- $PY tools/bench/seedbench.py --samples 2560 --configs 4f

  step "issue 5: seed benchmark runs for the report (one config per run)"
  run seed_0t -- $PY tools/bench/seedbench.py --samples 1280 --configs 0t
  run seed_8f -- $PY tools/bench/seedbench.py --samples 5120 --configs 8f
  run seed_8t -- $PY tools/bench/seedbench.py --samples 5120 --configs 8t

  step "issue 5: synchronous copies (loss.item() every step) and the fix"
  $PY tests/gpu/sync_copy_job.py --json "$W/sync_item_none.json"
  $PY tests/gpu/sync_copy_job.py --fixed --json "$W/sync_fixed_none.json"
  run sync_item -- $PY tests/gpu/sync_copy_job.py
  run sync_fixed -- $PY tests/gpu/sync_copy_job.py --fixed

  if [ -f tests/gpu/cupti_check.py ]; then
    step "issue 7: CUPTI"
    $PY tests/gpu/cupti_check.py --help >/dev/null 2>&1 || true
    run cupti -- $PY tests/gpu/cupti_check.py run
    run gpubound -- $PY tests/gpu/cupti_check.py gpubound
    run cupti_profiler -- $PY tests/gpu/cupti_check.py profiler
  fi

  step "issue 4: pinning correctness"
  run pin_hazard PINSCOPE_PIN=1 -- $PY tests/gpu/pinning_check.py hazard
  run pin_data PINSCOPE_PIN=1 -- $PY tests/gpu/pinning_check.py data
  run nopin_hazard -- $PY tests/gpu/pinning_check.py hazard
  run async_hazard PINSCOPE_PIN=async -- $PY tests/gpu/pinning_check.py hazard || true
  run loader_nopin -- $PY tests/gpu/pinning_check.py loader --json "$W/loader_nopin.json"
  run loader_pin PINSCOPE_PIN=1 -- $PY tests/gpu/pinning_check.py loader --json "$W/loader_pin.json"
  cmp "$W/loader_nopin.json" "$W/loader_pin.json" && echo "PASS loader batches bit-identical with and without pinning" || echo "FAIL loader batches differ"
  # num_workers=0: the collated batch is a malloc block, freed and allocated
  # again every batch, so it runs through the recycle list (REUSE).
  run loader0_nopin -- $PY tests/gpu/pinning_check.py loader --workers 0 --json "$W/loader0_nopin.json"
  run loader0_pin PINSCOPE_PIN=1 -- $PY tests/gpu/pinning_check.py loader --workers 0 --json "$W/loader0_pin.json"
  cmp "$W/loader0_nopin.json" "$W/loader0_pin.json" && echo "PASS loader (0 workers, recycle list) batches bit-identical with and without pinning" || echo "FAIL loader (0 workers) batches differ"
  $PY tests/gpu/pinning_check.py fork --gib 8
  run fork_pin PINSCOPE_PIN=1 PINSCOPE_PIN_BUDGET=16G -- $PY tests/gpu/pinning_check.py fork --gib 8
fi

if has validate; then
  step "pack validation"
  pack && ls -la "$OUT"
fi

if has bench; then
  cfgs="${BENCH_CONFIGS:-0f,0t,4f,4t,8f,8t}"
  n="${BENCH_SAMPLES:-3840}"
  # Four modes per repetition, in a rotating order so drift over the call
  # does not favour one of them.
  mode() {  # mode NAME REP
    case "$1" in
      none) timeout -k 5 150 $PY tools/bench/seedbench.py --samples "$n" --configs "$cfgs" \
              --json "$W/bench_none_$2.json" ;;
      ps) run bench_ps_$2 -- $PY tools/bench/seedbench.py --samples "$n" --configs "$cfgs" \
              --json "$W/bench_ps_$2.json" ;;
      nostacks) run bench_nostacks_$2 PINSCOPE_STACKS=0 -- $PY tools/bench/seedbench.py \
              --samples "$n" --configs "$cfgs" --json "$W/bench_nostacks_$2.json" ;;
      pin) run bench_pin_$2 PINSCOPE_PIN=1 -- $PY tools/bench/seedbench.py --samples "$n" \
              --configs "$cfgs" --json "$W/bench_pin_$2.json" ;;
    esac
  }
  orders=("none ps nostacks pin" "pin nostacks ps none" "ps none pin nostacks" "nostacks pin none ps")
  for rep in $(seq 1 "${BENCH_REPEATS:-3}"); do
    step "seedbench rep $rep"
    for m in ${orders[$(( (rep - 1) % 4 ))]}; do echo "--- $m"; mode "$m" "$rep"; done
    pack
  done
  step "training-shaped"
  $PY tools/bench/seedbench.py --train --samples "$n" --configs 0f,0t,4f,4t,8f,8t --json "$W/train_none.json"
  run train_pin PINSCOPE_PIN=1 -- $PY tools/bench/seedbench.py --train --samples "$n" --configs 0f,0t,4f,4t,8f,8t --json "$W/train_pin.json"
  if [ -f tools/bench/cupti_overhead.py ]; then
    step "CUPTI overhead (modes interleaved)"
    co() { $PY tools/bench/cupti_overhead.py --rounds "${CUPTI_ROUNDS:-9}" "$@"; }
    for rep in 1 2; do
      co --mode none | tee -a "$W/cupti_overhead.jsonl"
      pinscope run --no-report -o "$W/cupti_auto_$rep" -- $PY tools/bench/cupti_overhead.py \
        --rounds "${CUPTI_ROUNDS:-9}" --mode pinscope_auto | tee -a "$W/cupti_overhead.jsonl"
      co --mode profiler | tee -a "$W/cupti_overhead.jsonl"
      PINSCOPE_CUPTI_KERNELS=all pinscope run --no-report -o "$W/cupti_all_$rep" -- $PY \
        tools/bench/cupti_overhead.py --rounds "${CUPTI_ROUNDS:-9}" --mode pinscope_all | tee -a "$W/cupti_overhead.jsonl"
      PINSCOPE_CUPTI=0 pinscope run --no-report -o "$W/cupti_off_$rep" -- $PY \
        tools/bench/cupti_overhead.py --rounds "${CUPTI_ROUNDS:-9}" --mode pinscope_nocupti | tee -a "$W/cupti_overhead.jsonl"
    done
  fi
fi

if [ "$phases" = ab ]; then
  # Paired A/B runs for the figures the median table cannot resolve: one
  # process per mode, alternating, so drift hits both sides alike.
  sbj() { local out="$1"; shift; timeout -k 5 120 $PY tools/bench/seedbench.py --json "$out" "$@"; }
  step "pinning at 0 workers: PINSCOPE_PIN=1 pin_memory=False vs pin_memory=True without pinscope"
  for rep in 1 2 3; do
    run ab_pin0_$rep PINSCOPE_PIN=1 -- $PY tools/bench/seedbench.py --samples 2560 --configs 0f --json "$W/ab_pin0_$rep.json"
    sbj "$W/ab_none0t_$rep.json" --samples 2560 --configs 0t
  done
  step "pinscope's cost with pin_memory=True (nothing to gain)"
  for rep in 1 2 3 4; do
    sbj "$W/ab_none_t_$rep.json" --samples 2560 --configs 0t,8t
    run ab_ps_t_$rep -- $PY tools/bench/seedbench.py --samples 2560 --configs 0t,8t --json "$W/ab_ps_t_$rep.json"
  done
  pack
  step "more workers with pin_memory=True (the 8t report says: input starvation)"
  sbj "$W/ab_workers.json" --samples 5120 --configs 8t,12t,15t
  step "CUPTI overhead by kernel-recording mode (interleaved)"
  co() { $PY tools/bench/cupti_overhead.py --rounds 5 "$@" | tee -a "$W/cupti_ab.jsonl"; }
  for rep in 1 2; do
    co --mode none
    PINSCOPE_CUPTI=0 pinscope run --no-report -o "$W/cab_off_$rep" -- $PY tools/bench/cupti_overhead.py --rounds 5 --mode pinscope_nocupti | tee -a "$W/cupti_ab.jsonl"
    PINSCOPE_CUPTI_KERNELS=off pinscope run --no-report -o "$W/cab_koff_$rep" -- $PY tools/bench/cupti_overhead.py --rounds 5 --mode pinscope_kernels_off | tee -a "$W/cupti_ab.jsonl"
    pinscope run --no-report -o "$W/cab_auto_$rep" -- $PY tools/bench/cupti_overhead.py --rounds 5 --mode pinscope_auto | tee -a "$W/cupti_ab.jsonl"
    PINSCOPE_CUPTI_KERNELS=all pinscope run --no-report -o "$W/cab_all_$rep" -- $PY tools/bench/cupti_overhead.py --rounds 5 --mode pinscope_all | tee -a "$W/cupti_ab.jsonl"
    co --mode profiler
    pack
  done
fi

if has pairs4; then
  # The 4-worker cell of the pinning target, in pairs (one process per side,
  # the order alternating), steady-state samples/s from seedbench's JSON.
  n4="${PAIRS_SAMPLES:-10240}"
  step "4 workers: PINSCOPE_PIN=1 pin_memory=False vs pin_memory=True (and False) without pinscope"
  for rep in $(seq 1 "${PAIRS_REPEATS:-5}"); do
    a() { run p4_pin_$rep PINSCOPE_PIN=1 -- $PY tools/bench/seedbench.py --samples "$n4" --configs 4f --json "$W/p4_pin_$rep.json"; }
    b() { timeout -k 5 120 $PY tools/bench/seedbench.py --samples "$n4" --configs 4t --json "$W/p4_none_t_$rep.json"; }
    c() { timeout -k 5 120 $PY tools/bench/seedbench.py --samples "$n4" --configs 4f --json "$W/p4_none_f_$rep.json"; }
    if [ $((rep % 2)) = 1 ]; then a; b; c; else c; b; a; fi
  done
  run p4_ps_t -- $PY tools/bench/seedbench.py --samples "$n4" --configs 4t --json "$W/p4_ps_t.json"
  pack
fi

if has ahead; then
  step "pin-ahead: DataLoader batches bit-identical with and without pinning (4 workers)"
  run ah_loader_nopin -- $PY tests/gpu/pinning_check.py loader --json "$W/ah_loader_nopin.json"
  run ah_loader_pin PINSCOPE_PIN=1 -- $PY tests/gpu/pinning_check.py loader --json "$W/ah_loader_pin.json"
  cmp "$W/ah_loader_nopin.json" "$W/ah_loader_pin.json" && echo "PASS loader batches bit-identical with pin-ahead" || echo "FAIL loader batches differ with pin-ahead"
  step "pin-ahead while the main thread captures CUDA graphs (global capture mode)"
  run ah_capture PINSCOPE_PIN=1 -- $PY tests/gpu/pinning_check.py capture --json "$W/ah_capture.json"
  na="${AHEAD_SAMPLES:-10240}"
  step "pin-ahead A/B: PIN=1 (ahead on) vs PIN=1 PINSCOPE_PIN_AHEAD=0 vs pin_memory=True without pinscope ($na samples, 4 and 8 workers)"
  for rep in $(seq 1 "${AHEAD_REPEATS:-3}"); do
    x() { run ah_on_$rep PINSCOPE_PIN=1 -- $PY tools/bench/seedbench.py --samples "$na" --configs 4f,8f --json "$W/ah_on_$rep.json"; }
    y() { run ah_off_$rep PINSCOPE_PIN=1 PINSCOPE_PIN_AHEAD=0 -- $PY tools/bench/seedbench.py --samples "$na" --configs 4f,8f --json "$W/ah_off_$rep.json"; }
    z() { timeout -k 5 150 $PY tools/bench/seedbench.py --samples "$na" --configs 4t,8t --json "$W/ah_none_t_$rep.json"; }
    case $((rep % 3)) in 1) x; y; z ;; 2) y; z; x ;; 0) z; x; y ;; esac
    pack
  done
fi

if has train; then
  step "releasing a batch's shared memory (munmap, close of the last fd)"
  $PY tools/bench/shm_release.py --reps 8 --json "$W/shm_release.json"
  nt="${TRAIN_SAMPLES:-7680}"
  step "training-shaped job: PINSCOPE_PIN=1 pin_memory=False vs pin_memory=True without pinscope ($nt samples)"
  for rep in $(seq 1 "${TRAIN_REPEATS:-2}"); do
    x() { run tr_pin_$rep PINSCOPE_PIN=1 -- $PY tools/bench/seedbench.py --train --samples "$nt" --configs 4f,8f --json "$W/tr_pin_$rep.json"; }
    z() { timeout -k 5 150 $PY tools/bench/seedbench.py --train --samples "$nt" --configs 4t,8t --json "$W/tr_none_t_$rep.json"; }
    if [ $((rep % 2)) = 1 ]; then x; z; else z; x; fi
  done
  pack
fi

if has cost; then
  # pinscope's cost where nothing can be gained (pin_memory=True), in pairs:
  # one process per side, ABBA order, steady state and CPU per sample.
  nc="${COST_SAMPLES:-7680}"; cc="${COST_CONFIGS:-0t,4t,8t}"
  step "cost on pin_memory=True jobs: pinscope run vs none ($cc, $nc samples)"
  for rep in $(seq 1 "${COST_REPEATS:-6}"); do
    a() { run c_ps_$rep -- $PY tools/bench/seedbench.py --samples "$nc" --configs "$cc" --json "$W/c_ps_$rep.json"; }
    b() { timeout -k 5 150 $PY tools/bench/seedbench.py --samples "$nc" --configs "$cc" --json "$W/c_none_$rep.json"; }
    if [ $((rep % 2)) = 1 ]; then a; b; else b; a; fi
    pack
  done
fi

# Wait for the source build only (a bare `wait` would also wait for the
# tee of the log, which never ends), and not for long.
if [ -n "${srcbuild_pid:-}" ]; then
  for _ in $(seq 60); do kill -0 "$srcbuild_pid" 2>/dev/null || break; sleep 1; done
  kill "$srcbuild_pid" 2>/dev/null
  step "shim source build result"; cat /tmp/srcbuild.result
fi
step "pack"
pack && ls -la "$OUT"
