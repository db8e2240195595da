"""DataLoader batches copied to a CUDA device under PINSCOPE_PIN, on the CPU:
the CUDA runtime test double (--cudart, loaded RTLD_GLOBAL) stands in for
CUDA, and the main process copies every batch to "device" memory with
cudaMemcpyAsync + cudaStreamSynchronize (found through the global scope, so
libpinscope.so's hooks see them), reads it back and checks it. Run by
pin_loader_test (tests/e2e/python) with and without pinscope.

Samples are a function of their index (and the loader's seed): sample i of
loader L is a float32 tensor of --shape whose element k is
(L * 1000003 + i * 7919 + k) mod 65521. Every batch the device received is
checked against that and its checksum printed ("batch L E B SUM"), so two
runs can be compared line by line. --hold keeps the first batch of each
loader alive to the end and checks its host contents again then (its shm
segment stays mapped while later batches arrive). --kill-after B: once
batch B of epoch --kill-epoch (0: the first) has been checked, the main process kills (SIGKILL)
the worker that makes batch B+1; the loader then fails (DataLoader's
RuntimeError, or the connection error of fetching a dead worker's
descriptor: which one, and how many prefetched batches still arrive, is a
race with or without pinscope) and the job prints "loader error". Prints "register_calls N" (the double's
cudaHostRegister calls in this process) and "done" on success; exits 1 on
wrong data.

For the pool of registered slots (PINSCOPE_PIN_POOL, docs/zero-copy-pool.md):
--break-after B leaves the first epoch after batch B; --fork-at B forks the
main process at batch B of the first epoch with that batch alive, and the
child checks it at the end, after the parent went through the rest ("fork
child intact"); --send-at B sends batch B of epoch --send-epoch (0: the first) to a helper
process (torch.multiprocessing, the fd over SCM_RIGHTS) that checks it at
the end ("sent batch intact"; with --send-late the helper takes it only then,
long after this process dropped the batch: torch dup'd its fd when it sent
it); --exec-child runs a second, smaller job as an
exec'd child at the end ("child done"); --idle-at-end S drops the loaders and
sleeps S seconds before the end (the pool's idle release); --fd-limit N sets
the soft RLIMIT_NOFILE to N and keeps every batch (and its fd) alive until
the loader fails as PyTorch's test_fd_limit_exceeded expects ("fd limit
error": the RuntimeError that names `ulimit -n`); any other error fails the
job. --workers-later N: the epochs after the first run new DataLoaders with
N workers. --staged: every batch is copied on the host into one cudaHostAlloc
block and the device copy reads that block, as with pin_memory=True.
--pin-thread: the DataLoaders run with pin_memory=True, their pin thread
emulated on this CPU-only torch as torch 2.x runs it on a GPU: it receives
(maps) each batch from the workers and copies it into a cudaHostAlloc block
of the double (a free list, as torch's caching host allocator keeps), and
the device copy reads that block; --direct-later: the epochs after the
first run new DataLoaders with pin_memory=False (the device copy reads the
batch itself). --background: each DataLoader is iterated on a thread of its
own into a queue of 2 that the loop takes from, as
prefetch_generator.BackgroundGenerator wraps one."""
import argparse
import ctypes
import mmap
import os
import queue
import resource
import signal
import subprocess
import sys
import threading
import time
import weakref

import torch
from torch.utils.data import DataLoader, Dataset

H2D, D2H = 1, 2
MOD = 65521


class Indexed(Dataset):
    def __init__(self, n, shape, seed):
        self.n, self.shape, self.seed = n, shape, seed
        self.numel = 1
        for s in shape:
            self.numel *= s

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        base = self.seed * 1000003 + i * 7919
        flat = torch.remainder(torch.arange(base, base + self.numel, dtype=torch.int64), MOD)
        return flat.to(torch.float32).reshape(self.shape)


def expected(ds, indices):
    return torch.stack([ds[i] for i in indices])


