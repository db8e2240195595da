// e2e_pinning_test, section 9 (recycle_scenarios.cc): the recycle list
// (PINSCOPE_PIN_KEEP) - freed pinned blocks kept registered for the next
// allocation that fits, its caps, the budget, fork, idle release and
// threads. See pinning_checks.h.
#include <map>
#include <string>
#include <vector>

#include "pinning_checks.h"

namespace e2e_pinning {
namespace {

// --- 9. the recycle list (PINSCOPE_PIN_KEEP) --------------------------------------------

const Env kKeep = {{"PINSCOPE_PIN", "1"}, {"PINSCOPE_PIN_KEEP", "1G"}};

// A freed pinned block stays registered and the next allocation that fits
// gets it: no second cudaHostRegister, its first copy is PIN_CACHED.
// calloc, and sizes outside [size, size + size/8], never get it; realloc of
// a reused block unpins it and keeps its contents.
TEST_F(E2EPinning, FreedBlockIsKeptAndReusedByTheNextFittingAllocation) {
  TraceFile t = Scenario("recycle", kKeep);
  uint64_t a = M("a");
  const uint64_t n = 16 * kMiB;
  EXPECT_EQ(M("b"), a);
  EXPECT_EQ(M("f"), a);
  EXPECT_NE(M("c"), a);
  EXPECT_NE(M("d"), a);
  EXPECT_NE(M("e"), a);
  EXPECT_NE(M("under"), a);
  EXPECT_NE(M("g"), 0u);
  ExpectCopies(t, {{pt::H2D, n, a, pt::PIN_REGISTERED},
                   {pt::H2D, n, a, pt::PIN_CACHED},
                   {pt::D2H, n, M("check"), pt::PIN_SKIPPED_UNKNOWN_BUFFER},
                   {pt::H2D, n - kMiB, a, pt::PIN_CACHED},
                   {pt::D2H, n - kMiB, M("check"), pt::PIN_SKIPPED_UNKNOWN_BUFFER}});
  ExpectPins(t, {{pt::REGISTER, a, n, "malloc"},
                 {pt::RECYCLE, a, n, "free"},
                 {pt::REUSE, a, n, "malloc"},
                 {pt::RECYCLE, a, n, "free"},
                 {pt::REUSE, a, n, "malloc"},
                 {pt::UNREGISTER, a, n, "realloc"}});
  EXPECT_EQ(M("a_registered_after_free"), 1u);
  EXPECT_EQ(M("b_registered_before_copy"), 1u);
  EXPECT_EQ(M("c_zero"), 1u);
  EXPECT_EQ(M("f_usable_ok"), 1u);
  EXPECT_EQ(M("g_kept_contents"), 1u);
  EXPECT_EQ(M("register_calls"), 1u);
  EXPECT_EQ(M("unregister_calls"), 1u);
  EXPECT_EQ(M("registered_bytes"), 0u);
  // The trace sees an ordinary allocation at the reused address each time.
  int allocs_at_a = 0, frees_at_a = 0;
  for (const auto& p : t.packets) {
    if (p.has_alloc() && p.alloc().address() == a) ++allocs_at_a;
    if (p.has_free() && p.free().address() == a) ++frees_at_a;
  }
  EXPECT_EQ(allocs_at_a, 3);  // a, b, f
  EXPECT_EQ(frees_at_a, 3);   // free(a), free(b), realloc(f)
}

// The default keeps blocks too (PINSCOPE_PIN_KEEP unset: 1 GiB).
TEST_F(E2EPinning, RecycleListIsOnByDefault) {
  Run("recycle", {{"PINSCOPE_PIN", "1"}}, {"PINSCOPE_PIN_KEEP"});
  ASSERT_EQ(r_.exit_code, 0) << r_.stderr_text;
  EXPECT_EQ(r_.stderr_text, "");
  EXPECT_EQ(M("b"), M("a"));
  EXPECT_EQ(M("register_calls"), 1u);
}

// Pinning off: the same program, nothing kept, nothing registered.
TEST_F(E2EPinning, RecycleListNeedsPinning) {
  TraceFile t = Scenario("recycle", {{"PINSCOPE_PIN_KEEP", "1G"}}, {"PINSCOPE_PIN"});
  ASSERT_EQ(r_.exit_code, 0);  // Scenario's check, fatal here as it was
  ExpectNothingPinned(t);
  EXPECT_EQ(M("a_registered_after_free"), 0u);
  EXPECT_EQ(M("b_registered_before_copy"), 0u);
  EXPECT_EQ(M("g_kept_contents"), 1u);
  EXPECT_EQ(M("register_calls"), 0u);
}

TEST_F(E2EPinning, RecycleListOffWithKeepZero) {
  TraceFile t = Scenario("recycle", {{"PINSCOPE_PIN", "1"}, {"PINSCOPE_PIN_KEEP", "0"}});
  for (const auto* p : e2e::Packets(t, pt::TracePacket::kPin)) {
    EXPECT_NE(pt::PinOp_Name(p->pin().op()), "RECYCLE");
    EXPECT_NE(pt::PinOp_Name(p->pin().op()), "REUSE");
  }
  EXPECT_EQ(M("a_registered_after_free"), 0u);
  EXPECT_EQ(M("b_registered_before_copy"), 0u);
  EXPECT_EQ(M("register_calls"), 3u);  // a, b, f each registered anew
}

TEST_F(E2EPinning, BadKeepSizeIsReportedAndTheDefaultApplies) {
  Run("recycle", {{"PINSCOPE_PIN", "1"}, {"PINSCOPE_PIN_KEEP", "much"}});
  ASSERT_EQ(r_.exit_code, 0) << r_.stderr_text;
  ASSERT_EQ(r_.stderr_lines.size(), 1u) << r_.stderr_text;
  EXPECT_NE(r_.stderr_lines[0].find("PINSCOPE_PIN_KEEP=\"much\""), std::string::npos);
  EXPECT_EQ(M("register_calls"), 1u);
}

// The PinEvents of recycle_cap / recycle_count up to their large block:
// the blocks `b` (n bytes each) registered, then freed in order, the list
// keeping at most `kept` of them (each further free evicts the oldest).
std::vector<WantPin> FreedWithAtMostKept(const std::vector<uint64_t>& b, uint64_t n, int kept) {
  std::vector<WantPin> want;
  for (uint64_t block : b) want.push_back({pt::REGISTER, block, n, "malloc"});
  for (size_t i = 0; i < b.size(); ++i) {
    want.push_back({pt::RECYCLE, b[i], n, "free"});
    if (i >= static_cast<size_t>(kept)) want.push_back({pt::UNREGISTER, b[i - kept], n, "evict"});
  }
  return want;
}

// The byte cap (PINSCOPE_PIN_KEEP=40M: two 16 MiB blocks): each further
// free evicts the oldest kept block; a block above the cap is never kept.
TEST_F(E2EPinning, RecycleListRespectsItsByteCap) {
  TraceFile t = Scenario(
      "recycle_cap",
      {{"PINSCOPE_PIN", "1"}, {"PINSCOPE_PIN_KEEP", "40M"}, {"PINSCOPE_PIN_BUDGET", "1G"}});
  const uint64_t n = 16 * kMiB, ln = 48 * kMiB;
  std::vector<uint64_t> b;
  for (int i = 0; i < 6; ++i) b.push_back(M("b" + std::to_string(i)));
  uint64_t large = M("large");
  std::vector<WantPin> want = FreedWithAtMostKept(b, n, 2);
  want.push_back({pt::REGISTER, large, ln, "malloc"});
  want.push_back({pt::UNREGISTER, large, ln, "free"});
  want.push_back({pt::REUSE, b[5], n, "malloc"});  // the newest fitting block
  want.push_back({pt::RECYCLE, b[5], n, "free"});  // free(r) after the stats
  ExpectPins(t, want);
  EXPECT_EQ(M("r"), b[5]);
  EXPECT_EQ(M("r_registered"), 1u);
  EXPECT_EQ(M("register_calls"), 7u);
  EXPECT_EQ(M("unregister_calls"), 5u);
  EXPECT_EQ(M("registered_bytes"), 2 * n);  // b4 kept, b5 reused
}

// The count cap: at most four blocks kept.
TEST_F(E2EPinning, RecycleListKeepsAtMostFourBlocks) {
  TraceFile t =
      Scenario("recycle_count",
               {{"PINSCOPE_PIN", "1"}, {"PINSCOPE_PIN_KEEP", "1G"}, {"PINSCOPE_PIN_BUDGET", "1G"}});
  const uint64_t n = 8 * kMiB, ln = 48 * kMiB;
  std::vector<uint64_t> b;
  for (int i = 0; i < 6; ++i) b.push_back(M("b" + std::to_string(i)));
  uint64_t large = M("large");
  std::vector<WantPin> want = FreedWithAtMostKept(b, n, 4);
  // 48 MiB is under the byte cap (a quarter of the 1G budget): kept too.
  want.push_back({pt::REGISTER, large, ln, "malloc"});
  want.push_back({pt::RECYCLE, large, ln, "free"});
  want.push_back({pt::UNREGISTER, b[2], n, "evict"});
  want.push_back({pt::REUSE, b[5], n, "malloc"});
  want.push_back({pt::RECYCLE, b[5], n, "free"});  // free(r) after the stats
  ExpectPins(t, want);
  EXPECT_EQ(M("r"), b[5]);
  EXPECT_EQ(M("register_calls"), 7u);
  EXPECT_EQ(M("unregister_calls"), 3u);
  EXPECT_EQ(M("registered_bytes"), 3 * n + ln);  // b3, b4, large kept, b5 reused
}

// Kept bytes count against the budget (32M: a keep cap of 8M) and give way
// to a buffer being copied.
TEST_F(E2EPinning, KeptBlocksCountAgainstTheBudgetAndGiveWay) {
  TraceFile t = Scenario(
      "recycle_budget",
      {{"PINSCOPE_PIN", "1"}, {"PINSCOPE_PIN_KEEP", "1G"}, {"PINSCOPE_PIN_BUDGET", "32M"}});
  uint64_t b0 = M("b0"), b1 = M("b1"), b2 = M("b2");
  ExpectCopies(t, {{pt::H2D, 8 * kMiB, b0, pt::PIN_REGISTERED},
                   {pt::H2D, 16 * kMiB, b1, pt::PIN_REGISTERED},
                   {pt::H2D, 16 * kMiB, b2, pt::PIN_REGISTERED},
                   {pt::D2H, 16 * kMiB, M("check"), pt::PIN_SKIPPED_UNKNOWN_BUFFER}});
  ExpectPins(t,
             {{pt::REGISTER, b0, 8 * kMiB, "malloc"},
              {pt::RECYCLE, b0, 8 * kMiB, "free"},
              {pt::REGISTER, b1, 16 * kMiB, "malloc"},
              {pt::UNREGISTER, b0, 8 * kMiB, "budget"},
              {pt::REGISTER, b2, 16 * kMiB, "malloc"},
              {pt::UNREGISTER, b1, 16 * kMiB, "free"},  // above the keep cap
              {pt::UNREGISTER, b2, 16 * kMiB, "free"}},
             32 * kMiB);
  EXPECT_EQ(M("register_calls"), 3u);
  EXPECT_EQ(M("unregister_calls"), 3u);
  EXPECT_EQ(M("registered_bytes"), 0u);
}

// fork releases kept blocks first (UNREGISTER "fork"): the child neither
// inherits a registration nor gets a kept block from malloc.
TEST_F(E2EPinning, ForkReleasesKeptBlocks) {
  Run("recycle_fork", kKeep);
  ASSERT_EQ(r_.exit_code, 0) << r_.stderr_text;
  EXPECT_EQ(r_.stderr_text, "");
  ForkTraces tr = ReadForkTraces(r_);
  ExpectWellFormed(tr.parent, true);
  uint64_t a = M("a"), b = M("b");
  const uint64_t n = 16 * kMiB;
  ExpectPins(tr.parent, {{pt::REGISTER, a, n, "malloc"},
                         {pt::RECYCLE, a, n, "free"},
                         {pt::UNREGISTER, a, n, "fork"},
                         {pt::REGISTER, b, n, "malloc"},
                         {pt::RECYCLE, b, n, "free"}});
  EXPECT_EQ(M("a_kept_before_fork"), 1u);
  EXPECT_EQ(M("child_a_registered"), 0u);
  EXPECT_EQ(M("child_c_registered"), 0u);
  EXPECT_EQ(M("child_register_calls"), 0u);
  EXPECT_EQ(M("child_unregister_calls"), 0u);
  EXPECT_EQ(M("b_registered_before_copy"), 0u);
  EXPECT_EQ(M("register_calls"), 2u);
  EXPECT_EQ(M("unregister_calls"), 1u);
  EXPECT_EQ(M("registered_bytes"), n);  // b, kept until exit
  if (tr.child_wrote) {
    EXPECT_TRUE(e2e::Packets(tr.child, pt::TracePacket::kPin).empty());
  }
}

// The flusher thread releases a block kept idle for more than 2 s.
TEST_F(E2EPinning, IdleKeptBlockIsReleased) {
  TraceFile t =
      Scenario("recycle_idle",
               {{"PINSCOPE_PIN", "1"}, {"PINSCOPE_PIN_KEEP", "1G"}, {"PINSCOPE_FLUSH_MS", "50"}});
  uint64_t a = M("a");
  const uint64_t n = 16 * kMiB;
  ExpectPins(t, {{pt::REGISTER, a, n, "malloc"},
                 {pt::RECYCLE, a, n, "free"},
                 {pt::UNREGISTER, a, n, "idle"}});
  EXPECT_EQ(M("a_kept"), 1u);
  EXPECT_EQ(M("a_registered_after_idle"), 0u);
  EXPECT_EQ(M("b_registered_before_copy"), 0u);
  EXPECT_EQ(M("register_calls"), 1u);
  EXPECT_EQ(M("unregister_calls"), 1u);
  EXPECT_EQ(M("registered_bytes"), 0u);
}

// Four threads allocating, copying and freeing with the list on: every
// block goes REGISTER or REUSE -> RECYCLE or UNREGISTER, never twice.
TEST_F(E2EPinning, ThreadsWithTheRecycleList) {
  TraceFile t =
      Scenario("threads",
               {{"PINSCOPE_PIN", "1"}, {"PINSCOPE_PIN_KEEP", "1G"}, {"PINSCOPE_PIN_BUDGET", "1G"}});
  EXPECT_EQ(M("failures"), 0u);
  enum { kNone, kLive, kKept };
  std::map<uint64_t, int> state;
  int registers = 0, reuses = 0, recycles = 0, unregisters = 0;
  uint64_t held = 0;
  for (const auto* p : e2e::Packets(t, pt::TracePacket::kPin)) {
    const pt::PinEvent& e = p->pin();
    EXPECT_EQ(e.result(), 0);
    EXPECT_EQ(e.size(), 6 * kMiB);
    int& s = state[e.address()];
    switch (e.op()) {
      case pt::REGISTER:
        ++registers;
        EXPECT_EQ(s, kNone);
        s = kLive;
        held += e.size();
        break;
      case pt::REUSE:
        ++reuses;
        EXPECT_EQ(s, kKept);
        s = kLive;
        break;
      case pt::RECYCLE:
        ++recycles;
        EXPECT_EQ(s, kLive);
        s = kKept;
        break;
      case pt::UNREGISTER:
        ++unregisters;
        EXPECT_NE(s, kNone);
        EXPECT_EQ(e.reason(), s == kKept ? "evict" : "free");
        s = kNone;
        held -= e.size();
        break;
      default:
        ADD_FAILURE() << pt::PinOp_Name(e.op());
    }
  }
  // 40 buffers, each registered anew or reused; every free keeps its
  // block (6 MiB fits the caps), the fifth kept block evicts the oldest.
  EXPECT_EQ(registers + reuses, 40);
  EXPECT_EQ(recycles, 40);
  EXPECT_LE(held, 4 * 6 * kMiB);
  EXPECT_EQ(M("register_calls"), static_cast<uint64_t>(registers));
  EXPECT_EQ(M("unregister_calls"), static_cast<uint64_t>(unregisters));
  EXPECT_EQ(M("registered_bytes"), held);
  EXPECT_EQ(static_cast<uint64_t>(registers - unregisters) * 6 * kMiB, held);
}

// The num_workers=0 case (docs/pinning.md, "The 0-worker batch loop"): 20
// batches, each a fresh 40 MiB posix_memalign block (above glibc's mmap
// threshold) filled, copied and freed (scenario batch_loop0).
constexpr int kLoopBatches = 20;
constexpr uint64_t kLoopBatch = 40 * kMiB;
// A fresh mapping faults at least once per 2 MiB (huge pages, if the kernel
// gives them; 4 KiB pages: once per 4 KiB).
constexpr uint64_t kMinFaultsPerFreshBatch = kLoopBatch / (2 * kMiB);

// With the recycle list the first batch's block is registered once and
// handed back to each later batch: 1 registration for 20 batches, 19
// reuses, and the later batches' fills take no page fault at all.
TEST_F(E2EPinning, BatchLoopWithoutWorkersRegistersOnceAndFaultsOnce) {
  constexpr int kBatches = kLoopBatches;
  const uint64_t n = kLoopBatch;
  const uint64_t min_faults_per_fresh_batch = kMinFaultsPerFreshBatch;
  TraceFile kept = Scenario("batch_loop0", {{"PINSCOPE_PIN", "1"}, {"PINSCOPE_PIN_KEEP", "1G"}});
  const uint64_t a = M("batch0");
  EXPECT_EQ(M("distinct_addresses"), 1u);
  EXPECT_EQ(M("register_calls"), 1u);
  EXPECT_EQ(M("unregister_calls"), 0u);  // kept until exit
  EXPECT_EQ(M("registered_bytes"), n);
  EXPECT_GE(M("first_fill_faults"), min_faults_per_fresh_batch);
  EXPECT_EQ(M("rest_fill_faults"), 0u);
  std::vector<WantCopy> copies;
  std::vector<WantPin> pins = {{pt::REGISTER, a, n, "malloc"}};
  for (int i = 0; i < kBatches; ++i) {
    copies.push_back({pt::H2D, n, a, i == 0 ? pt::PIN_REGISTERED : pt::PIN_CACHED});
    copies.push_back({pt::D2H, kMiB, M("check"), pt::PIN_SKIPPED_UNKNOWN_BUFFER});
    copies.push_back({pt::D2H, kMiB, M("check"), pt::PIN_SKIPPED_UNKNOWN_BUFFER});
    pins.push_back({pt::RECYCLE, a, n, "free"});
    if (i + 1 < kBatches) pins.push_back({pt::REUSE, a, n, "malloc"});
  }
  ExpectCopies(kept, copies);
  ExpectPins(kept, pins);
}

// Without the recycle list (PINSCOPE_PIN_KEEP=0) every batch is a fresh
// mapping, registered at its copy and unregistered at its free: 20
// registrations for 20 batches, and every batch faults its pages again.
TEST_F(E2EPinning, BatchLoopWithoutKeepRegistersEveryBatch) {
  constexpr int kBatches = kLoopBatches;
  const uint64_t min_faults_per_fresh_batch = kMinFaultsPerFreshBatch;
  TraceFile fresh = Scenario("batch_loop0", {{"PINSCOPE_PIN", "1"}, {"PINSCOPE_PIN_KEEP", "0"}});
  EXPECT_EQ(M("register_calls"), static_cast<uint64_t>(kBatches));
  EXPECT_EQ(M("unregister_calls"), static_cast<uint64_t>(kBatches));
  EXPECT_EQ(M("registered_bytes"), 0u);
  EXPECT_GE(M("rest_fill_faults"), (kBatches - 1) * min_faults_per_fresh_batch);
  int registers = 0, frees = 0;
  for (const auto& p : fresh.packets) {
    if (!p.has_pin()) continue;
    EXPECT_NE(p.pin().op(), pt::REUSE);
    registers += p.pin().op() == pt::REGISTER;
    frees += p.pin().op() == pt::UNREGISTER && p.pin().reason() == "free";
  }
  EXPECT_EQ(registers, kBatches);
  EXPECT_EQ(frees, kBatches);
}

// Pinning off: nothing registered, every batch re-faults its pages (the cost
// the report's batch loop states as fresh_fault_ns).
TEST_F(E2EPinning, BatchLoopWithoutPinningFaultsEveryBatch) {
  const uint64_t min_faults_per_fresh_batch = kMinFaultsPerFreshBatch;
  TraceFile off = Scenario("batch_loop0", {}, {"PINSCOPE_PIN"});
  ExpectNothingPinned(off);
  EXPECT_EQ(M("register_calls"), 0u);
  EXPECT_GE(M("first_fill_faults"), min_faults_per_fresh_batch);
  EXPECT_GE(M("rest_fill_faults"), (kLoopBatches - 1) * min_faults_per_fresh_batch);
}

}  // namespace
}  // namespace e2e_pinning
