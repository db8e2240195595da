// The pipeline model's inputs from what PipelineAnalysis gathered
// (pipeline_analysis.cc): the steady window, the main thread's step, the
// producers, the pin thread, the GPU and the host, at the run's end.
#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <vector>

#include "analyzer/analyses/device_from_trace.h"
#include "analyzer/analyses/pipeline_analysis.h"
#include "analyzer/analyses/steady_window.h"

namespace pinscope {

namespace {

constexpr uint64_t kMinBatchBytes = StepCalls::kMinBatchBytes;
// A tail of calls after the largest copies longer than this can say they
// were a burst, not the loop's batches (BuildInputs, no hook).
constexpr uint64_t kBurstTailNs = 1000000000;

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

}  // namespace

const PipelineAnalysis::Loop* PipelineAnalysis::LoopWith(const std::string& change) const {
  const Loop& own = modelled_loop_;
  for (const Loop& l : other_loops_) {
    if (l.site != own.site || l.batch_size != own.batch_size) continue;
    const bool workers = l.num_workers == own.num_workers;
    const bool pin = l.pin_memory == own.pin_memory;
    const bool persistent = l.persistent_workers == own.persistent_workers;
    if (change.rfind("num_workers=", 0) == 0) {
      if (pin && persistent && !workers && l.num_workers == std::atoi(change.c_str() + 12))
        return &l;
    } else if (change == "pin_memory=True" || change == "pin_memory=False") {
      if (workers && persistent && !pin && l.pin_memory == (change == "pin_memory=True")) return &l;
    } else if (change == "persistent_workers=True") {
      if (workers && pin && l.persistent_workers && !persistent) return &l;
    }
  }
  return nullptr;
}

void PipelineAnalysis::SummarizeLoops(uint32_t tid, uint64_t loader) {
  // Every loader's __next__ calls on the step thread, from the segments.
  std::map<uint64_t, Loop> loops;
  std::map<uint64_t, std::vector<StepGroup>> groups;
  for (const StepSpans::Segment& seg : spans_.segments()) {
    for (const StepSpans::Steps& e : seg.steps) {
      if (e.tid != tid || e.count == 0) continue;
      Loop& l = loops[e.loader_id];
      if (l.steps == 0) l.start_ns = e.first_start;
      l.end_ns = std::max(l.end_ns, e.first_start);
      l.steps += e.count;
      groups[e.loader_id].push_back({seg.start, e.count, e.waits});
    }
  }
  for (auto& [id, l] : loops) {
    for (const trace::LoaderEvent& it : iters_) {
      if (it.loader_id() != id) continue;
      l.site = it.site();
      l.num_workers = it.num_workers();
      l.pin_memory = it.pin_memory();
      l.persistent_workers = it.persistent_workers();
      l.batch_size = it.batch_size();
      l.prefetch_factor = it.prefetch_factor();
      break;
    }
    const uint64_t in_flight =
        static_cast<uint64_t>(l.num_workers) * (l.prefetch_factor > 0 ? l.prefetch_factor : 2);
    SteadyWindow w;
    if (l.steps >= 2 * in_flight + 1 && ChooseSteadyWindow(groups[id], IterTimes(id), {}, &w) &&
        w.steps > 0)
      l.steady_step_ns = static_cast<double>(w.window.length()) / static_cast<double>(w.steps);
    // A segment holding several steps starts at its first: the loop's last
    // step is then earlier than `end_ns` says at most by a segment.
    if (l.steps > 1) l.step_ns = static_cast<double>(l.end_ns - l.start_ns) / (l.steps - 1);
  }
  auto modelled = loops.find(loader);
  if (modelled == loops.end() || modelled->second.steps < 2) return;
  modelled_loop_ = modelled->second;
  for (auto& [id, l] : loops) {
    if (id == loader || l.steps < 3) continue;
    // Among the modelled loop's steps: an evaluation (steady_window.h), not a loop apart.
    if (l.end_ns >= modelled_loop_.start_ns && l.start_ns <= modelled_loop_.end_ns) continue;
    other_loops_.push_back(l);
  }
  std::sort(other_loops_.begin(), other_loops_.end(),
            [](const Loop& a, const Loop& b) { return a.start_ns < b.start_ns; });
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
  // Where the step thread took another loader's batches (an evaluation
  // pass): the window leaves them out (steady_window.h).
  std::vector<uint64_t> breaks;
  if (most >= 3) {
    // A DataLoader iterated on a thread that makes no CUDA call while
    // another thread of the root does: a prefetching wrapper (a background
    // thread fills a queue the training loop takes from). Its __next__
    // spans are that thread's pace, not the training steps, which are then
    // the batch copies, as without the hook.
    auto next_thread = root.threads.find(tid);
    const bool calls_there =
        next_thread != root.threads.end() && !next_thread->second.calls.empty();
    bool calls_elsewhere = false;
    for (auto& [t, thread] : root.threads)
      if (t != tid && !thread.calls.empty()) calls_elsewhere = true;
    if (!calls_there && calls_elsewhere) {
      in.main.loader_thread_apart = true;
      most = 0;
    }
  }
  if (most >= 3) {
    in.main.timed_by_hook = true;
    for (const StepSpans::Segment& seg : spans_.segments()) {
      bool other = false;
      for (const StepSpans::Steps& e : seg.steps) {
        if (e.tid != tid || e.count == 0) continue;
        if (e.loader_id == loader) {
          groups.push_back({seg.start, e.count, e.waits});
        } else {
          other = true;
        }
      }
      if (other) breaks.push_back(seg.start);
    }
  } else {
    // No hook: the steps are the recurring large H2D copies of the root's
    // main thread (at least half the largest).
    tid = 0;
    for (auto& [t, thread] : root.threads) {
      if (run.root != nullptr && t != run.root->pid()) continue;
      const uint64_t largest = thread.calls.largest_h2d();
      if (largest < kMinBatchBytes) continue;
      const size_t before = groups.size();
      for (const StepCalls::Segment& seg : thread.calls.segments()) {
        uint64_t count = 0;
        for (const StepCalls::Copies& c : seg.copies)
          if (c.bytes * 2 >= largest) count += c.count;
        if (count > 0) groups.push_back({seg.start, count, 0});
      }
      tid = t;
      // The largest copies stopped long before the thread's calls did (more
      // than a second, and four times as long as they lasted): a burst, such
      // as a model's weights moved at start-up before a loop of smaller
      // copies (the H100's mlp12 loop: 12 copies of 1 MiB in 8 ms, then
      // 19 s of steps), not the loop's batches.
      if (groups.size() > before) {
        const uint64_t first = groups[before].start, last = groups.back().start;
        const uint64_t tail = thread.last_call_start > last ? thread.last_call_start - last : 0;
        if (tail > kBurstTailNs && tail > 4 * (last - first)) {
          groups.resize(before);
          in.main.largest_copies_burst = true;
        }
      }
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
    l.user_site = it.user_site();
    l.framework = it.framework();
    l.remade = loaders_.Remade(loader);
    ++l.epochs;
  }
  if (in.main.timed_by_hook) SummarizeLoops(tid, loader);
  const std::vector<uint64_t> epoch_starts = IterTimes(loader);
  SteadyWindow chosen;
  if (!ChooseSteadyWindow(groups, in.main.timed_by_hook ? epoch_starts : std::vector<uint64_t>(),
                          breaks, &chosen))
    return;
  window_ = chosen.window;
  window_breaks_inside_ = chosen.breaks_inside;
  window_breaks_avoided_ = chosen.breaks_avoided;
  const uint64_t steps = chosen.steps;
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
  uint64_t pin_ns = 0, pin_cpu_ns = 0;
  uint64_t register_ns = 0, unregister_ns = 0, unmap_ns = 0;
  // The thread's CPU time at the first step inside the window and at the
  // first at or after its end: the steps between are the window's.
  bool first = false, final = false;
  uint64_t first_cpu = 0, final_cpu = 0;
  for (const StepSpans::Segment& seg : spans_.segments()) {
    if (seg.start >= window_.end_ns && !final) {
      // The next __next__ on the thread, of any loader: a window that ends
      // where an evaluation pass begins ends at that pass's first batch.
      for (const StepSpans::Steps& e : seg.steps)
        if (e.tid == tid && e.count > 0 && !final) final = true, final_cpu = e.first_cpu;
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
        case StepSpans::Kind::kPin:
          pin_ns += s.wall_ns;
          pin_cpu_ns += s.cpu_ns;
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
  m.pin_ns = static_cast<double>(pin_ns);
  m.pin_cpu_ns = static_cast<double>(pin_cpu_ns);
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
        &m.pin_register_ns, &m.release_ns,    &m.recv_ns,     &m.recv_cpu_ns, &m.recv_busy_off_ns,
        &m.pin_ns,          &m.pin_cpu_ns})
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
    pt.one_time_alloc_ns = static_cast<double>(pin_one_time_ns_);
    pt.one_time_allocs = pin_one_time_blocks_;
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
