// `pinscope report RUN`: one replay with the report's analyses, written as
// text or JSON. Returns the exit code: 0 ok, 1 the run had problems but a
// report was printed (corrupt files etc.), 2 nothing could be reported (bad
// arguments, no run). All output goes to the given streams (tests capture it).
#pragma once

#include <iosfwd>
#include <memory>

#include "analyzer/report/report_options.h"

namespace pinscope {

class Report;

int RunReport(const ReportOptions& options, std::ostream& out, std::ostream& err);

// The replay and the rules of `pinscope report`, nothing written: the
// evaluated report of options.run_dir, or null with the reason on `err`
// (then the exit code is 2). For the writers above this layer (analyzer/html).
std::unique_ptr<Report> BuildReport(const ReportOptions& options, std::ostream& err);

// The run's problems, one line each ("<command>: warning: file ...: ..."),
// on `err`: report, diff and export print them there whatever the output
// (docs/cli.md), the text report lists them again at its end.
void WriteProblems(const Report& report, const char* command, std::ostream& err);

}  // namespace pinscope
