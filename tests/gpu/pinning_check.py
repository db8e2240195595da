#!/usr/bin/env python3
"""GPU suite, issue 4: transparent pinning keeps the program's results.

    PINSCOPE_PIN=1 pinscope run -o RUN -- python3 tests/gpu/pinning_check.py data [--json F]
    python3 tests/gpu/pinning_check.py hazard          # facts section 6, must hold under PIN=1
    python3 tests/gpu/pinning_check.py loader --json F # DataLoader batch checksums
    python3 tests/gpu/pinning_check.py fork --gib 8    # fork time with pinned memory held

`data`: many sizes, offsets and alignments, H2D and D2H, blocking and
non_blocking, several threads and streams: every byte checked against the
CPU. `hazard`: a busy stream, an async copy from pageable memory, then the
host overwrites the buffer at once: the device must hold the old data (H2D)
and the host the final data (D2H). Each prints PASS/FAIL lines and exits 1
on any failure.
"""
import argparse
import hashlib
import json
import os
import sys
import threading
import time

import torch

DEV = torch.device("cuda")
failures = []


def check(cond, what):
    print(("PASS " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def busy(ms):
    # torch.cuda._sleep spins for a number of cycles; ~1.5-2 GHz clocks.
    torch.cuda._sleep(int(ms * 2.0e6))


def data_suite():
    sizes = [4 << 20, (4 << 20) + 3, 16 << 20, 73_531_392, 256 << 20]
    offsets = [0, 1, 64, 4096 + 7]
    g = torch.Generator().manual_seed(1234)
    for n in sizes:
        host = torch.randint(0, 256, (n,), dtype=torch.uint8, generator=g)
        ref = host.clone()
        for off in offsets:
            for nb in (False, True):
                src = host[off:]
                d = src.to(DEV, non_blocking=nb)
                back = d.cpu()
                check(torch.equal(back, ref[off:]), f"H2D n={n} off={off} non_blocking={nb}")
                # D2H into pageable memory, read at once: pageable semantics
                # say the data is there when the call returns.
                dst = torch.empty(n - off, dtype=torch.uint8)
                dst.fill_(0)
                dst.copy_(d, non_blocking=nb)
                check(torch.equal(dst, ref[off:]), f"D2H n={n} off={off} non_blocking={nb}")
        del host, ref
    # Several threads and streams, each on its own buffers.
    errors = []

    def worker(k):
        s = torch.cuda.Stream()
        gen = torch.Generator().manual_seed(k)
        with torch.cuda.stream(s):
            for it in range(20):
                h = torch.randint(0, 256, ((8 << 20) + k * 4096,), dtype=torch.uint8, generator=gen)
                d = h.to(DEV, non_blocking=True)
                out = torch.empty_like(h)
                out.copy_(d, non_blocking=True)
                if not torch.equal(out, h):
                    errors.append((k, it))
    ts = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    check(not errors, f"4 threads x 4 streams x 20 round trips ({len(errors)} mismatches)")


def hazard_suite():
    n = 64 << 20
    # Reps 0-2: one buffer (the first copy registers, later ones hit the
    # cache). Reps 3-5: a new buffer each rep, the previous one freed first,
    # so under PINSCOPE_PIN=1 the allocation gets the block pinscope kept
    # registered (PinEvent REUSE): a reused block must keep pageable
    # semantics too.
    host = None
    for rep in range(6):
        if rep == 0 or rep >= 3:
            del host
            host = torch.full((n,), 1, dtype=torch.uint8)
        host.fill_(1)
        torch.cuda.synchronize()
        busy(50)
        t0 = time.perf_counter()
        d = host.to(DEV, non_blocking=True)
        returned_ms = (time.perf_counter() - t0) * 1e3
        host.fill_(2)  # the program may reuse its pageable buffer at once
        torch.cuda.synchronize()
        check(int(d[0]) == 1 and int(d[-1]) == 1 and int(d.sum()) == n,
              f"H2D hazard rep {rep}: device got the old data (call returned after {returned_ms:.1f} ms)")
        out = torch.zeros(n, dtype=torch.uint8)
        out.fill_(0)
        dev_src = torch.full((n,), 3, dtype=torch.uint8, device=DEV)
        torch.cuda.synchronize()
        busy(50)
        out.copy_(dev_src, non_blocking=True)
        check(int(out[0]) == 3 and int(out[-1]) == 3,
              f"D2H hazard rep {rep}: host read the final data at once")


class Deterministic(torch.utils.data.Dataset):
    def __len__(self):
        return 96 * 8

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.rand((3, 224, 224), generator=g), i


def loader_suite(out_json, epochs=3, workers=4):
    dl = torch.utils.data.DataLoader(Deterministic(), batch_size=96, num_workers=workers,
                                     persistent_workers=False, pin_memory=False)
    sums = []
    for _ in range(epochs):
        for x, idx in dl:
            x = x.to(DEV, non_blocking=True)
            idx = idx.to(DEV, non_blocking=True)
            h = hashlib.sha256(x.cpu().numpy().tobytes()).hexdigest()
            sums.append([h, int(idx.sum())])
    torch.cuda.synchronize()
    json.dump(sums, open(out_json, "w"))
    print(f"loader: {len(sums)} batches hashed", flush=True)


def _endless(dl):
    while True:
        yield from dl


def capture_suite(out_json, rounds=6):
    """Pin-ahead registers batches on pinscope's thread while the main thread
    captures a CUDA graph in the default (global) mode, which prohibits
    "potentially unsafe" CUDA calls in every thread: every capture must
    succeed and replay right, and every batch must reach the GPU intact.
    Writes the capture windows (CLOCK_MONOTONIC ns, the trace's clock)."""
    dl = torch.utils.data.DataLoader(Deterministic(), batch_size=96, num_workers=4,
                                     persistent_workers=False, pin_memory=False,
                                     prefetch_factor=4)
    it = _endless(dl)  # 8 batches an epoch; rounds x 3 + 1 batches needed
    x, _ = next(it)
    xd = x.to(DEV)  # the first batch copy registers it: its size is now a batch size
    torch.cuda.synchronize()
    check(torch.equal(xd.cpu(), x), "first batch reached the GPU intact")
    a = torch.randn(128, 128, device=DEV) / 128
    ref = a
    for _ in range(2000):
        ref = torch.tanh(ref @ a)
    torch.cuda.synchronize()
    windows = []
    for r in range(rounds):
        # A second thread takes batches from the loader during the capture:
        # each maps a batch (no CUDA call with pin_memory=False), which
        # pinscope's pin-ahead thread then registers while the capture runs.
        got = []
        fetch = threading.Thread(target=lambda: got.extend(next(it) for _ in range(3)))
        g = torch.cuda.CUDAGraph()
        t0 = time.monotonic_ns()
        with torch.cuda.graph(g):  # capture_error_mode="global" (the default)
            fetch.start()
            b = a
            for _ in range(2000):
                b = torch.tanh(b @ a)
            fetch.join()
        windows.append([t0, time.monotonic_ns()])
        g.replay()
        torch.cuda.synchronize()
        check(torch.allclose(b, ref, atol=1e-5), f"capture {r}: graph replays the eager result")
        for k, (x, _) in enumerate(got):
            xd = x.to(DEV, non_blocking=True)
            torch.cuda.synchronize()
            check(torch.equal(xd.cpu(), x), f"capture {r}: batch {k} reached the GPU intact")
        del g, got
    json.dump({"capture_windows_ns": windows}, open(out_json, "w"))


def fork_suite(gib):
    n = gib << 30
    big = torch.ones(n, dtype=torch.uint8)
    d = big[: 64 << 20].to(DEV)  # the first copy makes pinscope pin all of `big`
    torch.cuda.synchronize()
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        times.append((time.perf_counter() - t0) * 1e3)
        os.waitpid(pid, 0)
    d2 = big[: 64 << 20].to(DEV)
    torch.cuda.synchronize()
    print(json.dumps({"fork_ms": times, "gib": gib,
                      "pin": os.environ.get("PINSCOPE_PIN", "0")}), flush=True)
    del d, d2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("suite", choices=["data", "hazard", "loader", "fork", "capture"])
    ap.add_argument("--json")
    ap.add_argument("--gib", type=int, default=8)
    ap.add_argument("--workers", type=int, default=4, help="loader: DataLoader num_workers")
    a = ap.parse_args()
    torch.cuda.init()
    if a.suite == "data":
        data_suite()
    elif a.suite == "hazard":
        hazard_suite()
    elif a.suite == "loader":
        loader_suite(a.json, workers=a.workers)
    elif a.suite == "capture":
        capture_suite(a.json)
    else:
        fork_suite(a.gib)
    print(f"{a.suite}: {'FAIL' if failures else 'PASS'} ({len(failures)} failures)", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
