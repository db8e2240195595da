#!/usr/bin/env python3
"""What a device-record window cost a training loop, read from its own trace.

    tools/bench/window_cost.py [--after S] [--json] [--pb2-dir DIR] RUN_DIR...

Across processes, the GPU machine's run-to-run spread (5-25% on the H100s of
2026-12-05) hides a cost of 1%. Inside one process it does not: the loop's
steps before a window, in it and after it ran on the same machine state.
This reads the root process's trace of a traced loop (`pinscope run` of
tools/bench/cupti_overhead.py, or any loop that makes the same host-to-device
copy once a step), and says:

  - the loop's pace: the intervals between consecutive copies of the loop's
    copy call stack, the one whose copies cover the most time (count x
    span: the model's weight copies at start come in a burst from one
    stack); a loop copying two tensors a step from one line has two
    intervals a step, and the ratios hold;
  - the baseline of each window: the mean of the mean interval in the 1.5 s
    before the window and in the 1.5 s from AFTER seconds past its detach
    (both sides: a loop's step drifts over seconds); a loop that paused in
    those seconds or after the window (an interval over 4x its side's mean
    and over 5% of its span) gets no figure;
  - the window's cost: the time from the loop's first copy in the window to
    its first copy after it, and from there to its first copy after AFTER
    seconds (1.5), beyond what as many intervals took at the baseline:
    "in" and "after". The same as the report's own-cost line
    (analyzer/analyses/window_cost.h);
  - and from the trace's Counters, the time the job's threads spent
    switching CUPTI (part of "in": the attach and detach are calls on the
    program's thread).

Windows are the Recording packets "attached" and "detached" (and the
start's "check"); a run without windows (PINSCOPE_CUPTI=0) gives the
baseline and the steady step alone. Needs trace_pb2 (see tools/trace_dump.py).
"""
import argparse
import bisect
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import trace_dump  # noqa: E402


def root_packets(run, pb2_dir=None):
    """The packets of the run's main process: the trace with the most copies,
    the root among equals (a loop on the CPU makes none)."""
    files = trace_dump.load_run(run, pb2_dir)
    best = None
    for f, packets in files.items():
        header = next((p.header for p in packets if p.HasField("header")), None)
        if header is None:
            continue
        key = (sum(1 for p in packets if p.HasField("copy")), header.origin == 1)  # ORIGIN_ROOT
        if best is None or key > best[0]:
            best = (key, packets)
    return best[1] if best else []


def device_windows(packets):
    """The device-record windows in a process's packets, [(attached,
    detached)] by their RecordingState packets (the start's check
    included); a window still open at the end has detached None."""
    windows, attached = [], None
    for p in sorted((p for p in packets if p.HasField("recording")), key=lambda p: p.timestamp_ns):
        if p.recording.reason in ("attached", "check") and attached is None:
            attached = p.timestamp_ns
        elif p.recording.detached and attached is not None:
            windows.append((attached, p.timestamp_ns))
            attached = None
    if attached is not None:
        windows.append((attached, None))
    return windows


