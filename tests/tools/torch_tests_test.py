#!/usr/bin/env python3
"""tools/torch_tests.py (the PyTorch-tests GPU check's harness) on test
files planted here: a test that fails only preloaded, one that kills its
process only under PINSCOPE_PIN=1, one that hangs only there, one that fails
in every mode (version skew, not a difference), the copy-test selection
by name; a suite sharded over processes (a hang in every mode costing one
timeout per mode, at once); the version-skew shim (tools/torch_tests_compat.py). Needs no torch: the harness's unittest driver runs plain unittest.

    torch_tests_test.py TOOLS_DIR LIBPINSCOPE FAKE_CUDART
"""
import csv
import os
import subprocess
import sys
import tempfile

tools, shim, cudart = sys.argv[1], sys.argv[2], sys.argv[3]
harness = os.path.join(tools, "torch_tests.py")
fails = []


def check(cond, what):
    if not cond:
        fails.append(what)
        print("FAIL: " + what)


def planted(tmp, files):
    """A tests folder in tmp holding `files` (name: source); its path."""
    tests = os.path.join(tmp, "tests")
    os.mkdir(tests)
    for name, text in files.items():
        with open(os.path.join(tests, name), "w") as f:
            f.write(text)
    return tests


DATALOADER = '''
import os, signal, time, unittest
class TestModes(unittest.TestCase):
    def test_same(self):
        pass
    def test_skipped(self):
        self.skipTest("no GPU")
    def test_skew(self):
        self.fail("fails in every mode")
    def test_sees_preload(self):
        self.assertNotIn("libpinscope", os.environ.get("LD_PRELOAD", ""))
    def test_crash_pinned(self):
        if os.environ.get("PINSCOPE_PIN") == "1":
            os.kill(os.getpid(), signal.SIGSEGV)
    def test_hang_pinned(self):
        if os.environ.get("PINSCOPE_PIN") == "1":
            time.sleep(300)
    def test_zz_after(self):
        pass
'''
CUDA = '''
import unittest
class TestCuda(unittest.TestCase):
    def test_copy_broadcast(self):
        pass
    def test_to_non_blocking(self):
        pass
    def test_is_pinned(self):
        pass
    def test_tomorrow(self):
        pass
    def test_matmul(self):
        pass
class TestThingCPU(unittest.TestCase):
    def test_copy_cpu(self):
        pass
'''

# Both drivers: this file's own unittest driver, and pytest where the test
# Python has it (the GPU machine's has; `auto` picks it). A test that kills
# its process is named by each: pytest's faulthandler prints a traceback
# after the test's id, so the id is not the log's last line.
RUNNERS = ["unittest"]
if subprocess.run([sys.executable, "-c", "import pytest"], capture_output=True).returncode == 0:
    RUNNERS.append("pytest")
else:
    print("pytest is not installed for %s: the unittest driver only" % sys.executable)
