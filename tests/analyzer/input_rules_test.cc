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

// The seed benchmark with 4 workers: the batch copy line of the script is the
// top call site (20 copies of a 73.5 MiB batch), and the shm segments that
// fed it were created in the workers.
TEST(InputRulesTest, SeedWorkers4CallSites) {
  const nlohmann::json j = JsonOf(kRoot + "/../../examples/h200-seed-workers4");
  ASSERT_TRUE(j.contains("call_sites"));
  ASSERT_GE(j["call_sites"].size(), 2u);
  const nlohmann::json& top = j["call_sites"][0];
  const std::string python = top["python"];
  const std::string suffix = "/seedbench.py:53 run";
  ASSERT_GE(python.size(), suffix.size());
  EXPECT_EQ(python.substr(python.size() - suffix.size()), suffix);
  EXPECT_EQ(top["copies"], 20);
  EXPECT_EQ(top["h2d"], 20);
  EXPECT_EQ(top["bytes"], 20u * 77070336u);  // 20 x 73.5 MiB
  EXPECT_EQ(top["frames"][0], python);
  EXPECT_GT(top["loss_ns"].get<uint64_t>(), 0u);
  EXPECT_LE(top["loss_ns"].get<uint64_t>(), top["blocked_ns"].get<uint64_t>());
  const nlohmann::json& buffer = top["buffer"];
  EXPECT_EQ(buffer["kind"], "shm");
  EXPECT_EQ(buffer["copies"], 20);
  EXPECT_TRUE(buffer["in_workers"]);
  EXPECT_EQ(buffer["pids"], nlohmann::json::parse("[819, 820, 821, 822]"));
  const std::string made = buffer["site"];
  // The batch is made by the DataLoader's collate (torch's own storage
  // plumbing below it is skipped).
  EXPECT_NE(made.find("torch/utils/data/_utils/collate.py:"), std::string::npos) << made;
  // The site's loss is the staging estimate's, copy by copy: all sites
  // together lose what the staging section says.
  uint64_t loss = 0;
  for (const auto& site : j["call_sites"]) loss += site["loss_ns"].get<uint64_t>();
  EXPECT_EQ(loss, j["pageable_staging"]["loss_ns"].get<uint64_t>());
}

}  // namespace
}  // namespace pinscope
