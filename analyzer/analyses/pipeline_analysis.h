// What the pipeline model (analyzer/model/pipeline_model.h) needs, measured
// from a replay: the training loop's steps (DataLoader.__next__ spans from
// pinscope's Python hook, else the recurring batch copies of the root's main
// thread), the steady window over them, and per step in that window the
// main thread's waits and own work (CPU time and page faults at each
// recorded event), the workers' and the pin thread's service times, the
// GPU's busy time, and pinscope's own pinning work.
//
// Memory: the root threads' copies and syncs are folded while the run
// streams into per-step segments (step_calls.h: bounded, every call of the
// run counts), and the batch copies' device times into them once joined;
// the loader spans are kept (capped at kMaxKept each) until Finish, which
// needs the whole run to choose its steady window; device records stream
// through one device analysis of the root process.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "analyzer/analyses/device_activity.h"
#include "analyzer/analyses/step_calls.h"
#include "analyzer/model/pipeline_model.h"
#include "analyzer/replay/replay.h"

namespace pinscope {

class PipelineAnalysis : public Analysis {
 public:
  // `join`: as InputAnalysis's (the batch copies' device times).
  explicit PipelineAnalysis(device::JoinMode join = device::JoinMode::kAuto);
  ~PipelineAnalysis() override;

  void OnProcess(const ProcessState& process) override;
  void OnCopy(const CopyContext& copy) override;
  void OnSync(const Event& event, const trace::SyncEvent& sync) override;
  void OnAlloc(const Event& event, const LiveAlloc& alloc) override;
  void OnPin(const Event& event, const trace::PinEvent& pin) override;
  void OnDevice(const Event& event, const trace::DeviceActivity& activity) override;
  void OnCorrelation(const Event& event, const trace::ExternalCorrelation& correlation) override;
  void OnRecording(const Event& event, const trace::DeviceRecording& recording) override;
  void OnUtilization(const Event& event, const trace::GpuUtilization& utilization) override;
  void OnNotice(const Event& event, const trace::Notice& notice) override;
  void OnThreadSample(const Event& event, const trace::ThreadSample& sample) override;
  void OnLoader(const Event& event, const trace::LoaderEvent& loader) override;
  void Finish(const RunInfo& run) override;

  // The model's inputs; valid after Finish (host facts and pinning
  // budget are the report's to fill in).
  const model::Inputs& inputs() const { return inputs_; }
  // The steady window the figures are over, and the thread it follows.
  uint64_t window_start_ns() const { return window_.start_ns; }
  uint64_t window_end_ns() const { return window_.end_ns; }
  uint32_t step_tid() const { return step_tid_; }
  // True when the steps are DataLoader.__next__ calls (the hook ran).
  bool hooked() const { return inputs_.main.timed_by_hook; }

  static constexpr size_t kMaxKept = 1 << 20;

  // One interval of a thread's (or the GPU's) work, for drawing a timeline
  // (the HTML report): what the analysis kept, nothing re-read.
  struct TimelineSpan {
    enum class Kind {
      kFetch,     // a worker (or the main thread) making a batch (LOADER_FETCH)
      kNext,      // the step thread in DataLoader.__next__ (LOADER_NEXT)
      kRecv,      // receiving a batch from a worker (LOADER_RECV)
      kPin,       // the pin thread's pin_memory() (LOADER_PIN)
      kCopy,      // a copy call, host-blocked time
      kSync,      // a synchronize call
      kGpu,       // the GPU running kernels or memsets
      kGpuCopy,   // the GPU transferring (a copy's device time)
      kGpuBlind,  // kernels not recorded then (DeviceRecording: sampled windows)
    };
    Kind kind = Kind::kFetch;
    int process_index = -1;  // the replay's process index (the root's for the GPU)
    uint32_t tid = 0;        // 0 for the GPU
    int32_t worker_id = -1;  // LOADER_FETCH's worker id, -1 unknown
    uint64_t start_ns = 0, end_ns = 0;
  };
  // The kept spans that overlap [start_ns, end_ns), sorted by start, at most
  // max_spans of them (the earliest); valid after Finish.
  std::vector<TimelineSpan> TimelineSpans(uint64_t start_ns, uint64_t end_ns,
                                          size_t max_spans) const;
  // Where the kept copies, syncs and device intervals start for TimelineSpans:
  // a run with more than it keeps (step_calls.h, kDrawnCalls) draws only its
  // last ones; 0: all were kept. Valid after Finish.
  uint64_t timeline_from_ns() const { return timeline_from_ns_; }
  // The pin thread's tid in the root (the thread with LOADER_PIN spans), 0 if none.
  uint32_t pin_tid() const;

