#!/usr/bin/env bash
# The wheel and the .deb as a user gets them (issue 18): tools/build_wheel.sh
# --deb from this build, the wheel installed into a fresh virtual
# environment with nothing else (no pip in it, no index), then with an
# empty environment (LD_LIBRARY_PATH empty, PATH the venv's and /usr/bin):
# the installed files need only glibc (readelf, ldd); `pinscope report` on
# every shipped example; `pinscope run` of a job linked against the CUDA
# runtime test double preloads the venv's libpinscope.so and puts the venv's
# Python hook on PYTHONPATH; the help names the installed docs, which exist.
# The .deb: its files, its Depends, and its unpacked bin/pinscope reporting.
#
#   wheel_test.sh SOURCE_DIR BUILD_DIR COPY_JOB
set -uo pipefail
src=$1 build=$2 job=$3
tmp=$(mktemp -d /tmp/pinscope-wheel-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }

"$src/tools/build_wheel.sh" --build "$build" --out "$tmp/out" --deb > "$tmp/build.log" 2>&1 ||
  { tail -30 "$tmp/build.log"; echo "FAIL: tools/build_wheel.sh"; exit 1; }
whl=$(ls "$tmp"/out/pinscope-*.whl)
echo "wheel: $(basename "$whl") ($(( $(stat -c %s "$whl") / 1024 )) KiB)"
[[ "$(basename "$whl")" =~ ^pinscope-[0-9.]+-py3-none-manylinux_2_[0-9]+_x86_64\.whl$ ]] ||
  fail "wheel name $(basename "$whl") is not pinscope-V-py3-none-manylinux_2_N_x86_64.whl"

python3 -m venv --without-pip "$tmp/venv" || { echo "FAIL: python3 -m venv (python3-venv)"; exit 1; }
python3 -m pip --python "$tmp/venv/bin/python" install -q --no-index --no-deps "$whl" > "$tmp/pip.log" 2>&1 ||
  { cat "$tmp/pip.log"; echo "FAIL: pip install of the wheel"; exit 1; }
v=$tmp/venv
for f in bin/pinscope lib/libpinscope.so lib/libunwind.so.8 lib/liblzma.so.5 share/pinscope/python/pinscope_hook.py \
         share/pinscope/python/sitecustomize.py share/doc/pinscope/cli.md share/doc/pinscope/pinning.md; do
  [ -f "$v/$f" ] || fail "the venv has no $f"
done
[ -x "$v/bin/pinscope" ] || fail "bin/pinscope is not executable"

allowed=" libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1 ld-linux-x86-64.so.2 libstdc++.so.6 libgcc_s.so.1 "
for f in "$v/lib/libunwind.so.8" "$v/lib/liblzma.so.5"; do
  [ "$(readelf -dW "$f" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')" = '$ORIGIN' ] ||
    fail "$(basename "$f"): RUNPATH is not \$ORIGIN"
