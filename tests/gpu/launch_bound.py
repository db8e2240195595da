#!/usr/bin/env python3
"""A launch-bound training loop for pinscope's own cost (issue 16): a
12-layer MLP (Linear + LayerNorm + GELU, width 512, batch 64) with AdamW,
its batch copied host -> device each step (pageable, so pinscope's copy hook
runs and starts CUPTI). The GPU finishes each small kernel before the host
launches the next, so every microsecond the host spends per launch or per
copy shows in the step time.

    python3 tests/gpu/launch_bound.py                      # ~300 kernels/step
    python3 tests/gpu/launch_bound.py --variant many       # 1000+ kernels/step
    pinscope run --no-report -o RUN -- python3 tests/gpu/launch_bound.py
    python3 tests/gpu/launch_bound.py --count-kernels      # kernels/step (torch.profiler)

"many": 48 layers and AdamW with foreach=False (one set of kernels per
parameter). Prints one JSON line: ms/step (median over rounds of the mean
step time), the variant, and whether pinscope and libcupti were loaded.
Run by tools/gpu_cost_probe.sh.
"""
import argparse
import json
import os
import statistics
import time


def loaded(name):
    with open("/proc/self/maps") as f:
        return any(name in line for line in f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--variant", choices=["mlp12", "many"], default="mlp12")
    ap.add_argument("--mode", default="", help="a label copied to the output")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--count-kernels", action="store_true")
    args = ap.parse_args()

    import torch
    dev = torch.device("cuda")
    torch.manual_seed(0)
    n_layers, foreach = (12, None) if args.variant == "mlp12" else (48, False)
    width, batch = 512, 64
    layers = []
    for _ in range(n_layers):
        layers += [torch.nn.Linear(width, width), torch.nn.LayerNorm(width), torch.nn.GELU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 10)).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=foreach)
    x_host = torch.randn(batch, width)
    y_host = torch.randint(0, 10, (batch,))
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        x = x_host.to(dev)  # pageable H2D: cudaMemcpyAsync + a wait
        y = y_host.to(dev)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()

    kernels_per_step = None
    if args.count_kernels:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                step()
            torch.cuda.synchronize()
        kernels = sum(e.count for e in prof.key_averages()
                      if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA)
        kernels_per_step = kernels / 10

    rounds = []
    for _ in range(args.rounds):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            loss = step()
        torch.cuda.synchronize()
        rounds.append((time.perf_counter() - t0) / args.steps * 1e3)
    print(json.dumps({
        "variant": args.variant,
        "mode": args.mode,
        "ms_per_step": round(statistics.median(rounds), 4),
        "ms_rounds": [round(r, 4) for r in rounds],
        "steps_per_round": args.steps,
        "kernels_per_step": kernels_per_step,
        "final_loss": round(float(loss.item()), 6),
        "pinscope_loaded": loaded("libpinscope"),
        "cupti_loaded": loaded("libcupti"),
        "env": {k: v for k, v in os.environ.items() if k.startswith("PINSCOPE_CUPTI")},
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0),
    }))


if __name__ == "__main__":
    main()
