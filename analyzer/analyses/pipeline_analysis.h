// What the pipeline model (analyzer/model/pipeline_model.h) needs, measured
// from a replay: the training loop's steps (DataLoader.__next__ spans from
// pinscope's Python hook, else the recurring batch copies of the root's main
// thread), the steady window over them, and per step in that window the
// main thread's waits and own work (CPU time and page faults at each
// recorded event), the workers' and the pin thread's service times, the
// GPU's busy time, and pinscope's own pinning work.
//
// Memory: bounded by the live state, not the run's length; every event of
// the run counts. The root threads' copies and syncs are folded while the
// run streams into per-step segments (step_calls.h), and the batch copies'
// device times into them once joined; the hook's spans, the workers'
// fetches, pinscope's registrations and the root's thread samples into the
// segments of the root's step clock (step_spans.h: the same segments as
// the training thread's calls), with the workers' fetch times exact up to
// a bound and a uniform sample beyond, for their medians. Finish chooses
// the steady window from the steps at the segments' resolution
// (docs/pipeline-model.md, "Memory"). Device records stream through one
// device analysis of the root process. The HTML timeline draws the last
// spans, calls and device intervals, as kept (TimelineSpans).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "analyzer/analyses/device_activity.h"
#include "analyzer/analyses/loader_identity.h"
#include "analyzer/analyses/step_calls.h"
#include "analyzer/analyses/step_spans.h"
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
  void OnFree(const Event& event, const LiveAlloc& freed, bool by_realloc) override;
  void OnShm(const ShmContext& context) override;
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
  // Other loaders' batches on the step thread (evaluation passes): segments
  // of them inside the window, and the epoch's that the window was cut to
  // leave out (steady_window.h).
  uint64_t window_breaks_inside() const { return window_breaks_inside_; }
  uint64_t window_breaks_avoided() const { return window_breaks_avoided_; }
  uint32_t step_tid() const { return step_tid_; }
  // A DataLoader's loop on the step thread, timed over the whole loop
  // (first __next__ to last, epoch starts included): the modelled one, and
  // the others the thread iterated one after another, apart from it (a
  // sweep of settings, successive phases), in order. An evaluation loader
  // whose batches fall among the modelled loop's is not one of them.
  // Valid after Finish, with the hook.
  struct Loop {
    std::string site;
    int num_workers = 0;
    bool pin_memory = false, persistent_workers = false;
    uint64_t batch_size = 0;
    uint64_t steps = 0;                 // its __next__ calls on the step thread (at least 2)
    uint64_t start_ns = 0, end_ns = 0;  // its first and last __next__'s starts
    double step_ns = 0;                 // (end - start) / (steps - 1)
    int prefetch_factor = 0;            // as the hook saw it (0: torch's default, 2)
    // Its steady step, by the model's own window rule (steady_window.h)
    // over this loop alone; 0 when too short for one: with workers, fewer
    // than twice the batches they keep in flight (num_workers x
    // prefetch_factor), where its steps are mostly that backlog draining.
    double steady_step_ns = 0;
  };
  // The other loop that differs from the modelled one by `change` alone
  // (a model::Change id: num_workers=N, pin_memory=True/False,
  // persistent_workers=True), or null: where the run measured that change.
  const Loop* LoopWith(const std::string& change) const;
  const Loop& modelled_loop() const { return modelled_loop_; }
  const std::vector<Loop>& other_loops() const { return other_loops_; }
  // True when the steps are DataLoader.__next__ calls (the hook ran).
  bool hooked() const { return inputs_.main.timed_by_hook; }

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
  // Where the kept spans, copies, syncs and device intervals start for
  // TimelineSpans: a run with more than it keeps (kDrawnSpans, step_calls.h's
  // kDrawnCalls, kDrawnDevice, kDrawnBlind) draws only its last ones; 0: all
  // were kept. Valid after Finish.
  uint64_t timeline_from_ns() const { return timeline_from_ns_; }
  // The pin thread's tid in the root (the thread with LOADER_PIN spans), 0 if none.
  uint32_t pin_tid() const;

 private:
  using Usage = StepSpans::Usage;
  using Span = StepSpans::Span;
  using Call = StepCalls::Call;
  static Call CallOf(uint64_t start, uint64_t end, const trace::ThreadUsage& enter,
                     const trace::ThreadUsage& exit);
  struct Thread {
    StepCalls calls;               // the root's threads only
    uint64_t last_call_start = 0;  // the previous copy or sync's start
    uint64_t pins = 0;             // LOADER_PIN spans (the pin thread has the most)
    // The previous pin span (a pin cycle is from one's start to the next's)
    // and fetch (a worker's busy time includes handing its batch over).
    bool pinned_before = false, fetched_before = false;
    uint64_t pin_start = 0, pin_cpu = 0, fetch_finish_cpu = 0;
    // Pinned host blocks (cudaHostAlloc, timed) allocated since the last
    // pin span; the previous pin span's share of them.
    struct HostAllocTime {
      uint64_t start = 0, ns = 0, address = 0;
    };
    std::vector<HostAllocTime> host_allocs;
    uint64_t pin_one_time_ns = 0;
    // The last __next__ spans (start, loader) by their number on the
    // thread (StepCalls' key for their release, which comes at most
    // kPendingKept spans later), a ring.
    uint64_t nexts = 0;
    std::vector<std::pair<uint64_t, uint64_t>> recent_nexts;
  };
  struct Process {
    bool root = false, worker = false;
    std::map<uint32_t, Thread> threads;
    uint64_t start = 0, end = 0;
    // A worker's first and last fetch start (its share of a long window).
    uint64_t first_fetch = UINT64_MAX, last_fetch = 0;
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
  // modelled_loop_ and other_loops_, for the loader the steps are of.
  void SummarizeLoops(uint32_t tid, uint64_t loader);
  void AddCall(uint32_t tid, Thread& t, const Call& call);
  // The __next__ spans' release times the thread's calls resolved.
  void TakeReleased(uint32_t tid, Thread& t);

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
  // The root's pinned host blocks allocated inside pin spans, by address,
  // until freed; a free of one says the program allocates them again and
  // again (not start-up, as torch's caching host allocator's are). Other
  // threads' pinned buffers are not in it.
  std::unordered_set<uint64_t> pin_blocks_;
  bool pin_blocks_freed_ = false;
  // Their time taken out of the pin spans as start-up, and how many.
  uint64_t pin_one_time_ns_ = 0, pin_one_time_blocks_ = 0;
  // The root's trace times its munmaps of shm mappings (SHM_UNMAP_DONE).
  bool unmaps_timed_ = false;
  std::vector<trace::LoaderEvent> iters_;  // the root's LOADER_ITER events
  std::vector<uint64_t> iter_times_;       // and when each was made
  LoaderIdentity loaders_;                 // DataLoader objects -> the loaders the job uses
  // When each epoch of `loader` began (its LOADER_ITERs), in order.
  std::vector<uint64_t> IterTimes(uint64_t loader) const;
  device::JoinMode join_;
  std::unique_ptr<device::ProcessDeviceAnalysis> device_;
  // The GPU's own work, kernels and memsets: copies are the copy stage's
  // (a pageable copy's slow DMA is not the GPU being busy).
  device::ProcessDeviceAnalysis compute_;
  uint64_t last_advance_ns_ = 0;
  device::Interval window_;
  uint64_t window_breaks_inside_ = 0, window_breaks_avoided_ = 0;
  uint32_t step_tid_ = 0;
  Loop modelled_loop_;
  std::vector<Loop> other_loops_;
  uint64_t timeline_from_ns_ = 0;
  model::Inputs inputs_;
  // The root's device intervals for the timeline, the last kDrawnDevice.
  static constexpr size_t kDrawnDevice = 1 << 16;
  std::deque<TimelineSpan> device_spans_;
  bool device_spans_dropped_ = false;
  // The hook's spans of every process, the last kDrawnSpans to arrive,
  // for the timeline; the latest end of those dropped.
  static constexpr size_t kDrawnSpans = 1 << 15;
  std::deque<TimelineSpan> drawn_spans_;
  uint64_t drawn_spans_dropped_end_ = 0;
  // The root's kernels not recorded (DeviceRecording switches): the last
  // kDrawnBlind intervals, the one still open, the latest end of those dropped.
  static constexpr size_t kDrawnBlind = 4096;
  std::deque<std::pair<uint64_t, uint64_t>> blind_;
  bool blind_open_ = false;
  uint64_t blind_since_ = 0, blind_dropped_end_ = 0;
  // The root's spans, samples and registrations in per-step segments.
  StepSpans spans_;
  // __next__ spans per (root thread, loader): the steps are the most of one.
  std::map<std::pair<uint32_t, uint64_t>, uint64_t> next_counts_;
};

}  // namespace pinscope
