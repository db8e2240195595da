#!/usr/bin/env python3
"""A copy hook's cache misses where a loop's step has left it cold (issue 16,
docs/benchmarks.md, twenty-sixth session): N copies through the CUDA
runtime double (tests/e2e/stacks/py_helper.cc, ctypes.PyDLL) under 41
distinct Python functions, each copy after a sweep of 2 MiB that evicts the
first-level caches, as a step's interpreter and torch work does. Run under
cachegrind, which counts what timing on a shared machine cannot resolve:

    PINSCOPE_OUT=/tmp/cold.run LD_PRELOAD=$PWD/build/lib/libpinscope.so \\
      valgrind --tool=cachegrind --cache-sim=yes --I1=32768,8,64 --D1=32768,8,64 \\
      --cachegrind-out-file=/tmp/cold.cg /usr/bin/python3 tools/bench/cold_hook_misses.py \\
      build/tests/e2e/stacks/libstacks_py_helper.so 200
    cg_annotate --show=Ir,I1mr,D1mr --sort=D1mr --threshold=0 /tmp/cold.cg | grep /shim/

Divide each function's counts by N for a copy's.
"""
import ctypes
import sys

copy = ctypes.PyDLL(sys.argv[1]).stacks_py_copy
N = int(sys.argv[2]) if len(sys.argv) > 2 else 200
big = (ctypes.c_char * (2 << 20))()

# 41 distinct functions, each calling the next: distinct code objects, as a
# real loop's frames are (a recursion would share one).
src = ["def f40():\n    for i in range(N):\n"
       "        ctypes.memset(big, i & 0xff, len(big))\n        copy(1)\n"]
for k in range(39, -1, -1):
    src.append("def f%d():\n    x = %d\n    return f%d()\n" % (k, k, k + 1))
exec("\n".join(src))
f0()  # noqa: F821 (made by exec)
