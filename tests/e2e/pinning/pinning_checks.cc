// Shared checks of e2e_pinning_test; see pinning_checks.h.
#include "pinning_checks.h"

#include <algorithm>

namespace e2e_pinning {
namespace {

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

}  // namespace

void ExpectCopies(const TraceFile& t, const std::vector<WantCopy>& want) {
  auto copies = e2e::Packets(t, pt::TracePacket::kCopy);
  ASSERT_EQ(copies.size(), want.size()) << t.path;
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("copy #" + std::to_string(i));
    ExpectCopy(copies[i]->copy(), want[i]);
  }
}

void ExpectPins(const TraceFile& t, const std::vector<WantPin>& want, uint64_t budget) {
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
    if (p.op() == pt::UNREGISTER && p.result() == 0) held -= p.size();  // failed: still held
    EXPECT_EQ(p.pinned_bytes(), held);
    EXPECT_LE(p.pinned_bytes(), budget);
    EXPECT_GT(pins[i]->timestamp_ns(), 0u);
  }
}

void ExpectNothingPinned(const TraceFile& t) {
  ExpectPins(t, {});
  for (const auto* p : e2e::Packets(t, pt::TracePacket::kCopy))
    EXPECT_EQ(pt::PinOutcome_Name(p->copy().pin()), "PIN_NONE");
}

PinTally ExpectEachRegistrationReleasedOnce(const TraceFile& t, uint64_t size,
                                            const std::set<std::string>& register_reasons,
                                            const std::string& unregister_reason,
                                            uint64_t max_pinned) {
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

RunResult E2EPinning::Run(const std::string& scenario, Env env, std::vector<std::string> unset) {
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

TraceFile E2EPinning::Scenario(const std::string& scenario, Env env,
                               std::vector<std::string> unset) {
  Run(scenario, std::move(env), std::move(unset));
  EXPECT_EQ(r_.exit_code, 0) << r_.stderr_text;
  EXPECT_EQ(r_.stderr_text, "");
  TraceFile t = e2e::SingleTrace(r_);
  ExpectWellFormed(t, true);
  return t;
}

}  // namespace e2e_pinning
