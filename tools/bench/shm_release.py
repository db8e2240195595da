#!/usr/bin/env python3
"""What releasing a DataLoader batch's shared memory costs the thread that
drops the last reference: the batch-sized POSIX shm segment is created,
filled, unlinked (as PyTorch's workers do), then unmapped and its fd closed
(as the main process does when the batch tensor dies). The close of the
last fd frees the segment's pages.

    python3 tools/bench/shm_release.py [--mib 73.5] [--reps 8] [--json FILE]

Prints the milliseconds of munmap and of close per repetition and their
medians. No GPU needed.
"""
import argparse
import json
import mmap
import os
import statistics
import time

import _posixshmem


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=float, default=73.5)
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--json")
    a = ap.parse_args()
    n = int(a.mib * (1 << 20))
    fill = b"\x01" * n
    unmap_ms, close_ms = [], []
    for i in range(a.reps):
        name = f"/pinscope_shm_release_{os.getpid()}_{i}"
        fd = _posixshmem.shm_open(name, os.O_CREAT | os.O_RDWR | os.O_EXCL, 0o600)
        os.ftruncate(fd, n)
        m = mmap.mmap(fd, n)
        m[:] = fill
        _posixshmem.shm_unlink(name)
        t = time.perf_counter()
        m.close()
        unmap_ms.append((time.perf_counter() - t) * 1e3)
        t = time.perf_counter()
        os.close(fd)
        close_ms.append((time.perf_counter() - t) * 1e3)
    r = {"bytes": n, "munmap_ms": unmap_ms, "close_ms": close_ms,
         "munmap_median_ms": statistics.median(unmap_ms),
         "close_median_ms": statistics.median(close_ms)}
    print(f"{a.mib} MiB: munmap {r['munmap_median_ms']:.2f} ms, close (frees the pages) "
          f"{r['close_median_ms']:.2f} ms (medians of {a.reps}); close per rep: "
          + " ".join(f"{x:.2f}" for x in close_ms))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=1)


if __name__ == "__main__":
    main()
