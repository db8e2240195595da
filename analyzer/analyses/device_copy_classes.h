// Copy classes: device memcpy records counted by direction x memory kind of
// the host side, with device time, bandwidth and the host calls' blocked
// time (device_activity.h). Order-independent; no I/O.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "analyzer/analyses/device_join.h"
#include "analyzer/analyses/device_records.h"

namespace pinscope::device {

struct CopyClassKey {
  uint32_t direction = kDirUnknown;
  // The host side's kind (src for H2D/H2H, dst for D2H); kDevice for D2D
  // and peer copies.
  uint32_t host_kind = kMemUnknown;
  bool operator<(const CopyClassKey& o) const {
    return direction != o.direction ? direction < o.direction : host_kind < o.host_kind;
  }
  bool operator==(const CopyClassKey& o) const {
    return direction == o.direction && host_kind == o.host_kind;
  }
};

// The class of a copy from the host call's view (the program's memory, as
// pinscope's CopyEvent classified it) or, without one, from CUPTI's.
CopyClassKey ClassOf(uint32_t direction, uint32_t src_kind, uint32_t dst_kind);

struct CopyClassStats {
  CopyClassKey key;
  uint64_t count = 0;           // device memcpy records
  uint64_t bytes = 0;
  uint64_t device_ns = 0;       // sum of device durations
  uint64_t joined = 0;          // records with their host call
  uint64_t host_blocked_ns = 0;  // sum over joined records' host calls
  // bytes / device_ns in GB/s (1e9 bytes per second); 0 without device time.
  double device_gbps() const {
    return device_ns ? static_cast<double>(bytes) / static_cast<double>(device_ns) : 0.0;
  }
};

class CopyClassAccumulator {
 public:
  // Only memcpy records count; others are ignored.
  void Add(const Joined& joined);
  // Sorted by key.
  std::vector<CopyClassStats> Results() const;

 private:
  std::map<CopyClassKey, CopyClassStats> classes_;
};

}  // namespace pinscope::device
