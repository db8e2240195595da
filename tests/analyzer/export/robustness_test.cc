// Damaged runs through the export and the diff (the report's own handling is
// in tests/analyzer/pipeline/run_loader_test.cc): an empty file, a duplicated file
// under another name, a newer format version and a file of another run sit
// beside a good root and worker. Both commands use the good files, name
// every bad one, and exit 1.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "analyzer/diff/diff_command.h"
#include "analyzer/export/export_command.h"
#include "perfetto_dump.h"
#include "scenarios.h"
#include "trace_builder.h"

namespace pinscope {
namespace {

using testing::kMs;
using testing::kScenarioT0;
using testing::MakeTempDir;
using testing::TraceBuilder;
using testing::WriteFile;

constexpr uint64_t kT0 = kScenarioT0;

std::string WriteDamagedRun(const std::string& name) {
  const std::string dir = MakeTempDir(name);
  TraceBuilder main(100, "run-a", kT0);
  main.Copy(kT0 + kMs, kMs, trace::H2D, trace::PAGEABLE, 1 << 20, 0);
  main.Copy(kT0 + 3 * kMs, kMs, trace::H2D, trace::PAGEABLE, 1 << 20, 0);
  main.Exit(kT0 + 10 * kMs);
  main.Write(dir);
  main.Write(dir, "100.1.pstrace");  // the same content under a second name
  TraceBuilder worker(101, "run-a", kT0 + 1, trace::ORIGIN_FORK, 100);
  worker.Copy(kT0 + 2 * kMs, kMs, trace::H2D, trace::PAGEABLE, 1 << 20, 0);
  worker.Write(dir);
  WriteFile(dir + "/102.pstrace", "");
  TraceBuilder newer(103, "run-a", kT0 + 2, trace::ORIGIN_FORK, 100);
  newer.header().set_format_version(2);
  newer.Write(dir);
  TraceBuilder other(900, "run-b", kT0 + 3);
  other.Copy(kT0 + 4 * kMs, kMs, trace::H2D, trace::PAGEABLE, 1 << 20, 0);
  other.Write(dir);
  return dir;
}

TEST(RobustnessTest, ExportKeepsTheGoodFilesAndNamesTheBadOnes) {
  const std::string dir = WriteDamagedRun("robust_export");
  ExportOptions options;
  options.run_dir = dir;
  options.perfetto_path = dir + ".pftrace";
  std::ostringstream out, err;
  EXPECT_EQ(RunExport(options, out, err), 1);
  const std::string e = err.str();
  EXPECT_NE(e.find("warning: file " + dir + "/102.pstrace: empty (0 bytes)"), std::string::npos)
      << e;
  EXPECT_NE(e.find("error: file " + dir + "/100.1.pstrace: duplicates " + dir + "/100.pstrace"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("error: file " + dir +
                   "/103.pstrace: written by a newer pinscope: format 2, this reader supports 1"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("error: file " + dir + "/900.pstrace: belongs to run 'run-b'"),
            std::string::npos)
      << e;
  const testing::PerfettoDump dump = testing::DumpPerfetto(testing::ReadFile(dir + ".pftrace"));
  EXPECT_TRUE(dump.errors.empty()) << ::testing::PrintToString(dump.errors);
  EXPECT_EQ(dump.slices, 3u);  // 2 copies of pid 100 (once), 1 of pid 101
  EXPECT_NE(dump.text.find("process pid=100 "), std::string::npos);
  EXPECT_NE(dump.text.find("process pid=101 "), std::string::npos);
  EXPECT_EQ(dump.text.find("process pid=900 "), std::string::npos);
  EXPECT_EQ(dump.text.find("process pid=103 "), std::string::npos);
}

TEST(RobustnessTest, DiffReportsTheProblemsOfBothRuns) {
  const std::string damaged = WriteDamagedRun("robust_diff");
  const std::string clean = MakeTempDir("robust_diff_clean");
  testing::WriteLoopRun(clean, "run-c", true, 5, 10 * kMs);
  DiffOptions options;
  options.run_a = clean;
  options.run_b = damaged;
  options.json = true;
  std::ostringstream out, err;
  EXPECT_EQ(RunDiff(options, out, err), 1);
  const nlohmann::json j = nlohmann::json::parse(out.str());
  ASSERT_EQ(j["problems"].size(), 4u);
  for (const auto& problem : j["problems"]) EXPECT_EQ(problem["run"], "b");
  EXPECT_EQ(j["b"]["processes"], 2);
  // Every problem also goes to stderr (docs/cli.md), warnings too.
  EXPECT_NE(err.str().find("pinscope diff: warning: file " + damaged + "/102.pstrace: empty"),
            std::string::npos)
      << err.str();
  EXPECT_NE(err.str().find("pinscope diff: error: file " + damaged + "/103.pstrace"),
            std::string::npos)
      << err.str();
}

TEST(RobustnessTest, EveryFileBadIsExitTwo) {
  const std::string dir = MakeTempDir("robust_all_bad");
  WriteFile(dir + "/1.pstrace", "");
  WriteFile(dir + "/2.pstrace", std::string("\x0A\x02\x08", 3));
  ExportOptions options;
  options.run_dir = dir;
  options.perfetto_path = dir + ".pftrace";
  std::ostringstream out, err;
  EXPECT_EQ(RunExport(options, out, err), 2);
  EXPECT_NE(err.str().find("no readable process file in " + dir), std::string::npos);
  DiffOptions diff;
  diff.run_a = dir;
  diff.run_b = dir;
  std::ostringstream err2;
  EXPECT_EQ(RunDiff(diff, out, err2), 2);
  EXPECT_EQ(out.str(), "");
}

}  // namespace
}  // namespace pinscope
