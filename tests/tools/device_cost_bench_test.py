#!/usr/bin/env python3
"""tools/bench/device_cost_bench in smoke mode (a few iterations) against the
CUDA runtime and CUPTI test doubles: every row of its table is printed and
every figure in it is positive, and the cache-miss rows made one driver
pointer query a call, plus the device pointer's where it was evicted (the
shim's own count). No timing is asserted (the CI machine is
shared); docs/benchmarks.md has the measured figures.

    device_cost_bench_test.py BENCH LIBCUDART LIBCUPTI
"""
import subprocess
import sys

ROWS = [
    "CuptiPushCall+CuptiPopCall, CUPTI off",
    "CuptiPushCall+CuptiPopCall, CUPTI on",
    "copy hook, whole path, no-op real call, stacks off, CUPTI off",
    "copy hook, whole path, no-op real call, stacks off, CUPTI on",
    "copy hook, whole path, no-op real call, stacks on (32), CUPTI off",
    "copy hook, whole path, host pointer not in the cache (pageable)",
    "copy hook, whole path, host pointer not in the cache (pinned)",
    "CaptureStack, same stack again",
    "HandleRecord: kernel record",
    "HandleRecord: memcpy record",
    "HandleRecord: runtime API record",
    "HandleRecord: external correlation record",
    "BufferCompleted per record",
    "MonoNs",
    "ThreadUsageNow",
    "cuptiGetTimestamp",
    "flusher tick, nothing new",
    "flusher tick after N copies",
]


def main():
    bench, cudart, cupti = sys.argv[1:4]
    p = subprocess.run([bench, "--cudart", cudart, "--cupti", cupti, "--smoke"],
                       capture_output=True, text=True, timeout=100)
    print(p.stdout)
    print(p.stderr, file=sys.stderr)
    assert p.returncode == 0, f"exit {p.returncode}"
    rows = [l for l in p.stdout.splitlines() if l.startswith("| ") and not l.startswith("| operation")]
    problems = []
    for name in ROWS:
        found = [r for r in rows if r.startswith("| " + name)]
        if len(found) != 1:
            problems.append(f"row '{name}': {len(found)} printed")
            continue
        cells = [c.strip() for c in found[0].strip("|").split("|")]
        # operation | ns per op | ops formula | ops per step | ms per step
        try:
            ns, ops, ms = float(cells[1]), float(cells[3]), float(cells[4])
        except (ValueError, IndexError):
            problems.append(f"row '{name}': not a number in {cells}")
            continue
        if not (ns > 0 and ops > 0 and ms > 0):
            problems.append(f"row '{name}': a figure is not positive: {cells}")
    if len(rows) != len(ROWS):
        problems.append(f"{len(rows)} rows printed, {len(ROWS)} expected")
    # The miss rows miss: the shim counted one driver pointer query a call
    # for the host pointer, and the device pointer's again where a host
    # pointer took its slot of the 64-entry cache (1 call in 64: 1.016).
    for key in ("copy_hook_miss_pageable_queries_per_call", "copy_hook_miss_pinned_queries_per_call"):
        got = [float(l.split()[1]) for l in p.stdout.splitlines() if l.startswith(key + " ")]
        if len(got) != 1 or not 1.0 <= got[0] <= 1.0 + 2.0 / 64:
            problems.append(f"{key}: {got}, expected one value in [1, 1 + 2/64]")
    for pr in problems:
        print("FAIL:", pr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
