// Joining device records to host calls without CUPTI correlation records:
// by time and order (docs/device-activity.md, "How device records meet their
// host calls"). Used for a process whose trace has no ExternalCorrelation
// packets (CUPTI writes them only with its costly RUNTIME kind on, issue 16).
// Same interface, output and stats as CorrelationJoiner (device_join.h).
// Streaming: records are matched a settle time after they arrive, in device
// start order; memory is bounded by the horizon, not by the run's length.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include "analyzer/analyses/device_join.h"
#include "analyzer/analyses/device_records.h"

namespace pinscope::device {

struct OrderJoinOptions {
  // Unmatched host calls older than this (by their end) are given up.
  uint64_t horizon_ns = 60 * kSec;
  // CUPTI's clock is converted to the host's with a measured offset: a
  // device record may look this much earlier (or a sync record's wait this
  // much longer) than the host call it belongs to.
  uint64_t tolerance_ns = 50 * kUs;
  // A device record is matched once the trace is this far past its arrival
  // (the trace time when it was added, at least its end): the other records
  // of its flush, and a host call that returns just after its device record
  // ended, have all arrived by then.
  uint64_t settle_ns = 2 * kSec;
};

// Joins within one process, in any input order:
// - a memcpy record to a host copy call of the same direction and bytes,
//   with compatible memory kinds (equal where both say; a host-side
//   pageable buffer may be pinned on the device side: pinscope pinned it),
//   whose host start is at or before the device start + tolerance. FIFO per
//   (direction, bytes): copies of one size and direction run in issue order
//   on a stream. Among the candidates, one whose host interval contains the
//   device interval (a synchronous copy) is preferred; a candidate that a
//   later wait on its thread proved complete before the record started
//   (cudaDeviceSynchronize, or cudaStreamSynchronize of its stream,
//   returned before) is dead: it never gets a record, and is counted
//   unmatched;
// - a synchronization record to the host sync call whose interval contains
//   it (with tolerance) most tightly; a better-fitting record takes the call
//   from a worse one, which tries its next candidate. One record per call;
// - memset records: the host records no memset calls, so none join (as
//   with correlations); they are counted unmatched but not handed out by
//   Take(). Kernels pass through.
// A batch copy's CopyEvents (one call id) are separate host calls here.
class OrderJoiner {
 public:
  explicit OrderJoiner(OrderJoinOptions options = OrderJoinOptions()) : options_(options) {}
  explicit OrderJoiner(uint64_t horizon_ns) { options_.horizon_ns = horizon_ns; }

  // Inputs, in any order. Correlations are only counted (stats).
  void AddHostCall(const HostCall& call);
  void AddCorrelation(uint32_t correlation_id, uint64_t call_id, uint64_t now_ns);
  void AddDevice(const DeviceRecord& record);

  // Matches the records that have settled, then gives up on host calls
  // older than now - horizon (a sync call's match is final then: a record
  // arriving late may still take it from a worse-fitting one).
  void Advance(uint64_t now_ns);
  // Matches everything still pending (end of the process's stream).
  void Finish();

  // Device records resolved since the last call, in resolution order.
  std::vector<Joined> Take();

  const JoinStats& stats() const { return stats_; }

 private:
  struct CopyCall {
    HostCall call;
  };
  struct SyncCall {
    HostCall call;
    bool has_record = false;
    DeviceRecord record;
    uint64_t fit_ns = 0;  // |start difference| + |end difference| of `record`
  };
  struct Wait {  // a successful stream or device synchronize
    uint64_t start_ns, end_ns, stream;
    uint32_t api;
  };
  using ClassKey = std::pair<uint32_t, uint64_t>;  // direction, bytes

  struct Pending {
    DeviceRecord record;
    uint64_t arrival_ns;
  };
  void MatchSettled(uint64_t cut_ns);  // records that arrived before cut_ns
  void MatchCopy(const DeviceRecord& record);
  void MatchSync(DeviceRecord record);
  bool KindsFit(const HostCall& call, const DeviceRecord& record) const;
  bool Contains(const HostCall& call, const DeviceRecord& record) const;
  // A later wait on the call's thread returned before `start_ns - tolerance`
  // and covered the call's stream: its work was done before the record began.
  bool DoneBefore(const HostCall& call, uint64_t start_ns) const;
  void FinalizeSyncs(uint64_t cut_ns, bool all);
  void Emit(const DeviceRecord& record, const HostCall* call);

  OrderJoinOptions options_;
  std::map<ClassKey, std::deque<CopyCall>> copies_;  // unmatched, by host start
  std::deque<SyncCall> syncs_;                       // by host start, until final
  uint64_t longest_sync_ns_ = 0;  // of the sync calls seen (bounds MatchSync's scan)
  std::unordered_map<uint32_t, std::deque<Wait>> waits_;  // by tid, by start
  std::vector<Pending> pending_;                          // joinable records not yet settled
  uint64_t now_ns_ = 0;                                   // latest trace time seen
  std::vector<Joined> out_;
  JoinStats stats_;
};

}  // namespace pinscope::device