for runner in RUNNERS:
    with tempfile.TemporaryDirectory() as tmp:
        tests = planted(tmp, {"test_dataloader.py": DATALOADER, "test_cuda.py": CUDA})
        work = os.path.join(tmp, "work")
        base = [sys.executable, harness, "run", "--tests", tests, "--shim", shim, "--work", work,
                "--python", sys.executable, "--time", "120", "--test-timeout", "3", "--runner", runner]
        p = subprocess.run(base + ["--files", "test_dataloader.py,test_cuda.py"], capture_output=True, text=True)
        print(p.stdout[-4000:], p.stderr[-2000:])
        check(p.returncode == 1, runner + ": a run with differences exits 1, not %d" % p.returncode)
        rows = {}
        with open(os.path.join(work, "outcomes.tsv")) as f:
            for r in csv.DictReader(f, delimiter="\t"):
                rows[r["test"]] = (r["plain"], r["preload"], r["pin"])
        d = "test_dataloader.py::TestModes::"
        expect = {
            d + "test_same": ("pass", "pass", "pass"),
            d + "test_skipped": ("skip", "skip", "skip"),
            d + "test_skew": ("fail", "fail", "fail"),
            d + "test_sees_preload": ("pass", "fail", "fail"),
            d + "test_crash_pinned": ("pass", "pass", "crash"),
            d + "test_hang_pinned": ("pass", "pass", "timeout"),
            d + "test_zz_after": ("pass", "pass", "pass"),
            "test_cuda.py::TestCuda::test_copy_broadcast": ("pass", "pass", "pass"),
            "test_cuda.py::TestCuda::test_to_non_blocking": ("pass", "pass", "pass"),
            "test_cuda.py::TestCuda::test_is_pinned": ("pass", "pass", "pass"),
        }
        check(rows == expect, runner + ": outcomes %r, expected %r" % (rows, expect))
        out = p.stdout
        for t in ("test_sees_preload", "test_crash_pinned", "test_hang_pinned"):
            check(any(t in l and "confirmed" in l for l in out.splitlines()),
                  "%s: %s: the difference is confirmed alone" % (runner, t))
        check("test_skew: " not in out, runner + ": a test failing in every mode is not a difference")
        check("result: 3 tests differ between modes" in out, runner + ": the result line counts 3 differences")
        check("Differences between modes (3)" in out, runner + ": three differences listed")
        # One run folder per preloaded process, the reruns' too: a folder
        # that two processes shared held two runs, and `pinscope report` of
        # it failed ("belongs to run"), as on the H200 on 2026-12-05.
        logs = os.listdir(os.path.join(work, "logs"))
        for m in ("preload", "pin"):
            procs = {n[:-len(".ids")] for n in logs if n.startswith(m + "-") and n.endswith(".ids")}
            runs = set(os.listdir(os.path.join(work, "runs")))
            check(procs and procs == {n for n in runs if n.startswith(m + "-")},
                  "%s: one run folder per process: processes %s, folders %s" % (m, sorted(procs), sorted(runs)))
            check(any(".rerun-" in n for n in procs), m + ": the reruns ran, in processes of their own")

        # Bad input: a clear message and exit 2.
        for extra, msg in ((["--modes", "plain,bogus"], "unknown mode 'bogus'"),
                           (["--files", "test_nothere.py"], "no test_nothere.py in"),
                           (["--time", "0"], "--time must be positive")):
            q = subprocess.run(base + extra, capture_output=True, text=True)
            check(q.returncode == 2 and msg in q.stderr, "%s: exit 2 naming it, got %d %r" % (extra, q.returncode, q.stderr))
        q = subprocess.run([sys.executable, harness, "run", "--tests", tests, "--shim", "/nonexistent.so",
                            "--work", work, "--files", "test_cuda.py"], capture_output=True, text=True)
        check(q.returncode == 2 and "/nonexistent.so" in q.stderr, "a missing shim is named")

        # Only the same outcomes: exit 0.
        p = subprocess.run(base + ["--files", "test_cuda.py"], capture_output=True, text=True)
        check(p.returncode == 0 and "result: no difference between modes in 3 tests" in p.stdout,
              "identical outcomes exit 0: %d %s" % (p.returncode, p.stdout[-300:]))

# Sharding: 12 tests and one that hangs in every mode, 4 shards per mode,
# all 12 processes at once: every test's outcome in every mode, the hang
# costing one timeout per mode, the three at the same time.
MANY = """
import os, time, unittest
class TestMany(unittest.TestCase):
    def test_hang_everywhere(self):
        with open(os.path.join(os.environ["HANG_LOG"]), "a") as f:
            f.write("%s %f\\n" % (os.environ.get("PINSCOPE_PIN", "0") + os.environ.get("LD_PRELOAD", ""), time.time()))
        time.sleep(300)
""" + "".join("""    def test_%02d(self):
        pass
""" % k for k in range(12))

with tempfile.TemporaryDirectory() as tmp:
    tests = planted(tmp, {"test_dataloader.py": MANY})
    work = os.path.join(tmp, "work")
    hang_log = os.path.join(tmp, "hangs")
    timeout = 6
    p = subprocess.run([sys.executable, harness, "run", "--tests", tests, "--shim", shim, "--work", work,
                        "--python", sys.executable, "--time", "120", "--test-timeout", str(timeout),
                        "--files", "test_dataloader.py", "--shards", "4", "--jobs", "12"],
                       capture_output=True, text=True, env=dict(os.environ, HANG_LOG=hang_log))
    print(p.stdout[-2500:], p.stderr[-1500:])
    rows = {}
    with open(os.path.join(work, "outcomes.tsv")) as f:
        for r in csv.DictReader(f, delimiter="\t"):
            rows[r["test"]] = (r["plain"], r["preload"], r["pin"])
    d = "test_dataloader.py::TestMany::"
    expect = dict((d + "test_%02d" % k, ("pass",) * 3) for k in range(12))
    expect[d + "test_hang_everywhere"] = ("timeout",) * 3
    check(rows == expect, "sharded: outcomes %r, expected %r" % (rows, expect))
    check(p.returncode == 0, "a hang in every mode is no difference, all ran: exit 0, not %d" % p.returncode)
    check("complete: 13 of 13 tests ran in every mode" in p.stdout, "the complete line")
    check("  test_dataloader.py: 13 of 13" in p.stdout, "the per-file line")
    shard_logs = [n for n in os.listdir(os.path.join(work, "logs")) if n.endswith(".ids")]
    for m in ("plain", "preload", "pin"):
        got = {n.split(".")[1] for n in shard_logs if n.startswith(m + "-test_dataloader.s")}
        check(got == {"s0", "s1", "s2", "s3"}, "%s: 4 shards, got %s" % (m, sorted(got)))
    starts = [float(l.split()[-1]) for l in open(hang_log)] if os.path.exists(hang_log) else []
    check(len(starts) == 3, "the hanging test started once per mode, not %d times" % len(starts))
    check(starts and max(starts) - min(starts) < timeout,
          "the three modes' timeouts overlap (started %.1f s apart)" % (max(starts) - min(starts) if starts else -1))

