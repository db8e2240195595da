#!/usr/bin/env python3
"""A training loop held back by a synchronous copy (report class
"synchronous copies blocking the host", issue 5).

    python3 tests/gpu/sync_copy_job.py [--steps N] [--fixed] [--json FILE]

Each step queues about 10 ms of GPU work (matmuls on data already on the
GPU), reads the loss back with `loss.item()` - a blocking D2H copy that
waits for all of it - and then spends about 8 ms of host time (logging,
metrics, the next batch's preparation: here a numpy workload). Because the
host waits for the GPU before doing its own work, the GPU idles during the
host work: a step costs ~18 ms where ~10 would do.

--fixed reads the loss back only every 50 steps (losses summed on the GPU),
so the host work overlaps the GPU's: the measured gain is what the report's
prediction is checked against. Prints one JSON line.
"""
import argparse
import json
import time

import numpy as np
import torch


def host_work(rng, ms):
    # Real CPU work of a fixed duration (numpy, GIL released in parts).
    end = time.perf_counter() + ms / 1e3
    a = rng.random((256, 256))
    while time.perf_counter() < end:
        a = np.tanh(a @ a.T / 256.0)
    return float(a[0, 0])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--fixed", action="store_true")
    ap.add_argument("--gpu-ms", type=float, default=10.0)
    ap.add_argument("--host-ms", type=float, default=8.0)
    ap.add_argument("--json")
    args = ap.parse_args()

    dev = torch.device("cuda")
    torch.manual_seed(0)
    n = 4096
    w = torch.randn(n, n, device=dev) / n ** 0.5
    x = torch.randn(n, n, device=dev)
    # Calibrate the number of matmuls for ~gpu_ms of GPU time.
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(20):
        y = x @ w
    torch.cuda.synchronize()
    per_mm = (time.perf_counter() - t0) / 20 * 1e3
    mms = max(1, round(args.gpu_ms / per_mm))
    rng = np.random.default_rng(0)

    def step():
        y = x
        for _ in range(mms):
            y = torch.tanh(y @ w)
        return y.mean()

    for _ in range(10):
        step().item()
    torch.cuda.synchronize()
    acc = torch.zeros((), device=dev)
    t0 = time.perf_counter()
    for i in range(args.steps):
        loss = step()
        if args.fixed:
            acc += loss
            if (i + 1) % 50 == 0:
                acc.item()  # one readback every 50 steps
        else:
            loss.item()  # blocking D2H copy: waits for the whole step
        host_work(rng, args.host_ms)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    out = {"mode": "fixed" if args.fixed else "item_every_step", "steps": args.steps,
           "step_ms": dt / args.steps * 1e3, "matmuls_per_step": mms,
           "matmul_ms": per_mm, "host_ms": args.host_ms}
    print(json.dumps(out))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f)


if __name__ == "__main__":
    main()
