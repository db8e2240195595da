// `pinscope report`: runs one replay with the report's analyses and writes
// text or JSON; see report_command.h.
#include "analyzer/report/report_command.h"

#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>

#include "analyzer/common/format.h"
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
  if (options.progress != nullptr) options.progress->Stage("reading the run folder");
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
  std::string error, warning;
  std::optional<Calibration> calibration =
      ResolveCalibration(options.calibration_path, options.run_dir, &error, &warning);
  if (!calibration) {
    err << "pinscope report: " << error << '\n';
    return nullptr;
  }
  if (!warning.empty()) err << "pinscope report: warning: " << warning << '\n';
  ReportOptions effective = options;
  if (effective.top < 0) effective.top = 0;
  // A distributed job: each rank's files are also replayed alone (job_ranks.h).
  std::map<int, RunListing> by_rank = SplitByRank(listing);
  const Calibration rank_calibration = by_rank.empty() ? Calibration{} : *calibration;
  auto report = std::make_unique<Report>(std::move(*calibration), effective);
  std::string names_warning;
  std::unique_ptr<NativeNames> names =
      OpenRunNames(options.run_dir, options.symbols, &names_warning);
  if (!names_warning.empty()) err << "pinscope report: warning: " << names_warning << '\n';
  ReplayOptions replay;
  replay.names = names.get();
  replay.progress = options.progress;
  ReplayEngine engine(std::move(listing), replay);
  report->Attach(&engine);
  if (options.progress != nullptr) options.progress->Stage("replaying");
  engine.Run();
  if (options.progress != nullptr) options.progress->Stage("analysing");
  report->Evaluate(engine.info());
  if (!by_rank.empty()) {
    if (options.progress != nullptr) options.progress->Stage("replaying each rank");
    report->SetRanks(BuildJobRanks(std::move(by_rank), rank_calibration, effective, *report, err));
  }
  if (options.progress != nullptr) options.progress->Stage("writing");
  return report;
}

int RunReport(const ReportOptions& options, std::ostream& out, std::ostream& err) {
  std::unique_ptr<Report> built = BuildReport(options, err);
  if (!built) return 2;
  const Report& report = *built;

  if (options.json) {
    out << JsonReport(report).dump(2) << '\n';
  } else {
    // Sanitized whole: every string the trace gave is in it somewhere.
    const bool color = UseColor(options.color, out);
    std::ostringstream text;
    WriteTextReport(report, color, text);
    out << SanitizeTerminalText(text.str(), color);
  }
  // The report carries the problems too; a person watching stderr, or a
  // script reading stdout, sees them there. `pinscope run` writes both to
  // one stream: once is enough.
  if (&out != &err) WriteProblems(report, "pinscope report", err);
  return report.HasProblems() ? 1 : 0;
}

void WriteProblems(const Report& report, const char* command, std::ostream& err) {
  for (const Problem& problem : report.problems()) {
    err << command << ": " << SeverityName(problem.severity) << ": "
        << SanitizeTerminalText(problem.message, false) << '\n';
  }
}

}  // namespace pinscope