# A test file that takes longer to import and collect than --test-timeout
# (test_cuda.py, 16 processes starting at once on the H200): its tests run;
# before --collect-timeout every one was `notrun`.
with tempfile.TemporaryDirectory() as tmp:
    tests = planted(tmp, {"test_cuda.py": "import os, time, unittest\n"
                                         "if os.environ.get('SLOW_IMPORT'):\n    time.sleep(4)\n"
                                         "class TestCuda(unittest.TestCase):\n" +
                                         "".join("    def test_copy_%d(self):\n        pass\n" % k
                                                 for k in range(3))})
    work = os.path.join(tmp, "work")
    p = subprocess.run([sys.executable, harness, "run", "--tests", tests, "--shim", shim, "--work", work,
                        "--python", sys.executable, "--time", "90", "--test-timeout", "2",
                        "--collect-timeout", "30", "--files", "test_cuda.py"],
                       capture_output=True, text=True, env=dict(os.environ, SLOW_IMPORT="1"))
    print(p.stdout[-1500:], p.stderr[-1000:])
    check(p.returncode == 0 and "complete: 3 of 3 tests ran in every mode" in p.stdout,
          "slow collection: every test ran in every mode (exit %d)" % p.returncode)

# The compat shim: a name (and a module) the installed package lacks, taken
# from the 2.6 source; the installed definition wins where there is one; a
# name neither has leaves its file unlisted: incomplete, exit 1.
with tempfile.TemporaryDirectory() as tmp:
    tests = os.path.join(tmp, "tests")
    os.makedirs(os.path.join(tests, "fakepkg"))
    src = os.path.join(tmp, "src26")
    os.mkdir(src)
    files = {
        os.path.join(tests, "fakepkg", "__init__.py"): "",
        os.path.join(tests, "fakepkg", "common_cuda.py"): "present = 'installed'\n",
        os.path.join(src, "common_cuda.py"):
            "import os\npresent = '2.6'\ndef tf32_is_not_fp32():\n    return 'as in 2.6 ' + os.sep\n",
        os.path.join(src, "gone.py"): "thing = 42\n",
        os.path.join(tests, "test_torch.py"):
            "import unittest\n"
            "from fakepkg.common_cuda import present, tf32_is_not_fp32\n"
            "from fakepkg.gone import thing\n"
            "class TestTorch(unittest.TestCase):\n"
            "    def test_copy_shimmed(self):\n"
            "        self.assertEqual(tf32_is_not_fp32(), 'as in 2.6 /')\n"
            "        self.assertEqual(present, 'installed')\n"
            "        self.assertEqual(thing, 42)\n",
        os.path.join(tests, "test_cuda.py"):
            "import unittest\nfrom fakepkg.common_cuda import nowhere\n"
            "class TestCuda(unittest.TestCase):\n    def test_copy(self):\n        pass\n",
    }
    for path, text in files.items():
        with open(path, "w") as f:
            f.write(text)
    work = os.path.join(tmp, "work")
    base = [sys.executable, harness, "run", "--tests", tests, "--shim", shim, "--work", work,
            "--python", sys.executable, "--time", "60", "--test-timeout", "5",
            "--compat-src", src, "--compat-package", "fakepkg"]
    p = subprocess.run(base + ["--files", "test_torch.py"], capture_output=True, text=True)
    print(p.stdout[-1500:], p.stderr[-1500:])
    check(p.returncode == 0, "compat: exit 0, not %d" % p.returncode)
    check("test_torch.py::TestTorch::test_copy_shimmed  pass      pass      pass" in p.stdout,
          "compat: the shimmed test passes in every mode")
    check("fakepkg.common_cuda.tf32_is_not_fp32" in p.stdout and "module fakepkg.gone" in p.stdout
          and "fakepkg.common_cuda.present" not in p.stdout, "compat: each supplied name reported, once")
    p = subprocess.run(base + ["--files", "test_torch.py,test_cuda.py"], capture_output=True, text=True)
    check(p.returncode == 1 and "test_cuda.py: not listed (import failed)" in p.stdout
          and "complete: 1 of 1 tests ran in every mode; 1 files not listed (test_cuda.py)" in p.stdout,
          "compat: a name 2.6 lacks too: the file unlisted, incomplete, exit 1: %d %s" % (p.returncode, p.stdout[-600:]))



