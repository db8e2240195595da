// End-to-end tests of transparent pinning (PINSCOPE_PIN, docs/pinning.md):
// e2e_pinning_prog runs under LD_PRELOAD=libpinscope.so against the CUDA
// runtime double; each test asserts the exact PinEvents (op, address, size,
// reason, result, pinned_bytes), the pin outcome and memory kinds of every
// CopyEvent, and what the program observed about its own data. Uses the
// run-and-read harness of tests/e2e/copies (trace_harness.h).
#include <cuda_runtime_api.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "trace_harness.h"

namespace {

using e2e::RunOptions;
using e2e::RunResult;
using e2e::TraceFile;
namespace pt = pinscope::trace;

constexpr uint64_t kMiB = uint64_t{1} << 20;
using Env = std::vector<std::pair<std::string, std::string>>;

// One expected CopyEvent: direction, bytes, the host address and what
// pinning did. The host side reads PAGEABLE unless the program pinned it
// (PIN_BY_PROGRAM: PINNED); the other side is device memory.
struct WantCopy {
  pt::Direction dir;
  uint64_t bytes;
  uint64_t host;
  pt::PinOutcome pin;
  pt::CopyApi api = pt::MEMCPY;  // MEMCPY: any api is accepted
};

void ExpectCopy(const pt::CopyEvent& c, const WantCopy& w) {
  EXPECT_EQ(pt::Direction_Name(c.direction()), pt::Direction_Name(w.dir));
  EXPECT_EQ(c.bytes(), w.bytes);
  EXPECT_EQ(c.result(), 0);
  if (w.api != pt::MEMCPY) {
    EXPECT_EQ(pt::CopyApi_Name(c.api()), pt::CopyApi_Name(w.api));
  }
  EXPECT_EQ(pt::PinOutcome_Name(c.pin()), pt::PinOutcome_Name(w.pin));
  pt::MemoryKind host_kind = w.pin == pt::PIN_BY_PROGRAM ? pt::PINNED : pt::PAGEABLE;
  if (w.dir == pt::H2D) {
    EXPECT_EQ(c.src_address(), w.host);
    EXPECT_EQ(pt::MemoryKind_Name(c.src_kind()), pt::MemoryKind_Name(host_kind));
    EXPECT_EQ(pt::MemoryKind_Name(c.dst_kind()), "DEVICE");
  } else {
    EXPECT_EQ(c.dst_address(), w.host);
    EXPECT_EQ(pt::MemoryKind_Name(c.dst_kind()), pt::MemoryKind_Name(host_kind));
    EXPECT_EQ(pt::MemoryKind_Name(c.src_kind()), "DEVICE");
  }
}

void ExpectCopies(const TraceFile& t, const std::vector<WantCopy>& want) {
  auto copies = e2e::Packets(t, pt::TracePacket::kCopy);
  ASSERT_EQ(copies.size(), want.size()) << t.path;
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("copy #" + std::to_string(i));
    ExpectCopy(copies[i]->copy(), want[i]);
  }
}

struct WantPin {
  pt::PinOp op;
  uint64_t address;
  uint64_t size;
  std::string reason;
  int result = 0;  // cudaError_t of pinscope's call
};

// The PinEvents of a single-threaded job are exactly `want`, and pinned_bytes follows them
// (REGISTER adds, UNREGISTER subtracts; RECYCLE and REUSE keep the registration) without ever
// passing `budget`.
void ExpectPins(const TraceFile& t, const std::vector<WantPin>& want,
                uint64_t budget = UINT64_MAX) {
  auto pins = e2e::Packets(t, pt::TracePacket::kPin);
  ASSERT_EQ(pins.size(), want.size()) << t.path;
  uint64_t held = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("pin event #" + std::to_string(i));
    const pt::PinEvent& p = pins[i]->pin();
    EXPECT_EQ(pt::PinOp_Name(p.op()), pt::PinOp_Name(want[i].op));
    EXPECT_EQ(p.address(), want[i].address);
    EXPECT_EQ(p.size(), want[i].size);
    EXPECT_EQ(p.reason(), want[i].reason);
    EXPECT_EQ(p.result(), want[i].result);
    if (p.op() == pt::REGISTER) held += p.size();
    if (p.op() == pt::UNREGISTER) held -= p.size();
    EXPECT_EQ(p.pinned_bytes(), held);
    EXPECT_LE(p.pinned_bytes(), budget);
    EXPECT_GT(pins[i]->timestamp_ns(), 0u);
  }
}

// No PinEvent, and every copy ran with pinning off (PIN_NONE).
void ExpectNothingPinned(const TraceFile& t) {
  ExpectPins(t, {});
  for (const auto* p : e2e::Packets(t, pt::TracePacket::kCopy))
    EXPECT_EQ(pt::PinOutcome_Name(p->copy().pin()), "PIN_NONE");
}

