"""A 2-GPU data-parallel job with one rank's input starved (issue 20,
tools/gpu_ddp.sh): torchrun starts one rank per GPU (NCCL); each rank trains
a small conv net under DistributedDataParallel on synthetic images from its
own DataLoader, whose per-sample transform costs --transform-ms of CPU (the
worker's Python, like a decode and augment). Every rank has --workers
workers except --slow-rank, which has --slow-workers: its batches come
slower, and the gradients' all-reduce makes every other rank wait for it.
Rank 0 prints one JSON line at the end: the steady step time measured over
the steps after --warmup (every rank keeps the same pace)."""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class Images(Dataset):
    def __init__(self, n, size, transform_ms):
        self.n = n
        self.size = size
        self.transform_ms = transform_ms

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        x = torch.rand((3, self.size, self.size), generator=g)
        end = time.perf_counter() + self.transform_ms / 1000.0
        while time.perf_counter() < end:  # the transform's CPU work
            x = x.flip(2) * 0.999 + 0.001
        return x, i % 10


def net():
    layers = []
    c = 3
    for w in (64, 128, 256, 256):
        layers += [nn.Conv2d(c, w, 3, padding=1), nn.BatchNorm2d(w), nn.ReLU(), nn.MaxPool2d(2)]
        c = w
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(c, 10))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--size", type=int, default=128)
    ap.add_argument("--transform-ms", type=float, default=1.0)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--slow-rank", type=int, default=1)
    ap.add_argument("--slow-workers", type=int, default=1)
    args = ap.parse_args()
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    workers = args.slow_workers if rank == args.slow_rank else args.workers
    loader = DataLoader(Images(args.batch * args.steps, args.size, args.transform_ms),
                        batch_size=args.batch, num_workers=workers, pin_memory=True,
                        persistent_workers=workers > 0)
    model = nn.parallel.DistributedDataParallel(net().cuda(), device_ids=[local_rank])
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    t0 = None
    for step, (x, y) in enumerate(loader):
        if step == args.warmup:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        x = x.cuda(non_blocking=True)
        y = y.cuda(non_blocking=True)
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    timed = args.steps - args.warmup
    step_ms = (time.perf_counter() - t0) * 1000 / timed
    dist.barrier()
    if rank == 0:
        print(json.dumps({"ranks": dist.get_world_size(), "workers": args.workers,
                          "slow_rank": args.slow_rank, "slow_workers": args.slow_workers,
                          "steps": timed, "step_ms": round(step_ms, 3),
                          "samples_per_s": round(args.batch * dist.get_world_size() * 1000 / step_ms, 1)}),
              flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
