#!/usr/bin/env python3
"""GPU suite, issue 7: device activity through CUPTI (docs/device-activity.md).

Workloads, run under pinscope on a GPU machine (python3 with torch):
    pinscope run -o RUN -- python3 tests/gpu/cupti_check.py run
    pinscope run -o RUN -- python3 tests/gpu/cupti_check.py gpubound
    pinscope run -o RUN -- python3 tests/gpu/cupti_check.py profiler
(or LD_PRELOAD=.../libpinscope.so PINSCOPE_OUT=RUN python3 ...). Each writes
RUN/cupti_<mode>.json saying what it did, with CLOCK_MONOTONIC marks around
the measured phase. Then, on any machine (no torch, no protobuf needed):
    python3 tests/gpu/cupti_check.py check RUN [RUN...]
prints PASS/FAIL lines and exits 0 only if every check passed.

What is checked:
  run       between the marks, exactly 10 device memcpy records: 5 H2D
            pageable->device, 3 H2D pinned->device, 2 D2H device->pageable,
            4 MiB each, each joined by ExternalCorrelation to a CopyEvent of
            the same direction and memory kinds (what cudaPointerGetAttributes
            said) that did not start after it (clock alignment); exactly 10
            elementwise kernels (add_) and 4..12 other kernels (4 matmuls);
            one "cupti_started" notice, no "cupti_unavailable".
  gpubound  large matmuls on data already on the GPU: the union of kernel,
            memcpy and memset time covers >= 90% of the marked phase (the
            report's "not input-bound" case).
  profiler  torch.profiler runs in the middle: the job completes, the
            profiler's own trace has its 5 kernels and 4 memcpys, pinscope
            recorded the 3 copies before it (joined), said
            "cupti_unavailable" once when the profiler took CUPTI, recorded
            no device activity after that, and kept recording host copies (9).
"""
import glob
import json
import os
import subprocess
import sys
import time

MIB4 = 4 << 20

# --------------------------------------------------------------------------
# A minimal reader of pinscope's trace format (protobuf wire format, field
# numbers from proto/trace.proto), so the checker needs no generated code.

PACKET = {1: "timestamp_ns", 2: "tid", 10: "header", 11: "copy", 12: "sync", 16: "interned_string",
          20: "device", 21: "correlation", 24: "notice", 25: "exit"}
SCHEMA = {
    "header": {3: "pid", 5: "origin"},
    "copy": {1: "api", 3: "direction", 5: "bytes", 6: "src_kind", 7: "dst_kind", 12: "stream",
             13: "end_ns", 14: "result", 15: "call_id"},
    "sync": {1: "api", 3: "end_ns", 6: "call_id"},
    "interned_string": {1: "id", 2: "str"},
    "device": {1: "kind", 2: "start_ns", 3: "end_ns", 4: "bytes", 5: "direction", 6: "src_kind",
               7: "dst_kind", 8: "device_id", 9: "stream_id", 10: "correlation_id", 11: "name_id"},
    "correlation": {1: "correlation_id", 2: "call_id"},
    "notice": {1: "severity", 2: "code", 3: "text"},
    "exit": {1: "how", 2: "status"},
}
DIRECTION = {0: "UNKNOWN", 1: "H2H", 2: "H2D", 3: "D2H", 4: "D2D", 5: "PEER"}
MEMKIND = {0: "UNKNOWN", 1: "PAGEABLE", 2: "PINNED", 3: "DEVICE", 4: "MANAGED", 5: "SYMBOL"}
ACT = {0: "UNKNOWN", 1: "MEMCPY", 2: "MEMSET", 3: "KERNEL", 4: "SYNC"}
STRINGS = {("interned_string", 2), ("notice", 2), ("notice", 3)}


def _varint(buf, pos):
    value = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def _fields(buf):
    pos, out = 0, []
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 2:
            n, pos = _varint(buf, pos)
            value, pos = buf[pos:pos + n], pos + n
        elif wire == 1:
            value, pos = int.from_bytes(buf[pos:pos + 8], "little"), pos + 8
        elif wire == 5:
            value, pos = int.from_bytes(buf[pos:pos + 4], "little"), pos + 4
        else:
            raise ValueError(f"wire type {wire}")
        out.append((field, value))
    return out


