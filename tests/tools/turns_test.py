#!/usr/bin/env python3
"""tools/bench/turns.py (issue 16): the arithmetic on planted turns, exact
(kinds, the steady pace, paired sides and --pool); then the real thing on
the CPU: a no-tool side and a side under `pinscope run` (the real shim)
taking turns on mlp12's loop at width 64, in the order A B, B A, ...; a
paired side (recording paused and resumed through the shim's
pinscope_recording_pause); a side that cannot start, and a paired side
without the shim, reported as such.

    turns_test.py TOOLS_DIR PINSCOPE_CLI
"""
import json
import os
import subprocess
import sys
import tempfile

tools, pinscope = sys.argv[1:3]
sys.path.insert(0, os.path.join(tools, "bench"))
import turns  # noqa: E402

fails = []


def tiny_run(sides, ps, seconds, out):
    """turns.py on the tiny job on the CPU with these sides; its result."""
    argv = [sys.executable, os.path.join(tools, "bench", "turns.py"), "--job", "tiny",
            "--device", "cpu", "--ps", ps, "--seconds", str(seconds), "--out", out]
    for side in sides:
        argv += ["--side", side]
    return subprocess.run(argv, capture_output=True, text=True, timeout=240)


def expect(what, got, want, tol=0.0):
    bad = (abs(got - want) > tol) if isinstance(want, float) else got != want
    if bad:
        fails.append("%s: %r, expected %r" % (what, got, want))


# 1. Planted: pinscope's turns 3% longer in every round, and a last round
# that only the reference finished (the run's end): left out.
planted = []
for r in range(10):
    planted += [(r, "plain", 100_000_000 + r * 1000, 25), (r, "pinscope", 103_000_000 + r * 1030, 25)]
planted.append((10, "plain", 100_000_000, 25))
s = turns.summarize(["plain", "pinscope"], planted)
expect("rounds", s["rounds"], 10)
expect("reference steps", s["sides"]["plain"]["steps"], 250)
expect("reference ms a step", s["sides"]["plain"]["ms_per_step"], 4.00018, 1e-9)
p = s["sides"]["pinscope"]
expect("overhead", p["overhead"], 0.03, 1e-12)
expect("interval low", p["overhead_ci95"][0], 0.03, 1e-12)
expect("interval high", p["overhead_ci95"][1], 0.03, 1e-12)
expect("median round", p["median_round_overhead"], 0.03, 1e-12)
# One slow round of ten (a window: +50% in it): the total says +5%, the
# median round says nothing, and the interval holds the total.
slow = [(r, "plain", 100_000_000, 25) for r in range(10)] + [
    (r, "pinscope", 150_000_000 if r == 4 else 100_000_000, 25) for r in range(10)]
q = turns.summarize(["plain", "pinscope"], slow)["sides"]["pinscope"]
expect("one slow round: overhead", q["overhead"], 0.05, 1e-12)
expect("one slow round: median round", q["median_round_overhead"], 0.0, 1e-12)
if not q["overhead_ci95"][0] <= 0.05 <= q["overhead_ci95"][1] or q["overhead_ci95"][1] <= 0.05:
    fails.append("one slow round: interval %r should hold 0.05 and reach above it" % q["overhead_ci95"])

# Two sides of each kind: pooled by kind (plain 100 and 104 ms, pinscope
# 103 and 105: 102 against 104, +1.9608%).
four = []
for r in range(4):
    four += [(r, "plain", 100_000_000, 25), (r, "plain_b", 104_000_000, 25),
             (r, "pinscope", 103_000_000, 25), (r, "pinscope_b", 105_000_000, 25)]
k = turns.summarize(["plain", "plain_b", "pinscope", "pinscope_b"], four,
                    kinds={"plain": "plain", "plain_b": "plain", "pinscope": "pinscope",
                           "pinscope_b": "pinscope"})