class Device:
    def __init__(self, cudart, nbytes):
        ctypes.CDLL(cudart, mode=os.RTLD_GLOBAL)
        self.g = ctypes.CDLL(None)
        self.dev = ctypes.c_void_p()
        self.nbytes = nbytes
        if self.g.cudaMalloc(ctypes.byref(self.dev), ctypes.c_size_t(nbytes)) != 0:
            sys.exit("cudaMalloc failed")
        # The read-back buffer: an anonymous mapping, which pinscope neither
        # records nor pins, so the only buffers it may register are batches.
        self.back = mmap.mmap(-1, nbytes)
        self.back_addr = ctypes.addressof(ctypes.c_char.from_buffer(self.back))

    def stage(self):
        """--staged: batches reach the device as with pin_memory=True, through
        a cudaHostAlloc block the batch is copied into on the host (torch's
        pin thread does that), never by DMA from the batch itself."""
        p = ctypes.c_void_p()
        if self.g.cudaHostAlloc(ctypes.byref(p), ctypes.c_size_t(self.nbytes), 0) != 0:
            sys.exit("cudaHostAlloc failed")
        self.staging = (ctypes.c_char * self.nbytes).from_address(p.value)

    def roundtrip(self, t):
        """Copies t to the device (async + sync) and returns what arrived."""
        n = t.numel() * t.element_size()
        assert n <= self.nbytes
        if getattr(self, "staging", None) is not None:
            pinned = torch.frombuffer(self.staging, dtype=t.dtype, count=t.numel()).reshape(t.shape)
            pinned.copy_(t)
            t = pinned
        if self.g.cudaMemcpyAsync(self.dev, ctypes.c_void_p(t.data_ptr()), ctypes.c_size_t(n), H2D,
                                  ctypes.c_void_p(0)) != 0:
            sys.exit("cudaMemcpyAsync failed")
        if self.g.cudaStreamSynchronize(ctypes.c_void_p(0)) != 0:
            sys.exit("cudaStreamSynchronize failed")
        if self.g.cudaMemcpy(ctypes.c_void_p(self.back_addr), self.dev, ctypes.c_size_t(n), D2H) != 0:
            sys.exit("cudaMemcpy D2H failed")
        return torch.frombuffer(self.back, dtype=t.dtype, count=t.numel()).reshape(t.shape).clone()

    def register_calls(self):
        class Stats(ctypes.Structure):
            _fields_ = [(name, ctypes.c_ulong) for name in (
                "host_register_calls", "host_unregister_calls", "host_alloc_calls", "free_host_calls",
                "pointer_attribute_calls", "memcpy_calls", "registered_bytes")]
        s = Stats()
        self.g.fakecuda_get_stats(ctypes.byref(s))
        return s.host_register_calls


class PinThread:
    """--pin-thread: torch's pin thread on this CPU-only torch. pin() is
    DataLoader's pin_memory(batch): the batch copied on the host into a
    cudaHostAlloc block, which goes back to a free list when the copy dies
    (torch's CachingHostAllocator keeps its blocks the same way)."""

    def __init__(self, g):
        self.g = g
        self.free = {}
        self.lock = threading.Lock()
        self.allocs = 0

    def block(self, nbytes):
        with self.lock:
            if self.free.get(nbytes):
                return self.free[nbytes].pop()
            self.allocs += 1
        p = ctypes.c_void_p()
        if self.g.cudaHostAlloc(ctypes.byref(p), ctypes.c_size_t(nbytes), 0) != 0:
            raise RuntimeError("cudaHostAlloc failed")
        return (ctypes.c_char * nbytes).from_address(p.value)

    def give_back(self, nbytes, buf):
        with self.lock:
            self.free.setdefault(nbytes, []).append(buf)

    def pin(self, data, device=None):
        nbytes = data.numel() * data.element_size()
        buf = self.block(nbytes)
        out = torch.frombuffer(buf, dtype=data.dtype, count=data.numel()).reshape(data.shape)
        out.copy_(data)
        weakref.finalize(out, self.give_back, nbytes, buf)
        return out

    def install(self):
        import torch.utils.data._utils.pin_memory as pm
        torch.cuda.is_available = lambda: True
        torch.cuda.current_device = lambda: 0
        torch.cuda.set_device = lambda device: None
        pm.pin_memory = self.pin


