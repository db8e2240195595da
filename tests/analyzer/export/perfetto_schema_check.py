#!/usr/bin/env python3
"""Validates a `pinscope export --perfetto` file with Perfetto's OWN schema.

Perfetto's PyPI package `perfetto` ships its merged trace schema compiled for
Python (perfetto/protos/perfetto/trace/perfetto_trace_pb2.py). Its
TraceProcessor needs a binary downloaded at run time, which CI cannot do, so
this script uses the schema alone: it loads the serialized FileDescriptorProto
embedded in that module (without executing the module, whose protobuf
runtime check wants protobuf >= 6 while Debian 12 has 4.21), parses every
packet with perfetto.protos.TracePacket, requires that no field is unknown to
Perfetto and that re-serializing gives the same bytes, applies the rules
trace_processor applies to TrackEvent traces, and prints the same canonical
text as perfetto_dump.cc (tests/analyzer/export), to diff with --expect.

Exit: 0 valid (and equal to --expect); 1 invalid or different; 77 the
perfetto package is not installed (skipped; an error when $CI is set).
Install: /usr/bin/python3 -m pip install --break-system-packages --no-deps perfetto==0.59.1
"""
import argparse
import ast
import difflib
import importlib.util
import os
import sys

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

SKIP = 77


def find_schema_module(explicit):
    if explicit:
        return explicit
    spec = importlib.util.find_spec("perfetto")  # does not run perfetto/__init__
    if spec is None or not spec.submodule_search_locations:
        return None
    for base in spec.submodule_search_locations:
        path = os.path.join(base, "protos", "perfetto", "trace", "perfetto_trace_pb2.py")
        if os.path.exists(path):
            return path
    return None


def load_trace_packet_class(pb2_path):
    """perfetto.protos.TracePacket from the descriptor embedded in the pb2."""
    with open(pb2_path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    blob = None
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "AddSerializedFile"
                and node.args and isinstance(node.args[0], ast.Constant)):
            blob = node.args[0].value
    if blob is None:
        raise RuntimeError(pb2_path + ": no serialized descriptor found")
    file_proto = descriptor_pb2.FileDescriptorProto.FromString(blob)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file_proto)
    descriptor = pool.FindMessageTypeByName("perfetto.protos.TracePacket")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(descriptor)
    return message_factory.MessageFactory(pool).GetPrototype(descriptor)


def split_packets(data):
    """Raw bytes of each Trace.packet field (tag 0x0A, varint length)."""
    packets, at = [], 0
    while at < len(data):
        if data[at] != 0x0A:
            raise ValueError("byte %d: tag 0x%02X is not Trace.packet" % (at, data[at]))
        at += 1
        length, shift = 0, 0
        while True:
            byte = data[at]
            at += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        if at + length > len(data):
            raise ValueError("packet at byte %d is cut off" % at)
        packets.append(data[at:at + length])
        at += length
    return packets


def unknown_fields(message, path="packet"):
    """Paths of fields Perfetto's schema does not know, in message and below."""
    found = []
    try:
        from google.protobuf import unknown_fields as uf  # protobuf >= 25
        count = len(uf.UnknownFieldSet(message))
    except ImportError:
        count = len(message.UnknownFields())
    if count:
        found.append("%s: %d unknown field(s)" % (path, count))
    for field, value in message.ListFields():
        if field.type != field.TYPE_MESSAGE:
            continue
        values = value if field.label == field.LABEL_REPEATED else [value]
        for i, child in enumerate(values):
            found += unknown_fields(child, "%s.%s[%d]" % (path, field.name, i))
    return found


def quote(text):
    return '"' + text + '"'


def string_list(items):
    return "[" + ",".join(quote(i) for i in items) + "]"


def annotation_text(a):
    kind = a.WhichOneof("value")
    if kind == "bool_value":
        value = "true" if a.bool_value else "false"
    elif kind in ("uint_value", "int_value"):
        value = str(getattr(a, kind))
    elif kind == "double_value":
        value = "%.6g" % a.double_value
    elif kind == "string_value":
        value = quote(a.string_value)
    else:
        value = "?"
    return a.name + "=" + value


