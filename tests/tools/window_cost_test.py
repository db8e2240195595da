#!/usr/bin/env python3
"""tools/bench/window_cost.py on a trace recorded on the H100 (2026-12-05,
eighteenth session, call 4: tools/bench/cupti_overhead.py --variant many
under pinscope's defaults, tests/data/h100/cost/many_window): the loop's
steps, its one device-record window, and what the steps in it and after it
paid over the steps around it. Exact: the trace is fixed.

    window_cost_test.py TOOLS_DIR DATA_DIR PB2_DIR
"""
import json
import subprocess
import sys

tools, data, pb2 = sys.argv[1:4]
out = subprocess.run([sys.executable, tools + "/bench/window_cost.py", "--json", "--pb2-dir", pb2,
                      data + "/h100/cost/many_window"], capture_output=True, text=True)
assert out.returncode == 0, out.stderr
r = json.loads(out.stdout)
fails = []


def expect(what, got, want, tol=0.0):
    if (abs(got - want) > tol) if isinstance(want, float) else got != want:
        fails.append("%s: %r, expected %r" % (what, got, want))


# 30 warm-up and 5 x 30 timed steps, one x copy each: 149 intervals between
# the loop's copies of that stack (the model's 194 weight copies at start
# come from another stack, in a burst of 20 ms). The same figures as the
# report's (analyzer/analyses/window_cost.h; RecordedCost in
# tests/analyzer/model/pipeline_traces_test.cc).
expect("intervals", r["intervals"], 149)
expect("windows", len(r["windows"]), 1)
w = r["windows"][0]
expect("window length", w["length_ms"], 265.249, 0.001)
expect("baseline sides", w["baseline_sides"], 2)
expect("baseline interval", w["baseline_interval_ms"], 25.268, 0.001)
expect("intervals in the window", w["intervals_in"], 8)
expect("their time", w["time_in_ms"], 264.094, 0.001)
expect("excess in", w["excess_in_ms"], 61.954, 0.001)
expect("intervals within 1.5 s after", w["intervals_after"], 48)
expect("their time after", w["time_after_ms"], 1473.619, 0.001)
expect("excess after", w["excess_after_ms"], 260.775, 0.001)
expect("no pause", w["paused"], False)
# The turns of tools/bench/turns.py (H100, nineteenth session, call 18): the
# pinscope side's loop waits for the other sides between its turns.
out = subprocess.run([sys.executable, tools + "/bench/window_cost.py", "--json", "--pb2-dir", pb2,
                      data + "/h100/cost/turns_mlp12"], capture_output=True, text=True)
assert out.returncode == 0, out.stderr
t = json.loads(out.stdout)["windows"][0]
expect("turns: paused", t["paused"], True)
expect("turns: longest interval", t["longest_interval_ms"], 693.5, 0.05)
# The start (with its check window), the check's detach, the window's
# attach and detach: 4 switches on the job's thread, 33.2 ms.
expect("switches", r["cupti_switches"], 4)
expect("switch time", r["cupti_switch_ms"], 33.203, 0.001)
expect("stack cache hits", r["stack_cache_hits"], 581)
# --after 0.5: fewer steps after, the same window.
out = subprocess.run([sys.executable, tools + "/bench/window_cost.py", "--json", "--after", "0.5",
                      "--pb2-dir", pb2, data + "/h100/cost/many_window"],
                     capture_output=True, text=True)
w2 = json.loads(out.stdout)["windows"][0]
expect("--after 0.5: intervals in", w2["intervals_in"], 8)
if not 0 < w2["intervals_after"] < w["intervals_after"]:
    fails.append("--after 0.5: %d intervals after, expected between 0 and %d" %
                 (w2["intervals_after"], w["intervals_after"]))
if fails:
    print("\n".join(fails))
    sys.exit(1)
print("window_cost: all expected values")
