#!/usr/bin/env python3
"""Checks that every source file includes only its own layer and the layers
below it (shim/README.md, analyzer/README.md, docs/architecture.md), and that
no source file of shim/, analyzer/ or cli/ is longer than the limit.

    tools/check_layers.py [ROOT]      exit 0 when clean, 1 with one line per violation

The tables below are the architecture: a new folder or a new arrow starts
here, on purpose.
"""
import os
import re
import sys

# layer -> layers it may include (its own folder is always allowed).
SHIM = {
    "base": [],
    "record": ["base"],
    "stacks": ["base", "record"],
    "memory": ["base"],
    "cuda": ["base", "record"],
    "pin": ["base", "record", "memory", "cuda"],
    "device": ["base", "record", "cuda"],
    "core": ["base", "record", "stacks", "memory", "cuda", "pin", "device"],
    "process": ["base", "record", "stacks", "memory", "cuda", "pin", "device", "core"],
    "interpose": ["base", "record", "stacks", "memory", "cuda", "pin", "device", "core", "process"],
}
ANALYZER = {
    "common": [],
    "read": ["common"],
    "replay": ["common", "read"],
    "model": ["common", "read"],
    "analyses": ["common", "read", "replay", "model"],
    "symbols": ["common", "read", "replay", "symbolize"],
    "report": ["common", "read", "replay", "analyses", "model", "symbols"],
    "export": ["common", "read", "replay", "analyses", "model", "symbols"],
    "diff": ["common", "read", "replay", "analyses", "model", "report"],
    "html": ["common", "read", "replay", "analyses", "model", "report"],
    "tune": ["common", "read", "replay", "analyses", "model", "report"],
    "symbolize": [],
}
MAX_LINES = 900
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def check(root):
    problems = []
    for top, table in (("shim", SHIM), ("analyzer", ANALYZER), ("cli", None)):
        base = os.path.join(root, top)
        for dirpath, _, names in os.walk(base):
            for name in sorted(names):
                if not name.endswith((".cc", ".h")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                with open(path, encoding="utf-8") as f:
                    lines = f.read().split("\n")
                if len(lines) - 1 > MAX_LINES:
                    problems.append(f"{rel}: {len(lines) - 1} lines, over {MAX_LINES}: split it along its sections")
                if table is None:
                    # cli/ may include the analyzer and itself, and of the shim
                    # only shim/base's settings parser and its log (env_check.cc:
                    # `pinscope run` checks PINSCOPE_* with the shim's own rules).
                    for n, line in enumerate(lines, 1):
                        m = INCLUDE.match(line)
                        if m and m.group(1) in ("shim/base/config.h", "shim/base/log.h"):
                            continue
                        if m and m.group(1).startswith("shim/"):
                            problems.append(f"{rel}:{n}: the CLI includes the shim ({m.group(1)})")
                    continue
                parts = os.path.relpath(path, base).split(os.sep)
                if len(parts) < 2:
                    problems.append(f"{rel}: a source file outside the layer folders of {top}/")
                    continue
                layer = parts[0]
                if layer not in table:
                    problems.append(f"{rel}: folder {top}/{layer} is not a known layer (tools/check_layers.py)")
                    continue
                allowed = set(table[layer]) | {layer}
                for n, line in enumerate(lines, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    target = m.group(1).split("/")
                    if target[0] in ("shim", "analyzer") and target[0] != top:
                        problems.append(f"{rel}:{n}: {top}/ includes {m.group(1)}")
                    elif target[0] == top and len(target) > 2 and target[1] not in allowed:
                        problems.append(f"{rel}:{n}: {top}/{layer} may not include {top}/{target[1]} ({m.group(1)})")
                    elif target[0] == top and len(target) == 2:
                        problems.append(f"{rel}:{n}: include of a file outside the layer folders ({m.group(1)})")
    return problems


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    problems = check(root)
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
