// `pinscope report --json` of a run folder recorded on the GPU machine
// (tests/data/h200/...), with the calibration recorded beside its traces:
// what the model and tune tests read of the H200 runs.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "analyzer/report/report_command.h"

namespace pinscope::test_util {

inline nlohmann::json RecordedReport(const std::string& dir) {
  ReportOptions options;
  options.run_dir = dir;
  options.json = true;
  options.color = ColorMode::kNever;
  options.calibration_path = dir + "/calibration.json";
  std::ostringstream out, err;
  EXPECT_EQ(RunReport(options, out, err), 0) << err.str();
  return nlohmann::json::parse(out.str());
}

}  // namespace pinscope::test_util