// What a multi-threaded job's PinEvents add up to (ExpectEachRegistrationReleasedOnce).
struct PinTally {
  int registers = 0;
  int unregisters = 0;
  std::map<std::string, int> register_reasons;  // reason -> REGISTER events
};

// The PinEvents of a job whose threads interleave: each succeeded and is of
// `size` bytes with pinned_bytes <= `max_pinned`; each REGISTER has one of
// `register_reasons`, every other event is an UNREGISTER for
// `unregister_reason`; no address is registered twice or released without
// a registration.
PinTally ExpectEachRegistrationReleasedOnce(const TraceFile& t, uint64_t size,
                                            const std::set<std::string>& register_reasons,
                                            const std::string& unregister_reason,
                                            uint64_t max_pinned = UINT64_MAX) {
  PinTally tally;
  std::map<uint64_t, int> live;  // address -> registrations not yet released
  for (const auto* p : e2e::Packets(t, pt::TracePacket::kPin)) {
    const pt::PinEvent& e = p->pin();
    EXPECT_EQ(e.result(), 0) << e.reason();
    EXPECT_EQ(e.size(), size);
    EXPECT_LE(e.pinned_bytes(), max_pinned);
    if (e.op() == pt::REGISTER) {
      ++tally.registers;
      ++tally.register_reasons[e.reason()];
      EXPECT_EQ(register_reasons.count(e.reason()), 1u) << e.reason();
      EXPECT_EQ(++live[e.address()], 1) << "registered twice";
    } else {
      ++tally.unregisters;
      EXPECT_EQ(pt::PinOp_Name(e.op()), "UNREGISTER");
      EXPECT_EQ(e.reason(), unregister_reason);
      EXPECT_EQ(--live[e.address()], 0) << "unregistered without a registration";
    }
  }
  return tally;
}

size_t CountLines(const RunResult& r, const std::string& needle) {
  size_t n = 0;
  for (const std::string& l : r.stderr_lines)
    if (l.find(needle) != std::string::npos) ++n;
  return n;
}

class E2EPinning : public ::testing::Test {
 protected:
  // Runs a scenario; PINSCOPE_PIN=1 unless env says otherwise.
  // The cache tests (sections 1-8) run without the recycle list
  // (PINSCOPE_PIN_KEEP=0) and without pin-ahead (PINSCOPE_PIN_AHEAD=0)
  // unless env names them; sections 9 and 10 test those.
  RunResult Run(const std::string& scenario, Env env = {{"PINSCOPE_PIN", "1"}},
                std::vector<std::string> unset = {}) {
    for (const char* var : {"PINSCOPE_PIN_KEEP", "PINSCOPE_PIN_AHEAD"}) {
      bool named = std::find(unset.begin(), unset.end(), var) != unset.end();
      for (const auto& [name, value] : env) named |= name == var;
      if (!named) env.emplace_back(var, "0");
    }
    RunOptions o;
    o.args = {scenario};
    o.env = std::move(env);
    o.unset = std::move(unset);
    r_ = e2e::Run(E2E_PIN_PROG, o, dir_.path());
    return r_;
  }
  // Runs a scenario that must succeed quietly; returns its checked trace.
  TraceFile Scenario(const std::string& scenario, Env env = {{"PINSCOPE_PIN", "1"}},
                     std::vector<std::string> unset = {}) {
    Run(scenario, std::move(env), std::move(unset));
    EXPECT_EQ(r_.exit_code, 0) << r_.stderr_text;
    EXPECT_EQ(r_.stderr_text, "");
    TraceFile t = e2e::SingleTrace(r_);
    ExpectWellFormed(t, true);
    return t;
  }
  uint64_t M(const std::string& key) const { return r_.at(key); }

  e2e::TempDir dir_;
  RunResult r_;
};

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

// --- 4. invalidation ------------------------------------------------------------------