def read_trace(path):
    """Returns the packets of one .pstrace file as dicts; stops at a cut-off tail."""
    data = open(path, "rb").read()
    if data.startswith(b"\x5a\x2a\x4d\x18"):  # compressed (docs/trace-format.md)
        data = subprocess.run(["zstd", "-dcq"], input=data, capture_output=True).stdout
    pos, packets = 0, []
    while pos < len(data):
        try:
            if data[pos] != 0x0A:
                break
            n, p = _varint(data, pos + 1)
        except IndexError:
            break
        if p + n > len(data):
            break
        pkt = {}
        for field, value in _fields(data[p:p + n]):
            name = PACKET.get(field)
            if name in SCHEMA:
                msg = {}
                for f, v in _fields(value):
                    if f in SCHEMA[name]:
                        msg[SCHEMA[name][f]] = v.decode() if (name, f) in STRINGS else v
                pkt["kind"], pkt[name] = name, msg
            elif name:
                pkt[name] = value
        packets.append(pkt)
        pos = p + n
    return packets


def load_process(run, pid):
    for path in glob.glob(os.path.join(run, "*.pstrace")):
        packets = read_trace(path)
        if packets and packets[0].get("header", {}).get("pid") == pid:
            return packets
    return None


def of(packets, kind):
    return [p[kind] | {"_ts": p.get("timestamp_ns", 0)} for p in packets if p.get("kind") == kind]


def union_ns(intervals, lo, hi):
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted((max(s, lo), min(e, hi)) for s, e in intervals if e > lo and s < hi):
        if cur_e is not None and s <= cur_e:
            cur_e = max(cur_e, e)
            continue
        if cur_e is not None:
            total += cur_e - cur_s
        cur_s, cur_e = s, e
    if cur_e is not None:
        total += cur_e - cur_s
    return total


# --------------------------------------------------------------------------
# Checks

class Checker:
    def __init__(self):
        self.failed = 0

    def expect(self, ok, what):
        print(("PASS " if ok else "FAIL ") + what)
        self.failed += 0 if ok else 1


def check_common(c, name, packets):
    notices = of(packets, "notice")
    started = [n for n in notices if n.get("code") == "cupti_started"]
    c.expect(len(started) == 1, f"{name}: one cupti_started notice ({len(started)})")
    for n in notices:
        if n.get("code", "").startswith("cupti"):
            print(f"  notice {n.get('code')}: {n.get('text')}")
    return notices


def check_run(c, run, exp, packets):
    notices = check_common(c, "run", packets)
    unavailable = [n for n in notices if n.get("code") == "cupti_unavailable"]
    c.expect(not unavailable, "run: no cupti_unavailable notice")
    t0, t1 = exp["t0"], exp["t1"]
    dev = [d for d in of(packets, "device") if t0 <= d.get("start_ns", 0) <= t1]
    names = {s["id"]: s.get("str", "") for s in of(packets, "interned_string")}
    calls = {}
    for cp in of(packets, "copy"):
        calls[cp.get("call_id", 0)] = ("copy", cp)
    for sy in of(packets, "sync"):
        calls[sy.get("call_id", 0)] = ("sync", sy)
    corr = {x.get("correlation_id", 0): x.get("call_id", 0) for x in of(packets, "correlation")}
    memcpy = [d for d in dev if d.get("kind") == 1]
    got = {}
    joined_ok = 0
    for d in memcpy:
        key = (DIRECTION[d.get("direction", 0)], MEMKIND[d.get("src_kind", 0)],
               MEMKIND[d.get("dst_kind", 0)], d.get("bytes", 0))
        got[key] = got.get(key, 0) + 1
        call = calls.get(corr.get(d.get("correlation_id", -1), -1))
        if call and call[0] == "copy":
            h = call[1]
            same = (h.get("direction", 0) == d.get("direction", 0) and
                    h.get("src_kind", 0) == d.get("src_kind", 0) and
                    h.get("dst_kind", 0) == d.get("dst_kind", 0) and h.get("bytes") == d.get("bytes"))
            # The device cannot start a copy before the host asked for it
            # (100 us allowed for the clock conversion).
            aligned = d["start_ns"] + 100_000 >= h["_ts"]
            joined_ok += same and aligned
            if not (same and aligned):
                print(f"  mismatch: device {d} host {h}")
    want = {("H2D", "PAGEABLE", "DEVICE", MIB4): 5, ("H2D", "PINNED", "DEVICE", MIB4): 3,
            ("D2H", "DEVICE", "PAGEABLE", MIB4): 2}
    c.expect(got == want, f"run: device memcpy records by (direction, src, dst, bytes) {got}")
    c.expect(joined_ok == 10, f"run: memcpys joined to a CopyEvent of the same kinds, in time "
                              f"order ({joined_ok}/10)")
    for d in memcpy:
        dur = d["end_ns"] - d["start_ns"]
        print(f"  {DIRECTION[d.get('direction', 0)]} {MEMKIND[d.get('src_kind', 0)]}->"
              f"{MEMKIND[d.get('dst_kind', 0)]} {d.get('bytes', 0)} B: device {dur / 1e3:.1f} us, "
              f"{d.get('bytes', 0) / max(dur, 1):.1f} GB/s")
    kernels = [d for d in dev if d.get("kind") == 3]
    elementwise = [k for k in kernels if "elementwise" in names.get(k.get("name_id", 0), "")]
    c.expect(len(elementwise) == 10, f"run: 10 elementwise kernels (add_) ({len(elementwise)})")
    others = len(kernels) - len(elementwise)
    c.expect(4 <= others <= 12, f"run: 4..12 matmul kernels ({others})")
    for k in sorted({names.get(k.get("name_id", 0), "?")[:90] for k in kernels}):
        print(f"  kernel {k}")
    c.expect(all(k.get("name_id", 0) in names for k in kernels), "run: every kernel name interned")


