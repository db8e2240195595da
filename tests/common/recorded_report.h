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

// The report of `dir` as JSON, or as the text a person reads, with the
// calibration at `calibration` (empty: the default lookup; tests set
// PINSCOPE_CALIBRATION to a missing file).
inline std::string ReportOutput(const std::string& dir, bool json,
                                const std::string& calibration = "") {
  ReportOptions options;
  options.run_dir = dir;
  options.json = json;
  options.color = ColorMode::kNever;
  if (!calibration.empty()) options.calibration_path = calibration;
  std::ostringstream out, err;
  EXPECT_EQ(RunReport(options, out, err), 0) << err.str();
  return out.str();
}

// A run recorded on the GPU machine, with the calibration beside its traces.
inline std::string RecordedOutput(const std::string& dir, bool json) {
  return ReportOutput(dir, json, dir + "/calibration.json");
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
