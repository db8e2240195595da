// DataLoader spans (shim/core/loader_spans.h) driven as the Python hook
// drives them, without LD_PRELOAD: nesting, the thread's usage at both ends,
// unmatched ends and the depth limit.
#include "shim/core/loader_spans.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <vector>

#include "core_test_env.h"
#include "shim/record/trace_fields.h"

namespace pinscope::shim {
namespace {

namespace f = fields;
using testing::ReadOwnTrace;
using testing::TraceDir;

std::vector<trace::LoaderEvent> LoaderEventsOf(uint64_t loader_id,
                                              std::vector<uint64_t>* begins = nullptr) {
  std::vector<trace::LoaderEvent> out;
  for (const auto& p : ReadOwnTrace().packets) {
    if (!p.has_loader() || p.loader().loader_id() != loader_id) continue;
    out.push_back(p.loader());
    if (begins) begins->push_back(p.timestamp_ns());  // a span's start
  }
  return out;
}

void Burn(int n) {
  volatile double x = 1;
  for (int i = 0; i < n; ++i) x = x * 1.0000001 + 1e-9;
}

TEST(LoaderSpans, NestedSpansCloseInnermostFirstWithUsage) {
  TraceDir();
  LoaderSettings s;
  s.loader_id = 0x1001;
  s.epoch = 2;
  s.num_workers = 0;
  s.pin_memory = true;
  s.batch_size = 64;
  s.dataset_length = 640;
  s.site = "train.py:12";
  LoaderIter(s);
  LoaderSpanBegin(false);  // NEXT: CPU time only
  LoaderSpanBegin(true);   // FETCH inside it (num_workers=0): the whole usage
  Burn(2000000);
  LoaderSpanEnd(f::kLoaderFetch, 0x1001, 7, -1, 64);
  LoaderSpanEnd(f::kLoaderNext, 0x1001, 7, -1, 0);
  LoaderMark(f::kLoaderEnd, 0x1001, 8);

  std::vector<uint64_t> begins;
  auto events = LoaderEventsOf(0x1001, &begins);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].kind(), trace::LOADER_ITER);
  EXPECT_EQ(events[0].index(), 2u);
  EXPECT_TRUE(events[0].pin_memory());
  EXPECT_EQ(events[0].batch_size(), 64);
  EXPECT_EQ(events[0].dataset_length(), 640u);
  EXPECT_EQ(events[0].site(), "train.py:12");
  EXPECT_FALSE(events[0].has_usage_begin());

  const trace::LoaderEvent& fetch = events[1];
  const trace::LoaderEvent& next = events[2];
  EXPECT_EQ(fetch.kind(), trace::LOADER_FETCH);
  EXPECT_EQ(fetch.batch_samples(), 64u);
  EXPECT_EQ(fetch.worker_id(), -1);
  EXPECT_EQ(next.kind(), trace::LOADER_NEXT);
  EXPECT_EQ(next.index(), 7u);
  // The fetch lies inside the next, and both measured the burn's CPU time.
  EXPECT_LE(begins[2], begins[1]);
  EXPECT_LT(begins[1], fetch.end_ns());
  EXPECT_LE(fetch.end_ns(), next.end_ns());
  const auto cpu = [](const trace::LoaderEvent& e) {
    return e.usage_end().cpu_ns() - e.usage_begin().cpu_ns();
  };
  EXPECT_GT(cpu(fetch), 0u);
  EXPECT_GE(cpu(next), cpu(fetch));
  // The fetch's whole usage (its faults price a batch being made): the
  // user/system split and the faults so far; the next's CPU time only.
  EXPECT_GT(fetch.usage_end().user_ns() + fetch.usage_end().sys_ns(), 0u);
  EXPECT_GT(fetch.usage_begin().minor_faults(), 0u);
  for (const trace::ThreadUsage& u : {next.usage_begin(), next.usage_end()}) {
    EXPECT_GT(u.cpu_ns(), 0u);
    EXPECT_EQ(u.user_ns() + u.sys_ns() + u.minor_faults() + u.major_faults(), 0u);
  }
  EXPECT_EQ(events[3].kind(), trace::LOADER_END);
  EXPECT_EQ(events[3].index(), 8u);
}

