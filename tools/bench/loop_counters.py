#!/usr/bin/env python3
"""pinscope's own cost a step in a loop, from a run's counters, where the
report cannot find the loop's step (a side of tools/bench/turns.py steps in
turns and waits between them, so its loop's "step" holds the waits).

    /usr/bin/python3 tools/bench/loop_counters.py [--per-step EVENT=N] [--after-steps N]
        [--pb2-dir DIR] RUN_DIR...

For each run folder: its main process (window_cost.py's root_packets: the
trace with the most copies, the root among equals),
two of its Counters packets (one a quarter into its life, and the one
before its last, so inside the loop and past start-up), the steps between
them counted by an event (default: one LOADER_NEXT a step where the Python
hook ran, else `--per-step copy:H2D=3`, the Hugging Face Trainer's three
batch tensors), and a step's hooks: all, each kind (Counters.hook_kinds,
shims since 2026-12-06), call stacks, pointer queries and CUPTI's switches
(a device-record window in the span). docs/benchmarks.md, twenty-fourth
session, used it on call 56's runs.
"""
import argparse
import bisect
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from window_cost import root_packets  # noqa: E402

KINDS = {1: "copy", 2: "sync", 3: "alloc", 4: "shm", 5: "loader"}


def step_times(packets, spec, pb2):
    """The times of the events that mark a step, per `spec`
    ("loader:LOADER_NEXT" or "copy:H2D"; the count a step apart)."""
    what, _, which = spec.partition(":")
    out = []
    for p in packets:
        if what == "loader" and p.HasField("loader"):
            if pb2.LoaderEventKind.Name(p.loader.kind) == which:
                out.append(p.timestamp_ns)
        elif what == "copy" and p.HasField("copy"):
            if pb2.Direction.Name(p.copy.direction) == which:
                out.append(p.timestamp_ns)
    return sorted(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--per-step", help="EVENT=N, e.g. copy:H2D=3 or loader:LOADER_NEXT=1")
    ap.add_argument("--pb2-dir", help="where trace_pb2.py is (default: build*/python)")
    ap.add_argument("--after-steps", type=int, default=0,
                    help="start at the first Counters packet past this many steps (a paired "
                         "side of tools/bench/turns.py: its counters come only while it "
                         "records), not a quarter into the run's counters")
    ap.add_argument("runs", nargs="+")
    args = ap.parse_args()
    import trace_dump
    pb2 = trace_dump._import_pb2(args.pb2_dir)
    for run in args.runs:
        main_packets = root_packets(run, args.pb2_dir)
        if not main_packets:
            sys.exit("%s: no trace files" % run)
        counters = sorted((p.timestamp_ns, p.counters) for p in main_packets
                          if p.HasField("counters"))
        if len(counters) < 5:
            print("%s: too few Counters packets (%d)" % (run, len(counters)))
            continue
        spec, n = "loader:LOADER_NEXT", 1
        if args.per_step:
            spec, _, count = args.per_step.partition("=")
            n = int(count or 1)
        times = step_times(main_packets, spec, pb2)
        if not times and not args.per_step:
            spec, n = "copy:H2D", 3
            times = step_times(main_packets, spec, pb2)
        (t0, a), (t1, b) = counters[len(counters) // 4], counters[-2]
        if args.after_steps:
            # The first Counters packet past that many steps' events: a
            # paired side's counters come only while it records, so a
            # quarter of them can fall in its start-up (docs/benchmarks.md,
            # twenty-sixth session).
            if len(times) <= args.after_steps * n:
                print("%s: %d step events, not past --after-steps %d" % (
                    run, len(times), args.after_steps))
                continue
            later = [c for c in counters[:-1] if c[0] > times[args.after_steps * n]]
            if not later:
                print("%s: no Counters packet past step %d" % (run, args.after_steps))
                continue
            t0, a = later[0]
        steps = (bisect.bisect(times, t1) - bisect.bisect(times, t0)) / n
        if steps <= 0:
            print("%s: no %s events between the two counters" % (run, spec))
            continue

        def per(x, y):
            return (y - x) / steps / 1e3

        kinds = {}
        for side, c in (("a", a), ("b", b)):
            for h in c.hook_kinds:
                kinds.setdefault(h.kind, {"a": (0, 0), "b": (0, 0)})[side] = (h.calls, h.ns)
        parts = ", ".join(
            "%s %.1f a step, %.1f us" % (KINDS.get(k, "kind %d" % k),
                                          (v["b"][0] - v["a"][0]) / steps,
                                          per(v["a"][1], v["b"][1]))
            for k, v in sorted(kinds.items()))
        print("%s: %.0f steps (%s / %d), %.1f hooks a step, %.1f us of hooks a step%s; "
              "of it stacks %.1f us, pointer queries %.1f us, CUPTI switches %.1f us" % (
                  os.path.basename(os.path.normpath(run)), steps, spec, n,
                  (b.hook_calls - a.hook_calls) / steps, per(a.hook_ns, b.hook_ns),
                  " (" + parts + ")" if parts else "",
                  per(a.stack_capture_ns, b.stack_capture_ns),
                  per(a.pointer_query_ns, b.pointer_query_ns),
                  per(a.cupti_switch_ns, b.cupti_switch_ns)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
