#!/usr/bin/env python3
"""What each of the Python hook's span wrappers (python/pinscope_hook.py)
adds to the call it wraps: a no-op __next__, pin_memory, result-queue loads
and fetch, each wrapped and bare, medians of 7 x 100,000 calls (issue 16,
docs/benchmarks.md, twenty-seventh session). Run it under the shim whose
hook it loads (the ABI must match):

    PINSCOPE_OUT=/tmp/wb.run LD_PRELOAD=$PWD/build/lib/libpinscope.so \\
      /usr/bin/python3 tools/bench/hook_wrappers.py python

Prints "NEXT +N  PIN +N  RECV +N  FETCH +N ns". Compare two builds in
turns, each with its own python/ folder and library.
"""
import pickle
import statistics
import sys
import time

sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else "python")
import pinscope_hook as h  # noqa: E402

h._lib = h._load_shim()
if h._lib is None:
    sys.exit("hook_wrappers.py: run it with LD_PRELOAD of libpinscope.so (the hook found no shim)")


class It:
    _num_yielded = 3

    def __next__(self):
        return 1


class Fetcher:
    auto_collation = True

    def fetch(self, idx):
        return idx


def pin(data):
    return data


def bench(fn, *args, n=100000):
    runs = []
    for _ in range(7):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            fn(*args)
        runs.append((time.perf_counter_ns() - t0) / n)
    return statistics.median(runs)


def main():
    import multiprocessing.queues as queues

    it, fetcher, idx = It(), Fetcher(), [1, 2, 3]
    h._timed_queue_pickler()
    data = pickle.dumps(1)
    base = queues._ForkingPickler.__mro__[1]
    h._state.receiving = None
    out = [bench(h._wrap_next(It.__next__), it) - bench(It.__next__, it),
           bench(h._wrap_pin(pin), it) - bench(pin, it)]
    h._state.receiving = (0, 0)  # a thread that takes batches: loads is timed
    out.append(bench(queues._ForkingPickler.loads, data) - bench(base.loads, data))
    h._state.receiving = None
    out.append(bench(h._wrap_fetch(Fetcher.fetch), fetcher, idx) - bench(Fetcher.fetch, fetcher, idx))
    print("NEXT +%.0f  PIN +%.0f  RECV +%.0f  FETCH +%.0f ns" % tuple(out))


if __name__ == "__main__":
    main()
