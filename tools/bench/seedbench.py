#!/usr/bin/env python3
"""The seed article's DataLoader benchmark (synthetic 3x224x224 fp32 images,
batch 128), extended for pinscope's measurements.

    python3 tools/bench/seedbench.py [--samples N] [--configs 0f,4f,4t,8t]
                                     [--epochs E] [--train] [--warmup B]
                                     [--json FILE] [--checksum FILE]

A config is <num_workers><f|t> (pin_memory False/True). Each config runs
`epochs` epochs over `samples` samples; the loop copies every batch to the
GPU with non_blocking=True and synchronizes, as the article's loop does.
--train adds a small conv model step per batch (a training-shaped job).
Prints one line per config and, with --json, writes the numbers:
samples/s over the whole loop (worker start-up included), samples/s in the
steady state (from the end of batch `warmup` to the end, so worker start-up
and the first batches' page faults do not count), and the CPU time per
sample of the main process (all its threads, the pin_memory thread
included) and of the workers (counted once they have exited and been
joined, which DataLoader does at the end of each epoch).

--checksum FILE makes every sample a function of its index (not random) and
writes, per config, the checksum of every batch as the GPU received it (the
int64 sum of the image bits and of the labels, computed on the device):
two runs, with and without pinscope, must write the same file
(tools/gpu_zerocopy.sh). The checksums synchronize every batch: time a run
without them.
"""
import argparse
import json
import resource
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class SyntheticImages(Dataset):
    def __init__(self, n, deterministic=False):
        self.n = n
        self.deterministic = deterministic

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.deterministic:
            raw = np.random.default_rng(i).integers(0, 255, (3, 224, 224), dtype=np.uint8)
        else:
            raw = np.random.randint(0, 255, (3, 224, 224), dtype=np.uint8)
        return torch.from_numpy(raw).float() / 255.0, torch.tensor(i % 10)


def make_model(dev):
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, stride=2), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, stride=2), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10)).to(dev)


def cpu_seconds(who):
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def run(loader, epochs, train, dev, warmup, sums=None):
    model = opt = None
    if train:
        model = make_model(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
    n = 0
    steps = []
    steady_t = steady_n = None
    cpu_self = cpu_seconds(resource.RUSAGE_SELF)
    cpu_children = cpu_seconds(resource.RUSAGE_CHILDREN)
    t = time.time()
    for _ in range(epochs):
        for x, y in loader:
            s = time.perf_counter()
            x = x.to(dev, non_blocking=True)
            y = y.to(dev, non_blocking=True)
            if train:
                loss = torch.nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
            torch.cuda.synchronize()
            if sums is not None:
                sums.append([int(x.view(torch.int32).long().sum().item()),
                             int(y.long().sum().item())])
            steps.append(time.perf_counter() - s)
            n += x.size(0)
            if len(steps) == warmup:
                steady_t, steady_n = time.time(), n
    end = time.time()
    dt = end - t
    cpu_self = cpu_seconds(resource.RUSAGE_SELF) - cpu_self
    cpu_children = cpu_seconds(resource.RUSAGE_CHILDREN) - cpu_children
    steady = (n - steady_n) / (end - steady_t) if steady_t and n > steady_n else 0.0
    return {"samples_per_s": n / dt, "seconds": dt,
            "median_step_s": float(np.median(steps)) if steps else 0.0,
            "steady_samples_per_s": steady, "warmup_batches": warmup,
            "main_cpu_us_per_sample": cpu_self / n * 1e6 if n else 0.0,
            "worker_cpu_us_per_sample": cpu_children / n * 1e6 if n else 0.0}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=4000)
    ap.add_argument("--configs", default="0f,4f,4t,8f,8t")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--train", action="store_true")
    ap.add_argument("--warmup", type=int, default=5,
                    help="batches before the steady-state clock starts")
    ap.add_argument("--json")
    ap.add_argument("--checksum", help="write per-batch device checksums (deterministic data)")
    a = ap.parse_args()
    dev = torch.device("cuda")
    torch.cuda.init()
    ds = SyntheticImages(a.samples, deterministic=bool(a.checksum))
    results = []
    checksums = {}
    for c in a.configs.split(","):
        w, p = int(c[:-1]), c[-1] == "t"
        loader = DataLoader(ds, batch_size=a.batch, num_workers=w, pin_memory=p)
        sums = [] if a.checksum else None
        r = run(loader, a.epochs, a.train, dev, a.warmup, sums)
        if sums is not None:
            checksums[c] = sums
        del loader  # its workers are joined by now: their CPU time is counted
        results.append({"num_workers": w, "pin_memory": p, "train": a.train, **r})
        print(f"workers={w} pin={p} train={a.train}: {r['samples_per_s']:.0f} samples/s "
              f"({r['seconds']:.2f}s, median step {r['median_step_s'] * 1e3:.1f} ms; "
              f"steady {r['steady_samples_per_s']:.0f} samples/s; CPU per sample "
              f"main {r['main_cpu_us_per_sample']:.0f} us, workers "
              f"{r['worker_cpu_us_per_sample']:.0f} us)", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    if a.checksum:
        with open(a.checksum, "w") as f:
            json.dump(checksums, f)


if __name__ == "__main__":
    main()
