#!/usr/bin/env python3
"""Training-shaped jobs with one planted bottleneck each, for the pipeline
model's GPU suite (tools/gpu_pipeline.sh, docs/validation.md).

    python3 pipeline_job.py --scenario NAME [overrides...]

Each scenario is a DataLoader over a synthetic dataset feeding a GPU step;
the flags override one setting at a time, so a run with the report's top
recommendation applied differs from the baseline in that setting only.
Prints one JSON line last: samples/s and step time over the timed steps
(after --warmup steps, CUDA synchronized at both ends).
"""
import argparse
import json
import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

SCENARIOS = {
    # planted class: the GPU. 40 bf16 matmuls of 8192^2 a step (~55 ms on an
    # H200); the batch is copied from pageable shm on the busy stream.
    "gpu_bound": dict(shape=(3, 224, 224), batch=32, workers=2, matmuls=40, dim=8192, sync=1),
    # planted class: the host. Hundreds of tiny kernels a step (launch-bound),
    # tiny batches; the GPU idles between launches.
    "host_bound": dict(shape=(256,), batch=64, workers=2, tiny_ops=400, sync=0),
    # planted class: the workers. 1 ms of CPU per sample, 2 workers.
    "input_starvation": dict(shape=(3, 64, 64), batch=64, workers=2, cpu_ms=1.0, matmuls=4, dim=4096),
    # planted class: the main process makes the batches (num_workers=0).
    "main_process": dict(shape=(3, 64, 64), batch=32, workers=0, cpu_ms=0.5, matmuls=4, dim=4096),
    # planted class: the pin thread (pin_memory=True, 12 workers, 147 MiB batches).
    "pin_thread": dict(shape=(3, 224, 224), batch=256, workers=12, pin_memory=1, matmuls=2, dim=4096),
    # planted class: pageable staging on the critical path: one 73.5 MiB host
    # batch, allocated once and reused every step (batch_size=None: no
    # collate), copied from pageable memory.
    "pageable_staging": dict(shape=(128, 3, 224, 224), batch=None, workers=0, matmuls=2, dim=4096),
    # not a planted class: 73.5 MiB batches from 8 workers' shm, pin_memory=False
    # (the main thread stages each copy and frees each worker's segment).
    "shm_batches": dict(shape=(3, 224, 224), batch=128, workers=8, matmuls=2, dim=4096),
    # planted class: fresh-buffer page faults (0 workers, nearly free samples:
    # collate fills a fresh 73.5 MiB buffer every batch).
    "fresh_faults": dict(shape=(3, 224, 224), batch=128, workers=0, matmuls=2, dim=4096),
    # planted class: synchronous copies (loss.item() every step: the host
    # waits for ~4 ms of GPU work, then does 1 ms of its own while the GPU
    # idles).
    "sync_copies": dict(shape=(1024,), batch=256, workers=2, matmuls=24, dim=4096, sync=1, host_ms=1.0),
    # planted class: /dev/shm (4 workers x prefetch 2 x 9.2 MiB batches; run
    # it in a 32 MiB /dev/shm).
    "shm_small": dict(shape=(3, 224, 224), batch=16, workers=4, matmuls=2, dim=2048),
    # planted class: pinned memory over-use (PINSCOPE_PIN=1 with a budget
    # below the reused 73.5 MiB batch: run with PINSCOPE_PIN_BUDGET=50M).
    "pinned_overuse": dict(shape=(128, 3, 224, 224), batch=None, workers=0, matmuls=2, dim=4096),
    # planted: workers started anew every epoch (persistent_workers=False):
    # short epochs of 20 batches, 4 workers that each spend 100 ms starting
    # (worker_init_fn: opening a dataset, imports), so every epoch's first
    # batch waits for them.
    # planted: the PCIe link. A 147 MiB batch pinned once by the job and
    # reused (batch_size=None, 0 workers), little GPU work: the DMA is the
    # step. --half 1 sends it as bfloat16 (73.5 MiB) and converts on the GPU.
    "copy_bound": dict(shape=(256, 3, 224, 224), batch=None, workers=0, matmuls=0, dim=1024,
                       pinned_base=1),
    "worker_restart": dict(shape=(3, 64, 64), batch=64, workers=4, cpu_ms=0.05, matmuls=4, dim=4096,
                           init_ms=100.0, epoch_steps=20),
}