expect("kinds: plain sides", k["kinds"]["plain"]["sides"], 2)
expect("kinds: plain ms a step", k["kinds"]["plain"]["ms_per_step"], 4.08, 1e-12)
expect("kinds: pinscope against plain", k["kinds"]["pinscope"]["overhead"], 104 / 102 - 1, 1e-12)
expect("kinds: plain's spread", k["kinds"]["plain"]["spread"], 0.04, 1e-12)
# The kinds' interval resamples the processes: from 103/104 to 105/100.
lo, hi = k["kinds"]["pinscope"]["overhead_ci95"]
if not (103 / 104 - 1 - 1e-12 <= lo < 104 / 102 - 1 < hi <= 105 / 100 - 1 + 1e-12):
    fails.append("kinds: interval [%r, %r] not within [103/104, 105/100] around 104/102" % (lo, hi))
expect("kinds: plain_b alone", k["sides"]["plain_b"]["overhead"], 0.04, 1e-12)

# The steady pace and the one-time excess: the same four sides over five
# rounds, each pinscope side 50 ms slower in round 2 (a window). Steady:
# the median turns, 104/102 as above; the excess 50 ms a process, and
# nothing for plain; the total holds both.
five = []
for r in range(5):
    w = 50_000_000 if r == 2 else 0
    five += [(r, "plain", 100_000_000, 25), (r, "plain_b", 104_000_000, 25),
             (r, "pinscope", 103_000_000 + w, 25), (r, "pinscope_b", 105_000_000 + w, 25)]
f = turns.summarize(["plain", "plain_b", "pinscope", "pinscope_b"], five,
                    kinds={"plain": "plain", "plain_b": "plain", "pinscope": "pinscope",
                           "pinscope_b": "pinscope"})
expect("steady: a side's pace", f["sides"]["pinscope_b"]["steady_ms_per_step"], 4.2, 1e-12)
expect("steady: a side's excess", f["sides"]["pinscope_b"]["excess_ms"], 50.0, 1e-9)
expect("steady: plain's excess", f["sides"]["plain"]["excess_ms"], 0.0, 1e-9)
expect("steady: kinds", f["kinds"]["pinscope"]["steady_overhead"], 104 / 102 - 1, 1e-12)
expect("steady: the kind's excess", f["kinds"]["pinscope"]["excess_ms"], 50.0, 1e-9)
expect("steady: the total", f["kinds"]["pinscope"]["overhead"], (5 * 104 + 50) / (5 * 102) - 1, 1e-12)
lo, hi = f["kinds"]["pinscope"]["steady_overhead_ci95"]
if not (103 / 104 - 1 - 1e-12 <= lo < 104 / 102 - 1 < hi <= 105 / 100 - 1 + 1e-12):
    fails.append("steady: interval [%r, %r] not within [103/104, 105/100]" % (lo, hi))

# Paired sides: each process's turns with recording against its own turns
# without, in the same rounds. Process a: 100 off, 101 on (+1%); process b:
# 110 off, 112.2 on (+2%), and one round of b's on turns 50 ms slower (a
# window): in b's total, not in its steady pace. Pooled: the processes' mean.
paired = []
for r in range(20):
    paired += [(r, "plain", 100_000_000, 25), (r, "a.off", 100_000_000, 25),
               (r, "a.on", 101_000_000, 25), (r, "b.off", 110_000_000, 25),
               (r, "b.on", 112_200_000 + (50_000_000 if r == 3 else 0), 25)]
pz = turns.summarize(["plain", "a.off", "a.on", "b.off", "b.on"], paired,
                     kinds={"plain": "plain", "a.off": "paired.off", "a.on": "paired.on",
                            "b.off": "paired.off", "b.on": "paired.on"},
                     pairs={"a": ("a.off", "a.on"), "b": ("b.off", "b.on")})["paired"]
