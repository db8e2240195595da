// `pinscope report RUN`: one replay with the report's analyses, written as
// text or JSON. Returns the exit code: 0 ok, 1 the run had problems but a
// report was printed (corrupt files etc.), 2 nothing could be reported (bad
// arguments, no run). All output goes to the given streams (tests capture it).
#pragma once

#include <iosfwd>

#include "analyzer/report/report_options.h"

namespace pinscope {

int RunReport(const ReportOptions& options, std::ostream& out, std::ostream& err);

}  // namespace pinscope