TEST_F(E2EPinning, FreeUnpinsBeforeTheMemoryIsReused) {
  TraceFile t = Scenario("free_reuse");
  uint64_t a = M("a"), b = M("b");
  EXPECT_EQ(M("same_address"), 1u) << "the test needs the address reused";
  ExpectCopies(t, {{pt::H2D, 16 * kMiB, a, pt::PIN_REGISTERED},
                   {pt::H2D, 16 * kMiB, b, pt::PIN_REGISTERED},
                   {pt::D2H, 16 * kMiB, M("check"), pt::PIN_SKIPPED_UNKNOWN_BUFFER}});
  // The second REGISTER succeeded (result 0: no 712 from a stale range).
  ExpectPins(t, {{pt::REGISTER, a, 16 * kMiB, "malloc"},
                 {pt::UNREGISTER, a, 16 * kMiB, "free"},
                 {pt::REGISTER, b, 16 * kMiB, "malloc"},
                 {pt::UNREGISTER, b, 16 * kMiB, "free"}});
  EXPECT_EQ(M("a_registered"), 1u);
  EXPECT_EQ(M("a_registered_after_free"), 0u);
  EXPECT_EQ(M("b_registered"), 1u);
  EXPECT_EQ(M("register_calls"), 2u);
  EXPECT_EQ(M("unregister_calls"), 2u);
  EXPECT_EQ(M("registered_bytes"), 0u);
}

TEST_F(E2EPinning, ReallocUnpinsAndTheNewBlockIsPinnedOnItsNextCopy) {
  TraceFile t = Scenario("realloc");
  uint64_t p = M("p"), q = M("q"), r = M("r");
  ExpectCopies(t, {{pt::H2D, 16 * kMiB, p, pt::PIN_REGISTERED},
                   {pt::H2D, 24 * kMiB, q, pt::PIN_REGISTERED},
                   {pt::D2H, 24 * kMiB, M("check"), pt::PIN_SKIPPED_UNKNOWN_BUFFER},
                   {pt::H2D, 8 * kMiB, r, pt::PIN_REGISTERED}});
  ExpectPins(t, {{pt::REGISTER, p, 16 * kMiB, "malloc"},
                 {pt::UNREGISTER, p, 16 * kMiB, "realloc"},
                 {pt::REGISTER, q, 24 * kMiB, "malloc"},
                 {pt::UNREGISTER, q, 24 * kMiB, "realloc"},
                 {pt::REGISTER, r, 8 * kMiB, "malloc"},
                 {pt::UNREGISTER, r, 8 * kMiB, "free"}});
  EXPECT_EQ(M("r_registered"), 1u);
  EXPECT_EQ(M("register_calls"), 3u);
  EXPECT_EQ(M("unregister_calls"), 3u);
}

TEST_F(E2EPinning, MunmapUnpinsSharedMemoryMappings) {
  TraceFile t = Scenario("shm");
  uint64_t m1 = M("m1"), m2 = M("m2"), m3 = M("m3"), check = M("check");
  ExpectCopies(t, {{pt::H2D, 16 * kMiB, m1, pt::PIN_REGISTERED},
                   {pt::D2H, 16 * kMiB, check, pt::PIN_SKIPPED_UNKNOWN_BUFFER},
                   {pt::H2D, 16 * kMiB, m2, pt::PIN_REGISTERED},
                   {pt::H2D, 4 * kMiB, m2, pt::PIN_REGISTERED},
                   {pt::D2H, 4 * kMiB, check, pt::PIN_SKIPPED_UNKNOWN_BUFFER},
                   {pt::H2D, 16 * kMiB, m3, pt::PIN_REGISTERED},
                   {pt::D2H, 16 * kMiB, check, pt::PIN_SKIPPED_UNKNOWN_BUFFER}});
  // A hole in the middle of m2 releases its whole registration; the piece
  // left in front is pinned again on its own next copy.
  ExpectPins(t, {{pt::REGISTER, m1, 16 * kMiB, "shm"},
                 {pt::UNREGISTER, m1, 16 * kMiB, "munmap"},
                 {pt::REGISTER, m2, 16 * kMiB, "shm"},
                 {pt::UNREGISTER, m2, 16 * kMiB, "munmap"},
                 {pt::REGISTER, m2, 4 * kMiB, "shm"},
                 {pt::UNREGISTER, m2, 4 * kMiB, "munmap"},
                 {pt::REGISTER, m3, 16 * kMiB, "shm"},
                 {pt::UNREGISTER, m3, 16 * kMiB, "munmap"}});
  EXPECT_EQ(M("m1_registered"), 1u);
  EXPECT_EQ(M("m1_registered_after_munmap"), 0u);
  EXPECT_EQ(M("m2_registered_after_hole"), 0u);
  EXPECT_EQ(M("registered_bytes"), 0u);
}

// --- 5. fork -------------------------------------------------------------------------

// The traces of a run with one forked child: the parent's (complete) and
// the child's if it wrote one.
struct ForkTraces {
  TraceFile parent;
  TraceFile child;
  bool child_wrote = false;
};

