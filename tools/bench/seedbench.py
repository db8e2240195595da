#!/usr/bin/env python3
"""The seed article's DataLoader benchmark (synthetic 3x224x224 fp32 images,
batch 128), extended for pinscope's measurements.

    python3 tools/bench/seedbench.py [--samples N] [--configs 0f,4f,4t,8t]
                                     [--epochs E] [--train] [--json FILE]

A config is <num_workers><f|t> (pin_memory False/True). Each config runs
`epochs` epochs over `samples` samples; the loop copies every batch to the
GPU with non_blocking=True and synchronizes, as the article's loop does.
--train adds a small conv model step per batch (a training-shaped job).
Prints one line per config and, with --json, writes the numbers.
"""
import argparse
import json
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class SyntheticImages(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        raw = np.random.randint(0, 255, (3, 224, 224), dtype=np.uint8)
        return torch.from_numpy(raw).float() / 255.0, torch.tensor(i % 10)


def make_model(dev):
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, stride=2), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, stride=2), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10)).to(dev)


def run(loader, epochs, train, dev):
    model = opt = None
    if train:
        model = make_model(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
    n = 0
    steps = []
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
            steps.append(time.perf_counter() - s)
            n += x.size(0)
    dt = time.time() - t
    return n / dt, dt, float(np.median(steps)) if steps else 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=4000)
    ap.add_argument("--configs", default="0f,4f,4t,8f,8t")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--train", action="store_true")
    ap.add_argument("--json")
    a = ap.parse_args()
    dev = torch.device("cuda")
    torch.cuda.init()
    ds = SyntheticImages(a.samples)
    results = []
    for c in a.configs.split(","):
        w, p = int(c[:-1]), c[-1] == "t"
        loader = DataLoader(ds, batch_size=a.batch, num_workers=w, pin_memory=p)
        sps, dt, step = run(loader, a.epochs, a.train, dev)
        results.append({"num_workers": w, "pin_memory": p, "samples_per_s": sps, "seconds": dt,
                        "median_step_s": step, "train": a.train})
        print(f"workers={w} pin={p} train={a.train}: {sps:.0f} samples/s ({dt:.2f}s, "
              f"median step {step * 1e3:.1f} ms)", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
