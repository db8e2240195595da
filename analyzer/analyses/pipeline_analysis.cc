// The pipeline model's measurements, as the events arrive; see
// pipeline_analysis.h. pipeline_inputs.cc turns them into the model's
// inputs at the end.
#include "analyzer/analyses/pipeline_analysis.h"

#include <algorithm>
#include <array>
#include <iterator>
#include <map>

#include "analyzer/analyses/device_from_trace.h"

namespace pinscope {

namespace {

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

// The pin thread's pinned blocks: torch's caching host allocator calls
// cudaHostAlloc inside pin_memory() when it has no free block of the size,
// and keeps the block for the rest of the run. That is start-up: counted
// in the pin spans, it made the pin thread look slower per batch than it
// is (the H200 seed job, pin_memory=True under the pool: 130 ms of
// cudaHostAlloc in its first spans).
void PipelineAnalysis::OnAlloc(const Event& event, const LiveAlloc& alloc) {
  if (event.process.index() != root_index_ || alloc.api != trace::CUDA_HOST_ALLOC ||
      alloc.duration_ns == 0)
    return;
  Thread& t = RootThread(event.process, alloc.tid);
  // A thread with no pin spans (the main thread's own pinned buffers) keeps
  // only its latest: a pin span takes those that started inside it.
  if (t.host_allocs.size() >= 64)
    t.host_allocs.erase(t.host_allocs.begin(), t.host_allocs.begin() + 32);
  t.host_allocs.push_back({alloc.time_ns, alloc.duration_ns, alloc.address});
}

void PipelineAnalysis::OnFree(const Event& event, const LiveAlloc& freed, bool by_realloc) {
  if (event.process.index() == root_index_ && freed.api == trace::CUDA_HOST_ALLOC &&
      pin_blocks_.erase(freed.address))
    pin_blocks_freed_ = true;
}

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
    case trace::LOADER_PIN: {
      ++t.pins;
      // Blocks allocated inside the span and kept: start-up, unless the
      // program has freed such a block before (it allocates per batch).
      uint64_t one_time = 0, blocks = 0;
      for (const Thread::HostAllocTime& a : t.host_allocs) {
        if (a.start < s.start || a.start >= s.end) continue;
        one_time += a.ns;
        ++blocks;
        if (pin_blocks_.size() < (1u << 16)) pin_blocks_.insert(a.address);
      }
      t.host_allocs.clear();
      if (pin_blocks_freed_) one_time = blocks = 0;
      pin_one_time_ns_ += one_time;
      pin_one_time_blocks_ += blocks;
      // A cycle runs from the previous span's start: that span's blocks.
      const uint64_t before = t.pinned_before ? t.pin_one_time_ns : 0;
      spans_.AddPin(tid, s, t.pinned_before, Gap(Gap(s.start, t.pin_start), before),
                    Gap(Gap(s.begin.cpu, t.pin_cpu), before), one_time);
      t.pin_one_time_ns = one_time;
      t.pinned_before = true;
      t.pin_start = s.start;
      t.pin_cpu = s.begin.cpu;
      break;
    }
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

}  // namespace pinscope