# The pool mode (PINSCOPE_PIN_POOL=1 on top of pin) and --cudart: every mode
# loads the CUDA runtime double at start-up and copies through it (so the
# pool and pinning are live without a GPU); a test that sees the pool
# differs in that mode only.
POOL = """
import os, unittest
class TestPool(unittest.TestCase):
    def test_woken(self):
        with open("/proc/self/maps") as f:
            self.assertIn(os.path.basename(os.environ["WANT_CUDART"]), f.read())
    def test_sees_pool(self):
        self.assertNotEqual(os.environ.get("PINSCOPE_PIN_POOL"), "1")
"""
with tempfile.TemporaryDirectory() as tmp:
    tests = planted(tmp, {"test_dataloader.py": POOL})
    env = dict(os.environ, WANT_CUDART=os.path.realpath(cudart))
    for woken in (True, False):
        work = os.path.join(tmp, "work%d" % woken)
        cmd = [sys.executable, harness, "run", "--tests", tests, "--shim", shim, "--work", work,
               "--python", sys.executable, "--time", "60", "--test-timeout", "5",
               "--files", "test_dataloader.py", "--modes", "plain,pool", "--runner", "unittest"]
        if woken:
            cmd += ["--cudart", cudart]
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        print(p.stdout[-1500:], p.stderr[-1500:])
        rows = {}
        with open(os.path.join(work, "outcomes.tsv")) as f:
            for r in csv.DictReader(f, delimiter="\t"):
                rows[r["test"]] = (r["plain"], r["pool"])
        d = "test_dataloader.py::TestPool::"
        w = "pass" if woken else "fail"
        expect = {d + "test_woken": (w, w), d + "test_sees_pool": ("pass", "fail")}
        check(rows == expect, "pool, woken %s: outcomes %r, expected %r" % (woken, rows, expect))
        check(p.returncode == 1, "pool: the difference exits 1, not %d" % p.returncode)
    q = subprocess.run([sys.executable, harness, "run", "--tests", tests, "--shim", shim, "--work", work,
                        "--files", "test_dataloader.py", "--cudart", "/nonexistent/libcudart.so"],
                       capture_output=True, text=True)
    check(q.returncode == 2 and "--cudart '/nonexistent/libcudart.so' is not a file" in q.stderr,
          "a missing --cudart is named: %d %r" % (q.returncode, q.stderr))

# test_multiprocessing.py runs whole, as test_dataloader.py: its tests send
# tensors between processes (where the pool's slots must escape), and few
# are named as copy tests. test_cuda.py beside it is still picked by name.
with tempfile.TemporaryDirectory() as tmp:
    tests = planted(tmp, {
        "test_multiprocessing.py": "import unittest\nclass TestMultiprocessing(unittest.TestCase):\n"
                                   "    def test_fd_sharing(self):\n        pass\n"
                                   "    def test_inherit_tensor(self):\n        pass\n",
        "test_cuda.py": "import unittest\nclass TestCuda(unittest.TestCase):\n"
                        "    def test_copy_x(self):\n        pass\n"
                        "    def test_streams(self):\n        pass\n",
    })
    work = os.path.join(tmp, "work")
    p = subprocess.run([sys.executable, harness, "run", "--tests", tests, "--shim", shim, "--work", work,
                        "--python", sys.executable, "--time", "60", "--test-timeout", "5",
                        "--files", "test_multiprocessing.py,test_cuda.py", "--modes", "plain,preload",
                        "--runner", "unittest"], capture_output=True, text=True)
    print(p.stdout[-1500:], p.stderr[-1500:])
    with open(os.path.join(work, "outcomes.tsv")) as f:
        got = sorted(r["test"] for r in csv.DictReader(f, delimiter="\t"))
    want = ["test_cuda.py::TestCuda::test_copy_x",
            "test_multiprocessing.py::TestMultiprocessing::test_fd_sharing",
            "test_multiprocessing.py::TestMultiprocessing::test_inherit_tensor"]
    check(got == want, "test_multiprocessing.py whole, test_cuda.py by name: %r" % got)
    check(p.returncode == 0, "no difference: exit 0, not %d" % p.returncode)

print("FAILED: %d checks" % len(fails) if fails else "ok")
sys.exit(1 if fails else 0)
