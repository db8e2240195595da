#!/usr/bin/env python3
"""Checks a run of copies_known.py: the trace holds exactly the copies the
program made (direction, bytes, memory kinds, API, blocking), no more.

    python3 tests/gpu/check_copies.py RUN
Exit 0 and "PASS" when they match; prints every difference otherwise.
"""
import collections
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import trace_dump  # noqa: E402


def main(run):
    expected = json.load(open(os.path.join(run, "expected.json")))
    files = trace_dump.load_run(run)
    pb2 = trace_dump._import_pb2()
    kind_name = pb2.MemoryKind.Name
    dir_name = pb2.Direction.Name
    api_name = pb2.CopyApi.Name
    # The root process made the copies: the file whose header says ORIGIN_ROOT
    # and whose command line names this script.
    root = None
    for f, packets in files.items():
        if packets and packets[0].HasField("header"):
            h = packets[0].header
            if any("copies_known.py" in a for a in h.cmdline):
                root = packets
    if root is None:
        print("FAIL: no trace file of copies_known.py in", run)
        return 1
    events = [p for p in root if p.WhichOneof("data") in ("copy", "sync")]
    got = collections.Counter()
    problems = []
    for i, p in enumerate(events):
        if p.WhichOneof("data") != "copy":
            continue
        c = p.copy
        host_kind = kind_name(c.src_kind) if c.direction == pb2.H2D else kind_name(c.dst_kind)
        dev_kind = kind_name(c.dst_kind) if c.direction == pb2.H2D else kind_name(c.src_kind)
        if c.result != 0:
            problems.append(f"copy {c.call_id} failed with {c.result}")
        if dev_kind != "DEVICE":
            problems.append(f"copy {c.call_id}: device side is {dev_kind}")
        if api_name(c.api) != "MEMCPY_ASYNC":
            problems.append(f"copy {c.call_id}: api {api_name(c.api)} (torch uses cudaMemcpyAsync)")
        # Blocking: torch follows a blocking copy with cudaStreamSynchronize
        # of the copy's stream on the same thread before anything else
        # (torch.cuda.synchronize() is cudaDeviceSynchronize: not this).
        nxt = events[i + 1] if i + 1 < len(events) else None
        blocking = bool(nxt is not None and nxt.WhichOneof("data") == "sync" and nxt.tid == p.tid
                        and nxt.sync.api == pb2.STREAM_SYNCHRONIZE
                        and nxt.sync.stream == c.stream)
        got[(dir_name(c.direction), c.bytes, host_kind, blocking)] += 1
    want = collections.Counter((e["direction"], e["bytes"], e["host_kind"], e["blocking"])
                               for e in expected["copies"])
    for key in sorted(set(want) | set(got)):
        if want[key] != got[key]:
            problems.append(f"{key}: expected {want[key]} copies, trace has {got[key]}")
    n_copies = sum(got.values())
    print(f"trace: {n_copies} copies in the root process; expected {sum(want.values())}")
    for k in sorted(got):
        print(f"  {k[0]} {k[1] >> 20:4d} MiB {k[2]:8s} {'blocking' if k[3] else 'async   '} x{got[k]}")
    if problems:
        print("FAIL")
        for p in problems:
            print("  " + p)
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
