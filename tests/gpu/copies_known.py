#!/usr/bin/env python3
"""GPU suite, issue 2: a PyTorch program that makes a known set of copies.

Run under pinscope on a GPU machine:
    pinscope run -o RUN -- python3 tests/gpu/copies_known.py RUN/expected.json
then check the trace (on any machine):
    python3 tests/gpu/check_copies.py RUN
Every copy this script makes is listed in expected.json with its direction,
size, host memory kind, API and whether the caller blocked on it.
"""
import json
import sys

import torch

SIZES = [1 << 20, 8 << 20, 64 << 20]  # bytes
REPEATS = 3


def main(out_path):
    dev = torch.device("cuda")
    expected = []

    def expect(direction, nbytes, host_kind, blocking):
        expected.append({"direction": direction, "bytes": nbytes, "host_kind": host_kind,
                         "blocking": blocking})

    torch.cuda.init()
    for nbytes in SIZES:
        n = nbytes // 4
        host = torch.rand(n)  # pageable, from posix_memalign
        pinned_src = torch.empty(n, pin_memory=True)
        pinned_src.copy_(host)
        pinned_dst = torch.empty(n, pin_memory=True)
        pageable_dst = torch.empty(n)
        d = torch.rand(n, device=dev)
        torch.cuda.synchronize()
        for _ in range(REPEATS):
            host.to(dev)  # cudaMemcpyAsync + cudaStreamSynchronize
            expect("H2D", nbytes, "PAGEABLE", True)
            host.to(dev, non_blocking=True)
            expect("H2D", nbytes, "PAGEABLE", False)
            pinned_src.to(dev, non_blocking=True)
            expect("H2D", nbytes, "PINNED", False)
            pageable_dst.copy_(d)
            expect("D2H", nbytes, "PAGEABLE", True)
            pinned_dst.copy_(d, non_blocking=True)
            expect("D2H", nbytes, "PINNED", False)
        torch.cuda.synchronize()
        # Data check: the copies moved the right bytes (one more blocking D2H).
        check = d.cpu()
        expect("D2H", nbytes, "PAGEABLE", True)
        assert torch.equal(check, pageable_dst) and torch.equal(check, pinned_dst)
        del host, pinned_src, pinned_dst, pageable_dst, d
    with open(out_path, "w") as f:
        json.dump({"copies": expected, "torch": torch.__version__,
                   "gpu": torch.cuda.get_device_name(0)}, f, indent=1)
    print(f"copies_known: {len(expected)} copies made")


if __name__ == "__main__":
    main(sys.argv[1])
