// `pinscope diff RUN_A RUN_B`: what it is asked for, and its entry point
// (diff.h replays both runs). Exit codes as RunReport's.
#pragma once

#include <iosfwd>
#include <string>

#include "analyzer/common/color.h"
#include "analyzer/common/progress.h"

namespace pinscope {

struct DiffOptions {
  std::string run_a;
  std::string run_b;
  bool json = false;
  ColorMode color = ColorMode::kAuto;
  std::string calibration_path;
  // As ReportOptions::progress (the stages name "run A" and "run B").
  Progress* progress = nullptr;
};

int RunDiff(const DiffOptions& options, std::ostream& out, std::ostream& err);

}  // namespace pinscope