def dump(packet_class, data):
    """(canonical text, errors, counts): the same text as perfetto_dump.cc."""
    errors = []
    raw_packets = split_packets(data)
    packets = []
    for i, raw in enumerate(raw_packets):
        packet = packet_class.FromString(raw)
        errors += ["packet %d: %s" % (i, u) for u in unknown_fields(packet)]
        if packet.SerializeToString() != raw:
            errors.append("packet %d: re-serialized bytes differ" % i)
        packets.append(packet)

    SEQ_CLEARED, SEQ_NEEDS = 1, 2
    TYPE_BEGIN, TYPE_END, TYPE_COUNTER = 1, 2, 4
    interned = {"event": {}, "annotation": {}, "category": {}}
    name_strings = {}
    tracks = {}  # uuid -> [order, descriptor]
    events = {}  # uuid -> [(ts, index, event)]
    sequence = None
    for i, p in enumerate(packets):
        where = "packet %d: " % i
        if not p.HasField("trusted_packet_sequence_id") or p.trusted_packet_sequence_id == 0:
            errors.append(where + "no trusted_packet_sequence_id")
        elif i == 0:
            sequence = p.trusted_packet_sequence_id
        elif p.trusted_packet_sequence_id != sequence:
            errors.append(where + "another sequence id")
        if i == 0 and not p.sequence_flags & SEQ_CLEARED:
            errors.append(where + "first packet does not clear the incremental state")
        if i > 0 and p.sequence_flags & SEQ_CLEARED:
            errors.append(where + "incremental state cleared again")
        if p.HasField("interned_data"):
            if not p.sequence_flags & (SEQ_CLEARED | SEQ_NEEDS):
                errors.append(where + "interned data without incremental state flags")
            for kind, entries in (("event", p.interned_data.event_names),
                                  ("annotation", p.interned_data.debug_annotation_names),
                                  ("category", p.interned_data.event_categories)):
                for entry in entries:
                    if entry.iid == 0:
                        errors.append(where + kind + " iid 0")
                    if entry.iid in interned[kind]:
                        errors.append(where + "%s iid %d interned again" % (kind, entry.iid))
                    interned[kind][entry.iid] = entry.name
        data_case = p.WhichOneof("data")
        if data_case == "track_descriptor":
            d = p.track_descriptor
            if d.uuid == 0:
                errors.append(where + "track uuid 0")
            if d.HasField("parent_uuid") and d.parent_uuid not in tracks:
                errors.append(where + "parent track not described yet")
            if d.HasField("thread"):
                parent = tracks.get(d.parent_uuid)
                if (parent is None or not parent[1].HasField("process")
                        or parent[1].process.pid != d.thread.pid):
                    errors.append(where + "thread track's parent is not its process")
            if d.uuid in tracks:
                old = tracks[d.uuid][1]
                if (old.HasField("thread") != d.HasField("thread")
                        or old.HasField("process") != d.HasField("process")
                        or (d.HasField("thread") and old.thread.tid != d.thread.tid)):
                    errors.append(where + "track described again as another kind")
                tracks[d.uuid][1] = d
            else:
                tracks[d.uuid] = [len(tracks) + 1, d]
        elif data_case == "track_event":
            e = p.track_event
            if (e.HasField("name_iid") or e.category_iids) and not p.sequence_flags & SEQ_NEEDS:
                errors.append(where + "interned ids without SEQ_NEEDS_INCREMENTAL_STATE")
            if e.HasField("name"):
                name_strings[e.name] = name_strings.get(e.name, 0) + 1
            if e.HasField("name_iid"):
                if e.name_iid not in interned["event"]:
                    errors.append(where + "unknown event name iid")
                e.name = interned["event"].get(e.name_iid, "?")
            for iid in e.category_iids:
                if iid not in interned["category"]:
                    errors.append(where + "unknown category iid")
                e.categories.append(interned["category"].get(iid, "?"))
            del e.category_iids[:]
            for a in e.debug_annotations:
                if a.HasField("name_iid"):
                    if a.name_iid not in interned["annotation"]:
                        errors.append(where + "unknown annotation name iid")
                    a.name = interned["annotation"].get(a.name_iid, "?")
            if e.track_uuid not in tracks:
                errors.append(where + "event on a track not described yet")
                continue
            is_counter = tracks[e.track_uuid][1].HasField("counter")
            if e.type == TYPE_COUNTER and not is_counter:
                errors.append(where + "counter value on a non-counter track")
            if e.type != TYPE_COUNTER and is_counter:
                errors.append(where + "slice on a counter track")
            events.setdefault(e.track_uuid, []).append((p.timestamp, i, e))
        else:
            errors.append(where + "neither a track descriptor nor a track event")

    def label(uuid):
        if uuid not in tracks:
            return "-"
        d = tracks[uuid][1]
        if d.HasField("process"):
            return "process %d" % d.process.pid
        if d.HasField("thread"):
            return "thread %d/%d" % (d.thread.pid, d.thread.tid)
        return quote(d.name)

    ordered = sorted(tracks.items(), key=lambda item: item[1][0])
    out = ["tracks"]
    for uuid, (_, d) in ordered:
        if d.HasField("process"):
            p = d.process
            out.append("  process pid=%d name=%s cmdline=%s labels=%s start=%d" % (
                p.pid, quote(p.process_name), string_list(p.cmdline),
                string_list(p.process_labels), p.start_timestamp_ns))
        elif d.HasField("thread"):
            out.append("  thread pid=%d tid=%d name=%s parent=%s" % (
                d.thread.pid, d.thread.tid, quote(d.thread.thread_name), label(d.parent_uuid)))
        elif d.HasField("counter"):
            unit = d.counter.DESCRIPTOR.fields_by_name["unit"].enum_type.values_by_number[
                d.counter.unit].name
            out.append("  counter name=%s unit=%s parent=%s" % (
                quote(d.name), unit, label(d.parent_uuid)))
        else:
            out.append("  track name=%s parent=%s" % (quote(d.name), label(d.parent_uuid)))

    for name, count in sorted(name_strings.items()):
        if count > 1:
            errors.append('name "%s" sent as a string %d times, not interned' % (name, count))
    slices, counters = ["slices"], ["counters"]
    n_slices = n_counters = 0
    for uuid, _ in ordered:
        items = sorted(events.get(uuid, []), key=lambda item: item[0])  # stable
        open_slices, done = [], []
        for ts, index, e in items:
            if e.type == TYPE_BEGIN:
                open_slices.append((ts, index, e))
            elif e.type == TYPE_END:
                if not open_slices:
                    errors.append("END without BEGIN on " + label(uuid))
                    continue
                begin = open_slices.pop()
                done.append((begin, ts - begin[0]))
            elif e.type == TYPE_COUNTER:
                value = ("%.6g" % e.double_counter_value
                         if e.HasField("double_counter_value") else str(e.counter_value))
                counters.append("  %s ts=%d value=%s" % (label(uuid), ts, value))
                n_counters += 1
            else:
                errors.append("unexpected event type on " + label(uuid))
        if open_slices:
            errors.append("unclosed slice on " + label(uuid))
        done.sort(key=lambda item: (item[0][0], item[0][1]))
        for (ts, _, e), duration in done:
            slices.append("  %s ts=%d dur=%d %s categories=%s" % (
                label(uuid), ts, duration, quote(e.name), string_list(e.categories)))
            for a in e.debug_annotations:
                slices.append("    " + annotation_text(a))
            n_slices += 1
    # Flows (trace_processor's v1 flow ids): flow_ids starts one at a slice,
    # terminating_flow_ids ends it at a later one.
    begins = []
    for uuid, _ in ordered:
        for ts, index, e in events.get(uuid, []):
            if e.type == TYPE_BEGIN:
                begins.append((ts, index, "%s ts=%d" % (label(uuid), ts), e))
    begins.sort(key=lambda item: (item[0], item[1]))
    starts, flow_lines = {}, []
    for _, _, where, e in begins:
        for fid in e.flow_ids:
            if fid in starts:
                errors.append("flow %d started twice" % fid)
            starts[fid] = where
        for fid in e.terminating_flow_ids:
            if fid not in starts:
                errors.append("flow %d ends without a start" % fid)
                continue
            flow_lines.append("  %s -> %s" % (starts.pop(fid), where))
    flows = ["flows %d" % len(flow_lines)] + (flow_lines if len(flow_lines) <= 64 else [])
    text = "\n".join(out + slices + counters + flows) + "\n"
    return text, errors, (len(packets), n_slices, n_counters, len(flow_lines))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", help="the exported Perfetto file")
    parser.add_argument("--expect", help="canonical text the dump must equal")
    parser.add_argument("--schema", help="path of perfetto_trace_pb2.py (default: the "
                        "installed perfetto package's)")
    parser.add_argument("--min-slices", type=int, default=1)
    parser.add_argument("--expect-flows", type=int, help="exact number of flows")
    parser.add_argument("--expect-slices", type=int, help="exact number of slices")
    args = parser.parse_args()

    pb2 = find_schema_module(args.schema)
    if pb2 is None:
        message = ("perfetto_schema_check: Perfetto's schema not found (pip package "
                   "'perfetto' not installed; see tools/deps.sh)")
        print(message, file=sys.stderr)
        return 1 if os.environ.get("CI") else SKIP
    packet_class = load_trace_packet_class(pb2)
    with open(args.trace, "rb") as f:
        data = f.read()
    try:
        if data[:2] == b"\x1f\x8b":  # gzip (pinscope export --gzip)
            import gzip
            data = gzip.decompress(data)
        text, errors, (packets, slices, counters, flows) = dump(packet_class, data)
    except ValueError as error:
        print("perfetto_schema_check: %s: %s" % (args.trace, error), file=sys.stderr)
        return 1
    print("schema: %s" % pb2)
    print("%s: %d packets, %d slices, %d counter values, %d flows" % (
        args.trace, packets, slices, counters, flows))
    for name, value in (("slices", slices), ("flows", flows)):
        want = getattr(args, "expect_" + name)
        if want is not None and value != want:
            print("INVALID: %d %s, expected %d" % (value, name, want))
            errors.append(name)
    status = 0
    for error in errors:
        print("INVALID: " + error)
        status = 1
    if slices < args.min_slices:
        print("INVALID: %d slices, expected at least %d" % (slices, args.min_slices))
        status = 1
    if args.expect:
        with open(args.expect, encoding="utf-8") as f:
            expected = f.read()
        if text != expected:
            sys.stdout.writelines(difflib.unified_diff(
                expected.splitlines(True), text.splitlines(True), args.expect, "perfetto schema"))
            status = 1
        else:
            print("matches " + args.expect)
    return status


if __name__ == "__main__":
    sys.exit(main())
