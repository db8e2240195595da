#!/usr/bin/env python3
"""Checks the call stacks (issue 6) of seed benchmark runs made on the GPU
machine (tools/bench/seedbench.py under `pinscope run`). Runs anywhere the
traces are (needs the Python protobuf module and BUILD/python/trace_pb2.py).

    python3 tests/gpu/stacks_check.py RUN [RUN...]

For each run folder:
  1. every trace file is self-contained: each stack id an event uses, each
     Python frame and string a stack uses, is defined in the same file, once;
     every native pc lies in a Module of the file;
  2. every large host-to-device copy of the main process names the benchmark's
     copy line (seedbench.py, run(), `x = x.to(dev, non_blocking=True)`);
  3. the batch's host memory names the collate line: with num_workers=0 the
     batch allocation in the main process, with workers a shared-memory event
     in a worker, has a frame in torch/utils/data/_utils/collate.py.
Prints the top call sites of copies and allocations (for docs/validation.md)
and "PASS" (exit 0), or every failure (exit 1).
"""
import collections
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
import trace_dump  # noqa: E402

SEEDBENCH = os.path.join(HERE, "..", "..", "tools", "bench", "seedbench.py")
COLLATE = "torch/utils/data/_utils/collate.py"
BIG = 1 << 20


def marker_line(path, text):
    for n, line in enumerate(open(path), 1):
        if text in line:
            return n
    raise SystemExit(f"{text!r} not in {path}")


class File:
    def __init__(self, path, packets):
        self.path = path
        self.header = packets[0].header if packets and packets[0].HasField("header") else None
        self.stacks, self.frames, self.strings, self.modules = {}, {}, {}, []
        self.defs = collections.Counter()
        self.events = []  # (kind, message)
        for p in packets:
            kind = p.WhichOneof("data")
            if kind == "stack":
                self.stacks[p.stack.id] = p.stack
                self.defs["stack", p.stack.id] += 1
            elif kind == "python_frame":
                self.frames[p.python_frame.id] = p.python_frame
                self.defs["frame", p.python_frame.id] += 1
            elif kind == "interned_string":
                self.strings[p.interned_string.id] = p.interned_string.str
                self.defs["string", p.interned_string.id] += 1
            elif kind == "module":
                self.modules.append(p.module)
            elif kind in ("copy", "alloc", "shm"):
                self.events.append((kind, getattr(p, kind)))

    def is_worker(self):
        return self.header is not None and self.header.origin == 2  # ORIGIN_FORK

    def python_frames(self, stack_id):
        s = self.stacks.get(stack_id)
        if s is None:
            return []
        out = []
        for f in s.python_frames:
            pf = self.frames[f]
            out.append((self.strings[pf.filename_id], self.strings[pf.function_id], pf.line))
        return out

    def problems(self):
        out = [f"{self.path}: {what} {i} defined {n} times" for (what, i), n in self.defs.items()
               if n != 1]
        for kind, e in self.events:
            if e.stack_id and e.stack_id not in self.stacks:
                out.append(f"{self.path}: {kind} uses stack {e.stack_id}, not defined here")
        for sid, s in self.stacks.items():
            for pc in s.native_pcs:
                if not any(m.start <= pc - 1 < m.end for m in self.modules):
                    out.append(f"{self.path}: stack {sid} pc {pc:#x} in no Module")
            for f in s.python_frames:
                pf = self.frames.get(f)
                if pf is None or pf.filename_id not in self.strings or pf.function_id not in self.strings:
                    out.append(f"{self.path}: stack {sid} frame {f} incomplete")
        return out


def user_site(frames):
    """The innermost frame outside the Python library and site-packages."""
    for file, fn, line in frames:
        if "-packages/" not in file and "/lib/python3" not in file:
            return f"{os.path.basename(file)}:{line} {fn}"
    return f"{os.path.basename(frames[0][0])}:{frames[0][2]} {frames[0][1]}" if frames else "(no Python)"


def check_run(run, copy_line):
    files = [File(f, packets) for f, packets in trace_dump.load_run(run).items()]
    problems = []
    for f in files:
        problems += f.problems()
    main = [f for f in files if f.header and not f.is_worker()
            and any("seedbench.py" in a for a in f.header.cmdline)]
    if len(main) != 1:
        return problems + [f"{run}: {len(main)} main seedbench processes"]
    main = main[0]
    workers = [f for f in files if f.is_worker()]

    copies = collections.Counter()
    allocs = collections.Counter()
    n_copies = n_named = 0
    for kind, e in main.events:
        if kind == "copy" and e.direction == 2 and e.bytes >= BIG:  # H2D
            n_copies += 1
            frames = main.python_frames(e.stack_id)
            copies[user_site(frames)] += e.bytes
            if any(os.path.basename(fi) == "seedbench.py" and fn == "run" and ln == copy_line
                   for fi, fn, ln in frames):
                n_named += 1
    if n_copies == 0 or n_named != n_copies:
        problems.append(f"{run}: {n_named} of {n_copies} large H2D copies name seedbench.py:"
                        f"{copy_line} run()")

    collate_hits = 0
    for f in [main] + workers:
        for kind, e in f.events:
            if kind == "alloc" and e.size >= BIG or kind == "shm" and e.stack_id:
                frames = f.python_frames(e.stack_id)
                allocs[("worker " if f.is_worker() else "main ") + kind + " " + user_site(frames)] += 1
                if any(fi.endswith(COLLATE) for fi, _, _ in frames):
                    collate_hits += 1
    if collate_hits == 0:
        problems.append(f"{run}: no allocation or shm event names {COLLATE}")

    print(f"{run}: {len(files)} files ({len(workers)} workers), {n_named}/{n_copies} large H2D "
          f"copies name seedbench.py:{copy_line}, {collate_hits} events name collate.py")
    print("  top copy sites (bytes):")
    for site, b in copies.most_common(5):
        print(f"    {b / 2**20:10.1f} MiB  {site}")
    print("  top allocation / shm sites (events):")
    for site, n in allocs.most_common(8):
        print(f"    {n:6d}  {site}")
    return problems


def main(argv):
    if len(argv) < 2:
        print(__doc__)
        return 2
    copy_line = marker_line(SEEDBENCH, "x = x.to(dev, non_blocking=True)")
    problems = []
    for run in argv[1:]:
        problems += check_run(run, copy_line)
    for p in problems:
        print("FAIL", p)
    print("PASS" if not problems else f"FAIL ({len(problems)} problems)")
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
