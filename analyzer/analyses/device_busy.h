// GPU busy time per device: busy fraction over the run and per chunk, idle
// gaps (attributed by device_gaps.h), blind time (kernels not recorded).
// Streaming: records may arrive up to reorder_ns late (device_activity.h).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "analyzer/analyses/device_gaps.h"
#include "analyzer/analyses/device_intervals.h"
#include "analyzer/analyses/device_records.h"

namespace pinscope::device {

struct BusyOptions {
  uint32_t chunks = 30;                // like nsys gpu_time_util
  uint64_t gap_threshold_ns = 1 * kMs;  // nsys gpu_gaps uses 500 ms
  double min_share = 0.5;              // see AttributeGap
  // How late (in trace time) a device record may arrive after the moment it
  // describes; records are merged in time order once Advance passes them.
  uint64_t reorder_ns = 30 * kSec;
  // Busy time is also kept in bins for the per-chunk figures: bins start at
  // `origin_ns` (default: the first record) with `bin_ns` width, and double
  // their width whenever the run outgrows `max_bins`. Chunk figures are
  // exact when chunk edges fall on bin edges, else within one bin.
  std::optional<uint64_t> origin_ns;
  uint64_t bin_ns = 1 * kMs;
  size_t max_bins = 16384;
  size_t max_gaps_kept = 1000;  // the longest gaps keep their details
};

// A chunk figure for a chunk in which kernels were not recorded at all
// (DeviceBusy::chunk_busy_fraction): its busy share is unknown.
constexpr double kUnknownFraction = -1.0;

// Where a DeviceBusy's busy figures come from: kernel, memcpy and memset
// records (CUPTI), or NVML utilization samples when no kernel was recorded
// (device_utilization.h).
enum class BusySource { kRecords, kUtilization };

struct CauseTotals {
  uint64_t gaps = 0;
  uint64_t idle_ns = 0;
};

// Figures over the window. "Blind" time is time in which kernels were not
// recorded (sampled kernel recording, GpuBusyTracker::AddBlind): it counts
// neither as busy nor as idle, so every fraction is over the recorded
// ("known") time only. Without blind time (every trace before sampling, or a
// job that launched few kernels) known time is the whole window.
struct DeviceBusy {
  uint32_t device_id = 0;
  Interval window;
  uint64_t busy_ns = 0;   // union of kernel, memcpy and memset time in window, outside blind time
  uint64_t blind_ns = 0;  // blind time inside the window
  double busy_fraction = 0;  // busy_ns / (window length - blind_ns); 0 when no known time
  // busy_ns over the known time less leading and trailing idle: from the
  // first activity to the last (minus blind time), so start-up (imports,
  // model load) and teardown do not dilute a GPU-bound loop. What JudgeInput
  // uses.
  double active_busy_fraction = 0;
  // options.chunks equal chunks of the window: busy / (chunk length - blind
  // time in the chunk), at most 1; kUnknownFraction (< 0) for a chunk that
  // is blind from end to end.
  std::vector<double> chunk_busy_fraction;
  uint64_t records = 0;        // kernel/memcpy/memset records received (blind ones too)
  uint64_t late_records = 0;   // arrived after their time was merged (counted, approximately)
  // Idle before the first and after the last activity, inside the window;
  // never gaps (start-up and shutdown are not what the report is about).
  uint64_t leading_idle_ns = 0, trailing_idle_ns = 0;
  // Gaps between activities longer than the threshold: totals per cause,
  // and the longest ones (at most max_gaps_kept), longest first.
  uint64_t gap_count = 0, gap_ns = 0;
  CauseTotals by_cause[kGapCauses];
  std::vector<Gap> longest_gaps;

  // NVML utilization samples in the window (device_utilization.h), their
  // median period, and, with source kUtilization, the time they cover: the
  // busy figures above are then theirs (busy_ns: the samples' busy time);
  // gaps and leading/trailing idle stay unknown (zero).
  BusySource source = BusySource::kRecords;
  uint64_t utilization_samples = 0;
  uint64_t utilization_period_ns = 0;
  uint64_t utilization_covered_ns = 0;
  // The samples' busy share over the time they cover in the window, whatever
  // the source (with kernel records too: the two figures side by side).
  double utilization_busy_fraction = 0;