expect("paired: processes", pz["processes"], 2)
expect("paired: a", pz["each"]["a"]["overhead"], 0.01, 1e-12)
expect("paired: a steady", pz["each"]["a"]["steady_overhead"], 0.01, 1e-12)
expect("paired: b", pz["each"]["b"]["overhead"], (20 * 112.2 + 50) / (20 * 110) - 1, 1e-12)
expect("paired: b steady", pz["each"]["b"]["steady_overhead"], 0.02, 1e-12)
expect("paired: b median round", pz["each"]["b"]["median_round_overhead"], 0.02, 1e-12)
expect("paired: b off ms a step", pz["each"]["b"]["off_ms_per_step"], 4.4, 1e-12)
expect("paired: pooled steady", pz["steady_overhead"], 0.015, 1e-12)
lo, hi = pz["steady_overhead_ci95"]
if not (0.01 - 1e-12 <= lo < 0.015 < hi <= 0.02 + 1e-12):
    fails.append("paired: steady interval [%r, %r] not within [1%%, 2%%] around 1.5%%" % (lo, hi))
expect("paired: slots", turns.slots_of(["plain", "paired:PINSCOPE_CUPTI=0@x"])[0],
       ["plain", "paired_PINSCOPE_CUPTI_0_x.off", "paired_PINSCOPE_CUPTI_0_x.on"])

# Runs of one paired side each, pooled (--pool): run a +1% in every round,
# run b +3%: their mean +2%, the interval between them; a file with two
# paired sides is refused by name.
pool_dir = tempfile.mkdtemp(prefix="turns-pool-")
pool_files = []
for name, extra in (("a", 0.01), ("b", 0.03)):
    path = os.path.join(pool_dir, name + ".jsonl")
    with open(path, "w") as fh:
        for r in range(30):
            fh.write(json.dumps({"round": r, "side": "paired.off", "ns": 100_000_000, "steps": 5}) + "\n")
            fh.write(json.dumps({"round": r, "side": "paired.on", "ns": int(1e8 * (1 + extra)),
                                 "steps": 5, "switch_ns": 20_000}) + "\n")
    pool_files.append(path)
pooled = turns.pool_paired(pool_files)
expect("pool: runs", pooled["runs"], 2)
expect("pool: rounds", pooled["rounds"], [30, 30])
expect("pool: mean", pooled["overhead"], 0.02, 1e-9)
expect("pool: each", [round(x, 9) for x in pooled["each"]], [0.01, 0.03])
lo, hi = pooled["overhead_ci95"]
if not (0.01 - 1e-9 <= lo <= 0.02 <= hi <= 0.03 + 1e-9):
    fails.append("pool: interval [%r, %r] not between the runs around 2%%" % (lo, hi))

# A device-record window's rounds taken apart (--pool with the run's trace
# beside turns.jsonl): turns 100 ms apart, each run +1% in every round and
# 20 ms more in the window's round. Run c's window begins in round 10's on
# turn; run d's in round 7's off turn and ends in the pause that begins
# round 8 (a turn holds its pause call): both rounds are the window's. The
# start's check (at 0-1 ms) comes before the turns.
win_dir = tempfile.mkdtemp(prefix="turns-windows-")
win_files, win_of = [], {}
for name, hit, window in (("c", {10}, (11_350_000_000, 11_380_000_000)),
                          ("d", {7, 8}, (8_450_000_000, 9_000_000_100))):
    os.makedirs(os.path.join(win_dir, name, "paired.run"))
    path = os.path.join(win_dir, name, "turns.jsonl")
    with open(path, "w") as fh:
        for r in range(30):
            on = 1e8 * 1.01 + (20e6 if r in hit else 0)
            if r in hit and len(hit) == 2:
                on = 1e8 * 1.01 + 10e6  # 20 ms over the two rounds
            turns_of = [("paired.off", 100_000_000), ("paired.on", int(on))]
            for k, (side, ns) in enumerate(turns_of if r % 2 else turns_of[::-1]):
                row = {"round": r, "side": side, "ns": ns, "steps": 5,
                       "start_ns": (r + 1) * 1_000_000_000 + k * 500_000_000}
                fh.write(json.dumps(row) + "\n")
    win_files.append(path)
    win_of[os.path.join(win_dir, name, "paired.run")] = [(0, 1_000_000), window]
