#!/usr/bin/env python3
"""Step-time overhead of device-activity recording on a training-shaped loop
with many small kernels (issue 7; results go to docs/benchmarks.md).

    python3 tools/bench/cupti_overhead.py --mode none
    pinscope run --no-report -o RUN -- python3 tools/bench/cupti_overhead.py --mode pinscope
    PINSCOPE_CUPTI=0 pinscope run ... -- python3 tools/bench/cupti_overhead.py --mode pinscope_nocupti
    python3 tools/bench/cupti_overhead.py --mode profiler    # torch.profiler around the loop
    python3 tools/bench/cupti_overhead.py --variant many     # 1000+ kernels/step (issue 16)
    python3 tools/bench/cupti_overhead.py --count-kernels    # kernels/step first (torch.profiler)

The loop: a 12-layer MLP (width 512, batch 64) forward, backward and an SGD
step, with a small pageable H2D copy of the batch each step (so pinscope's
copy hook runs and starts CUPTI) - a few hundred small kernels per step, the
regime where per-kernel recording costs show. Prints one JSON line: the
median over rounds of the mean step time, and what was loaded (pinscope,
libcupti). The mode is a label; pinscope itself is preloaded by the caller.

--variant (issue 16, tools/gpu_cost_probe.sh): `sgd` (the above, the
default), `mlp12` (12 layers, AdamW: the launch-bound loop of issue 16's
table, ~300 kernels/step) and `many` (48 layers, AdamW with foreach=False:
one set of kernels per parameter, 1000+ kernels/step).
"""
import argparse
import json
import os
import statistics
import time


def loaded(name):
    with open("/proc/self/maps") as f:
        return any(name in line for line in f)


def make_step(variant, dev, layers=12, width=512, batch=64):
    """The loop's step on device dev: forward, backward and the optimizer
    after a pageable copy of the batch (tools/bench/turns.py runs it too)."""
    import torch
    if variant == "many":
        layers = 48
    torch.manual_seed(0)
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.LayerNorm(width), torch.nn.GELU()]
    model = torch.nn.Sequential(*mods, torch.nn.Linear(width, 10)).to(dev)
    if variant == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3,
                                foreach=False if variant == "many" else None)
    x_host = torch.randn(batch, width)
    y_host = torch.randint(0, 10, (batch,))
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        x = x_host.to(dev)  # pageable H2D copy: cudaMemcpyAsync + sync
        y = y_host.to(dev)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return step


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", default="none")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--variant", choices=["sgd", "mlp12", "many"], default="sgd")
    ap.add_argument("--count-kernels", action="store_true",
                    help="count kernels per step over 10 steps (torch.profiler) before timing")
    args = ap.parse_args()

    import torch
    dev = torch.device("cuda")
    step = make_step(args.variant, dev, layers=args.layers, width=args.width, batch=args.batch)

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()

    kernels_per_step = None
    if args.count_kernels:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as counted:
            for _ in range(10):
                step()
            torch.cuda.synchronize()
        kernels_per_step = sum(e.count for e in counted.key_averages()
                               if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA) / 10

    prof = None
    if args.mode == "profiler":
        from torch.profiler import ProfilerActivity, profile
        prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
        prof.__enter__()

    rounds = []
    for _ in range(args.rounds):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            loss = step()
        torch.cuda.synchronize()
        rounds.append((time.perf_counter() - t0) / args.steps * 1e3)
    final_loss = float(loss.item())

    if prof is not None:
        prof.__exit__(None, None, None)
        kernels = sum(e.count for e in prof.key_averages()
                      if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA)
        kernels_per_step = kernels / (args.rounds * args.steps)

    print(json.dumps({
        "mode": args.mode,
        "variant": args.variant,
        "step_ms_median": round(statistics.median(rounds), 4),
        "step_ms_rounds": [round(r, 4) for r in rounds],
        "steps_per_round": args.steps,
        "kernels_per_step": kernels_per_step,
        "pinscope_loaded": loaded("libpinscope"),
        "cupti_loaded": loaded("libcupti"),
        "pinscope_cupti_env": os.environ.get("PINSCOPE_CUPTI"),
        "env": {k: v for k, v in os.environ.items() if k.startswith("PINSCOPE_CUPTI")},
        "final_loss": round(final_loss, 6),
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0),
    }))


if __name__ == "__main__":
    main()
