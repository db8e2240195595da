#!/usr/bin/env python3
"""Memory of report and export follows the live state, not the trace length.

Writes synthetic runs of 0.5 M and 2 M events with tools/bench/replay_bench
(the DataLoader mix; `--dense`, the same mix with a step and a /dev/shm
segment every 34 events instead of 864; `--copies`: half the events copies;
`--hooked`: a job with pinscope's Python hook, a step every 5 events), then
measures the peak RSS (the child's ru_maxrss) of `replay_bench replay` (the
report's replay, every analysis, the text report) and of `pinscope export
--perfetto` on each. Four times the events may add only a few MiB, and only
what is known to grow: in the report, the batch loop's copies
(analyzer/analyses/batch_copies.h: one per step, 24 bytes, and Finish's
lists, as they are up to 65,536, a bounded sample beyond); in the export,
nothing. Anything else kept per step or per event (the step model's calls,
which it kept up to 2^20 before they were folded per step: 16 MiB more at
2 M `--dense` events; its loader spans, kept up to 2^20 a kind before
they were folded too: 108 MiB more from 100,000 to 400,000 `--hooked`
steps; the export's record of every shm segment: 4.5 MiB more) adds more than the slack and fails. RSS is not
timing: the bounds do not depend on the machine's speed or load.

usage: memory_flat_test.py REPLAY_BENCH PINSCOPE WORKDIR
"""
import os
import shutil
import subprocess
import sys

MIB = 1024 * 1024


def peak_rss_kib(argv):
    """Runs argv in a child and returns its ru_maxrss (KiB)."""
    pid = os.fork()
    if pid == 0:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        try:
            os.execv(argv[0], argv)
        finally:
            os._exit(127)
    _, status, usage = os.wait4(pid, 0)
    if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
        sys.exit(f"FAIL: {' '.join(argv)} exited with status {status:#x}")
    return usage.ru_maxrss


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    bench, pinscope, work = sys.argv[1:]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    failures = []
    try:
        # (name, flags, what is known to grow from 0.5 M to 2 M events, KiB)
        # The batch loop keeps each batch copy for its medians (24 B, a
        # vector's doubling up to 48 B, and Finish's intervals, copy times
        # and scratch list: 24 B more), up to 65,536 of them (then a sample
        # of that size): one per step, a step every 4 events with --copies
        # (an H2D batch copy, a sync, a D2H copy, a sync), 5 with --hooked,
        # 34 with --dense, 864 in the mix.
        def batches_kib(events_per_step):
            def kept(events):
                return min(events // events_per_step, 1 << 16)
            return (kept(2000000) - kept(500000)) * 72 // 1024
        cases = [("mix", [], batches_kib(864)), ("dense", ["--dense"], batches_kib(34)),
                 ("copies", ["--copies"], batches_kib(4)), ("hooked", ["--hooked"], batches_kib(5))]
        # Anything else: less than 3 bytes per event more in the report, 1.4
        # in the export.
        slack_kib = {"report": 4 * 1024, "export": 2 * 1024}
        for name, flags, known_kib in cases:
            rss = {}
            for events in (500000, 2000000):
                run = os.path.join(work, f"{name}-{events}")
                subprocess.run([bench, *flags, "generate", run, str(events)], check=True,
                               stdout=subprocess.DEVNULL)
                report = peak_rss_kib([bench, "replay", run])
                export = peak_rss_kib(
                    [pinscope, "export", "--perfetto", os.path.join(work, "out.pftrace"), run])
                os.unlink(os.path.join(work, "out.pftrace"))
                shutil.rmtree(run)
                rss[events] = (report, export)
                print(f"{name} {events} events: report {report} KiB, export {export} KiB")
            for i, what in enumerate(("report", "export")):
                small, large = rss[500000][i], rss[2000000][i]
                # Growth allowed: what is known, the slack, and 10% of the
                # small run (the allocator's arenas, page rounding).
                limit = small + small // 10 + (known_kib if what == "report" else 0) + slack_kib[what]
                if large > limit:
                    failures.append(f"{name} {what}: {large} KiB at 2 M events against {small} "
                                    f"KiB at 0.5 M (limit {limit} KiB): memory grows with the trace")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