 private:
  struct Usage {
    uint64_t cpu = 0, sys = 0, faults = 0;
  };
  struct Span {
    uint64_t start = 0, end = 0;
    Usage begin, finish;
    uint64_t loader_id = 0, index = 0;
    uint32_t tid = 0;
    int32_t worker_id = -1;
    // __next__: CPU from its return to the thread's next call's entry.
    uint64_t release = 0;
  };
  using Call = StepCalls::Call;
  static Call CallOf(uint64_t start, uint64_t end, const trace::ThreadUsage& enter,
                     const trace::ThreadUsage& exit);
  struct Thread {
    std::vector<Span> next, fetch, pin, recv;
    StepCalls calls;               // the root's threads only
    uint64_t last_call_start = 0;  // the previous copy or sync's start
    // (time, duration) of pinscope's unregistrations and registrations on the thread.
    std::vector<std::pair<uint64_t, uint64_t>> unregister, registers;
  };
  struct Process {
    bool root = false, worker = false;
    std::map<uint32_t, Thread> threads;
    // ThreadSample: per tid, (time, cpu ns) in order.
    std::map<uint32_t, std::vector<std::pair<uint64_t, uint64_t>>> samples;
    uint64_t start = 0, end = 0;
  };

  Process& Of(const ProcessState& process);
  // A thread of the root process (the only one whose calls are kept).
  Thread& RootThread(const ProcessState& process, uint32_t tid);
  Thread* last_thread_ = nullptr;
  uint32_t last_tid_ = 0;
  // The root's device analysis, made at its first use (it keeps the joined
  // copies, for the batch copies' stream waits).
  device::ProcessDeviceAnalysis& Device();
  static Usage UsageOf(const trace::ThreadUsage& u);
  void BuildInputs(const RunInfo& run);
  void AddCall(Thread& t, const Call& call);
  // The __next__ spans' release times the thread's calls resolved.
  static void TakeReleased(Thread& t);

  std::unordered_map<int, Process> processes_;
  int root_index_ = -1;
  // Allocation ids of the step thread's fresh large blocks, by address.
  std::unordered_map<uint64_t, uint64_t> alloc_time_;
  // Joined device records of the root's copies that may be batch copies,
  // by call id, until no more can join them (then in their segment).
  struct DeviceTimes {
    uint64_t host_start = 0, host_end = 0, bytes = 0, first = 0, end = 0;
    uint32_t tid = 0;
  };
  std::unordered_map<uint64_t, DeviceTimes> device_times_;
  // Takes the joined copies; folds those older than the join's horizon
  // before `now` (all with UINT64_MAX) into their thread's segments.
  void FoldDeviceTimes(uint64_t now);
  std::vector<trace::LoaderEvent> iters_;  // the root's LOADER_ITER events
  std::vector<uint64_t> iter_times_;       // and when each was made
  // When each epoch of `loader` began (its LOADER_ITERs), in order.
  std::vector<uint64_t> IterTimes(uint64_t loader) const;
  device::JoinMode join_;
  std::unique_ptr<device::ProcessDeviceAnalysis> device_;
  // The GPU's own work, kernels and memsets: copies are the copy stage's
  // (a pageable copy's slow DMA is not the GPU being busy).
  device::ProcessDeviceAnalysis compute_;
  uint64_t last_advance_ns_ = 0;
  device::Interval window_;
  uint32_t step_tid_ = 0;
  uint64_t timeline_from_ns_ = 0;
  model::Inputs inputs_;
  // The root's device intervals for the timeline, the last kDrawnDevice.
  static constexpr size_t kDrawnDevice = 1 << 16;
  std::deque<TimelineSpan> device_spans_;
  bool device_spans_dropped_ = false;
  // The root's DeviceRecording switches: (time, kernels recorded from then).
  std::vector<std::pair<uint64_t, bool>> recording_;
};

}  // namespace pinscope
