#!/usr/bin/env python3
"""What a device-record window cost a training loop, read from its own trace.

    tools/bench/window_cost.py [--after S] [--json] [--pb2-dir DIR] RUN_DIR...

Across processes, the GPU machine's run-to-run spread (5-25% on the H100s of
2026-12-05) hides a cost of 1%. Inside one process it does not: the loop's
steps before a window, in it and after it ran on the same machine state.
This reads the root process's trace of a traced loop (`pinscope run` of
tools/bench/cupti_overhead.py, or any loop that makes the same host-to-device
copy once a step), and says:

  - the step: the interval between consecutive copies of the loop's copy
    call stack, the one whose copies cover the most time (count x span:
    the model's weight copies at start come in a burst from one stack);
  - the baseline of each window: the mean of the median step in the 1.5 s
    before the window and in the 1.5 s after AFTER seconds past its detach
    (both sides: a loop's step drifts over seconds);
  - the window's cost: the sum, over the steps that began inside the window
    and those that began within AFTER seconds (1.5) after its detach, of
    their excess over that baseline: split "in" and "after";
  - and from the trace's Counters, the time the job's threads spent
    switching CUPTI (part of "in": the attach and detach are calls on the
    program's thread).

Windows are the Recording packets "attached" and "detached" (and the
start's "check"); a run without windows (PINSCOPE_CUPTI=0) gives the
baseline and the steady step alone. Needs trace_pb2 (see tools/trace_dump.py).
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import trace_dump  # noqa: E402


def root_packets(run, pb2_dir=None):
    files = trace_dump.load_run(run, pb2_dir)
    best = None
    for f, packets in files.items():
        header = next((p.header for p in packets if p.HasField("header")), None)
        if header is None:
            continue
        copies = sum(1 for p in packets if p.HasField("copy"))
        if best is None or copies > best[0]:
            best = (copies, packets)
    return best[1] if best else []


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
    steps = [(a, b - a) for a, b in zip(starts, starts[1:])]
    windows, attached = [], None
    for p in sorted((p for p in packets if p.HasField("recording")), key=lambda p: p.timestamp_ns):
        reason = p.recording.reason
        if reason in ("attached", "check") and attached is None:
            attached = p.timestamp_ns
        elif p.recording.detached and attached is not None:
            windows.append((attached, p.timestamp_ns))
            attached = None
    # Windows that hold loop steps (the start's check comes before the loop).
    loop_windows = [(a, d) for a, d in windows if any(a <= t <= d for t, _ in steps)]
    after_ns = int(after_s * 1e9)
    side_ns = 1_500_000_000

    def median_in(lo, hi):
        xs = [dt for t, dt in steps if lo <= t < hi]
        return statistics.median(xs) if xs else None

    out = {"run": run, "steps": len(steps),
           "median_step_ms": statistics.median(dt for _, dt in steps) / 1e6, "windows": []}
    for a, d in loop_windows:
        sides = [m for m in (median_in(a - side_ns, a), median_in(d + after_ns, d + after_ns + side_ns))
                 if m is not None]
        if not sides:
            out["windows"].append({"length_ms": (d - a) / 1e6, "problem": "no steps around it"})
            continue
        base = sum(sides) / len(sides)
        inside = [dt for t, dt in steps if a <= t <= d]
        later = [dt for t, dt in steps if d < t <= d + after_ns]
        out["windows"].append({
            "length_ms": (d - a) / 1e6,
            "baseline_step_ms": base / 1e6,
            "baseline_sides": len(sides),
            "steps_in": len(inside),
            "step_in_ms": statistics.median(inside) / 1e6 if inside else None,
            "excess_in_ms": sum(dt - base for dt in inside) / 1e6,
            "steps_after": len(later),
            "step_after_ms": statistics.median(later) / 1e6 if later else None,
            "excess_after_ms": sum(dt - base for dt in later) / 1e6,
        })
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
        line = "%s: %d steps, median %.2f ms" % (name, r["steps"], r["median_step_ms"])
        for w in r["windows"]:
            if "problem" in w:
                line += "; window %.0f ms: %s" % (w["length_ms"], w["problem"])
                continue
            line += ("; window %.0f ms (baseline %.2f ms, %d side%s): %d steps at %.2f ms "
                     "(%+.1f ms), %d after at %.2f ms (%+.1f ms)") % (
                w["length_ms"], w["baseline_step_ms"], w["baseline_sides"],
                "" if w["baseline_sides"] == 1 else "s", w["steps_in"], w["step_in_ms"] or 0,
                w["excess_in_ms"], w["steps_after"], w["step_after_ms"] or 0,
                w["excess_after_ms"])
        if "cupti_switch_ms" in r:
            line += "; CUPTI switches %d, %.1f ms" % (r["cupti_switches"], r["cupti_switch_ms"])
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
