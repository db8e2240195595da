// e2e_pinning_test, section 10 (pin_ahead_scenarios.cc): pin-ahead
// (PINSCOPE_PIN_AHEAD) - new shm batches of a copied size registered on
// pinscope's own thread as they are mapped. See pinning_checks.h.
#include <map>
#include <string>
#include <vector>

#include "pinning_checks.h"

namespace e2e_pinning {
namespace {

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
// thread forks and each registration takes 2 ms (pin_ahead_scenarios.cc,
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
}  // namespace e2e_pinning
