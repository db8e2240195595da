// GPU busy time from NVML utilization samples (GpuUtilization packets,
// docs/device-activity.md "GPU busy without kernel records"): the figures a
// DeviceBusy gives when no kernel was recorded, which is the default since
// CUPTI's kernel records cost 15-20% of a launch-bound step (issue 16).
//
// A sample says in what percent of its period, ending at its time, one or
// more kernels ran. The period is the time since the device's previous
// sample (the first sample of a device takes the median period). Busy time
// in an interval is the sum over samples of percent x (period clipped to the
// interval); the figures are over the time the samples cover.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "analyzer/analyses/device_busy.h"
#include "analyzer/analyses/device_intervals.h"

namespace pinscope::device {

class UtilizationSeries {
 public:
  // One sample of CUDA device `device_id`, in time order per device (older
  // or repeated samples are dropped).
  void Add(uint32_t device_id, uint64_t sample_ns, uint32_t percent);
  uint64_t samples() const { return total_; }

  // For each device with samples in `window`: where its DeviceBusy recorded
  // no kernel (known_ns() == 0, or a device with copies only), the busy
  // figures are replaced by the samples' (source kUtilization) unless the
  // device is in `with_kernels`; a device with samples and no DeviceBusy
  // gets one. `chunks` equal chunks as
  // GpuBusyTracker makes them.
  // `with_kernels`: devices a kernel record was seen for (their figures stand;
  // the samples' share goes to utilization_busy_fraction beside them).
  void Apply(Interval window, uint32_t chunks, const std::vector<uint32_t>& with_kernels,
             std::vector<DeviceBusy>* devices) const;

 private:
  struct Sample {
    uint64_t start_ns, end_ns;
    uint32_t percent;
  };
  // Samples are few (NVML keeps one every 17-167 ms: under 216,000 an
  // hour), so they are kept; beyond kMaxSamples per device every other one
  // is merged into its neighbour, halving the resolution, not the coverage.
  static constexpr size_t kMaxSamples = 1 << 18;
  struct Series {
    std::vector<Sample> samples;
    uint64_t last_ns = 0;
    std::vector<uint64_t> periods;  // the first few, for the first sample's period
  };
  static void Compact(Series* s);
  std::map<uint32_t, Series> by_device_;
  uint64_t total_ = 0;
};

}  // namespace pinscope::device
