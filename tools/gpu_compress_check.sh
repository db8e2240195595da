#!/usr/bin/env bash
# Trace compression on the GPU machine (issue 18; docs/trace-format.md,
# "Compression"; docs/benchmarks.md, "Trace compression"). From the repo root
# with .gpu carried (tools/gpu_fetch_debs.sh, which now fetches libzstd-dev):
#
#   tools/gpu_compress_check.sh            # build, then the checks
#   SKIP_BUILD=1 tools/gpu_compress_check.sh
#
# 1. libpinscope.so still needs only libc (readelf), zstd linked in.
# 2. Real jobs (tests/gpu/pipeline_job.py: input_starvation, 2 workers, and
#    pin_thread, 12 workers) recorded compressed (the default): each file
#    starts with the preamble; the report and --json of the run and of its
#    files decompressed (zstd -dc) are byte-identical.
# 3. The same jobs, REPS times each, PINSCOPE_COMPRESS=1 and =0 interleaved:
#    samples/s (the job's own JSON line), trace bytes, bytes per copy event.
# $OUT gets compress.log and compress.jsonl.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-/tmp/pinscope-out}"
W=/tmp/psz
REPS="${REPS:-3}"
mkdir -p "$OUT" "$W"
exec > >(tee -a "$OUT/compress.log") 2>&1
PS=${PS:-/tmp/ps/bin/pinscope}
JOB=tests/gpu/pipeline_job.py
fail=0
bad() { echo "FAIL: $*"; fail=1; }

if [ -z "${SKIP_BUILD:-}" ]; then tools/gpu_build.sh || exit 1; fi
echo "=== libpinscope.so"
readelf -d /tmp/ps/lib/libpinscope.so | grep NEEDED
readelf -d /tmp/ps/lib/libpinscope.so | grep NEEDED | grep -vqE 'libc\.so|ld-linux' && bad "libpinscope.so needs more than libc"
# The zstd tool: the machine has none; tools/gpu_fetch_debs.sh carries Debian's, which
# tools/gpu_build.sh unpacked into /tmp/psdeps.
export PATH="$PATH:/tmp/psdeps/usr/bin"
command -v zstd >/dev/null || bad "no zstd tool on this machine (step 2 needs zstd -dc)"

run_job() {  # name compress rep args...
  local name=$1 c=$2 rep=$3; shift 3
  local dir="$W/$name.c$c.r$rep"
  rm -rf "$dir"
  local t0; t0=$(date +%s%N)
  PINSCOPE_COMPRESS=$c timeout 600 "$PS" run --no-report -o "$dir" -- python3 $JOB "$@" > "$dir.out" 2> "$dir.err"
  local rc=$? ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  local rate; rate=$(tail -1 "$dir.out" | python3 -c 'import json,sys; print(json.loads(sys.stdin.read()).get("samples_per_s", 0))' 2>/dev/null || echo 0)
  local bytes; bytes=$(cat "$dir"/*.pstrace 2>/dev/null | wc -c)
  local copies; copies=$("$PS" report --json "$dir" 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["copies"]["total"]["count"])' 2>/dev/null || echo 0)
  echo "{\"name\": \"$name\", \"compress\": $c, \"rep\": $rep, \"rc\": $rc, \"wall_ms\": $ms, \"samples_per_s\": $rate, \"trace_bytes\": $bytes, \"copies\": $copies}" | tee -a "$OUT/compress.jsonl"
}

jobs=("input_starvation|--scenario input_starvation" "pin_thread|--scenario pin_thread --batch 128 --workers 8")
echo "=== reports from compressed and decompressed files"
for j in "${jobs[@]}"; do
  name=${j%%|*}; args=${j#*|}
  # shellcheck disable=SC2086
  run_job "$name" 1 0 $args
  dir="$W/$name.c1.r0"
  for f in "$dir"/*.pstrace; do
    head -c 4 "$f" | od -An -tx1 | grep -q '5a 2a 4d 18' || bad "$f does not start with the preamble"
  done
  plain="$W/$name.plain/$(basename "$dir")"
  rm -rf "$W/$name.plain"; mkdir -p "$plain"
  for f in "$dir"/*; do
    case "$f" in *.pstrace) zstd -dcq "$f" > "$plain/$(basename "$f")" || bad "zstd -dc $f";; *) cp "$f" "$plain/";; esac
  done
  # Same folder name for both: the report names its folder.
  for fmt in --no-color --json; do
    "$PS" report $fmt "$dir" > "$W/z.txt" 2>/dev/null
    mv "$dir" "$dir.zst"; mv "$plain" "$dir"
    "$PS" report $fmt "$dir" > "$W/p.txt" 2>/dev/null
    mv "$dir" "$plain"; mv "$dir.zst" "$dir"
    if cmp -s "$W/z.txt" "$W/p.txt"; then echo "$name $fmt: identical ($(wc -c < "$W/z.txt") bytes)"; else bad "$name $fmt: reports differ"; diff "$W/z.txt" "$W/p.txt" | head -20; fi
  done
  echo "$name: $(cat "$dir"/*.pstrace | wc -c) bytes compressed, $(cat "$plain"/*.pstrace | wc -c) plain"
done

echo "=== PINSCOPE_COMPRESS=1 and 0, interleaved, $REPS reps"
for rep in $(seq 1 "$REPS"); do
  for j in "${jobs[@]}"; do
    name=${j%%|*}; args=${j#*|}
    # shellcheck disable=SC2086
    run_job "$name" 1 "$rep" $args
    # shellcheck disable=SC2086
    run_job "$name" 0 "$rep" $args
  done
done
[ $fail -eq 0 ] && echo "ALL OK" || echo "SOME CHECKS FAILED"
exit $fail
