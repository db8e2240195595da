#!/usr/bin/env python3
"""pinscope's cost on a training loop, measured in turns (issue 16).

    tools/bench/turns.py --job mlp12 --side plain --side pinscope [--side profiler]
        [--seconds 90] [--turn-steps N] [--warmup N] [--ps PINSCOPE] [--out DIR]
        [--taskset CPUS] [--main-cpu N] [--no-aslr] [--hashseed N] [--seed N]
        [--device cuda]

Why turns: on the GPU machines a launch-bound loop's step drifts by 5-25%
between runs and over seconds within one (docs/benchmarks.md, eighteenth
session), so five runs with the tool and five without cannot resolve a
cost of 1%. Here every side is a process of its own running the same job
(no tool; under `pinscope run`; under torch.profiler), all started
together, and they take turns on the GPU: one runs N steps while the
others wait on a pipe, then the next. A round is one turn of each side;
rounds come in pairs, a random order and then its reverse (A B, B A for
two sides), so that a drift over a pair cancels and every side takes
every place alike. Adjacent turns ran on the same machine
state; the cost is the ratio of a side's total turn time to the first
side's, over hundreds of rounds, with a 95% interval from resampling the
rounds.

What lands in the turns: everything the tool does on the job's threads
while it steps (hooks, call stacks, the device-record window that opens
once the loop shows and what follows it). What does not: start-up and exit
(as for the job itself), and the tool's own threads' work while the side
waits (the report's own-cost section states that CPU time). A window every
PINSCOPE_CUPTI_PERIOD_S counts wall time, waiting included, so a side that
steps half the time gets windows twice as often per step as a job that
steps all the time: the measure errs against pinscope.

Side specs: `plain`, or `plain:ENV=V,ENV2=V2` (the job with those
variables only, e.g. `plain:LD_PRELOAD=/x/libpinscope.so,PINSCOPE_DISABLE=1`
for what the preloaded shim costs when it does nothing); `pinscope` or
`pinscope:ENV=V,ENV2=V2` (run under `pinscope run --no-report -o
OUT/NAME.run`); `profiler` (torch.profiler,
CPU and CUDA activities, on from before the first turn; the side exits
without processing its events, which are not timed); each may end in
`@LABEL`, for a second side of the same kind (`plain@again`: the spread of
A against A, which the 95% interval of the rounds does not hold: two
processes of the same job differed by 3-7% on the H100, docs/benchmarks.md).
The first side is the reference.

Jobs: `mlp12` and `many` (tools/bench/cupti_overhead.py's loops: 156 and
2,000+ kernels a step), `hf` (tests/gpu/hf_trainer_job.py's Trainer: a
small BERT, batch 64, 4 DataLoader workers; its turns end in a
TrainerCallback), `tiny` (mlp12's shape at width 64, for a run on the CPU).

Prints one JSON line (per side: ms a step over its turns; against the
reference: the ratio of total turn time, its 95% interval, the median of
per-round ratios; where a kind has several sides, `kinds`: the kinds'
mean ms a step, their ratio and an interval that resamples the processes;
the same for the steady pace, each side's median turn, and the one-time
excess above it against the reference kind's) and writes OUT/turns.jsonl
(every turn). Exit 1 when a side failed. `--from OUT/turns.jsonl` with the
run's --side list summarizes a recorded run again.

Paired sides (`paired` or `paired:ENV=V,...`, twenty-fifth session): one
process under `pinscope run` with two slots in every round, NAME.off and
NAME.on, in the rounds' random order; before each turn it pauses or
resumes pinscope's recording (pinscope_recording_pause, through ctypes:
every hook passes through as when passive, the Python hook calls the
DataLoader straight, a device-record window open at the pause ends), and
the time of those calls goes to its on turn. Its on turns against its off
turns hold no spread between processes (`paired` in the JSON: each
process, and the processes pooled). Alone (`--side paired`), the process
steps all the time, as a job does. What a paired side does not hold:
pinscope's mere presence (the malloc family's pass-through and the
interposed symbols, measured at nothing on the H100, docs/benchmarks.md),
the DataLoader workers' recording (other processes, not paused), and the
tool's threads while paused (the flusher skips its tick). A paired turn
also reports its start on the trace's clock and its stepping thread's CPU
time and context switches and its process's CPU time (turns.jsonl:
start_ns, cpu_ns, vcsw, ivcsw, proc_cpu_ns). `--pool A/turns.jsonl
B/turns.jsonl ...` pools runs of one paired side each; where a run's trace
is beside its turns.jsonl it also takes apart the rounds that a
device-record window fell in and counts one window every --period-s
(pool_paired), and gives a step's wall and CPU time off and on.
"""
import argparse
import hashlib
import inspect
import json
import os
import random
import re
import select
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TURN_STEPS = {"mlp12": 25, "many": 4, "hf": 5, "tiny": 10}
WARMUP = {"mlp12": 20, "many": 5, "hf": 5, "tiny": 5}


# ---- the side: one process running the job, a turn at a time ----------------

