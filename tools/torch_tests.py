#!/usr/bin/env python3
"""PyTorch's own tests run plain, preloaded, and under transparent pinning
(issue 17; tools/gpu_torch_tests.sh runs this on the GPU machine).

    torch_tests.py run --tests DIR --shim LIB --work W [--modes plain,preload,pin[,pool]]
                       [--files test_dataloader.py,test_cuda.py,test_torch.py]
                       [--time S] [--test-timeout S] [--jobs N] [--shards N] [--reserve S]
                       [--compat-src DIR] [--runner auto|pytest|unittest] [--pinscope BIN]
                       [--cudart LIB]

Each test file's tests are listed once (plain): all of test_dataloader.py
and test_multiprocessing.py;
of the others the copy tests, picked by name (COPY_NAME), in the classes that
are not another device's instantiation (the *CPU/*META copies of a generic
test). Each file's tests are dealt round-robin into shards (--shards per
mode for the largest file, default --jobs / modes; the others in
proportion), each (mode, shard) in its own process, --jobs (the cores) at
once, largest first, none past the deadline less --reserve (the reruns'
time). A process runs its tests with pytest when the test Python has it (`-v`, node ids), else with unittest
through this file's driver (`_drive`), which writes one line per test to a
results file, so a test that kills its process is named. A process that
dies is started again on the tests it did not reach, the one it died in
marked `crash`. The modes:

    plain    the tests as they are
    preload  LD_PRELOAD=LIB, PINSCOPE_OUT=W/runs/preload-FILE
    pin      also PINSCOPE_PIN=1 PINSCOPE_PIN_POOL=0 PINSCOPE_PIN_MIN=4K: every
             copy's buffer pinned, without the pool
    pool     PINSCOPE_PIN=1 PINSCOPE_PIN_POOL=1 PINSCOPE_PIN_MIN=1: DataLoader
             workers' batches, however small, in the pool of registered slots
             (issue 15; not in the default --modes)

--cudart LIB (a machine without a GPU, whose torch never calls CUDA): every
mode, plain included, loads LIB (the CUDA runtime test double) at interpreter
start-up and makes one 4-byte copy through it (WORK/wake/sitecustomize.py),
so that pinning and the pool are live in the preloaded modes (they act only
in a process that has used CUDA).

Printed: each test's outcome per mode, the tests whose outcomes differ
between modes, and counts. The tests that differ are run again when time
is left, one process per file and mode, the modes at once and no other
test process: a difference that the rerun repeats is `confirmed`. A test
process gets --collect-timeout to import and collect before its first
test. Names the installed torch.testing._internal lacks are supplied as PyTorch 2.6's
source defines them (--compat-src, default DIR/torch26/testing/_internal:
tools/torch_tests_compat.py as sitecustomize, every mode alike; listed). What counts is a
difference: version skew between the test files and the installed torch
fails a test in every mode. Writes W/outcomes.tsv and W/summary.txt.
Exit 0: every test ran in every mode and none differs; 1: a confirmed
difference (or one not rerun), or tests left unrun; 2: the check could not
run. A test that runs --test-timeout seconds with no other ending is
stopped (`timeout`) and the rest go on in a new process.
"""
import argparse
import concurrent.futures
import os
import re
import subprocess
import sys
import time

# A copy test's method name, by its words: test_to_non_blocking,
# test_copy_broadcast, test_pin_memory, test_is_pinned..., test_memory_stats.
COPY_NAME = re.compile(r"^test(_.*)?_(to|copy|copy_|pin|pinned|pin_memory|non_blocking|nonblocking|is_pinned|memory)(_|$)")
OTHER_DEVICE_CLASS = re.compile(r"(CPU|META|MPS|XLA|LAZY|PRIVATEUSE1)$")
MODES = ("plain", "preload", "pin", "pool")
# Files run whole: the DataLoader's, and torch.multiprocessing's (tensors
# sent between processes: where the pool's slots must escape).
ALL_TESTS = ("test_dataloader.py", "test_multiprocessing.py")
DEFAULT_MODES = ("plain", "preload", "pin")
PYTEST_LINE = re.compile(r"^(\S+::\S+) (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)\b")
PYTEST_OUTCOME = {"PASSED": "pass", "FAILED": "fail", "SKIPPED": "skip", "ERROR": "error",
                  "XFAIL": "xfail", "XPASS": "xpass"}