ForkTraces ReadForkTraces(const RunResult& r) {
  ForkTraces out;
  std::string parent = r.out_dir + "/" + std::to_string(r.pid) + ".pstrace";
  std::string child = r.out_dir + "/" + std::to_string(r.at("child_pid")) + ".pstrace";
  for (const std::string& f : e2e::TraceFiles(r.out_dir)) {
    if (f == parent) {
      out.parent = e2e::ReadTrace(f);
    } else if (f == child) {
      out.child = e2e::ReadTrace(f);
      out.child_wrote = true;
    } else {
      ADD_FAILURE() << "unexpected trace " << f;
    }
  }
  EXPECT_EQ(out.parent.error, "");
  EXPECT_FALSE(out.parent.truncated);
  return out;
}

TEST_F(E2EPinning, ForkUnpinsPrivateBuffersAndTheChildNeverCallsCuda) {
  Run("fork");
  ASSERT_EQ(r_.exit_code, 0) << r_.stderr_text;
  EXPECT_EQ(r_.stderr_text, "");
  ForkTraces tr = ReadForkTraces(r_);
  ExpectWellFormed(tr.parent, true);
  uint64_t priv = M("priv"), shm = M("shm");
  ExpectCopies(tr.parent, {{pt::H2D, 16 * kMiB, priv, pt::PIN_REGISTERED},
                           {pt::H2D, 8 * kMiB, shm, pt::PIN_REGISTERED},
                           {pt::H2D, 16 * kMiB, priv, pt::PIN_REGISTERED},
                           {pt::D2H, 16 * kMiB, M("check"), pt::PIN_SKIPPED_UNKNOWN_BUFFER},
                           {pt::H2D, 8 * kMiB, shm, pt::PIN_CACHED}});
  // The private buffer is unpinned before the fork (the child saw it
  // unregistered); the shared mapping stays pinned (fork does not copy it).
  ExpectPins(tr.parent, {{pt::REGISTER, priv, 16 * kMiB, "malloc"},
                         {pt::REGISTER, shm, 8 * kMiB, "shm"},
                         {pt::UNREGISTER, priv, 16 * kMiB, "fork"},
                         {pt::REGISTER, priv, 16 * kMiB, "malloc"},
                         {pt::UNREGISTER, priv, 16 * kMiB, "free"},
                         {pt::UNREGISTER, shm, 8 * kMiB, "munmap"}});
  EXPECT_EQ(M("child_priv_registered"), 0u);
  EXPECT_EQ(M("child_shm_registered"), 1u);
  // Copy-on-write kept: the child's write stayed in the child.
  EXPECT_EQ(M("parent_sees_own_data"), 1u);
  EXPECT_EQ(M("parent_priv_registered_after_fork"), 0u);
  EXPECT_EQ(M("parent_shm_registered_after_fork"), 1u);
  // The child freed the inherited buffer and unmapped the inherited
  // mapping without a single CUDA call.
  EXPECT_EQ(M("child_register_calls"), 0u);
  EXPECT_EQ(M("child_unregister_calls"), 0u);
  if (tr.child_wrote) {
    EXPECT_TRUE(e2e::Packets(tr.child, pt::TracePacket::kPin).empty());
    EXPECT_TRUE(e2e::Packets(tr.child, pt::TracePacket::kCopy).empty());
  }
}

TEST_F(E2EPinning, ForkWhileAnotherThreadCopiesThePinnedBuffer) {
  Run("fork_threads");
  ASSERT_EQ(r_.exit_code, 0) << r_.stderr_text;
  EXPECT_EQ(r_.stderr_text, "");
  EXPECT_EQ(M("failures"), 0u);
  // Only the parent traced anything (the children _exit at once).
  TraceFile t = e2e::SingleTrace(r_);
  ExpectWellFormed(t, true);
  // Every registration is released exactly once, by a fork or the free;
  // the timing decides how many forks found the buffer pinned.
  int registers = 0, by_fork = 0, by_free = 0;
  uint64_t held = 0;
  for (const auto* p : e2e::Packets(t, pt::TracePacket::kPin)) {
    const pt::PinEvent& e = p->pin();
    EXPECT_EQ(e.result(), 0);
    if (e.op() == pt::REGISTER) {
      EXPECT_EQ(held, 0u) << "registered twice";
      held = e.size();
      ++registers;
    } else {
      ASSERT_EQ(pt::PinOp_Name(e.op()), "UNREGISTER");
      EXPECT_EQ(held, e.size()) << "unregistered without a registration";
      held = 0;
      by_fork += e.reason() == "fork";
      by_free += e.reason() == "free";
    }
    EXPECT_EQ(e.pinned_bytes(), held);
  }
  EXPECT_GE(registers, 1);
  EXPECT_LE(by_fork, 5);
  EXPECT_EQ(by_free, 1);
  EXPECT_EQ(registers, by_fork + by_free);
  EXPECT_EQ(M("registered_bytes"), 0u);
}

