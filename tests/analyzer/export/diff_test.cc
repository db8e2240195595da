// `pinscope diff`: the same loop before (pageable batches) and after (pinned)
// must show the verdict moving, the staging time gone, the copy rows side by
// side and the main loop's rate doubling; text fits 100 columns; JSON keeps
// its documented schema. Checked-in H200 runs of different length and of
// different commands: figures per batch and per second, and the work flagged.
#include "analyzer/diff/diff.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "analyzer/diff/diff_command.h"
#include "analyzer/report/report_command.h"
#include "scenarios.h"
#include "trace_builder.h"

namespace pinscope {
namespace {

using testing::kBatchBytes;
using testing::kMs;
using testing::kScenarioT0;
using testing::MakeTempDir;
using testing::TraceBuilder;

struct Pair {
  std::string a;
  std::string b;
};

Pair WriteBeforeAfter(const std::string& name) {
  Pair pair{MakeTempDir(name + "_a"), MakeTempDir(name + "_b")};
  testing::WriteLoopRun(pair.a, "run-before", /*pinned=*/false, 50, 20 * kMs);
  testing::WriteLoopRun(pair.b, "run-after", /*pinned=*/true, 50, 10 * kMs);
  return pair;
}

// The verdict `pinscope report --json` gives a run: the diff must say the
// same (the rules themselves are tested in tests/analyzer/pipeline).
nlohmann::json ReportVerdict(const std::string& run_dir) {
  ReportOptions options;
  options.run_dir = run_dir;
  options.json = true;
  std::ostringstream out, err;
  RunReport(options, out, err);
  return nlohmann::json::parse(out.str())["verdict"];
}

int Diff(const Pair& runs, bool json, std::string* out_text, std::string* err_text = nullptr) {
  DiffOptions options;
  options.run_a = runs.a;
  options.run_b = runs.b;
  options.json = json;
  options.color = ColorMode::kNever;
  std::ostringstream out, err;
  const int code = RunDiff(options, out, err);
  *out_text = out.str();
  if (err_text != nullptr) *err_text = err.str();
  return code;
}

TEST(DiffTest, TextShowsTheVerdictMovingAndTheLoopSpeedingUp) {
  const Pair runs = WriteBeforeAfter("diff_text");
  std::string text, err;
  ASSERT_EQ(Diff(runs, false, &text, &err), 0) << err;
  std::string json_text;
  ASSERT_EQ(Diff(runs, true, &json_text), 0);
  const std::string title_b = nlohmann::json::parse(json_text)["b"]["verdict"]["title"];
  EXPECT_NE(text.find("\nverdict: pageable staging -> " + title_b + "  (moved)\n"),
            std::string::npos)
      << text;
  // Main loop: 50 copies 20 ms apart (A) and 10 ms apart (B).
  EXPECT_NE(text.find("  A       50 H2D copies of 73.5 MiB by pid 100's main thread  980.0 ms"
                      "       50.00\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  B       50 H2D copies of 73.5 MiB by pid 100's main thread  490.0 ms"
                      "      100.00\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  change                                                                   "
                      "+100.0%\n"),
            std::string::npos)
      << text;
  // The pageable H2D row went to zero, the pinned one appeared.
  EXPECT_NE(
      text.find("  H2D pageable  A          50   3.59 GiB      642.2 ms    6.0      569.4 ms\n"
                "                B           0        0 B          0 ms      -          0 ms\n"
                "                change    -50  -3.59 GiB     -642.2 ms      -     -569.4 ms\n"),
      std::string::npos)
      << text;
  EXPECT_NE(
      text.find("                B          50   3.59 GiB       75.0 ms   51.4          0 ms\n"),
      std::string::npos)
      << text;
  // Both verdicts in full, wrapped at 100 columns.
  EXPECT_NE(text.find("  A  pageable staging: 64.1% of pid 100 main thread's time is spent in 100 "
                      "H2D/D2H copies from\n     pageable memory at 6.0 GB/s"),
            std::string::npos)
      << text;
  for (size_t start = 0; start < text.size();) {
    const size_t end = text.find('\n', start);
    const std::string line = text.substr(start, end - start);
    EXPECT_LE(line.size(), 100u) << line;
    start = end == std::string::npos ? text.size() : end + 1;
  }
  EXPECT_EQ(text.find("\x1b["), std::string::npos);  // no colour when off
}

TEST(DiffTest, JsonSchemaVersionOne) {
  const Pair runs = WriteBeforeAfter("diff_json");
  std::string text;
  ASSERT_EQ(Diff(runs, true, &text), 0);
  const nlohmann::json j = nlohmann::json::parse(text);
  EXPECT_EQ(j["schema_version"], 1);
  // A is the example; B's verdict is whatever the report says (no
  // longer pageable staging: the batches are pinned).
  EXPECT_EQ(j["a"]["verdict"]["id"], "pageable_staging");
  EXPECT_EQ(j["a"]["verdict"]["title"], "pageable staging");
  EXPECT_EQ(j["a"]["verdict"]["text"], ReportVerdict(runs.a)["text"]);
  EXPECT_EQ(j["b"]["verdict"]["id"], ReportVerdict(runs.b)["id"]);
  EXPECT_EQ(j["b"]["verdict"]["text"], ReportVerdict(runs.b)["text"]);
  EXPECT_NE(j["b"]["verdict"]["id"], "pageable_staging");
  EXPECT_EQ(j["verdict"]["moved"], true);
  EXPECT_EQ(j["verdict"]["text"],
            "verdict: pageable staging -> " + std::string(j["b"]["verdict"]["title"]));
  EXPECT_EQ(j["main_loop"]["a"]["copy_bytes"], kBatchBytes);
  EXPECT_EQ(j["main_loop"]["a"]["copies"], 50);
  EXPECT_EQ(j["main_loop"]["a"]["span_ns"], 49 * 20 * kMs);
  EXPECT_EQ(j["main_loop"]["a"]["per_second"], 50.0);
  EXPECT_EQ(j["main_loop"]["b"]["per_second"], 100.0);
  EXPECT_EQ(j["main_loop"]["change_fraction"], 1.0);
  // pageable_staging: A's saving, B's (tiny, D2H only), the delta.
  nlohmann::json staging;
  for (const auto& c : j["classes"]) {
    if (c["id"] == "pageable_staging") staging = c;
  }
  ASSERT_FALSE(staging.is_null()) << j["classes"].dump(2);
  const int64_t saving_a = staging["a"]["saving_ns"];
  const int64_t saving_b = staging["b"].is_null() ? 0 : int64_t(staging["b"]["saving_ns"]);
  EXPECT_EQ(staging["delta_saving_ns"], saving_b - saving_a);
  EXPECT_GT(saving_a, 500 * int64_t(kMs));
  EXPECT_LT(saving_b, int64_t(kMs));
  // Copy rows by direction then memory kind: H2D pageable, H2D pinned, D2H pageable.
  ASSERT_EQ(j["copies"].size(), 3u);
  const nlohmann::json& d2h = j["copies"][2];
  EXPECT_EQ(d2h["direction"], "D2H");
  EXPECT_EQ(d2h["delta"]["count"], 0);
  const nlohmann::json& pageable = j["copies"][0];
  EXPECT_EQ(pageable["direction"], "H2D");
  EXPECT_EQ(pageable["memory"], "pageable");
  EXPECT_EQ(pageable["a"]["count"], 50);
  EXPECT_EQ(pageable["a"]["bytes"], 50 * kBatchBytes);
  EXPECT_EQ(pageable["a"]["blocked_ns"], 50 * 12845000ull);
  EXPECT_EQ(pageable["a"]["achieved_gbps"], 6.0);
  EXPECT_EQ(pageable["b"]["count"], 0);
  EXPECT_EQ(pageable["delta"]["count"], -50);
  EXPECT_EQ(pageable["delta"]["blocked_ns"], -int64_t(50 * 12845000ull));
  EXPECT_TRUE(pageable["delta"]["achieved_gbps"].is_null());  // nothing to compare in B
  const nlohmann::json& pinned = j["copies"][1];
  EXPECT_EQ(pinned["memory"], "pinned");
  EXPECT_EQ(pinned["b"]["count"], 50);
  EXPECT_EQ(pinned["b"]["achieved_gbps"], 51.38);
  EXPECT_TRUE(j["problems"].empty());
}

TEST(DiffTest, SameRunTwiceChangesNothing) {
  const std::string dir = MakeTempDir("diff_same");
  testing::WriteLoopRun(dir, "run-x", false, 10, 20 * kMs);
  std::string text;
  ASSERT_EQ(Diff({dir, dir}, true, &text), 0);
  const nlohmann::json j = nlohmann::json::parse(text);
  EXPECT_EQ(j["verdict"]["moved"], false);
  EXPECT_EQ(j["main_loop"]["change_fraction"], 0.0);
  for (const auto& row : j["copies"]) {
    EXPECT_EQ(row["delta"]["count"], 0);
    EXPECT_EQ(row["delta"]["blocked_ns"], 0);
  }
  for (const auto& c : j["classes"]) EXPECT_EQ(c["delta_saving_ns"], 0);
}

TEST(DiffTest, MainLoopNeedsARecurringSizeOnTheRootsMainThread) {
  const std::string dir = MakeTempDir("diff_no_loop");
  TraceBuilder main(100, "run-x", kScenarioT0);
  main.Copy(kScenarioT0 + kMs, kMs, trace::H2D, trace::PAGEABLE, 1 << 20, 0);
  main.Copy(kScenarioT0 + 2 * kMs, kMs, trace::H2D, trace::PAGEABLE, 2 << 20, 0);
  // Recurring, but on another thread: not the main loop.
  main.Copy(kScenarioT0 + 3 * kMs, kMs, trace::H2D, trace::PAGEABLE, 4 << 20, 0, 102);
  main.Copy(kScenarioT0 + 4 * kMs, kMs, trace::H2D, trace::PAGEABLE, 4 << 20, 0, 102);
  main.Write(dir);
  std::string text;
  ASSERT_EQ(Diff({dir, dir}, true, &text), 0);
  const nlohmann::json j = nlohmann::json::parse(text);
  EXPECT_TRUE(j["main_loop"]["a"].is_null());
  EXPECT_TRUE(j["main_loop"]["change_fraction"].is_null());
  ASSERT_EQ(Diff({dir, dir}, false, &text), 0);
  EXPECT_NE(text.find("no recurring H2D copy on the root process's main thread"), std::string::npos)
      << text;
}

const std::string kH200 = std::string(PINSCOPE_TEST_DATA_DIR) + "/h200/";

// Two H200 runs of seedbench's num_workers=0 loop, the second over twice the
// samples (10 and 20 batches of 73.5 MiB): the totals double, the figures
// per batch must not, and the diff must say the work differs.
TEST(DiffTest, RunsOfDifferentLengthCompareByBatchAndFlagTheWork) {
  const Pair runs{kH200 + "seed_0f", kH200 + "pin_reuse0"};
  std::string text, err;
  ASSERT_EQ(Diff(runs, false, &text, &err), 0) << err;
  EXPECT_NE(text.find("\nWork (what each run did)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("note: The runs did different amounts of work: B made 2.00x A's batches "
                      "(20 vs 10) and copied 2.00x"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("Compare the figures per batch and per second, not the"), std::string::npos)
      << text;
  // Per batch: the same 2 copies of 73.5 MiB each; per second: twice as many.
  EXPECT_NE(text.find("\nPer unit of work (per batch, per second of the run)\n"),
            std::string::npos);
  EXPECT_NE(text.find("  copies                      2.00      2.00   +0.0%"), std::string::npos)
      << text;
  EXPECT_NE(text.find("  bytes copied            73.5 MiB  73.5 MiB   +0.0%"), std::string::npos)
      << text;
  for (size_t start = 0; start < text.size();) {
    const size_t end = text.find('\n', start);
    const std::string line = text.substr(start, end - start);
    EXPECT_LE(line.size(), 100u) << line;
    start = end == std::string::npos ? text.size() : end + 1;
  }

  std::string json_text;
  ASSERT_EQ(Diff(runs, true, &json_text), 0);
  const nlohmann::json work = nlohmann::json::parse(json_text)["work"];
  EXPECT_EQ(work["a"]["batches"], 10);
  EXPECT_EQ(work["b"]["batches"], 20);
  EXPECT_EQ(work["a"]["bytes"], 770713600);
  EXPECT_EQ(work["b"]["bytes"], 2 * 770713600ull);
  EXPECT_EQ(work["batches_ratio"], 2.0);
  EXPECT_EQ(work["bytes_ratio"], 2.0);
  EXPECT_EQ(work["same_work"], false);
  // The same program and script with other arguments (--samples, --json).
  EXPECT_EQ(work["same_command"], false);
  EXPECT_EQ(work["same_program"], true);
  EXPECT_EQ(work["per_batch"]["bytes"]["a"], 77071360.0);
  EXPECT_EQ(work["per_batch"]["bytes"]["b"], 77071360.0);
  EXPECT_EQ(work["per_batch"]["bytes"]["change_fraction"], 0.0);
  EXPECT_EQ(work["per_batch"]["copies"]["a"], 2.0);
  // Per second: bytes over each run's own duration.
  const double seconds_a = double(work["a"]["duration_ns"]) / 1e9;
  EXPECT_DOUBLE_EQ(double(work["per_second"]["bytes"]["a"]), 770713600 / seconds_a);
  EXPECT_GT(double(work["per_second"]["bytes"]["b"]),
            1.9 * double(work["per_second"]["bytes"]["a"]));
}

TEST(DiffTest, DifferentCommandsAreSaid) {
  const Pair runs{kH200 + "seed_0f", kH200 + "loader_pin"};
  std::string text, err;
  ASSERT_EQ(Diff(runs, false, &text, &err), 0) << err;
  EXPECT_NE(text.find("note: The runs ran different commands (another program or script): they "
                      "may not be the same job.\n"
                      "    A  python3 tools/bench/seedbench.py --samples 1280 --configs 0f\n"
                      "    B  python3 tests/gpu/pinning_check.py loader --json "
                      "/tmp/psw/loader_pin.json\n"),
            std::string::npos)
      << text;
  std::string json_text;
  ASSERT_EQ(Diff(runs, true, &json_text), 0);
  const nlohmann::json work = nlohmann::json::parse(json_text)["work"];
  EXPECT_EQ(work["same_command"], false);
  EXPECT_EQ(work["same_program"], false);
  EXPECT_EQ(work["b"]["command"][1], "tests/gpu/pinning_check.py");
}

TEST(DiffTest, SameCommandAndWorkHasNoNotes) {
  const std::string run = kH200 + "seed_0f";
  std::string text, err;
  ASSERT_EQ(Diff({run, run}, false, &text, &err), 0) << err;
  EXPECT_EQ(text.find("note: The runs"), std::string::npos) << text;
  std::string json_text;
  ASSERT_EQ(Diff({run, run}, true, &json_text), 0);
  const nlohmann::json work = nlohmann::json::parse(json_text)["work"];
  EXPECT_EQ(work["same_command"], true);
  EXPECT_EQ(work["same_work"], true);
  EXPECT_TRUE(work["notes"].empty());
}

TEST(DiffTest, MissingRunIsUsageError) {
  const std::string dir = MakeTempDir("diff_missing");
  testing::WriteLoopRun(dir, "run-x", false, 3, 20 * kMs);
  std::string text, err;
  EXPECT_EQ(Diff({dir, "/nonexistent/run"}, false, &text, &err), 2);
  EXPECT_EQ(text, "");
  EXPECT_EQ(err, "pinscope diff: run folder /nonexistent/run does not exist or is not a folder\n");
}

}  // namespace
}  // namespace pinscope