def die(msg):
    print("torch_tests.py: " + msg, file=sys.stderr)
    sys.exit(2)


# ---- inside the test Python: list and drive (unittest) ----------------------

def _import(test_dir, file):
    sys.path.insert(0, test_dir)
    os.chdir(test_dir)
    sys.argv = [file]  # common_utils parses sys.argv when imported
    import importlib
    return importlib.import_module(file[:-3])


def _walk(suite):
    import unittest
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            yield from _walk(t)
        else:
            yield t


def cmd_list(args):
    import unittest
    mod = _import(args.tests, args.file)
    for t in _walk(unittest.TestLoader().loadTestsFromModule(mod)):
        cls, meth = type(t).__name__, getattr(t, "_testMethodName", "")
        if not meth or cls.startswith("_"):
            continue  # _FailedTest and friends: the import of a part failed
        if not args.all and (OTHER_DEVICE_CLASS.search(cls) or not COPY_NAME.search(meth)):
            continue
        print("%s::%s::%s" % (args.file, cls, meth))


def cmd_drive(args):
    import unittest
    ids = open(args.ids).read().split()
    out = os.open(args.results, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def note(line):
        os.write(out, (line + "\n").encode())

    mod = _import(args.tests, args.file)

    class Result(unittest.TextTestResult):
        def startTest(self, test):
            note("start " + self._id(test))
            super().startTest(test)

        def _id(self, test):
            return "%s::%s::%s" % (args.file, type(test).__name__, test._testMethodName)

        def _end(self, test, outcome):
            note("end %s %s" % (self._id(test), outcome))

        def addSuccess(self, test):
            super().addSuccess(test); self._end(test, "pass")

        def addFailure(self, test, err):
            super().addFailure(test, err); self._end(test, "fail")

        def addError(self, test, err):
            super().addError(test, err)
            if hasattr(test, "_testMethodName"):
                self._end(test, "error")

        def addSkip(self, test, reason):
            super().addSkip(test, reason); self._end(test, "skip")

        def addExpectedFailure(self, test, err):
            super().addExpectedFailure(test, err); self._end(test, "xfail")

        def addUnexpectedSuccess(self, test):
            super().addUnexpectedSuccess(test); self._end(test, "xpass")

    suite = unittest.TestSuite()
    loader = unittest.TestLoader()
    for i in ids:
        _, cls, meth = i.split("::")
        suite.addTest(loader.loadTestsFromName(cls + "." + meth, mod))
    unittest.TextTestRunner(verbosity=2, resultclass=Result, stream=sys.stderr).run(suite)


# ---- the orchestrator ---------------------------------------------------------

def env_for(mode, args, file, tag="list"):
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1")
    for k in ("LD_PRELOAD", "PINSCOPE_OUT", "PINSCOPE_PIN", "PINSCOPE_PIN_MIN", "PINSCOPE_PIN_POOL"):
        env.pop(k, None)
    pylib = os.path.join(args.tests, "pylib")  # expecttest, psutil: last, a module installed wins
    # The version-skew shim first, then the CUDA wake (the compat shim runs
    # the next sitecustomize on the path): every mode alike.
    first = [d for d in (args.compat_dir, args.wake_dir) if d]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, first + [env.get("PYTHONPATH")] +
                                                [pylib if os.path.isdir(pylib) else ""]))
    if args.wake_dir:
        env["PINSCOPE_TT_CUDART"] = args.cudart
    if args.compat_dir:
        env["PINSCOPE_TT_COMPAT_SRC"] = args.compat_src
        env["PINSCOPE_TT_COMPAT_PKG"] = args.compat_package
        env["PINSCOPE_TT_COMPAT_LOG"] = os.path.join(args.work, "compat.log")
    if mode != "plain":
        env["LD_PRELOAD"] = args.shim
        env["PINSCOPE_OUT"] = run_dir(args, mode, file, tag)
    if mode in ("pin", "pool"):
        env["PINSCOPE_PIN"] = "1"
        env["PINSCOPE_PIN_MIN"] = "4K"
    if mode == "pin":
        env["PINSCOPE_PIN_POOL"] = "0"  # pinning alone (the pool comes with it)
    if mode == "pool":
        # Every batch through the pool, however small (PyTorch's DataLoader
        # tests make batches of 8 bytes to 95 KB).
        env["PINSCOPE_PIN_POOL"] = "1"
        env["PINSCOPE_PIN_MIN"] = "1"
    return env


