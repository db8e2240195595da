// `pinscope report`: runs one replay with the report's analyses and writes
// text or JSON; see report_command.h.
#include "analyzer/report/report_command.h"

#include <iostream>
#include <nlohmann/json.hpp>
#include <ostream>

#include "analyzer/read/calibration.h"
#include "analyzer/read/run_loader.h"
#include "analyzer/replay/replay.h"
#include "analyzer/report/report.h"

namespace pinscope {

std::unique_ptr<Report> BuildReport(const ReportOptions& options, std::ostream& err) {
  if (options.run_dir.empty()) {
    err << "pinscope report: no run folder given\n";
    return nullptr;
  }
  RunListing listing;
  const Status scanned = ScanRun(options.run_dir, &listing);
  if (!scanned.ok()) {
    err << "pinscope report: " << scanned.message << '\n';
    return nullptr;
  }
  if (listing.files.empty()) {
    err << "pinscope report: no readable process file in " << options.run_dir << '\n';
    for (const Problem& problem : listing.problems) err << "  " << problem.message << '\n';
    return nullptr;
  }
  std::string error;
  std::optional<Calibration> calibration =
      ResolveCalibration(options.calibration_path, options.run_dir, &error);
  if (!calibration) {
    err << "pinscope report: " << error << '\n';
    return nullptr;
  }
  ReportOptions effective = options;
  if (effective.top < 0) effective.top = 0;
  auto report = std::make_unique<Report>(std::move(*calibration), effective);
  std::string warning;
  std::unique_ptr<NativeNames> names = OpenRunNames(options.run_dir, options.symbols, &warning);
  if (!warning.empty()) err << "pinscope report: warning: " << warning << '\n';
  ReplayOptions replay;
  replay.names = names.get();
  ReplayEngine engine(std::move(listing), replay);
  report->Attach(&engine);
  engine.Run();
  report->Evaluate(engine.info());
  return report;
}

int RunReport(const ReportOptions& options, std::ostream& out, std::ostream& err) {
  std::unique_ptr<Report> built = BuildReport(options, err);
  if (!built) return 2;
  const Report& report = *built;

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

}  // namespace pinscope