// --- 8. no CUDA context of its own: never pin --------------------------------------

TEST_F(E2EPinning, ForkedChildOfACudaParentNeverPins) {
  Run("child_copies");
  ASSERT_EQ(r_.exit_code, 0) << r_.stderr_text;
  EXPECT_EQ(r_.stderr_text, "");
  ForkTraces tr = ReadForkTraces(r_);
  ASSERT_TRUE(tr.child_wrote);
  EXPECT_EQ(tr.child.error, "");
  // Not ExpectWellFormed: a forked child's trace has no CudaRuntimeInfo
  // today (cuda_runtime.cc notes CUDA use once per address space and the
  // child inherits the flag) - a recorder matter, outside pinning.
  ASSERT_FALSE(tr.child.packets.empty());
  EXPECT_TRUE(tr.child.packets.front().has_header());
  EXPECT_TRUE(tr.child.packets.back().has_exit());
  uint64_t a = M("a"), b = M("child_b");
  ExpectCopies(tr.child, {{pt::H2D, 16 * kMiB, b, pt::PIN_NONE},
                          {pt::H2D, 16 * kMiB, b, pt::PIN_NONE},
                          {pt::H2D, 16 * kMiB, a, pt::PIN_NONE},
                          {pt::D2H, 16 * kMiB, M("check"), pt::PIN_NONE}});
  ExpectPins(tr.child, {});
  EXPECT_EQ(M("child_b_registered"), 0u);
  EXPECT_EQ(M("child_register_calls"), 0u);
  EXPECT_EQ(M("child_unregister_calls"), 0u);
  ExpectPins(tr.parent, {{pt::REGISTER, a, 16 * kMiB, "malloc"},
                         {pt::UNREGISTER, a, 16 * kMiB, "fork"}});
}

// --- 6. the program's own register / unregister calls ----------------------------------

TEST_F(E2EPinning, ProgramRegisterAndUnregisterKeepWorking) {
  TraceFile t = Scenario("interplay");
  uint64_t a = M("a"), b = M("b");
  ExpectCopies(t, {{pt::H2D, 16 * kMiB, a, pt::PIN_REGISTERED},
                   {pt::H2D, 16 * kMiB, a, pt::PIN_BY_PROGRAM},
                   {pt::H2D, 16 * kMiB, b, pt::PIN_REGISTERED},
                   {pt::H2D, 16 * kMiB, b, pt::PIN_CACHED},
                   {pt::H2D, 16 * kMiB, M("h"), pt::PIN_BY_PROGRAM},
                   {pt::H2D, 16 * kMiB, M("t"), pt::PIN_BY_PROGRAM},
                   {pt::D2H, 16 * kMiB, M("check"), pt::PIN_SKIPPED_UNKNOWN_BUFFER}});
  ExpectPins(t, {{pt::REGISTER, a, 16 * kMiB, "malloc"},
                 {pt::UNREGISTER, a, 16 * kMiB, "program_register"},
                 {pt::REGISTER, b, 16 * kMiB, "malloc"},
                 {pt::UNREGISTER, b, 16 * kMiB, "program_register"}});
  // (a) pinscope stepped aside: the program's register and unregister work.
  EXPECT_EQ(M("a_register_rc"), 0u);
  EXPECT_EQ(M("a_registered"), 1u);
  EXPECT_EQ(M("a_unregister_rc"), 0u);
  EXPECT_EQ(M("a_registered_after_unregister"), 0u);
  // (b) unregistering what only pinscope registered answers as CUDA does
  // for unregistered memory, with the same last-error behaviour, and
  // pinscope's registration survives.
  EXPECT_EQ(M("b_unregister_rc"), static_cast<uint64_t>(cudaErrorHostMemoryNotRegistered));
  EXPECT_EQ(M("b_last_error"), static_cast<uint64_t>(cudaErrorHostMemoryNotRegistered));
  EXPECT_EQ(M("b_last_error_again"), 0u);
  EXPECT_EQ(M("b_registered"), 1u);
  EXPECT_EQ(M("b_piece_register_rc"), 0u);
  EXPECT_EQ(M("b_piece_unregister_rc"), 0u);
  // (c) cudaHostAlloc + cudaFreeHost untouched.
  EXPECT_EQ(M("h_free_rc"), 0u);
  // Registers: pinscope a, program a, pinscope b, program b's piece, program
  // t. Unregisters: pinscope a, program a, the 713 answer, pinscope b,
  // program b's piece, program t. Nothing is left registered.
  EXPECT_EQ(M("register_calls"), 5u);
  EXPECT_EQ(M("unregister_calls"), 6u);
  EXPECT_EQ(M("registered_bytes"), 0u);
}