def run_dir(args, mode, file, tag):
    # One run folder per process: a restarted process is another run.
    return os.path.join(args.work, "runs", "%s-%s.%s" % (mode, file[:-3], tag))


def list_tests(args, file):
    cmd = [args.python, os.path.abspath(__file__), "_list", "--tests", args.tests, "--file", file]
    if file in ALL_TESTS:
        cmd.append("--all")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env_for("plain", args, file),
                       timeout=max(30, args.deadline - time.monotonic()))
    if p.returncode != 0:
        return None, p.stderr.strip().splitlines()[-1:] or ["exit %d" % p.returncode]
    return [l for l in p.stdout.split() if "::" in l], []


def progress(args, log_path, results):
    """({id: outcome} so far, the id started and not ended or None)."""
    got, started = {}, None
    if args.runner == "pytest":
        text = open(log_path, errors="replace").read() if os.path.exists(log_path) else ""
        # `-v` writes a test's node id when it starts and its outcome on the
        # same line when it ends. A test that kills its process leaves its
        # id followed by whatever the process printed as it died (pytest's
        # faulthandler: "Fatal Python error: Segmentation fault" and a
        # traceback after it), so the test that started is the last id seen
        # at the start of a line, not the first word of the log's last line.
        for line in text.splitlines():
            m = PYTEST_LINE.match(line)
            if m:
                got[m.group(1)] = PYTEST_OUTCOME[m.group(2)]
                continue
            head = line.split(" ", 1)[0]
            if "::" in head and not line.startswith(" "):
                started = head
        if started in got:
            started = None
    elif os.path.exists(results):
        for line in open(results, errors="replace"):
            parts = line.split()
            if parts[:1] == ["start"] and len(parts) == 2:
                started = parts[1]
            elif parts[:1] == ["end"] and len(parts) == 3:
                got[parts[1]] = parts[2]
                if parts[1] == started:
                    started = None
    return got, started


def run_once(args, mode, file, ids, log, tag, stop_at):
    """One process on ids: ({id: outcome} it reported, why it died or "").
    A test that runs past --test-timeout with no other test ending is
    stopped with its process group (DataLoader workers too): `timeout`;
    at stop_at (monotonic) the process is stopped: `deadline`."""
    env = env_for(mode, args, file, tag)
    ids_file = "%s.%s.ids" % (log, tag)
    log_path = "%s.%s.log" % (log, tag)
    results = "%s.%s.results" % (log, tag)
    with open(ids_file, "w") as f:
        f.write("\n".join(ids) + "\n")
    if stop_at - time.monotonic() < 5:
        return {}, "deadline"
    if args.runner == "pytest":
        cmd = [args.python, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-o", "addopts=",
               "--rootdir", args.tests] + ids
    else:
        cmd = [args.python, os.path.abspath(__file__), "_drive", "--tests", args.tests,
               "--file", file, "--ids", ids_file, "--results", results]
    died, last_n, last_t, begun = "", 0, time.monotonic(), False
    with open(log_path, "w") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=args.tests, env=env,
                             start_new_session=True)
        while p.poll() is None:
            time.sleep(0.5)
            got, started = progress(args, log_path, results)
            now = time.monotonic()
            if not begun and (got or started):
                begun, last_t = True, now
            if len(got) != last_n:
                last_n, last_t = len(got), now
            # Until the first test starts the process imports torch and
            # collects the file: with 16+ processes starting at once that
            # took over 30 s on the H200 (test_cuda.py), which is no test's
            # timeout; it gets --collect-timeout.
            limit = args.test_timeout if begun else args.collect_timeout
            stop = ""
            if now > stop_at:
                stop = "deadline"
            elif now - last_t > limit:
                stop = "timeout"
            if stop:
                try:
                    os.killpg(p.pid, 9)
                except ProcessLookupError:
                    pass
                p.wait()
                died = stop
    rc = p.returncode
    try:  # whatever the tests left running in the group
        os.killpg(p.pid, 9)
    except (ProcessLookupError, PermissionError):
        pass
    got, started = progress(args, log_path, results)
    if rc not in (0, 1) and not died:
        died = "exit %s" % rc
    if died and started and started in ids and started not in got:
        got[started] = {"timeout": "timeout", "deadline": "notrun"}.get(died, "crash")
    return got, died