class Synth(Dataset):
    """Samples of `shape` fp32; `cpu_ms` of CPU (a spin) per sample."""

    def __init__(self, n, shape, cpu_ms, pinned=False, half=False):
        self.n = n
        self.cpu_ms = cpu_ms
        self.base = torch.randn(*shape)
        if half:
            self.base = self.base.to(torch.bfloat16)
        if pinned:
            self.base = self.base.pin_memory()

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.cpu_ms > 0:
            end = time.perf_counter() + self.cpu_ms / 1000.0
            x = 0
            while time.perf_counter() < end:
                x += 1
        return self.base  # nearly free: collate copies it into the batch


class TimedCollate:
    """default_collate, timed inside each worker (--worker-timing PATH): one
    line a batch of pid, CPU, seconds since the worker's previous collate
    ended (its samples), the collate's seconds and its minor page faults."""

    def __init__(self, path):
        self.path = path
        self.fd = None
        self.prev = None

    def __call__(self, batch):
        import resource

        from torch.utils.data import default_collate

        t0 = time.perf_counter()
        f0 = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        out = default_collate(batch)
        t1 = time.perf_counter()
        f1 = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        with open("/proc/thread-self/stat") as f:
            cpu = f.read().rsplit(")", 1)[1].split()[36]
        if self.fd is None:
            self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        between = t0 - self.prev if self.prev is not None else -1.0
        os.write(self.fd, b"%d %s %.6f %.6f %d\n" % (os.getpid(), cpu.encode(), between, t1 - t0, f1 - f0))
        self.prev = t1
        return out


def worker_timing(path, skip):
    """Each worker's lines after its first `skip` (TimedCollate): medians of
    its samples, collate and faults, and the mean of its whole cycles."""
    import statistics

    rows = {}
    with open(path) as f:
        for line in f:
            pid, cpu, between, collate, faults = line.split()
            rows.setdefault(pid, []).append((int(cpu), float(between), float(collate), int(faults)))
    out = []
    for pid, r in sorted(rows.items()):
        r = r[skip:] or r
        cycles = [x[1] + x[2] for x in r if x[1] >= 0]  # the first has no previous collate
        out.append(dict(batches=len(r), cpus=sorted({x[0] for x in r}),
                        samples_ms=round(1000 * statistics.median(x[1] for x in r), 3),
                        collate_ms=round(1000 * statistics.median(x[2] for x in r), 3),
                        faults=statistics.median(x[3] for x in r),
                        # a batch's whole cycle in the worker, mean: its throughput
                        cycle_ms_mean=round(1000 * statistics.mean(cycles), 3) if cycles else None))
    return out