# What a paired turn reports of its stepping thread and its process besides
# its time (Turns._usage): thread CPU ns, process CPU ns, voluntary and
# involuntary context switches of the thread.
USAGE_KEYS = ("cpu_ns", "proc_cpu_ns", "vcsw", "ivcsw")


class Turns:
    """Counts steps and, every turn_steps after warmup, reports its turn's
    time and waits for the next: after_step() says whether to stop."""

    def __init__(self, go, done, turn_steps, warmup, sync, main_cpu=None, pause=None):
        self.go, self.done, self.main_cpu = go, done, main_cpu
        self.turn_steps, self.warmup, self.sync = turn_steps, warmup, sync
        self.n, self.t0 = 0, 0
        # A paired side: pinscope's pinscope_recording_pause, called before
        # each turn as the driver says ("go off", "go on"); its own time is
        # reported beside the turn's (the driver counts it with recording).
        self.pause, self.switch_ns = pause, 0

    def _say(self, text):
        os.write(self.done, (text + "\n").encode())

    def _wait(self):
        line = self.go.readline()
        if not line or line.strip() == "stop":
            return True
        mode = line.split()[1:]
        self.switch_ns = 0
        self.t0_mono = time.monotonic_ns()  # the turn's start, its pause call's included
        if mode:
            if self.pause is None:
                sys.exit("turns.py: a turn %r for a side that is not paired" % line.strip())
            t = time.perf_counter_ns()
            rc = self.pause(1 if mode[0] == "off" else 0)
            self.switch_ns = time.perf_counter_ns() - t
            if rc < 0:
                sys.exit("turns.py: pinscope_recording_pause(%s) = %d: this process does not "
                         "record" % (mode[0], rc))
        self.t0 = time.perf_counter_ns()
        if self.pause:
            self.usage0 = self._usage()
        return False

    @staticmethod
    def _usage():
        # A paired turn's stepping thread: its CPU time and its voluntary
        # (a wait: the GIL, a lock, I/O) and involuntary (preempted) context
        # switches; and the CPU time of the whole process (its other threads:
        # the pin thread, pinscope's flusher, CUDA's).
        import resource
        r = resource.getrusage(resource.RUSAGE_THREAD)
        return (time.thread_time_ns(), time.process_time_ns(), r.ru_nvcsw, r.ru_nivcsw)

    def after_step(self):
        self.n += 1
        if self.n < self.warmup or (self.n > self.warmup and
                                    (self.n - self.warmup) % self.turn_steps):
            return False
        self.sync()  # only where a turn ends: the steps between stay asynchronous
        if self.n == self.warmup:
            if self.main_cpu is not None:
                # This thread only (threads and workers made before keep the
                # process's CPUs): every side's stepping thread on one core.
                os.sched_setaffinity(0, {self.main_cpu})
            self._say("ready")
            return self._wait()
        ns = time.perf_counter_ns() - self.t0
        if self.pause:
            used = [b - a for a, b in zip(self.usage0, self._usage())]
            self._say(" ".join(str(x) for x in [ns, self.switch_ns, self.t0_mono] + used))
        else:
            self._say(str(ns))
        return self._wait()


