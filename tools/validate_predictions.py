#!/usr/bin/env python3
"""Checks a report's top recommendation against the gain measured when it is
applied (issue 13's protocol, docs/validation.md): records the job once under
`pinscope run`, takes the first recommendation of `pinscope report --json`
that pinscope can apply from outside (a DataLoader setting through the Python
hook, or pinscope's own variables), then runs the job REPS times as it is and
REPS times with the change, interleaved, and prints one JSON line: the
verdict, the change, the predicted speedup and the measured one (medians of
the loop's samples/s from the hook), and the error.

    tools/validate_predictions.py --name NAME [--reps 3] [--stop-after 80]
        [--warmup 10] [--runs DIR] [--pinscope PATH] -- CMD [ARGS...]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def run(pinscope, folder, cmd, env_extra, args):
    rate = folder + ".rate"
    if os.path.exists(rate):
        os.remove(rate)
    env = dict(os.environ)
    env.update(env_extra)
    env["PINSCOPE_STOP_AFTER"] = str(args.stop_after)
    env["PINSCOPE_STOP_WARMUP"] = str(args.warmup)
    env["PINSCOPE_THROUGHPUT"] = rate
    subprocess.run([pinscope, "run", "--no-report", "-f", "-o", folder, "--"] + cmd, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=args.timeout)
    try:
        with open(rate) as f:
            line = f.read().strip().splitlines()[-1]
        return json.loads(line).get("samples_per_s") or json.loads(line).get("batches_per_s")
    except (OSError, IndexError, ValueError):
        return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", required=True)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--stop-after", type=int, default=80)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--runs", default="/tmp/psv")
    ap.add_argument("--pinscope", default="pinscope")
    ap.add_argument("--timeout", type=int, default=180)
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.cmd[1:] if args.cmd and args.cmd[0] == "--" else args.cmd
    os.makedirs(args.runs, exist_ok=True)
    base_dir = os.path.join(args.runs, args.name + ".base-r0")
    run(args.pinscope, base_dir, cmd, {}, args)
    report = subprocess.run([args.pinscope, "report", "--json", base_dir], capture_output=True,
                            text=True)
    out = {"name": args.name, "command": cmd}
    try:
        j = json.loads(report.stdout)
    except ValueError:
        out["error"] = "no report: " + report.stderr[-300:]
        print(json.dumps(out), flush=True)
        return 1
    p = j.get("pipeline", {})
    out["verdict"] = j.get("verdict", {}).get("id")
    out["verdict_text"] = j.get("verdict", {}).get("text")
    loader = p.get("loader", {})
    out["loader"] = {k: loader.get(k) for k in ("site", "user_site", "framework")}
    top = next((x for x in p.get("predictions", []) if x.get("env") and not x.get("code_change")),
               None)
    if top is None:
        out["error"] = "no recommendation pinscope can apply"
        print(json.dumps(out), flush=True)
        return 0
    out["change"] = top["change"]
    out["predicted_speedup"] = round(top["speedup"], 3)
    out["where"] = top.get("where")
    base, applied = [], []
    for rep in range(1, args.reps + 1):
        base.append(run(args.pinscope, os.path.join(args.runs, f"{args.name}.base-r{rep}"), cmd, {},
                        args))
        applied.append(run(args.pinscope, os.path.join(args.runs, f"{args.name}.applied-r{rep}"), cmd,
                           top["env"], args))
    out["base_samples_per_s"] = base
    out["applied_samples_per_s"] = applied
    b = [x for x in base if x]
    a = [x for x in applied if x]
    if b and a:
        measured = statistics.median(a) / statistics.median(b)
        out["measured_speedup"] = round(measured, 3)
        out["error"] = round((top["speedup"] - measured) / measured, 3)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