def run_shard(args, mode, file, shard, ids, stop_at, name=""):
    """Runs one shard's ids in one mode, restarting after a crash or a
    timeout on the tests not reached; {id: outcome}."""
    log = os.path.join(args.work, "logs", "%s-%s" % (mode, file[:-3]))
    outcomes, todo, n, idle = {}, list(ids), 0, 0
    where = "%s%s %s shard %d" % (name, mode, file, shard)
    while todo:
        if time.monotonic() > stop_at - 5:
            break
        n += 1
        # The tag names the process's log and run folder: a rerun's differs
        # from its shard's (one run folder holds one run).
        got, died = run_once(args, mode, file, todo, log, "%ss%d.r%d" % (name, shard, n), stop_at)
        outcomes.update(got)
        todo = [i for i in todo if i not in outcomes]
        if not died or not todo:
            break
        print("  [%s] process %d ended (%s) with %d tests left" % (where, n, died, len(todo)), flush=True)
        idle = 0 if got else idle + 1
        if died == "deadline" or idle >= 2:  # twice in a row no test ended: give up
            break
    for i in todo:
        outcomes.setdefault(i, "notrun")
    return outcomes


def report_check(args, mode, file):
    """The preloaded runs of (mode, file): trace files, and `pinscope report`'s exit."""
    prefix = "%s-%s." % (mode, file[:-3])
    runs = sorted(d for d in os.listdir(os.path.join(args.work, "runs")) if d.startswith(prefix))
    traces, codes, first = 0, {}, ""
    for d in runs:
        d = os.path.join(args.work, "runs", d)
        n = len([f for f in os.listdir(d) if f.endswith(".pstrace")])
        traces += n
        if not args.pinscope or n == 0:
            continue
        p = subprocess.run([args.pinscope, "report", d], capture_output=True, text=True)
        codes[p.returncode] = codes.get(p.returncode, 0) + 1
        # Exit 1: a file was cut or empty (a process killed at its timeout is).
        probs = [l.strip() for l in (p.stderr + p.stdout).splitlines()
                 if l.strip().startswith(("error ", "warning "))]
        if p.returncode and not first:
            first = (probs or p.stderr.strip().splitlines() or ["no message"])[0][:160]
    out = "%d runs, %d trace files" % (len(runs), traces)
    if codes:
        out += ", report exit " + ", ".join("%d: %d" % (c, n) for c, n in sorted(codes.items()))
    return out + ("; first problem: " + first if first else "")