def checksum(t):
    return int(t.view(torch.int32).to(torch.int64).sum())


def helper_main(q_in, q_out, go):
    """The --send-at helper: holds the batch it got, checks it when told.
    With --send-late it takes the batch (its fd, from the sender's
    resource_sharer) only once the sender went through every batch."""
    if go is not None:
        go.wait()
    x = q_in.get()
    want = q_in.get()
    q_out.put(bool(torch.equal(x, want)))


def quiet_sigchld():
    """After a killed worker's error: DataLoader's SIGCHLD handler raises the
    same RuntimeError again at whatever line runs when the signal comes (CI
    saw it inside the print of "loader error", without pinscope). Its own
    handler off first, retried until that took effect."""
    while True:
        try:
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            return
        except RuntimeError:
            continue


class Background:
    """prefetch_generator.BackgroundGenerator as users wrap a DataLoader: a
    thread iterates it into a queue of 2 that the training loop takes from."""

    def __init__(self, loader):
        self.q = queue.Queue(2)
        self.error = None
        threading.Thread(target=self.fill, args=(iter(loader),), daemon=True).start()

    def fill(self, it):
        try:
            for x in it:
                self.q.put(x)
        except Exception as error:  # handed to the loop, as the wrapper does
            self.error = error
        self.q.put(StopIteration)

    def __iter__(self):
        return self

    def __next__(self):
        x = self.q.get()
        if x is StopIteration:
            if self.error is not None:
                raise self.error
            raise StopIteration
        return x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cudart", required=True)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--batches", type=int, default=10, help="per epoch and loader")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--shape", default="3,256,256")
    ap.add_argument("--loaders", type=int, default=1)
    ap.add_argument("--persistent", action="store_true")
    ap.add_argument("--strategy", default="file_descriptor")
    ap.add_argument("--hold", action="store_true")
    ap.add_argument("--kill-after", type=int, default=-1)
    ap.add_argument("--kill-epoch", type=int, default=0)
    ap.add_argument("--break-after", type=int, default=-1)
    ap.add_argument("--fork-at", type=int, default=-1)
    ap.add_argument("--send-at", type=int, default=-1)
    ap.add_argument("--send-epoch", type=int, default=0)
    ap.add_argument("--send-late", action="store_true",
                    help="the helper takes the sent batch at the end, after its slot's reuse")
    ap.add_argument("--exec-child", action="store_true")
    ap.add_argument("--idle-at-end", type=float, default=0, help="seconds to sleep, loaders gone")
    ap.add_argument("--fd-limit", type=int, default=0, help="soft RLIMIT_NOFILE; every batch kept")
    ap.add_argument("--staged", action="store_true",
                    help="copy every batch into a cudaHostAlloc block first (pin_memory=True)")
    ap.add_argument("--pin-thread", action="store_true",
                    help="pin_memory=True, the pin thread emulated (cudaHostAlloc blocks)")
    ap.add_argument("--background", action="store_true",
                    help="iterate each DataLoader on a thread of its own (a prefetching wrapper)")
    ap.add_argument("--direct-later", action="store_true",
                    help="epochs after the first: new DataLoaders with pin_memory=False")
    ap.add_argument("--workers-later", type=int, default=0,
                    help="epochs after the first: new DataLoaders with this many workers")
    a = ap.parse_args()
    torch.multiprocessing.set_sharing_strategy(a.strategy)
    helper = None
    if a.send_at >= 0:
        ctx = torch.multiprocessing.get_context("fork")
        q_in, q_out = ctx.Queue(), ctx.Queue()
        go = ctx.Event() if a.send_late else None
        helper = ctx.Process(target=helper_main, args=(q_in, q_out, go))
        helper.start()
    fork_pipe = fork_child = None
    shape = tuple(int(x) for x in a.shape.split(","))
    sets = [Indexed(a.batch * a.batches, shape, seed) for seed in range(a.loaders)]
    dev = Device(a.cudart, a.batch * sets[0].numel * 4)
    if a.pin_thread:
        PinThread(dev.g).install()
    loaders = [DataLoader(ds, batch_size=a.batch, num_workers=a.workers, pin_memory=a.pin_thread,
                          persistent_workers=a.persistent and a.workers > 0) for ds in sets]
    if a.staged:
        dev.stage()
    held = []
    kept = []
    bad = 0
    if a.fd_limit:
        resource.setrlimit(resource.RLIMIT_NOFILE,
                           (a.fd_limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    try:
        for epoch in range(a.epochs):
            if epoch == 1 and (a.workers_later or a.direct_later):
                loaders = [DataLoader(ds, batch_size=a.batch,
                                      num_workers=a.workers_later or a.workers)
                           for ds in sets]
            its = [Background(loader) if a.background else iter(loader) for loader in loaders]
            for b, batches in enumerate(zip(*its)):
                for l, x in enumerate(batches):
                    want = expected(sets[l], range(b * a.batch, (b + 1) * a.batch))
                    got = dev.roundtrip(x)
                    if not torch.equal(got, want):
                        print(f"WRONG device data: loader {l} epoch {epoch} batch {b}", flush=True)
                        bad += 1
                    print(f"batch {l} {epoch} {b} {checksum(got)}", flush=True)
                    if a.fd_limit:
                        kept.append(x)
                    if a.hold and epoch == 0 and b == 0:
                        held.append((l, x, want))
                    if epoch == 0 and b == a.fork_at and l == 0:
                        r, w = os.pipe()
                        pid = os.fork()
                        if pid == 0:  # the child: waits, then checks the batch it inherited
                            os.close(w)
                            os.read(r, 1)
                            os._exit(0 if torch.equal(x, want) else 3)
                        os.close(r)
                        fork_pipe, fork_child = w, pid
                    if epoch == a.send_epoch and b == a.send_at and l == 0:
                        q_in.put(x)
                        q_in.put(want)
                if epoch == 0 and b == a.break_after:
                    break
                if epoch == a.kill_epoch and b == a.kill_after:
                    victim = its[0]._workers[(b + 1) % a.workers]
                    os.kill(victim.pid, signal.SIGKILL)
    except (RuntimeError, ConnectionError, EOFError) as e:
        if a.fd_limit and isinstance(e, RuntimeError) and "ulimit -n" in str(e):
            print("fd limit error", flush=True)
            kept.clear()
        elif a.kill_after < 0:
            raise
        else:
            quiet_sigchld()
            print("loader error", flush=True)
    if fork_child is not None:
        os.write(fork_pipe, b"x")
        _, status = os.waitpid(fork_child, 0)
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
            print("fork child intact", flush=True)
        else:
            print("WRONG fork child", status, flush=True)
            bad += 1
    if helper is not None:
        if go is not None:
            go.set()
        if q_out.get():
            print("sent batch intact", flush=True)
        else:
            print("WRONG sent batch", flush=True)
            bad += 1
        helper.join()
    if a.exec_child:
        child = subprocess.run([sys.executable, __file__, "--cudart", a.cudart, "--workers", "1",
                                "--batches", "10", "--shape", a.shape], capture_output=True, text=True)
        for line in child.stdout.splitlines():
            if line.startswith(("batch ", "WRONG", "done")):
                print("child", line, flush=True)
        if child.returncode != 0:
            print("WRONG child exit", child.returncode, child.stderr[-2000:], flush=True)
            bad += 1
    for l, x, want in held:
        if not torch.equal(x, want):
            print(f"WRONG held batch: loader {l}", flush=True)
            bad += 1
        else:
            print(f"held {l} intact", flush=True)
    if a.idle_at_end:
        del loaders, its, batches, x, got
        time.sleep(a.idle_at_end)
    print("register_calls", dev.register_calls(), flush=True)
    if bad:
        sys.exit(1)
    print("done", flush=True)


if __name__ == "__main__":
    main()
