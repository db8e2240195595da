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

// The report of `dir` as JSON, or as the text a person reads.
inline std::string RecordedOutput(const std::string& dir, bool json) {
  ReportOptions options;
  options.run_dir = dir;
  options.json = json;
  options.color = ColorMode::kNever;
  options.calibration_path = dir + "/calibration.json";
  std::ostringstream out, err;
  EXPECT_EQ(RunReport(options, out, err), 0) << err.str();
  return out.str();
}

inline nlohmann::json RecordedReport(const std::string& dir) {
  return nlohmann::json::parse(RecordedOutput(dir, true));
}

// A text report with its wrapping undone (each line break and the indent
// after it one space), for finding sentences.
inline std::string Unwrapped(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\n') {
      out += text[i];
      continue;
    }
    while (i + 1 < text.size() && text[i + 1] == ' ') ++i;
    out += ' ';
  }
  return out;
}

inline std::string RecordedText(const std::string& dir) {
  return Unwrapped(RecordedOutput(dir, false));
}

}  // namespace pinscope::test_util