// --- 7. threads ------------------------------------------------------------------------

TEST_F(E2EPinning, ThreadsCopyAndFreeConcurrently) {
  TraceFile t = Scenario("threads", {{"PINSCOPE_PIN", "1"}, {"PINSCOPE_PIN_BUDGET", "1G"}});
  EXPECT_EQ(M("failures"), 0u);
  // 4 threads x 5 rounds x 2 buffers, each pinned once and freed once.
  std::map<pt::PinOutcome, int> outcomes;
  for (const auto* p : e2e::Packets(t, pt::TracePacket::kCopy)) ++outcomes[p->copy().pin()];
  EXPECT_EQ(outcomes[pt::PIN_REGISTERED], 40);
  EXPECT_EQ(outcomes[pt::PIN_CACHED], 360);
  EXPECT_EQ(outcomes[pt::PIN_SKIPPED_UNKNOWN_BUFFER], 200);
  EXPECT_EQ(outcomes.size(), 3u);
  const PinTally pins =
      ExpectEachRegistrationReleasedOnce(t, 6 * kMiB, {"malloc"}, "free", 8 * 6 * kMiB);
  EXPECT_EQ(pins.registers, 40);
  EXPECT_EQ(pins.unregisters, 40);
  EXPECT_EQ(M("register_calls"), 40u);
  EXPECT_EQ(M("unregister_calls"), 40u);
  EXPECT_EQ(M("registered_bytes"), 0u);
}

TEST_F(E2EPinning, ThreadsInAsyncMode) {
  TraceFile t = Scenario("threads", {{"PINSCOPE_PIN", "async"}, {"PINSCOPE_PIN_BUDGET", "1G"}});
  // The program's own checks read right after an async copy: with async
  // pinning some of them may see stale data, so only the bookkeeping is
  // asserted here - every registration released once, none failed.
  int registers = 0, unregisters = 0;
  for (const auto* p : e2e::Packets(t, pt::TracePacket::kPin)) {
    EXPECT_EQ(p->pin().result(), 0);
    registers += p->pin().op() == pt::REGISTER;
    unregisters += p->pin().op() == pt::UNREGISTER;
  }
  EXPECT_EQ(registers, 40);
  EXPECT_EQ(unregisters, 40);
  EXPECT_EQ(M("registered_bytes"), 0u);
}

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

// --- 10. pin-ahead (PINSCOPE_PIN_AHEAD) -------------------------------------------

// Batch-shaped shm mappings: the first is registered at its copy, then every
// new mapping of that size on pinscope's thread as soon as it is mapped; a
// copy meeting a registration under way waits for it; munmap waits for one
// under way and cancels one still queued.
TEST_F(E2EPinning, PinAheadRegistersNewBatchesOfACopiedSizeOnItsOwnThread) {
  TraceFile t = Scenario("ahead", {{"PINSCOPE_PIN", "1"}, {"PINSCOPE_PIN_AHEAD", "1"}});
  const uint64_t a = M("a"), b = M("b"), c = M("c"), d = M("d"), e = M("e"), f1 = M("f1"),
                 check = M("check");
  ExpectCopies(t, {
                      {pt::H2D, 16 * kMiB, a, pt::PIN_REGISTERED, pt::MEMCPY},
                      {pt::H2D, 16 * kMiB, b, pt::PIN_CACHED, pt::MEMCPY_ASYNC},
                      {pt::D2H, 16 * kMiB, check, pt::PIN_SKIPPED_UNKNOWN_BUFFER},
                      {pt::H2D, 8 * kMiB, c, pt::PIN_REGISTERED, pt::MEMCPY},
                      {pt::H2D, 16 * kMiB, d, pt::PIN_CACHED, pt::MEMCPY},
                      {pt::D2H, 16 * kMiB, check, pt::PIN_SKIPPED_UNKNOWN_BUFFER},
                  });
  ExpectPins(t, {{pt::REGISTER, a, 16 * kMiB, "shm"},
                 {pt::UNREGISTER, a, 16 * kMiB, "munmap"},
                 {pt::REGISTER, b, 16 * kMiB, "shm_ahead"},
                 {pt::UNREGISTER, b, 16 * kMiB, "munmap"},
                 {pt::REGISTER, c, 8 * kMiB, "shm"},
                 {pt::UNREGISTER, c, 8 * kMiB, "munmap"},
                 {pt::REGISTER, d, 16 * kMiB, "shm_ahead"},
                 {pt::UNREGISTER, d, 16 * kMiB, "munmap"},
                 {pt::REGISTER, e, 16 * kMiB, "shm_ahead"},
                 {pt::UNREGISTER, e, 16 * kMiB, "munmap"},
                 {pt::REGISTER, f1, 16 * kMiB, "shm_ahead"},
                 {pt::UNREGISTER, f1, 16 * kMiB, "munmap"}});
  // Registered ahead on pinscope's thread, at the copy on the program's.
  auto pins = e2e::Packets(t, pt::TracePacket::kPin);
  ASSERT_EQ(pins.size(), 12u);
  const uint64_t main_tid = pins[0]->tid();
  for (size_t i : {2u, 6u, 8u, 10u}) EXPECT_NE(pins[i]->tid(), main_tid) << i;
  EXPECT_EQ(pins[4]->tid(), main_tid);
  for (size_t i : {1u, 3u, 5u, 7u, 9u, 11u}) EXPECT_EQ(pins[i]->tid(), main_tid) << i;
  EXPECT_EQ(M("b_registered_ahead"), 1u);
  EXPECT_EQ(M("b_device_old_data"), 1u);  // pageable semantics on a block pinned ahead
  EXPECT_EQ(M("b_registered_after_munmap"), 0u);
  EXPECT_EQ(M("c_registered_before_copy"), 0u);
  EXPECT_EQ(M("d_device_data"), 1u);
  EXPECT_EQ(M("d_register_calls"), 1u);  // the copy waited, it did not register again
  EXPECT_EQ(M("e_registered_after_munmap"), 0u);
  // d, e, f1: three registrations since the stats were reset; f2 never.
  EXPECT_EQ(M("register_calls"), 3u);
  EXPECT_EQ(M("unregister_calls"), 3u);
  EXPECT_EQ(M("registered_bytes"), 0u);
}

