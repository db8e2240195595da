// The analyzer's entry points for the CLI (commands.h): `report` runs one
// replay with the report's analyses and writes text or JSON; `export`
// (perfetto_export.cc) and `diff` (diff.cc) are more consumers of the same
// replay.
#include "analyzer/commands.h"

#include <unistd.h>

#include <iostream>
#include <nlohmann/json.hpp>
#include <ostream>

#include "analyzer/calibration.h"
#include "analyzer/diff.h"
#include "analyzer/perfetto_export.h"
#include "analyzer/replay.h"
#include "analyzer/report.h"
#include "analyzer/run_loader.h"

namespace pinscope {

namespace {

bool UseColor(ColorMode mode, const std::ostream& out) {
  switch (mode) {
    case ColorMode::kAlways:
      return true;
    case ColorMode::kNever:
      return false;
    case ColorMode::kAuto:
      // Only the process's own stdout can be a terminal we know of.
      return &out == &std::cout && isatty(STDOUT_FILENO) == 1;
  }
  return false;
}

}  // namespace

int RunReport(const ReportOptions& options, std::ostream& out, std::ostream& err) {
  if (options.run_dir.empty()) {
    err << "pinscope report: no run folder given\n";
    return 2;
  }
  RunListing listing;
  const Status scanned = ScanRun(options.run_dir, &listing);
  if (!scanned.ok()) {
    err << "pinscope report: " << scanned.message << '\n';
    return 2;
  }
  if (listing.files.empty()) {
    err << "pinscope report: no readable process file in " << options.run_dir << '\n';
    for (const Problem& problem : listing.problems) err << "  " << problem.message << '\n';
    return 2;
  }
  std::string error;
  std::optional<Calibration> calibration =
      ResolveCalibration(options.calibration_path, options.run_dir, &error);
  if (!calibration) {
    err << "pinscope report: " << error << '\n';
    return 2;
  }
  ReportOptions effective = options;
  if (effective.top < 0) effective.top = 0;
  Report report(std::move(*calibration), effective);
  ReplayEngine engine(std::move(listing));
  report.Attach(&engine);
  engine.Run();
  report.Evaluate(engine.info());

  if (options.json) {
    out << JsonReport(report).dump(2) << '\n';
    // The JSON carries the problems too; a person watching stderr sees them.
    for (const Problem& problem : report.problems()) {
      if (problem.severity == Severity::kError)
        err << "pinscope report: " << problem.message << '\n';
    }
  } else {
    WriteTextReport(report, UseColor(options.color, out), out);
  }
  return report.HasErrors() ? 1 : 0;
}

int RunExport(const ExportOptions& options, std::ostream& out, std::ostream& err) {
  return ExportPerfetto(options, out, err);  // perfetto_export.cc
}

int RunDiff(const DiffOptions& options, std::ostream& out, std::ostream& err) {
  return DiffRuns(options, UseColor(options.color, out), out, err);  // diff.cc
}

}  // namespace pinscope
