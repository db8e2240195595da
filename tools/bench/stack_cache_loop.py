#!/usr/bin/env python3
"""The stack cache on a long loop: one copy site, 120,000 copies, under 28
Python frames (docs/benchmarks.md, twenty-first session).

    pinscope run --no-report -o /tmp/hl.run -- python3 tools/bench/stack_cache_loop.py \\
        build/tests/e2e/stacks/libstacks_py_helper.so [COPIES_A_ROUND]
    python3 tools/trace_dump.py /tmp/hl.run | grep counters | tail -1

The helper (tests/e2e/stacks/py_helper.cc) makes one cudaMemcpy through the
CUDA runtime test double, two native frames down; ctypes.PyDLL keeps the
GIL. A warm-up round at depth 5, then five rounds at depth 28, each of
COPIES_A_ROUND (20,000) copies from one line. On Python 3.11 CPython changed
one return address of its own below the same Python frames after
60,000-80,000 copies at depth 28: the cache must follow it
(stack_cache_hits and stack_cache_checks in the trace's Counters, and no
stack_cache_site_off notice).
Prints the fastest round's time a copy.
"""
import ctypes
import sys
import time

copy = ctypes.PyDLL(sys.argv[1]).stacks_py_copy
COPIES = int(sys.argv[2]) if len(sys.argv) > 2 else 20000


def rounds(depth):
    if depth == 0:
        t0 = time.perf_counter()
        for _ in range(COPIES):
            copy(1)
        return time.perf_counter() - t0
    return rounds(depth - 1)


rounds(5)
best = min(rounds(28) for _ in range(5))
print(f"{best / COPIES * 1e9:.0f} ns a copy")
