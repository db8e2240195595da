// Golden tests: the checked-in synthetic runs (tests/data/runs, written by
// make_golden) must still match their generator byte for byte, and their
// text and JSON reports must match tests/data/expected. To accept a change
// in the report: PINSCOPE_UPDATE_GOLDEN=1 ctest -R analyzer.Golden, then
// review the diff of tests/data/expected.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "analyzer/report/report_command.h"
#include "golden_runs.h"
#include "trace_builder.h"

namespace pinscope {
namespace {

namespace fs = std::filesystem;

const std::string kDataDir = PINSCOPE_TEST_DATA_DIR;

bool Updating() {
  const char* value = std::getenv("PINSCOPE_UPDATE_GOLDEN");
  return value != nullptr && std::string(value) == "1";
}

// Paths in the report are made relative to the data folder, so the expected
// output does not depend on where the checkout lives.
std::string Portable(std::string text) {
  const std::string prefix = fs::weakly_canonical(kDataDir).string() + "/";
  for (size_t at = text.find(prefix); at != std::string::npos; at = text.find(prefix, at)) {
    text.replace(at, prefix.size(), "tests/data/");
  }
  return text;
}

void Compare(const std::string& expected_path, const std::string& actual) {
  if (Updating()) {
    fs::create_directories(fs::path(expected_path).parent_path());
    testing::WriteFile(expected_path, actual);
    GTEST_SKIP() << "updated " << expected_path;
  }
  ASSERT_TRUE(fs::exists(expected_path))
      << expected_path << " is missing; run with PINSCOPE_UPDATE_GOLDEN=1";
  EXPECT_EQ(testing::ReadFile(expected_path), actual) << "report differs from " << expected_path;
}

class GoldenTest : public ::testing::TestWithParam<testing::GoldenRun> {};

TEST_P(GoldenTest, CheckedInRunMatchesItsGenerator) {
  const testing::GoldenRun& run = GetParam();
  const std::string fresh = testing::MakeTempDir("golden_" + run.name);
  run.write(fresh);
  const fs::path checked_in = fs::path(kDataDir) / "runs" / run.name;
  ASSERT_TRUE(fs::is_directory(checked_in)) << checked_in << ": run pinscope_make_golden";
  size_t files = 0;
  for (const auto& entry : fs::directory_iterator(fresh)) {
    ++files;
    const fs::path other = checked_in / entry.path().filename();
    EXPECT_EQ(testing::ReadFile(entry.path().string()), testing::ReadFile(other.string()))
        << other << " differs from what make_golden writes now";
  }
  EXPECT_EQ(files, static_cast<size_t>(std::distance(fs::directory_iterator(checked_in),
                                                     fs::directory_iterator())));
}

TEST_P(GoldenTest, TextReportMatches) {
  const testing::GoldenRun& run = GetParam();
  ReportOptions options;
  options.run_dir = fs::weakly_canonical(fs::path(kDataDir) / "runs" / run.name).string();
  options.color = ColorMode::kNever;
  std::ostringstream out, err;
  EXPECT_EQ(RunReport(options, out, err), 0) << err.str();
  Compare(kDataDir + "/expected/" + run.name + ".txt", Portable(out.str()));
}

TEST_P(GoldenTest, JsonReportMatches) {
  const testing::GoldenRun& run = GetParam();
  ReportOptions options;
  options.run_dir = fs::weakly_canonical(fs::path(kDataDir) / "runs" / run.name).string();
  options.json = true;
  std::ostringstream out, err;
  EXPECT_EQ(RunReport(options, out, err), 0) << err.str();
  Compare(kDataDir + "/expected/" + run.name + ".json", Portable(out.str()));
}

INSTANTIATE_TEST_SUITE_P(Runs, GoldenTest, ::testing::ValuesIn(testing::GoldenRuns()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace pinscope