for path, expected in zip(win_files, ({10}, {7, 8})):
    expect("window rounds: " + path, turns.window_rounds(
        [json.loads(x) for x in open(path)], win_of[os.path.dirname(path) + "/paired.run"]),
        (expected, 1))
real_windows = turns.device_windows
turns.device_windows = lambda run, pb2_dir=None: win_of[run]
try:
    wp = turns.pool_paired(win_files, period_s=120)
finally:
    turns.device_windows = real_windows
expect("windows: rounds apart", wp["window_rounds"], [1, 2])
expect("windows: outside", wp["outside"], 0.01, 1e-9)
expect("windows: outside each", [round(x, 9) for x in wp["outside_each"]], [0.01, 0.01])
expect("windows: excess", [round(x, 6) for x in wp["window_excess_ms"]], [20.0, 20.0])
expect("windows: at the period", wp["at_period"], 0.01 + 0.020 / 120, 1e-9)
if not wp["overhead"] > wp["outside"]:
    fails.append("windows: the total %r holds the windows, above %r" % (wp["overhead"], wp["outside"]))
# Without start times (runs before 2026-12-06), nothing is taken apart.
expect("windows: none without starts", "outside" in turns.pool_paired(pool_files), False)

two = os.path.join(pool_dir, "two.jsonl")
with open(two, "w") as fh:
    for side in ("x.off", "x.on", "y.off", "y.on"):
        fh.write(json.dumps({"round": 0, "side": side, "ns": 1, "steps": 1}) + "\n")
r = subprocess.run([sys.executable, os.path.join(tools, "bench", "turns.py"), "--pool", two],
                   capture_output=True, text=True)
expect("pool, two paired sides: exit", r.returncode, 1)
if "2 paired sides" not in r.stderr:
    fails.append("pool, two paired sides: %r" % r.stderr)

# A recorded run summarized again (--from): the same figures; a side the
# list does not name is an error that names it.
rec = tempfile.mkdtemp(prefix="turns-from-")
with open(os.path.join(rec, "turns.jsonl"), "w") as fh:
    for t in five:
        fh.write(json.dumps(dict(zip(("round", "side", "ns", "steps"), t))) + "\n")
r = subprocess.run([sys.executable, os.path.join(tools, "bench", "turns.py"), "--from",
                    os.path.join(rec, "turns.jsonl"), "--side", "plain", "--side", "plain@b",
                    "--side", "pinscope", "--side", "pinscope@b"], capture_output=True, text=True)
if r.returncode != 0:
    fails.append("--from: exit %d: %s" % (r.returncode, r.stderr[-500:]))
else:
    again = json.loads(r.stdout.strip().splitlines()[-1])
    expect("--from: steady", again["kinds"]["pinscope"]["steady_overhead"], 104 / 102 - 1, 1e-12)
r = subprocess.run([sys.executable, os.path.join(tools, "bench", "turns.py"), "--from",
                    os.path.join(rec, "turns.jsonl"), "--side", "plain", "--side", "pinscope"],
                   capture_output=True, text=True)
expect("--from, a side left out: exit", r.returncode, 1)
if "pinscope_b, plain_b" not in r.stderr:
    fails.append("--from, a side left out: %r does not name them" % r.stderr)

# 2. The real thing on the CPU, 3 s of turns.
out = tempfile.mkdtemp(prefix="turns-test-")
r = tiny_run(["plain", "pinscope"], pinscope, 3, out)
if r.returncode != 0:
    fails.append("tiny run: exit %d\n%s" % (r.returncode, r.stderr[-2000:]))
