// The step model's loader spans, samples and registrations streamed
// (analyzer/analyses/step_spans.h): folded into the root's per-step
// segments in the order of their starts, whatever order they arrive in,
// bounded, every span of the run counted; and a hooked run longer than the
// 2^20 __next__ spans the model kept before chooses its steady window from
// all of its steps.
#include "analyzer/analyses/step_spans.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "analyzer/analyses/pipeline_analysis.h"
#include "analyzer/analyses/steady_window.h"
#include "analyzer/read/run_loader.h"
#include "analyzer/replay/replay.h"
#include "analyzer/report/report_command.h"
#include "trace_builder.h"

namespace pinscope {
namespace {

using testing::kMiBytes;
using testing::kMs;
constexpr uint64_t kUs = 1000;

StepSpans::Span SpanOf(uint64_t start, uint64_t end, uint64_t cpu_begin, uint64_t cpu_end,
                       uint64_t loader = 0, uint64_t index = 0, int32_t worker = -1) {
  StepSpans::Span s;
  s.start = start;
  s.end = end;
  s.begin.cpu = cpu_begin;
  s.finish.cpu = cpu_end;
  s.loader_id = loader;
  s.index = index;
  s.worker_id = worker;
  return s;
}

// A __next__ arrives after the receive inside it and after the worker's
// fetch that started before the receive (each is written when it ends):
// folded in the order of their starts, the receive is inside that __next__
// (its off-CPU time is no empty queue) and the worker was busy with the
// next batch when it was asked (a hand-over wait).
TEST(StepSpansTest, SpansInsideANextArriveBeforeIt) {
  StepSpans spans;
  spans.AddIter(7, 10, 1);
  // Step 1: __next__ [1000, 5000), 2,500 ns off the CPU, 2,000 of them
  // receiving; worker 0 started its next fetch at 1500.
  spans.AddRecv(100, SpanOf(2000, 4500, 50, 550));
  spans.AddWorkerFetch(1, SpanOf(1500, 9000, 0, 100, 0, 1, 0), false, 0);
  spans.AddNext(100, SpanOf(1000, 5000, 0, 1500, 7, 0));
  // Step 2: __next__ [10000, 3010000) asleep for 3 ms: the queue was empty.
  spans.AddNext(100, SpanOf(10000, 3010000, 2000, 2000, 7, 1));
  spans.Flush();
  const auto& segments = spans.segments();
  ASSERT_EQ(segments.size(), 2u);
  ASSERT_EQ(segments[0].steps.size(), 1u);
  const StepSpans::Steps& first = segments[0].steps[0];
  EXPECT_EQ(first.count, 1u);
  EXPECT_EQ(first.waits, 0u);  // 4,000 - 1,500 - (2,500 - 500) < 1 ms
  EXPECT_EQ(first.next_ns, 4000u);
  EXPECT_EQ(first.next_cpu_ns, 1500u);
  EXPECT_EQ(first.busy_handover_ns, 2000u);  // the receive's off-CPU time
  EXPECT_EQ(segments[1].steps[0].waits, 1u);
  EXPECT_EQ(segments[1].steps[0].busy_handover_ns, 0u);
  const StepSpans::First* epoch = spans.EpochFirst(0, 100);
  ASSERT_NE(epoch, nullptr);
  EXPECT_EQ(epoch->start, 1000u);
  EXPECT_EQ(epoch->end, 5000u);
}

// Samples through merges: per thread at most two a segment, and at every
// segment start the thread's CPU time before it and at it are the full
// list's.
TEST(StepSpansTest, SamplesGiveTheCpuAtEverySegmentStart) {
  StepSpans spans;
  std::vector<std::pair<uint64_t, uint64_t>> all;
  constexpr uint64_t kBoundaries = 3 * StepSpans::kSegmentsKept;
  for (uint64_t b = 0; b < kBoundaries; ++b) {
    const uint64_t t = 1000000 + b * 1000;
    spans.AddBoundary(t);
    // Three samples a boundary, one of them at it every fifth.
    for (uint64_t at : {t + (b % 5 == 0 ? 0 : 100), t + 400, t + 700}) {
      spans.AddSample(42, at, at * 3);
      all.push_back({at, at * 3});
    }
  }
  spans.Flush();
  EXPECT_EQ(spans.stride(), 4u);
  const auto& kept = spans.samples().at(42);
  EXPECT_LE(kept.size(), 2 * spans.segments().size());
  const auto last_before = [](const auto& v, uint64_t t, bool at) {
    uint64_t cpu = 0;
    for (auto [time, c] : v)
      if (time < t || (at && time == t)) cpu = c;
    return cpu;
  };
  for (const StepSpans::Segment& s : spans.segments()) {
    EXPECT_EQ(last_before(kept, s.start, false), last_before(all, s.start, false)) << s.start;
    EXPECT_EQ(last_before(kept, s.start, true), last_before(all, s.start, true)) << s.start;
  }
}

// More fetches than kept exactly: a uniform sample, the same on every run.
TEST(StepSpansTest, FetchTimesAreSampledPastTheBound) {
  StepSpans spans;
  constexpr uint64_t kFetches = 5 * StepSpans::kFetchesExact;
  for (uint64_t k = 0; k < kFetches; ++k)
    spans.AddWorkerFetch(1, SpanOf(k * 100, k * 100 + 50 + k, 0, 10), k > 0, 60);
  spans.Flush();
  EXPECT_TRUE(spans.fetches_sampled());
  const auto& f = spans.fetches();
  EXPECT_GT(f.size(), StepSpans::kFetchesExact / 3);  // about half of it
  EXPECT_LT(f.size(), StepSpans::kFetchesExact);
  // Uniform over the run: the sample's median is within 1.5% of the
  // run's middle (3 standard errors of about 16,384 values: 1.2%).
  std::vector<uint64_t> walls;
  for (const auto& x : f) walls.push_back(x.wall_ns - 50);
  std::nth_element(walls.begin(), walls.begin() + walls.size() / 2, walls.end());
  EXPECT_NEAR(static_cast<double>(walls[walls.size() / 2]), kFetches / 2.0, 0.015 * kFetches);
}

// Streams one process file, as the shim frames it.
class FileStream {
 public:
  FileStream(const std::string& path, const testing::TraceBuilder& header)
      : file_(std::fopen(path.c_str(), "wb")) {
    buffer_ = header.Bytes();
  }
  // The root's file in dir: pid 100, run `run` from t0, with host facts.
  FileStream(const std::string& dir, const std::string& run, uint64_t t0)
      : FileStream(dir + "/100.pstrace", RootHeader(run, t0)) {}
  ~FileStream() {
    std::fwrite(buffer_.data(), 1, buffer_.size(), file_);
    std::fclose(file_);
  }
  bool ok() const { return file_ != nullptr; }
  void Put(const trace::TracePacket& p) {
    buffer_ += testing::FramePacket(p);
    if (buffer_.size() > (1 << 20)) {
      std::fwrite(buffer_.data(), 1, buffer_.size(), file_);
      buffer_.clear();
    }
  }

