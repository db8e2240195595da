// `pinscope export --perfetto FILE RUN`: what it is asked for, and its entry
// point (a replay consumer, perfetto_export.h). Exit codes as RunReport's.
#pragma once

#include <iosfwd>
#include <string>

namespace pinscope {

struct ExportOptions {
  std::string run_dir;
  std::string perfetto_path;  // --perfetto FILE
  bool gzip = false;          // --gzip (also when FILE ends in .gz)
};

int RunExport(const ExportOptions& options, std::ostream& out, std::ostream& err);

}  // namespace pinscope
