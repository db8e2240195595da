// The device analyses' inputs (device_records.h) made from trace packets, in
// one place for every replay consumer that feeds them (the input and
// pipeline analyses, the join tests): a copy or sync call as the joins see
// it, and a CUPTI record.
#pragma once

#include <algorithm>

#include "analyzer/analyses/device_records.h"
#include "analyzer/replay/replay.h"

namespace pinscope::device {

// A copy call: replay time and host-blocked time, and the packet's own
// timestamps (entry_ns, return_ns: the replay may push a packet's time later
// to keep a file's order; the order join needs the host's own).
inline HostCall CopyCallOf(const CopyContext& ctx) {
  const trace::CopyEvent& c = ctx.copy;
  HostCall h;
  h.type = HostCall::Type::kCopy;
  h.call_id = c.call_id();
  h.start_ns = ctx.event.time_ns;
  h.end_ns = ctx.event.time_ns + ctx.blocked_ns;
  h.direction = c.direction();
  h.src_kind = c.src_kind();
  h.dst_kind = c.dst_kind();
  h.bytes = c.bytes();
  h.tid = ctx.event.packet.tid();
  h.stream = c.stream();
  h.api = c.api();
  h.result = c.result();
  h.entry_ns = ctx.event.packet.timestamp_ns();
  h.return_ns = std::max(c.end_ns(), h.entry_ns);
  return h;
}

inline HostCall SyncCallOf(const Event& event, const trace::SyncEvent& s) {
  HostCall h;
  h.type = HostCall::Type::kSync;
  h.call_id = s.call_id();
  h.start_ns = event.time_ns;
  h.end_ns = std::max(s.end_ns(), event.time_ns);
  h.tid = event.packet.tid();
  h.stream = s.stream();
  h.api = s.api();
  h.result = s.result();
  h.entry_ns = event.packet.timestamp_ns();
  h.return_ns = std::max(s.end_ns(), h.entry_ns);
  return h;
}

inline DeviceRecord DeviceRecordOf(const trace::DeviceActivity& a) {
  DeviceRecord r;
  r.kind = a.kind();
  r.start_ns = a.start_ns();
  r.end_ns = a.end_ns();
  r.bytes = a.bytes();
  r.direction = a.direction();
  r.src_kind = a.src_kind();
  r.dst_kind = a.dst_kind();
  r.device_id = a.device_id();
  r.stream_id = a.stream_id();
  r.correlation_id = a.correlation_id();
  r.name_id = a.name_id();
  return r;
}

}  // namespace pinscope::device
