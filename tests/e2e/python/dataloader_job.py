"""A PyTorch DataLoader job on the CPU, run under libpinscope.so by
dataloader_test (tests/e2e/python). Synthetic samples: a float32 tensor of
--shape filled with the sample index; --batches batches of --batch samples
through --workers worker processes; each batch is checked and, with
--clone, copied once in the main process (a posix_memalign of the batch's
size there); with --hold, every batch is kept alive (its shm segment stays
mapped in the main process) until the loop ends; with --spin-ms, each sample
costs that much Python in the worker (holding its GIL); with --epochs E the
loop runs E epochs of --batches batches, and --init-ms is each worker's
start (worker_init_fn); with --eval-every K, after every K batches the loop
takes the 3 batches of an evaluation DataLoader (another dataset, built on
another line); with --pause-first K, pinscope's recording is paused
(pinscope_recording_pause) from before the loop until K batches were
taken; with --check-gil, the Python hook's calls into the shim must keep
the GIL (ctypes.PyDLL's functions). Prints "batches N" and exits 0 on
success."""
import argparse
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Synthetic(Dataset):
    def __init__(self, n, shape, spin_ms=0.0):
        self.n = n
        self.shape = shape
        self.spin_ms = spin_ms

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.spin_ms > 0:
            end = time.perf_counter() + self.spin_ms / 1000.0
            while time.perf_counter() < end:
                pass
        return torch.full(self.shape, float(i), dtype=torch.float32)


def spin_for(ms):
    if ms <= 0:
        return None

    def init(_):
        end = time.perf_counter() + ms / 1000.0
        while time.perf_counter() < end:
            pass
    return init


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--shape", default="3,64,64")
    ap.add_argument("--clone", action="store_true")
    ap.add_argument("--hold", action="store_true")
    ap.add_argument("--spin-ms", type=float, default=0.0)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--init-ms", type=float, default=0.0)
    ap.add_argument("--eval-every", type=int, default=0)
    ap.add_argument("--pause-first", type=int, default=0)
    ap.add_argument("--check-gil", action="store_true")
    args = ap.parse_args()
    if args.check_gil:
        import ctypes

        import pinscope_hook
        for name in ("pinscope_loader_iter", "pinscope_loader_begin", "pinscope_loader_begin_fetch",
                     "pinscope_loader_end", "pinscope_loader_end_at", "pinscope_loader_mark"):
            fn = getattr(pinscope_hook._lib, name)
            assert fn._flags_ & ctypes._FUNCFLAG_PYTHONAPI, name + " releases the GIL"
    pause = None
    if args.pause_first:
        import ctypes
        pause = ctypes.CDLL(None).pinscope_recording_pause
        pause.argtypes, pause.restype = [ctypes.c_int], ctypes.c_int
        assert pause(1) == 0
    shape = tuple(int(x) for x in args.shape.split(","))
    data = Synthetic(args.batch * args.batches, shape, args.spin_ms)
    loader = DataLoader(data, batch_size=args.batch,  # LOADER
                        num_workers=args.workers, worker_init_fn=spin_for(args.init_ms))
    n = 0
    keep = []
    for _ in range(args.epochs):
        for i, batch in enumerate(loader):
            assert tuple(batch.shape) == (args.batch,) + shape, batch.shape
            assert float(batch[0].flatten()[0]) == i * args.batch
            if args.clone:
                keep.append(batch.clone())
            elif args.hold:
                keep.append(batch)
            n += 1
            if pause is not None and n == args.pause_first:
                assert pause(0) == 0
            if args.eval_every and n % args.eval_every == 0:
                evaluation = DataLoader(Synthetic(3 * args.batch, shape), batch_size=args.batch)
                assert sum(1 for _ in evaluation) == 3
    assert n == args.batches * args.epochs, n
    print("batches", n, flush=True)


if __name__ == "__main__":
    main()
