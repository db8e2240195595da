#!/usr/bin/env python3
"""Each DataLoader worker's batch cycle in a pinscope run, and where it
stalled: what decides an input-bound job's step, read from the trace.

    tools/bench/loader_cycles.py RUN_DIR [--from-batch N] [--to-batch M]

A worker's cycle is the time from one LOADER_FETCH's start to its next one:
the batch's samples and collate, then the wait for the next index. In an
input-bound job the step is the workers' mean cycle over the number of
workers, so a cost in the workers, or a main thread that stalls long enough
to hold back their indices, shows here; a step time over a short loop also
moves with how many batches were ready when its clock started.

Prints, per worker: fetches, the mean and median cycle over the main
thread's batches [N, M) (LOADER_NEXT's index; default 8 to the last), and
every cycle over 1.03 times the median with what it held (its fetch, then
the wait) and the recording switches (device-record windows) near it.
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from trace_dump import _import_pb2, load_run  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("--from-batch", type=int, default=8)
    ap.add_argument("--to-batch", type=int)
    args = ap.parse_args()
    pb2 = _import_pb2()
    fetches, nexts, switches = {}, [], []
    for path, packets in load_run(args.run).items():
        name = os.path.basename(path)
        for p in packets:
            kind = p.WhichOneof("data")
            if kind == "loader":
                if p.loader.kind == pb2.LOADER_FETCH:
                    fetches.setdefault(name, []).append((p.timestamp_ns, p.loader.end_ns))
                elif p.loader.kind == pb2.LOADER_NEXT:
                    nexts.append((p.loader.index, p.timestamp_ns, p.loader.end_ns))
            elif kind == "recording":
                switches.append((p.timestamp_ns, p.recording.reason))
    if not nexts or not fetches:
        sys.exit("%s: no DataLoader spans (was the Python hook on, and were there workers?)" % args.run)
    nexts.sort()
    last = args.to_batch if args.to_batch is not None else nexts[-1][0]
    inside = [n for n in nexts if args.from_batch <= n[0] < last]
    if len(inside) < 2:
        sys.exit("%s: fewer than 2 batches in [%d, %d)" % (args.run, args.from_batch, last))
    t0, t1 = inside[0][1], inside[-1][2]
    print("main thread: batches [%d, %d): %.1f ms, %.3f ms a batch" %
          (inside[0][0], inside[-1][0] + 1, (t1 - t0) / 1e6, (t1 - t0) / 1e6 / len(inside)))
    for name, spans in sorted(fetches.items()):
        spans.sort()
        cycles = [(spans[i][0], spans[i][1], spans[i + 1][0]) for i in range(len(spans) - 1)
                  if t0 <= spans[i][0] and spans[i + 1][0] <= t1]
        if not cycles:
            continue
        lengths = [(c - b) / 1e6 for b, _, c in cycles]
        median = statistics.median(lengths)
        print("worker %s: %d fetches, %d cycles inside: mean %.3f ms, median %.3f ms" %
              (name, len(spans), len(cycles), statistics.mean(lengths), median))
        for (b, e, c), length in zip(cycles, lengths):
            if length <= 1.03 * median:
                continue
            near = [r for t, r in switches if b - 100e6 <= t <= c + 100e6]
            print("  at %+.1f ms: cycle %.1f ms = fetch %.1f + wait %.1f%s" %
                  ((b - t0) / 1e6, length, (e - b) / 1e6, (c - e) / 1e6,
                   ("; switches near: " + ", ".join(near)) if near else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
