// Copy classes; see device_copy_classes.h.
#include "analyzer/analyses/device_copy_classes.h"

namespace pinscope::device {

CopyClassKey ClassOf(uint32_t direction, uint32_t src_kind, uint32_t dst_kind) {
  switch (direction) {
    case kH2D:
    case kH2H: return {direction, src_kind};
    case kD2H: return {direction, dst_kind};
    case kD2D:
    case kPeer: return {direction, kDevice};
    default: return {direction, src_kind};
  }
}

void CopyClassAccumulator::Add(const Joined& j) {
  if (j.device.kind != kActMemcpy) return;
  CopyClassKey key = j.host ? ClassOf(j.host->direction, j.host->src_kind, j.host->dst_kind)
                            : ClassOf(j.device.direction, j.device.src_kind, j.device.dst_kind);
  CopyClassStats& s = classes_[key];
  s.key = key;
  ++s.count;
  s.bytes += j.device.bytes;
  s.device_ns += j.device.duration_ns();
  if (j.host) {
    ++s.joined;
    s.host_blocked_ns += j.host->blocked_ns();
  }
}

std::vector<CopyClassStats> CopyClassAccumulator::Results() const {
  std::vector<CopyClassStats> out;
  for (const auto& [key, s] : classes_) out.push_back(s);
  return out;
}

}  // namespace pinscope::device