done
for f in "$v/bin/pinscope" "$v/lib/libpinscope.so"; do
  needed=$(readelf -dW "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
  [ -n "$needed" ] || fail "$f: readelf found no NEEDED entry"
  for n in $needed; do [[ "$allowed" == *" $n "* ]] || fail "$(basename "$f") needs $n"; done
  env -i ldd "$f" | grep -q "not found" && fail "$(basename "$f"): ldd: $(env -i ldd "$f" | grep 'not found')"
  ok "$(basename "$f") needs only: $needed"
done

# An environment with nothing in it but the venv.
run() { env -i HOME="$tmp" PATH="$v/bin:/usr/bin:/bin" LD_LIBRARY_PATH= "$@"; }
[ "$(run sh -c 'command -v pinscope')" = "$v/bin/pinscope" ] || fail "pinscope on PATH is not the venv's"
n=0
for ex in "$src"/examples/*/; do
  ls "$ex"*.pstrace > /dev/null 2>&1 || continue
  n=$((n + 1))
  run pinscope report "$ex" > "$tmp/report.txt" 2> "$tmp/report.err"
  rc=$?
  if [ $rc -ne 0 ] || ! grep -q '^Verdict' "$tmp/report.txt"; then
    fail "pinscope report $(basename "$ex"): exit $rc"; tail -5 "$tmp/report.err"
  else
    ok "pinscope report $(basename "$ex")"
  fi
done
[ "$n" -ge 3 ] || fail "only $n examples with traces in $src/examples"

run pinscope run -o "$tmp/run" -- "$job" > "$tmp/run.txt" 2> "$tmp/run.err"
rc=$?
[ $rc -eq 0 ] || { fail "pinscope run of the copy job: exit $rc"; tail -5 "$tmp/run.err"; }
ls "$tmp"/run/*.pstrace > /dev/null 2>&1 || fail "pinscope run left no trace in $tmp/run"
# The job makes one 4 MiB pageable copy each way (tests/e2e/cli/copy_job.cc).
grep -qE '^ +H2D +pageable +1 +4\.0 MiB' "$tmp/run.err" && grep -qE '^ +D2H +pageable +1 +4\.0 MiB' "$tmp/run.err" ||
  fail "the run's report (stderr: the job owns stdout) lacks its two copies: $(grep -A4 '^Copies by' "$tmp/run.err")"
run pinscope report "$tmp/run" > /dev/null 2>&1 || fail "pinscope report of the run"

# The shim's stacks load the carried libunwind, which loads the carried
# liblzma (its RUNPATH), not the system's (this machine has both).
rv=$(realpath "$v")
run LD_DEBUG=libs pinscope run --no-report -o "$tmp/run-unwind" -- "$job" > /dev/null 2> "$tmp/ld.txt"
grep -q "calling init: $rv/lib/libunwind.so.8\$" "$tmp/ld.txt" && grep -q "calling init: $rv/lib/liblzma.so.5\$" "$tmp/ld.txt" ||
  fail "the job did not load the venv's libunwind.so.8 and liblzma.so.5: $(grep -E 'calling init: .*(unwind|lzma)' "$tmp/ld.txt")"
grep -qE "calling init: /(usr/)?lib/x86_64-linux-gnu/(libunwind|liblzma)" "$tmp/ld.txt" &&
  fail "the job loaded the system's libunwind or liblzma too"
ok "the shim loads the carried libunwind.so.8 and liblzma.so.5"

real_lib=$(realpath "$v/lib/libpinscope.so")
seen=$(run pinscope run --no-report -o "$tmp/run2" -- /bin/sh -c 'printf "%s\n%s\n" "$LD_PRELOAD" "$PYTHONPATH"' 2>/dev/null)
[ "$(sed -n 1p <<< "$seen")" = "$real_lib" ] || fail "the job's LD_PRELOAD is '$(sed -n 1p <<< "$seen")', not $real_lib"
[ "$(sed -n 2p <<< "$seen")" = "$(realpath "$v/share/pinscope/python")" ] ||
  fail "the job's PYTHONPATH is '$(sed -n 2p <<< "$seen")', not the venv's hook folder"
ok "pinscope run preloads $real_lib"

doc=$(run pinscope help | sed -n 's/^See \(.*\) for every option.*/\1/p')
[ "$doc" = "$(realpath "$v/share/doc/pinscope")/cli.md" ] && [ -f "$doc" ] ||
  fail "pinscope help names '$doc', not the installed cli.md"
ok "the help names $doc"

# The Debian package of the same build.
deb=$(ls "$tmp"/out/pinscope_*.deb 2>/dev/null | head -1)
if [ -z "$deb" ]; then
  fail "no .deb in $tmp/out"
else
  dpkg-deb -c "$deb" > "$tmp/deb.txt"
  for f in ./usr/bin/pinscope ./usr/lib/libpinscope.so ./usr/share/pinscope/python/pinscope_hook.py \
           ./usr/share/doc/pinscope/cli.md; do
    grep -q " $f\$" "$tmp/deb.txt" || fail ".deb lacks $f"
  done
  depends=$(dpkg-deb -f "$deb" Depends)
  [[ "$depends" == *libc6* && "$depends" != *protobuf* ]] || fail ".deb Depends: '$depends'"
  dpkg-deb -x "$deb" "$tmp/root"
  ex=$(ls -d "$src"/examples/*/ | head -1)
  env -i PATH=/usr/bin:/bin "$tmp/root/usr/bin/pinscope" report "$ex" > /dev/null 2>&1 ||
    fail "the .deb's pinscope report"
  seen=$(env -i PATH=/usr/bin:/bin "$tmp/root/usr/bin/pinscope" run --no-report -o "$tmp/run3" -- \
    /bin/sh -c 'printf %s "$LD_PRELOAD"' 2>/dev/null)
  [ "$seen" = "$(realpath "$tmp/root/usr/lib/libpinscope.so")" ] || fail "the .deb's pinscope run preloads '$seen'"
  ok ".deb $(basename "$deb"), Depends: $depends"
fi

[ $fails -eq 0 ] && echo "all ok" || echo "FAILED: $fails"
exit $((fails > 0))
