// Writes the export scenario run and its Perfetto export for the
// Perfetto-schema check (perfetto_schema_check.py), as a ctest fixture:
//   pinscope_export_fixture OUTDIR  ->  OUTDIR/scenario/*.pstrace, OUTDIR/scenario.pftrace
#include <filesystem>
#include <iostream>

#include "analyzer/export/export_command.h"
#include "scenarios.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: pinscope_export_fixture OUTDIR\n";
    return 2;
  }
  namespace fs = std::filesystem;
  const fs::path out = argv[1];
  fs::remove_all(out / "scenario");
  fs::create_directories(out / "scenario");
  pinscope::testing::WriteExportScenario((out / "scenario").string());
  pinscope::ExportOptions options;
  options.run_dir = (out / "scenario").string();
  options.perfetto_path = (out / "scenario.pftrace").string();
  return pinscope::RunExport(options, std::cout, std::cerr);
}
