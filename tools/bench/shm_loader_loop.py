#!/usr/bin/env python3
"""A DataLoader on the CPU whose batches reach the main process through
shared memory: 2 workers, N batches of four 256 KiB tensors (default 200),
no pinning (docs/benchmarks.md, twenty-third session). Each batch is a map
and an unmap in the main process, with a call stack at the map, between
which the job's own work leaves the caches cold.

    pinscope run --no-report -o /tmp/ld.run -- python3 tools/bench/shm_loader_loop.py [N]
    python3 tools/trace_dump.py /tmp/ld.run/<main pid>.pstrace | grep counters | tail -1

hook_ns over hook_calls: the own time of a shared-memory hook;
stack_capture_ns over stacks_captured: a stack's.
"""
import sys

import torch
from torch.utils.data import DataLoader, Dataset


class Items(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.full((1 << 18,), i % 7, dtype=torch.uint8)


def main(batches):
    n = 0
    for _ in DataLoader(Items(4 * batches), batch_size=4, num_workers=2):
        n += 1
    print(n)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
