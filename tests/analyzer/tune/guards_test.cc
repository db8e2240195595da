// The guards (analyzer/tune/tune_guards.h) on synthetic limits: the exact
// estimate of each need, the boundary (equal fits, one byte more does not),
// the order of the checks and the sentence each refusal is.
#include <gtest/gtest.h>

#include "analyzer/tune/tune_guards.h"

namespace pinscope::tune {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;

Settings Workers(int k, int prefetch = 2) {
  Settings s;
  s.num_workers = k;
  s.prefetch_factor = prefetch;
  return s;
}

Limits Batches(uint64_t batch_bytes) {
  Limits l;
  l.batch_bytes = batch_bytes;
  return l;
}

TEST(Guards, Estimates) {
  Limits l = Batches(147 * kMiB);
  l.main_bytes = 3 * kGiB;
  l.worker_bytes = 100 * kMiB;
  EXPECT_EQ(ShmNeed(l, Workers(12)), 12 * 2 * 147 * kMiB);
  EXPECT_EQ(ShmNeed(l, Workers(12, 4)), 12 * 4 * 147 * kMiB);
  EXPECT_EQ(ShmNeed(l, Workers(0)), 0u);  // batches made in the main process
  EXPECT_EQ(PinnedNeed(l, Workers(12)), 0u);
  Settings pinned = Workers(12);
  pinned.pin_memory = true;
  EXPECT_EQ(PinnedNeed(l, pinned), (12 * 2 + 2) * 147 * kMiB);
  Settings pin = Workers(0);
  pin.pinscope_pin = true;
  EXPECT_EQ(PinnedNeed(l, pin), 2 * 147 * kMiB);
  EXPECT_EQ(MemoryNeed(l, pinned), 3 * kGiB + 12 * 100 * kMiB + 24 * 147 * kMiB + 26 * 147 * kMiB);
  // An absurd setting saturates instead of wrapping.
  Limits huge = Batches(UINT64_MAX / 2);
  EXPECT_EQ(ShmNeed(huge, Workers(8)), UINT64_MAX);
}

TEST(Guards, ShmCapacityAgainstBatchesTimesWorkersTimesPrefetch) {
  // 8 MiB batches, 64 MiB free: 4 workers x 2 fill it exactly; 5 do not.
  Limits l = Batches(8 * kMiB);
  l.shm_free_bytes = 64 * kMiB;
  EXPECT_EQ(Guard(l, Workers(4)), "");
  EXPECT_EQ(Guard(l, Workers(5)),
            "/dev/shm: 5 workers x prefetch 2 x 8.0 MiB batches = 80.0 MiB, over the 64.0 MiB "
            "free");
  EXPECT_EQ(Guard(l, Workers(2, 5)),
            "/dev/shm: 2 workers x prefetch 5 x 8.0 MiB batches = 80.0 MiB, over the 64.0 MiB "
            "free");
  EXPECT_EQ(Guard(l, Workers(0)), "");  // no workers, no segments
  l.shm_free_bytes = 64 * kMiB - 1;
  EXPECT_NE(Guard(l, Workers(4)), "");
  l.shm_free_bytes = 0;  // unknown: no refusal
  EXPECT_EQ(Guard(l, Workers(64)), "");
}

TEST(Guards, CoresTheJobMayUse) {
  Limits l = Batches(kMiB);
  l.cores = 6;
  l.cores_why = "affinity 8, cgroup quota 6.50 CPUs";
  EXPECT_EQ(Guard(l, Workers(6)), "");
  EXPECT_EQ(Guard(l, Workers(7)),
            "cores: 7 workers, more than the 6 cores the job may use (affinity 8, cgroup quota "
            "6.50 CPUs)");
  l.cores = 1;
  l.cores_why = "";
  EXPECT_EQ(Guard(l, Workers(1)), "");
  EXPECT_EQ(Guard(l, Workers(2)), "cores: 2 workers, more than the 1 cores the job may use");
}

TEST(Guards, MemoryLimit) {
  Limits l = Batches(100 * kMiB);
  l.main_bytes = 2 * kGiB;
  l.worker_bytes = 256 * kMiB;
  // 8 workers: 2 GiB + 8 x 256 MiB + 8 x 2 x 100 MiB = 5.5625 GiB.
  const uint64_t need = 2 * kGiB + 8 * 256 * kMiB + 16 * 100 * kMiB;
  l.memory_bytes = need;
  EXPECT_EQ(Guard(l, Workers(8)), "");
  l.memory_bytes = need - 1;
  EXPECT_EQ(Guard(l, Workers(8)),
            "memory: needs about 5.56 GiB (the main process 2.00 GiB, 8 workers x 256.0 MiB, "
            "/dev/shm 1.56 GiB, pinned 0 B), over the 5.56 GiB available");
  EXPECT_EQ(Guard(l, Workers(7)), "");
}

TEST(Guards, PinningBudget) {
  // 64 MiB batches, 4 workers x 2 + 2 in flight = 640 MiB pinned.
  Limits l = Batches(64 * kMiB);
  l.pin_budget_bytes = 640 * kMiB;
  Settings s = Workers(4);
  s.pinscope_pin = true;
  EXPECT_EQ(Guard(l, s), "");
  l.pin_budget_bytes = 512 * kMiB;
  EXPECT_EQ(Guard(l, s),
            "pinning budget: PINSCOPE_PIN=1 would pin about 640.0 MiB (10 batches of 64.0 MiB), "
            "over pinscope's pinning budget (512.0 MiB)");
  // The trial's own budget is what counts.
  s.pin_budget = "1G";
  EXPECT_EQ(Guard(l, s), "");
  s.pin_budget = "600M";
  EXPECT_EQ(Guard(l, s),
            "pinning budget: PINSCOPE_PIN=1 would pin about 640.0 MiB (10 batches of 64.0 MiB), "
            "over PINSCOPE_PIN_BUDGET=600M (600.0 MiB)");
  // pin_memory=True pins with PyTorch's allocator, not pinscope's budget.
  Settings torch_pins = Workers(4);
  torch_pins.pin_memory = true;
  EXPECT_EQ(Guard(l, torch_pins), "");
}

TEST(Guards, CoresAreCheckedFirst) {
  Limits l = Batches(64 * kMiB);
  l.cores = 2;
  l.shm_free_bytes = kMiB;
  EXPECT_EQ(Guard(l, Workers(3)).rfind("cores: ", 0), 0u);
  EXPECT_EQ(Guard(l, Workers(2)).rfind("/dev/shm: ", 0), 0u);
}

TEST(Guards, ParseSize) {
  uint64_t v = 0;
  EXPECT_TRUE(ParseSize("16G", &v));
  EXPECT_EQ(v, 16 * kGiB);
  EXPECT_TRUE(ParseSize("512MiB", &v));
  EXPECT_EQ(v, 512 * kMiB);
  EXPECT_TRUE(ParseSize("1024", &v));
  EXPECT_EQ(v, 1024u);
  EXPECT_FALSE(ParseSize("", &v));
  EXPECT_FALSE(ParseSize("lots", &v));
  EXPECT_FALSE(ParseSize("8X", &v));
  EXPECT_FALSE(ParseSize("99999999999999999999", &v));
}

}  // namespace
}  // namespace pinscope::tune