else:
    res = json.loads(r.stdout.strip().splitlines()[-1])
    expect("tiny: exits", res["exit"], {"plain": 0, "pinscope": 0})
    expect("tiny: failed", res["failed"], None)
    rows = [json.loads(line) for line in open(os.path.join(out, "turns.jsonl"))]
    rounds = res["rounds"]
    if rounds < 3:
        fails.append("tiny: %d rounds in 3 s, expected 3 or more" % rounds)
    # Rounds in pairs, the second the first reversed (A B, B A or B A, A B);
    # every turn 10 steps (the tiny job's turn).
    order = {}
    for row in rows:
        order.setdefault(row["round"], []).append(row["side"])
        expect("round %d: steps" % row["round"], row["steps"], 10)
        if row["ns"] <= 0:
            fails.append("round %d: %d ns" % (row["round"], row["ns"]))
    for r, sides in order.items():
        if sorted(sides) != ["pinscope", "plain"]:
            fails.append("round %d: sides %r" % (r, sides))
        if r % 2 and sides != order[r - 1][::-1]:
            fails.append("round %d: %r, not round %d reversed (%r)" % (r, sides, r - 1, order[r - 1]))
    if len({tuple(v) for v in order.values()}) != 2:
        fails.append("rounds: orders %r, expected both" % {tuple(v) for v in order.values()})
    expect("tiny: steps on each side", res["sides"]["pinscope"]["steps"], 10 * rounds)
    expect("tiny: steps on the reference", res["sides"]["plain"]["steps"], 10 * rounds)
    # The side ran under `pinscope run` (on the CPU it makes no CUDA call,
    # so no trace is kept, and the CLI says so).
    log = open(os.path.join(out, "pinscope.log")).read()
    if "pinscope: recording" not in log or os.path.join(out, "pinscope.run") not in log:
        fails.append("tiny: the pinscope side's log does not show pinscope run: %r" % log[:500])

# 2b. A paired side on the CPU: one process under `pinscope run` whose
# turns alternate without recording and with it (pinscope_recording_pause,
# through ctypes); the pause and resume calls' time is in its "on" turns.
out = tempfile.mkdtemp(prefix="turns-test-")
r = tiny_run(["plain", "paired"], pinscope, 3, out)
if r.returncode != 0:
    fails.append("paired run: exit %d\n%s" % (r.returncode, r.stderr[-2000:]))
else:
    res = json.loads(r.stdout.strip().splitlines()[-1])
    expect("paired run: exits", res["exit"], {"plain": 0, "paired": 0})
    expect("paired run: slots", sorted(res["sides"]), ["paired.off", "paired.on", "plain"])
    expect("paired run: one process", res["paired"]["processes"], 1)
    rows = [json.loads(line) for line in open(os.path.join(out, "turns.jsonl"))]
    on = [row for row in rows if row["side"] == "paired.on"]
    off = [row for row in rows if row["side"] == "paired.off"]
    expect("paired run: as many on turns as off", len(on), len(off))
    if not on or not all(row.get("switch_ns", 0) > 0 for row in on):
        fails.append("paired run: on turns without their switches: %r" % on[:3])
    if any("switch_ns" in row for row in off):
        fails.append("paired run: an off turn holds a switch")
    # Every paired turn carries its start on the trace's clock, in the
    # order the turns ran, each after the last one's end.
    timed = sorted(rows, key=lambda row: row.get("start_ns", 0))
    # ... and its stepping thread's CPU time and switches, its process's CPU.
    if not all(row.get("cpu_ns", 0) > 0 and row.get("proc_cpu_ns", 0) > 0 and
               row.get("vcsw", -1) >= 0 and row.get("ivcsw", -1) >= 0 for row in on + off):
        fails.append("paired run: a turn without its usage: %r" % rows[:3])
    if not all("start_ns" in row for row in on + off):
        fails.append("paired run: a turn without its start: %r" % rows[:3])
    elif any(b["start_ns"] < a["start_ns"] + a["ns"] - a.get("switch_ns", 0)
             for a, b in zip(timed, timed[1:]) if a["side"].startswith("paired")
             and b["side"].startswith("paired")):
        fails.append("paired run: turns that overlap: %r" % timed[:4])
