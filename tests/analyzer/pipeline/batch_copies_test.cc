// The input analysis's batch loop past its exact size
// (analyzer/analyses/batch_copies.h): counts, bytes, first and last start
// exact over the whole run; the medians of a bounded uniform sample within
// the error stated there; a run longer than the 2^20 copies kept before
// counts every copy.
#include "analyzer/analyses/batch_copies.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "trace.pb.h"

namespace pinscope {
namespace {

constexpr uint64_t kMs = 1000000, kUs = 1000;

BatchCopies::Copy CopyAt(uint64_t start, uint64_t blocked, uint64_t bytes, uint8_t pin) {
  return {start, start + blocked, bytes, pin == trace::PIN_BY_PROGRAM, pin, false, false, false};
}

// The rank of `value` among `values` (sorted), as a fraction: where its
// equals span, the one nearest the middle.
double RankOf(const std::vector<uint64_t>& sorted, uint64_t value) {
  const double lo =
      static_cast<double>(std::lower_bound(sorted.begin(), sorted.end(), value) - sorted.begin());
  const double hi =
      static_cast<double>(std::upper_bound(sorted.begin(), sorted.end(), value) - sorted.begin());
  const double n = static_cast<double>(sorted.size());
  return std::clamp(0.5, lo / n, hi / n);
}

TEST(BatchCopiesTest, ExactUpToItsSize) {
  BatchCopies copies;
  for (uint64_t i = 0; i < 1000; ++i)
    copies.Add(CopyAt(i * 10 * kMs, kMs + (i % 10) * kUs, 8 << 20, trace::PIN_NONE));
  EXPECT_FALSE(copies.sampled());
  BatchLoop loop;
  ASSERT_TRUE(copies.Finish(&loop));
  EXPECT_EQ(loop.batches, 1000u);
  EXPECT_EQ(loop.intervals, 999u);
  EXPECT_EQ(loop.intervals_ns.size(), 999u);
  EXPECT_EQ(loop.median_interval_ns, 10 * kMs);
  EXPECT_EQ(loop.median_copy_ns, kMs + 5 * kUs);
}

// 1.2 M batch copies (more than the 2^20 kept before), every third from
// program-pinned memory, 1 MiB larger every fifth; copy times of 1.000 to
// 1.999 ms, intervals of 10.0 to 10.6 ms.
TEST(BatchCopiesTest, PastItsSizeCountsEveryCopyAndSamplesTheTimes) {
  constexpr uint64_t kCopies = 1200000;
  BatchCopies copies;
  copies.Add(CopyAt(0, kMs, 1 << 20, trace::PIN_NONE));  // dropped: below half the largest
  std::vector<uint64_t> blocked, intervals;
  uint64_t start = kMs, total_copy = 0, first = 0, last = 0, pinned = 0, large = 0;
  for (uint64_t i = 0; i < kCopies; ++i) {
    const uint64_t b = kMs + (i * 7919 % 1000) * kUs;
    const uint64_t bytes = i % 5 == 0 ? (9 << 20) : (8 << 20);
    const uint8_t pin = i % 3 == 0 ? trace::PIN_BY_PROGRAM : trace::PIN_NONE;
    copies.Add(CopyAt(start, b, bytes, pin));
    if (i == 0) first = start;
    last = start;
    pinned += i % 3 == 0;
    large += i % 5 == 0;
    blocked.push_back(b);
    const uint64_t interval = 10 * kMs + (i * 31 % 7) * 100 * kUs;
    if (i + 1 < kCopies) {
      intervals.push_back(interval);
      total_copy += b;
    }
    start += interval;
  }
  EXPECT_TRUE(copies.sampled());
  BatchLoop loop;
  ASSERT_TRUE(copies.Finish(&loop));
  EXPECT_TRUE(loop.found);
  EXPECT_EQ(loop.batches, kCopies);
  EXPECT_EQ(loop.pinned_batches, pinned);
  EXPECT_EQ(loop.intervals, kCopies - 1);
  EXPECT_EQ(loop.total_interval_ns, last - first);
  EXPECT_EQ(loop.total_copy_ns, total_copy);
  EXPECT_EQ(loop.batch_bytes, 8u << 20);  // 80% of the copies
  EXPECT_GT(large, 0u);
  // The sample: half to all of kExact pairs, the medians within 0.83% of
  // the middle rank.
  EXPECT_GE(loop.intervals_ns.size(), BatchCopies::kExact / 2);
  EXPECT_LT(loop.intervals_ns.size(), BatchCopies::kExact);
  std::sort(blocked.begin(), blocked.end());
  std::sort(intervals.begin(), intervals.end());
  EXPECT_NEAR(RankOf(blocked, loop.median_copy_ns), 0.5, 0.0083);
  EXPECT_NEAR(RankOf(intervals, loop.median_interval_ns), 0.5, 0.0083);
  // A sum over the sample's intervals, scaled, stands for the run's.
  uint64_t sum = 0;
  for (uint64_t v : loop.intervals_ns) sum += v;
  const double scaled = static_cast<double>(sum) * static_cast<double>(loop.intervals) /
                        static_cast<double>(loop.intervals_ns.size());
  EXPECT_NEAR(scaled / static_cast<double>(loop.total_interval_ns), 1.0, 0.01);
}

}  // namespace
}  // namespace pinscope
