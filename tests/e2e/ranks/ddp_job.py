"""A data-parallel job on the CPU for tests/e2e/ranks (run by torchrun
with the gloo backend, under `pinscope run`): every rank trains a small
linear model under DistributedDataParallel on batches from its own
DataLoader, and copies each batch to its "GPU" through the CUDA runtime
test double (FAKE_CUDART: the fake libcudart, loaded here and called
through the process's global symbols, so a preloaded libpinscope.so sees
each cudaMemcpy as it would PyTorch's). The device is the rank's
LOCAL_RANK (cudaSetDevice). --slow-rank R --slow-ms M plants a straggler:
rank R's dataset sleeps M ms per sample. Prints "rank R steps N" and
exits 0."""
import argparse
import ctypes
import os
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

CUDA_MEMCPY_HOST_TO_DEVICE = 1


class Samples(Dataset):
    def __init__(self, n, dim, sleep_ms):
        self.n = n
        self.dim = dim
        self.sleep_ms = sleep_ms

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.sleep_ms > 0:
            time.sleep(self.sleep_ms / 1000.0)
        x = torch.full((self.dim,), float(i % 7), dtype=torch.float32)
        return x, torch.tensor(float(i % 3))


class FakeGpu:
    """The test double's runtime, called the way libtorch_cuda calls CUDA."""

    def __init__(self, path, device, nbytes):
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        self.rt = ctypes.CDLL(None)  # the global scope: the preloaded shim first
        self.rt.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                       ctypes.c_int]
        assert self.rt.cudaSetDevice(device) == 0, "cudaSetDevice"
        self.dev = ctypes.c_void_p()
        assert self.rt.cudaMalloc(ctypes.byref(self.dev), ctypes.c_size_t(nbytes)) == 0
        self.nbytes = nbytes

    def upload(self, tensor):
        n = tensor.numel() * tensor.element_size()
        assert n <= self.nbytes
        rc = self.rt.cudaMemcpy(self.dev, ctypes.c_void_p(tensor.data_ptr()), n,
                                CUDA_MEMCPY_HOST_TO_DEVICE)
        assert rc == 0, rc


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--dim", type=int, default=65536)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--slow-rank", type=int, default=-1)
    ap.add_argument("--slow-ms", type=float, default=0.0)
    args = ap.parse_args()
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    sleep_ms = args.slow_ms if rank == args.slow_rank else 0.0
    loader = DataLoader(Samples(args.batch * args.steps, args.dim, sleep_ms),
                        batch_size=args.batch, num_workers=args.workers)
    gpu = FakeGpu(os.environ["FAKE_CUDART"], local_rank, args.batch * args.dim * 4)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(args.dim, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-6)
    steps = 0
    for x, y in loader:
        gpu.upload(x)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x).squeeze(1), y)
        loss.backward()  # the gradients' all-reduce (gloo): every rank waits for the slowest
        opt.step()
        steps += 1
    dist.barrier()
    dist.destroy_process_group()
    assert steps == args.steps, steps
    print("rank", rank, "steps", steps, flush=True)


if __name__ == "__main__":
    main()