 private:
  static testing::TraceBuilder RootHeader(const std::string& run, uint64_t t0) {
    testing::TraceBuilder root(100, run, t0);
    testing::SetHostFacts(&root.header(), 0, 0);
    return root;
  }
  std::FILE* file_;
  std::string buffer_;
};

void SetUsage(trace::ThreadUsage* u, uint64_t cpu, uint64_t faults = 0) {
  u->set_cpu_ns(cpu);
  u->set_minor_faults(faults);
}

// The hook's LOADER_ITER on thread 100: epoch `epoch` of loader `id`
// begins at t, with `workers` workers and batches of 32 (of `samples`).
void PutIter(FileStream& out, uint64_t t, uint64_t id, uint64_t epoch, int32_t workers,
             uint64_t samples = 0) {
  trace::TracePacket p;
  p.set_timestamp_ns(t);
  p.set_tid(100);
  trace::LoaderEvent* l = p.mutable_loader();
  l->set_kind(trace::LOADER_ITER);
  l->set_loader_id(id);
  l->set_index(epoch);
  l->set_num_workers(workers);
  l->set_batch_size(32);
  l->set_dataset_length(samples);
  out.Put(p);
}

// A __next__ on thread 100 of loader `id`, batch `index` of its epoch, from
// t to end; the thread's CPU at its start and end.
void PutNext(FileStream& out, uint64_t t, uint64_t end, uint64_t id, uint64_t index,
             uint64_t cpu_begin, uint64_t cpu_end, uint32_t tid = 100) {
  trace::TracePacket p;
  p.set_timestamp_ns(t);
  p.set_tid(tid);
  trace::LoaderEvent* l = p.mutable_loader();
  l->set_kind(trace::LOADER_NEXT);
  l->set_loader_id(id);
  l->set_index(index);
  l->set_end_ns(end);
  SetUsage(l->mutable_usage_begin(), cpu_begin);
  SetUsage(l->mutable_usage_end(), cpu_end);
  out.Put(p);
}

// A pageable H2D copy of `bytes` from src on thread tid, from t to end; the
// thread's CPU at the call's entry and exit.
void PutCopy(FileStream& out, uint32_t tid, uint64_t t, uint64_t end, uint64_t bytes, uint64_t src,
             uint64_t call_id, uint64_t cpu_enter, uint64_t cpu_exit) {
  trace::TracePacket p;
  p.set_timestamp_ns(t);
  p.set_tid(tid);
  trace::CopyEvent* c = p.mutable_copy();
  c->set_api(trace::MEMCPY_ASYNC);
  c->set_direction(trace::H2D);
  c->set_bytes(bytes);
  c->set_src_kind(trace::PAGEABLE);
  c->set_dst_kind(trace::DEVICE);
  c->set_src_address(src);
  c->set_dst_address(0x7e0000000000ull);
  c->set_src_device(-1);
  c->set_dst_device(0);
  c->set_end_ns(end);
  c->set_call_id(call_id);
  SetUsage(c->mutable_usage_enter(), cpu_enter);
  SetUsage(c->mutable_usage_exit(), cpu_exit);
  out.Put(p);
}

// A cudaHostAlloc of `bytes` at `address` on thread tid at t, `ns` long
// (HostAlloc.duration_ns), and its cudaFreeHost.
void PutHostAlloc(FileStream& out, uint32_t tid, uint64_t t, uint64_t address, uint64_t bytes,
                  uint64_t ns) {
  trace::TracePacket p;
  p.set_timestamp_ns(t);
  p.set_tid(tid);
  trace::HostAlloc* a = p.mutable_alloc();
  a->set_api(trace::CUDA_HOST_ALLOC);
  a->set_address(address);
  a->set_size(bytes);
  a->set_duration_ns(ns);
  out.Put(p);
}
void PutHostFree(FileStream& out, uint32_t tid, uint64_t t, uint64_t address) {
  trace::TracePacket p;
  p.set_timestamp_ns(t);
  p.set_tid(tid);
  p.mutable_free()->set_address(address);
  out.Put(p);
}

// The process's exit at t: the end of its trace.
void PutExit(FileStream& out, uint32_t tid, uint64_t t) {
  trace::TracePacket p;
  p.set_timestamp_ns(t);
  p.set_tid(tid);
  p.mutable_exit()->set_how(trace::ProcessExit::EXIT);
  out.Put(p);
}

// Replays the run in dir through `pipeline`, then removes dir.
void Analyze(const std::string& dir, PipelineAnalysis* pipeline) {
  RunListing listing;
  ASSERT_TRUE(ScanRun(dir, &listing).ok());
  ReplayEngine engine(std::move(listing));
  engine.AddAnalysis(pipeline);
  engine.Run();
  std::filesystem::remove_all(dir);
}

// A hooked run of 1.3 M steps in two epochs (a new worker process each,
// num_workers=1): 600,000 steps of 20 ms, then 700,000 of 10 ms. The
// steady window lies in the epoch with the most steps, the second, which
// runs past step 2^20 = 1,048,576: before, the model kept the first 2^20
// __next__ spans, saw 448,576 steps of the second epoch, chose the first
// and its 20 ms step. Per step the root's main thread takes the batch in
// __next__ (receiving it from the worker, busy with the next batch then),
// copies it (8 MiB H2D, the step's first CUDA call: its release), and a
// second thread's CPU time is sampled every 1,000 steps; the worker makes
// each batch in a fetch whose time grows by 1 ns a batch in the second
// epoch (its median is the window's middle batch's).
TEST(StepSpansTest, HookedRunPastTheOldCapChoosesItsWindowFromEveryStep) {
  constexpr uint64_t kEpoch1 = 600000, kSteps = 1300000;
  constexpr uint64_t kT0 = 1000 * 1000 * kMs, kLoader = 7;
  const auto step_of = [](uint64_t k) { return k < kEpoch1 ? 20 * kMs : 10 * kMs; };
  const auto start_of = [](uint64_t k) {
    return k < kEpoch1 ? kT0 + 100 * kMs + k * 20 * kMs
                       : kT0 + 100 * kMs + kEpoch1 * 20 * kMs + 50 * kMs + (k - kEpoch1) * 10 * kMs;
  };
  const auto next_wall = [](uint64_t k) { return k < kEpoch1 ? 5 * kMs : 3 * kMs; };
  const auto fetch_start = [&](uint64_t k) { return start_of(k) - step_of(k) + kMs / 2; };
  const auto fetch_wall = [](uint64_t k) {
    return k < kEpoch1 ? 15 * kMs : 5 * kMs + (k - kEpoch1);
  };
  const auto fetch_cpu = [](uint64_t k) { return (k < kEpoch1 ? k : k - kEpoch1) * 10 * kMs; };
  const uint64_t iter1 = kT0 + 50 * kMs, iter2 = start_of(kEpoch1) - 30 * kMs;
  const auto sample_cpu = [](uint64_t k) { return k * 3 * kUs + (k / 7000) * 11 * kUs; };
  const std::string dir = testing::MakeTempDir("step_spans_long");
  {
    FileStream out(dir, "step-spans-long", kT0);
    ASSERT_TRUE(out.ok());
    trace::TracePacket p;
    uint64_t call_id = 0;
    PutIter(out, iter1, kLoader, 0, 1);
    for (uint64_t k = 0; k < kSteps; ++k) {
      if (k == kEpoch1) PutIter(out, iter2, kLoader, 1, 1);
      const uint64_t s = start_of(k), cpu = k * 2 * kMs;
      // Written as they end: the receive, the __next__ around it, the copy.
      p.Clear();
      p.set_timestamp_ns(s + kMs);
      p.set_tid(100);
      trace::LoaderEvent* l = p.mutable_loader();
      l->set_kind(trace::LOADER_RECV);
      l->set_loader_id(kLoader);
      l->set_end_ns(s + 3 * kMs);
      SetUsage(l->mutable_usage_begin(), cpu + 200 * kUs);
      SetUsage(l->mutable_usage_end(), cpu + 700 * kUs);
      out.Put(p);
      PutNext(out, s, s + next_wall(k), kLoader, k < kEpoch1 ? k : k - kEpoch1, cpu, cpu + kMs);
      PutCopy(out, 100, s + 4 * kMs, s + 5 * kMs, 8 * kMiBytes, 0x600000000ull, ++call_id,
              cpu + 1200 * kUs, cpu + 1700 * kUs);
      if (k % 1000 == 0) {
        p.Clear();
        p.set_timestamp_ns(s + 6 * kMs);
        p.set_tid(160);
        trace::ThreadSample::Entry* e = p.mutable_thread_sample()->add_threads();
        e->set_tid(150);
        e->set_cpu_ns(sample_cpu(k));
        out.Put(p);
      }
    }
    PutExit(out, 100, start_of(kSteps) + kMs);
  }
  for (uint32_t pid : {101u, 102u}) {
    const uint64_t from = pid == 101 ? 0 : kEpoch1, to = pid == 101 ? kEpoch1 : kSteps;
    testing::TraceBuilder worker(pid, "step-spans-long", pid == 101 ? iter1 + kMs : iter2 + kMs,
                                 trace::ORIGIN_FORK, 100);
    FileStream out(dir + "/" + std::to_string(pid) + ".pstrace", worker);
    ASSERT_TRUE(out.ok());
    trace::TracePacket p;
    for (uint64_t k = from; k < to; ++k) {
      p.Clear();
      p.set_timestamp_ns(fetch_start(k));
      p.set_tid(pid);
      trace::LoaderEvent* l = p.mutable_loader();
      l->set_kind(trace::LOADER_FETCH);
      l->set_index(k - from);
      l->set_worker_id(0);
      l->set_end_ns(fetch_start(k) + fetch_wall(k));
      SetUsage(l->mutable_usage_begin(), fetch_cpu(k), 10 * k);
      SetUsage(l->mutable_usage_end(), fetch_cpu(k) + fetch_wall(k) / 2, 10 * k + 3);
      out.Put(p);
    }
    PutExit(out, pid, fetch_start(to - 1) + 20 * kMs);
  }
  PipelineAnalysis pipeline;
  Analyze(dir, &pipeline);

  // Two possible boundaries a step (the __next__ and the batch copy): 2.6 M
  // boundaries in at most 8,192 segments of 512, 256 steps each. The second
  // epoch's steps are those of the segments that start after its iterator:
  // from step 600,064 (the segment of steps 599,808 to 600,063 starts
  // before it), 699,936 steps, more than the first's 600,064. The window
  // runs from its step 699,936 / 8 = 87,492 to its last, each edge at the
  // start of its segment.
  constexpr uint64_t kPerSegment = 256, kFrom = 600064;
  const uint64_t ws = pipeline.window_start_ns(), we = pipeline.window_end_ns();
  EXPECT_EQ(ws, start_of((kFrom + 87492) / kPerSegment * kPerSegment));
  EXPECT_EQ(we, start_of((kSteps - 1) / kPerSegment * kPerSegment));
  EXPECT_GT(ws, start_of(kEpoch1));
  EXPECT_GT(we, start_of(1048576 + 250000));
  // The reference: every step, fetch and sample, as they are.
  uint64_t steps = 0, next_ns = 0;
  for (uint64_t k = 0; k < kSteps; ++k) {
    if (start_of(k) < ws || start_of(k) >= we) continue;
    ++steps;
    next_ns += next_wall(k);
  }
  std::vector<uint64_t> walls, busy;
  for (uint64_t k = 1; k < kSteps; ++k) {
    if (fetch_start(k) < ws || fetch_start(k) >= we) continue;
    walls.push_back(fetch_wall(k));
    // The fetch, and the CPU since the previous one ended (handing it over).
    busy.push_back(fetch_wall(k) + fetch_cpu(k) - fetch_cpu(k - 1) - fetch_wall(k - 1) / 2);
  }
  const model::Inputs& in = pipeline.inputs();
  const model::MainStep& m = in.main;
  EXPECT_TRUE(m.timed_by_hook);
  EXPECT_EQ(m.steps, steps);
  EXPECT_EQ(steps,
            (kSteps - 1) / kPerSegment * kPerSegment - (kFrom + 87492) / kPerSegment * kPerSegment);
  const double n = static_cast<double>(steps);
  EXPECT_DOUBLE_EQ(m.step_ns, 10.0 * kMs);  // the first epoch's: 20 ms
  EXPECT_DOUBLE_EQ(m.next_ns, static_cast<double>(next_ns) / n);
  EXPECT_DOUBLE_EQ(m.next_ns, 3.0 * kMs);
  EXPECT_DOUBLE_EQ(m.next_cpu_ns, 1.0 * kMs);
  EXPECT_DOUBLE_EQ(m.recv_ns, 2.0 * kMs);
  EXPECT_DOUBLE_EQ(m.recv_cpu_ns, 0.5 * kMs);
  EXPECT_DOUBLE_EQ(m.recv_busy_off_ns, 1.5 * kMs);  // the worker was making the next batch
  EXPECT_DOUBLE_EQ(m.release_ns, 200.0 * kUs);
  EXPECT_DOUBLE_EQ(m.cpu_ns, 2.0 * kMs);
  EXPECT_DOUBLE_EQ(m.copy_ns, 1.0 * kMs);
  EXPECT_EQ(m.batch_bytes, 8 * kMiBytes);
  EXPECT_TRUE(in.loader.hooked);
  EXPECT_EQ(in.loader.epochs, 2u);
  EXPECT_EQ(in.loader.steps_per_epoch, kSteps / 2);
  EXPECT_DOUBLE_EQ(in.loader.epoch_start_ns,
                   (static_cast<double>(start_of(0) + 5 * kMs - iter1) +
                    static_cast<double>(start_of(kEpoch1) + 3 * kMs - iter2)) /
                       2);
  EXPECT_DOUBLE_EQ(in.loader.epoch_step_ns,
                   static_cast<double>(start_of(kSteps - 1) + 3 * kMs - iter2) /
                       static_cast<double>(kSteps - kEpoch1));
  // The worker: every fetch in the window counted; the medians from a
  // uniform sample of the run's 1.3 M fetches (at least 16,384, about 47%
  // of them in the window): the median's rank within 2% of the middle
  // (3 standard errors: 1.8%), and a fetch is 1 ns longer a batch, the
  // busy time 0.5 ns.
  const model::Producers& p = in.producers;
  EXPECT_TRUE(p.timed_by_hook);
  EXPECT_EQ(p.workers, 1);
  EXPECT_EQ(p.batches, walls.size());
  std::sort(walls.begin(), walls.end());
  std::sort(busy.begin(), busy.end());
  const double rank_bound = 0.02 * static_cast<double>(walls.size());
  EXPECT_NEAR(p.fetch_ns, static_cast<double>(walls[walls.size() / 2]), rank_bound);
  EXPECT_NEAR(p.cycle_ns, static_cast<double>(busy[busy.size() / 2]), rank_bound / 2 + 1);
  EXPECT_DOUBLE_EQ(p.fetch_faults, 3);
  EXPECT_LT(p.fetch_ns, 6.0 * kMs);  // the first epoch's: 15 ms
  // The other thread's CPU per step, from its samples at the window's edges.
  uint64_t a = 0, b = 0, ta = 0, tb = 0;
  for (uint64_t k = 0; k < kSteps; k += 1000) {
    const uint64_t t = start_of(k) + 6 * kMs;
    if (t < ws) a = sample_cpu(k), ta = t;
    if (t <= we) b = sample_cpu(k), tb = t;
  }
  EXPECT_DOUBLE_EQ(in.host.other_cpu_ns,
                   static_cast<double>(b - a) / (static_cast<double>(tb - ta) / m.step_ns));

  // The timeline draws what it kept: the main thread's last 8,192 calls
  // (a copy a step) and the last 32,768 spans (three a step), so from the
  // copy of step 1,300,000 - 8,192 on, every __next__ and fetch is there.
  const uint64_t from = pipeline.timeline_from_ns();
  EXPECT_EQ(from, start_of(kSteps - 8192) + 4 * kMs);
  size_t nexts = 0, fetches = 0, want_nexts = 0, want_fetches = 0;
  for (const auto& span : pipeline.TimelineSpans(from, we, 1 << 20)) {
    nexts += span.kind == PipelineAnalysis::TimelineSpan::Kind::kNext;
    fetches += span.kind == PipelineAnalysis::TimelineSpan::Kind::kFetch;
  }
  for (uint64_t k = kSteps - 8192; k < kSteps; ++k) {
    want_nexts += start_of(k) >= from && start_of(k) < we;
    want_fetches += fetch_start(k) < we && fetch_start(k) + fetch_wall(k) >= from;
  }
  EXPECT_EQ(nexts, want_nexts);
  EXPECT_EQ(fetches, want_fetches);
}

// The window's rule over breaks, directly: 100 steps 10 ms apart.
// The window `w` runs from `start` to `end` over `steps` steps.
void ExpectWindow(const SteadyWindow& w, uint64_t start, uint64_t end, uint64_t steps) {
  EXPECT_EQ(w.window.start_ns, start);
  EXPECT_EQ(w.window.end_ns, end);
  EXPECT_EQ(w.steps, steps);
}

TEST(SteadyWindowTest, BreaksCutTheWindowOnlyWhereALongStretchIsLeft) {
  std::vector<StepGroup> groups;
  for (uint64_t k = 0; k < 100; ++k) groups.push_back({1000 + 10 * k, 1, 0});
  SteadyWindow w;
  // No break: steps 12 (an eighth skipped) to 99, the last one's start.
  ASSERT_TRUE(ChooseSteadyWindow(groups, {}, {}, &w));
  ExpectWindow(w, 1120, 1990, 87);
  // One pass inside, after step 70 (3 batches): steps 12 to 70.
  ASSERT_TRUE(ChooseSteadyWindow(groups, {}, {1705, 1706, 1707}, &w));
  ExpectWindow(w, 1120, 1705, 59);
  EXPECT_EQ(w.breaks_avoided, 3u);
  EXPECT_EQ(w.breaks_inside, 0u);
  // A pass after step 30: the longer stretch is after it, to the end.
  ASSERT_TRUE(ChooseSteadyWindow(groups, {}, {1305}, &w));
  ExpectWindow(w, 1310, 1990, 68);
  // A pass every 30 steps: the first longest stretch, steps 16 to 45.
  ASSERT_TRUE(ChooseSteadyWindow(groups, {}, {1155, 1455, 1755}, &w));
  ExpectWindow(w, 1160, 1455, 30);
  EXPECT_EQ(w.breaks_avoided, 3u);
  // A pass every 10 steps: no stretch holds 16 steps or half of them; kept,
  // and said.
  std::vector<uint64_t> often;
  for (uint64_t k = 5; k < 100; k += 10) often.push_back(1000 + 10 * k + 5);
  ASSERT_TRUE(ChooseSteadyWindow(groups, {}, often, &w));
  ExpectWindow(w, 1120, 1990, 87);
  EXPECT_EQ(w.breaks_avoided, 0u);
  EXPECT_EQ(w.breaks_inside, 9u);  // after steps 15, 25, ... 95
}

// Two loaders taken together every step (zip): the other loader's batches
// are no evaluation pass to leave out, and the report says what it models.
TEST(StepSpansTest, TwoLoadersTakenTogetherAreSaidToBe) {
  constexpr uint64_t kT0 = 1000 * kMs, kA = 7, kB = 9, kStep = 10 * kMs;
  const std::string dir = testing::MakeTempDir("step_spans_zip");
  {
    FileStream out(dir, "step-spans-zip", kT0);
    ASSERT_TRUE(out.ok());
    PutIter(out, kT0 + kMs, kA, 0, 0, 100 * 32);
    PutIter(out, kT0 + kMs, kB, 0, 0, 200 * 32);
    for (uint64_t k = 0; k < 100; ++k) {
      const uint64_t s = kT0 + 10 * kMs + k * kStep;
      PutNext(out, s, s + kMs, kA, k, k * kStep, k * kStep + kMs);
      PutNext(out, s + 2 * kMs, s + 3 * kMs, kB, k, k * kStep + 2 * kMs, k * kStep + 3 * kMs);
    }
    PutExit(out, 100, kT0 + 20 * kMs + 100 * kStep);
  }
  ReportOptions options;
  options.run_dir = dir;
  options.color = ColorMode::kNever;
  std::ostringstream text, err;
  RunReport(options, text, err);
  std::filesystem::remove_all(dir);
  EXPECT_NE(text.str().find("Another DataLoader is taken along with this one in the steps (87 of"),
            std::string::npos)
      << text.str();
  EXPECT_EQ(text.str().find("an evaluation?"), std::string::npos);
}

// A prefetching wrapper: the DataLoader is iterated on thread 150, which
// fills a queue; the training loop on thread 100 takes from it and copies
// each batch (8 MiB, 2 ms). The steps are the loop's 20 ms between copies,
// not thread 150's __next__ calls, which make no CUDA call; the 18 ms a
// step the loop spent off the CPU outside its copy (whose 1 ms of CPU is
// all the loop's) is its wait for the next batch.
TEST(StepSpansTest, ADataLoaderIteratedOnABackgroundThreadIsNotTheLoop) {
  constexpr uint64_t kT0 = 1000 * kMs, kLoader = 7, kStep = 20 * kMs;
  const std::string dir = testing::MakeTempDir("step_spans_background");
  {
    FileStream out(dir, "step-spans-background", kT0);
    ASSERT_TRUE(out.ok());
    PutIter(out, kT0 + kMs, kLoader, 0, 4);
    for (uint64_t k = 0; k < 100; ++k) {
      const uint64_t s = kT0 + 100 * kMs + k * kStep;
      // The background thread takes batch k + 1 while the loop runs.
      PutNext(out, s + kMs, s + 5 * kMs, kLoader, k, k * kMs, k * kMs + 500 * kUs, 150);
      PutCopy(out, 100, s + 2 * kMs, s + 4 * kMs, 8 * kMiBytes, 0x600000000ull, k + 1, k * kMs,
              k * kMs + kMs);
    }
    PutExit(out, 100, kT0 + 200 * kMs + 100 * kStep);
  }
  PipelineAnalysis pipeline;
  Analyze(dir, &pipeline);
  const model::Inputs& in = pipeline.inputs();
  EXPECT_TRUE(in.main.loader_thread_apart);
  EXPECT_FALSE(in.main.timed_by_hook);
  EXPECT_TRUE(in.loader.hooked);
  EXPECT_EQ(in.loader.num_workers, 4);
  EXPECT_EQ(pipeline.step_tid(), 100u);
  EXPECT_DOUBLE_EQ(in.main.step_ns, static_cast<double>(kStep));
  EXPECT_DOUBLE_EQ(in.main.copy_ns, 2.0 * kMs);
  EXPECT_EQ(in.main.batch_bytes, 8 * kMiBytes);
  EXPECT_NEAR(in.main.next_ns, 18.0 * kMs, 1.0);
}

// No DataLoader (no hook): the steps are the recurring largest H2D copies -
// unless those came in a burst long before the loop's calls ended (a
// model's 12 weights of 1 MiB moved at start-up, then 2,000 steps of a 128
// KiB copy each, 5 ms apart: the H100's mlp12 loop in small). No step is
// inferred from the burst, and the report says why. Where the 1 MiB copies
// recur through the loop, they are its steps.
TEST(StepSpansTest, ABurstOfLargeCopiesAtStartIsNotTheLoop) {
  constexpr uint64_t kT0 = 1000 * kMs, kStep = 5 * kMs;
  for (const bool recur : {false, true}) {
    const std::string dir = testing::MakeTempDir("step_spans_burst");
    {
      FileStream out(dir, "step-spans-burst", kT0);
      ASSERT_TRUE(out.ok());
      uint64_t id = 1, t = kT0 + 10 * kMs;
      for (int w = 0; w < 12; ++w, t += kMs)
        PutCopy(out, 100, t, t + kUs / 2, kMiBytes, 0x600000000ull, id++, 0, 0);
      t += 100 * kMs;
      for (uint64_t k = 0; k < 2000; ++k, t += kStep) {
        const uint64_t bytes = recur ? kMiBytes : 128 * 1024;
        PutCopy(out, 100, t, t + 50 * kUs, bytes, 0x700000000ull, id++, k * kMs,
                k * kMs + 50 * kUs);
      }
      PutExit(out, 100, t + kMs);
    }
    ReportOptions options;
    options.run_dir = dir;
    options.color = ColorMode::kNever;
    std::ostringstream text, err;
    RunReport(options, text, err);
    PipelineAnalysis pipeline;
    Analyze(dir, &pipeline);
    const model::Inputs& in = pipeline.inputs();
    EXPECT_FALSE(in.main.timed_by_hook);
    EXPECT_EQ(in.main.largest_copies_burst, !recur) << recur;
    if (recur) {
      EXPECT_GT(in.main.steps, 1000u);
      EXPECT_NEAR(in.main.step_ns, static_cast<double>(kStep), 0.01 * kStep);
      continue;
    }
    EXPECT_EQ(in.main.steps, 0u);
    EXPECT_NE(text.str().find("The step as a pipeline\n  Not modelled: no DataLoader was seen, and "
                              "the job's largest host-to-device copies came in a burst"),
              std::string::npos)
        << text.str();
  }
}

// A loop that stops mid-epoch for an evaluation pass (another DataLoader's
// batches on the same thread, 300 ms of evaluation): the steady window is
// the longest stretch between passes, so the step is the training step's
// 10 ms, not the evaluation spread over it (12.5 ms per step here). The
// main thread's CPU per step is the training loop's too.
TEST(StepSpansTest, AnEvaluationPassMidEpochIsLeftOutOfTheWindow) {
  constexpr uint64_t kT0 = 1000 * kMs, kTrain = 7, kEval = 9, kStep = 10 * kMs;
  const std::string dir = testing::MakeTempDir("step_spans_eval");
  uint64_t eval_start = 0;
  {
    FileStream out(dir, "step-spans-eval", kT0);
    ASSERT_TRUE(out.ok());
    PutIter(out, kT0 + kMs, kTrain, 0, 0, 120 * 32);
    uint64_t t = kT0 + 10 * kMs, cpu = 0;
    for (uint64_t k = 0; k < 120; ++k) {
      // The step: 1 ms in __next__, 9 ms of the loop's own CPU.
      PutNext(out, t, t + kMs, kTrain, k, cpu, cpu + kMs);
      t += kStep, cpu += kStep;
      if (k == 79) {
        // After step 79: 30 evaluation batches, 10 ms each, all CPU.
        eval_start = t;
        PutIter(out, t, kEval, 0, 0, 30 * 32);
        for (uint64_t e = 0; e < 30; ++e) {
          PutNext(out, t, t + kMs, kEval, e, cpu, cpu + kMs);
          t += kStep, cpu += kStep;
        }
      }
    }
    PutExit(out, 100, t);
  }
  // The report says what it left out.
  ReportOptions options;
  options.run_dir = dir;
  options.color = ColorMode::kNever;
  std::ostringstream text, err;
  RunReport(options, text, err);
  EXPECT_NE(text.str().find("These steps run between passes of another DataLoader"),
            std::string::npos)
      << text.str();
  EXPECT_NE(text.str().find("are left out: 30 of its __next__ calls"), std::string::npos)
      << text.str();
  PipelineAnalysis pipeline;
  Analyze(dir, &pipeline);
  const model::MainStep& m = pipeline.inputs().main;
  // Steps 15 (an eighth of 120 skipped) to 79, ending where the pass begins.
  EXPECT_EQ(pipeline.window_end_ns(), eval_start);
  EXPECT_EQ(m.steps, 65u);
  EXPECT_DOUBLE_EQ(m.step_ns, static_cast<double>(kStep));
  EXPECT_DOUBLE_EQ(m.cpu_ns, static_cast<double>(kStep));
  EXPECT_DOUBLE_EQ(m.next_ns, static_cast<double>(kMs));
  EXPECT_EQ(pipeline.window_breaks_avoided(), 30u);
  EXPECT_EQ(pipeline.window_breaks_inside(), 0u);
  // An evaluation among the loop's steps is not a loop of its own.
  EXPECT_TRUE(pipeline.other_loops().empty());
  EXPECT_EQ(pipeline.modelled_loop().steps, 120u);
}

// A sweep (the seed benchmark's shape): the same thread iterates three
// DataLoaders one after another, with 0, 2 and 4 workers, 40 batches each
// at 30, 15 and 10 ms a step. The model describes one loop (the first of
// equals); the report also gives each loop's step as the run measured it,
// which the advice can be set against.
TEST(StepSpansTest, ASweepOfLoadersOneAfterAnotherIsMeasuredLoopByLoop) {
  constexpr uint64_t kT0 = 1000 * kMs;
  const std::string dir = testing::MakeTempDir("step_spans_sweep");
  {
    FileStream out(dir, "step-spans-sweep", kT0);
    ASSERT_TRUE(out.ok());
    uint64_t t = kT0 + 10 * kMs, cpu = 0;
    const std::pair<int32_t, uint64_t> loops[] = {{0, 30 * kMs}, {2, 15 * kMs}, {4, 10 * kMs}};
    uint64_t id = 7;
    for (const auto& [workers, step] : loops) {
      PutIter(out, t, id, 0, workers, 40 * 32);
      for (uint64_t k = 0; k < 40; ++k) {
        PutNext(out, t, t + kMs, id, k, cpu, cpu + kMs);
        t += step, cpu += kMs;
      }
      t += 50 * kMs;  // the next loader's workers start
      ++id;
    }
    PutExit(out, 100, t);
  }
  ReportOptions options;
  options.run_dir = dir;
  options.color = ColorMode::kNever;
  options.json = true;
  std::ostringstream json_out, err;
  RunReport(options, json_out, err);
  options.json = false;
  std::ostringstream text;
  RunReport(options, text, err);
  PipelineAnalysis pipeline;
  Analyze(dir, &pipeline);
  const PipelineAnalysis::Loop& own = pipeline.modelled_loop();
  EXPECT_EQ(own.num_workers, 0);
  EXPECT_EQ(own.steps, 40u);
  EXPECT_DOUBLE_EQ(own.step_ns, 30.0 * kMs);
  ASSERT_EQ(pipeline.other_loops().size(), 2u);
  EXPECT_EQ(pipeline.other_loops()[0].num_workers, 2);
  EXPECT_DOUBLE_EQ(pipeline.other_loops()[0].step_ns, 15.0 * kMs);
  EXPECT_EQ(pipeline.other_loops()[1].num_workers, 4);
  EXPECT_DOUBLE_EQ(pipeline.other_loops()[1].step_ns, 10.0 * kMs);
  EXPECT_EQ(pipeline.other_loops()[1].steps, 40u);
  const auto j = nlohmann::json::parse(json_out.str(), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << json_out.str() << err.str();
  const auto& loops_json = j["pipeline"]["loops"];
  ASSERT_EQ(loops_json.size(), 3u) << loops_json.dump();
  EXPECT_TRUE(loops_json[0]["modelled"].get<bool>());
  EXPECT_EQ(loops_json[2]["num_workers"].get<int>(), 4);
  EXPECT_EQ(loops_json[2]["steps"].get<int>(), 39);
  EXPECT_DOUBLE_EQ(loops_json[2]["step_ns"].get<double>(), 10.0 * kMs);
  EXPECT_DOUBLE_EQ(loops_json[2]["steady_step_ns"].get<double>(), 10.0 * kMs);
  // The predictions of a change the run measured say what it measured.
  int measured = 0;
  for (const auto& p : j["pipeline"]["all_predictions"]) {
    const std::string change = p["change"].get<std::string>();
    if (change == "num_workers=4") {
      ++measured;
      EXPECT_DOUBLE_EQ(p["measured_in_run"]["steady_step_ns"].get<double>(), 10.0 * kMs);
      EXPECT_DOUBLE_EQ(p["measured_in_run"]["loop_step_ns"].get<double>(), 10.0 * kMs);
    } else if (change == "num_workers=2") {
      ++measured;
      EXPECT_DOUBLE_EQ(p["measured_in_run"]["loop_step_ns"].get<double>(), 15.0 * kMs);
    } else {
      EXPECT_TRUE(p["measured_in_run"].is_null()) << p.dump();
    }
  }
  EXPECT_EQ(measured, 2) << j["pipeline"].dump();
  // Flattened: the text wraps at the report's width.
  std::string flat;
  for (char c : text.str()) {
    if (c == '\n') continue;
    if (c == ' ' && !flat.empty() && flat.back() == ' ') continue;
    flat += c;
  }
  EXPECT_NE(flat.find("This run iterated 2 other DataLoaders on the loop's thread, one after "
                      "another"),
            std::string::npos)
      << text.str();
  EXPECT_NE(flat.find("num_workers=2, pin_memory=False: 39 steps, 15.0 ms a step (steady 15.0 "
                      "ms); num_workers=4, pin_memory=False: 39 steps, 10.0 ms a step (steady "
                      "10.0 ms)."),
            std::string::npos)
      << text.str();
}

}  // namespace

// The release of a worker's shm batch as the trace times it (SHM_UNMAP_DONE,
// the real munmap of the previous batch: 0.4 ms a step), not the CPU from
// __next__'s return to the step's first call (3 ms here: the loop's own
// work on the batch first, then the unmap, then the copy). Without the
// munmaps' times (an older shim) the release is that CPU, as before.
TEST(StepSpansTest, ReleaseOfAnShmBatchIsItsMunmapWhenTheTraceTimesIt) {
  constexpr uint64_t kSteps = 400, kT0 = 1000 * kMs, kLoader = 7, kStep = 10 * kMs;
  constexpr uint64_t kBatch = 8 * kMiBytes;
  for (bool timed : {true, false}) {
    const std::string dir = testing::MakeTempDir("step_spans_release");
    {
      FileStream out(dir, "step-spans-release", kT0);
      ASSERT_TRUE(out.ok());
      PutIter(out, kT0 + kMs, kLoader, 0, 2);
      trace::TracePacket p;
      const auto address = [](uint64_t k) { return 0x7f0000000000ull + (k % 4) * 0x1000000ull; };
      for (uint64_t k = 0; k < kSteps; ++k) {
        const uint64_t s = kT0 + 10 * kMs + k * kStep, cpu = k * 5 * kMs;
        // Inside __next__: the batch's segment mapped (received from a worker).
        p.Clear();
        p.set_timestamp_ns(s + kMs / 2);
        p.set_tid(100);
        trace::ShmEvent* m = p.mutable_shm();
        m->set_op(trace::SHM_MAP);
        m->set_fd(20);
        m->set_size(kBatch);
        m->set_address(address(k));
        m->set_device(40);
        m->set_inode(1000 + k);
        m->set_prot(3);
        m->set_flags(1);
        m->set_end_ns(s + kMs / 2 + 10 * kUs);
        out.Put(p);
        PutNext(out, s, s + kMs, kLoader, k, cpu, cpu + kMs);
        if (k > 0) {
          // 2.6 ms of the loop's own work, then the previous batch unmapped.
          p.Clear();
          p.set_timestamp_ns(s + 3600 * kUs);
          p.set_tid(100);
          m = p.mutable_shm();
          m->set_op(trace::SHM_UNMAP);
          m->set_size(kBatch);
          m->set_address(address(k - 1));
          m->set_device(40);
          m->set_inode(1000 + k - 1);
          m->set_end_ns(s + 3600 * kUs + 2 * kUs);
          out.Put(p);
          if (timed) {
            p.Clear();
            p.set_timestamp_ns(s + 3602 * kUs);
            p.set_tid(100);
            m = p.mutable_shm();
            m->set_op(trace::SHM_UNMAP_DONE);
            m->set_size(kBatch);
            m->set_address(address(k - 1));
            m->set_end_ns(s + 4002 * kUs);
            out.Put(p);
          }
        }
        PutCopy(out, 100, s + 4 * kMs, s + 5 * kMs, kBatch, address(k), k + 1, cpu + 4 * kMs,
                cpu + 4500 * kUs);
      }
      PutExit(out, 100, kT0 + 20 * kMs + kSteps * kStep);
    }
    PipelineAnalysis pipeline;
    Analyze(dir, &pipeline);
    const model::MainStep& m = pipeline.inputs().main;
    EXPECT_TRUE(m.timed_by_hook);
    EXPECT_TRUE(m.batch_shm) << "timed " << timed;
    EXPECT_GT(m.steps, 300u);
    EXPECT_DOUBLE_EQ(m.step_ns, static_cast<double>(kStep));
    // The CPU from __next__'s return (cpu + 1 ms) to the copy's entry (cpu + 4 ms).
    EXPECT_DOUBLE_EQ(m.release_ns, timed ? 400.0 * kUs : 3.0 * kMs) << "timed " << timed;
  }
}

// torch's pin thread allocates a pinned block (cudaHostAlloc) inside
// pin_memory() when its caching host allocator has none free, and keeps it:
// start-up, not the pin thread's time per batch. Here the pin thread takes
// 2 ms (1.5 ms of CPU) a batch, and three of its spans, in the middle of the
// run, each allocate a 128 MiB block for 40 ms: its time per batch and its
// cycle's CPU stay 2 ms and 1.5 ms, the 120 ms are start-up (the main
// thread's own pinned buffer, made and freed at step 10, changes nothing).
// Before, the three blocks were in the pin spans' mean. A program that
// frees such blocks again (cudaFreeHost, one per span here) allocates them
// per batch: only the first, before any free, is start-up.
TEST(StepSpansTest, PinnedBlocksThePinThreadKeepsAreStartUp) {
  constexpr uint64_t kSteps = 400, kT0 = 1000 * kMs, kLoader = 7, kStep = 50 * kMs;
  constexpr uint32_t kPinTid = 150;
  for (bool freed : {false, true}) {
    const std::string dir = testing::MakeTempDir("step_spans_host_alloc");
    {
      FileStream out(dir, "step-spans-host-alloc", kT0);
      ASSERT_TRUE(out.ok());
      PutIter(out, kT0 + kMs, kLoader, 0, 4);
      trace::TracePacket p;
      uint64_t pin_cpu = 0;
      for (uint64_t k = 0; k < kSteps; ++k) {
        const uint64_t s = kT0 + 100 * kMs + k * kStep, cpu = k * 5 * kMs;
        const bool grows = k >= 200 && k < 203;
        const uint64_t alloc = grows ? 40 * kMs : 0;
        const uint64_t block = 0x7f0000000000ull + (k - 200) * 0x10000000ull;
        if (grows) PutHostAlloc(out, kPinTid, s - 44 * kMs, block, 128 * kMiBytes, alloc);
        // The pin span, written at its end, before the batch's __next__.
        p.Clear();
        p.set_timestamp_ns(s - 45 * kMs);
        p.set_tid(kPinTid);
        trace::LoaderEvent* l = p.mutable_loader();
        l->set_kind(trace::LOADER_PIN);
        l->set_loader_id(kLoader);
        l->set_index(k);
        l->set_end_ns(s - 43 * kMs + alloc);
        SetUsage(l->mutable_usage_begin(), pin_cpu);
        pin_cpu += 1500 * kUs + alloc;
        SetUsage(l->mutable_usage_end(), pin_cpu);
        out.Put(p);
        if (grows && freed) PutHostFree(out, kPinTid, s - 42 * kMs + alloc, block);
        PutNext(out, s, s + kMs, kLoader, k, cpu, cpu + kMs);
        PutCopy(out, 100, s + 2 * kMs, s + 3 * kMs, 8 * kMiBytes, 0x600000000ull, k + 1,
                cpu + 2 * kMs, cpu + 2500 * kUs);
        if (k == 10) {
          // The main thread's own pinned buffer, made and freed: not the pin
          // thread's, so no sign that the pin thread allocates per batch.
          PutHostAlloc(out, 100, s + 4 * kMs, 0x7e8000000000ull, 64 * kMiBytes, kMs);
          PutHostFree(out, 100, s + 6 * kMs, 0x7e8000000000ull);
        }
      }
      PutExit(out, 100, kT0 + 200 * kMs + kSteps * kStep);
    }
    PipelineAnalysis pipeline;
    Analyze(dir, &pipeline);
    ASSERT_LT(pipeline.window_start_ns(), kT0 + 100 * kMs + 200 * kStep);
    ASSERT_GT(pipeline.window_end_ns(), kT0 + 100 * kMs + 203 * kStep);
    const model::PinThread& pt = pipeline.inputs().pin_thread;
    ASSERT_TRUE(pt.present);
    const double n = static_cast<double>(pt.batches);
    // Freed: the two later blocks stay in their spans (40 ms each).
    const double per_batch = freed ? 80.0 * kMs / n : 0.0;
    EXPECT_NEAR(pt.pin_ns, 2.0 * kMs + per_batch, 1.0) << "freed " << freed;
    EXPECT_NEAR(pt.pin_cpu_ns, 1.5 * kMs + per_batch, 1.0) << "freed " << freed;
    EXPECT_NEAR(pt.cycle_cpu_ns, 1.5 * kMs + per_batch * n / (n - 1), 50.0 * kUs)
        << "freed " << freed;
    EXPECT_EQ(pt.one_time_allocs, freed ? 1u : 3u);
    EXPECT_DOUBLE_EQ(pt.one_time_alloc_ns, freed ? 40.0 * kMs : 120.0 * kMs);
  }
}

// Python's id() of a freed DataLoader goes to the next one made: the hook's
// loader id repeats, its epoch count (per object) starts again at 0. A job
// that makes one loader per setting (seedbench: 4 workers, then 8, then 12)
// is several loaders of one epoch each, not one loader restarted every
// epoch: no persistent_workers=True for it. A loop that makes its
// DataLoader anew every epoch, at one site with the same settings, is one
// loader of many epochs, remade each time: persistent_workers=True alone
// keeps nothing there. Here: loader A (2 workers, 30 steps), then loader B
// at A's id (4 workers, 200 steps), then B's second epoch (the same
// object), or a new object with B's settings (at another id: the new one
// made before the old is freed), or a new loader of 8 workers at B's id
// (300 steps: the steady window's loader).
TEST(StepSpansTest, ALoaderAtAFreedLoadersIdIsANewLoader) {
  constexpr uint64_t kT0 = 1000 * kMs, kLoader = 0x7f1234560000ull, kStep = 10 * kMs;
  enum Third { kSameObject, kRemade, kOther };
  for (Third third : {kSameObject, kRemade, kOther}) {
    const std::string dir = testing::MakeTempDir("step_spans_loader_ids");
    {
      FileStream out(dir, "step-spans-ids", kT0);
      ASSERT_TRUE(out.ok());
      trace::TracePacket p;
      uint64_t t = kT0 + kMs, call_id = 0, cpu = 0;
      const auto epoch = [&](uint64_t id, uint64_t index, int32_t workers, uint64_t steps) {
        PutIter(out, t, id, index, workers);
        t += 50 * kMs;  // the workers' start
        for (uint64_t k = 0; k < steps; ++k, t += kStep, cpu += 2 * kMs) {
          PutNext(out, t, t + kMs, id, k, cpu, cpu + kMs / 2);
          PutCopy(out, 100, t + 2 * kMs, t + 3 * kMs, 8 * kMiBytes, 0x600000000ull, ++call_id,
                  cpu + kMs, cpu + 1500 * kUs);
        }
      };
      epoch(kLoader, 0, 2, 30);   // loader A
      epoch(kLoader, 0, 4, 200);  // loader B, at A's freed id
      if (third == kSameObject) epoch(kLoader, 1, 4, 200);
      if (third == kRemade) epoch(kLoader + 0x1000, 0, 4, 200);
      if (third == kOther) epoch(kLoader, 0, 8, 300);
      PutExit(out, 100, t + kMs);
    }
    PipelineAnalysis pipeline;
    Analyze(dir, &pipeline);
    const model::LoaderFacts& l = pipeline.inputs().loader;
    EXPECT_TRUE(l.hooked);
    // Before: one loader of 3 epochs (2 with the third at another id).
    EXPECT_EQ(l.num_workers, third == kOther ? 8 : 4) << third;
    EXPECT_EQ(l.epochs, third == kOther ? 1u : 2u) << third;
    EXPECT_EQ(l.steps_per_epoch, third == kOther ? 300u : 200u) << third;
    EXPECT_EQ(l.remade, third == kRemade) << third;
  }
}

}  // namespace pinscope
