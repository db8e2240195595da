#!/usr/bin/env python3
"""tools/check_layers.py on the real tree (no violation) and on small trees
with one planted violation each (each must be named)."""
import os
import subprocess
import sys
import tempfile

ROOT = sys.argv[1]
CHECK = os.path.join(ROOT, "tools", "check_layers.py")


def run(root):
    p = subprocess.run([sys.executable, CHECK, root], capture_output=True, text=True)
    return p.returncode, p.stdout


def tree(files):
    d = tempfile.mkdtemp(prefix="pinscope-layers-")
    for rel, text in files.items():
        path = os.path.join(d, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    return d


failures = []
rc, out = run(ROOT)
if rc != 0:
    failures.append("the project tree has violations:\n" + out)

cases = {
    "upward include": ({"shim/record/recorder.cc": '#include "shim/pin/pinning.h"\n'},
                       "shim/record may not include shim/pin"),
    "analyzer reaching the shim": ({"analyzer/report/x.cc": '#include "shim/base/log.h"\n'},
                                   "analyzer/ includes shim/base/log.h"),
    "unknown folder": ({"shim/misc/x.cc": "\n"}, "is not a known layer"),
    "file too long": ({"analyzer/read/big.cc": "\n" * 950}, "over 900"),
    "cli reaching the shim": ({"cli/x.cc": '#include "shim/core/copy_path.h"\n'}, "the CLI includes the shim"),
    "cli reaching more of shim/base": ({"cli/x.cc": '#include "shim/base/guard.h"\n'},
                                       "the CLI includes the shim"),
}
for name, (files, expected) in cases.items():
    rc, out = run(tree(files))
    if rc != 1 or expected not in out:
        failures.append(f"{name}: exit {rc}, output {out!r}, expected {expected!r}")

ok = tree({"shim/pin/pinning.cc": '#include "shim/memory/real_alloc.h"\n#include "shim/pin/x.h"\n'})
rc, out = run(ok)
if rc != 0:
    failures.append(f"a downward include was refused: {out!r}")
# The one arrow from cli/ into the shim: its settings parser (cli/env_check.cc).
ok = tree({"cli/env_check.cc": '#include "shim/base/config.h"\n#include "shim/base/log.h"\n'})
rc, out = run(ok)
if rc != 0:
    failures.append(f"cli/ including shim/base/config.h and log.h was refused: {out!r}")

for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
