// Known answers of the input-pipeline rules on real H200 traces checked in
// under examples/ and tests/data/h200/: the verdict class, the pinning
// section's counts, and device activity's "not input-bound".
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "analyzer/commands.h"

namespace pinscope {
namespace {

nlohmann::json JsonOf(const std::string& dir) {
  ReportOptions options;
  options.run_dir = dir;
  options.json = true;
  options.color = ColorMode::kNever;
  options.calibration_path = dir + "/calibration.json";
  std::ostringstream out, err;
  RunReport(options, out, err);
  return nlohmann::json::parse(out.str());
}

const std::string kRoot = PINSCOPE_TEST_DATA_DIR;

TEST(InputRulesTest, SeedWorkers0IsMainProcessBound) {
  const nlohmann::json j = JsonOf(kRoot + "/../../examples/h200-seed-workers0");
  EXPECT_EQ(j["verdict"]["id"], "main_process_bound");
  EXPECT_EQ(j["batch_loop"]["workers"], 0);
  EXPECT_EQ(j["batch_loop"]["batches"], 10);
  EXPECT_EQ(j["batch_loop"]["batch_bytes"], 77070336u);  // 73.5 MiB
  // Measured: ~131 ms between batch copies, ~12 ms copy.
  const uint64_t interval = j["batch_loop"]["median_interval_ns"];
  EXPECT_GT(interval, 100000000u);
  EXPECT_LT(interval, 160000000u);
}

TEST(InputRulesTest, GpuBoundIsNotInputBound) {
  const nlohmann::json j = JsonOf(kRoot + "/h200/gpubound");
  EXPECT_EQ(j["verdict"]["id"], "not_input_bound");
  EXPECT_NE(j["verdict"]["text"].get<std::string>().find("device activity"), std::string::npos);
  ASSERT_TRUE(j.contains("device_activity"));
  EXPECT_GE(j["device_activity"][0]["active_busy_fraction"].get<double>(), 0.9);
}

TEST(InputRulesTest, LoaderPinShowsPinning) {
  const nlohmann::json j = JsonOf(kRoot + "/h200/loader_pin");
  ASSERT_TRUE(j.contains("pinning"));
  EXPECT_EQ(j["pinning"]["shm_registers"], 24);
  EXPECT_EQ(j["pinning"]["registers"], 48);
  EXPECT_EQ(j["pinning"]["unpin_reasons"]["munmap"], 24);
}

// loader_pin: 3 epochs of 4 workers (persistent_workers=False, so 12 worker
// processes, 4 at once) feed a main loop that hashes every batch on the
// host: the workers keep up, the main loop is the limit, and the report
// must not ask for more workers.
TEST(InputRulesTest, LoaderPinIsMainLoopBoundNotStarved) {
  const nlohmann::json j = JsonOf(kRoot + "/h200/loader_pin");
  bool main_loop = false;
  for (const auto& f : j["findings"]) {
    EXPECT_NE(f["id"], "input_starvation");
    if (f["id"] == "main_loop_bound") {
      main_loop = true;
      EXPECT_NE(f["verdict"].get<std::string>().find("its 4 workers"), std::string::npos);
    }
  }
  EXPECT_TRUE(main_loop);
}

}  // namespace
}  // namespace pinscope
