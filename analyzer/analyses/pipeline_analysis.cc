// The pipeline model's measurements; see pipeline_analysis.h.
#include "analyzer/analyses/pipeline_analysis.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#include "analyzer/analyses/device_from_trace.h"

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

// Off-CPU time inside one __next__ that means the loop found no batch
// queued: far above the scheduler's noise (tens of microseconds) and an
// unpickling's page-cache reads.
constexpr double kQueueEmptyWaitNs = 1e6;

double Diff(uint64_t a, uint64_t b) { return a > b ? static_cast<double>(a - b) : 0.0; }

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
  AddCall(t, call);
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
  AddCall(t, CallOf(event.time_ns, end, sync.usage_enter(), sync.usage_exit()));
}

void PipelineAnalysis::AddCall(Thread& t, const Call& call) {
  t.last_call_start = call.start;
  t.calls.Add(call);
  if (t.calls.has_released()) TakeReleased(t);
}

void PipelineAnalysis::TakeReleased(Thread& t) {
  for (auto [key, ns] : t.calls.TakeReleased())
    if (key < t.next.size()) t.next[key].release = ns;
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

void PipelineAnalysis::OnPin(const Event& event, const trace::PinEvent& pin) {
  if (event.process.index() != root_index_) return;
  Thread& t = Of(event.process).threads[event.packet.tid()];
  if (pin.op() == trace::UNREGISTER && t.unregister.size() < kMaxKept) {
    t.unregister.push_back({event.time_ns, pin.duration_ns()});
  } else if (pin.op() == trace::REGISTER && t.registers.size() < kMaxKept) {
    t.registers.push_back({event.time_ns, pin.duration_ns()});
  }
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
  if (recording_.size() < kMaxKept) recording_.push_back({s.time_ns, s.kernels});
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
  Process& p = Of(event.process);
  for (const auto& t : sample.threads()) {
    auto& v = p.samples[t.tid()];
    if (v.size() < kMaxKept) v.push_back({event.time_ns, t.cpu_ns()});
  }
}

void PipelineAnalysis::OnLoader(const Event& event, const trace::LoaderEvent& l) {
  Process& p = Of(event.process);
  if (l.kind() == trace::LOADER_ITER) {
    if (p.root && iters_.size() < 4096) {
      iters_.push_back(l);
      iter_times_.push_back(event.packet.timestamp_ns() > 0 ? event.packet.timestamp_ns()
                                                            : event.time_ns);
    }
    return;
  }
  std::vector<Span>* list = nullptr;
  Thread& t = p.threads[event.packet.tid()];
  switch (l.kind()) {
    case trace::LOADER_NEXT:
      list = &t.next;
      break;
    case trace::LOADER_FETCH:
      list = &t.fetch;
      break;
    case trace::LOADER_PIN:
      list = &t.pin;
      break;
    case trace::LOADER_RECV:
      list = &t.recv;
      break;
    default:
      return;
  }
  const bool boundary = p.root && l.kind() == trace::LOADER_NEXT;
  if (list->size() >= kMaxKept && !boundary) return;
  // The span's own clock readings, not the replay's time: a span is written
  // when it ends, after the spans inside it, and the replay's time keeps each
  // file's order (the later of the two), which would move its start.
  Span s;
  s.start = event.packet.timestamp_ns() > 0 ? event.packet.timestamp_ns() : event.time_ns;
  s.end = std::max(s.start, l.end_ns());
  s.begin = UsageOf(l.usage_begin());
  s.finish = UsageOf(l.usage_end());
  s.loader_id = l.loader_id();
  s.index = l.index();
  s.tid = event.packet.tid();
  s.worker_id = l.worker_id();
  size_t key = SIZE_MAX;
  if (list->size() < kMaxKept) {
    key = list->size();
    list->push_back(s);
  }
  if (boundary) {
    // A step boundary for the thread's calls (those inside it came before).
    t.calls.AddNext(s.start, s.end, s.finish.cpu, key);
    TakeReleased(t);
  }
}

void PipelineAnalysis::Finish(const RunInfo& run) { BuildInputs(run); }

uint32_t PipelineAnalysis::pin_tid() const {
  auto root = processes_.find(root_index_);
  if (root == processes_.end()) return 0;
  uint32_t tid = 0;
  size_t most = 0;
  for (const auto& [t, thread] : root->second.threads) {
    if (thread.pin.size() > most) {
      most = thread.pin.size();
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
  for (const auto& [index, process] : processes_) {
    for (const auto& [tid, thread] : process.threads) {
      using K = TimelineSpan::Kind;
      for (const Span& s : thread.fetch) add(K::kFetch, index, tid, s.worker_id, s.start, s.end);
      for (const Span& s : thread.next) add(K::kNext, index, tid, -1, s.start, s.end);
      for (const Span& s : thread.recv) add(K::kRecv, index, tid, -1, s.start, s.end);
      for (const Span& s : thread.pin) add(K::kPin, index, tid, -1, s.start, s.end);
      for (const Call& c : thread.calls.Drawn())
        add(c.copy ? K::kCopy : K::kSync, index, tid, -1, c.start, c.end);
    }
  }
  for (const TimelineSpan& s : device_spans_)
    add(s.kind, s.process_index, 0, -1, s.start_ns, s.end_ns);
  // Kernels are recorded from CUPTI's start until a switch turns them off,
  // then from a switch that turns them on again (DeviceRecording).
  uint64_t blind_since = 0;
  bool blind = false;
  for (const auto& [time, kernels] : recording_) {
    if (!kernels && !blind) {
      blind = true;
      blind_since = time;
    } else if (kernels && blind) {
      blind = false;
      add(TimelineSpan::Kind::kGpuBlind, root_index_, 0, -1, blind_since, time);
    }
  }
  if (blind) add(TimelineSpan::Kind::kGpuBlind, root_index_, 0, -1, blind_since, end_ns);
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
  // Every call in its segment, every __next__ its release.
  for (auto& [t, thread] : root.threads) {
    thread.calls.Flush();
    TakeReleased(thread);
    if (thread.calls.drawn_dropped())
      timeline_from_ns_ = std::max(timeline_from_ns_, thread.calls.Drawn().front().start);
  }
  if (device_spans_dropped_ && !device_spans_.empty())
    timeline_from_ns_ = std::max(timeline_from_ns_, device_spans_.front().start_ns);

  // The loader the training loop takes from: the most NEXT spans on one
  // thread of the root.
  uint32_t tid = 0;
  uint64_t loader = 0;
  size_t most = 0;
  for (auto& [t, thread] : root.threads) {
    std::map<uint64_t, size_t> by_loader;
    for (const Span& s : thread.next) ++by_loader[s.loader_id];
    for (auto [id, n] : by_loader)
      if (n > most) most = n, tid = t, loader = id;
  }
  std::vector<uint64_t> starts;  // step starts on the step thread
  std::vector<uint64_t> waits;   // starts of the steps whose __next__ waited
  // Without the hook, from merged segments (a long run): (start, steps).
  std::vector<std::pair<uint64_t, uint64_t>> weighted;
  if (most >= 3) {
    in.main.timed_by_hook = true;
    std::vector<Span>& recv = root.threads[tid].recv;
    std::sort(recv.begin(), recv.end(),
              [](const Span& a, const Span& b) { return a.start < b.start; });
    for (const Span& s : root.threads[tid].next) {
      if (s.loader_id != loader) continue;
      starts.push_back(s.start);
      // Off the CPU inside __next__ and outside receiving a batch: the
      // queue was empty, the thread slept.
      double off = Diff(s.end, s.start) - Diff(s.finish.cpu, s.begin.cpu);
      auto r = std::lower_bound(recv.begin(), recv.end(), s.start,
                                [](const Span& x, uint64_t t) { return x.start < t; });
      for (; r != recv.end() && r->start < s.end; ++r)
        off -= Diff(r->end, r->start) - Diff(r->finish.cpu, r->begin.cpu);
      if (off >= kQueueEmptyWaitNs) waits.push_back(s.start);
    }
  } else {
    // No hook: the steps are the recurring large H2D copies of the root's
    // main thread (at least half the largest).
    tid = 0;
    for (auto& [t, thread] : root.threads) {
      if (run.root != nullptr && t != run.root->pid()) continue;
      const uint64_t largest = thread.calls.largest_h2d();
      if (largest < kMinBatchBytes) continue;
      // A segment merged from several holds several steps (the window is
      // then chosen at its resolution).
      for (const StepCalls::Segment& seg : thread.calls.segments()) {
        uint64_t count = 0;
        for (const StepCalls::Copies& c : seg.copies)
          if (c.bytes * 2 >= largest) count += c.count;
        if (count > 0) weighted.emplace_back(seg.start, count);
      }
      tid = t;
    }
  }
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
    ++l.epochs;
  }
  if (std::all_of(weighted.begin(), weighted.end(), [](const auto& w) { return w.second == 1; })) {
    for (const auto& w : weighted) starts.push_back(w.first);
    weighted.clear();
  }
  const std::vector<uint64_t> epoch_starts = IterTimes(loader);
  uint64_t steps = 0;
  if (!weighted.empty()) {
    // Merged segments: the same window rule over the steps, its edges at
    // the start of the segment each falls in, its steps those of the
    // segments inside.
    std::sort(weighted.begin(), weighted.end());
    uint64_t total = 0;
    for (const auto& w : weighted) total += w.second;
    const uint64_t skip = std::max<uint64_t>(2, total / 8), last = total - 1;
    if (total < 4 || last <= skip + 1) return;
    const auto start_of = [&](uint64_t index) {
      for (const auto& [start, count] : weighted) {
        if (index < count) return start;
        index -= count;
      }
      return weighted.back().first;
    };
    window_ = {start_of(skip), start_of(last)};
    for (const auto& [start, count] : weighted)
      if (start >= window_.start_ns && start < window_.end_ns) steps += count;
    if (steps == 0) return;
  } else {
    if (starts.size() < 4) return;
    std::sort(starts.begin(), starts.end());
    // Several epochs: the steady window lies inside one, the one with the most
    // steps (the later of equals). An epoch's start (its workers forked anew,
    // their first batches) is not the steady step; persistent_workers=True
    // is the change that times it.
    if (in.main.timed_by_hook) {
      const std::vector<uint64_t>& bounds = epoch_starts;
      if (bounds.size() >= 2) {
        size_t best_a = 0, best_n = 0;
        for (size_t e = 0; e < bounds.size(); ++e) {
          const uint64_t from = bounds[e];
          const uint64_t to = e + 1 < bounds.size() ? bounds[e + 1] : UINT64_MAX;
          const size_t a = std::lower_bound(starts.begin(), starts.end(), from) - starts.begin();
          const size_t b = std::lower_bound(starts.begin(), starts.end(), to) - starts.begin();
          if (b - a >= best_n) best_n = b - a, best_a = a;
        }
        if (best_n >= 4) {
          starts.erase(starts.begin() + static_cast<std::ptrdiff_t>(best_a + best_n), starts.end());
          starts.erase(starts.begin(), starts.begin() + static_cast<std::ptrdiff_t>(best_a));
        }
      }
    }
    // The steady window: without the first steps (workers starting, caches
    // warming, prefetched batches queued) and the last (the end of the loop).
    size_t skip = std::max<size_t>(2, starts.size() / 8);
    size_t last = starts.size() - 1;
    if (last <= skip + 1) return;
    // Where the loop waits for batches, the window runs from one step that
    // found the queue empty to another: the same state at both ends, so the
    // steps counted are the batches made in between. From an arbitrary step
    // instead, a backlog queued before it (prefetched batches, a burst of
    // workers) drains inside the window and the step looks shorter than the
    // supply can sustain.
    std::sort(waits.begin(), waits.end());
    {
      const auto first = std::lower_bound(waits.begin(), waits.end(), starts[skip]);
      const auto end = std::upper_bound(waits.begin(), waits.end(), starts[last]);
      if (first != end) {
        const size_t a = std::lower_bound(starts.begin(), starts.end(), *first) - starts.begin();
        const size_t b =
            std::lower_bound(starts.begin(), starts.end(), *(end - 1)) - starts.begin();
        if (b >= a + 3 && 2 * (b - a) >= last - skip) skip = a, last = b;
      }
    }
    window_ = {starts[skip], starts[last]};
    steps = last - skip;
  }
  const double n = static_cast<double>(steps);
  const auto inside = [&](uint64_t t) { return t >= window_.start_ns && t < window_.end_ns; };
  model::MainStep& m = in.main;
  m.steps = steps;
  m.step_ns = static_cast<double>(window_.length()) / n;

  Thread& main = root.threads[tid];
  // __next__ spans and, inside them, batches made by the main thread.
  // In order of their starts (the lookups below search them).
  std::sort(main.next.begin(), main.next.end(),
            [](const Span& a, const Span& b) { return a.start < b.start; });
  const Span* first = nullptr;
  const Span* final = nullptr;
  for (const Span& s : main.next) {
    if (s.loader_id != loader || !inside(s.start)) continue;
    m.next_ns += Diff(s.end, s.start);
    m.next_cpu_ns += Diff(s.finish.cpu, s.begin.cpu);
    if (s.finish.cpu > 0) m.usage_recorded = true;  // spans carry the thread's usage
    if (!first) first = &s;
  }
  for (const Span& s : main.next)
    if (s.loader_id == loader && s.start == window_.end_ns) final = &s;
  // Receiving batches from the workers (unpickling) inside __next__. The
  // in-order DataLoader hands batch i of an epoch (__next__'s index) to
  // worker i mod num_workers; a receive that began while that worker was in
  // a fetch waited for the worker (its process answers when the fetch lets
  // go of the GIL), measured per batch rather than assumed from a busy share.
  std::map<int32_t, std::vector<std::pair<uint64_t, uint64_t>>> fetches_of;  // worker -> spans
  for (auto& [index, proc] : processes_) {
    if (!proc.worker) continue;
    for (auto& [t, thread] : proc.threads)
      for (const Span& f : thread.fetch)
        if (f.worker_id >= 0) fetches_of[f.worker_id].push_back({f.start, f.end});
  }
  const auto producer_busy = [&](uint64_t index, uint64_t at) {
    if (in.loader.num_workers <= 0) return false;
    auto it = fetches_of.find(static_cast<int32_t>(index % in.loader.num_workers));
    if (it == fetches_of.end()) return false;
    // The last fetch to start at or before `at` (a worker's fetches do not
    // overlap).
    auto f = std::upper_bound(it->second.begin(), it->second.end(), at,
                              [](uint64_t t, const auto& span) { return t < span.first; });
    return f != it->second.begin() && at < std::prev(f)->second;
  };
  for (auto& [worker, spans] : fetches_of) std::sort(spans.begin(), spans.end());
  for (const Span& s : main.recv) {
    if (!inside(s.start)) continue;
    const double wall = Diff(s.end, s.start), cpu = Diff(s.finish.cpu, s.begin.cpu);
    m.recv_ns += wall;
    m.recv_cpu_ns += cpu;
    m.recv_seen = true;
    // The __next__ this receive ran in (the last to start before it) gives
    // the batch's index.
    auto nx = std::upper_bound(main.next.begin(), main.next.end(), s.start,
                               [](uint64_t t, const Span& x) { return t < x.start; });
    if (nx == main.next.begin()) continue;
    --nx;
    if (nx->loader_id == loader && s.start < nx->end && producer_busy(nx->index, s.start))
      m.recv_busy_off_ns += std::max(0.0, wall - cpu);
  }
  // Epoch starts: from each iterator of the loader to its first batch.
  {
    model::LoaderFacts& l = in.loader;
    std::vector<double> cost;
    uint64_t batches = 0;
    for (const Span& nx : main.next) batches += nx.loader_id == loader;
    for (size_t i = 0; i < iters_.size(); ++i) {
      if (iters_[i].loader_id() != loader) continue;
      const uint64_t t = iter_times_[i];
      auto nx = std::lower_bound(main.next.begin(), main.next.end(), t,
                                 [](const Span& x, uint64_t v) { return x.start < v; });
      while (nx != main.next.end() && nx->loader_id != loader) ++nx;
      if (nx == main.next.end()) continue;
      cost.push_back(Diff(nx->end, t));
      l.epochs_in_window += inside(t) && t != window_.start_ns;
    }
    {
      const std::vector<uint64_t>& from = epoch_starts;
      if (from.size() >= 2) {
        uint64_t n = 0, end = 0;
        for (const Span& nx : main.next)
          if (nx.loader_id == loader && nx.start >= from[1]) ++n, end = std::max(end, nx.end);
        if (n > 0 && end > from[1]) l.epoch_step_ns = Diff(end, from[1]) / static_cast<double>(n);
      }
    }
    if (cost.size() >= 3) cost.erase(cost.begin());
    if (!cost.empty()) l.epoch_start_ns = MeanOf(cost);
    if (l.epochs > 0) l.steps_per_epoch = batches / l.epochs;
  }
  for (const Span& s : main.fetch) {
    if (!inside(s.start)) continue;
    m.make_ns += Diff(s.end, s.start);
    m.make_cpu_ns += Diff(s.finish.cpu, s.begin.cpu);
    m.make_sys_ns += Diff(s.finish.sys, s.begin.sys);
    m.make_faults += Diff(s.finish.faults, s.begin.faults);
  }
  if (first && final) m.cpu_ns = Diff(final->begin.cpu, first->begin.cpu);
  // From each __next__'s return to the step thread's next CUDA call
  // (StepCalls measured it as the calls came).
  for (const Span& sp : main.next)
    if (sp.loader_id == loader && inside(sp.start)) m.release_ns += static_cast<double>(sp.release);

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
  m.batch_fresh_alloc = batch_copies && fresh * 2 > batch_copies;
  in.skipped_budget = skipped;
  for (auto [t, d] : main.unregister)
    if (inside(t)) m.pin_unregister_ns += static_cast<double>(d);
  for (auto [t, d] : main.registers)
    if (inside(t)) m.pin_register_ns += static_cast<double>(d);
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

  // The workers: every FETCH in a worker of the root inside the window.
  model::Producers& p = in.producers;
  std::vector<double> fetch, fetch_cpu, faults, busy;
  int workers_seen = 0;
  for (auto& [index, proc] : processes_) {
    if (!proc.worker) continue;
    bool any = false;
    for (auto& [t, thread] : proc.threads) {
      const std::vector<Span>& f = thread.fetch;
      for (size_t i = 0; i < f.size(); ++i) {
        if (!inside(f[i].start)) continue;
        any = true;
        const double wall = Diff(f[i].end, f[i].start);
        const double cpu = Diff(f[i].finish.cpu, f[i].begin.cpu);
        fetch.push_back(wall);
        fetch_cpu.push_back(cpu);
        faults.push_back(Diff(f[i].finish.faults, f[i].begin.faults));
        // Busy per batch: the fetch, plus the CPU it spent handing the
        // previous batch over (between the two fetches).
        if (i > 0) {
          const double between = Diff(f[i].begin.cpu, f[i - 1].finish.cpu);
          busy.push_back(wall + between);
        }
      }
    }
    workers_seen += any;
  }
  p.workers = in.loader.hooked ? in.loader.num_workers : workers_seen;
  if (p.workers > 0 && !fetch.empty()) {
    p.timed_by_hook = true;
    p.batches = fetch.size();
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
    if (t == tid || thread.pin.size() < 3) continue;
    std::vector<double> wall, cpu, flt, cycle_cpu, cycle;
    const std::vector<Span>& s = thread.pin;
    for (size_t i = 0; i < s.size(); ++i) {
      if (!inside(s[i].start)) continue;
      wall.push_back(Diff(s[i].end, s[i].start));
      cpu.push_back(Diff(s[i].finish.cpu, s[i].begin.cpu));
      flt.push_back(Diff(s[i].finish.faults, s[i].begin.faults));
      if (i > 0) {
        cycle_cpu.push_back(Diff(s[i].begin.cpu, s[i - 1].begin.cpu));
        cycle.push_back(Diff(s[i].start, s[i - 1].start));
      }
    }
    if (wall.size() < 2) continue;
    // Its receiving of the workers' batches: off-CPU time per batch.
    double recv_wait = 0;
    for (const Span& r : thread.recv)
      if (inside(r.start)) recv_wait += Diff(r.end, r.start) - Diff(r.finish.cpu, r.begin.cpu);
    pt.recv_wait_ns = std::max(0.0, recv_wait) / static_cast<double>(wall.size());
    pt.present = true;
    pt.batches = wall.size();
    pt.pin_ns = MeanOf(wall);
    pt.pin_cpu_ns = MeanOf(cpu);
    pt.pin_faults = MeanOf(flt);
    pt.cycle_cpu_ns = MeanOf(cycle_cpu);
    pt.cycle_ns = MeanOf(cycle);
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
  for (auto& [t, v] : root.samples) {
    if (t == tid) continue;
    if (pt.present && root.threads.count(t) && root.threads[t].pin.size() >= 3) continue;
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
