// The pipeline model's measurements; see pipeline_analysis.h.
#include "analyzer/analyses/pipeline_analysis.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <iterator>
#include <map>
#include <set>

#include "analyzer/analyses/device_from_trace.h"
#include "analyzer/analyses/steady_window.h"

namespace pinscope {

namespace {

constexpr uint64_t kMinBatchBytes = StepCalls::kMinBatchBytes;

template <typename T>
double MedianOf(std::vector<T> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? static_cast<double>(v[n / 2])
               : (static_cast<double>(v[n / 2 - 1]) + static_cast<double>(v[n / 2])) / 2;
}

template <typename T>
double MeanOf(const std::vector<T>& v) {
  if (v.empty()) return 0;
  double sum = 0;
  for (const T& x : v) sum += static_cast<double>(x);
  return sum / static_cast<double>(v.size());
}

double Diff(uint64_t a, uint64_t b) { return a > b ? static_cast<double>(a - b) : 0.0; }
uint64_t Gap(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

}  // namespace

PipelineAnalysis::PipelineAnalysis(device::JoinMode join) : join_(join) {}
PipelineAnalysis::~PipelineAnalysis() = default;

PipelineAnalysis::Process& PipelineAnalysis::Of(const ProcessState& process) {
  return processes_[process.index()];
}

// Copies and syncs come from one thread for long stretches: the last one's
// Thread is kept (map nodes do not move).
PipelineAnalysis::Thread& PipelineAnalysis::RootThread(const ProcessState& process, uint32_t tid) {
  if (last_thread_ == nullptr || last_tid_ != tid) {
    last_thread_ = &Of(process).threads[tid];
    last_tid_ = tid;
  }
  return *last_thread_;
}

PipelineAnalysis::Usage PipelineAnalysis::UsageOf(const trace::ThreadUsage& u) {
  // cpu_ns is exact; traces from before it carry only getrusage's split.
  Usage out;
  out.cpu = u.cpu_ns() ? u.cpu_ns() : u.user_ns() + u.sys_ns();
  out.sys = u.sys_ns();
  out.faults = u.minor_faults() + u.major_faults();
  return out;
}

PipelineAnalysis::Call PipelineAnalysis::CallOf(uint64_t start, uint64_t end,
                                                const trace::ThreadUsage& enter,
                                                const trace::ThreadUsage& exit) {
  const Usage begin = UsageOf(enter), finish = UsageOf(exit);
  Call call;
  call.start = start;
  call.end = end;
  call.cpu_begin = begin.cpu;
  call.cpu_ns = finish.cpu > begin.cpu ? finish.cpu - begin.cpu : 0;
  const uint64_t faults = finish.faults > begin.faults ? finish.faults - begin.faults : 0;
  call.faults = static_cast<uint32_t>(std::min<uint64_t>(faults, UINT32_MAX));
  return call;
}

void PipelineAnalysis::OnProcess(const ProcessState& process) {
  Process& p = Of(process);
  p.start = process.start_ns();
  if (root_index_ < 0 && (process.origin() == trace::ORIGIN_ROOT || process.parent() == nullptr)) {
    root_index_ = process.index();
    p.root = true;
  }
  p.worker = process.origin() == trace::ORIGIN_FORK && !process.helper() &&
             process.parent() != nullptr && process.parent()->index() == root_index_;
}

void PipelineAnalysis::OnCopy(const CopyContext& ctx) {
  const ProcessState& process = ctx.event.process;
  if (process.index() != root_index_) return;
  Thread& t = RootThread(process, ctx.event.packet.tid());
  const trace::CopyEvent& c = ctx.copy;
  Call call = CallOf(ctx.event.time_ns, ctx.event.time_ns + ctx.blocked_ns, c.usage_enter(),
                     c.usage_exit());
  call.bytes = c.bytes();
  call.call_id = c.call_id();
  call.copy = true;
  call.h2d = c.direction() == trace::H2D;
  call.pinned_by_program = c.pin() == trace::PIN_BY_PROGRAM;
  call.pinned_by_pinscope = c.pin() == trace::PIN_REGISTERED || c.pin() == trace::PIN_CACHED;
  call.skipped_budget = c.pin() == trace::PIN_SKIPPED_BUDGET;
  call.shm = ctx.buffer.kind == HostBuffer::Kind::kShm;
  if (ctx.buffer.kind == HostBuffer::Kind::kAlloc && ctx.buffer.alloc != nullptr) {
    // Allocated since the thread's previous batch copy: a fresh buffer.
    call.fresh = ctx.buffer.alloc->time_ns >= t.last_call_start;
  }
  AddCall(ctx.event.packet.tid(), t, call);
  // A possible step boundary of the root (step_spans.h), as for the thread.
  if (call.h2d && call.bytes >= StepCalls::kBoundaryBytes) spans_.AddBoundary(call.start);
  if (device_) {
    device_->OnHostCall(device::CopyCallOf(ctx));
  }
}

void PipelineAnalysis::OnSync(const Event& event, const trace::SyncEvent& sync) {
  if (event.process.index() != root_index_) return;
  Thread& t = RootThread(event.process, event.packet.tid());
  const uint64_t end = sync.end_ns() > event.packet.timestamp_ns()
                           ? event.time_ns + (sync.end_ns() - event.packet.timestamp_ns())
                           : event.time_ns;
  AddCall(event.packet.tid(), t, CallOf(event.time_ns, end, sync.usage_enter(), sync.usage_exit()));
}

void PipelineAnalysis::AddCall(uint32_t tid, Thread& t, const Call& call) {
  t.last_call_start = call.start;
  t.calls.Add(call);
  if (t.calls.has_released()) TakeReleased(tid, t);
}

void PipelineAnalysis::TakeReleased(uint32_t tid, Thread& t) {
  for (auto [key, ns] : t.calls.TakeReleased()) {
    // The key is the span's number on the thread; a release comes at most
    // kPendingKept spans later, so the ring still holds it.
    if (t.recent_nexts.empty() || key + t.recent_nexts.size() < t.nexts) continue;
    const auto [start, loader] = t.recent_nexts[key % t.recent_nexts.size()];
    spans_.AddRelease(tid, loader, start, ns);
  }
}

void PipelineAnalysis::FoldDeviceTimes(uint64_t now) {
  if (!device_) return;
  for (const device::Joined& j : device_->TakeJoinedCopies()) {
    if (!j.host || j.host->direction != device::kH2D || j.host->bytes < StepCalls::kBoundaryBytes)
      continue;
    DeviceTimes& d = device_times_[j.host->call_id];
    if (d.first == 0 || j.device.start_ns < d.first) d.first = j.device.start_ns;
    d.end = std::max(d.end, j.device.end_ns);
    d.host_start = j.host->start_ns;
    d.host_end = j.host->end_ns;
    d.bytes = j.host->bytes;
    d.tid = j.host->tid;
  }
  const bool all = now == UINT64_MAX;
  const uint64_t horizon = device_->join_horizon_ns();
  auto root = processes_.find(root_index_);
  for (auto it = device_times_.begin(); it != device_times_.end();) {
    const DeviceTimes& d = it->second;
    // Twice the join's horizon: a join decided late hands its held records
    // over at once.
    if (!all && d.host_end + 2 * horizon >= now) {
      ++it;
      continue;
    }
    Thread* t = nullptr;
    if (root != processes_.end()) {
      auto th = root->second.threads.find(d.tid);
      if (th != root->second.threads.end()) t = &th->second;
    }
    if (t != nullptr && !all && t->calls.frontier() <= d.host_start) {
      ++it;  // its call waits for the thread's next __next__
      continue;
    }
    if (t != nullptr) {
      // Waiting for the stream: from the call to the transfer's start, minus
      // the launch's own few microseconds.
      const uint64_t wait = d.first > d.host_start + 50000 ? d.first - d.host_start - 50000 : 0;
      t->calls.AddDeviceTime(d.host_start, d.bytes, wait, d.end > d.first ? d.end - d.first : 0);
    }
    it = device_times_.erase(it);
  }
}

void PipelineAnalysis::OnAlloc(const Event& event, const LiveAlloc& alloc) {}

void PipelineAnalysis::OnShm(const ShmContext& context) {
  if (context.event.process.index() != root_index_ || context.shm.op() != trace::SHM_UNMAP_DONE ||
      context.shm.end_ns() < context.event.time_ns)
    return;
  unmaps_timed_ = true;
  spans_.AddUnmap(context.event.packet.tid(), context.event.time_ns,
                  context.shm.end_ns() - context.event.time_ns);
}

void PipelineAnalysis::OnPin(const Event& event, const trace::PinEvent& pin) {
  if (event.process.index() != root_index_) return;
  if (pin.op() == trace::UNREGISTER || pin.op() == trace::REGISTER)
    spans_.AddRegistration(event.packet.tid(), event.time_ns, pin.duration_ns(),
                           pin.op() == trace::UNREGISTER);
}

void PipelineAnalysis::OnDevice(const Event& event, const trace::DeviceActivity& a) {
  if (event.process.index() != root_index_) return;
  Device();
  const device::DeviceRecord r = device::DeviceRecordOf(a);
  device_->OnDevice(r);
  const bool compute = r.kind == device::kActKernel || r.kind == device::kActMemset;
  if (compute) compute_.OnDevice(r);
  if ((compute || r.kind == device::kActMemcpy) && r.end_ns > r.start_ns) {
    TimelineSpan span;
    span.kind = compute ? TimelineSpan::Kind::kGpu : TimelineSpan::Kind::kGpuCopy;
    span.process_index = event.process.index();
    span.start_ns = r.start_ns;
    span.end_ns = r.end_ns;
    if (device_spans_.size() >= kDrawnDevice) {
      device_spans_.pop_front();
      device_spans_dropped_ = true;
    }
    device_spans_.push_back(span);
  }
  if (event.time_ns > last_advance_ns_ + device::kSec) {
    device_->Advance(event.time_ns);
    compute_.Advance(event.time_ns);
    last_advance_ns_ = event.time_ns;
    FoldDeviceTimes(event.time_ns);
  }
}

void PipelineAnalysis::OnCorrelation(const Event& event, const trace::ExternalCorrelation& c) {
  if (event.process.index() != root_index_) return;
  Device().OnCorrelation(c.correlation_id(), c.call_id(), event.time_ns);
}

void PipelineAnalysis::OnRecording(const Event& event, const trace::DeviceRecording& r) {
  if (event.process.index() != root_index_) return;
  Device();
  device::RecordingSwitch s;
  s.time_ns = event.time_ns;
  s.kernels = r.kernels();
  s.reason = r.reason();
  s.kernel_rate = r.kernel_rate();
  s.planned_ns = r.planned_ns();
  s.detached = r.detached();
  device_->OnRecording(s);
  compute_.OnRecording(s);
  if (r.no_correlations()) device_->NoCorrelations();
  // Kernels are recorded from CUPTI's start until a switch turns them off,
  // then from a switch that turns them on again: the intervals between,
  // for the timeline.
  if (!s.kernels && !blind_open_) {
    blind_open_ = true;
    blind_since_ = s.time_ns;
  } else if (s.kernels && blind_open_) {
    blind_open_ = false;
    if (blind_.size() >= kDrawnBlind) {
      blind_dropped_end_ = std::max(blind_dropped_end_, blind_.front().second);
      blind_.pop_front();
    }
    blind_.push_back({blind_since_, s.time_ns});
  }
}

void PipelineAnalysis::OnUtilization(const Event& event, const trace::GpuUtilization& u) {
  if (event.process.index() != root_index_ || u.cuda_device() < 0) return;
  Device();
  const int n = std::min(u.sample_ns_size(), u.percent_size());
  for (int i = 0; i < n; ++i) {
    device_->OnUtilization(static_cast<uint32_t>(u.cuda_device()), u.sample_ns(i), u.percent(i));
    compute_.OnUtilization(static_cast<uint32_t>(u.cuda_device()), u.sample_ns(i), u.percent(i));
  }
}

void PipelineAnalysis::OnNotice(const Event& event, const trace::Notice& notice) {
  if (event.process.index() != root_index_ || notice.code() != "cupti_started") return;
  if (device::NoticeSaysNoCorrelations(notice.text())) Device().NoCorrelations();
  Device();
}

void PipelineAnalysis::OnThreadSample(const Event& event, const trace::ThreadSample& sample) {
  // The root's other threads' CPU over the window (BuildInputs).
  if (event.process.index() != root_index_) return;
  for (const auto& t : sample.threads()) spans_.AddSample(t.tid(), event.time_ns, t.cpu_ns());
}

void PipelineAnalysis::OnLoader(const Event& event, const trace::LoaderEvent& l) {
  Process& p = Of(event.process);
  if (l.kind() == trace::LOADER_ITER) {
    if (p.root && iters_.size() < 4096) {
      iters_.push_back(l);
      iters_.back().set_loader_id(loaders_.OfIter(l));
      iter_times_.push_back(event.packet.timestamp_ns() > 0 ? event.packet.timestamp_ns()
                                                            : event.time_ns);
      spans_.AddIter(iters_.back().loader_id(), iter_times_.back(), l.num_workers());
    }
    return;
  }
  TimelineSpan::Kind drawn = TimelineSpan::Kind::kFetch;
  switch (l.kind()) {
    case trace::LOADER_NEXT:
      drawn = TimelineSpan::Kind::kNext;
      break;
    case trace::LOADER_FETCH:
      drawn = TimelineSpan::Kind::kFetch;
      break;
    case trace::LOADER_PIN:
      drawn = TimelineSpan::Kind::kPin;
      break;
    case trace::LOADER_RECV:
      drawn = TimelineSpan::Kind::kRecv;
      break;
    default:
      return;
  }
  const uint32_t tid = event.packet.tid();
  Thread& t = p.threads[tid];
  // The span's own clock readings, not the replay's time: a span is written
  // when it ends, after the spans inside it, and the replay's time keeps each
  // file's order (the later of the two), which would move its start.
  Span s;
  s.start = event.packet.timestamp_ns() > 0 ? event.packet.timestamp_ns() : event.time_ns;
  s.end = std::max(s.start, l.end_ns());
  s.begin = UsageOf(l.usage_begin());
  s.finish = UsageOf(l.usage_end());
  s.loader_id = loaders_.Of(l.loader_id());
  s.index = l.index();
  s.worker_id = l.worker_id();
  {
    TimelineSpan span;
    span.kind = drawn;
    span.process_index = event.process.index();
    span.tid = tid;
    span.worker_id = drawn == TimelineSpan::Kind::kFetch ? s.worker_id : -1;
    span.start_ns = s.start;
    span.end_ns = s.end;
    if (drawn_spans_.size() >= kDrawnSpans) {
      drawn_spans_dropped_end_ = std::max(drawn_spans_dropped_end_, drawn_spans_.front().end_ns);
      drawn_spans_.pop_front();
    }
    drawn_spans_.push_back(span);
  }
  if (p.worker && l.kind() == trace::LOADER_FETCH) {
    // Busy per batch: the fetch, plus the CPU it spent handing the previous
    // batch over (between the two fetches).
    const uint64_t busy = Gap(s.end, s.start) + Gap(s.begin.cpu, t.fetch_finish_cpu);
    spans_.AddWorkerFetch(event.process.index(), s, t.fetched_before, busy);
    t.fetched_before = true;
    t.fetch_finish_cpu = s.finish.cpu;
    p.first_fetch = std::min(p.first_fetch, s.start);
    p.last_fetch = std::max(p.last_fetch, s.start);
    return;
  }
  if (!p.root) return;
  switch (l.kind()) {
    case trace::LOADER_NEXT: {
      ++next_counts_[{tid, s.loader_id}];
      loaders_.Served(s.loader_id);
      // Its number on the thread: StepCalls gives its release by it.
      if (t.recent_nexts.empty()) t.recent_nexts.resize(2 * StepCalls::kPendingKept);
      const uint64_t key = t.nexts++;
      t.recent_nexts[key % t.recent_nexts.size()] = {s.start, s.loader_id};
      spans_.AddNext(tid, s);
      // A step boundary for the thread's calls (those inside it came before).
      t.calls.AddNext(s.start, s.end, s.finish.cpu, key);
      TakeReleased(tid, t);
      break;
    }
    case trace::LOADER_FETCH:
      spans_.AddFetch(tid, s);
      break;
    case trace::LOADER_PIN:
      ++t.pins;
      spans_.AddPin(tid, s, t.pinned_before, Gap(s.start, t.pin_start),
                    Gap(s.begin.cpu, t.pin_cpu));
      t.pinned_before = true;
      t.pin_start = s.start;
      t.pin_cpu = s.begin.cpu;
      break;
    case trace::LOADER_RECV:
      spans_.AddRecv(tid, s);
      break;
    default:
      break;
  }
}

void PipelineAnalysis::Finish(const RunInfo& run) { BuildInputs(run); }

uint32_t PipelineAnalysis::pin_tid() const {
  auto root = processes_.find(root_index_);
  if (root == processes_.end()) return 0;
  uint32_t tid = 0;
  size_t most = 0;
  for (const auto& [t, thread] : root->second.threads) {
    if (thread.pins > most) {
      most = thread.pins;
      tid = t;
    }
  }
  return tid;
}

std::vector<PipelineAnalysis::TimelineSpan> PipelineAnalysis::TimelineSpans(
    uint64_t start_ns, uint64_t end_ns, size_t max_spans) const {
  std::vector<TimelineSpan> out;
  auto overlaps = [&](uint64_t s, uint64_t e) { return s < end_ns && e >= start_ns; };
  auto add = [&](TimelineSpan::Kind kind, int index, uint32_t tid, int32_t worker, uint64_t s,
                 uint64_t e) {
    if (!overlaps(s, e)) return;
    TimelineSpan span;
    span.kind = kind;
    span.process_index = index;
    span.tid = tid;
    span.worker_id = worker;
    span.start_ns = s;
    span.end_ns = e;
    out.push_back(span);
  };
  // The kept spans by thread and kind, each in its order of arrival: `out`
  // gets them in the order it always did, and the sort below, which is not
  // stable, orders spans that start and end together as it always did.
  using K = TimelineSpan::Kind;
  constexpr K kKinds[] = {K::kFetch, K::kNext, K::kRecv, K::kPin};
  std::map<std::pair<int, uint32_t>, std::array<std::vector<const TimelineSpan*>, 4>> kept;
  for (const TimelineSpan& s : drawn_spans_) {
    const size_t kind = static_cast<size_t>(
        std::find(std::begin(kKinds), std::end(kKinds), s.kind) - std::begin(kKinds));
    kept[{s.process_index, s.tid}][kind].push_back(&s);
  }
  for (const auto& [index, process] : processes_) {
    for (const auto& [tid, thread] : process.threads) {
      auto spans = kept.find({index, tid});
      if (spans != kept.end())
        for (const auto& of_kind : spans->second)
          for (const TimelineSpan* s : of_kind)
            add(s->kind, index, tid, s->worker_id, s->start_ns, s->end_ns);
      for (const Call& c : thread.calls.Drawn())
        add(c.copy ? K::kCopy : K::kSync, index, tid, -1, c.start, c.end);
    }
  }
  for (const TimelineSpan& s : device_spans_)
    add(s.kind, s.process_index, 0, -1, s.start_ns, s.end_ns);
  for (const auto& [from, to] : blind_) add(K::kGpuBlind, root_index_, 0, -1, from, to);
  if (blind_open_) add(K::kGpuBlind, root_index_, 0, -1, blind_since_, end_ns);
  std::sort(out.begin(), out.end(), [](const TimelineSpan& a, const TimelineSpan& b) {
    return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns < b.end_ns;
  });
  if (out.size() > max_spans) out.resize(max_spans);
  return out;
}

std::vector<uint64_t> PipelineAnalysis::IterTimes(uint64_t loader) const {
  std::vector<uint64_t> out;
  for (size_t i = 0; i < iters_.size(); ++i)
    if (iters_[i].loader_id() == loader) out.push_back(iter_times_[i]);
  std::sort(out.begin(), out.end());
  return out;
}

device::ProcessDeviceAnalysis& PipelineAnalysis::Device() {
  if (!device_) {
    device_ = std::make_unique<device::ProcessDeviceAnalysis>(device::BusyOptions(),
                                                              60 * device::kSec, join_);
    device_->KeepJoinedCopies();  // the batch copies' device times (stream waits)
  }
  return *device_;
}

void PipelineAnalysis::BuildInputs(const RunInfo& run) {
  model::Inputs& in = inputs_;
  auto root_it = processes_.find(root_index_);
  if (root_it == processes_.end()) return;
  Process& root = root_it->second;
  // Every call in its segment, every __next__ its release, then every span,
  // sample and registration (releases included) in its segment.
  for (auto& [t, thread] : root.threads) {
    thread.calls.Flush();
    TakeReleased(t, thread);
    if (thread.calls.drawn_dropped())
      timeline_from_ns_ = std::max(timeline_from_ns_, thread.calls.Drawn().front().start);
  }
  spans_.Flush();
  if (device_spans_dropped_ && !device_spans_.empty())
    timeline_from_ns_ = std::max(timeline_from_ns_, device_spans_.front().start_ns);
  timeline_from_ns_ = std::max({timeline_from_ns_, drawn_spans_dropped_end_, blind_dropped_end_});

  // The loader the training loop takes from: the most NEXT spans on one
  // thread of the root.
  uint32_t tid = 0;
  uint64_t loader = 0;
  uint64_t most = 0;
  for (const auto& [key, n] : next_counts_)
    if (n > most) most = n, tid = key.first, loader = key.second;
  // The steps, by the segment each starts in (one step a segment until the
  // segments merge).
  std::vector<StepGroup> groups;
  if (most >= 3) {
    in.main.timed_by_hook = true;
    for (const StepSpans::Segment& seg : spans_.segments())
      for (const StepSpans::Steps& e : seg.steps)
        if (e.tid == tid && e.loader_id == loader && e.count > 0)
          groups.push_back({seg.start, e.count, e.waits});
  } else {
    // No hook: the steps are the recurring large H2D copies of the root's
    // main thread (at least half the largest).
    tid = 0;
    for (auto& [t, thread] : root.threads) {
      if (run.root != nullptr && t != run.root->pid()) continue;
      const uint64_t largest = thread.calls.largest_h2d();
      if (largest < kMinBatchBytes) continue;
      for (const StepCalls::Segment& seg : thread.calls.segments()) {
        uint64_t count = 0;
        for (const StepCalls::Copies& c : seg.copies)
          if (c.bytes * 2 >= largest) count += c.count;
        if (count > 0) groups.push_back({seg.start, count, 0});
      }
      tid = t;
    }
  }
  std::stable_sort(groups.begin(), groups.end(),
                   [](const StepGroup& a, const StepGroup& b) { return a.start < b.start; });
  step_tid_ = tid;
  for (const trace::LoaderEvent& it : iters_) {
    if (it.loader_id() != loader && loader != 0) continue;
    model::LoaderFacts& l = in.loader;
    l.hooked = l.present = true;
    l.num_workers = it.num_workers();
    l.pin_memory = it.pin_memory();
    l.prefetch_factor = it.prefetch_factor();
    l.persistent_workers = it.persistent_workers();
    l.batch_size = it.batch_size();
    l.site = it.site();
    l.remade = loaders_.Remade(loader);
    ++l.epochs;
  }
  const std::vector<uint64_t> epoch_starts = IterTimes(loader);
  uint64_t steps = 0;
  if (!ChooseSteadyWindow(groups, in.main.timed_by_hook ? epoch_starts : std::vector<uint64_t>(),
                          &window_, &steps))
    return;
  const double n = static_cast<double>(steps);
  const auto inside = [&](uint64_t t) { return t >= window_.start_ns && t < window_.end_ns; };
  model::MainStep& m = in.main;
  m.steps = steps;
  m.step_ns = static_cast<double>(window_.length()) / n;

  Thread& main = root.threads[tid];
  // The step thread's __next__ spans of the loader, the spans inside them
  // (receiving a batch from a worker; making it with num_workers=0) and
  // pinscope's registrations, by the segments inside the window. Sums in
  // integers: the doubles are those of the spans' sums in any order.
  uint64_t next_ns = 0, next_cpu_ns = 0, release_ns = 0, busy_handover_ns = 0;
  uint64_t recvs = 0, recv_ns = 0, recv_cpu_ns = 0;
  uint64_t make_ns = 0, make_cpu_ns = 0, make_sys_ns = 0, make_faults = 0;
  uint64_t register_ns = 0, unregister_ns = 0, unmap_ns = 0;
  // The thread's CPU time at the first step inside the window and at the
  // first at or after its end: the steps between are the window's.
  bool first = false, final = false;
  uint64_t first_cpu = 0, final_cpu = 0;
  for (const StepSpans::Segment& seg : spans_.segments()) {
    if (seg.start >= window_.end_ns && !final) {
      for (const StepSpans::Steps& e : seg.steps)
        if (e.tid == tid && e.loader_id == loader && e.count > 0)
          final = true, final_cpu = e.first_cpu;
    }
    if (!inside(seg.start)) continue;
    for (const StepSpans::Steps& e : seg.steps) {
      if (e.tid != tid || e.loader_id != loader) continue;
      next_ns += e.next_ns;
      next_cpu_ns += e.next_cpu_ns;
      release_ns += e.release_ns;
      busy_handover_ns += e.busy_handover_ns;
      if (e.usage) m.usage_recorded = true;  // spans carry the thread's usage
      if (!first && e.count > 0) first = true, first_cpu = e.first_cpu;
    }
    for (const StepSpans::Sums& s : seg.sums) {
      if (s.tid != tid) continue;
      switch (s.kind) {
        case StepSpans::Kind::kRecv:
          recvs += s.count;
          recv_ns += s.wall_ns;
          recv_cpu_ns += s.cpu_ns;
          break;
        case StepSpans::Kind::kFetch:
          make_ns += s.wall_ns;
          make_cpu_ns += s.cpu_ns;
          make_sys_ns += s.sys_ns;
          make_faults += s.faults;
          break;
        case StepSpans::Kind::kRegister:
          register_ns += s.wall_ns;
          break;
        case StepSpans::Kind::kUnregister:
          unregister_ns += s.wall_ns;
          break;
        case StepSpans::Kind::kUnmap:
          unmap_ns += s.wall_ns;
          break;
        default:
          break;
      }
    }
  }
  m.next_ns = static_cast<double>(next_ns);
  m.next_cpu_ns = static_cast<double>(next_cpu_ns);
  // Receiving batches from the workers (unpickling) inside __next__; the
  // part of it that waited for the worker of the batch while that worker
  // was inside another fetch (step_spans.h): the in-order DataLoader hands
  // batch i of an epoch (__next__'s index) to worker i mod num_workers, whose
  // process answers when the fetch lets go of the GIL; measured per batch
  // rather than assumed from a busy share.
  m.recv_ns = static_cast<double>(recv_ns);
  m.recv_cpu_ns = static_cast<double>(recv_cpu_ns);
  m.recv_seen = recvs > 0;
  m.recv_busy_off_ns = static_cast<double>(busy_handover_ns);
  // Epoch starts: from each iterator of the loader to its first batch.
  {
    model::LoaderFacts& l = in.loader;
    std::vector<double> cost;
    auto count = next_counts_.find({tid, loader});
    const uint64_t batches = count == next_counts_.end() ? 0 : count->second;
    for (size_t i = 0; i < iters_.size(); ++i) {
      if (iters_[i].loader_id() != loader) continue;
      const uint64_t t = iter_times_[i];
      const StepSpans::First* nx = spans_.EpochFirst(i, tid);
      if (nx == nullptr) continue;
      cost.push_back(Diff(nx->end, t));
      l.epochs_in_window += inside(t) && t != window_.start_ns;
    }
    {
      const std::vector<uint64_t>& from = epoch_starts;
      const StepSpans::Totals* later = spans_.totals(tid, loader);
      if (from.size() >= 2 && later != nullptr && later->after_first_epoch > 0 &&
          later->after_first_epoch_end > from[1])
        l.epoch_step_ns = Diff(later->after_first_epoch_end, from[1]) /
                          static_cast<double>(later->after_first_epoch);
    }
    if (cost.size() >= 3) cost.erase(cost.begin());
    if (!cost.empty()) l.epoch_start_ns = MeanOf(cost);
    if (l.epochs > 0) l.steps_per_epoch = batches / l.epochs;
  }
  // Batches made by the main thread (num_workers=0).
  m.make_ns = static_cast<double>(make_ns);
  m.make_cpu_ns = static_cast<double>(make_cpu_ns);
  m.make_sys_ns = static_cast<double>(make_sys_ns);
  m.make_faults = static_cast<double>(make_faults);
  if (first && final) m.cpu_ns = Diff(final_cpu, first_cpu);
  // From each __next__'s return to the step thread's next CUDA call
  // (StepCalls measured it as the calls came).
  m.release_ns = static_cast<double>(release_ns);

  // Copies and syncs, by the segments inside the window (each starts at a
  // step or between two: the window's calls); the batch copies are the
  // large H2D ones. Sums in integers: the doubles are those of the calls'
  // sums in any order.
  const std::deque<StepCalls::Segment>& segments = main.calls.segments();
  uint64_t largest = 0;
  for (const StepCalls::Segment& seg : segments)
    if (inside(seg.start) && !seg.copies.empty())
      largest = std::max(largest, seg.copies.back().bytes);
  device::ProcessDeviceResult device_result;
  if (device_) {
    device_->Finish(window_);
    device_result = compute_.Finish(window_);
    FoldDeviceTimes(UINT64_MAX);
  }
  uint64_t batch_bytes = 0;
  uint64_t batch_copies = 0, pinned = 0, pinscope = 0, shm = 0, fresh = 0, skipped = 0;
  uint64_t device_copies = 0;  // batch copies with a device record
  uint64_t sync_ns = 0, other_copy_ns = 0, copy_ns = 0, copy_cpu_ns = 0, copy_faults = 0;
  uint64_t copy_wait_ns = 0, copy_device_ns = 0;
  const StepCalls::Segment* cpu_first = nullptr;
  const StepCalls::Segment* cpu_last = nullptr;
  uint64_t usage_calls = 0;
  for (const StepCalls::Segment& seg : segments) {
    if (!inside(seg.start)) continue;
    if (seg.usage_calls > 0) {
      m.usage_recorded = true;
      if (!cpu_first) cpu_first = &seg;
      cpu_last = &seg;
      usage_calls += seg.usage_calls;
    }
    sync_ns += seg.sync_ns;
    other_copy_ns += seg.other_copy_ns;
    for (const StepCalls::Copies& c : seg.copies) {
      const bool batch = largest >= kMinBatchBytes && c.bytes * 2 >= largest;
      if (!batch) {
        other_copy_ns += c.wall_ns;
        continue;
      }
      batch_copies += c.count;
      batch_bytes += c.bytes * c.count;
      copy_ns += c.wall_ns;
      copy_cpu_ns += c.cpu_ns;
      copy_faults += c.faults;
      copy_wait_ns += c.wait_ns;
      copy_device_ns += c.device_ns;
      device_copies += c.device;
      pinned += c.pinned;
      pinscope += c.pinscope;
      shm += c.shm;
      fresh += c.fresh;
      skipped += c.skipped;
    }
  }
  m.sync_ns = static_cast<double>(sync_ns);
  m.other_copy_ns = static_cast<double>(other_copy_ns);
  m.copy_ns = static_cast<double>(copy_ns);
  m.copy_cpu_ns = static_cast<double>(copy_cpu_ns);
  m.copy_faults = static_cast<double>(copy_faults);
  m.copy_wait_ns = static_cast<double>(copy_wait_ns);
  m.copy_device_ns = static_cast<double>(copy_device_ns);
  // Device records taken in windows (CUPTI detached in between): the copies
  // that have one stand for all of them.
  if (device_ && device_->windowed() && device_copies > 0 && device_copies < batch_copies) {
    const double scale = static_cast<double>(batch_copies) / static_cast<double>(device_copies);
    m.copy_wait_ns *= scale;
    m.copy_device_ns *= scale;
  }
  m.batch_bytes = steps ? batch_bytes / steps : 0;
  m.batch_pinned = batch_copies && pinned * 2 > batch_copies;
  m.batch_pinscope = batch_copies && pinscope * 2 > batch_copies;
  m.batch_shm = batch_copies && shm * 2 > batch_copies;
  // A trace that times the program's munmaps (SHM_UNMAP_DONE) gives the
  // release of shm batches as it is: the step thread's munmaps, where the
  // kernel frees a batch's pages. The CPU from __next__'s return to the
  // next call also holds whatever the loop does there first (a CPU
  // transform of the batch), which is the loop's own work, not the release.
  if (unmaps_timed_ && m.batch_shm) m.release_ns = static_cast<double>(unmap_ns);
  m.batch_fresh_alloc = batch_copies && fresh * 2 > batch_copies;
  in.skipped_budget = skipped;
  m.pin_unregister_ns = static_cast<double>(unregister_ns);
  m.pin_register_ns = static_cast<double>(register_ns);
  // Per step.
  for (double* v :
       {&m.next_ns,         &m.next_cpu_ns,   &m.make_ns,     &m.make_cpu_ns, &m.make_sys_ns,
        &m.make_faults,     &m.copy_ns,       &m.copy_cpu_ns, &m.copy_faults, &m.copy_wait_ns,
        &m.copy_device_ns,  &m.other_copy_ns, &m.sync_ns,     &m.cpu_ns,      &m.pin_unregister_ns,
        &m.pin_register_ns, &m.release_ns,    &m.recv_ns,     &m.recv_cpu_ns, &m.recv_busy_off_ns})
    *v /= n;
  if (!in.main.timed_by_hook) {
    // Without __next__ spans the thread's CPU per step is what its calls
    // saw, from the first call with a CPU time to the last.
    if (usage_calls >= 2)
      m.cpu_ns = Diff(cpu_last->last_cpu, cpu_first->first_cpu) / n * n / std::max(1.0, n - 1);
    // The main thread waited for the next batch where it neither ran nor
    // waited in a call: the off-CPU rest of the step.
    const double calls = m.copy_ns + m.other_copy_ns + m.sync_ns;
    const double own_cpu = std::max(0.0, m.cpu_ns - (m.copy_cpu_ns));
    m.next_ns = std::max(0.0, m.step_ns - calls - own_cpu);
    m.next_cpu_ns = 0;
  }

  // The workers: every FETCH in a worker of the root inside the window, by
  // the segments; their medians from the fetches kept (all of them, or a
  // uniform sample of a long run's: step_spans.h).
  model::Producers& p = in.producers;
  std::vector<double> fetch, fetch_cpu, faults, busy;
  std::set<int> seen;
  for (const StepSpans::Fetch& f : spans_.fetches()) {
    if (!inside(f.start)) continue;
    fetch.push_back(static_cast<double>(f.wall_ns));
    fetch_cpu.push_back(static_cast<double>(f.cpu_ns));
    faults.push_back(static_cast<double>(f.faults));
    // Busy per batch: the fetch, plus the CPU it spent handing the previous
    // batch over (between the two fetches).
    if (f.busy) busy.push_back(static_cast<double>(f.busy_ns));
    seen.insert(f.process);
  }
  uint64_t batches = 0;
  for (const StepSpans::Segment& seg : spans_.segments()) {
    if (!inside(seg.start)) continue;
    for (const StepSpans::Sums& s : seg.sums)
      if (s.kind == StepSpans::Kind::kWorkerFetch) batches += s.count;
  }
  int workers_seen = static_cast<int>(seen.size());
  if (spans_.fetches_sampled()) {
    // A sample may miss a worker: those whose fetches span part of the window.
    workers_seen = 0;
    for (const auto& [index, proc] : processes_)
      workers_seen +=
          proc.worker && proc.first_fetch < window_.end_ns && proc.last_fetch >= window_.start_ns;
  }
  p.workers = in.loader.hooked ? in.loader.num_workers : workers_seen;
  if (p.workers > 0 && !fetch.empty()) {
    p.timed_by_hook = true;
    p.batches = batches;
    p.fetch_ns = MedianOf(fetch);
    p.fetch_cpu_ns = MedianOf(fetch_cpu);
    p.fetch_faults = MedianOf(faults);
    p.cycle_ns = busy.empty() ? p.fetch_ns : MedianOf(busy);
  } else if (p.workers > 0) {
    // Without the hook: a worker's life over the batches it made (its
    // segments), from the thread samples' CPU when they exist.
    p.fetch_ns = in.main.step_ns * p.workers;
    p.cycle_ns = p.fetch_ns;
  }
  if (!in.loader.hooked && p.workers > 0) in.loader.present = true;

  // The pin thread: PIN spans on another thread of the root.
  model::PinThread& pt = in.pin_thread;
  for (auto& [t, thread] : root.threads) {
    if (t == tid || thread.pins < 3) continue;
    StepSpans::Sums pin, cycle, recv;
    for (const StepSpans::Segment& seg : spans_.segments()) {
      if (!inside(seg.start)) continue;
      for (const StepSpans::Sums& s : seg.sums) {
        if (s.tid != t) continue;
        StepSpans::Sums* to = s.kind == StepSpans::Kind::kPin     ? &pin
                              : s.kind == StepSpans::Kind::kCycle ? &cycle
                              : s.kind == StepSpans::Kind::kRecv  ? &recv
                                                                  : nullptr;
        if (to == nullptr) continue;
        to->count += s.count;
        to->wall_ns += s.wall_ns;
        to->cpu_ns += s.cpu_ns;
        to->faults += s.faults;
      }
    }
    if (pin.count < 2) continue;
    const double pins = static_cast<double>(pin.count);
    // Its receiving of the workers' batches: off-CPU time per batch.
    const double recv_wait = static_cast<double>(recv.wall_ns) - static_cast<double>(recv.cpu_ns);
    pt.recv_wait_ns = std::max(0.0, recv_wait) / pins;
    pt.present = true;
    pt.batches = pin.count;
    pt.pin_ns = static_cast<double>(pin.wall_ns) / pins;
    pt.pin_cpu_ns = static_cast<double>(pin.cpu_ns) / pins;
    pt.pin_faults = static_cast<double>(pin.faults) / pins;
    // From each batch's pin_memory() start to the next's.
    if (cycle.count > 0) {
      pt.cycle_cpu_ns = static_cast<double>(cycle.cpu_ns) / static_cast<double>(cycle.count);
      pt.cycle_ns = static_cast<double>(cycle.wall_ns) / static_cast<double>(cycle.count);
    }
    break;
  }

  // The GPU over the window.
  if (device_) {
    model::Gpu& g = in.gpu;
    const device::DeviceBusy* best = nullptr;
    for (const device::DeviceBusy& b : device_result.devices)
      if (b.measured() && (!best || b.busy_ns > best->busy_ns)) best = &b;
    if (best) {
      g.measured = true;
      g.covered = best->covered_fraction();
      g.busy_ns = best->busy_fraction * m.step_ns;
    }
  }

  // The root's other threads' CPU per step (thread samples in the window).
  for (const auto& [t, v] : spans_.samples()) {
    if (t == tid) continue;
    if (pt.present && root.threads.count(t) && root.threads[t].pins >= 3) continue;
    uint64_t a = 0, b = 0, ta = 0, tb = 0;
    for (auto [time, cpu] : v) {
      if (time < window_.start_ns) a = cpu, ta = time;
      if (time <= window_.end_ns) b = cpu, tb = time;
    }
    if (tb > ta && b > a)
      in.host.other_cpu_ns += Diff(b, a) / (static_cast<double>(tb - ta) / m.step_ns);
  }
}

}  // namespace pinscope
