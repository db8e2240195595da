// Joining device records to the host calls they belong to, by CUPTI
// correlation id (device_activity.h). Streaming and order-independent:
// unresolved inputs wait until Advance says they are older than a horizon.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "analyzer/analyses/device_records.h"

namespace pinscope::device {

// A device record with the host call it belongs to, when known. Memcpy,
// memset and synchronization records are joined; kernels are not (their
// launches are not inside pinscope's correlation regions) and pass through.
struct Joined {
  DeviceRecord device;
  std::optional<HostCall> host;
};

// How a process's device records met their host calls: by CUPTI's
// correlation records (CorrelationJoiner), or by time and order, without them
// (OrderJoiner, device_order_join.h).
enum class JoinMethod { kCorrelation, kOrder };

struct JoinStats {
  uint64_t joined = 0;             // device records matched to a host call
  uint64_t device_unmatched = 0;   // joinable device records that found none
  uint64_t host_copies_unmatched = 0;  // copy calls no device memcpy came for
  uint64_t correlations = 0;       // ExternalCorrelation packets seen
};

// Joins within one process (correlation ids and call ids are per process).
// A batch copy (one call id, several CopyEvents) matches its device records
// in arrival order; further records of a call all join to its last copy.
class CorrelationJoiner {
 public:
  // Unresolved inputs older than `horizon_ns` (by their own end time, or by
  // the time they were added for correlations) are given up at Advance.
  explicit CorrelationJoiner(uint64_t horizon_ns = 60 * kSec) : horizon_ns_(horizon_ns) {}

  // Inputs, in any order. `now_ns` is the caller's current trace time.
  void AddHostCall(const HostCall& call);
  void AddCorrelation(uint32_t correlation_id, uint64_t call_id, uint64_t now_ns);
  void AddDevice(const DeviceRecord& record);

  // Gives up on what is older than now - horizon: unmatched device records
  // come out of Take() without a host call.
  void Advance(uint64_t now_ns);
  // Gives up on everything still pending (end of the process's stream).
  void Finish();

  // Device records resolved since the last call, in resolution order.
  std::vector<Joined> Take();

  const JoinStats& stats() const { return stats_; }
  uint64_t horizon_ns() const { return horizon_ns_; }
  // The call id CUPTI's `correlation_id` belongs to, if seen and not expired.
  std::optional<uint64_t> CallIdFor(uint32_t correlation_id) const;

 private:
  struct HostEntry {
    std::vector<HostCall> calls;  // a batch has several
    size_t next = 0;              // next call to give a device record
    bool matched = false;
    uint64_t time_ns = 0;
  };
  struct CorrEntry {
    uint64_t call_id = 0;
    uint64_t time_ns = 0;
  };
  static bool Joinable(uint32_t kind) {
    return kind == kActMemcpy || kind == kActMemset || kind == kActSync;
  }
  void Resolve(uint32_t correlation_id);
  void Emit(const DeviceRecord& record, HostEntry* host);

  uint64_t horizon_ns_;
  std::unordered_map<uint64_t, HostEntry> hosts_;                       // by call id
  std::unordered_map<uint32_t, CorrEntry> correlations_;                // by correlation id
  std::unordered_map<uint64_t, std::vector<uint32_t>> corr_by_call_;     // call id -> correlations
  std::unordered_map<uint32_t, std::vector<DeviceRecord>> pending_;    // by correlation id
  std::vector<Joined> out_;
  JoinStats stats_;
};

}  // namespace pinscope::device