def cmd_run(args):
    args.tests = os.path.abspath(args.tests)
    args.work = os.path.abspath(args.work)
    args.deadline = time.monotonic() + args.time
    modes = args.modes.split(",")
    for m in modes:
        if m not in MODES:
            die("unknown mode %r (the modes: %s)" % (m, ", ".join(MODES)))
    files = args.files.split(",")
    for f in files:
        if not os.path.isfile(os.path.join(args.tests, f)):
            die("no %s in %s (tools/gpu_fetch_torch_tests.sh puts it there)" % (f, args.tests))
    if any(m != "plain" for m in modes):
        if not args.shim or not os.path.isfile(args.shim):
            die("the shim %r is not a file (--shim)" % args.shim)
        args.shim = os.path.abspath(args.shim)
    if args.pinscope:
        if not (os.path.isfile(args.pinscope) and os.access(args.pinscope, os.X_OK)):
            die("--pinscope %r is not an executable file" % args.pinscope)
        args.pinscope = os.path.abspath(args.pinscope)
    if args.runner == "auto":
        has = subprocess.run([args.python, "-c", "import pytest"], capture_output=True).returncode == 0
        args.runner = "pytest" if has else "unittest"
    os.makedirs(os.path.join(args.work, "logs"), exist_ok=True)
    os.makedirs(os.path.join(args.work, "runs"), exist_ok=True)
    setup_compat(args)
    setup_wake(args)
    jobs = args.jobs or os.cpu_count() or 1
    shards = args.shards or max(1, jobs // len(modes))
    print("runner: %s; python: %s; modes: %s; %d processes at once, up to %d shards per file and mode; "
          "test timeout %.0f s; reruns reserved %.0f s" % (args.runner, args.python, ", ".join(modes), jobs,
          shards, args.test_timeout, args.reserve), flush=True)
    if args.compat_dir:
        print("compat: %s first on PYTHONPATH (every mode), PyTorch 2.6's %s from %s"
              % (args.compat_dir, args.compat_package, args.compat_src), flush=True)

    selected, unlisted = {}, {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(files)) as pool:
        listed = dict(zip(files, pool.map(lambda f: list_tests(args, f), files)))
    for f in files:
        ids, err = listed[f]
        if ids is None:
            unlisted[f] = " ".join(err)
            print("%s: cannot list its tests (import failed, plain): %s" % (f, unlisted[f]))
            continue
        if args.limit:
            ids = ids[:args.limit]
        selected[f] = ids
        print("%s: %d tests selected" % (f, len(ids)), flush=True)
    if not any(selected.values()):
        die("no test selected" + ("; " + "; ".join("%s: %s" % kv for kv in unlisted.items()) if unlisted else ""))

    # Shards: each file's tests dealt round-robin (a class's tests spread
    # over them), the largest file getting `shards`, the others in
    # proportion; the largest shards start first. No shard runs past
    # deadline - reserve: the rest is the reruns' time.
    n_max = max(len(ids) for ids in selected.values())
    work = []
    for f, ids in selected.items():
        k = max(1, min(len(ids), round(shards * len(ids) / n_max)))
        for j in range(k):
            part = ids[j::k]
            if part:
                work += [(len(part), f, j, m, part) for m in modes]
    work.sort(key=lambda w: -w[0])
    stop_at = args.deadline - args.reserve
    table = {}  # id -> {mode: outcome}
    t0 = time.monotonic()
    print("%d shard processes (%s)" % (len(work), ", ".join(
        "%s %d" % (f, len({w[2] for w in work if w[1] == f})) for f in selected)), flush=True)
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futs = {pool.submit(run_shard, args, m, f, j, part, stop_at): (m, f, j)
                for _, f, j, m, part in work}
        for fut in concurrent.futures.as_completed(futs):
            m, f, j = futs[fut]
            got = fut.result()
            for i, o in got.items():
                table.setdefault(i, {})[m] = o
            left = sum(1 for o in got.values() if o == "notrun")
            print("  [%s %s shard %d] done at %.0f s%s" % (m, f, j, time.monotonic() - t0,
                  ", %d not run" % left if left else ""), flush=True)
    print("shards done at %.0f s" % (time.monotonic() - t0), flush=True)

    differ = [i for i in sorted(table) if len({table[i].get(m, "notrun") for m in modes}) > 1]
    # The reruns: a file's differing tests again, in one process per mode
    # (restarted past a crash or a timeout, as a shard), the modes at once
    # and nothing else running. One process per test was tried first: each
    # imports torch and collects its file again (10-20 s on the H200), and
    # 28 tests in 3 modes took 224 s of a 560 s call.
    rerun, redone = {}, {}
    by_file = {}
    for i in differ:
        by_file.setdefault(i.split("::")[0], []).append(i)
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futs = {pool.submit(run_shard, args, m, f, 0, ids, args.deadline - 10, "rerun-"): m
                for f, ids in by_file.items() for m in modes}
        for fut in concurrent.futures.as_completed(futs):
            for i, o in fut.result().items():
                redone.setdefault(i, {})[futs[fut]] = o
    for i, a in redone.items():
        if len(a) == len(modes) and "notrun" not in a.values():
            rerun[i] = a
    if differ:
        print("reruns done at %.0f s" % (time.monotonic() - t0), flush=True)

    lines = []
    w = max([len(i) for i in table] + [10])
    lines.append("%-*s  %s" % (w, "test", "  ".join("%-8s" % m for m in modes)))
    for i in sorted(table):
        row = "  ".join("%-8s" % table[i].get(m, "notrun") for m in modes)
        mark = "  <- differs" if i in differ else ""
        lines.append("%-*s  %s%s" % (w, i, row, mark))
    lines.append("")
    confirmed = []
    if differ:
        lines.append("Differences between modes (%d):" % len(differ))
        for i in differ:
            first = ", ".join("%s %s" % (m, table[i].get(m, "notrun")) for m in modes)
            if i in rerun:
                again = ", ".join("%s %s" % (m, rerun[i][m]) for m in modes)
                differs = len(set(rerun[i].values())) > 1
                if differs:
                    confirmed.append(i)
                lines.append("  %s: %s; again: %s -> %s" % (i, first, again,
                             "confirmed" if differs else "not repeated"))
            else:
                confirmed.append(i)
                lines.append("  %s: %s; not rerun (no time left)" % (i, first))
    else:
        lines.append("Differences between modes: none")
    lines.append("")
    lines.append("Counts (%d tests):" % len(table))
    kinds = ["pass", "fail", "error", "skip", "xfail", "xpass", "crash", "timeout", "notrun"]
    for m in modes:
        c = [(k, sum(1 for i in table if table[i].get(m, "notrun") == k)) for k in kinds]
        lines.append("  %-8s %s" % (m, ", ".join("%s %d" % (k, n) for k, n in c if n)))
    for f in selected:
        for m in modes:
            if m != "plain":
                lines.append("  %s %s: %s" % (m, f, report_check(args, m, f)))
    lines.append("")
    shimmed = compat_report(args)
    if args.compat_dir:
        lines.append("Compat (PyTorch 2.6 definitions the installed torch lacks, supplied in every mode): %s"
                     % (", ".join(shimmed) if shimmed else "none needed"))
        lines.append("")

    def ran_all(i):
        return all(table.get(i, {}).get(m, "notrun") != "notrun" for m in modes)

    lines.append("Per file, tests that ran in every mode:")
    for f in files:
        if f in unlisted:
            lines.append("  %s: not listed (import failed): %s" % (f, unlisted[f][:200]))
        else:
            lines.append("  %s: %d of %d" % (f, sum(1 for i in selected[f] if ran_all(i)), len(selected[f])))
    n_all = sum(len(ids) for ids in selected.values())
    n_ran = sum(1 for ids in selected.values() for i in ids if ran_all(i))
    complete = "complete: %d of %d tests ran in every mode" % (n_ran, n_all)
    if unlisted:
        complete += "; %d files not listed (%s)" % (len(unlisted), ", ".join(unlisted))
    lines.append(complete)
    notrun = n_ran < n_all or unlisted
    if confirmed:
        result = "%d tests differ between modes" % len(confirmed)
        if notrun:
            result += "; incomplete"
    elif notrun:
        result = "incomplete: %d of %d tests not run in every mode%s" % (
            n_all - n_ran, n_all, ", files not listed" if unlisted else " (time ran out)")
    else:
        result = "no difference between modes in %d tests" % len(table)
    lines.append("result: " + result)
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    with open(os.path.join(args.work, "summary.txt"), "w") as f:
        f.write(text)
    with open(os.path.join(args.work, "outcomes.tsv"), "w") as f:
        f.write("test\t" + "\t".join(modes) + "\n")
        for i in sorted(table):
            f.write(i + "\t" + "\t".join(table[i].get(m, "notrun") for m in modes) + "\n")
    return 1 if confirmed or notrun else 0


def setup_compat(args):
    """WORK/compat/sitecustomize.py (tools/torch_tests_compat.py), when there
    is a PyTorch 2.6 torch/testing/_internal source to take names from."""
    args.compat_dir = ""
    src = args.compat_src
    if src is None:
        src = os.path.join(args.tests, "torch26", "testing", "_internal")
    if not src or not os.path.isdir(src):
        if args.compat_src:
            die("--compat-src %r is not a folder" % args.compat_src)
        return
    args.compat_src = os.path.abspath(src)
    d = os.path.join(args.work, "compat")
    os.makedirs(d, exist_ok=True)
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "torch_tests_compat.py")) as f, open(os.path.join(d, "sitecustomize.py"), "w") as g:
        g.write(f.read())
    log = os.path.join(args.work, "compat.log")
    if os.path.exists(log):
        os.unlink(log)
    args.compat_dir = d


