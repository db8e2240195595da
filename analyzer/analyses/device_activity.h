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
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace pinscope::device {

// Values mirror proto/trace.proto so trace enums convert with a cast.
enum ActivityKind : uint32_t { kActUnknown = 0, kActMemcpy = 1, kActMemset = 2, kActKernel = 3,
                               kActSync = 4 };
enum Direction : uint32_t { kDirUnknown = 0, kH2H = 1, kH2D = 2, kD2H = 3, kD2D = 4, kPeer = 5 };
enum MemKind : uint32_t { kMemUnknown = 0, kPageable = 1, kPinned = 2, kDevice = 3, kManaged = 4,
                          kSymbol = 5 };

constexpr uint64_t kMs = 1000000;
constexpr uint64_t kSec = 1000 * kMs;

// One DeviceActivity packet (times in CLOCK_MONOTONIC ns, as in the trace).
struct DeviceRecord {
  uint32_t kind = kActUnknown;
  uint64_t start_ns = 0, end_ns = 0;
  uint64_t bytes = 0;
  uint32_t direction = kDirUnknown;
  uint32_t src_kind = kMemUnknown, dst_kind = kMemUnknown;
  uint32_t device_id = 0, stream_id = 0;
  uint32_t correlation_id = 0;
  uint64_t name_id = 0;
  uint64_t duration_ns() const { return end_ns > start_ns ? end_ns - start_ns : 0; }
};

// One intercepted host call (CopyEvent or SyncEvent).
struct HostCall {
  enum class Type { kCopy, kSync };
  Type type = Type::kCopy;
  uint64_t call_id = 0;
  uint64_t start_ns = 0, end_ns = 0;  // host entry / return
  uint32_t direction = kDirUnknown;   // copies only
  uint32_t src_kind = kMemUnknown, dst_kind = kMemUnknown;
  uint64_t bytes = 0;
  uint32_t tid = 0;
  uint64_t blocked_ns() const { return end_ns > start_ns ? end_ns - start_ns : 0; }
};

struct Interval {
  uint64_t start_ns = 0, end_ns = 0;
  uint64_t length() const { return end_ns > start_ns ? end_ns - start_ns : 0; }
};

// Length of the overlap of two intervals.
uint64_t Overlap(Interval a, Interval b);

// ---------------------------------------------------------------------------
// 1. Joining device records to host calls by correlation id.

// A device record with the host call it belongs to, when known. Memcpy,
// memset and synchronization records are joined; kernels are not (their
// launches are not inside pinscope's correlation regions) and pass through.
struct Joined {
  DeviceRecord device;
  std::optional<HostCall> host;
};

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

// ---------------------------------------------------------------------------
// 2. Copy classes: direction x memory kind of the host side.

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

// ---------------------------------------------------------------------------
// 3. GPU busy time, idle gaps and their attribution.

// What the host was doing during a GPU idle gap.
enum class GapCause : uint32_t {
  kCopy = 0,        // inside a copy call (the host blocked on a copy)
  kSync = 1,        // inside a synchronize call
  kDataLoader = 2,  // waiting for the next batch (caller-supplied intervals)
  kUnknown = 3,
};
constexpr int kGapCauses = 4;
const char* GapCauseName(GapCause cause);  // "copy", "sync", "dataloader", "unknown"

struct Gap {
  uint32_t device_id = 0;
  uint64_t start_ns = 0, end_ns = 0;
  GapCause cause = GapCause::kUnknown;
  // Host time inside the gap spent in each cause (union per cause), ns.
  uint64_t overlap_ns[kGapCauses] = {};
  uint64_t length() const { return end_ns > start_ns ? end_ns - start_ns : 0; }
};

// Attributes one gap from the host intervals of each cause (each list sorted
// by start, or not: any order). The cause is the one whose union covers the
// most of the gap, if it covers at least `min_share` of it; ties go to copy,
// then sync, then dataloader. Otherwise kUnknown.
void AttributeGap(Gap* gap, const std::vector<Interval>& copy, const std::vector<Interval>& sync,
                  const std::vector<Interval>& loader, double min_share);

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

  uint64_t known_ns() const { return window.length() - std::min(window.length(), blind_ns); }
  // Share of the window in which kernels were recorded: 1 - blind / window
  // (1 for an empty window without blind time).
  double covered_fraction() const {
    return window.length() ? static_cast<double>(known_ns()) / static_cast<double>(window.length())
                           : (blind_ns ? 0.0 : 1.0);
  }
  // Kernels were recorded only part of the window (sampled), or not at all.
  bool kernels_sampled() const { return blind_ns > 0; }
  // Some of the window was recorded: the busy figures mean something.
  bool measured() const { return known_ns() > 0; }
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

// Busy fraction of `segments` (merged or not) within `window`, and per each
// of `chunks` equal chunks of it: the exact reference the tracker's bins
// approximate, for callers that hold all intervals.
double BusyFraction(std::vector<Interval> segments, Interval window);
std::vector<double> ChunkBusyFractions(std::vector<Interval> segments, Interval window,
                                       uint32_t chunks);
// Union of intervals, sorted and merged (touching intervals merge).
std::vector<Interval> Union(std::vector<Interval> intervals);

// ---------------------------------------------------------------------------
// 4. Verdict.

struct InputVerdict {
  // Kernels were recorded in some of the window (DeviceBusy::measured()):
  // without that there is no verdict either way.
  bool measured = false;
  bool not_input_bound = false;  // the GPU is busy: the input pipeline keeps up
  double busy_fraction = 0;      // DeviceBusy::active_busy_fraction
  // Idle time in gaps attributed to input (copies + DataLoader), as a
  // fraction of the known (not blind) time of the window.
  double input_idle_fraction = 0;
};
// "Not input-bound" when kernels were recorded and active_busy_fraction >=
// `busy_threshold` (90%).
InputVerdict JudgeInput(const DeviceBusy& busy, double busy_threshold = 0.9);

// ---------------------------------------------------------------------------
// 5. Everything above for one process, fed packet by packet.

// One DeviceRecording packet (proto/trace.proto): which device records the
// shim collects from `time_ns` on.
struct RecordingSwitch {
  uint64_t time_ns = 0;
  bool kernels = true;
  std::string reason;      // "sampling", "window", "disabled", "step_aside"
  double kernel_rate = 0;  // kernels/s over the window that just ended; 0: not measured
  uint64_t planned_ns = 0;
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
  JoinStats join;
  std::vector<CopyClassStats> copy_classes;
  std::vector<DeviceBusy> devices;
  KernelRecording recording;
};

class ProcessDeviceAnalysis {
 public:
  explicit ProcessDeviceAnalysis(BusyOptions options = BusyOptions(),
                                 uint64_t join_horizon_ns = 60 * kSec);
  // Host calls feed the join and (copies, syncs) the gap attribution.
  void OnHostCall(const HostCall& call);
  // Intervals in which the main loop waited for the DataLoader.
  void OnLoaderWait(Interval wait);
  void OnCorrelation(uint32_t correlation_id, uint64_t call_id, uint64_t now_ns);
  void OnDevice(const DeviceRecord& record);
  // A DeviceRecording packet, in trace order: kernels=false starts blind
  // time (GpuBusyTracker::BeginBlind), kernels=true ends it. Copy classes
  // and the join are not affected (copies are always recorded).
  void OnRecording(const RecordingSwitch& change);
  void Advance(uint64_t now_ns);
  ProcessDeviceResult Finish(Interval window);

  // Memcpy records joined to their host copy call, for a caller that needs
  // them too (the sync-wait analysis: a copy's transfer time); kept from the
  // first KeepJoinedCopies() on, until taken.
  void KeepJoinedCopies() { keep_copies_ = true; }
  std::vector<Joined> TakeJoinedCopies() { return std::exchange(joined_copies_, {}); }

 private:
  void Pump();
  bool keep_copies_ = false;
  std::vector<Joined> joined_copies_;
  CorrelationJoiner joiner_;
  CopyClassAccumulator classes_;
  GpuBusyTracker busy_;
  KernelRecording recording_;
};

}  // namespace pinscope::device
