// pinscope's own cost of taking call stacks, from each process's Counters
// (stacks_captured, stack_capture_ns; cumulative, the last packet counts):
// exact numbers in the report model, the text report and the JSON.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "analyzer/read/run_loader.h"
#include "analyzer/report/report.h"
#include "analyzer/report/report_command.h"
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
  ReportOptions options;
  options.run_dir = dir;
  options.json = json;
  options.color = ColorMode::kNever;
  std::ostringstream out, err;
  EXPECT_EQ(RunReport(options, out, err), 0) << err.str();
  return out.str();
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

}  // namespace
}  // namespace pinscope
