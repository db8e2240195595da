// pinscope's own cost of taking call stacks, from each process's Counters
// (stacks_captured, stack_capture_ns; cumulative, the last packet counts):
// exact numbers in the report model, the text report and the JSON.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "analyzer/common/format.h"
#include "analyzer/read/run_loader.h"
#include "analyzer/report/report.h"
#include "analyzer/report/report_command.h"
#include "tests/common/recorded_report.h"
#include "trace_builder.h"

namespace pinscope {
namespace {

using testing::kMs;
using testing::MakeTempDir;
using testing::TraceBuilder;

constexpr uint64_t kT0 = 1000ull * 1000 * kMs;

trace::TracePacket& AddCounters(TraceBuilder& b, uint64_t time_ns, uint64_t stacks,
                                uint64_t stack_ns) {
  trace::TracePacket& packet = b.Add(time_ns);
  trace::Counters* counters = packet.mutable_counters();
  counters->set_copies(3);
  counters->set_stacks_captured(stacks);
  counters->set_stack_capture_ns(stack_ns);
  return packet;
}

// Main (1 s): 10 stacks / 1 ms at its first flush, 1,000 / 20 ms at its last.
// A worker (500 ms): 250 / 5 ms. An exec'd program with Counters but no
// stacks (stacks off): left out.
std::string WriteRun() {
  const std::string dir = MakeTempDir("stack_capture");
  TraceBuilder main(100, "r", kT0);
  AddCounters(main, kT0 + 100 * kMs, 10, 1 * kMs);
  AddCounters(main, kT0 + 900 * kMs, 1000, 20 * kMs);
  main.Exit(kT0 + 1000 * kMs);
  TraceBuilder worker(101, "r", kT0 + 100 * kMs, trace::ORIGIN_FORK, 100);
  AddCounters(worker, kT0 + 590 * kMs, 250, 5 * kMs);
  worker.Exit(kT0 + 600 * kMs);
  TraceBuilder exec(102, "r", kT0 + 200 * kMs, trace::ORIGIN_EXEC, 100);
  AddCounters(exec, kT0 + 250 * kMs, 0, 0);
  exec.Exit(kT0 + 300 * kMs);
  main.Write(dir);
  worker.Write(dir);
  exec.Write(dir);
  return dir;
}

std::string ReportOf(const std::string& dir, bool json) {
  return test_util::ReportOutput(dir, json);
}

TEST(StackCaptureTest, ModelHasEachProcessesLastCountersAndTheSum) {
  RunListing listing;
  ASSERT_TRUE(ScanRun(WriteRun(), &listing).ok());
  ReportOptions options;
  Report report(DefaultCalibration(), options);
  ReplayEngine engine(std::move(listing));
  report.Attach(&engine);
  engine.Run();
  report.Evaluate(engine.info());
  ASSERT_EQ(report.processes().size(), 3u);
  EXPECT_EQ(report.processes()[0].pid, 100u);
  EXPECT_EQ(report.processes()[0].stacks_captured, 1000u);
  EXPECT_EQ(report.processes()[0].stack_capture_ns, 20 * kMs);
  EXPECT_EQ(report.processes()[1].pid, 101u);
  EXPECT_EQ(report.processes()[1].stacks_captured, 250u);
  EXPECT_EQ(report.processes()[1].stack_capture_ns, 5 * kMs);
  EXPECT_EQ(report.processes()[2].pid, 102u);
  EXPECT_EQ(report.processes()[2].stacks_captured, 0u);
  EXPECT_EQ(report.processes()[2].stack_capture_ns, 0u);
  EXPECT_EQ(report.process_analysis().stacks_captured(), 1250u);
  EXPECT_EQ(report.process_analysis().stack_capture_ns(), 25 * kMs);
  EXPECT_EQ(report.duration_ns(), 1000 * kMs);
}

TEST(StackCaptureTest, TextSaysTheCostAgainstWallTime) {
  const std::string text = ReportOf(WriteRun(), false);
  EXPECT_NE(
      text.find("\n  pinscope's call stacks: 1,250 captured, 25.0 ms of the job's thread time "
                "(2.5% of the run's 1.00 s\n  wall time)\n"
                "    pid 100: 1,000 captured, 20.0 ms (2.0% of its 1.00 s)\n"
                "    pid 101: 250 captured, 5.00 ms (1.0% of its 500.0 ms)\n"),
      std::string::npos)
      << text;
  EXPECT_EQ(text.find("pid 102:"), std::string::npos);
}

TEST(StackCaptureTest, JsonHasTheSumAndEachProcess) {
  const nlohmann::json j = nlohmann::json::parse(ReportOf(WriteRun(), true));
  const nlohmann::json expected = {
      {"captured", 1250},
      {"capture_ns", 25 * kMs},
      {"fraction_of_run", 0.025},
      {"by_process",
       {{{"pid", 100}, {"captured", 1000}, {"capture_ns", 20 * kMs}, {"fraction_of_life", 0.02}},
        {{"pid", 101}, {"captured", 250}, {"capture_ns", 5 * kMs}, {"fraction_of_life", 0.01}}}}};
  EXPECT_EQ(j["stack_capture"], expected);
}

TEST(StackCaptureTest, NothingWithoutStacks) {
  const std::string dir = MakeTempDir("stack_capture_none");
  TraceBuilder main(100, "r", kT0);
  AddCounters(main, kT0 + 100 * kMs, 0, 0);
  main.Exit(kT0 + 1000 * kMs);
  main.Write(dir);
  EXPECT_EQ(ReportOf(dir, false).find("call stacks:"), std::string::npos);
  EXPECT_FALSE(nlohmann::json::parse(ReportOf(dir, true)).contains("stack_capture"));
}

// Counters.hook_kinds: {kind, calls, ns}.
void AddKinds(trace::Counters* c, std::initializer_list<std::array<uint64_t, 3>> kinds) {
  for (const auto& [kind, calls, ns] : kinds) {
    trace::HookKindCost* h = c->add_hook_kinds();
    h->set_kind(static_cast<trace::HookKind>(kind));
    h->set_calls(calls);
    h->set_ns(ns);
  }
}

// A shim that times its hooks too (Counters.hook_calls, hook_ns,
// own_threads_cpu_ns): main 400 calls / 2 ms and 30 ms of its threads' CPU,
// with 100 stacks / 0.5 ms; a worker 100 calls / 0.5 ms and 4 ms of CPU.
// `kinds` (a shim since 2026-12-06): main's calls are 150 copies / 1.2 ms,
// 150 waits / 0.3 ms, 100 shared-memory events / 0.5 ms; the worker's 60
// shared-memory events / 0.3 ms and 40 DataLoader spans / 0.2 ms.
std::string WriteOwnCostRun(bool kinds = false) {
  const std::string dir = MakeTempDir("own_cost");
  TraceBuilder main(100, "r", kT0);
  trace::Counters* c = AddCounters(main, kT0 + 100 * kMs, 10, kMs / 10).mutable_counters();
  c->set_hook_calls(40);
  c->set_hook_ns(kMs / 5);
  c->set_own_threads_cpu_ns(3 * kMs);
  c = AddCounters(main, kT0 + 900 * kMs, 100, kMs / 2).mutable_counters();
  c->set_hook_calls(400);
  c->set_hook_ns(2 * kMs);
  c->set_own_threads_cpu_ns(30 * kMs);
  c->set_pointer_queries(200);
  c->set_pointer_query_ns(kMs * 4 / 5);
  if (kinds) {
    AddKinds(c, {{trace::HOOK_COPY, 150, kMs * 6 / 5},
                 {trace::HOOK_SYNC, 150, kMs * 3 / 10},
                 {trace::HOOK_SHM, 100, kMs / 2}});
  }
  main.Exit(kT0 + 1000 * kMs);
  TraceBuilder worker(101, "r", kT0 + 100 * kMs, trace::ORIGIN_FORK, 100);
  c = AddCounters(worker, kT0 + 590 * kMs, 0, 0).mutable_counters();
  c->set_hook_calls(100);
  c->set_hook_ns(kMs / 2);
  c->set_own_threads_cpu_ns(4 * kMs);
  c->set_pointer_queries(50);
  c->set_pointer_query_ns(kMs / 5);
  if (kinds) AddKinds(c, {{trace::HOOK_SHM, 60, kMs * 3 / 10}, {trace::HOOK_LOADER, 40, kMs / 5}});
  worker.Exit(kT0 + 600 * kMs);
  main.Write(dir);
  worker.Write(dir);
  return dir;
}

std::string Flat(const std::string& text) { return test_util::Unwrapped(text); }

TEST(OwnCostTest, TextSaysTheHooksStacksAndOwnThreads) {
  const std::string text = Flat(ReportOf(WriteOwnCostRun(), false));
  EXPECT_NE(text.find(" pinscope's own cost: 2.50 ms of the job's threads in 500 recording hooks "
                      "(5.0 us a call), 0.2% of the run's 1.00 s wall time; call stacks 0.500 ms "
                      "(100 captured; the copies' are part of the hooks' time); pointer queries "
                      "1.00 ms (250 driver queries classifying a copy's memory, 4.0 us each; part "
                      "of the hooks' time); pinscope's own "
                      "threads 34.0 ms of CPU (trace writing and compression, device records, GPU "
                      "samples, pin-ahead registrations). Not timed per call: the malloc family's "
                      "hooks, about 1 ns a call below PINSCOPE_TRACE_MIN ("),
            std::string::npos)
      << text;
  EXPECT_NE(
      text.find(" pid 100: hooks 2.00 ms (400 calls, 0.2% of its 1.00 s), own threads 30.0 ms "
                "of CPU pid 101: hooks 0.500 ms (100 calls, 0.1% of its 500.0 ms), own "
                "threads 4.00 ms of CPU "),
      std::string::npos)
      << text;
  // The stacks-only paragraph of older shims is not repeated.
  EXPECT_EQ(text.find("pinscope's call stacks:"), std::string::npos) << text;
}

TEST(OwnCostTest, JsonHasTheSumAndEachProcess) {
  const nlohmann::json j = nlohmann::json::parse(ReportOf(WriteOwnCostRun(), true));
  const nlohmann::json expected = {{"hook_calls", 500},
                                   {"hook_ns", 2500000},
                                   {"hook_fraction_of_run", 0.0025},
                                   {"own_threads_cpu_ns", 34 * kMs},
                                   {"stack_capture_ns", kMs / 2},
                                   {"pointer_queries", 250},
                                   {"pointer_query_ns", kMs},
                                   {"cupti_switches", 0},
                                   {"cupti_switch_ns", 0},
                                   {"hook_kinds", nlohmann::json::array()},  // an older shim
                                   {"by_process",
                                    {{{"pid", 100},
                                      {"hook_calls", 400},
                                      {"hook_ns", 2 * kMs},
                                      {"hook_fraction_of_life", 0.002},
                                      {"own_threads_cpu_ns", 30 * kMs}},
                                     {{"pid", 101},
                                      {"hook_calls", 100},
                                      {"hook_ns", kMs / 2},
                                      {"hook_fraction_of_life", 0.001},
                                      {"own_threads_cpu_ns", 4 * kMs}}}}};
  EXPECT_EQ(j["own_cost"], expected);
}

TEST(OwnCostTest, TheHooksByKindAreSummedOverTheProcessesAndNamed) {
  const std::string dir = WriteOwnCostRun(true);
  const std::string text = Flat(ReportOf(dir, false));
  EXPECT_NE(text.find("0.2% of the run's 1.00 s wall time (by kind: copies 150 at 8.0 us, waits "
                      "150 at 2.0 us, shared-memory events 160 at 5.0 us, DataLoader spans 40 "
                      "at 5.0 us); call stacks"),
            std::string::npos)
      << text;
  const nlohmann::json j = nlohmann::json::parse(ReportOf(dir, true));
  const nlohmann::json expected = {{{"kind", "copy"}, {"calls", 150}, {"ns", 1200000}},
                                   {{"kind", "sync"}, {"calls", 150}, {"ns", 300000}},
                                   {{"kind", "shm"}, {"calls", 160}, {"ns", 800000}},
                                   {{"kind", "loader"}, {"calls", 40}, {"ns", 200000}}};
  EXPECT_EQ(j["own_cost"]["hook_kinds"], expected);
  uint64_t calls = 0, ns = 0;
  for (const auto& k : j["own_cost"]["hook_kinds"]) {
    calls += k["calls"].get<uint64_t>();
    ns += k["ns"].get<uint64_t>();
  }
  EXPECT_EQ(calls, j["own_cost"]["hook_calls"].get<uint64_t>());
  EXPECT_EQ(ns, j["own_cost"]["hook_ns"].get<uint64_t>());
}

// A DataLoader loop (pinscope's Python hook: LOADER_ITER, then 300
// __next__ spans of 1 ms, one every 10 ms, from 10 ms to 3.0 s) after 5 s
// of start-up that made 1,000 hooked calls (a model's weights), and the
// shim's counters at each flush (every 500 ms): in the loop 4 hooked calls
// a step, 25 us each, 10 us of stacks and 50 us of pinscope's own threads'
// CPU a step. The run's totals say 0.2% of the run; the loop's step pays 1%.
// `with_queries`: 2 driver pointer queries a step, 5 us each.
// `with_kinds`: the start-up's calls are copies, and a step's 2 copies of
// 35 us and 2 waits of 15 us (Counters.hook_kinds).
// `with_switches`: CUPTI's start took 30 ms of the first hooked call, and a
// device-record window 150 steps into the loop took 8 ms to attach and 12
// ms to detach, all inside the hooks' time.
std::string WriteLoopRun(uint64_t flush_every_ns, bool with_queries = false,
                         bool with_switches = false, bool with_kinds = false) {
  const std::string dir = MakeTempDir("own_cost_loop");
  TraceBuilder main(100, "r", kT0);
  testing::SetHostFacts(&main.header(), 0, 0);
  constexpr uint64_t kStartup = 5000 * kMs, kStep = 10 * kMs, kSteps = 300;
  const uint64_t loop = kT0 + kStartup;
  auto counters_at = [&](uint64_t t) {
    const uint64_t steps = t <= loop ? 0 : std::min<uint64_t>((t - loop) / kStep, kSteps);
    trace::Counters* c = AddCounters(main, t, 1000 + steps, kMs + steps * 10000).mutable_counters();
    c->set_hook_calls(1000 + 4 * steps);
    c->set_hook_ns(50 * kMs + 4 * steps * 25000);
    c->set_own_threads_cpu_ns(20 * kMs + steps * 50000);
    if (with_kinds) {  // the start-up's calls copies; a step's 2 copies and 2 waits
      AddKinds(c, {{trace::HOOK_COPY, 1000 + 2 * steps, 50 * kMs + 2 * steps * 35000},
                   {trace::HOOK_SYNC, 2 * steps, 2 * steps * 15000}});
    }
    if (with_queries) {
      c->set_pointer_queries(100 + 2 * steps);
      c->set_pointer_query_ns(kMs + 2 * steps * 5000);
    }
    if (with_switches) {
      const bool window = steps >= 150;
      c->set_cupti_switches(window ? 3 : 1);
      c->set_cupti_switch_ns(window ? 50 * kMs : 30 * kMs);
      c->set_hook_ns(c->hook_ns() + c->cupti_switch_ns());
    }
  };
  for (uint64_t t = kT0 + flush_every_ns; t < loop; t += flush_every_ns) counters_at(t);
  trace::TracePacket& iter = main.Add(loop, 100);
  trace::LoaderEvent* l = iter.mutable_loader();
  l->set_kind(trace::LOADER_ITER);
  l->set_loader_id(7);
  l->set_num_workers(0);
  l->set_batch_size(32);
  l->set_dataset_length(32 * kSteps);
  for (uint64_t k = 0; k < kSteps; ++k) {
    const uint64_t t = loop + 10 * kMs + k * kStep;
    trace::TracePacket& p = main.Add(t, 100);
    trace::LoaderEvent* n = p.mutable_loader();
    n->set_kind(trace::LOADER_NEXT);
    n->set_loader_id(7);
    n->set_index(k);
    n->set_end_ns(t + kMs);
    n->mutable_usage_begin()->set_cpu_ns(k * kMs);
    n->mutable_usage_end()->set_cpu_ns((k + 1) * kMs);
  }
  for (uint64_t t = loop; t <= loop + 3500 * kMs; t += flush_every_ns) counters_at(t);
  main.SortByTime();
  main.Exit(loop + 3600 * kMs);
  main.Write(dir);
  return dir;
}

TEST(OwnCostTest, TheLoopsStepSaysWhatTheHooksCostIt) {
  const std::string dir = WriteLoopRun(500 * kMs);
  const std::string text = Flat(ReportOf(dir, false));
  // The run's figure: 80 ms of hooks (1,200 in the loop) in an 8.6 s run.
  EXPECT_NE(text.find("pinscope's own cost: 80.0 ms of the job's threads in 2,200 recording "
                      "hooks (36.4 us a call), 0.9% of the run's 8.60 s wall time"),
            std::string::npos)
      << text;
  const size_t at = text.find("In the steady loop (");
  ASSERT_NE(at, std::string::npos) << text;
  const std::string line = text.substr(at, text.find('.', text.find("(on other cores")) - at);
  EXPECT_NE(line.find("steps of 10.0 ms): the hooks took 100.0 us of each step (1.0% of it, 4.0 "
                      "calls a step), call stacks 10.0 us a step (the copies' inside the hooks' "
                      "time), pinscope's own threads 50.0 us of CPU a step (on other cores)"),
            std::string::npos)
      << line;
  // ... and that the hooks' own time is a lower bound of their cost.
  EXPECT_NE(text.find("(on other cores). The hooks' own time is less than what they cost the "
                      "loop"),
            std::string::npos)
      << text;
  const nlohmann::json j = nlohmann::json::parse(ReportOf(dir, true));
  const nlohmann::json& loop = j["own_cost"]["loop"];
  ASSERT_TRUE(loop.is_object()) << j["own_cost"].dump();
  const double span = loop["span_ns"].get<double>();
  EXPECT_GE(span, 2000.0 * kMs);  // two flushes or more inside the steady window
  EXPECT_EQ(static_cast<uint64_t>(span) % (500 * kMs), 0u);
  EXPECT_DOUBLE_EQ(loop["step_ns"].get<double>(), 10.0 * kMs);
  EXPECT_NEAR(loop["hook_ns_per_step"].get<double>(), 100000.0, 1e-6);
  EXPECT_DOUBLE_EQ(loop["hook_fraction_of_step"].get<double>(), 0.01);
  EXPECT_EQ(loop["hook_calls"].get<uint64_t>() * 25000, loop["hook_ns"].get<uint64_t>());
  EXPECT_EQ(loop["hook_calls"].get<uint64_t>(), static_cast<uint64_t>(span / kMs * 0.4));
}

TEST(OwnCostTest, TheLoopsStepSplitsItsHooksByKind) {
  const nlohmann::json j =
      nlohmann::json::parse(ReportOf(WriteLoopRun(500 * kMs, false, false, true), true));
  const nlohmann::json& kinds = j["own_cost"]["loop"]["hook_kinds"];
  ASSERT_EQ(kinds.size(), 2u) << kinds.dump();
  EXPECT_EQ(kinds[0]["kind"], "copy");
  EXPECT_NEAR(kinds[0]["ns_per_step"].get<double>(), 70000.0, 1e-6);
  EXPECT_EQ(kinds[1]["kind"], "sync");
  EXPECT_NEAR(kinds[1]["ns_per_step"].get<double>(), 30000.0, 1e-6);
  EXPECT_EQ(kinds[0]["calls"], kinds[1]["calls"]);
  EXPECT_EQ(kinds[0]["calls"].get<uint64_t>() + kinds[1]["calls"].get<uint64_t>(),
            j["own_cost"]["loop"]["hook_calls"].get<uint64_t>());
  // The whole run's: the start-up's 1,000 copies (50 ms) and the loop's 600 and 600.
  const std::string text = Flat(ReportOf(WriteLoopRun(500 * kMs, false, false, true), false));
  EXPECT_NE(text.find("(by kind: copies 1,600 at 44.4 us, waits 600 at 15.0 us)"),
            std::string::npos)
      << text;
}

TEST(OwnCostTest, TheLoopsStepSaysWhatThePointerQueriesCostIt) {
  const std::string dir = WriteLoopRun(500 * kMs, true);
  const std::string text = Flat(ReportOf(dir, false));
  EXPECT_NE(text.find("; pointer queries 4.00 ms (700 driver queries classifying a copy's "
                      "memory, 5.7 us each; part of the hooks' time)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("calls a step), call stacks 10.0 us and pointer queries 10.0 us a step "
                      "(2.0 queries; both inside the hooks' time), pinscope's own threads 50.0 "
                      "us of CPU a step"),
            std::string::npos)
      << text;
  const nlohmann::json j = nlohmann::json::parse(ReportOf(dir, true));
  EXPECT_EQ(j["own_cost"]["pointer_queries"].get<uint64_t>(), 700u);
  const nlohmann::json& loop = j["own_cost"]["loop"];
  EXPECT_EQ(loop["pointer_queries"].get<uint64_t>() * 5000,
            loop["pointer_query_ns"].get<uint64_t>());
  EXPECT_EQ(loop["pointer_queries"].get<uint64_t>() * 2, loop["hook_calls"].get<uint64_t>());
}

// A window's switches fall in the loop: the run's line and the loop's say
// what they cost, inside the hooks' time.
TEST(OwnCostTest, TheWindowsSwitchesAreStatedApart) {
  const std::string dir = WriteLoopRun(500 * kMs, false, true);
  const std::string text = Flat(ReportOf(dir, false));
  EXPECT_NE(text.find("; CUPTI switched on or off on the job's threads 3 times, 50.0 ms (its "
                      "start at the first CUDA call, and each device-record window's start and "
                      "end; part of the hooks' time); pinscope's own threads"),
            std::string::npos)
      << text;
  const nlohmann::json j = nlohmann::json::parse(ReportOf(dir, true));
  EXPECT_EQ(j["own_cost"]["cupti_switches"].get<uint64_t>(), 3u);
  EXPECT_EQ(j["own_cost"]["cupti_switch_ns"].get<uint64_t>(), 50 * kMs);
  const nlohmann::json& loop = j["own_cost"]["loop"];
  ASSERT_TRUE(loop.is_object()) << j["own_cost"].dump();
  // The steady span (two seconds or more of a 3 s loop) holds the window.
  EXPECT_EQ(loop["cupti_switches"].get<uint64_t>(), 2u);
  EXPECT_EQ(loop["cupti_switch_ns"].get<uint64_t>(), 20 * kMs);
  EXPECT_EQ(loop["hook_ns"].get<uint64_t>(), loop["hook_calls"].get<uint64_t>() * 25000 + 20 * kMs);
  const uint64_t steps = loop["span_ns"].get<uint64_t>() / (10 * kMs);
  EXPECT_NE(text.find(StringPrintf("; of the hooks' time, CUPTI switched on or off 2 times, 20.0 "
                                   "ms (%.1f us a step over this span; once a device-record "
                                   "window), pinscope's own threads",
                                   20.0 * kMs / steps / 1e3)),
            std::string::npos)
      << text;
}

TEST(OwnCostTest, NoLoopLineWithoutTwoFlushesInTheSteadyWindow) {
  // Flushes 4 s apart: at most one falls inside the loop's 3 s.
  const std::string dir = WriteLoopRun(4000 * kMs);
  EXPECT_EQ(ReportOf(dir, false).find("In the steady loop"), std::string::npos);
  const nlohmann::json j = nlohmann::json::parse(ReportOf(dir, true));
  ASSERT_TRUE(j.contains("own_cost"));
  EXPECT_FALSE(j["own_cost"].contains("loop"));
}

TEST(OwnCostTest, OlderShimsGetTheStacksParagraphAlone) {
  const nlohmann::json j = nlohmann::json::parse(ReportOf(WriteRun(), true));
  EXPECT_FALSE(j.contains("own_cost"));
  EXPECT_EQ(ReportOf(WriteRun(), false).find("pinscope's own cost"), std::string::npos);
}

}  // namespace
}  // namespace pinscope