TEST_F(E2EPinning, PinAheadOffRegistersAtTheCopyOnly) {
  TraceFile t = Scenario("ahead", {{"PINSCOPE_PIN", "1"}, {"PINSCOPE_PIN_AHEAD", "0"}});
  const uint64_t a = M("a"), b = M("b"), c = M("c"), d = M("d"), check = M("check");
  ExpectCopies(t, {
                      {pt::H2D, 16 * kMiB, a, pt::PIN_REGISTERED, pt::MEMCPY},
                      {pt::H2D, 16 * kMiB, b, pt::PIN_REGISTERED, pt::MEMCPY_ASYNC},
                      {pt::D2H, 16 * kMiB, check, pt::PIN_SKIPPED_UNKNOWN_BUFFER},
                      {pt::H2D, 8 * kMiB, c, pt::PIN_REGISTERED, pt::MEMCPY},
                      {pt::H2D, 16 * kMiB, d, pt::PIN_REGISTERED, pt::MEMCPY},
                      {pt::D2H, 16 * kMiB, check, pt::PIN_SKIPPED_UNKNOWN_BUFFER},
                  });
  for (const auto* p : e2e::Packets(t, pt::TracePacket::kPin))
    EXPECT_NE(p->pin().reason(), "shm_ahead");
  EXPECT_EQ(M("b_registered_ahead"), 0u);
  EXPECT_EQ(M("b_device_old_data"), 1u);
  EXPECT_EQ(M("d_register_calls"), 1u);
  EXPECT_EQ(M("e_registered_after_munmap"), 0u);
  EXPECT_EQ(M("register_calls"), 1u);  // d only: e and f were never copied
  EXPECT_EQ(M("registered_bytes"), 0u);
}

