// The HTML page of a run folder, as the tests of analyzer/html read it: the
// report built with the calibration recorded beside the traces, then written.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <sstream>
#include <string>

#include "analyzer/html/html_report.h"
#include "analyzer/report/report_command.h"

namespace pinscope::test_util {

inline std::string HtmlPage(const std::string& dir, const std::string& calibration = "") {
  ReportOptions options;
  options.run_dir = dir;
  options.color = ColorMode::kNever;
  options.calibration_path = calibration.empty() ? dir + "/calibration.json" : calibration;
  std::ostringstream out, err;
  std::unique_ptr<Report> report = BuildReport(options, err);
  EXPECT_TRUE(report) << err.str();
  if (!report) return "";
  html::WriteHtmlReport(*report, out);
  return out.str();
}

// Occurrences of `needle` in `text`.
inline size_t Count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

// The text between the first `from` and the next `to` after it ("" if none).
inline std::string Between(const std::string& text, const std::string& from,
                           const std::string& to) {
  const size_t a = text.find(from);
  if (a == std::string::npos) return "";
  const size_t b = text.find(to, a);
  return b == std::string::npos ? "" : text.substr(a, b + to.size() - a);
}

}  // namespace pinscope::test_util
