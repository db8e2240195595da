// Device-side analyses over CUPTI records (DeviceActivity / ExternalCorrelation
// packets) joined with the host calls pinscope intercepted: per copy class,
// device time and bandwidth; GPU busy fraction over the run and per time
// chunk (nsys gpu_time_util); idle gaps (nsys gpu_gaps) attributed to what the
// host was doing; the "not input-bound" verdict. Time in which kernels were
// not recorded (sampled kernel recording, DeviceRecording packets) is "blind":
// neither busy nor idle. docs/device-activity.md.
//
// Pure: plain structs in, results out; no I/O, no protobuf, no replay engine.
// Streaming and order-independent: device records reach a trace one flush
// period or more after the host calls they belong to, so every class here
// accepts its inputs in any order and keeps what it has not resolved until
// Advance(now) says it is older than a horizon; memory is bounded by the
// horizon, not by the run's length. Not thread-safe: one instance per user.
//
// This header is the interface the other analyses include: it brings in the
// parts (device_records.h, device_intervals.h, device_join.h,
// device_copy_classes.h, device_gaps.h, device_busy.h, device_verdict.h) and
// adds their composition for one process, fed packet by packet.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "analyzer/analyses/device_busy.h"
#include "analyzer/analyses/device_copy_classes.h"
#include "analyzer/analyses/device_gaps.h"
#include "analyzer/analyses/device_intervals.h"
#include "analyzer/analyses/device_join.h"
#include "analyzer/analyses/device_order_join.h"
#include "analyzer/analyses/device_records.h"
#include "analyzer/analyses/device_utilization.h"
#include "analyzer/analyses/device_verdict.h"

namespace pinscope::device {

// One DeviceRecording packet (proto/trace.proto): which device records the
// shim collects from `time_ns` on.
struct RecordingSwitch {
  uint64_t time_ns = 0;
  bool kernels = true;
  std::string reason;      // "sampling", "window", "disabled", "step_aside"
  double kernel_rate = 0;  // kernels/s over the window that just ended; 0: not measured
  uint64_t planned_ns = 0;
  // CUPTI detached from here on (DeviceRecording.detached): no device records
  // of any kind until the next switch.
  bool detached = false;
};

// Device records taken in windows (the shim's PINSCOPE_CUPTI_WINDOW_MS, with
// CUPTI detached in between; docs/device-activity.md, "Windows").
struct DeviceWindows {
  uint64_t windows = 0;      // windows begun (0: CUPTI never detached)
  uint64_t detached_ns = 0;  // time between windows, inside the process's window
  // Host copy and sync calls made while detached: never joined, not
  // counted as unmatched.
  uint64_t host_calls_between = 0;
  uint64_t span_ns = 0;  // the window the figures are over (the process's life)
  // Time before CUPTI was loaded (its first DeviceRecording packet, at the
  // first CUDA hook), which a job with a long start-up makes late; 0
  // without windows. From then to the first window is detached time (a
  // shim that waits for the loop says so: reason "awaiting_loop").
  uint64_t before_first_ns = 0;
  uint64_t unrecorded_ns() const { return std::min(detached_ns + before_first_ns, span_ns); }
  double recorded_fraction() const {
    return span_ns ? 1.0 - static_cast<double>(unrecorded_ns()) / static_cast<double>(span_ns)
                   : 1.0;
  }
  bool sampled() const { return detached_ns > 0 || host_calls_between > 0; }
};

// How a process recorded kernels, from its DeviceRecording packets.
struct KernelRecording {
  uint64_t switches = 0;  // DeviceRecording packets
  uint64_t stops = 0;     // packets that stopped kernel recording (kernels=false while on)
  uint64_t windows = 0;   // packets that restarted it (kernels=true while off)
  // Highest kernel_rate a packet reported, kernels/s (0: none measured).
  double peak_kernel_rate = 0;
  // From the first stop's reason: "auto" (sampling), "off" (disabled),
  // "step_aside", else the reason itself; "" when kernels never stopped.
  std::string mode;
};

struct ProcessDeviceResult {
  JoinMethod join_method = JoinMethod::kCorrelation;
  JoinStats join;
  std::vector<CopyClassStats> copy_classes;
  std::vector<DeviceBusy> devices;
  KernelRecording recording;
  DeviceWindows windows;
};

// How the join is chosen: kAuto decides per process (below); kOrder joins
// by order whatever the trace has (`pinscope report --join=order`, a
// diagnostic: correlations are counted, not used).
enum class JoinMode { kAuto, kOrder };

// The cupti_started notice of a shim that ran without CUPTI's RUNTIME
// records says so ("runtime records off"): no correlations will come.
bool NoticeSaysNoCorrelations(std::string_view cupti_started_text);

// In kAuto mode a process joins by correlation when its trace has
// ExternalCorrelation packets, and by order when the trace says none will
// come (NoCorrelations: the notice above, DeviceRecording.no_correlations),
// or when none has come kDecideNs after its first memcpy or sync record
// (CUPTI writes a correlation in the same flush as the record). Until that
// is decided both joins run and their results wait.
class ProcessDeviceAnalysis {
 public:
  static constexpr uint64_t kDecideNs = 5 * kSec;

