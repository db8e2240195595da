// Group 12 (fault_scenarios.cc): the copy path under PINSCOPE_PIN=1 when
// pinning's CUDA calls fail (the runtime double's fault injection) or the
// budget is full. In each: the program's copies deliver the right data
// (the program checks every one), it exits 0, pinscope says so in exactly
// one stderr line, and the trace tells what happened.
#include <cuda_runtime_api.h>

#include "pinning_checks.h"

namespace e2e_pinning {
namespace {

// Small buffers pinned, traced (PINSCOPE_TRACE_MIN) and copied: 64 KiB.
Env Small(Env more) {
  Env env = {{"PINSCOPE_PIN", "1"}, {"PINSCOPE_PIN_MIN", "64K"}, {"PINSCOPE_TRACE_MIN", "64K"}};
  env.insert(env.end(), more.begin(), more.end());
  return env;
}

// The copies CopyAndCheck makes of buffers `bufs` (n bytes each), the
// outcome of buffer i's copies being pin[i] (the async copy is buffer 0's,
// `async` for it), each device read-back a pageable copy into check
// (check_pin: PIN_NONE once pinning is off).
std::vector<WantCopy> CheckedCopies(const std::vector<uint64_t>& bufs, uint64_t n,
                                    const std::vector<pt::PinOutcome>& first,
                                    const std::vector<pt::PinOutcome>& later, uint64_t check,
                                    pt::PinOutcome async,
                                    pt::PinOutcome check_pin = pt::PIN_SKIPPED_UNKNOWN_BUFFER) {
  std::vector<WantCopy> w;
  for (size_t i = 0; i < bufs.size(); ++i) {
    w.push_back({pt::H2D, n, bufs[i], first[i]});
    w.push_back({pt::H2D, n, bufs[i], later[i]});
    w.push_back({pt::D2H, n, check, check_pin});
    w.push_back({pt::D2H, n, bufs[i], later[i]});
  }
  w.push_back({pt::H2D, n, bufs[0], async});
  w.push_back({pt::D2H, n, check, check_pin});
  return w;
}

// (a) Every cudaHostRegister fails: every copy goes pageable with the
// right data, one REGISTER_FAILED per buffer (no second attempt), one line.
TEST_F(E2EPinning, RegistrationFailingOnEveryCallLeavesCopiesPageableAndSaysSoOnce) {
  Run("fault_register", Small({{"FAKE_CUDART_FAIL_REGISTER", "all"}}));
  ASSERT_EQ(r_.exit_code, 0) << r_.stderr_text;
  ASSERT_EQ(r_.stderr_lines.size(), 1u) << r_.stderr_text;
  EXPECT_EQ(CountLines(r_, "pinscope: cudaHostRegister failed (CUDA error 2)"), 1u)
      << r_.stderr_text;
  TraceFile t = e2e::SingleTrace(r_);
  ExpectWellFormed(t, true);
  const uint64_t n = kMiB, b0 = M("b0"), b1 = M("b1"), b2 = M("b2");
  const auto F = pt::PIN_FAILED;
  ExpectCopies(t, CheckedCopies({b0, b1, b2}, n, {F, F, F}, {F, F, F}, M("check"), F));
  const int oom = cudaErrorMemoryAllocation;
  ExpectPins(t, {{pt::REGISTER_FAILED, b0, n, "malloc", oom},
                 {pt::REGISTER_FAILED, b1, n, "malloc", oom},
                 {pt::REGISTER_FAILED, b2, n, "malloc", oom}});
  EXPECT_EQ(M("last_error"), 0u);  // pinscope's failures never reach the program
  EXPECT_EQ(M("register_calls"), 3u);
  EXPECT_EQ(M("registered_bytes"), 0u);
}

// (b) The budget holds one buffer: the others go pageable with the right
// data, one BUDGET_FULL, one line.
TEST_F(E2EPinning, FullBudgetLeavesCopiesPageableAndSaysSoOnce) {
  Run("fault_budget", Small({{"PINSCOPE_PIN_BUDGET", "1M"}}));
  ASSERT_EQ(r_.exit_code, 0) << r_.stderr_text;
  ASSERT_EQ(r_.stderr_lines.size(), 1u) << r_.stderr_text;
  EXPECT_EQ(CountLines(r_, "pinscope: PINSCOPE_PIN_BUDGET (1 MiB) is full"), 1u) << r_.stderr_text;
  TraceFile t = e2e::SingleTrace(r_);
  ExpectWellFormed(t, true);
  const uint64_t n = 768 * 1024, b0 = M("b0"), b1 = M("b1"), b2 = M("b2");
  const auto B = pt::PIN_SKIPPED_BUDGET;
  ExpectCopies(t, CheckedCopies({b0, b1, b2}, n, {pt::PIN_REGISTERED, B, B}, {pt::PIN_CACHED, B, B},
                                M("check"), pt::PIN_CACHED));
  ExpectPins(t,
             {{pt::REGISTER, b0, n, "malloc"},
              {pt::BUDGET_FULL, b1, n, "budget"},
              {pt::UNREGISTER, b0, n, "free"}},
             kMiB);
  EXPECT_EQ(M("last_error"), 0u);
  EXPECT_EQ(M("b0_registered"), 1u);
  EXPECT_EQ(M("b1_registered"), 0u);
}

// (c) pinscope's unregister before fork fails: the block stays pinscope's
// (registered, hidden from the program's queries), pinning turns off with
// one line, the program's copies stay right, and its own cudaHostRegister
// of the buffer succeeds (pinscope's second unregister, first) and then
// answers registered.
TEST_F(E2EPinning, FailedUnregisterKeepsTheBlockHiddenAndTheProgramsRegisterSucceeds) {
  Run("fault_unregister_fork", Small({{"FAKE_CUDART_FAIL_UNREGISTER", "1"}}));
  ASSERT_EQ(r_.exit_code, 0) << r_.stderr_text;
  ASSERT_EQ(r_.stderr_lines.size(), 1u) << r_.stderr_text;
  EXPECT_EQ(CountLines(r_, "pinscope: cudaHostUnregister failed (CUDA error 999)"), 1u)
      << r_.stderr_text;
  EXPECT_EQ(CountLines(r_, "pinning off"), 1u) << r_.stderr_text;
  EXPECT_EQ(M("a_registered_after_fork"), 1u);  // the driver kept it
  EXPECT_EQ(M("a_attr_type"), unsigned{cudaMemoryTypeUnregistered});
  EXPECT_EQ(M("a_flags_rc"), unsigned{cudaErrorInvalidValue});
  EXPECT_EQ(M("a_register_rc"), 0u);
  EXPECT_EQ(M("a_attr_type_own"), unsigned{cudaMemoryTypeHost});
  EXPECT_EQ(M("a_unregister_rc"), 0u);
  EXPECT_EQ(M("a_registered_end"), 0u);
  EXPECT_EQ(M("last_error"), 0u);
  EXPECT_EQ(M("registered_bytes"), 0u);
  TraceFile t = e2e::ReadTrace(r_.out_dir + "/" + std::to_string(r_.pid) + ".pstrace");
  ExpectWellFormed(t, true);
  const uint64_t n = 4 * kMiB, a = M("a"), check = M("check");
  std::vector<WantCopy> want =
      CheckedCopies({a}, n, {pt::PIN_REGISTERED}, {pt::PIN_CACHED}, check, pt::PIN_CACHED);
  // After the fork the block is still pinscope's: cached; pinning is off
  // for everything else (the read-backs: PIN_NONE).
  for (const WantCopy& w : CheckedCopies({a}, n, {pt::PIN_CACHED}, {pt::PIN_CACHED}, check,
                                         pt::PIN_CACHED, pt::PIN_NONE))
    want.push_back(w);
  ExpectCopies(t, want);
  ExpectPins(t, {{pt::REGISTER, a, n, "malloc"},
                 {pt::UNREGISTER, a, n, "fork", cudaErrorUnknown},
                 {pt::UNREGISTER, a, n, "program_register"}});
}

// (c) at free: the block CUDA would not unregister is not given back, so
// the next block of its size is elsewhere and plain pageable memory to the
// program (queries, its own register); nothing new is pinned.
TEST_F(E2EPinning, FailedUnregisterAtFreeNeverHandsTheRegisteredMemoryBack) {
  Run("fault_unregister_free", Small({{"FAKE_CUDART_FAIL_UNREGISTER", "1"}}));
  ASSERT_EQ(r_.exit_code, 0) << r_.stderr_text;
  ASSERT_EQ(r_.stderr_lines.size(), 1u) << r_.stderr_text;
  EXPECT_EQ(CountLines(r_, "pinscope: cudaHostUnregister failed (CUDA error 999)"), 1u)
      << r_.stderr_text;
  const uint64_t n = 4 * kMiB, a = M("a"), b = M("b"), check = M("check");
  EXPECT_TRUE(b + n <= a || a + n <= b) << "b overlaps the block the driver holds";
  EXPECT_EQ(M("b_attr_type"), unsigned{cudaMemoryTypeUnregistered});
  EXPECT_EQ(M("b_register_rc"), 0u);
  EXPECT_EQ(M("b_attr_type_own"), unsigned{cudaMemoryTypeHost});
  EXPECT_EQ(M("b_unregister_rc"), 0u);
  EXPECT_EQ(M("last_error"), 0u);
  EXPECT_EQ(M("registered_bytes"), n);  // a: the driver's, held by pinscope
  TraceFile t = e2e::SingleTrace(r_);
  ExpectWellFormed(t, true);
  std::vector<WantCopy> want =
      CheckedCopies({a}, n, {pt::PIN_REGISTERED}, {pt::PIN_CACHED}, check, pt::PIN_CACHED);
  for (const WantCopy& w :
       CheckedCopies({b}, n, {pt::PIN_NONE}, {pt::PIN_NONE}, check, pt::PIN_NONE, pt::PIN_NONE))
    want.push_back(w);
  ExpectCopies(t, want);
  ExpectPins(t, {{pt::REGISTER, a, n, "malloc"}, {pt::UNREGISTER, a, n, "free", cudaErrorUnknown}});
}

}  // namespace
}  // namespace e2e_pinning
