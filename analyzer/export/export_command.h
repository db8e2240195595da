// `pinscope export --perfetto FILE RUN`: what it is asked for, and its entry
// point (a replay consumer, perfetto_export.h). Exit codes as RunReport's.
#pragma once

#include <iosfwd>
#include <string>

#include "analyzer/common/progress.h"
#include "analyzer/symbols/run_symbols.h"

namespace pinscope {

struct ExportOptions {
  std::string run_dir;
  std::string perfetto_path;  // --perfetto FILE
  bool gzip = false;          // --gzip (also when FILE ends in .gz)
  // Names of native frames in the stacks: RUN/symbols.pb, then the binaries here.
  SymbolSource symbols = SymbolSource::kAuto;
  // As ReportOptions::progress.
  Progress* progress = nullptr;
};

int RunExport(const ExportOptions& options, std::ostream& out, std::ostream& err);

}  // namespace pinscope