def check_gpubound(c, run, exp, packets):
    check_common(c, "gpubound", packets)
    t0, t1 = exp["t0"], exp["t1"]
    busy = [(d["start_ns"], d["end_ns"]) for d in of(packets, "device")
            if d.get("kind") in (1, 2, 3) and d.get("end_ns", 0) > d.get("start_ns", 0)]
    frac = union_ns(busy, t0, t1) / max(1, t1 - t0)
    c.expect(frac >= 0.9, f"gpubound: GPU busy {100 * frac:.1f}% of the marked phase (>= 90%)")
    ends = [p.get("timestamp_ns", 0) for p in packets if p.get("kind") == "exit"]
    starts = [n["_ts"] for n in of(packets, "notice") if n.get("code") == "cupti_started"]
    if ends and starts:
        whole = union_ns(busy, starts[0], ends[-1]) / max(1, ends[-1] - starts[0])
        print(f"  busy from cupti_started to exit: {100 * whole:.1f}%")


def check_profiler(c, run, exp, packets):
    notices = check_common(c, "profiler", packets)
    c.expect(exp.get("profiler_kernels", 0) >= 5 and exp.get("profiler_memcpys", 0) == 4,
             f"profiler: torch.profiler saw its kernels ({exp.get('profiler_kernels')}) and "
             f"memcpys ({exp.get('profiler_memcpys')})")
    unavailable = [n for n in notices if n.get("code") == "cupti_unavailable"]
    c.expect(len(unavailable) == 1, f"profiler: one cupti_unavailable notice ({len(unavailable)})")
    aside = unavailable[0]["_ts"] if unavailable else 0
    c.expect(unavailable and exp["t_before_profiler"] <= aside <= exp["t_after_profiler"],
             "profiler: pinscope stepped aside while the profiler started")
    memcpy = [d for d in of(packets, "device") if d.get("kind") == 1 and d.get("bytes") == MIB4]
    before = [d for d in memcpy if exp["t0"] <= d["start_ns"] <= exp["t_before_profiler"]]
    corr = {x.get("correlation_id", 0) for x in of(packets, "correlation")}
    c.expect(len(before) == 3 and all(d.get("correlation_id") in corr for d in before),
             f"profiler: 3 joined memcpys before the profiler ({len(before)})")
    after = [d for d in of(packets, "device") if aside and d["start_ns"] > aside]
    c.expect(not after, f"profiler: no device records after stepping aside ({len(after)})")
    copies = [x for x in of(packets, "copy") if x.get("bytes") == MIB4 and exp["t0"] <= x["_ts"]]
    c.expect(len(copies) == 9, f"profiler: 9 host copies recorded throughout ({len(copies)})")


def check(runs):
    c = Checker()
    for run in runs:
        files = sorted(glob.glob(os.path.join(run, "cupti_*.json")))
        c.expect(bool(files), f"{run}: a cupti_<mode>.json from the workload")
        for f in files:
            exp = json.load(open(f))
            packets = load_process(run, exp["pid"])
            c.expect(packets is not None, f"{run}: trace of pid {exp['pid']}")
            if packets is None:
                continue
            {"run": check_run, "gpubound": check_gpubound, "profiler": check_profiler}[exp["mode"]](
                c, run, exp, packets)
    print("PASS" if c.failed == 0 else f"FAIL ({c.failed} checks)")
    return 0 if c.failed == 0 else 1