# WORK/wake/sitecustomize.py (--cudart): loads the CUDA runtime named by
# PINSCOPE_TT_CUDART and copies 4 bytes to the device through the global
# scope (libpinscope.so's cudaMemcpy where it is preloaded), then runs the
# next sitecustomize on the path, as site.py would have.
WAKE = r'''
import ctypes, importlib.machinery, importlib.util, os, sys
_lib = os.environ.get("PINSCOPE_TT_CUDART", "")
if _lib:
    try:
        ctypes.CDLL(_lib, mode=os.RTLD_GLOBAL)
        _g = ctypes.CDLL(None)
        _dev, _buf = ctypes.c_void_p(), ctypes.create_string_buffer(4)
        if _g.cudaMalloc(ctypes.byref(_dev), ctypes.c_size_t(4)) == 0:
            _g.cudaMemcpy(_dev, _buf, ctypes.c_size_t(4), 1)
            _g.cudaFree(_dev)
    except OSError as e:
        sys.stderr.write("torch_tests wake: %s\n" % e)
# The next one: on the path after this folder (the compat shim, before it,
# runs this one).
_here = os.path.dirname(os.path.abspath(__file__))
_abs = [os.path.abspath(p or os.curdir) for p in sys.path]
_rest = sys.path[_abs.index(_here) + 1:] if _here in _abs else []
_spec = importlib.machinery.PathFinder.find_spec("sitecustomize", _rest)
if _spec is not None and _spec.loader is not None:
    _mod = importlib.util.module_from_spec(_spec)
    try:
        _spec.loader.exec_module(_mod)
    except Exception:  # noqa: BLE001 - as site.py: a failing sitecustomize is not fatal
        pass
'''


