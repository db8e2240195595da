// What `pinscope report` is asked for (cli/report_command.cc parses it).
#pragma once

#include <string>

#include "analyzer/common/color.h"
#include "analyzer/common/progress.h"
#include "analyzer/symbols/run_symbols.h"

namespace pinscope {

struct ReportOptions {
  std::string run_dir;    // folder holding <pid>.pstrace files
  bool json = false;      // --json: the versioned JSON schema
  std::string html_path;  // --html FILE: the HTML page (analyzer/html), "-" stdout
  ColorMode color = ColorMode::kAuto;
  int stack_depth = 6;           // --stacks N: frames shown per call site
  std::string calibration_path;  // --calibration FILE; empty: search (calibration.h)
  int top = 10;                  // rows in "largest"/"top" tables
  bool show_helpers = false;     // --all-processes: unfold helper processes
  // Names of native frames: RUN/symbols.pb, then the binaries here (kAuto).
  SymbolSource symbols = SymbolSource::kAuto;
  // --join=order (a diagnostic): join device records to their host calls by
  // time and order even where the trace has correlation records
  // (docs/device-activity.md); false: by correlation where there are some.
  bool join_by_order = false;
  // Told the stages and the bytes replayed (the CLI's progress line); not
  // owned, nullptr: nobody is told. Changes nothing in the output.
  Progress* progress = nullptr;
};

}  // namespace pinscope
