// The step model's calls stream (analyzer/analyses/step_calls.h): folded
// into bounded segments, every call of the run counted, and a run longer
// than the 2^20 calls the model kept before gives the figures of its whole
// steady window (the steps after the old cap count).
#include "analyzer/analyses/step_calls.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

#include "analyzer/analyses/pipeline_analysis.h"
#include "analyzer/read/run_loader.h"
#include "analyzer/replay/replay.h"
#include "trace_builder.h"

namespace pinscope {
namespace {

using testing::kMiBytes;
using testing::kMs;
constexpr uint64_t kUs = 1000;

StepCalls::Call Copy(uint64_t start, uint64_t blocked, uint64_t bytes, bool h2d, uint64_t cpu) {
  StepCalls::Call c;
  c.start = start;
  c.end = start + blocked;
  c.copy = true;
  c.h2d = h2d;
  c.bytes = bytes;
  c.cpu_begin = cpu;
  c.cpu_ns = blocked / 2;
  c.faults = 3;
  return c;
}

StepCalls::Call Sync(uint64_t start, uint64_t blocked, uint64_t cpu) {
  StepCalls::Call c;
  c.start = start;
  c.end = start + blocked;
  c.cpu_begin = cpu;
  return c;
}

// 20,000 steps of a batch copy, a sync and a small D2H copy: more segments
// than kept, so they merge to 4 steps each; the sums over the segments are
// the run's, and each segment starts at a step.
TEST(StepCallsTest, MergedSegmentsKeepEveryCall) {
  StepCalls calls;
  constexpr uint64_t kSteps = 20000;
  uint64_t copy_ns = 0, sync_ns = 0, other_ns = 0;
  for (uint64_t k = 0; k < kSteps; ++k) {
    const uint64_t t = 1000 * kMs + k * 10 * kMs;
    const uint64_t blocked = kMs + (k % 7) * kUs;
    calls.Add(Copy(t, blocked, 8 * kMiBytes, true, 1 + k * 3));
    calls.Add(Sync(t + 4 * kMs, 2 * kMs + (k % 3) * kUs, 2 + k * 3));
    calls.Add(Copy(t + 8 * kMs, 50 * kUs, 4, false, 3 + k * 3));
    copy_ns += blocked;
    sync_ns += 2 * kMs + (k % 3) * kUs;
    other_ns += 50 * kUs;
  }
  calls.Flush();
  EXPECT_EQ(calls.stride(), 4u);  // 20,000 / 2 / 2 fits 8,192; / 2 does not
  ASSERT_EQ(calls.segments().size(), kSteps / 4);
  EXPECT_EQ(calls.largest_h2d(), 8 * kMiBytes);
  uint64_t got_copy = 0, got_sync = 0, got_other = 0, count = 0, usage = 0;
  for (size_t i = 0; i < calls.segments().size(); ++i) {
    const StepCalls::Segment& s = calls.segments()[i];
    EXPECT_EQ(s.start, 1000 * kMs + i * 4 * 10 * kMs);
    EXPECT_EQ(s.merged, 4u);
    ASSERT_EQ(s.copies.size(), 1u);
    EXPECT_EQ(s.copies[0].bytes, 8 * kMiBytes);
    EXPECT_EQ(s.copies[0].count, 4u);
    EXPECT_EQ(s.first_cpu, 1 + i * 12);
    EXPECT_EQ(s.last_cpu, 3 + (i * 4 + 3) * 3);
    got_copy += s.copies[0].wall_ns;
    got_sync += s.sync_ns;
    got_other += s.other_copy_ns;
    count += s.copies[0].count;
    usage += s.usage_calls;
  }
  EXPECT_EQ(count, kSteps);
  EXPECT_EQ(usage, 3 * kSteps);
  EXPECT_EQ(got_copy, copy_ns);
  EXPECT_EQ(got_sync, sync_ns);
  EXPECT_EQ(got_other, other_ns);
  const std::vector<StepCalls::Call> drawn = calls.Drawn();
  ASSERT_EQ(drawn.size(), StepCalls::kDrawnCalls);
  EXPECT_TRUE(calls.drawn_dropped());
  EXPECT_EQ(drawn.back().start, 1000 * kMs + (kSteps - 1) * 10 * kMs + 8 * kMs);
  EXPECT_EQ(drawn.front().start, 1000 * kMs + (kSteps - 2731) * 10 * kMs + 4 * kMs);
  for (size_t i = 1; i < drawn.size(); ++i) EXPECT_LT(drawn[i - 1].start, drawn[i].start);
}

// __next__ spans arrive at their end, after the calls inside them: a call
// inside one belongs to its step, and the first call after its return
// gives the release time, once the calls are folded (at the next span).
TEST(StepCallsTest, NextSpansSplitTheCallsBeforeThem) {
  StepCalls calls;
  calls.Add(Sync(100, 10, 0));                // before any step
  calls.Add(Sync(1000, 20, 500));             // inside __next__ [900, 1100)
  calls.AddNext(900, 1100, 1040, 7);          // ends at CPU 1040
  EXPECT_FALSE(calls.has_released());         // no call after its return yet
  calls.Add(Copy(1200, 30, 64, true, 1100));  // the first call after: 60 ns of release
  calls.Add(Sync(1300, 40, 1200));
  EXPECT_FALSE(calls.has_released());  // the calls wait for the next __next__
  calls.AddNext(2000, 2100, 2050, 8);
  ASSERT_TRUE(calls.has_released());
  const auto released = calls.TakeReleased();
  ASSERT_EQ(released.size(), 1u);
  EXPECT_EQ(released[0].first, 7u);
  EXPECT_EQ(released[0].second, 60u);
  calls.Flush();
  ASSERT_EQ(calls.segments().size(), 3u);
  EXPECT_EQ(calls.segments()[0].start, 0u);  // the calls before the first boundary
  EXPECT_EQ(calls.segments()[0].merged, 0u);
  EXPECT_EQ(calls.segments()[0].sync_ns, 10u);
  EXPECT_EQ(calls.segments()[1].start, 900u);
  EXPECT_EQ(calls.segments()[1].sync_ns, 20u + 40u);
  EXPECT_EQ(calls.segments()[1].other_copy_ns, 30u);  // 64 bytes: no batch copy
  EXPECT_EQ(calls.segments()[1].usage_calls, 3u);
  EXPECT_EQ(calls.segments()[2].start, 2000u);
  EXPECT_EQ(calls.segments()[2].sync_ns, 0u);
}

// A loop whose __next__ spans no call follows holds at most kPendingKept
// of them: the newest get their release from the call that finally comes.
TEST(StepCallsTest, SpansWithoutCallsAreBounded) {
  StepCalls calls;
  for (uint64_t i = 0; i < 3000; ++i) calls.AddNext(1000 * i, 1000 * i + 500, 10 * i, i);
  calls.Add(Sync(5000000, 10, 40000));
  calls.AddNext(6000000, 6000100, 0, 3000);
  const auto released = calls.TakeReleased();
  ASSERT_EQ(released.size(), StepCalls::kPendingKept);
  EXPECT_EQ(released.front().first, 3000u - StepCalls::kPendingKept);
  EXPECT_EQ(released.back().first, 2999u);
  EXPECT_EQ(released.back().second, 40000u - 29990u);
  EXPECT_EQ(calls.segments().size(), 3001u);
}

// Sizes below half a segment's largest are other copies; more sizes than
// kept are counted as the next larger.
TEST(StepCallsTest, SizesOfAMergedSegment) {
  StepCalls::Segment a, b;
  a.start = 10;
  StepCalls::Copies small{.bytes = 1 * kMiBytes, .count = 2, .wall_ns = 100};
  StepCalls::Copies large{.bytes = 4 * kMiBytes, .count = 1, .wall_ns = 400};
  a.copies.push_back(small);
  b.copies.push_back(large);
  StepCalls::Merge(a, b);
  ASSERT_EQ(a.copies.size(), 1u);
  EXPECT_EQ(a.copies[0].bytes, 4 * kMiBytes);
  EXPECT_EQ(a.other_copy_ns, 100u);
  EXPECT_EQ(a.merged, 2u);
  StepCalls::Segment c;
  for (uint64_t i = 0; i < StepCalls::kSizesKept + 1; ++i)
    c.copies.push_back({.bytes = 3 * kMiBytes + i * 1000, .count = 1, .wall_ns = 1});
  StepCalls::Merge(a, c);
  EXPECT_EQ(a.copies.size(), StepCalls::kSizesKept);
  uint64_t count = 0;
  for (const auto& x : a.copies) count += x.count;
  EXPECT_EQ(count, StepCalls::kSizesKept + 2);
}

// A root-only run of 420,000 steps (1.26 M calls, more than the 2^20 the
// step model kept before): an 8 MiB H2D copy, a sync and a 4-byte D2H copy
// per step; from step 360,000 on (after the old cap's 349,525 steps) a step
// takes 20 ms and its copy 3 ms instead of 10 and 1. The window is the
// whole run's (its edges at the segments' resolution, 64 steps here), and
// its figures are exactly those of the steps inside it, slow ones included.
TEST(StepCallsTest, LongRunCountsTheStepsAfterTheOldCap) {
  constexpr uint64_t kSteps = 420000, kSlowFrom = 360000;
  constexpr uint64_t kT0 = 1000 * 1000 * kMs;
  const auto start_of = [](uint64_t k) {
    return kT0 + kMs + k * 10 * kMs + (k > kSlowFrom ? (k - kSlowFrom) * 10 * kMs : 0);
  };
  const auto blocked_of = [](uint64_t k) { return k >= kSlowFrom ? 3 * kMs : kMs; };
  const std::string dir = testing::MakeTempDir("step_calls_long");
  {
    testing::TraceBuilder header(100, "step-calls-long", kT0);
    testing::SetHostFacts(&header.header(), 0, 0);
    std::FILE* f = std::fopen((dir + "/100.pstrace").c_str(), "wb");
    ASSERT_NE(f, nullptr);
    const std::string head = header.Bytes();
    std::fwrite(head.data(), 1, head.size(), f);
    std::string buffer;
    trace::TracePacket p;
    uint64_t call_id = 0;
    const auto put = [&] {
      buffer += testing::FramePacket(p);
      if (buffer.size() > (1 << 20)) {
        std::fwrite(buffer.data(), 1, buffer.size(), f);
        buffer.clear();
      }
    };
    const auto copy = [&](uint64_t t, uint64_t blocked, trace::Direction d, uint64_t bytes) {
      p.Clear();
      p.set_timestamp_ns(t);
      p.set_tid(100);
      trace::CopyEvent* c = p.mutable_copy();
      c->set_api(trace::MEMCPY_ASYNC);
      c->set_direction(d);
      c->set_bytes(bytes);
      c->set_src_kind(d == trace::H2D ? trace::PAGEABLE : trace::DEVICE);
      c->set_dst_kind(d == trace::H2D ? trace::DEVICE : trace::PAGEABLE);
      c->set_src_address(d == trace::H2D ? 0x600000000ull : 0x7e0000000000ull);
      c->set_dst_address(d == trace::H2D ? 0x7e0000000000ull : 0x600000000ull);
      c->set_src_device(d == trace::H2D ? -1 : 0);
      c->set_dst_device(d == trace::H2D ? 0 : -1);
      c->set_end_ns(t + blocked);
      c->set_call_id(++call_id);
      put();
    };
    for (uint64_t k = 0; k < kSteps; ++k) {
      const uint64_t t = start_of(k);
      copy(t, blocked_of(k), trace::H2D, 8 * kMiBytes);
      p.Clear();
      p.set_timestamp_ns(t + 5 * kMs);
      p.set_tid(100);
      p.mutable_sync()->set_api(trace::STREAM_SYNCHRONIZE);
      p.mutable_sync()->set_end_ns(t + 7 * kMs);
      p.mutable_sync()->set_call_id(++call_id);
      put();
      copy(t + 8 * kMs, 50 * kUs, trace::D2H, 4);
    }
    p.Clear();
    p.set_timestamp_ns(start_of(kSteps) + kMs);
    p.set_tid(100);
    p.mutable_exit()->set_how(trace::ProcessExit::EXIT);
    put();
    std::fwrite(buffer.data(), 1, buffer.size(), f);
    std::fclose(f);
  }
  RunListing listing;
  ASSERT_TRUE(ScanRun(dir, &listing).ok());
  ReplayEngine engine(std::move(listing));
  PipelineAnalysis pipeline;
  engine.AddAnalysis(&pipeline);
  engine.Run();
  std::filesystem::remove_all(dir);

  const uint64_t ws = pipeline.window_start_ns(), we = pipeline.window_end_ns();
  // The whole-run rule: from step 420,000 / 8 to the last step, each edge
  // moved back to the start of its 64-step segment.
  EXPECT_EQ(ws, start_of(52500 / 64 * 64));
  EXPECT_EQ(we, start_of((kSteps - 1) / 64 * 64));
  EXPECT_GT(we, start_of(kSlowFrom + 50000));
  // The reference: the steps that start inside the window.
  uint64_t steps = 0, copy_ns = 0, slow = 0;
  for (uint64_t k = 0; k < kSteps; ++k) {
    if (start_of(k) < ws || start_of(k) >= we) continue;
    ++steps;
    copy_ns += blocked_of(k);
    slow += k >= kSlowFrom;
  }
  EXPECT_GT(slow, 59000u);
  const model::MainStep& m = pipeline.inputs().main;
  EXPECT_FALSE(m.timed_by_hook);
  EXPECT_EQ(m.steps, steps);
  const double n = static_cast<double>(steps);
  EXPECT_DOUBLE_EQ(m.step_ns, static_cast<double>(we - ws) / n);
  EXPECT_DOUBLE_EQ(m.copy_ns, static_cast<double>(copy_ns) / n);
  EXPECT_DOUBLE_EQ(m.sync_ns, 2.0 * kMs);
  EXPECT_DOUBLE_EQ(m.other_copy_ns, 50.0 * kUs);
  EXPECT_EQ(m.batch_bytes, 8 * kMiBytes);
  EXPECT_GT(m.step_ns, 11.0 * kMs);  // the old cap's steps alone: 10 ms

  // The timeline keeps the thread's last 8,192 calls (3 a step): from the
  // second call (the sync) of step 420,000 - 2,731 on, all of them.
  const uint64_t from = pipeline.timeline_from_ns();
  EXPECT_EQ(from, start_of(kSteps - 2731) + 5 * kMs);
  const auto spans = pipeline.TimelineSpans(from, we, 1 << 20);
  size_t calls = 0;
  for (const auto& span : spans) {
    EXPECT_GE(span.start_ns, from);
    calls += span.kind == PipelineAnalysis::TimelineSpan::Kind::kCopy ||
             span.kind == PipelineAnalysis::TimelineSpan::Kind::kSync;
  }
  // The window ends at step 419,968's start: the calls of the steps before.
  EXPECT_EQ(calls, 3 * (419968 - (kSteps - 2731)) - 1);
}

}  // namespace
}  // namespace pinscope
