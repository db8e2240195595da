#!/usr/bin/env bash
# Which part of the shim a PyTorch test hangs in (issue 17): the given test
# ids of the fetched PyTorch tests (tools/gpu_fetch_torch_tests.sh), each
# plain and preloaded with parts of the shim off, TEST_TIMEOUT (45) s each.
# A run that times out gets, before it is killed, every process of its
# session listed with each thread's name, kernel wait channel and syscall,
# and gdb's backtraces where gdb exists.
#
#   OUT=$OUT bash tools/gpu_hang_probe.sh [TEST_ID...]     (carry [".gpu"]; /tmp/ps built)
#
# DUMP_AT=S: the same listing once, S seconds into each run, for a run that
# is slow rather than hung (it goes on to its end). Modes (MODES): plain,
# default (preloaded), nvml0, cupti0, both0, compress0, stacks0, and pin
# (PINSCOPE_PIN=1, PIN_MIN 4K), pool (the pool of registered slots, every
# batch: PIN_MIN 1, as tools/torch_tests.py's pool mode), pool4k (PIN_MIN 4K).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/pinscope-out}"
W=/tmp/pshang
rm -rf "$W"; mkdir -p "$W" "$OUT"
exec > >(tee -a "$W/hang.log") 2>&1
TESTS=${HANG_TESTS:-.gpu/ext/torch-tests}
SHIM=${SHIM:-/tmp/ps/lib/libpinscope.so}
GDB_DONE=0
ids=("$@")
[ ${#ids[@]} -gt 0 ] || ids=(
  "test_dataloader.py::TestDataLoaderDeviceTypeCUDA::test_nested_tensor_multiprocessing_context_spawn_cuda"
  "test_dataloader.py::TestDataLoaderDeviceTypeCUDA::test_nested_tensor_multiprocessing_context_forkserver_cuda")
modes="${MODES:-plain default nvml0 cupti0 both0 stacks0}"
dump() {  # the session's processes (gdb on the first 4)
  local sid=$1 gdbs=0
  for p in $(ps -o pid= -s "$sid" 2>/dev/null); do
    echo "--- pid $p: $(tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null | cut -c1-200)"
    grep -q libpinscope /proc/$p/maps 2>/dev/null && echo "    (libpinscope loaded)"
    for t in /proc/$p/task/*; do
      echo "    tid $(basename $t) $(cat $t/comm 2>/dev/null) wchan=$(cat $t/wchan 2>/dev/null) syscall=$(cut -d' ' -f1 $t/syscall 2>/dev/null)"
    done
    if command -v gdb >/dev/null && [ "$GDB_DONE" = 0 ] && [ $((gdbs += 1)) -le 4 ]; then
      timeout 10 gdb -p "$p" -batch -ex "thread apply all bt 10" 2>/dev/null | grep -E '^#|^Thread' | cut -c1-160 | head -150
    fi
  done
}
for id in "${ids[@]}"; do
  for m in $modes; do
    envs=(PYTHONPATH="$PWD/$TESTS/pylib" PYTHONUNBUFFERED=1)
    case $m in
      plain) ;;
      default) envs+=(LD_PRELOAD=$SHIM PINSCOPE_OUT=$W/run-$m) ;;
      nvml0) envs+=(LD_PRELOAD=$SHIM PINSCOPE_OUT=$W/run-$m PINSCOPE_NVML=0) ;;
      cupti0) envs+=(LD_PRELOAD=$SHIM PINSCOPE_OUT=$W/run-$m PINSCOPE_CUPTI=0) ;;
      both0) envs+=(LD_PRELOAD=$SHIM PINSCOPE_OUT=$W/run-$m PINSCOPE_CUPTI=0 PINSCOPE_NVML=0) ;;
      compress0) envs+=(LD_PRELOAD=$SHIM PINSCOPE_OUT=$W/run-$m PINSCOPE_COMPRESS=0) ;;
      pin) envs+=(LD_PRELOAD=$SHIM PINSCOPE_OUT=$W/run-$m PINSCOPE_PIN=1 PINSCOPE_PIN_POOL=0 PINSCOPE_PIN_MIN=4K) ;;
      pool) envs+=(LD_PRELOAD=$SHIM PINSCOPE_OUT=$W/run-$m PINSCOPE_PIN=1 PINSCOPE_PIN_POOL=1 PINSCOPE_PIN_MIN=1) ;;
      pool4k) envs+=(LD_PRELOAD=$SHIM PINSCOPE_OUT=$W/run-$m PINSCOPE_PIN=1 PINSCOPE_PIN_POOL=1 PINSCOPE_PIN_MIN=4K) ;;
      stacks0) envs+=(LD_PRELOAD=$SHIM PINSCOPE_OUT=$W/run-$m PINSCOPE_CUPTI=0 PINSCOPE_NVML=0 PINSCOPE_STACKS=0) ;;
    esac
    echo; echo "=== $m: $id ($(date +%T))"
    t0=$SECONDS
    # setsid: the test and its workers in a session of their own (-w: wait
    # for it where setsid has to fork).
    (cd "$TESTS" && exec setsid -w env "${envs[@]}" python3 -m pytest -q -p no:cacheprovider \
      -o addopts= "$id" > "$W/$m.$(echo "$id" | sed 's/.*:://').log" 2>&1) &
    pid=$!
    dumped=0
    while kill -0 $pid 2>/dev/null && [ $((SECONDS - t0)) -lt "${TEST_TIMEOUT:-45}" ]; do
      sleep 0.5
      if [ -n "${DUMP_AT:-}" ] && [ "$dumped" = 0 ] && [ $((SECONDS - t0)) -ge "$DUMP_AT" ] && kill -0 $pid 2>/dev/null; then
        dumped=1; echo "[$m] still running at ${DUMP_AT} s:"
        sid=$(ps -o sid= -p $pid | tr -d ' ')
        if [ "$sid" != "$pid" ]; then c=$(pgrep -P $pid | head -1); sid=$(ps -o sid= -p "$c" | tr -d ' '); fi
        dump "$sid"; GDB_DONE=1
      fi
    done
    if kill -0 $pid 2>/dev/null; then
      echo "[$m] TIMEOUT after ${TEST_TIMEOUT:-45} s"
      sid=$(ps -o sid= -p $pid | tr -d ' ')
      if [ "$sid" != "$pid" ]; then c=$(pgrep -P $pid | head -1); sid=$(ps -o sid= -p "$c" | tr -d ' '); fi
      dump "$sid"
      GDB_DONE=1  # backtraces of the first run that hung only: they take time
      pkill -KILL -s "$sid"; wait $pid 2>/dev/null
    else
      wait $pid; echo "[$m] exit $? in $((SECONDS - t0)) s: $(tail -1 "$W/$m.$(echo "$id" | sed 's/.*:://').log")"
    fi
  done
done
tar -C "$W" -czf "$OUT/hang.tgz" --exclude='run-*' . ; ls -l "$OUT/hang.tgz"