  uint64_t known_ns() const { return window.length() - std::min(window.length(), blind_ns); }
  // Share of the window in which kernels were recorded: 1 - blind / window
  // (1 for an empty window without blind time).
  double covered_fraction() const {
    if (source == BusySource::kUtilization)
      return window.length() ? std::min(1.0, static_cast<double>(utilization_covered_ns) /
                                                 static_cast<double>(window.length()))
                             : 0.0;
    return window.length() ? static_cast<double>(known_ns()) / static_cast<double>(window.length())
                           : (blind_ns ? 0.0 : 1.0);
  }
  // Kernels were recorded only part of the window (sampled), or not at all.
  bool kernels_sampled() const { return blind_ns > 0; }
  // Some of the window was recorded: the busy figures mean something.
  bool measured() const { return known_ns() > 0 || source == BusySource::kUtilization; }
};

// Busy fraction, chunks and attributed gaps, per device, over one process's
// records (or a run's, if the caller merges processes per device).
class GpuBusyTracker {
 public:
  explicit GpuBusyTracker(BusyOptions options = BusyOptions());
  ~GpuBusyTracker();
  GpuBusyTracker(const GpuBusyTracker&) = delete;
  GpuBusyTracker& operator=(const GpuBusyTracker&) = delete;

  // Kernel, memcpy and memset records count as busy; others are ignored.
  void AddDevice(const DeviceRecord& record);
  // Host intervals for attribution, per cause (kCopy, kSync, kDataLoader).
  void AddHostInterval(GapCause cause, Interval interval);

  // Blind time: kernels were not recorded, so the GPU's state is unknown.
  // Device records (kernels, memcpys and memsets alike) count only outside
  // it; a pause between activities is split by it, and each piece outside it
  // longer than the threshold is a gap (kernels were recorded up to the
  // blind edge, so the GPU is known idle there); leading and trailing idle
  // exclude it. Blind time applies to every device. Give it in time order,
  // as the trace says it (no earlier than the last Advance's now minus
  // reorder_ns): a record already merged is not revised.
  void AddBlind(Interval interval);
  // An open blind interval: blind from `start_ns` until EndBlind, or until
  // the window's end at Finish. Nothing while one is open already.
  void BeginBlind(uint64_t start_ns);
  // Closes the open blind interval at `end_ns`; nothing if none is open.
  void EndBlind(uint64_t end_ns);
  bool blind_open() const { return open_blind_.has_value(); }

  // Everything that ended before now - reorder_ns is final: merges it,
  // finds and attributes its gaps, and forgets what is no longer needed.
  void Advance(uint64_t now_ns);
  // Final figures over `window` (e.g. the span CUPTI was recording: the
  // "cupti_started" notice to the process's end or "cupti_unavailable").
  std::vector<DeviceBusy> Finish(Interval window);

 private:
  struct PerDevice;
  PerDevice& Device(uint32_t id);
  void Drain(PerDevice& d, uint64_t upto_ns);
  void CloseSegment(PerDevice& d);
  void AddToBins(PerDevice& d, uint64_t start, uint64_t end);
  void FinishGap(PerDevice& d, Gap gap);
  void PruneHost(uint64_t before_ns);
  // The pieces of `interval` outside blind time (the open interval included).
  void Known(Interval interval, std::vector<Interval>* out) const;
  // Blind time inside `window` (closed intervals only).
  uint64_t BlindIn(Interval window) const;

  BusyOptions options_;
  std::map<uint32_t, PerDevice*> devices_;
  std::vector<Interval> host_[3];  // kCopy, kSync, kDataLoader
  // Blind intervals, sorted and disjoint: one per sampling pause, kept for
  // the whole run (Finish needs them for any window).
  std::vector<Interval> blind_;
  std::optional<uint64_t> open_blind_;
  std::vector<Interval> pieces_;  // scratch for Known
};

}  // namespace pinscope::device