def analyze(run, after_s=1.5, pb2_dir=None):
    packets = root_packets(run, pb2_dir)
    copies = [p for p in packets if p.HasField("copy")]
    if not copies:
        return {"run": run, "problem": "no copies in the trace"}
    by_stack = {}
    for p in copies:
        by_stack.setdefault(p.copy.stack_id, []).append(p.timestamp_ns)
    marker = max(by_stack, key=lambda k: len(by_stack[k]) * (max(by_stack[k]) - min(by_stack[k])))
    starts = sorted(p.timestamp_ns for p in copies if p.copy.stack_id == marker)
    steps = [(a, b - a) for a, b in zip(starts, starts[1:])]  # (start, interval)
    windows = [(a, d) for a, d in device_windows(packets) if d is not None]
    # Windows that hold loop steps (the start's check comes before the loop).
    loop_windows = [(a, d) for a, d in windows if any(a <= t <= d for t, _ in steps)]
    after_ns = int(after_s * 1e9)
    side_ns = 1_500_000_000
    m = starts

    out = {"run": run, "intervals": len(steps), "loop_ms": (m[-1] - m[0]) / 1e6, "windows": []}
    for a, d in loop_windows:
        i0, i1 = bisect.bisect_left(m, a), bisect.bisect_right(m, d)
        i2 = bisect.bisect_right(m, d + after_ns)
        if i1 <= i0 or i1 >= len(m):
            continue
        sides = []
        b0 = bisect.bisect_left(m, a - side_ns)
        if i0 > b0:
            sides.append((m[i0] - m[b0]) / (i0 - b0))
        c0 = bisect.bisect_left(m, d + after_ns)
        c1 = bisect.bisect_left(m, d + after_ns + side_ns)
        if c1 > c0 and c1 < len(m):
            sides.append((m[c1] - m[c0]) / (c1 - c0))
        if not sides:
            out["windows"].append({"length_ms": (d - a) / 1e6, "problem": "no copies around it"})
            continue
        base = sum(sides) / len(sides)
        # A pause in a side or after the window (window_cost.h: over 4x the
        # side's mean interval and over 5% of its span): the figures would
        # measure the pause.
        pause = 0

        def look(lo, hi, s0, s1):
            nonlocal pause
            if s1 <= s0:
                return
            span = m[s1] - m[s0]
            mean = span / (s1 - s0)
            for i in range(lo, min(hi, len(m) - 1)):
                gap = m[i + 1] - m[i]
                if gap > 4 * mean and gap > 0.05 * span:
                    pause = max(pause, gap)
        look(b0, i0, b0, i0)
        if c1 > c0 and c1 < len(m):
            look(c0, c1, c0, c1)
            look(i1, min(i2, len(m) - 1), c0, c1)
        w = {"length_ms": (d - a) / 1e6, "baseline_interval_ms": base / 1e6,
             "paused": pause > 0, "longest_interval_ms": pause / 1e6,
             "baseline_sides": len(sides), "intervals_in": i1 - i0,
             "time_in_ms": (m[i1] - m[i0]) / 1e6,
             "excess_in_ms": (m[i1] - m[i0] - (i1 - i0) * base) / 1e6,
             "intervals_after": 0, "time_after_ms": 0.0, "excess_after_ms": 0.0}
        if i2 > i1 and i2 < len(m):
            w.update({"intervals_after": i2 - i1, "time_after_ms": (m[i2] - m[i1]) / 1e6,
                      "excess_after_ms": (m[i2] - m[i1] - (i2 - i1) * base) / 1e6})
        out["windows"].append(w)
    counters = [p.counters for p in packets if p.HasField("counters")]
    if counters:
        c = counters[-1]
        out["cupti_switches"] = c.cupti_switches
        out["cupti_switch_ms"] = c.cupti_switch_ns / 1e6
        out["hook_calls"] = c.hook_calls
        out["hook_ms"] = c.hook_ns / 1e6
        out["stack_capture_ms"] = c.stack_capture_ns / 1e6
        out["stack_cache_hits"] = c.stack_cache_hits
    return out


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--after", type=float, default=1.5, help="seconds after a detach counted")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--pb2-dir", help="where trace_pb2.py is (default: build*/python)")
    args = ap.parse_args(argv[1:])
    for run in args.runs:
        r = analyze(run, args.after, args.pb2_dir)
        if args.json:
            print(json.dumps(r))
            continue
        name = os.path.basename(run.rstrip("/"))
        if "problem" in r:
            print("%s: %s" % (name, r["problem"]))
            continue
        line = "%s: %d intervals over %.2f s" % (name, r["intervals"], r["loop_ms"] / 1e3)
        for w in r["windows"]:
            if "problem" in w:
                line += "; window %.0f ms: %s" % (w["length_ms"], w["problem"])
                continue
            if w["paused"]:
                line += "; window %.0f ms: the loop paused near it (a gap of %.1f ms), not measured" % (
                    w["length_ms"], w["longest_interval_ms"])
                continue
            line += ("; window %.0f ms (baseline %.2f ms, %d side%s): %d intervals in %.1f ms "
                     "(%+.1f ms), %d after in %.1f ms (%+.1f ms)") % (
                w["length_ms"], w["baseline_interval_ms"], w["baseline_sides"],
                "" if w["baseline_sides"] == 1 else "s", w["intervals_in"], w["time_in_ms"],
                w["excess_in_ms"], w["intervals_after"], w["time_after_ms"],
                w["excess_after_ms"])
        if "cupti_switch_ms" in r:
            line += "; CUPTI switches %d, %.1f ms" % (r["cupti_switches"], r["cupti_switch_ms"])
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
