// The root's spans, samples and registrations as segments; see step_spans.h.
#include "analyzer/analyses/step_spans.h"

#include <algorithm>

#include "analyzer/analyses/step_calls.h"
#include "analyzer/analyses/step_segments.h"

namespace pinscope {

// One rule and one bound: a training thread's calls and the root's spans
// get the same segments.
static_assert(StepSpans::kSegmentsKept == StepCalls::kSegmentsKept);

namespace {

uint64_t Diff(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

// splitmix64's finalizer (as batch_copies.cc's): the sample's choice of a
// fetch, the same on every replay.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

void AddSums(StepSpans::Sums& a, const StepSpans::Sums& b) {
  a.count += b.count;
  a.wall_ns += b.wall_ns;
  a.cpu_ns += b.cpu_ns;
  a.sys_ns += b.sys_ns;
  a.faults += b.faults;
}

}  // namespace

void StepSpans::Merge(Segment& a, const Segment& b) {
  a.merged += b.merged;
  for (const Steps& e : b.steps) {
    Steps& x = StepsOf(a, e.tid, e.loader_id);
    if (x.count == 0 && e.count > 0) {
      x.first_start = e.first_start;
      x.first_cpu = e.first_cpu;
    }
    x.count += e.count;
    x.waits += e.waits;
    x.usage = x.usage || e.usage;
    x.next_ns += e.next_ns;
    x.next_cpu_ns += e.next_cpu_ns;
    x.release_ns += e.release_ns;
    x.busy_handover_ns += e.busy_handover_ns;
  }
  for (const Sums& s : b.sums) AddSums(SumsOf(a, s.tid, s.kind), s);
}

StepSpans::Steps& StepSpans::StepsOf(Segment& s, uint32_t tid, uint64_t loader_id) {
  for (Steps& e : s.steps)
    if (e.tid == tid && e.loader_id == loader_id) return e;
  Steps& e = s.steps.emplace_back();
  e.tid = tid;
  e.loader_id = loader_id;
  return e;
}

StepSpans::Sums& StepSpans::SumsOf(Segment& s, uint32_t tid, Kind kind) {
  for (Sums& e : s.sums)
    if (e.tid == tid && e.kind == kind) return e;
  Sums& e = s.sums.emplace_back();
  e.tid = tid;
  e.kind = kind;
  return e;
}

void StepSpans::AddBoundary(uint64_t start) {
  Item item;
  item.time = start;
  item.kind = ItemKind::kBoundary;
  Push(item);
}

void StepSpans::AddSpan(Sums& x, const Item& item) {
  ++x.count;
  x.wall_ns += Diff(item.end, item.time);
  x.cpu_ns += item.cpu_ns;
  x.sys_ns += item.sys_ns;
  x.faults += item.faults;
}

StepSpans::Item StepSpans::ItemOf(ItemKind kind, uint32_t tid, const Span& span) {
  Item item;
  item.kind = kind;
  item.time = span.start;
  item.end = span.end;
  item.cpu_ns = Diff(span.finish.cpu, span.begin.cpu);
  item.tid = tid;
  return item;
}

void StepSpans::AddNext(uint32_t tid, const Span& span) {
  Item item = ItemOf(ItemKind::kNext, tid, span);
  item.begin_cpu = span.begin.cpu;
  item.usage = span.finish.cpu > 0;
  item.loader_id = span.loader_id;
  item.index = span.index;
  Push(item);
}

void StepSpans::AddRecv(uint32_t tid, const Span& span) {
  Push(ItemOf(ItemKind::kRecv, tid, span));
}

void StepSpans::AddFetch(uint32_t tid, const Span& span) {
  Item item = ItemOf(ItemKind::kFetch, tid, span);
  item.sys_ns = Diff(span.finish.sys, span.begin.sys);
  item.faults = Diff(span.finish.faults, span.begin.faults);
  Push(item);
}

void StepSpans::AddPin(uint32_t tid, const Span& span, bool cycle, uint64_t cycle_ns,
                       uint64_t cycle_cpu_ns, uint64_t one_time_ns) {
  Item item = ItemOf(ItemKind::kPin, tid, span);
  // The driver pins a new block's pages on the calling thread, on its CPU.
  item.end = item.time + Diff(Diff(item.end, item.time), one_time_ns);
  item.cpu_ns = Diff(item.cpu_ns, one_time_ns);
  item.faults = Diff(span.finish.faults, span.begin.faults);
  item.cycle = cycle;
  item.cycle_ns = cycle_ns;
  item.cycle_cpu_ns = cycle_cpu_ns;
  Push(item);
}

void StepSpans::AddWorkerFetch(int process, const Span& span, bool busy, uint64_t busy_ns) {
  // The medians' sample takes it now: it is filtered by the window at Finish.
  Fetch f;
  f.start = span.start;
  f.wall_ns = Diff(span.end, span.start);
  f.cpu_ns = Diff(span.finish.cpu, span.begin.cpu);
  f.faults = Diff(span.finish.faults, span.begin.faults);
  f.busy = busy;
  f.busy_ns = busy_ns;
  f.process = process;
  f.seq = fetch_seq_++;
  KeepFetch(f);
  Item item;
  item.kind = ItemKind::kWorkerFetch;
  item.time = span.start;
  item.end = span.end;
  item.worker_id = span.worker_id;
  Push(item);
}

void StepSpans::KeepFetch(const Fetch& fetch) {
  const auto keeps = [&](uint64_t seq) { return (Mix(seq) & ((uint64_t{1} << level_) - 1)) == 0; };
  if (!keeps(fetch.seq)) return;
  fetches_.push_back(fetch);
  if (fetches_.size() < kFetchesExact) return;
  ++level_;
  std::erase_if(fetches_, [&](const Fetch& f) { return !keeps(f.seq); });
}

void StepSpans::AddRelease(uint32_t tid, uint64_t loader_id, uint64_t start, uint64_t ns) {
  AddTimed(ItemKind::kRelease, tid, start, ns, loader_id);
}

void StepSpans::AddTimed(ItemKind kind, uint32_t tid, uint64_t time, uint64_t ns,
                         uint64_t loader_id) {
  Item item;
  item.kind = kind;
  item.time = time;
  item.cpu_ns = ns;
  item.loader_id = loader_id;
  item.tid = tid;
  Push(item);
}

void StepSpans::AddRegistration(uint32_t tid, uint64_t time, uint64_t ns, bool unregister) {
  AddTimed(unregister ? ItemKind::kUnregister : ItemKind::kRegister, tid, time, ns);
}

void StepSpans::AddUnmap(uint32_t tid, uint64_t time, uint64_t ns) {
  AddTimed(ItemKind::kUnmap, tid, time, ns);
}

void StepSpans::AddSample(uint32_t tid, uint64_t time, uint64_t cpu_ns) {
  AddTimed(ItemKind::kSample, tid, time, cpu_ns);
}

void StepSpans::AddIter(uint64_t loader_id, uint64_t time, int32_t num_workers) {
  const size_t index = iters_.size();
  iters_.push_back({loader_id, time, num_workers});
  firsts_.emplace_back();
  std::vector<size_t>& of = iters_by_loader_[loader_id];
  auto at = std::upper_bound(of.begin(), of.end(), time,
                             [&](uint64_t t, size_t i) { return t < iters_[i].time; });
  of.insert(at, index);
  workers_of_loader_[loader_id] = num_workers;
  workers_last_ = num_workers;
}

void StepSpans::Push(const Item& item) {
  if (folded_any_ && item.time < frontier_) {
    Fold(item, true);  // later than the events folded since: see the header
    return;
  }
  uint32_t slot = 0;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
    slots_[slot] = item;
  } else {
    slot = static_cast<uint32_t>(slots_.size());
    slots_.push_back(item);
  }
  // At one start: boundaries first (what starts with one is inside its
  // segment, and a receive's __next__ may start with it), then the workers'
  // fetches (a receive asks whether one had started), then the rest.
  const uint64_t rank = item.kind == ItemKind::kBoundary || item.kind == ItemKind::kNext ? 0
                        : item.kind == ItemKind::kWorkerFetch                            ? 1
                                                                                         : 2;
  const Key key{item.time, (rank << 62) | arrivals_++, slot};
  // Nearly in order (a span arrives after those that started inside it):
  // at the end, or a few places before it.
  auto at = waiting_.end();
  for (int steps = 0; at != waiting_.begin() && Before(key, *(at - 1)); --at) {
    if (++steps == 16) {
      at = std::upper_bound(waiting_.begin(), at, key,
                            [](const Key& a, const Key& b) { return Before(a, b); });
      break;
    }
  }
  waiting_.insert(at, key);
  if (waiting_.size() > kWaiting) FoldOldest();
}

void StepSpans::FoldOldest() {
  const Key key = waiting_.front();
  waiting_.pop_front();
  free_slots_.push_back(key.slot);
  frontier_ = key.time;
  folded_any_ = true;
  Fold(slots_[key.slot], false);
  // The next one to fold came kWaiting events ago and its slot has left
  // the cache: fetched now, an event before it is folded.
  if (!waiting_.empty()) __builtin_prefetch(&slots_[waiting_.front().slot]);
}

void StepSpans::Flush() {
  while (!waiting_.empty()) FoldOldest();
  for (const auto& [tid, step] : open_) Close(tid, step);
  open_.clear();
}

StepSpans::Segment& StepSpans::Current() {
  if (segments_.empty()) segments_.emplace_back().merged = 0;  // before the first boundary
  return segments_.back();
}

size_t StepSpans::IndexAt(uint64_t time) const {
  // The last segment to start at or before `time` (of two with one start,
  // the later: what was folded after both).
  auto at = std::upper_bound(segments_.begin(), segments_.end(), time,
                             [](uint64_t t, const Segment& s) { return t < s.start; });
  return at == segments_.begin() ? 0 : static_cast<size_t>(at - segments_.begin()) - 1;
}

StepSpans::Segment& StepSpans::SegmentAt(uint64_t time) {
  if (segments_.empty() || (time < segments_.front().start && segments_.front().merged > 0)) {
    Segment before;
    before.merged = 0;
    segments_.push_front(std::move(before));
  }
  return segments_[IndexAt(time)];
}

void StepSpans::Fold(const Item& item, bool late) {
  // No segment opens behind the folded ones: a late boundary is lost, a
  // late __next__ is a step of the segment it falls in.
  const bool opens = item.kind == ItemKind::kBoundary || item.kind == ItemKind::kNext;
  if (opens && !late && step_segments::Open(segments_, stride_, kSegmentsKept, item.time, Merge))
    ThinSamples();
  if (item.kind == ItemKind::kBoundary) return;
  if (item.kind == ItemKind::kSample) {
    AddSampleFolded(item.tid, item.time, item.cpu_ns);
    return;
  }
  Segment& s = late ? SegmentAt(item.time) : Current();
  switch (item.kind) {
    case ItemKind::kNext:
      FoldNext(item, s, late);
      break;
    case ItemKind::kWorkerFetch:
      ++SumsOf(s, 0, Kind::kWorkerFetch).count;
      if (item.worker_id >= 0 && !late) last_fetch_[item.worker_id] = {item.time, item.end};
      break;
    case ItemKind::kRecv: {
      const uint64_t wall = Diff(item.end, item.time);
      AddSpan(SumsOf(s, item.tid, Kind::kRecv), item);
      auto open = open_.find(item.tid);
      if (late || open == open_.end() || item.time >= open->second.end) break;
      // Inside the thread's __next__: not an empty queue, and a wait for
      // the worker of the batch when that worker was inside another fetch.
      OpenStep& step = open->second;
      step.off_ns -= static_cast<double>(wall) - static_cast<double>(item.cpu_ns);
      if (WorkerBusy(step.loader_id, step.index, item.time))
        StepsOf(s, item.tid, step.loader_id).busy_handover_ns += Diff(wall, item.cpu_ns);
      break;
    }
    case ItemKind::kFetch:
      AddSpan(SumsOf(s, item.tid, Kind::kFetch), item);
      break;
    case ItemKind::kPin: {
      AddSpan(SumsOf(s, item.tid, Kind::kPin), item);  // a pin item's sys_ns is 0
      if (item.cycle) {
        Sums& c = SumsOf(s, item.tid, Kind::kCycle);
        ++c.count;
        c.wall_ns += item.cycle_ns;
        c.cpu_ns += item.cycle_cpu_ns;
      }
      break;
    }
    case ItemKind::kRelease:
      StepsOf(s, item.tid, item.loader_id).release_ns += item.cpu_ns;
      break;
    case ItemKind::kRegister:
    case ItemKind::kUnregister:
    case ItemKind::kUnmap: {
      Sums& r = SumsOf(s, item.tid,
                       item.kind == ItemKind::kRegister     ? Kind::kRegister
                       : item.kind == ItemKind::kUnregister ? Kind::kUnregister
                                                            : Kind::kUnmap);
      ++r.count;
      r.wall_ns += item.cpu_ns;
      break;
    }
    case ItemKind::kBoundary:
    case ItemKind::kSample:
      break;
  }
}

void StepSpans::FoldNext(const Item& item, Segment& s, bool late) {
  Steps& e = StepsOf(s, item.tid, item.loader_id);
  if (e.count == 0) {
    e.first_start = item.time;
    e.first_cpu = item.begin_cpu;
  }
  ++e.count;
  e.usage = e.usage || item.usage;
  const uint64_t wall = Diff(item.end, item.time);
  e.next_ns += wall;
  e.next_cpu_ns += item.cpu_ns;
  // In doubles, as the model's other times: no overflow whatever a
  // damaged file's clock readings.
  const double off = static_cast<double>(wall) - static_cast<double>(item.cpu_ns);
  if (late) {
    if (off >= kQueueEmptyWaitNs) ++e.waits;
  } else {
    // The thread's previous __next__ has all its receives now.
    auto open = open_.find(item.tid);
    if (open != open_.end()) Close(item.tid, open->second);
    open_[item.tid] = {item.time, item.end, item.loader_id, item.index, off};
  }
  // The loader's epochs: from its second on (the epoch step), and the
  // first __next__ after each start, walked back over the epochs that
  // had none yet (or a later one: an earlier __next__ folded late).
  auto of = iters_by_loader_.find(item.loader_id);
  if (of == iters_by_loader_.end()) return;
  const std::vector<size_t>& epochs = of->second;
  if (epochs.size() >= 2 && item.time >= iters_[epochs[1]].time) {
    Totals& t = totals_[{item.tid, item.loader_id}];
    ++t.after_first_epoch;
    t.after_first_epoch_end = std::max(t.after_first_epoch_end, item.end);
  }
  auto j = std::upper_bound(epochs.begin(), epochs.end(), item.time,
                            [&](uint64_t t, size_t i) { return t < iters_[i].time; });
  while (j != epochs.begin()) {
    --j;
    std::vector<First>& firsts = firsts_[*j];
    auto f = std::find_if(firsts.begin(), firsts.end(),
                          [&](const First& x) { return x.tid == item.tid; });
    if (f != firsts.end() && f->start <= item.time) break;
    if (f == firsts.end()) f = firsts.insert(firsts.end(), First{item.tid, 0, 0});
    f->start = item.time;
    f->end = item.end;
  }
}

void StepSpans::Close(uint32_t tid, const OpenStep& step) {
  if (step.off_ns < kQueueEmptyWaitNs) return;
  ++StepsOf(SegmentAt(step.start), tid, step.loader_id).waits;
}

bool StepSpans::WorkerBusy(uint64_t loader_id, uint64_t index, uint64_t at) const {
  // The in-order DataLoader hands batch i of an epoch to worker i mod
  // num_workers (the loader's latest iterator's; a loader id of 0, from a
  // hook that did not tell it, takes the latest of any).
  int32_t workers = workers_last_;
  if (loader_id != 0) {
    auto w = workers_of_loader_.find(loader_id);
    workers = w == workers_of_loader_.end() ? 0 : w->second;
  }
  if (workers <= 0) return false;
  auto f = last_fetch_.find(static_cast<int32_t>(index % static_cast<uint64_t>(workers)));
  // Its last fetch to start at or before `at` (a worker's fetches do not overlap).
  return f != last_fetch_.end() && at < f->second.second;
}

void StepSpans::AddSampleFolded(uint32_t tid, uint64_t time, uint64_t cpu_ns) {
  std::vector<std::pair<uint64_t, uint64_t>>& v = samples_[tid];
  const uint64_t start = Current().start;
  if (!v.empty()) {
    const uint64_t last = v.back().first;
    if (time < last) return;  // out of order by more than the wait: left out
    // The previous sample is neither the segment's last nor the last at
    // its start any more.
    if ((last > start) || (last == start && time == start)) {
      v.back() = {time, cpu_ns};
      return;
    }
  }
  v.push_back({time, cpu_ns});
}

void StepSpans::ThinSamples() {
  // After a merge: per segment, the last sample and the last at its start.
  for (auto& [tid, v] : samples_) {
    size_t out = 0;
    for (size_t i = 0; i < v.size(); ++i) {
      const size_t seg = IndexAt(v[i].first);
      const bool last = i + 1 == v.size() || IndexAt(v[i + 1].first) != seg;
      const bool at_start =
          v[i].first == segments_[seg].start && (i + 1 == v.size() || v[i + 1].first != v[i].first);
      if (last || at_start) v[out++] = v[i];
    }
    v.resize(out);
  }
}

const StepSpans::Totals* StepSpans::totals(uint32_t tid, uint64_t loader_id) const {
  auto it = totals_.find({tid, loader_id});
  return it == totals_.end() ? nullptr : &it->second;
}

const StepSpans::First* StepSpans::EpochFirst(size_t iter, uint32_t tid) const {
  if (iter >= firsts_.size()) return nullptr;
  for (const First& f : firsts_[iter])
    if (f.tid == tid) return &f;
  return nullptr;
}

}  // namespace pinscope