  explicit ProcessDeviceAnalysis(BusyOptions options = BusyOptions(),
                                 uint64_t join_horizon_ns = 60 * kSec,
                                 JoinMode mode = JoinMode::kAuto);
  // Host calls feed the join and (copies, syncs) the gap attribution.
  void OnHostCall(const HostCall& call);
  // Intervals in which the main loop waited for the DataLoader.
  void OnLoaderWait(Interval wait);
  void OnCorrelation(uint32_t correlation_id, uint64_t call_id, uint64_t now_ns);
  // The trace says this process records no correlations: join by order
  // (unless correlations were already seen).
  void NoCorrelations();
  void OnDevice(const DeviceRecord& record);
  // A DeviceRecording packet, in trace order: kernels=false starts blind
  // time (GpuBusyTracker::BeginBlind), kernels=true ends it. Copy classes
  // and the join are not affected (copies are always recorded).
  void OnRecording(const RecordingSwitch& change);
  // CUPTI is detached now (between device-record windows).
  bool detached() const { return detached_; }
  // The run had detached spans so far: device records are a sample.
  bool windowed() const { return detached_ || !detached_spans_.empty(); }
  // One NVML utilization sample (GpuUtilization): the busy figures of a
  // device whose kernels were not recorded (device_utilization.h).
  void OnUtilization(uint32_t device_id, uint64_t sample_ns, uint32_t percent) {
    utilization_.Add(device_id, sample_ns, percent);
  }
  void Advance(uint64_t now_ns);
  ProcessDeviceResult Finish(Interval window);
  // A host call whose call id's calls all ended before `now - join_horizon_ns()`
  // at an Advance(now) can no longer be joined: its callers may finalize it.
  uint64_t join_horizon_ns() const { return join_horizon_ns_; }

  // Memcpy records joined to their host copy call, for a caller that needs
  // them too (the sync-wait analysis: a copy's transfer time); kept from the
  // first KeepJoinedCopies() on, until taken.
  void KeepJoinedCopies() { keep_copies_ = true; }
  std::vector<Joined> TakeJoinedCopies() { return std::exchange(joined_copies_, {}); }

  // The join in use; provisional (kCorrelation) while undecided.
  JoinMethod join_method() const {
    return correlation_ ? JoinMethod::kCorrelation : JoinMethod::kOrder;
  }
  bool join_decided() const { return !(correlation_ && order_); }

 private:
  void Pump();
  void Decide(JoinMethod method);
  bool keep_copies_ = false;
  std::vector<Joined> joined_copies_;
  // Both while undecided; one after.
  std::optional<CorrelationJoiner> correlation_;
  std::optional<OrderJoiner> order_;
  uint64_t now_ns_ = 0;            // latest trace time seen
  uint64_t first_record_now_ = 0;  // now_ns_ at the first memcpy/sync record
  bool seen_record_ = false;
  CopyClassAccumulator classes_;
  uint64_t join_horizon_ns_;
  GpuBusyTracker busy_;
  uint32_t chunks_;
  std::vector<uint32_t> kernel_devices_;  // devices a kernel record came for
  UtilizationSeries utilization_;
  KernelRecording recording_;
  DeviceWindows windows_;
  bool detached_ = false;
  uint64_t detached_since_ns_ = 0;
  uint64_t first_switch_ns_ = UINT64_MAX;  // the first DeviceRecording packet (none yet)
  std::vector<Interval> detached_spans_;  // closed ones; few (one per period)
};

}  // namespace pinscope::device
