#!/usr/bin/env python3
"""tools/bench/loop_counters.py (issue 16): a run's hooks a step in its
loop. On the Hugging Face Trainer's trace recorded on the H100 (an older
shim: no kinds), exact; on a DataLoader loop on the CPU recorded now, the
kinds a step, exact (3 shared-memory events and 2 DataLoader spans a batch
in the main process: the map, the unmap and its end; __next__ and the
receive)."""
import os
import subprocess
import sys
import tempfile

tools, data, pb2, pinscope = sys.argv[1:5]
script = os.path.join(tools, "bench", "loop_counters.py")
fails = []


def run(*args):
    r = subprocess.run([sys.executable, script, "--pb2-dir", pb2, *args], capture_output=True,
                       text=True, timeout=120)
    if r.returncode != 0:
        fails.append("%s: exit %d: %s" % (args, r.returncode, r.stderr[-1000:]))
    return r.stdout


out = run(os.path.join(data, "h100", "cost", "hf_trainer"))
want = ("hf_trainer: 201 steps (loader:LOADER_NEXT / 1), 12.7 hooks a step, 403.6 us of hooks a "
        "step; of it stacks 146.5 us, pointer queries 0.0 us, CUPTI switches 0.0 us\n")
if out != want:
    fails.append("hf_trainer: %r, expected %r" % (out, want))
# mlp12 in turns: one copy a step, counted by it (its Python hook saw no
# DataLoader).
out = run("--per-step", "copy:H2D=1", os.path.join(data, "h100", "cost", "turns_mlp12"))
if not out.startswith("turns_mlp12: 4650 steps (copy:H2D / 1), 2.0 hooks a step, 11.2 us of "):
    fails.append("turns_mlp12: %r" % out)

# --after-steps: from the first Counters packet past step 1000 (4750 steps
# to the last but one, where a quarter of the counters gives 4650); past
# the run's steps, said.
out = run("--per-step", "copy:H2D=1", "--after-steps", "1000",
          os.path.join(data, "h100", "cost", "turns_mlp12"))
if not out.startswith("turns_mlp12: 4750 steps (copy:H2D / 1), 2.0 hooks a step, 11.2 us of "):
    fails.append("turns_mlp12 --after-steps 1000: %r" % out)
out = run("--per-step", "copy:H2D=1", "--after-steps", "100000",
          os.path.join(data, "h100", "cost", "turns_mlp12"))
if "5790 step events, not past --after-steps 100000" not in out:
    fails.append("turns_mlp12 --after-steps 100000: %r" % out)

# A DataLoader loop on the CPU under today's shim: the kinds, exact a step.
folder = os.path.join(tempfile.mkdtemp(prefix="loop-counters-"), "run")
env = dict(os.environ, PINSCOPE_FLUSH_MS="50")
r = subprocess.run([pinscope, "run", "--no-report", "-o", folder, "--", sys.executable,
                    os.path.join(tools, "bench", "shm_loader_loop.py"), "600"],
                   capture_output=True, text=True, timeout=240, env=env)
if r.returncode != 0:
    fails.append("loop: exit %d: %s" % (r.returncode, r.stderr[-1000:]))
else:
    out = run(folder)
    if " 5.0 hooks a step, " not in out or "(shm 3.0 a step, " not in out or \
            ", loader 2.0 a step, " not in out:
        fails.append("loop: %r" % out)

if fails:
    print("\n".join(fails))
    sys.exit(1)
print("loop_counters: all checks passed")