// Four threads map, copy and unmap batch-sized shm segments while the main
// thread forks and each registration takes 2 ms (pin_program.cc,
// AheadThreads). The interleaving decides which mappings are registered
// ahead and which at their copy; what never varies is asserted.
TEST_F(E2EPinning, PinAheadUnderThreadsAndForks) {
  TraceFile t = Scenario("ahead_threads", {{"PINSCOPE_PIN", "1"}, {"PINSCOPE_PIN_AHEAD", "1"}});
  EXPECT_EQ(M("failures"), 0u);  // data and pageable semantics, in the program
  // Per thread: 22 of 30 mappings copied H2D, 7 of them also D2H; a check
  // copy (unrecorded static buffer) after each.
  std::map<pt::PinOutcome, int> shm_outcomes;
  int checks = 0, h2d = 0, d2h = 0;
  for (const auto* p : e2e::Packets(t, pt::TracePacket::kCopy)) {
    const auto& c = p->copy();
    if (c.pin() == pt::PIN_SKIPPED_UNKNOWN_BUFFER) {
      ++checks;
      continue;
    }
    EXPECT_EQ(c.bytes(), 4 * kMiB);
    ++shm_outcomes[c.pin()];
    (c.direction() == pt::H2D ? h2d : d2h)++;
  }
  EXPECT_EQ(checks, 4 * 22);
  EXPECT_EQ(h2d, 4 * 22);
  EXPECT_EQ(d2h, 4 * 7);
  // Every shm copy ran pinned, except one that met a fork (pageable then).
  const int pinned = shm_outcomes[pt::PIN_REGISTERED] + shm_outcomes[pt::PIN_CACHED];
  EXPECT_EQ(pinned + shm_outcomes[pt::PIN_SKIPPED_CAPTURE], 4 * 29);
  EXPECT_LE(shm_outcomes[pt::PIN_SKIPPED_CAPTURE], 6 * 4);
  EXPECT_GE(shm_outcomes[pt::PIN_CACHED], 4 * 7);  // at least the D2H after the H2D
  // Each registration succeeded and was released once, by munmap.
  PinTally pins = ExpectEachRegistrationReleasedOnce(t, 4 * kMiB, {"shm", "shm_ahead"}, "munmap");
  EXPECT_GE(pins.register_reasons["shm_ahead"], 1);
  EXPECT_LE(pins.registers, 4 * 30);
  EXPECT_EQ(pins.registers, pins.unregisters);
  EXPECT_EQ(M("register_calls"), static_cast<uint64_t>(pins.registers));
  EXPECT_EQ(M("unregister_calls"), static_cast<uint64_t>(pins.unregisters));
  EXPECT_EQ(M("registered_bytes"), 0u);
}

// On by default with PINSCOPE_PIN=1; a bad value says so once and keeps it on.
TEST_F(E2EPinning, PinAheadIsOnByDefaultAndABadValueIsNamed) {
  Run("ahead", {{"PINSCOPE_PIN", "1"}}, {"PINSCOPE_PIN_AHEAD"});
  ASSERT_EQ(r_.exit_code, 0) << r_.stderr_text;
  EXPECT_EQ(r_.stderr_text, "");
  EXPECT_EQ(M("b_registered_ahead"), 1u);
  Run("ahead", {{"PINSCOPE_PIN", "1"}, {"PINSCOPE_PIN_AHEAD", "sometimes"}});
  ASSERT_EQ(r_.exit_code, 0) << r_.stderr_text;
  ASSERT_EQ(r_.stderr_lines.size(), 1u) << r_.stderr_text;
  EXPECT_NE(r_.stderr_lines[0].find("PINSCOPE_PIN_AHEAD=\"sometimes\""), std::string::npos);
  EXPECT_EQ(M("b_registered_ahead"), 1u);
}

// Eight mappings of the batch size unmapped without a copy: pin-ahead stops
// for that size (a notice says so once); a copy of such a buffer starts it
// again.
TEST_F(E2EPinning, PinAheadStopsForASizeThatIsNeverCopied) {
  TraceFile t = Scenario("ahead_unused", {{"PINSCOPE_PIN", "1"}, {"PINSCOPE_PIN_AHEAD", "1"}});
  EXPECT_EQ(M("unused_registered_ahead"), 8u);
  EXPECT_EQ(M("g_registered_before_copy"), 0u);
  EXPECT_EQ(M("h_registered_ahead"), 1u);
  const uint64_t a = M("a"), g = M("g"), h = M("h"), check = M("check");
  ExpectCopies(t, {
                      {pt::H2D, 16 * kMiB, a, pt::PIN_REGISTERED},
                      {pt::H2D, 16 * kMiB, g, pt::PIN_REGISTERED},
                      {pt::D2H, 16 * kMiB, check, pt::PIN_SKIPPED_UNKNOWN_BUFFER},
                      {pt::H2D, 16 * kMiB, h, pt::PIN_CACHED},
                  });
  auto pins = e2e::Packets(t, pt::TracePacket::kPin);
  ASSERT_EQ(pins.size(), 2u + 16u + 4u);
  EXPECT_EQ(pins[0]->pin().reason(), "shm");
  for (size_t k = 0; k < 8; ++k) {
    EXPECT_EQ(pins[2 + 2 * k]->pin().reason(), "shm_ahead") << k;
    EXPECT_EQ(pins[3 + 2 * k]->pin().reason(), "munmap") << k;
  }
  EXPECT_EQ(pins[18]->pin().address(), g);
  EXPECT_EQ(pins[18]->pin().reason(), "shm");
  EXPECT_EQ(pins[20]->pin().address(), h);
  EXPECT_EQ(pins[20]->pin().reason(), "shm_ahead");
  size_t stopped = 0;
  for (const auto* p : e2e::Packets(t, pt::TracePacket::kNotice))
    if (p->notice().code() == "pin_ahead_stopped") ++stopped;
  EXPECT_EQ(stopped, 1u);
}

}  // namespace
