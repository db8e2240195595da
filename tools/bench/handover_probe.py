"""How long the training loop waits for a worker to hand over a batch that
is already made (docs/pipeline-model.md, "Waiting for an empty queue, or for
a hand-over"). No GPU, no pinscope: times multiprocessing.queues' unpickling
of each batch on the main thread while the loop is slower than its one
worker, so every batch is waiting in the queue when it is taken.

  python3 tools/bench/handover_probe.py spin    # the worker's Python holds the GIL
  python3 tools/bench/handover_probe.py sleep   # the worker sleeps (GIL released)

Prints the mean and median wall time of one unpickling and its CPU time.
"""
import multiprocessing.queues as queues
import statistics
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

_base = queues._ForkingPickler
_times = []


class _Timed(_base):
    @staticmethod
    def loads(data, *args, **kwargs):
        t0, c0 = time.perf_counter(), time.thread_time()
        out = _base.loads(data, *args, **kwargs)
        _times.append(((time.perf_counter() - t0) * 1e3, (time.thread_time() - c0) * 1e3))
        return out


class Samples(Dataset):
    def __init__(self, mode):
        self.mode = mode
        self.x = torch.zeros(3, 64, 64)

    def __len__(self):
        return 1 << 20

    def __getitem__(self, i):
        if self.mode == "spin":
            end = time.perf_counter() + 0.001
            while time.perf_counter() < end:
                pass
        else:
            time.sleep(0.001)
        return self.x


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "spin"
    queues._ForkingPickler = _Timed
    loader = DataLoader(Samples(mode), batch_size=16, num_workers=1)
    loop_ms = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
    for n, _ in enumerate(loader):
        end = time.perf_counter() + loop_ms / 1000.0
        while time.perf_counter() < end:
            pass
        if n == 80:
            break
    wall = [w for w, _ in _times[10:]]
    cpu = [c for _, c in _times[10:]]
    print("%s: unpickling a waiting batch: wall mean %.2f ms, median %.2f ms, max %.2f ms; "
          "CPU mean %.2f ms (%d batches)" % (mode, statistics.mean(wall), statistics.median(wall),
                                            max(wall), statistics.mean(cpu), len(wall)))


if __name__ == "__main__":
    main()