// A pin thread's PIN span begins microseconds after its RECV span ended:
// its entry CPU time is the RECV's exit plus the gap, exactly, with no
// reading (shim/base/usage.h); a span under 20 us takes no exit reading
// either. One that begins after a sleep is read.
TEST(LoaderSpans, ASpanRightAfterAnotherTakesNoReadingAtItsStart) {
  TraceDir();
  int derived = 0, tries = 0;
  for (int k = 0; k < 20; ++k) {
    LoaderSpanBegin(false);
    Burn(100000);  // well over 20 us: the exit is read
    LoaderSpanEnd(f::kLoaderRecv, 0x4004, 2 * k, -1, 0);
    LoaderSpanBegin(false);
    LoaderSpanEnd(f::kLoaderPin, 0x4004, 2 * k + 1, -1, 0);
  }
  usleep(2000);
  LoaderSpanBegin(false);
  LoaderSpanEnd(f::kLoaderPin, 0x4004, 40, -1, 0);
  std::vector<uint64_t> begins;
  auto events = LoaderEventsOf(0x4004, &begins);
  ASSERT_EQ(events.size(), 41u);
  for (size_t i = 0; i + 1 < events.size(); i += 2) {
    const trace::LoaderEvent& recv = events[i];
    const trace::LoaderEvent& pin = events[i + 1];
    ASSERT_EQ(recv.kind(), trace::LOADER_RECV);
    ASSERT_EQ(pin.kind(), trace::LOADER_PIN);
    const uint64_t gap = begins[i + 1] - recv.end_ns();
    if (gap >= 20'000 || pin.end_ns() - begins[i + 1] >= 20'000) continue;  // preempted
    ++tries;
    derived += pin.usage_begin().cpu_ns() - recv.usage_end().cpu_ns() == gap;
    // The short span's exit: its entry plus its wall time.
    EXPECT_EQ(pin.usage_end().cpu_ns() - pin.usage_begin().cpu_ns(), pin.end_ns() - begins[i + 1]);
  }
  EXPECT_GE(tries, 10);
  EXPECT_EQ(derived, tries);
  // After the sleep: read, far less CPU than wall time since the last exit.
  const trace::LoaderEvent& last = events[40];
  const uint64_t wall = begins[40] - events[39].end_ns();
  EXPECT_GT(wall, 2'000'000u);
  EXPECT_LT(last.usage_begin().cpu_ns() - events[39].usage_end().cpu_ns(), wall / 2);
}

TEST(LoaderSpans, SpanTimesNestAndAnUnmatchedEndIsIgnored) {
  TraceDir();
  LoaderSpanEnd(f::kLoaderNext, 0x2002, 0, -1, 0);  // no Begin: nothing recorded
  LoaderSpanBegin(false);
  LoaderSpanBegin(false);
  LoaderSpanEnd(f::kLoaderPin, 0x2002, 1, -1, 0);
  LoaderSpanEnd(f::kLoaderNext, 0x2002, 2, -1, 0);
  auto events = LoaderEventsOf(0x2002);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind(), trace::LOADER_PIN);
  EXPECT_EQ(events[1].kind(), trace::LOADER_NEXT);
}

TEST(LoaderSpans, BeyondTheDepthLimitSpansAreDroppedNotMismatched) {
  TraceDir();
  for (int i = 0; i < kMaxLoaderSpanDepth + 3; ++i) LoaderSpanBegin(true);
  for (int i = kMaxLoaderSpanDepth + 3; i > 0; --i)
    LoaderSpanEnd(f::kLoaderFetch, 0x3003, static_cast<uint64_t>(i), -1, 0);
  auto events = LoaderEventsOf(0x3003);
  // The three innermost (past the limit) are dropped; the rest keep their
  // own begin times: the outermost began first and ended last.
  ASSERT_EQ(events.size(), static_cast<size_t>(kMaxLoaderSpanDepth));
  EXPECT_EQ(events.front().index(), static_cast<uint64_t>(kMaxLoaderSpanDepth));
  EXPECT_EQ(events.back().index(), 1u);
}

}  // namespace
}  // namespace pinscope::shim
