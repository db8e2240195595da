#!/usr/bin/env python3
"""Allocation stacks through libtorch's own frames, on the CPU: N tensors of
1 MiB made and dropped from one line (docs/benchmarks.md, twenty-third
session). Each is a recorded allocation with a call stack: libtorch's
allocator, three Python frames. The stack cache answers almost all of them.

    pinscope run --no-report -o /tmp/stk.run -- python3 tools/bench/alloc_stack_loop.py [N]
    python3 tools/trace_dump.py /tmp/stk.run | grep counters | tail -1

stack_capture_ns and stack_python_ns over stacks_captured: a stack's cost.
"""
import sys

import torch


def make():
    return torch.empty(1 << 20, dtype=torch.uint8)


def main(n):
    for _ in range(n):
        t = make()
        del t


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20000)
