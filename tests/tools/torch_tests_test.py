#!/usr/bin/env python3
"""tools/torch_tests.py (the PyTorch-tests GPU check's harness) on test
files planted here: a test that fails only preloaded, one that kills its
process only under PINSCOPE_PIN=1, one that hangs only there, one that fails
in every mode (version skew, not a difference), and the copy-test selection
by name. Needs no torch: the harness's unittest driver runs plain unittest.

    torch_tests_test.py TOOLS_DIR LIBPINSCOPE
"""
import csv
import os
import subprocess
import sys
import tempfile

tools, shim = sys.argv[1], sys.argv[2]
harness = os.path.join(tools, "torch_tests.py")
fails = []


def check(cond, what):
    if not cond:
        fails.append(what)
        print("FAIL: " + what)


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

with tempfile.TemporaryDirectory() as tmp:
    tests = os.path.join(tmp, "tests")
    os.mkdir(tests)
    with open(os.path.join(tests, "test_dataloader.py"), "w") as f:
        f.write(DATALOADER)
    with open(os.path.join(tests, "test_cuda.py"), "w") as f:
        f.write(CUDA)
    work = os.path.join(tmp, "work")
    base = [sys.executable, harness, "run", "--tests", tests, "--shim", shim, "--work", work,
            "--python", sys.executable, "--time", "120", "--test-timeout", "3"]
    p = subprocess.run(base + ["--files", "test_dataloader.py,test_cuda.py"], capture_output=True, text=True)
    print(p.stdout[-4000:], p.stderr[-2000:])
    check(p.returncode == 1, "a run with differences exits 1, not %d" % p.returncode)
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
    check(rows == expect, "outcomes %r, expected %r" % (rows, expect))
    out = p.stdout
    for t in ("test_sees_preload", "test_crash_pinned", "test_hang_pinned"):
        check(any(t in l and "confirmed" in l for l in out.splitlines()),
              "%s: the difference is confirmed alone" % t)
    check("test_skew: " not in out, "a test failing in every mode is not a difference")
    check("result: 3 tests differ between modes" in out, "the result line counts 3 differences")
    check("Differences between modes (3)" in out, "three differences listed")

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

print("FAILED: %d checks" % len(fails) if fails else "ok")
sys.exit(1 if fails else 0)