def run_hf(turns, device):
    from transformers import TrainerCallback, Trainer, TrainingArguments
    sys.path.insert(0, os.path.join(REPO, "tests", "gpu"))
    from hf_trainer_job import Tokens, make_model

    class Callback(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if turns.after_step():
                control.should_training_stop = True

    config, model = make_model()
    extra = {"use_cpu": True} if device == "cpu" else {}
    # Workers kept across epochs (transformers 4.37 on), so that an epoch's
    # start is not a pause in some turn of one side.
    if "dataloader_persistent_workers" in inspect.signature(TrainingArguments.__init__).parameters:
        extra["dataloader_persistent_workers"] = True
    targs = TrainingArguments(output_dir=os.environ.get("HF_OUT", tempfile.mkdtemp()),
                              per_device_train_batch_size=64, max_steps=10**7,
                              dataloader_num_workers=4, logging_strategy="no",
                              save_strategy="no", report_to=[], disable_tqdm=True, seed=0,
                              **extra)
    trainer = Trainer(model=model, args=targs, train_dataset=Tokens(64 * 500, 128, config.vocab_size),
                      callbacks=[Callback()])
    trainer.train()


def side_main(args):
    # The pipes first, so that the driver, which opens them in the same
    # order, waits for no model to be built.
    go = open(args.go, "r")
    done = os.open(args.done, os.O_WRONLY)
    import torch
    dev = torch.device(args.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    pause = None
    if args.paired:
        import ctypes
        try:
            pause = ctypes.CDLL(None).pinscope_recording_pause
        except AttributeError:
            sys.exit("turns.py: a paired side without pinscope_recording_pause in its process "
                     "(not under pinscope run, or a libpinscope.so before it)")
        pause.argtypes, pause.restype = [ctypes.c_int], ctypes.c_int
    turns = Turns(go, done, args.turn_steps, args.warmup, sync, args.main_cpu, pause)
    prof = None
    if args.profiler:
        from torch.profiler import ProfilerActivity, profile
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
        prof = profile(activities=acts)
        prof.__enter__()
    if args.job == "hf":
        run_hf(turns, args.device)
    else:
        sys.path.insert(0, HERE)
        from cupti_overhead import make_step
        variant = "mlp12" if args.job == "tiny" else args.job
        step = make_step(variant, dev, width=64 if args.job == "tiny" else 512)
        while True:
            step()
            if turns.after_step():
                break
    sys.stdout.flush()
    if prof is not None:
        os._exit(0)  # torch.profiler's event processing is not what is timed


# ---- the driver ---------------------------------------------------------------

def side_name(spec):
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", spec)
    if len(name) <= 64:
        return name
    # A long spec (a path in LD_PRELOAD) still makes a file name: its start,
    # a digest of the whole, its @LABEL's end.
    digest = hashlib.sha1(spec.encode()).hexdigest()[:8]
    return "%s_%s_%s" % (name[:40], digest, name[-12:])


def read_line(fd, timeout_s, buf):
    """One line from fd within timeout_s, or None (EOF or timeout)."""
    deadline = time.monotonic() + timeout_s
    while b"\n" not in buf[0]:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 4096)
        if not chunk:
            return None
        buf[0] += chunk
    line, buf[0] = buf[0].split(b"\n", 1)
    return line.decode()


def open_go(path, proc, timeout_s):
    """The write end of a side's go pipe, once the side opened its read end;
    None if the side exited first or took longer than timeout_s (a plain
    blocking open would wait for ever on a side that died at start)."""
    import errno
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as e:
            if e.errno != errno.ENXIO:
                raise
        if proc.poll() is not None or time.monotonic() > deadline:
            return None
        time.sleep(0.01)


def summarize(sides, turns, reference=None, resamples=2000, seed=0, kinds=None, pairs=None):
    """sides: names; turns: (round, side, ns, steps). Per side ms a step;
    against the reference (the first side) the ratio of total turn time over
    the rounds every side completed, its 95% interval (the rounds
    resampled), and the median of per-round ratios. kinds (name -> kind,
    where two sides share one): the sides of a kind pooled, against the
    reference's kind. pairs (process -> (its off side, its on side)): each
    paired process's turns with recording against its own turns without,
    and the processes pooled (`paired`)."""
    reference = reference or sides[0]
    by_round = {}
    for r, s, ns, steps in turns:
        by_round.setdefault(r, {})[s] = (ns, steps)
    rounds = sorted(r for r, d in by_round.items() if len(d) == len(sides))
    out = {"rounds": len(rounds), "sides": {}, "against": reference}
    for s in sides:
        ns = sum(by_round[r][s][0] for r in rounds)
        steps = sum(by_round[r][s][1] for r in rounds)
        out["sides"][s] = {"ms_per_step": ns / steps / 1e6 if steps else None, "steps": steps}
        if rounds:
            # The steady pace: the median turn's, a step. What the side spent
            # above it over all its turns is its excess: the slow turns, of
            # which a tool's one-time work (a device-record window opening
            # and closing) is the part that no-tool sides lack.
            pace = statistics.median(by_round[r][s][0] / by_round[r][s][1] for r in rounds)
            out["sides"][s].update({"steady_ms_per_step": pace / 1e6,
                                    "excess_ms": (ns - pace * steps) / 1e6})
    rng = random.Random(seed)
    for s in sides:
        if s == reference or not rounds:
            continue
        ref = [by_round[r][reference][0] for r in rounds]
        mine = [by_round[r][s][0] for r in rounds]
        total = sum(mine) / sum(ref)
        boot = []
        for _ in range(resamples):
            pick = [rng.randrange(len(rounds)) for _ in rounds]
            boot.append(sum(mine[i] for i in pick) / sum(ref[i] for i in pick))
        boot.sort()
        out["sides"][s].update({
            "overhead": total - 1,
            "overhead_ci95": [boot[int(0.025 * len(boot))] - 1, boot[int(0.975 * len(boot)) - 1] - 1],
            "median_round_overhead": statistics.median(m / f for m, f in zip(mine, ref)) - 1,
        })
    if pairs and rounds:
        out["paired"] = paired_summary(by_round, rounds, pairs, rng, resamples)
    if kinds and rounds and len(set(kinds.values())) < len(sides):
        # Every side ran the same steps (the complete rounds): a kind's ms a
        # step is the mean of its processes'. Two processes of one job
        # differ by more than the rounds' interval of one says (3-7% on the
        # H100): the kinds' interval resamples the processes, each kind's
        # apart, and so holds that spread.
        def interval(ms, ref):
            boot = sorted(
                statistics.fmean(rng.choices(ms, k=len(ms))) /
                statistics.fmean(rng.choices(ref, k=len(ref))) - 1 for _ in range(resamples))
            return [boot[int(0.025 * len(boot))], boot[int(0.975 * len(boot)) - 1]]

        per, steady, excess = {}, {}, {}
        for s in sides:
            per.setdefault(kinds[s], []).append(out["sides"][s]["ms_per_step"])
            steady.setdefault(kinds[s], []).append(out["sides"][s]["steady_ms_per_step"])
            excess.setdefault(kinds[s], []).append(out["sides"][s]["excess_ms"])
        ref_kind = kinds[reference]
        ref_mean = statistics.fmean(per[ref_kind])
        ref_steady = statistics.fmean(steady[ref_kind])
        out["kinds"] = {}
        for k, ms in per.items():
            # steady: the kinds' steady paces (each side's median turn), the
            # cost of a continuous job between its one-time events; excess:
            # the one-time part, ms a process above the steady pace, less
            # the reference kind's (docs/benchmarks.md, "the twentieth
            # session").
            d = {"sides": len(ms), "ms_per_step": statistics.fmean(ms),
                 "overhead": statistics.fmean(ms) / ref_mean - 1,
                 "spread": max(ms) / min(ms) - 1,
                 "steady_ms_per_step": statistics.fmean(steady[k]),
                 "steady_overhead": statistics.fmean(steady[k]) / ref_steady - 1,
                 "excess_ms": statistics.fmean(excess[k]) - statistics.fmean(excess[ref_kind])}
            if k != ref_kind and len(ms) > 1 and len(per[ref_kind]) > 1:
                d["overhead_ci95"] = interval(ms, per[ref_kind])
                d["steady_overhead_ci95"] = interval(steady[k], steady[ref_kind])
            out["kinds"][k] = d
    return out


def paired_summary(by_round, rounds, pairs, rng, resamples):
    """Each paired process's on turns against its off turns in the same
    rounds: one process, so none of the spread between processes. total:
    sum on / sum off; steady: the median on turn over the median off turn
    (a window's turns are not in it); the pooled figures are the processes'
    means, their interval resampling the processes and the rounds."""
    def ratio(on, off, pick):
        return sum(on[i] for i in pick) / sum(off[i] for i in pick)

    per, series = {}, {}
    for proc, (off_side, on_side) in pairs.items():
        off = [by_round[r][off_side][0] / by_round[r][off_side][1] for r in rounds]
        on = [by_round[r][on_side][0] / by_round[r][on_side][1] for r in rounds]
        series[proc] = (on, off)
        everything = range(len(rounds))
        boot = sorted(ratio(on, off, [rng.randrange(len(rounds)) for _ in rounds]) - 1
                      for _ in range(resamples))
        per[proc] = {
            "off_ms_per_step": statistics.fmean(off) / 1e6,
            "on_ms_per_step": statistics.fmean(on) / 1e6,
            "overhead": ratio(on, off, everything) - 1,
            "overhead_ci95": [boot[int(0.025 * len(boot))], boot[int(0.975 * len(boot)) - 1]],
            "median_round_overhead": statistics.median(a / b for a, b in zip(on, off)) - 1,
            "steady_overhead": statistics.median(on) / statistics.median(off) - 1,
        }
    procs = sorted(per)
    boot_total, boot_steady = [], []
    for _ in range(resamples):
        chosen = rng.choices(procs, k=len(procs))
        pick = [rng.randrange(len(rounds)) for _ in rounds]
        boot_total.append(statistics.fmean(ratio(*series[p], pick) - 1 for p in chosen))
        boot_steady.append(statistics.fmean(
            statistics.median(series[p][0][i] for i in pick) /
            statistics.median(series[p][1][i] for i in pick) - 1 for p in chosen))
    boot_total.sort()
    boot_steady.sort()
    lo, hi = int(0.025 * resamples), int(0.975 * resamples) - 1
    return {"processes": len(procs), "rounds": len(rounds), "each": per,
            "overhead": statistics.fmean(per[p]["overhead"] for p in procs),
            "overhead_ci95": [boot_total[lo], boot_total[hi]],
            "steady_overhead": statistics.fmean(per[p]["steady_overhead"] for p in procs),
            "steady_overhead_ci95": [boot_steady[lo], boot_steady[hi]]}


SIDE_SPEC = re.compile(r"(profiler|(plain|pinscope|paired)(:\w+=[^,@]*(,\w+=[^,@]*)*)?)(@\w+)?")


def slots_of(sides):
    """The turns' slots of the given side specs: (slot names, their kinds,
    paired processes -> (off slot, on slot), slot -> (process, mode)). A
    paired side is one process with two slots, NAME.off and NAME.on."""
    slots, kinds, pairs, where = [], {}, {}, {}
    for spec in sides:
        name, kind = side_name(spec), spec.split("@")[0]
        if kind.startswith("paired"):
            off, on = name + ".off", name + ".on"
            slots += [off, on]
            kinds.update({off: kind + ".off", on: kind + ".on"})
            pairs[name] = (off, on)
            where.update({off: (name, "off"), on: (name, "on")})
        else:
            slots.append(name)
            kinds[name] = kind
            where[name] = (name, None)
    return slots, kinds, pairs, where


def drive(args):
    sides = args.side or ["plain", "pinscope"]
    for spec in sides:
        if not SIDE_SPEC.fullmatch(spec):
            sys.exit("turns.py: unknown side %r (plain[:ENV=V,...], pinscope[:ENV=V,...], "
                     "paired[:ENV=V,...] or profiler, each with an optional @LABEL)" % spec)
    names = [side_name(s) for s in sides]
    slots, slot_kinds, pairs, where = slots_of(sides)
    if len(set(names)) != len(names):
        sys.exit("turns.py: two sides with the same name: %s" % sides)
    os.makedirs(args.out, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="turns-")
    turn_steps = args.turn_steps or TURN_STEPS[args.job]
    warmup = args.warmup or WARMUP[args.job]
    procs, gos, dones, bufs = {}, {}, {}, {}
    for spec, name in zip(sides, names):
        go, done = os.path.join(tmp, name + ".go"), os.path.join(tmp, name + ".done")
        os.mkfifo(go)
        os.mkfifo(done)
        kind = spec.split("@")[0]
        cmd = [sys.executable, os.path.abspath(__file__), "--side-of", name, "--go", go,
               "--done", done, "--job", args.job, "--device", args.device,
               "--turn-steps", str(turn_steps), "--warmup", str(warmup)]
        if args.main_cpu is not None:
            cmd += ["--main-cpu", str(args.main_cpu)]
        env = dict(os.environ)
        if args.hashseed is not None:
            env["PYTHONHASHSEED"] = str(args.hashseed)
        if kind == "profiler":
            cmd.append("--profiler")
        else:
            assignments = kind.partition(":")[2]
            for kv in filter(None, assignments.split(",")):
                k, _, v = kv.partition("=")
                env[k] = v
        if kind.startswith("paired"):
            cmd.append("--paired")
        if kind.startswith("pinscope") or kind.startswith("paired"):
            cmd = [args.ps, "run", "--no-report", "-o", os.path.join(args.out, name + ".run"),
                   "--"] + cmd
        if args.no_aslr:
            cmd = ["setarch", os.uname().machine, "-R"] + cmd
        if args.taskset:
            cmd = ["taskset", "-c", args.taskset] + cmd
        log = open(os.path.join(args.out, name + ".log"), "w")
        print("turns.py: %s: %s" % (name, " ".join(shlex.quote(c) for c in cmd)), file=sys.stderr)
        procs[name] = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    failed = None
    for name in names:
        gos[name] = open_go(os.path.join(tmp, name + ".go"), procs[name], args.start_timeout)
        if gos[name] is None:
            failed = "%s never started (exit %s; its log: %s)" % (
                name, procs[name].poll(), os.path.join(args.out, name + ".log"))
            break
        os.set_blocking(gos[name], True)
        # The side opens this right after its go pipe.
        dones[name] = os.open(os.path.join(tmp, name + ".done"), os.O_RDONLY)
        bufs[name] = [b""]
    for name in names if failed is None else []:
        if read_line(dones[name], args.start_timeout, bufs[name]) != "ready":
            failed = "%s never got ready (exit %s)" % (name, procs[name].poll())
            break
    turns = []
    start = time.monotonic()
    rng = random.Random(args.seed)
    switches = {}  # (round, process) -> ns in pinscope_recording_pause
    # (round, paired slot) -> the turn's start, its pause call's included, in
    # CLOCK_MONOTONIC ns, the trace's clock: which turns a device-record
    # window fell in (pool_paired)
    starts = {}
    usage = {}  # (round, paired slot) -> USAGE_KEYS over the turn (Turns._usage)
    r, order = 0, slots
    while failed is None and time.monotonic() - start < args.seconds:
        # Rounds in pairs: a random order, then the same reversed. Every side
        # takes every place and follows every other side alike, and a drift
        # over a pair of rounds cancels.
        order = rng.sample(slots, len(slots)) if r % 2 == 0 else order[::-1]
        for slot in order:
            name, mode = where[slot]
            os.write(gos[name], b"go %s\n" % mode.encode() if mode else b"go\n")
            line = read_line(dones[name], args.turn_timeout, bufs[name])
            fields = (line or "").split()
            if not fields or not all(f.isdigit() for f in fields) or len(fields) != (7 if mode else 1):
                failed = "%s: no turn back (exit %s)" % (slot, procs[name].poll())
                break
            turns.append((r, slot, int(fields[0]), turn_steps))
            if mode:
                switches[(r, name)] = switches.get((r, name), 0) + int(fields[1])
                starts[(r, slot)] = int(fields[2])
                usage[(r, slot)] = dict(zip(USAGE_KEYS, (int(x) for x in fields[3:])))
        r += 1
    # A paired side's pauses and resumes belong to recording (pausing ends a
    # device-record window): their time goes to its turn with recording.
    folded = {(r, s): switches.get((r, where[s][0]), 0) for r, s, _, _ in turns
              if where[s][1] == "on"}
    turns = [(r, s, ns + folded.get((r, s), 0), st) for r, s, ns, st in turns]
    for name in gos:
        try:
            if gos[name] is not None:
                os.write(gos[name], b"stop\n")
        except OSError:
            pass
    rcs = {}
    for name in names:
        try:
            rcs[name] = procs[name].wait(timeout=args.stop_timeout)
        except subprocess.TimeoutExpired:
            procs[name].kill()
            rcs[name] = "killed after %d s" % args.stop_timeout
    with open(os.path.join(args.out, "turns.jsonl"), "w") as f:
        for t in turns:
            row = dict(zip(("round", "side", "ns", "steps"), t))
            if (t[0], t[1]) in folded:
                row["switch_ns"] = folded[(t[0], t[1])]  # in ns already
            if (t[0], t[1]) in starts:
                row["start_ns"] = starts[(t[0], t[1])]
                row.update(usage[(t[0], t[1])])
            f.write(json.dumps(row) + "\n")
    out = summarize(slots, turns, kinds=slot_kinds, pairs=pairs)
    out.update({"job": args.job, "turn_steps": turn_steps, "seconds": round(time.monotonic() - start, 1),
                "exit": rcs, "failed": failed})
    show(out)
    bad = failed or any(rc != 0 for rc in rcs.values())
    return 1 if bad else 0


def show(out):
    """The summary: one JSON line on stdout, a line a side and a kind on stderr."""
    print(json.dumps(out), flush=True)
    for name, d in out["sides"].items():
        line = "  %-40s %8.3f ms a step, %d steps" % (name, d["ms_per_step"] or 0, d["steps"])
        if "overhead" in d:
            line += ", %+.2f%% [%+.2f%%, %+.2f%%], median round %+.2f%%" % (
                100 * d["overhead"], 100 * d["overhead_ci95"][0], 100 * d["overhead_ci95"][1],
                100 * d["median_round_overhead"])
        print(line, file=sys.stderr)
    paired = out.get("paired")
    if paired:
        for proc, d in paired["each"].items():
            print("  paired %-33s %8.3f ms a step off, %8.3f on: %+.2f%% [%+.2f%%, %+.2f%%], "
                  "median round %+.2f%%, steady %+.2f%%" % (
                      proc, d["off_ms_per_step"], d["on_ms_per_step"], 100 * d["overhead"],
                      100 * d["overhead_ci95"][0], 100 * d["overhead_ci95"][1],
                      100 * d["median_round_overhead"], 100 * d["steady_overhead"]), file=sys.stderr)
        print("  paired, %d processes: %+.2f%% [%+.2f%%, %+.2f%%]; steady %+.2f%% [%+.2f%%, %+.2f%%]" % (
            paired["processes"], 100 * paired["overhead"], 100 * paired["overhead_ci95"][0],
            100 * paired["overhead_ci95"][1], 100 * paired["steady_overhead"],
            100 * paired["steady_overhead_ci95"][0], 100 * paired["steady_overhead_ci95"][1]),
            file=sys.stderr)
    for kind, d in out.get("kinds", {}).items():
        line = "  kind %-35s %8.3f ms a step over %d sides (spread %.2f%%), %+.2f%%" % (
            kind, d["ms_per_step"], d["sides"], 100 * d["spread"], 100 * d["overhead"])
        if "overhead_ci95" in d:
            line += " [%+.2f%%, %+.2f%%]" % tuple(100 * x for x in d["overhead_ci95"])
        line += "; steady %.3f ms, %+.2f%%" % (d["steady_ms_per_step"], 100 * d["steady_overhead"])
        if "steady_overhead_ci95" in d:
            line += " [%+.2f%%, %+.2f%%]" % tuple(100 * x for x in d["steady_overhead_ci95"])
        line += ", excess %+.1f ms a process" % d["excess_ms"]
        print(line, file=sys.stderr)


def summarize_file(path, sides):
    """A recorded run's turns.jsonl summarized again, its sides as given
    to the run (--side, in order; the first is the reference)."""
    names, kinds, pairs, _ = slots_of(sides)
    turns = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            try:
                d = json.loads(line)
                turns.append((d["round"], d["side"], d["ns"], d["steps"]))
            except (ValueError, KeyError, TypeError) as e:
                sys.exit("turns.py: %s:%d: not a turn (%s): %.80s" % (path, n, e, line))
    unknown = sorted({t[1] for t in turns} - set(names))
    if unknown:
        sys.exit("turns.py: %s has sides %s that --side does not name" % (path, ", ".join(unknown)))
    show(summarize(names, turns, kinds=kinds, pairs=pairs))
    return 0


def device_windows(run, pb2_dir=None):
    """The device-record windows of a run's main process, [(attached,
    detached)] in CLOCK_MONOTONIC ns (the start's check included: no turn
    holds it); None where the trace cannot be read here (no protobuf)."""
    try:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import window_cost
        packets = window_cost.root_packets(run, pb2_dir)
    except (ImportError, SystemExit) as e:
        print("turns.py: %s: device-record windows not read (%s)" % (run, e), file=sys.stderr)
        return None
    return [(a, float("inf") if d is None else d) for a, d in window_cost.device_windows(packets)]


def window_rounds(rows, windows):
    """The rounds with a turn that a window overlaps, and how many of the
    windows overlap a turn. A turn lasts from its start (its pause call's
    included: pausing ends a window) to the next turn's start; the run's
    last turn, its own time."""
    timed = sorted((d["start_ns"], d["round"], d["ns"]) for d in rows if "start_ns" in d)
    hit, used = set(), set()
    for i, (t0, r, ns) in enumerate(timed):
        t1 = timed[i + 1][0] if i + 1 < len(timed) else t0 + ns
        for k, (a, d) in enumerate(windows):
            if a < t1 and t0 < d:
                hit.add(r)
                used.add(k)
    return hit, len(used)


def pool_paired(paths, resamples=4000, seed=0, period_s=120.0, pb2_dir=None):
    """Runs of one paired side each (OUT/turns.jsonl of `--side paired`),
    pooled: each run's on turns against its off turns, and the runs' mean
    with a 95% interval that resamples the runs and, in each, its rounds.

    A run of 40 s holds one device-record window where a job holds one
    every PINSCOPE_CUPTI_PERIOD_S (120 s): its turns would count the window
    several times over. Where the run's trace is beside turns.jsonl
    (OUT/NAME.run) and its turns carry their start (start_ns, since
    2026-12-06), the rounds a window fell in are taken apart: `outside` is
    the same figure over the other rounds, `window_excess_ms` what each
    window's rounds took above that (its attach, its detach at the pause,
    the launches while attached: a window that a pause cut short), and
    `at_period` the outside figure plus the windows' mean excess once
    every `period_s` seconds, as in a job."""
    runs = []
    for path in paths:
        by, rows = {}, []
        with open(path) as f:
            for n, line in enumerate(f, 1):
                try:
                    d = json.loads(line)
                    by.setdefault(d["round"], {})[d["side"]] = d["ns"]
                    rows.append(d)
                except (ValueError, KeyError, TypeError) as e:
                    sys.exit("turns.py: %s:%d: not a turn (%s): %.80s" % (path, n, e, line))
        ons = sorted({s for d in by.values() for s in d if s.endswith(".on")})
        if len(ons) != 1:
            sys.exit("turns.py: %s: %d paired sides, --pool takes runs of one" % (path, len(ons)))
        on_side, off_side = ons[0], ons[0][:-3] + ".off"
        rounds = [r for r in sorted(by) if on_side in by[r] and off_side in by[r]]
        if not rounds:
            sys.exit("turns.py: %s: no round with both turns" % path)
        run_dir = os.path.join(os.path.dirname(os.path.abspath(path)), on_side[:-3] + ".run")
        windows = None
        if any("start_ns" in d for d in rows) and os.path.isdir(run_dir):
            windows = device_windows(run_dir, pb2_dir)
        hit, used = window_rounds(rows, windows) if windows is not None else (set(), None)
        per_turn = {(d["round"], d["side"]): d for d in rows}
        runs.append({"on": [by[r][on_side] for r in rounds], "off": [by[r][off_side] for r in rounds],
                     "window": [r in hit for r in rounds], "windows": used,
                     "usage": {mode: [per_turn[(r, side)] for r in rounds]
                               for mode, side in (("on", on_side), ("off", off_side))}})
    rng = random.Random(seed)

    def ratio(run, pick):
        return sum(run["on"][i] for i in pick) / sum(run["off"][i] for i in pick) - 1

    def outside(run):
        return [i for i, w in enumerate(run["window"]) if not w]

    each = [ratio(run, range(len(run["on"]))) for run in runs]
    boot, boot_out = [], []
    known = all(run["windows"] is not None for run in runs)
    for _ in range(resamples):
        picked, picked_out = [], []
        for run in rng.choices(runs, k=len(runs)):
            pick = [rng.randrange(len(run["on"])) for _ in run["on"]]
            picked.append(ratio(run, pick))
            if known:
                rest = outside(run)
                picked_out.append(ratio(run, [rest[rng.randrange(len(rest))] for _ in rest]))
        boot.append(statistics.fmean(picked))
        if known:
            boot_out.append(statistics.fmean(picked_out))
    boot.sort()
    boot_out.sort()
    lo, hi = int(0.025 * resamples), int(0.975 * resamples) - 1
    out = {"runs": len(runs), "rounds": [len(run["on"]) for run in runs], "each": each,
           "median_round": [statistics.median(a / b for a, b in zip(run["on"], run["off"])) - 1
                            for run in runs],
           "overhead": statistics.fmean(each), "overhead_ci95": [boot[lo], boot[hi]]}
    if known:
        out_each, excess = [], []
        for run in runs:
            rest = outside(run)
            o = ratio(run, rest)
            out_each.append(o)
            w = [i for i, x in enumerate(run["window"]) if x]
            if run["windows"]:
                extra = sum(run["on"][i] - run["off"][i] * (1 + o) for i in w)
                excess.append(extra / run["windows"] / 1e6)
        mean_excess = statistics.fmean(excess) if excess else 0.0
        out.update({"outside": statistics.fmean(out_each), "outside_each": out_each,
                    "outside_ci95": [boot_out[lo], boot_out[hi]],
                    "window_rounds": [sum(run["window"]) for run in runs],
                    "window_excess_ms": excess, "period_s": period_s,
                    "at_period": statistics.fmean(out_each) + mean_excess / 1e3 / period_s})
    # Where a turn's time went (turns that carry their usage): a step's wall
    # time, its stepping thread's CPU time and context switches, and its
    # process's CPU time, off and on, over the rounds outside the windows.
    if all(all(k in d for k in USAGE_KEYS) for run in runs for m in ("on", "off")
           for d in run["usage"][m]):
        usage = {}
        for key in ("ns",) + USAGE_KEYS:
            for mode in ("off", "on"):
                per_step = []
                for run in runs:
                    keep = [d for d, w in zip(run["usage"][mode], run["window"]) if not w]
                    per_step.append(sum(d[key] for d in keep) / sum(d["steps"] for d in keep))
                usage.setdefault(key, {})[mode] = statistics.fmean(per_step)
        out["a_step"] = usage
    return out


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--job", choices=sorted(TURN_STEPS), default="mlp12")
    ap.add_argument("--side", action="append", help="plain[:ENV=V,...] | pinscope[:ENV=V,...] | paired[:ENV=V,...] | profiler")
    ap.add_argument("--seconds", type=float, default=90)
    ap.add_argument("--turn-steps", type=int, default=0, help="steps a turn (default: by job)")
    ap.add_argument("--warmup", type=int, default=0, help="steps before the turns (default: by job)")
    ap.add_argument("--ps", default="pinscope", help="the pinscope CLI")
    ap.add_argument("--out", default="turns-out")
    ap.add_argument("--taskset", help="CPUs for every side (taskset -c)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--seed", type=int, default=0, help="of the turns' order")
    ap.add_argument("--hashseed", type=int, help="PYTHONHASHSEED for every side")
    ap.add_argument("--main-cpu", type=int,
                    help="each side's stepping thread on this CPU from its first turn on")
    ap.add_argument("--no-aslr", action="store_true",
                    help="every side under setarch -R: the same address layout in each")
    ap.add_argument("--start-timeout", type=float, default=300)
    ap.add_argument("--turn-timeout", type=float, default=60)
    ap.add_argument("--stop-timeout", type=float, default=120)
    ap.add_argument("--from", dest="from_file",
                    help="summarize a recorded OUT/turns.jsonl again (with the run's --side list)")
    ap.add_argument("--pool", nargs="+", metavar="TURNS_JSONL",
                    help="pool runs of one paired side each: their mean and its 95%% interval")
    ap.add_argument("--period-s", type=float, default=120,
                    help="with --pool: seconds between device-record windows in a job "
                         "(PINSCOPE_CUPTI_PERIOD_S)")
    ap.add_argument("--pb2-dir", help="with --pool: where trace_pb2.py is (default: build*/python)")
    # A side (started by the driver).
    ap.add_argument("--side-of", help=argparse.SUPPRESS)
    ap.add_argument("--go", help=argparse.SUPPRESS)
    ap.add_argument("--done", help=argparse.SUPPRESS)
    ap.add_argument("--profiler", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--paired", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv[1:])
    if args.side_of:
        side_main(args)
        return 0
    if args.from_file:
        return summarize_file(args.from_file, args.side or [])
    if args.pool:
        out = pool_paired(args.pool, period_s=args.period_s, pb2_dir=args.pb2_dir)
        print(json.dumps(out))
        print("  paired, %d runs: %+.2f%% [%+.2f%%, %+.2f%%]; each %s" % (
            out["runs"], 100 * out["overhead"], 100 * out["overhead_ci95"][0],
            100 * out["overhead_ci95"][1], " ".join("%+.2f%%" % (100 * x) for x in out["each"])),
            file=sys.stderr)
        if "outside" in out:
            print("  outside the device-record windows' rounds (%s): %+.2f%% [%+.2f%%, %+.2f%%]; "
                  "a window's rounds %s ms above that; one window every %g s: %+.2f%%" % (
                      " ".join(str(n) for n in out["window_rounds"]), 100 * out["outside"],
                      100 * out["outside_ci95"][0], 100 * out["outside_ci95"][1],
                      " ".join("%.1f" % x for x in out["window_excess_ms"]) or "(none)",
                      out["period_s"], 100 * out["at_period"]), file=sys.stderr)
        if "a_step" in out:
            u = out["a_step"]
            print("  a step, off -> on: wall %.1f -> %.1f us; stepping thread CPU %.1f -> %.1f us, "
                  "voluntary switches %.2f -> %.2f, involuntary %.2f -> %.2f; process CPU "
                  "%.1f -> %.1f us" % (
                      u["ns"]["off"] / 1e3, u["ns"]["on"] / 1e3, u["cpu_ns"]["off"] / 1e3,
                      u["cpu_ns"]["on"] / 1e3, u["vcsw"]["off"], u["vcsw"]["on"], u["ivcsw"]["off"],
                      u["ivcsw"]["on"], u["proc_cpu_ns"]["off"] / 1e3, u["proc_cpu_ns"]["on"] / 1e3),
                  file=sys.stderr)
        return 0
    return drive(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