# --------------------------------------------------------------------------
# Workloads (need torch and a GPU)

def out_path(mode):
    return os.path.join(os.environ.get("PINSCOPE_OUT", "."), f"cupti_{mode}.json")


def workload_run():
    import torch
    dev = torch.device("cuda")
    n = MIB4 // 4
    # Warm-up, before the marks: starts CUPTI (first copy), cuBLAS, the
    # allocator's blocks.
    a = torch.randn(1024, 1024).to(dev)
    b = torch.randn(1024, 1024).to(dev)
    c = torch.empty(1024, 1024, device=dev)
    torch.matmul(a, b, out=c)
    d = torch.zeros(n, device=dev)
    d.add_(1.0)
    host = torch.rand(n)
    pinned = torch.empty(n, pin_memory=True)
    pinned.copy_(host)
    g = host.to(dev)
    g2 = pinned.to(dev, non_blocking=True)
    back = d.cpu()
    torch.cuda.synchronize()
    del g, g2, back
    t0 = time.monotonic_ns()
    for _ in range(5):
        g = host.to(dev)                       # H2D pageable (blocking)
    for _ in range(3):
        g2 = pinned.to(dev, non_blocking=True)  # H2D pinned
    for _ in range(10):
        d.add_(1.0)                            # one elementwise kernel each
    for _ in range(4):
        torch.matmul(a, b, out=c)              # cuBLAS
    for _ in range(2):
        back = d.cpu()                         # D2H pageable
    torch.cuda.synchronize()
    t1 = time.monotonic_ns()
    assert float(back[0]) == 11.0
    return {"mode": "run", "pid": os.getpid(), "t0": t0, "t1": t1}


def workload_gpubound(seconds=8.0):
    import torch
    dev = torch.device("cuda")
    a = torch.randn(8192, 8192).to(dev)   # the only input copies
    b = torch.randn(8192, 8192).to(dev)
    c = torch.empty(8192, 8192, device=dev)
    torch.matmul(a, b, out=c)
    torch.cuda.synchronize()
    t0 = time.monotonic_ns()
    iters = 0
    while time.monotonic_ns() - t0 < seconds * 1e9:
        for _ in range(20):
            torch.matmul(a, b, out=c)
        iters += 20
        torch.cuda.synchronize()
    total = float(c[0, 0].item())
    t1 = time.monotonic_ns()
    return {"mode": "gpubound", "pid": os.getpid(), "t0": t0, "t1": t1, "matmuls": iters,
            "probe": total}


def workload_profiler():
    import torch
    from torch.profiler import ProfilerActivity, profile
    dev = torch.device("cuda")
    n = MIB4 // 4
    x = torch.rand(n)
    torch.zeros(1, device=dev)
    torch.cuda.synchronize()
    t0 = time.monotonic_ns()
    for _ in range(3):
        y = x.to(dev)
    torch.cuda.synchronize()
    t_before = time.monotonic_ns()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(4):
            y = x.to(dev)
        for _ in range(5):
            y.add_(1.0)
        torch.cuda.synchronize()
    t_after = time.monotonic_ns()
    trace = os.path.join(os.environ.get("PINSCOPE_OUT", "."), "torch_profiler_trace.json")
    prof.export_chrome_trace(trace)
    events = json.load(open(trace)).get("traceEvents", [])
    kernels = sum(1 for e in events if e.get("cat") == "kernel")
    memcpys = sum(1 for e in events if e.get("cat") == "gpu_memcpy")
    for _ in range(2):
        y = x.to(dev)
    torch.cuda.synchronize()
    return {"mode": "profiler", "pid": os.getpid(), "t0": t0, "t_before_profiler": t_before,
            "t_after_profiler": t_after, "profiler_kernels": kernels, "profiler_memcpys": memcpys,
            "profiler_trace": trace}


def main(argv):
    if len(argv) >= 2 and argv[1] == "check":
        return check(argv[2:])
    if len(argv) != 2 or argv[1] not in ("run", "gpubound", "profiler"):
        print(__doc__)
        return 2
    result = {"run": workload_run, "gpubound": workload_gpubound,
              "profiler": workload_profiler}[argv[1]]()
    with open(out_path(argv[1]), "w") as f:
        json.dump(result, f, indent=1)
    print(f"cupti_check {argv[1]}: done, {out_path(argv[1])}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