def spin(ms):
    end = time.perf_counter() + ms / 1000.0
    while time.perf_counter() < end:
        pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenario", required=True, choices=sorted(SCENARIOS))
    ap.add_argument("--workers", type=int)
    ap.add_argument("--pin-memory", type=int)
    ap.add_argument("--batch", type=int)
    ap.add_argument("--sync", type=int)
    ap.add_argument("--persistent", type=int, default=0)
    ap.add_argument("--prefetch", type=int)
    ap.add_argument("--half", type=int, default=0)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--worker-timing", metavar="PATH",
                    help="time each worker's samples and collate (TimedCollate), into PATH")
    args = ap.parse_args()
    cfg = dict(shape=(1,), batch=32, workers=0, pin_memory=0, cpu_ms=0.0, matmuls=0, dim=1024,
               tiny_ops=0, sync=1, host_ms=0.0, init_ms=0.0, epoch_steps=0, pinned_base=0)
    cfg.update(SCENARIOS[args.scenario])
    for key in ("workers", "pin_memory", "batch", "sync"):
        if getattr(args, key) is not None:
            cfg[key] = getattr(args, key)

    dev = torch.device("cuda")
    torch.manual_seed(0)
    weights = [torch.randn(cfg["dim"], cfg["dim"], device=dev, dtype=torch.bfloat16) for _ in range(2)]
    tiny = torch.randn(cfg["batch"] or 1, 256, device=dev)
    per_step = cfg["batch"] or 1
    total = (args.steps + args.warmup + 2) * per_step
    if cfg["epoch_steps"]:
        total = cfg["epoch_steps"] * per_step  # one epoch; the loop runs as many as it takes
    kwargs = dict(batch_size=cfg["batch"], num_workers=cfg["workers"], pin_memory=bool(cfg["pin_memory"]),
                  shuffle=False, drop_last=cfg["batch"] is not None)
    if cfg["workers"] > 0:
        kwargs["persistent_workers"] = bool(args.persistent)
        if args.prefetch:
            kwargs["prefetch_factor"] = args.prefetch
        if cfg["init_ms"]:
            kwargs["worker_init_fn"] = lambda _: spin(cfg["init_ms"])
        if args.worker_timing:
            if os.path.exists(args.worker_timing):
                os.unlink(args.worker_timing)
            kwargs["collate_fn"] = TimedCollate(args.worker_timing)
    loader = DataLoader(Synth(total, cfg["shape"], cfg["cpu_ms"], bool(cfg["pinned_base"]),
                              bool(args.half)), **kwargs)

    def batches():
        # Epoch after epoch until the steps are done (one epoch unless the
        # scenario sets epoch_steps).
        while True:
            for b in loader:
                yield b
            if not cfg["epoch_steps"]:
                return

    acc = torch.zeros((), device=dev)
    t0 = None
    steps = 0
    for i, batch in enumerate(batches()):
        if i == args.warmup:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
        if i == args.warmup + args.steps:
            break
        x = batch.to(dev, non_blocking=bool(cfg["pin_memory"] or cfg["pinned_base"]))
        if x.dtype != torch.float32:
            x = x.float()  # the batch sent in fewer bytes, converted on the GPU
        s = x.float().mean()
        h = weights[0]
        for _ in range(cfg["matmuls"]):
            h = (h @ weights[1]) * 0.5
        y = tiny
        for _ in range(cfg["tiny_ops"]):
            y = y * 1.0001
        loss = s + h[0, 0].float() + y[0, 0]
        if cfg["sync"]:
            acc += loss.item()  # the host waits for the step
            if cfg["host_ms"]:
                spin(cfg["host_ms"])  # metrics on the host, GPU idle
        else:
            acc += loss
            if cfg["host_ms"]:
                spin(cfg["host_ms"])
        if t0 is not None:
            steps += 1
    torch.cuda.synchronize()
    float(acc)
    dt = time.perf_counter() - t0
    samples = cfg["batch"] or cfg["shape"][0]
    out = dict(scenario=args.scenario, steps=steps, seconds=round(dt, 4),
               step_ms=round(1000 * dt / steps, 3), samples_per_s=round(steps * samples / dt, 2),
               batches_per_s=round(steps / dt, 3),
               config=dict(workers=cfg["workers"], pin_memory=cfg["pin_memory"], batch=cfg["batch"],
                           sync=cfg["sync"], persistent=args.persistent,
                           pin=os.environ.get("PINSCOPE_PIN", "0")))
    if args.worker_timing and os.path.exists(args.worker_timing):
        out["workers"] = worker_timing(args.worker_timing, args.warmup // max(1, cfg["workers"]))
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
