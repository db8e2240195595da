// Shared checks of e2e_pinning_test, the end-to-end tests of transparent
// pinning (PINSCOPE_PIN, docs/pinning.md): e2e_pinning_prog runs under
// LD_PRELOAD=libpinscope.so against the CUDA runtime double; each test
// asserts the exact PinEvents (op, address, size, reason, result,
// pinned_bytes), the pin outcome and memory kinds of every CopyEvent, and
// what the program observed about its own data. Uses the run-and-read
// harness of tests/e2e/copies (trace_harness.h). The tests, by scenario
// group (pin_program.h lists the program's files of the same groups):
//   decisions_test.cc   1-3: decisions, pageable semantics, budget, settings
//   lifetime_test.cc    4-8: free/realloc/munmap, fork, the program's own
//                       register calls, threads
//   recycle_test.cc     9: the recycle list (PINSCOPE_PIN_KEEP)
//   pin_ahead_test.cc   10: pin-ahead (PINSCOPE_PIN_AHEAD)
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "trace_harness.h"

namespace e2e_pinning {

using e2e::RunOptions;
using e2e::RunResult;
using e2e::TraceFile;
namespace pt = pinscope::trace;

inline constexpr uint64_t kMiB = uint64_t{1} << 20;
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

// The copies of t are exactly `want`, in order.
void ExpectCopies(const TraceFile& t, const std::vector<WantCopy>& want);

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
void ExpectPins(const TraceFile& t, const std::vector<WantPin>& want, uint64_t budget = UINT64_MAX);

// No PinEvent, and every copy ran with pinning off (PIN_NONE).
void ExpectNothingPinned(const TraceFile& t);

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
                                            uint64_t max_pinned = UINT64_MAX);

// Lines of the program's stderr that contain `needle`.
size_t CountLines(const RunResult& r, const std::string& needle);

// The traces of a run with one forked child: the parent's (complete) and
// the child's if it wrote one.
struct ForkTraces {
  TraceFile parent;
  TraceFile child;
  bool child_wrote = false;
};

ForkTraces ReadForkTraces(const RunResult& r);

class E2EPinning : public ::testing::Test {
 protected:
  // Runs a scenario; PINSCOPE_PIN=1 unless env says otherwise.
  // The cache tests (sections 1-8) run without the recycle list
  // (PINSCOPE_PIN_KEEP=0) and without pin-ahead (PINSCOPE_PIN_AHEAD=0)
  // unless env names them; sections 9 and 10 test those.
  RunResult Run(const std::string& scenario, Env env = {{"PINSCOPE_PIN", "1"}},
                std::vector<std::string> unset = {});
  // Runs a scenario that must succeed quietly; returns its checked trace.
  TraceFile Scenario(const std::string& scenario, Env env = {{"PINSCOPE_PIN", "1"}},
                     std::vector<std::string> unset = {});
  uint64_t M(const std::string& key) const { return r_.at(key); }

  e2e::TempDir dir_;
  RunResult r_;
};

}  // namespace e2e_pinning
