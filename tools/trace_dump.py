#!/usr/bin/env python3
"""Prints every packet of pinscope trace files as one JSON object per line.

    tools/trace_dump.py [--pb2-dir DIR] RUN_DIR_OR_FILE...

Needs the Python protobuf module and trace_pb2.py, which the build writes to
BUILD/python (found automatically in build*/python, or give --pb2-dir).
Also importable: `load_run(path)` returns {file: [packets]} for checkers.
"""
import glob
import json
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _import_pb2(pb2_dir=None):
    cands = [pb2_dir] if pb2_dir else []
    cands += sorted(glob.glob(os.path.join(_HERE, "..", "build*", "python")))
    for c in cands:
        if c and os.path.exists(os.path.join(c, "trace_pb2.py")):
            sys.path.insert(0, c)
            break
    import trace_pb2  # noqa: E402
    return trace_pb2


# The compressed container (docs/trace-format.md, "Compression"): a zstd
# skippable frame, then zstd frames. Decoded with the `zstandard` module if
# installed, else the `zstd` tool; a cut file gives the frames before the cut.
_PREAMBLE_MAGIC = b"\x5a\x2a\x4d\x18"


def packet_bytes(path):
    """Returns (bytes of the packet stream, problem or None) of one trace file."""
    data = open(path, "rb").read()
    if not data.startswith(_PREAMBLE_MAGIC):
        return data, None
    try:
        import zstandard  # noqa: E402
        out, reader = [], zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True)
        try:
            while chunk := reader.read(1 << 20):
                out.append(chunk)
        except zstandard.ZstdError as e:
            return b"".join(out), f"{path}: compressed trace damaged or cut: {e}"
        return b"".join(out), None
    except ImportError:
        pass
    import subprocess
    try:
        r = subprocess.run(["zstd", "-dcq"], input=data, capture_output=True, check=False)
    except FileNotFoundError:
        sys.exit(f"{path}: a compressed trace; install the zstd tool or Python's zstandard "
                 "module, or record with PINSCOPE_COMPRESS=0")
    problem = None if r.returncode == 0 else f"{path}: compressed trace damaged or cut: " + \
        r.stderr.decode(errors="replace").strip()
    return r.stdout, problem


def _varint(data, pos):
    shift = 0
    value = 0
    while True:
        if pos >= len(data):
            raise EOFError
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def read_file(path, pb2):
    """Returns (packets, problem) where problem is None or a message."""
    data, problem = packet_bytes(path)
    if problem:
        print(problem, file=sys.stderr)
    pos = 0
    packets = []
    while pos < len(data):
        start = pos
        if data[pos] != 0x0A:
            return packets, f"{path}: corrupt at byte {start}: tag 0x{data[pos]:02x}"
        try:
            length, pos = _varint(data, pos + 1)
        except EOFError:
            return packets, f"{path}: truncated after byte {start}"
        if pos + length > len(data):
            return packets, f"{path}: truncated after byte {start}"
        p = pb2.TracePacket()
        p.ParseFromString(data[pos:pos + length])
        packets.append(p)
        pos += length
    return packets, None


def load_run(path, pb2_dir=None):
    pb2 = _import_pb2(pb2_dir)
    files = [path] if os.path.isfile(path) else sorted(glob.glob(os.path.join(path, "*.pstrace")))
    out = {}
    for f in files:
        packets, problem = read_file(f, pb2)
        if problem:
            print(problem, file=sys.stderr)
        out[f] = packets
    return out


def main(argv):
    pb2_dir = None
    if len(argv) > 2 and argv[1] == "--pb2-dir":
        pb2_dir = argv[2]
        argv = argv[2:]
    from google.protobuf.json_format import MessageToDict
    for path in argv[1:]:
        for f, packets in load_run(path, pb2_dir).items():
            for p in packets:
                d = MessageToDict(p, preserving_proto_field_name=True)
                d["_file"] = os.path.basename(f)
                print(json.dumps(d))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
