// Calibration tests: the built-in H200 table, log-size interpolation and
// clamping, JSON save/load round trip and its errors, and the search order.
#include "analyzer/read/calibration.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>

#include "trace_builder.h"

namespace pinscope {
namespace {

using testing::kMiBytes;
using testing::MakeTempDir;
using testing::WriteFile;

TEST(CalibrationTest, DefaultIsTheH200Table) {
  const Calibration calibration = DefaultCalibration();
  EXPECT_EQ(calibration.source, "built-in default: H200 PCIe Gen5 x16, pinscope facts 2026-11-29");
  ASSERT_EQ(calibration.points.size(), 5u);
  EXPECT_EQ(calibration.points[2].bytes, 77070336u);
  EXPECT_DOUBLE_EQ(calibration.PinnedGbps(true, kMiBytes), 36.3);
  EXPECT_DOUBLE_EQ(calibration.PinnedGbps(false, kMiBytes), 38.0);
  EXPECT_DOUBLE_EQ(calibration.PageableGbps(true, 77070336), 6.0);
  EXPECT_DOUBLE_EQ(calibration.PageableGbps(false, 1024ull * kMiBytes), 13.3);
}

TEST(CalibrationTest, InterpolatesInLogSizeAndClamps) {
  const Calibration calibration = DefaultCalibration();
  // Halfway between 1 MiB and 8 MiB in log space is sqrt(8) MiB.
  const uint64_t middle = static_cast<uint64_t>(2.8284271247461903 * kMiBytes);
  EXPECT_NEAR(calibration.PinnedGbps(true, middle), (36.3 + 50.7) / 2, 1e-4);
  EXPECT_DOUBLE_EQ(calibration.PinnedGbps(true, 4096), 36.3);
  EXPECT_DOUBLE_EQ(calibration.PinnedGbps(true, 64ull << 30), 49.9);
  Calibration empty;
  EXPECT_EQ(empty.PinnedGbps(true, kMiBytes), 0);
}

TEST(CalibrationTest, SaveLoadRoundTrip) {
  const std::string dir = MakeTempDir("calibration_round_trip");
  Calibration calibration = DefaultCalibration();
  calibration.source = "pinscope calibrate";
  calibration.hostname = "gpu-7";
  std::string error;
  const std::string path = dir + "/sub/calibration.json";
  const mode_t old_umask = umask(022);
  ASSERT_TRUE(SaveCalibration(calibration, path, &error)) << error;
  umask(old_umask);
  // The machine's name and measurements: the owner's only, whatever the umask.
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  auto loaded = LoadCalibration(path, &error);
  ASSERT_TRUE(loaded) << error;
  EXPECT_EQ(loaded->hostname, "gpu-7");
  EXPECT_EQ(loaded->source, "pinscope calibrate (" + path + ")");
  ASSERT_EQ(loaded->points.size(), 5u);
  EXPECT_DOUBLE_EQ(loaded->points[3].d2h_pinned_gbps, 54.0);
  EXPECT_EQ(loaded->HostCopyGbps(kMiBytes), 0);  // not measured in the default table
}

TEST(CalibrationTest, HostCopyBandwidthIsOptionalAndRoundTrips) {
  const std::string dir = MakeTempDir("calibration_host_copy");
  Calibration calibration = DefaultCalibration();
  calibration.points[0].host_copy_gbps = 12.0;  // 1 MiB
  calibration.points[3].host_copy_gbps = 6.0;   // 256 MiB
  std::string error;
  ASSERT_TRUE(SaveCalibration(calibration, dir + "/c.json", &error)) << error;
  auto loaded = LoadCalibration(dir + "/c.json", &error);
  ASSERT_TRUE(loaded) << error;
  EXPECT_DOUBLE_EQ(loaded->points[0].host_copy_gbps, 12.0);
  EXPECT_DOUBLE_EQ(loaded->points[1].host_copy_gbps, 0.0);
  // Interpolated over the points that have it only: 16 MiB lies halfway
  // (in log size) between 1 MiB and 256 MiB.
  EXPECT_NEAR(loaded->HostCopyGbps(16 * kMiBytes), 9.0, 1e-9);
  EXPECT_DOUBLE_EQ(loaded->HostCopyGbps(1024 * kMiBytes), 6.0);
  WriteFile(dir + "/bad.json",
            R"({"version": 1, "points": [{"bytes": 1048576, "h2d_pageable_gbps": 7,)"
            R"( "h2d_pinned_gbps": 36, "d2h_pageable_gbps": 7, "d2h_pinned_gbps": 38,)"
            R"( "host_copy_gbps": -1}]})");
  EXPECT_FALSE(LoadCalibration(dir + "/bad.json", &error));
  EXPECT_NE(error.find("host_copy_gbps must be a positive number"), std::string::npos) << error;
}

TEST(CalibrationTest, LoadErrorsNameTheProblem) {
  const std::string dir = MakeTempDir("calibration_errors");
  std::string error;
  WriteFile(dir + "/a.json", "{not json");
  EXPECT_FALSE(LoadCalibration(dir + "/a.json", &error));
  EXPECT_EQ(error, "calibration " + dir + "/a.json: not valid JSON");
  WriteFile(dir + "/b.json", R"({"version": 2, "points": []})");
  EXPECT_FALSE(LoadCalibration(dir + "/b.json", &error));
  EXPECT_EQ(error,
            "calibration " + dir + "/b.json: version 2 is not supported (this pinscope reads 1)");
  WriteFile(dir + "/c.json", R"({"version": 1, "points": [{"bytes": 1048576}]})");
  EXPECT_FALSE(LoadCalibration(dir + "/c.json", &error));
  EXPECT_NE(error.find("needs positive bytes"), std::string::npos);
  WriteFile(dir + "/d.json", R"({"version": 1, "points": []})");
  EXPECT_FALSE(LoadCalibration(dir + "/d.json", &error));
  EXPECT_NE(error.find("\"points\" must be a non-empty array"), std::string::npos);
}

// A broken calibration found on the way is a warning naming the file and
// the problem, and the built-in table is used; only a file named with
// --calibration is an error.
TEST(CalibrationTest, BrokenFileFoundIsAWarningAndTheBuiltInTableIsUsed) {
  const std::string dir = MakeTempDir("calibration_broken");
  const std::string run = dir + "/run";
  const std::string cache = dir + "/cache.json";
  setenv("PINSCOPE_CALIBRATION", cache.c_str(), 1);
  std::filesystem::create_directories(run);
  struct Case {
    std::string path, bytes, problem;
  };
  for (const Case& c : {Case{cache, "", "empty (0 bytes)"},
                        Case{cache, "{\"version\": 1, \"points\": [", "not valid JSON"},
                        Case{run + "/calibration.json", "", "empty (0 bytes)"},
                        Case{run + "/calibration.json", "[1, 2]", "not a JSON object"}}) {
    WriteFile(c.path, c.bytes);
    std::string error, warning;
    std::optional<Calibration> resolved = ResolveCalibration("", run, &error, &warning);
    ASSERT_TRUE(resolved) << error;
    EXPECT_EQ(warning,
              "calibration " + c.path + ": " + c.problem + "; the built-in table is used instead");
    EXPECT_EQ(resolved->source, DefaultCalibration().source + " (" + c.path + " is unusable)");
    EXPECT_EQ(resolved->points.size(), DefaultCalibration().points.size());
    EXPECT_FALSE(ResolveCalibration(c.path, run, &error, &warning)) << c.path;
    EXPECT_EQ(error, "calibration " + c.path + ": " + c.problem);
    std::filesystem::remove(c.path);
  }
  setenv("PINSCOPE_CALIBRATION", "/nonexistent/calibration.json", 1);  // as ctest sets it
}

TEST(CalibrationTest, ResolveOrder) {
  const std::string dir = MakeTempDir("calibration_resolve");
  const std::string run = dir + "/run";
  std::string error;
  // Nothing anywhere: the built-in default.
  setenv("PINSCOPE_CALIBRATION", (dir + "/cache.json").c_str(), 1);
  EXPECT_EQ(DefaultCalibrationPath(), dir + "/cache.json");
  auto resolved = ResolveCalibration("", run, &error);
  ASSERT_TRUE(resolved);
  EXPECT_EQ(resolved->source, DefaultCalibration().source);
  // The machine's cached calibration.
  Calibration cached = DefaultCalibration();
  cached.source = "cached";
  ASSERT_TRUE(SaveCalibration(cached, dir + "/cache.json", &error));
  resolved = ResolveCalibration("", run, &error);
  ASSERT_TRUE(resolved);
  EXPECT_EQ(resolved->source, "cached (" + dir + "/cache.json)");
  // One saved with the run wins over the cache.
  Calibration with_run = DefaultCalibration();
  with_run.source = "with run";
  ASSERT_TRUE(SaveCalibration(with_run, run + "/calibration.json", &error));
  resolved = ResolveCalibration("", run, &error);
  EXPECT_EQ(resolved->source, "with run (" + run + "/calibration.json)");
  // An explicit path wins over everything, and must exist.
  EXPECT_EQ(ResolveCalibration(dir + "/cache.json", run, &error)->source,
            "cached (" + dir + "/cache.json)");
  EXPECT_FALSE(ResolveCalibration(dir + "/missing.json", run, &error));
  unsetenv("PINSCOPE_CALIBRATION");
  setenv("XDG_CACHE_HOME", "/xdg", 1);
  EXPECT_EQ(DefaultCalibrationPath(), "/xdg/pinscope/calibration.json");
  unsetenv("XDG_CACHE_HOME");
  setenv("PINSCOPE_CALIBRATION", "/nonexistent/calibration.json", 1);  // as ctest sets it
}

}  // namespace
}  // namespace pinscope
