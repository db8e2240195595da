#!/usr/bin/env bash
# The wheel on the GPU machine (issue 18, docs/validation.md): the wheel built
# here (tools/build_wheel.sh --out .gpu/wheel, carried with .gpu) installed
# with `pip install --no-index` into a fresh virtual environment that sees
# the machine's torch (--system-site-packages) and nothing else of pinscope,
# then `pinscope run` of a real PyTorch DataLoader job (tests/gpu/
# pipeline_job.py --scenario shm_batches: 8 workers, 128-image batches
# through /dev/shm) with LD_LIBRARY_PATH empty and PATH the venv's, plain and
# under PINSCOPE_PIN=1; no build, no .debs, no source tree on PATH.
#
#   OUT=$OUT DEADLINE=300 tools/gpu_wheel_check.sh
#
# $OUT gets wheel-check.tgz: the log, both reports, ldd of the installed
# files. Exit 0 when every check passed; the log's last line says how many
# failed.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/pinscope-out}"
W=/tmp/pswheel
PY=${PY:-python3}
rm -rf "$W"; mkdir -p "$OUT" "$W"
exec > >(tee -a "$W/wheel-check.log") 2>&1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }
step() { echo; echo "=== $* ($(date +%T), ${SECONDS} s)"; }
finish() {
  step "pack"
  echo "wheel check: $fails failed"
  (cd "$W" && tar czf "$OUT/wheel-check.tgz" --exclude=venv --exclude='run-*' .)
  ls -la "$OUT"
  exit $((fails > 0))
}

step "machine"
nvidia-smi -L 2>/dev/null || echo "no nvidia-smi"
$PY -c 'import torch, sys; print("torch", torch.__version__, "cuda", torch.cuda.is_available(), "python", sys.version.split()[0])' ||
  { fail "no torch in $PY"; finish; }
whl=${WHEEL:-$(ls .gpu/wheel/pinscope-*.whl 2>/dev/null | head -1)}
[ -f "$whl" ] || { fail "no wheel: run tools/build_wheel.sh --out .gpu/wheel here and carry .gpu"; finish; }
echo "wheel: $whl"

step "install"
v=$W/venv
# --without-pip: Ubuntu's python3 has no ensurepip without python3-venv; the
# system pip installs into the venv (--python, pip >= 22.3).
if $PY -m venv --system-site-packages --without-pip "$v" && \
   $PY -m pip --python "$v/bin/python" install --no-index --no-deps "$whl"; then
  ok "pip install --no-index into a fresh venv"
else
  fail "venv + pip --python failed; trying pip install --prefix"
  rm -rf "$v"
  $PY -m pip install --no-index --no-deps --prefix "$v" "$whl" || { fail "pip install --prefix"; finish; }
  mkdir -p "$v/bin"; ln -sf "$(command -v "$PY")" "$v/bin/python"
fi
# The machine's torch lives in a virtual environment of its own (on the H200:
# /opt/torch/.venv), whose packages a venv made from it does not see as
# "system" ones: a .pth file names its site-packages, as a user who installs
# pinscope next to an existing torch would get it.
tsite=$($PY -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')
vsite=$("$v/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null)
if [ -n "$vsite" ] && ! "$v/bin/python" -c 'import torch' 2>/dev/null; then
  echo "$tsite" > "$vsite/machine-torch.pth" && echo "torch from $tsite (machine-torch.pth)"
fi
for f in bin/pinscope lib/libpinscope.so share/pinscope/python/pinscope_hook.py share/doc/pinscope/cli.md; do
  [ -f "$v/$f" ] || fail "the install has no $f"
done
for f in "$v/bin/pinscope" "$v/lib/libpinscope.so"; do
  env -i ldd "$f" | tee -a "$W/ldd.txt"
  env -i ldd "$f" | grep -q "not found" && fail "$(basename "$f") misses a library"
done
ok "ldd: $(grep -c '=>' "$W/ldd.txt") libraries resolved, none missing"

run() { env -i HOME="$HOME" PATH="$v/bin:/usr/bin:/bin" LD_LIBRARY_PATH= "$@"; }
[ "$(run sh -c 'command -v pinscope')" = "$v/bin/pinscope" ] || fail "pinscope on PATH is not the venv's"
run pinscope --version
seen=$(run pinscope run --no-report -o "$W/run-env" -- /bin/sh -c 'printf %s "$LD_PRELOAD"' 2>/dev/null)
[ "$seen" = "$(realpath "$v/lib/libpinscope.so")" ] && ok "pinscope run preloads $seen" ||
  fail "pinscope run preloads '$seen', not the venv's lib/libpinscope.so"

for mode in plain pin; do
  step "pinscope run ($mode): a PyTorch DataLoader job"
  envs=(); [ "$mode" = pin ] && envs=(PINSCOPE_PIN=1)
  dir=$W/run-$mode
  timeout -k 5 "${STEP_TIMEOUT:-150}" env -i HOME="$HOME" PATH="$v/bin:/usr/bin:/bin" LD_LIBRARY_PATH= \
    "${envs[@]}" pinscope run -o "$dir" -- python tests/gpu/pipeline_job.py --scenario shm_batches \
    --steps 30 --warmup 5 > "$W/$mode.out" 2> "$W/$mode.err"
  rc=$?
  tail -3 "$W/$mode.err"
  [ $rc -eq 0 ] || { fail "pinscope run ($mode): exit $rc"; continue; }
  run pinscope report "$dir" > "$dir/report.txt" 2>"$dir/report.err" || fail "pinscope report ($mode): $(tail -2 "$dir/report.err")"
  cp "$dir/report.txt" "$W/$mode.report.txt"
  sed -n '1,/^What to change/p' "$dir/report.txt"
  grep -qE '^ +H2D +(pageable|shm|pinned)' "$dir/report.txt" || fail "($mode) no H2D copies in the report"
  grep -q "timed by pinscope's Python hook" "$dir/report.txt" ||
    fail "($mode) the report's step is not timed by the Python hook (share/pinscope/python not found?)"
  if [ "$mode" = pin ]; then
    grep -q '^Pinning' "$dir/report.txt" || fail "(pin) no Pinning section"
  fi
  grep -q "cannot load libunwind" "$W/$mode.err" &&
    fail "($mode) the shim did not load the wheel's libunwind.so.8: $(grep -m1 'cannot load libunwind' "$W/$mode.err")"
  n=$(ls "$dir"/*.pstrace | wc -l)
  [ "$n" -ge 9 ] || fail "($mode) $n trace files; the main process and 8 workers make 9"
  ok "($mode) exit 0, $n trace files, report made"
done
finish
