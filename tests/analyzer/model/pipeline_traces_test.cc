// The pipeline model on traces recorded on the H200 (tests/data/h200/pipeline,
// tools/gpu_pipeline.sh): every run's verdict is its planted class, the top
// recommendation is the one recorded, and the speedup predicted for the
// change that was applied on the GPU stays within 2% of the recorded
// prediction. tests/data/expected/pipeline_verdicts.json holds the answers
// and the speedups measured when each change was applied (docs/validation.md).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "analyzer/report/report_command.h"

namespace pinscope {
namespace {

const std::string kData = PINSCOPE_TEST_DATA_DIR;

nlohmann::json Report(const std::string& dir) {
  ReportOptions options;
  options.run_dir = dir;
  options.json = true;
  options.color = ColorMode::kNever;
  options.calibration_path = dir + "/calibration.json";
  std::ostringstream out, err;
  EXPECT_EQ(RunReport(options, out, err), 0) << err.str();
  return nlohmann::json::parse(out.str());
}

nlohmann::json Expected() {
  std::ifstream in(kData + "/expected/pipeline_verdicts.json");
  return nlohmann::json::parse(in);
}

class PipelineTraces : public ::testing::TestWithParam<std::string> {};

TEST_P(PipelineTraces, VerdictTopChangeAndPrediction) {
  const nlohmann::json expected = Expected();
  nlohmann::json want;
  for (const auto& run : expected["runs"])
    if (run["run"] == GetParam()) want = run;
  ASSERT_FALSE(want.is_null()) << GetParam();
  const nlohmann::json j = Report(kData + "/h200/pipeline/" + GetParam());
  EXPECT_EQ(j["verdict"]["id"], want["planted"]) << j["verdict"]["text"];
  EXPECT_EQ(j["verdict"]["id"], want["verdict"]);
  const nlohmann::json& p = j["pipeline"];
  if (want["top_change"].is_null()) {
    EXPECT_TRUE(!p.contains("predictions") || p["predictions"].empty());
  } else {
    ASSERT_FALSE(p["predictions"].empty());
    EXPECT_EQ(p["predictions"][0]["change"], want["top_change"]);
  }
  if (!want.contains("applied")) return;
  double predicted = 0;
  for (const auto& pred : p["all_predictions"])
    if (pred["change"] == want["applied"]) predicted = pred["speedup"];
  ASSERT_GT(predicted, 0) << "no prediction for " << want["applied"];
  const double recorded = want["predicted_speedup"];
  EXPECT_NEAR(predicted, recorded, 0.02 * recorded);
}

INSTANTIATE_TEST_SUITE_P(H200, PipelineTraces,
                         ::testing::Values("gpu_bound", "host_bound", "input_starvation",
                                           "main_process", "pin_thread", "pageable_staging",
                                           "fresh_faults", "sync_copies", "pinned_overuse",
                                           "shm_small", "imagenet", "hf",
                                           "heldout_pin_thread_b128"));

// The guard rails on real data: a GPU-bound job gets no input advice, and
// the stages the step does not wait on claim no saving.
TEST(PipelineTracesGuards, GpuBoundClaimsNoInputSaving) {
  const nlohmann::json j = Report(kData + "/h200/pipeline/gpu_bound");
  EXPECT_EQ(j["verdict"]["severity"], "info");
  for (const auto& f : j["findings"]) EXPECT_FALSE(f["significant"]) << f["id"];
  const nlohmann::json& p = j["pipeline"];
  EXPECT_EQ(p["critical_stage"], "gpu");
  EXPECT_GE(p["critical_share"].get<double>(), 0.85);
  // Whatever the input side changes, the GPU's work per step stays: no
  // prediction may go below it.
  double gpu = 0;
  for (const auto& s : p["stages"])
    if (s["id"] == "gpu") gpu = s["service_ns"];
  ASSERT_GT(gpu, 0);
  for (const auto& pred : p["all_predictions"])
    EXPECT_GE(pred["step_ns"].get<double>(), gpu * 0.999) << pred["change"];
}

TEST(PipelineTracesGuards, TheStepDecomposesIntoItsParts) {
  for (const char* run : {"input_starvation", "main_process", "pin_thread", "fresh_faults"}) {
    const nlohmann::json j = Report(kData + "/h200/pipeline/" + run);
    const nlohmann::json& p = j["pipeline"];
    double sum = 0;
    for (const auto& part : p["parts"]) sum += part["ns"].get<double>();
    const double step = p["step_ns"];
    // The main thread's parts cover its step (waits included) within 5%.
    EXPECT_NEAR(sum, step, 0.05 * step) << run;
  }
}

}  // namespace
}  // namespace pinscope
