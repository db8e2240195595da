#!/usr/bin/env python3
"""Where the main thread's time goes for a DataLoader batch that arrives in
shared memory: times, per step, the wait in __next__, the .to(cuda) call and
the free of the previous batch, for batches from workers (shm) and made in
the main process (malloc), with pinscope or without (run it both ways).
Also times cudaPointerGetAttributes on a fresh MAP_SHARED mapping.

    python3 shm_copy_probe.py [--workers 4] [--batch 128] [--steps 30]
"""
import argparse
import ctypes
import json
import mmap
import os
import statistics
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Synth(Dataset):
    def __init__(self, n):
        self.n = n
        self.base = torch.randn(3, 224, 224)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return self.base


def pointer_query_us(nbytes):
    """cudaPointerGetAttributes on a fresh memfd mapping and on malloc memory."""
    rt = None
    for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
        try:
            rt = ctypes.CDLL(name)
            break
        except OSError:
            pass
    if rt is None:
        return {}
    attr = ctypes.create_string_buffer(64)
    fd = os.memfd_create("probe")
    os.ftruncate(fd, nbytes)
    m = mmap.mmap(fd, nbytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    m[: nbytes] = b"\x01" * nbytes
    m2 = mmap.mmap(fd, nbytes, mmap.MAP_SHARED, mmap.PROT_READ)
    addr = ctypes.addressof(ctypes.c_char.from_buffer_copy(b"x"))
    buf = (ctypes.c_char * nbytes).from_buffer(m)
    out = {}
    for label, ptr in (("shm", ctypes.addressof(buf)), ("heap", addr)):
        t0 = time.perf_counter()
        for _ in range(10):
            rt.cudaPointerGetAttributes(attr, ctypes.c_void_p(ptr))
        out[label + "_us"] = round((time.perf_counter() - t0) / 10 * 1e6, 2)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    torch.cuda.init()
    dev = torch.device("cuda")
    loader = DataLoader(Synth(args.batch * (args.steps + 6)), batch_size=args.batch,
                        num_workers=args.workers)
    it = iter(loader)
    nxt, to, free = [], [], []
    prev = None
    for step in range(args.steps + 5):
        t0 = time.perf_counter()
        batch = next(it)
        t1 = time.perf_counter()
        x = batch.to(dev)
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        prev = None  # noqa: F841 (the previous batch was released when `batch` was rebound)
        del x
        t3 = time.perf_counter()
        if step >= 5:
            nxt.append(t1 - t0)
            to.append(t2 - t1)
            free.append(t3 - t2)
    med = lambda v: round(statistics.median(v) * 1e3, 3)
    print(json.dumps({"workers": args.workers, "batch": args.batch,
                      "preloaded": "pinscope" in os.environ.get("LD_PRELOAD", ""),
                      "next_ms": med(nxt), "to_ms": med(to), "free_ms": med(free),
                      "pointer_query": pointer_query_us(64 << 20)}), flush=True)


if __name__ == "__main__":
    main()