# A paired side whose process has no shim (its "pinscope" runs the command
# as it is): said, exit 1.
out = tempfile.mkdtemp(prefix="turns-test-")
bare = os.path.join(out, "bare-run")
with open(bare, "w") as fh:
    fh.write('#!/bin/sh\nwhile [ "$1" != "--" ]; do shift; done\nshift\nexec "$@"\n')
os.chmod(bare, 0o755)
r = tiny_run(["plain", "paired"], bare, 2, out)
expect("paired without the shim: exit", r.returncode, 1)
log = open(os.path.join(out, "paired.log")).read()
if "without pinscope_recording_pause" not in log:
    fails.append("paired without the shim: its log says %r" % log[-300:])

# 3. A side that cannot start (its "pinscope" is /bin/false): said, exit 1,
# and the other side stopped (it exits 0).
out = tempfile.mkdtemp(prefix="turns-test-")
r = tiny_run(["plain", "pinscope"], "/bin/false", 3, out)
expect("cannot start: exit", r.returncode, 1)
res = json.loads(r.stdout.strip().splitlines()[-1])
expect("cannot start: the other side", res["exit"].get("plain"), 0)
if not (res["failed"] or "").startswith("pinscope never started"):
    fails.append("cannot start: failed says %r" % res["failed"])
# 4. A side spec it does not know: named.
r = subprocess.run([sys.executable, os.path.join(tools, "bench", "turns.py"), "--side", "plane"],
                   capture_output=True, text=True, timeout=60)
expect("unknown side: exit", r.returncode, 1)
if "'plane'" not in r.stderr:
    fails.append("unknown side: stderr %r does not name it" % r.stderr)

# 5. A side of the job with variables only (`plain:ENV=V,...`, no `pinscope
# run`): the preloaded shim, told where to write, makes that folder; the
# spec holds a path, and its name is still short and its own.
shim = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(pinscope))), "lib",
                    "libpinscope.so")
out = tempfile.mkdtemp(prefix="turns-test-")
where = os.path.join(out, "preloaded")
spec = "plain:LD_PRELOAD=%s,PINSCOPE_OUT=%s@e" % (shim, where)
r = subprocess.run([sys.executable, os.path.join(tools, "bench", "turns.py"), "--job", "tiny",
                    "--device", "cpu", "--side", "plain", "--side", spec, "--seconds", "2",
                    "--out", out], capture_output=True, text=True, timeout=240)
if r.returncode != 0:
    fails.append("plain:ENV: exit %d\n%s" % (r.returncode, r.stderr[-2000:]))
else:
    res = json.loads(r.stdout.strip().splitlines()[-1])
    name = turns.side_name(spec)
    expect("plain:ENV: exits", res["exit"], {"plain": 0, name: 0})
    if not os.path.isdir(where):
        fails.append("plain:ENV: %s not made: the side did not get its variables" % where)
expect("a long spec's name: length", len(turns.side_name(spec)) <= 64, True)
expect("a long spec's name: its label", turns.side_name(spec).endswith("_e"), True)
expect("two long specs: two names", turns.side_name(spec) != turns.side_name(spec.replace(
    "PINSCOPE_OUT=", "PINSCOPE_OUT=/x")), True)
expect("a short spec's name", turns.side_name("pinscope:PINSCOPE_CUPTI=0@2"),
       "pinscope_PINSCOPE_CUPTI_0_2")

if fails:
    print("\n".join(fails))
    sys.exit(1)
print("turns: all checks passed")
