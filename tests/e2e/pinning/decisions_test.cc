// e2e_pinning_test, sections 1-3 (decisions_scenarios.cc): what is pinned
// and what is not, copies of pinned buffers keeping pageable semantics (also
// in batches, symbol copies and with a passive recorder), the budget, a
// refused registration and bad settings. See pinning_checks.h.
#include <cuda_runtime_api.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "pinning_checks.h"

namespace e2e_pinning {
namespace {

// --- 1. decisions ----------------------------------------------------------------

TEST_F(E2EPinning, DecidesPerBufferAndCachesTheRegistration) {
  TraceFile t = Scenario("decisions");
  uint64_t big = M("big"), check = M("check");
  ExpectCopies(t, {
                      {pt::H2D, 16 * kMiB, big, pt::PIN_REGISTERED, pt::MEMCPY},
                      {pt::H2D, 16 * kMiB, big, pt::PIN_CACHED, pt::MEMCPY_ASYNC},
                      {pt::D2H, 16 * kMiB, check, pt::PIN_SKIPPED_UNKNOWN_BUFFER},
                      {pt::D2H, 16 * kMiB, big, pt::PIN_CACHED, pt::MEMCPY_ASYNC},
                      {pt::H2D, kMiB, M("small"), pt::PIN_SKIPPED_SMALL},
                      {pt::H2D, 8 * kMiB, M("static"), pt::PIN_SKIPPED_UNKNOWN_BUFFER},
                      {pt::H2D, 64 * 1024, M("stack"), pt::PIN_SKIPPED_UNKNOWN_BUFFER},
                      {pt::H2D, 8 * kMiB, M("hostalloc"), pt::PIN_BY_PROGRAM},
                      {pt::H2D, 16 * kMiB, M("program_registered"), pt::PIN_BY_PROGRAM},
                  });
  ExpectPins(t, {{pt::REGISTER, big, 16 * kMiB, "malloc"},
                 {pt::UNREGISTER, big, 16 * kMiB, "free"}});
  EXPECT_EQ(M("big_registered_after_first"), 1u);
  EXPECT_EQ(M("small_registered"), 0u);
  EXPECT_EQ(M("big_registered_after_free"), 0u);
  // pinscope registered big once; the program registered its own buffer
  // once and unregistered it; big was still pinned when the stats were read.
  EXPECT_EQ(M("register_calls"), 2u);
  EXPECT_EQ(M("unregister_calls"), 1u);
  EXPECT_EQ(M("registered_bytes"), 16 * kMiB);
  const pt::ShimConfig& cfg = t.packets[0].header().config();
  EXPECT_EQ(cfg.pin_mode(), 1u);
  EXPECT_EQ(cfg.pin_min_bytes(), 4 * kMiB);
  EXPECT_GT(cfg.pin_budget_bytes(), 0u);  // the derived budget in force
  auto counters = e2e::Packets(t, pt::TracePacket::kCounters);
  ASSERT_FALSE(counters.empty());
  EXPECT_EQ(counters.back()->counters().pinned_bytes(), 0u);  // big was freed
}

TEST_F(E2EPinning, PinningOffRegistersNothing) {
  TraceFile t = Scenario("decisions", {}, {"PINSCOPE_PIN"});
  ASSERT_EQ(r_.exit_code, 0);  // Scenario's check, fatal here as it was
  uint64_t big = M("big");
  ExpectCopies(t, {
                      {pt::H2D, 16 * kMiB, big, pt::PIN_NONE},
                      {pt::H2D, 16 * kMiB, big, pt::PIN_NONE},
                      {pt::D2H, 16 * kMiB, M("check"), pt::PIN_NONE},
                      {pt::D2H, 16 * kMiB, big, pt::PIN_NONE},
                      {pt::H2D, kMiB, M("small"), pt::PIN_NONE},
                      {pt::H2D, 8 * kMiB, M("static"), pt::PIN_NONE},
                      {pt::H2D, 64 * 1024, M("stack"), pt::PIN_NONE},
                      {pt::H2D, 8 * kMiB, M("hostalloc"), pt::PIN_BY_PROGRAM},
                      {pt::H2D, 16 * kMiB, M("program_registered"), pt::PIN_BY_PROGRAM},
                  });
  ExpectPins(t, {});
  EXPECT_EQ(M("big_registered_after_first"), 0u);
  EXPECT_EQ(M("register_calls"), 1u);  // the program's own
  EXPECT_EQ(M("unregister_calls"), 1u);
  EXPECT_EQ(M("registered_bytes"), 0u);
  EXPECT_EQ(t.packets[0].header().config().pin_mode(), 0u);
}

// --- 2. semantics -----------------------------------------------------------------

std::vector<WantCopy> HazardCopies(const RunResult& r) {
  uint64_t src = r.at("src"), dst = r.at("dst"), check = r.at("check");
  const uint64_t n = 16 * kMiB;
  return {
      {pt::H2D, n, src, pt::PIN_REGISTERED, pt::MEMCPY_ASYNC},
      {pt::D2H, n, check, pt::PIN_SKIPPED_UNKNOWN_BUFFER},
      {pt::H2D, n, src, pt::PIN_CACHED, pt::MEMCPY_ASYNC},
      {pt::D2H, n, check, pt::PIN_SKIPPED_UNKNOWN_BUFFER},
      {pt::H2D, n, check, pt::PIN_SKIPPED_UNKNOWN_BUFFER},
      {pt::D2H, n, dst, pt::PIN_REGISTERED, pt::MEMCPY_ASYNC},
      {pt::H2D, n, check, pt::PIN_SKIPPED_UNKNOWN_BUFFER},
      {pt::D2H, n, dst, pt::PIN_CACHED, pt::MEMCPY_ASYNC},
  };
}

std::vector<WantPin> HazardPins(const RunResult& r) {
  uint64_t src = r.at("src"), dst = r.at("dst");
  return {{pt::REGISTER, src, 16 * kMiB, "malloc"},
          {pt::REGISTER, dst, 16 * kMiB, "malloc"},
          {pt::UNREGISTER, src, 16 * kMiB, "free"},
          {pt::UNREGISTER, dst, 16 * kMiB, "free"}};
}

// facts section 6: with pageable memory an "async" H2D has consumed its
// source and an async D2H has written its destination when the call
// returns. Memory pinscope pinned must behave the same (1 = the old data
// reached the device / the host reads the final data).
TEST_F(E2EPinning, PinnedCopiesKeepPageableSemantics) {
  TraceFile t = Scenario("hazard");
  ExpectCopies(t, HazardCopies(r_));
  ExpectPins(t, HazardPins(r_));
  EXPECT_EQ(M("h2d_registered"), 1u);
  EXPECT_EQ(M("h2d_cached"), 1u);
  EXPECT_EQ(M("d2h_registered"), 1u);
  EXPECT_EQ(M("d2h_cached"), 1u);
}

// The same program without pinscope's pinning: the baseline it must match.
TEST_F(E2EPinning, PageableBaselineOfTheHazard) {
  Run("hazard", {}, {"PINSCOPE_PIN"});
  ASSERT_EQ(r_.exit_code, 0) << r_.stderr_text;
  EXPECT_EQ(M("h2d_registered"), 1u);
  EXPECT_EQ(M("h2d_cached"), 1u);
  EXPECT_EQ(M("d2h_registered"), 1u);
  EXPECT_EQ(M("d2h_cached"), 1u);
}

// PINSCOPE_PIN=async drops the wait: the copies really run asynchronously
// (2 = the device got the host's later write / the host read stale data).
// This proves the wait is what keeps the semantics above; pinscope still
// unregisters only after the copies are done.
TEST_F(E2EPinning, AsyncModeIsReallyAsynchronous) {
  TraceFile t = Scenario("hazard", {{"PINSCOPE_PIN", "async"}});
  ExpectCopies(t, HazardCopies(r_));
  ExpectPins(t, HazardPins(r_));
  EXPECT_EQ(M("h2d_registered"), 2u);
  EXPECT_EQ(M("h2d_cached"), 2u);
  EXPECT_EQ(M("d2h_registered"), 2u);
  EXPECT_EQ(M("d2h_cached"), 2u);
  EXPECT_EQ(t.packets[0].header().config().pin_mode(), 2u);
}

std::vector<WantCopy> BatchCopies(const RunResult& r) {
  uint64_t src = r.at("src"), dst = r.at("dst"), check = r.at("check");
  const uint64_t n = 16 * kMiB, h = n / 2;
  return {
      {pt::H2D, n, src, pt::PIN_REGISTERED, pt::MEMCPY},
      {pt::D2H, n, dst, pt::PIN_REGISTERED, pt::MEMCPY},
      {pt::H2D, h, src, pt::PIN_CACHED, pt::MEMCPY_BATCH_ASYNC},
      {pt::H2D, h, src + h, pt::PIN_CACHED, pt::MEMCPY_BATCH_ASYNC},
      {pt::D2H, n, check, pt::PIN_SKIPPED_UNKNOWN_BUFFER},
      {pt::D2H, h, dst, pt::PIN_CACHED, pt::MEMCPY_BATCH_ASYNC},
      {pt::D2H, h, dst + h, pt::PIN_CACHED, pt::MEMCPY_BATCH_ASYNC},
  };
}

TEST_F(E2EPinning, BatchCopiesKeepPageableSemantics) {
  TraceFile t = Scenario("batch");
  ExpectCopies(t, BatchCopies(r_));
  uint64_t src = M("src"), dst = M("dst");
  ExpectPins(t, {{pt::REGISTER, src, 16 * kMiB, "malloc"},
                 {pt::REGISTER, dst, 16 * kMiB, "malloc"},
                 {pt::UNREGISTER, src, 16 * kMiB, "free"},
                 {pt::UNREGISTER, dst, 16 * kMiB, "free"}});
  EXPECT_EQ(M("batch_h2d"), 1u);
  EXPECT_EQ(M("batch_d2h"), 1u);
}

TEST_F(E2EPinning, BatchCopiesInAsyncModeAreAsynchronous) {
  TraceFile t = Scenario("batch", {{"PINSCOPE_PIN", "async"}});
  ExpectCopies(t, BatchCopies(r_));
  EXPECT_EQ(M("batch_h2d"), 2u);
  EXPECT_EQ(M("batch_d2h"), 2u);
}

TEST_F(E2EPinning, SymbolCopiesKeepPageableSemantics) {
  TraceFile t = Scenario("symbol");
  uint64_t src = M("src"), dst = M("dst");
  const uint64_t n = 16 * kMiB;
  auto copies = e2e::Packets(t, pt::TracePacket::kCopy);
  ASSERT_EQ(copies.size(), 2u);
  EXPECT_EQ(copies[0]->copy().src_address(), src);
  EXPECT_EQ(pt::MemoryKind_Name(copies[0]->copy().src_kind()), "PAGEABLE");
  EXPECT_EQ(pt::PinOutcome_Name(copies[0]->copy().pin()), "PIN_REGISTERED");
  EXPECT_EQ(copies[1]->copy().dst_address(), dst);
  EXPECT_EQ(pt::MemoryKind_Name(copies[1]->copy().dst_kind()), "PAGEABLE");
  EXPECT_EQ(pt::PinOutcome_Name(copies[1]->copy().pin()), "PIN_REGISTERED");
  ExpectPins(t, {{pt::REGISTER, src, n, "malloc"},
                 {pt::REGISTER, dst, n, "malloc"},
                 {pt::UNREGISTER, src, n, "free"},
                 {pt::UNREGISTER, dst, n, "free"}});
  EXPECT_EQ(M("to_symbol"), 1u);
  EXPECT_EQ(M("from_symbol"), 1u);
}

// The recorder goes passive (a 64 KiB trace folder fills up, as in
// e2e_copies' DiskFull) while a buffer is pinned: its copies still wait.
TEST_F(E2EPinning, PassiveRecorderStillKeepsPageableSemantics) {
  std::string mnt = dir_.path() + "/tiny";
  ASSERT_EQ(mkdir(mnt.c_str(), 0700), 0);
  RunOptions o;
  o.args = {"passive"};
  o.env = {{"PINSCOPE_PIN", "1"}, {"PINSCOPE_FLUSH_MS", "20"}};
  o.out_dir = mnt + "/run";
  o.child_setup = [mnt] {
    if (unshare(CLONE_NEWNS) != 0) return std::string("unshare(CLONE_NEWNS): ") + strerror(errno);
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
      return std::string("mount --make-rprivate /: ") + strerror(errno);
    if (mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=64k,mode=0700") != 0)
      return std::string("mount tmpfs: ") + strerror(errno);
    return std::string();
  };
  r_ = e2e::Run(E2E_PIN_PROG, o, dir_.path());
  if (r_.exit_code == e2e::kSetupFailed && r_.stderr_text.rfind("SETUP: ", 0) == 0)
    GTEST_SKIP() << "no private tmpfs here: " << r_.stderr_text;
  ASSERT_EQ(r_.exit_code, 0) << r_.stderr_text;
  EXPECT_EQ(CountLines(r_, "disk full"), 1u) << r_.stderr_text;
  EXPECT_EQ(M("big_registered"), 1u);
  EXPECT_EQ(M("h2d_passive"), 1u);
  EXPECT_EQ(M("big_registered_after_free"), 0u);
}

// --- 3. budget ----------------------------------------------------------------------

TEST_F(E2EPinning, BudgetIsNeverExceeded) {
  Run("budget", {{"PINSCOPE_PIN", "1"}, {"PINSCOPE_PIN_BUDGET", "20M"}});
  ASSERT_EQ(r_.exit_code, 0) << r_.stderr_text;
  // One line says the budget is full, however many copies it turns away.
  EXPECT_EQ(r_.stderr_lines.size(), 1u) << r_.stderr_text;
  EXPECT_EQ(CountLines(r_, "PINSCOPE_PIN_BUDGET"), 1u) << r_.stderr_text;
  TraceFile t = e2e::SingleTrace(r_);
  ExpectWellFormed(t, true);
  const uint64_t n = 8 * kMiB;
  uint64_t b0 = M("b0"), b1 = M("b1"), b2 = M("b2"), b3 = M("b3"), check = M("check");
  ExpectCopies(t, {
                      {pt::H2D, n, b0, pt::PIN_REGISTERED},
                      {pt::D2H, n, check, pt::PIN_SKIPPED_UNKNOWN_BUFFER},
                      {pt::H2D, n, b1, pt::PIN_REGISTERED},
                      {pt::D2H, n, check, pt::PIN_SKIPPED_UNKNOWN_BUFFER},
                      {pt::H2D, n, b2, pt::PIN_SKIPPED_BUDGET},
                      {pt::D2H, n, check, pt::PIN_SKIPPED_UNKNOWN_BUFFER},
                      {pt::H2D, n, b2, pt::PIN_SKIPPED_BUDGET},
                      {pt::H2D, n, b3, pt::PIN_REGISTERED},
                      {pt::D2H, n, check, pt::PIN_SKIPPED_UNKNOWN_BUFFER},
                  });
  // BUDGET_FULL once when the budget first turns a buffer away (not at every
  // copy), again only after the budget changed.
  ExpectPins(t,
             {{pt::REGISTER, b0, n, "malloc"},
              {pt::REGISTER, b1, n, "malloc"},
              {pt::BUDGET_FULL, b2, n, "budget"},
              {pt::UNREGISTER, b0, n, "free"},
              {pt::REGISTER, b3, n, "malloc"},
              {pt::UNREGISTER, b1, n, "free"},
              {pt::UNREGISTER, b3, n, "free"}},
             20 * kMiB);
  EXPECT_EQ(M("b3_registered"), 1u);
  EXPECT_EQ(t.packets[0].header().config().pin_budget_bytes(), 20 * kMiB);
}

// A refused registration: the copy goes pageable, the trace says so once
// (REGISTER_FAILED with the CUDA error), later copies of the buffer do not
// try again, and the program's last-error state is left clean.
TEST_F(E2EPinning, RefusedRegistrationIsRememberedAndTheCopyGoesPageable) {
  TraceFile t = Scenario("register_fails");
  uint64_t buf = M("buf"), part = buf + 8 * kMiB;
  ExpectCopies(t, {{pt::H2D, 4 * kMiB, part, pt::PIN_FAILED},
                   {pt::H2D, 4 * kMiB, part, pt::PIN_FAILED},
                   {pt::D2H, 4 * kMiB, M("check"), pt::PIN_SKIPPED_UNKNOWN_BUFFER},
                   {pt::H2D, 4 * kMiB, part, pt::PIN_REGISTERED}});
  ExpectPins(t, {{pt::REGISTER_FAILED, buf, 16 * kMiB, "malloc",
                  cudaErrorHostMemoryAlreadyRegistered},
                 {pt::REGISTER, buf, 16 * kMiB, "malloc"},
                 {pt::UNREGISTER, buf, 16 * kMiB, "free"}});
  EXPECT_EQ(M("last_error_after_failed_pin"), 0u);
  EXPECT_EQ(M("before_register_calls"), 2u);  // the program's and one attempt
  EXPECT_EQ(M("register_calls"), 3u);
  EXPECT_EQ(M("registered_bytes"), 0u);
}

// A bad setting: one stderr line naming the variable, and the job runs.
TEST_F(E2EPinning, BadPinModeIsReportedAndPinningStaysOff) {
  Run("simple", {{"PINSCOPE_PIN", "maybe"}});
  EXPECT_EQ(r_.exit_code, 0) << r_.stderr_text;
  EXPECT_EQ(M("ok"), 1u);
  ASSERT_EQ(r_.stderr_lines.size(), 1u) << r_.stderr_text;
  EXPECT_NE(r_.stderr_lines[0].find("PINSCOPE_PIN=\"maybe\""), std::string::npos);
  ExpectNothingPinned(e2e::SingleTrace(r_));
}

TEST_F(E2EPinning, BadBudgetIsReportedAndTheDefaultApplies) {
  Run("simple", {{"PINSCOPE_PIN", "1"}, {"PINSCOPE_PIN_BUDGET", "lots"}});
  EXPECT_EQ(r_.exit_code, 0) << r_.stderr_text;
  EXPECT_EQ(M("ok"), 1u);
  ASSERT_EQ(r_.stderr_lines.size(), 1u) << r_.stderr_text;
  EXPECT_NE(r_.stderr_lines[0].find("PINSCOPE_PIN_BUDGET=\"lots\""), std::string::npos);
  TraceFile t = e2e::SingleTrace(r_);
  uint64_t big = M("big");
  ExpectPins(t, {{pt::REGISTER, big, 16 * kMiB, "malloc"},
                 {pt::UNREGISTER, big, 16 * kMiB, "free"}});
}

TEST_F(E2EPinning, BadMinimumIsReportedAndTheDefaultApplies) {
  Run("simple", {{"PINSCOPE_PIN", "1"}, {"PINSCOPE_PIN_MIN", "-1"}});
  EXPECT_EQ(r_.exit_code, 0) << r_.stderr_text;
  EXPECT_EQ(M("ok"), 1u);
  ASSERT_EQ(r_.stderr_lines.size(), 1u) << r_.stderr_text;
  EXPECT_NE(r_.stderr_lines[0].find("PINSCOPE_PIN_MIN=\"-1\""), std::string::npos);
  TraceFile t = e2e::SingleTrace(r_);
  uint64_t big = M("big"), small = M("small");
  ExpectCopies(t, {{pt::H2D, kMiB, small, pt::PIN_SKIPPED_SMALL},
                   {pt::H2D, 16 * kMiB, big, pt::PIN_REGISTERED},
                   {pt::D2H, 16 * kMiB, big, pt::PIN_CACHED}});
  EXPECT_EQ(t.packets[0].header().config().pin_min_bytes(), 4 * kMiB);
}

TEST_F(E2EPinning, MinimumIsConfigurable) {
  TraceFile t = Scenario("simple", {{"PINSCOPE_PIN", "1"}, {"PINSCOPE_PIN_MIN", "1M"}});
  uint64_t big = M("big"), small = M("small");
  ExpectCopies(t, {{pt::H2D, kMiB, small, pt::PIN_REGISTERED},
                   {pt::H2D, 16 * kMiB, big, pt::PIN_REGISTERED},
                   {pt::D2H, 16 * kMiB, big, pt::PIN_CACHED}});
}

}  // namespace
}  // namespace e2e_pinning
