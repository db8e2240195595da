// `pinscope report --html FILE RUN`: the report as one self-contained HTML
// page (inline CSS and SVG, no script, no network), to open offline or
// attach to an issue: the verdict and the changes with their predicted
// gains, the step drawn as a pipeline, a timeline of a window of steady
// steps, the evidence tables, the run's facts, and the text report itself.
#pragma once

#include <iosfwd>

#include "analyzer/report/report.h"
#include "analyzer/report/report_options.h"

namespace pinscope::html {

// The page of an evaluated report.
void WriteHtmlReport(const Report& report, std::ostream& out);

// Builds the report of options.run_dir (analyzer/report's BuildReport) and
// writes its page to options.html_path ("-": to `out`). Exit code as
// RunReport's: 0 written, 1 written but the run had problems, 2 nothing
// written (no run, or the file could not be written; the reason on `err`).
int RunHtmlReport(const ReportOptions& options, std::ostream& out, std::ostream& err);

}  // namespace pinscope::html
