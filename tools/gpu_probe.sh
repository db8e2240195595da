#!/usr/bin/env bash
# Short probes on the GPU machine (after tools/gpu_build.sh): where the main
# thread's time goes for a worker's shm batch (tests/gpu/shm_copy_probe.py),
# with and without pinscope; and page-fault costs before and after the VM's
# memory was touched once (the lent machine grows its memory on first use).
set -uo pipefail
OUT="${OUT:-/tmp/pinscope-out}"; mkdir -p "$OUT"
exec > >(tee -a "$OUT/probe.log") 2>&1
PS=${PS:-/tmp/ps/bin/pinscope}
[ -x "$PS" ] || bash tools/gpu_build.sh || exit 1
export PYTHONUNBUFFERED=1
echo "=== calibrate cold"; $PS calibrate --sizes 64M --repeats 3 --output /tmp/cal-cold.json | tail -2
echo "=== touch 48 GiB of memory once"
python3 -c "
import mmap, time
t=time.time(); n=48<<30; m=mmap.mmap(-1, n)
for off in range(0, n, 1<<21): m[off]=1
print('touched 48 GiB in %.1f s' % (time.time()-t))"
echo "=== calibrate warm"; $PS calibrate --sizes 1M,8M,64M,256M --output "$HOME/.cache/pinscope/calibration.json" | tail -6
for w in 4 0; do
  echo "=== probe workers=$w"
  python3 tests/gpu/shm_copy_probe.py --workers $w --batch 128 --steps 30
  LD_PRELOAD=/tmp/ps/lib/libpinscope.so PINSCOPE_OUT=/tmp/probe-w$w python3 tests/gpu/shm_copy_probe.py --workers $w --batch 128 --steps 30
  LD_PRELOAD=/tmp/ps/lib/libpinscope.so PINSCOPE_OUT=/tmp/probe-w$w-nocupti PINSCOPE_CUPTI=0 PINSCOPE_STACKS=0 python3 tests/gpu/shm_copy_probe.py --workers $w --batch 128 --steps 30
done
cp "$HOME/.cache/pinscope/calibration.json" "$OUT/calibration-warm.json"
