// Entry points of the analyzer that the CLI (cli/) calls. Each returns the
// process exit code: 0 ok, 1 the run had problems but a report was printed
// (corrupt files etc.), 2 nothing could be reported (bad arguments, no run).
// All output goes to the given streams so tests can capture it.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace pinscope {

enum class ColorMode { kAuto, kAlways, kNever };

struct ReportOptions {
  std::string run_dir;            // folder holding <pid>.pstrace files
  bool json = false;              // --json: the versioned JSON schema
  ColorMode color = ColorMode::kAuto;
  int stack_depth = 6;            // --stacks N: frames shown per call site
  std::string calibration_path;   // --calibration FILE; empty: search (calibration.h)
  int top = 10;                   // rows in "largest"/"top" tables
  bool show_helpers = false;      // --all-processes: unfold helper processes
};

// `pinscope report RUN`.
int RunReport(const ReportOptions& options, std::ostream& out, std::ostream& err);

struct ExportOptions {
  std::string run_dir;
  std::string perfetto_path;      // --perfetto FILE
};

// `pinscope export --perfetto FILE RUN`.
int RunExport(const ExportOptions& options, std::ostream& out, std::ostream& err);

struct DiffOptions {
  std::string run_a;
  std::string run_b;
  bool json = false;
  ColorMode color = ColorMode::kAuto;
  std::string calibration_path;
};

// `pinscope diff RUN_A RUN_B`.
int RunDiff(const DiffOptions& options, std::ostream& out, std::ostream& err);

}  // namespace pinscope
