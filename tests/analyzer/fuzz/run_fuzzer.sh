#!/usr/bin/env bash
# Runs reader_fuzzer for a bounded time on a fresh seed corpus made from the
# checked-in runs: each run's files joined by the fuzzer's file separator,
# and each file alone. Exit status is libFuzzer's: 0 = nothing found.
#   run_fuzzer.sh FUZZER RUNS_DIR WORK_DIR SECONDS [libFuzzer flags...]
set -euo pipefail
fuzzer=$1 runs=$2 work=$3 seconds=$4
shift 4
rm -rf "$work"
mkdir -p "$work/seeds" "$work/corpus" "$work/artifacts"
for run in "$runs"/*/; do
  name=$(basename "$run")
  first=1
  for file in "$run"*.pstrace; do
    cp "$file" "$work/seeds/${name}_$(basename "$file")"
    # The same file compressed as the shim writes it (the 24-byte preamble,
    # zstd frames with a checksum; docs/trace-format.md), where zstd is.
    if command -v zstd >/dev/null; then
      { printf '\x5a\x2a\x4d\x18\x10\x00\x00\x00pinscope\x01\x00\x00\x00\x01\x00\x00\x00'
        zstd -1 --check -q -c "$file"; } > "$work/seeds/${name}_z_$(basename "$file")"
    fi
    if [ $first -eq 0 ]; then printf '\n--pinscope-file--\n' >> "$work/seeds/$name.run"; fi
    cat "$file" >> "$work/seeds/$name.run"
    first=0
  done
done
dir=$(cd "$(dirname "$0")" && pwd)
# -timeout: one input taking 10 s is a hang; -rss_limit_mb: a leak or a
# runaway allocation fails the run.
exec "$fuzzer" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -dict="$dir/reader_fuzzer.dict" -artifact_prefix="$work/artifacts/" -print_final_stats=1 \
  "$@" "$work/corpus" "$work/seeds"