def setup_wake(args):
    args.wake_dir = ""
    if not args.cudart:
        return
    if not os.path.isfile(args.cudart):
        die("--cudart %r is not a file" % args.cudart)
    args.cudart = os.path.abspath(args.cudart)
    d = os.path.join(args.work, "wake")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "sitecustomize.py"), "w") as f:
        f.write(WAKE)
    args.wake_dir = d


def compat_report(args):
    """What the shim supplied, once each: MODULE.NAME, "module MODULE", or
    "MODULE.NAME (2.6's fails: why)"."""
    log = os.path.join(args.work, "compat.log")
    out = []
    if os.path.exists(log):
        for line in open(log, errors="replace"):
            kind, _, rest = line.strip().partition(" ")
            if kind == "name":
                item = ".".join(rest.split(" ", 1))
            elif kind == "module":
                item = "module " + rest
            elif kind == "failed":
                mod, _, why = rest.partition(" ")
                name, _, why = why.partition(": ")
                item = "%s.%s (2.6's fails: %s)" % (mod, name, why[:120])
            else:
                continue
            if item not in out:
                out.append(item)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--tests", required=True, help="folder of the test files")
    r.add_argument("--shim", default="", help="libpinscope.so")
    r.add_argument("--work", required=True, help="folder for logs, run folders and results")
    r.add_argument("--modes", default=",".join(DEFAULT_MODES), help="of: " + ", ".join(MODES))
    r.add_argument("--files", default="test_dataloader.py,test_cuda.py,test_torch.py")
    r.add_argument("--python", default=sys.executable, help="the Python with torch")
    r.add_argument("--runner", default="auto", choices=["auto", "pytest", "unittest"])
    r.add_argument("--time", type=float, default=360, help="seconds for everything")
    r.add_argument("--test-timeout", type=float, default=30,
                   help="seconds one test may run with no other ending (then: timeout, process restarted)")
    r.add_argument("--collect-timeout", type=float, default=150,
                   help="seconds a test process may take to import and collect before its first test")
    r.add_argument("--jobs", type=int, default=0, help="test processes at once (default: the cores)")
    r.add_argument("--shards", type=int, default=0,
                   help="processes per mode for the largest file (default: jobs / modes); the others in proportion")
    r.add_argument("--reserve", type=float, default=None,
                   help="seconds before the end kept for the reruns (default: 3 x (test timeout + 20))")
    r.add_argument("--compat-src", default=None,
                   help="PyTorch 2.6's torch/testing/_internal (default: TESTS/torch26/testing/_internal if there)")
    r.add_argument("--compat-package", default="torch.testing._internal",
                   help="the package whose missing names the shim supplies")
    r.add_argument("--limit", type=int, default=0, help="at most this many tests per file")
    r.add_argument("--pinscope", default="", help="pinscope binary: report every preloaded run")
    r.add_argument("--cudart", default="",
                   help="a CUDA runtime (the test double) every mode loads and copies through at start-up")
    for name in ("_list", "_drive"):
        s = sub.add_parser(name)
        s.add_argument("--tests", required=True)
        s.add_argument("--file", required=True)
        s.add_argument("--all", action="store_true")
        s.add_argument("--ids")
        s.add_argument("--results")
    args = ap.parse_args()
    if args.cmd == "run":
        if args.time <= 0:
            die("--time must be positive, not %s" % args.time)
        if args.reserve is None:
            args.reserve = min(3 * (args.test_timeout + 20), args.time / 3)
        if args.reserve < 0 or args.reserve >= args.time:
            die("--reserve must be in [0, --time), not %s" % args.reserve)
        sys.exit(cmd_run(args))
    (cmd_list if args.cmd == "_list" else cmd_drive)(args)


if __name__ == "__main__":
    main()
