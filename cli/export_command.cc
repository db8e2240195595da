// `pinscope export --perfetto FILE RUN`: parses the options and calls the
// analyzer's RunExport (analyzer/export/export_command.h).
#include "analyzer/export/export_command.h"

#include <getopt.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "cli/cli_common.h"
#include "cli/commands.h"
#include "cli/progress_line.h"

namespace pinscope::cli {

const char kExportUsage[] =
    "Usage: pinscope export --perfetto FILE [--gzip] RUN\n"
    "\n"
    "Writes the run folder RUN as a timeline that ui.perfetto.dev and Perfetto's\n"
    "trace_processor open: a named track per process (main process, DataLoader\n"
    "worker N, helpers) and thread (main, pin-memory), worker batches, DataLoader\n"
    "spans, copies and syncs as slices, flows from each host call to its device\n"
    "record, counters for /dev/shm bytes, pinned bytes and GPU busy.\n"
    "\n"
    "Options:\n"
    "      --perfetto FILE   the Perfetto trace file to write\n"
    "      --gzip            gzip it (also when FILE ends in .gz)\n"
    "  -h, --help            this help\n"
    "\n"
    "Exit status: 0 written; 1 written, but some trace files had problems;\n"
    "2 nothing written (bad usage, no such run folder, FILE not writable).\n";

int ExportCommand(int argc, char** argv) {
  enum { kPerfetto = 1000, kGzip };
  static const struct option kLong[] = {
      {"perfetto", required_argument, nullptr, kPerfetto},
      {"gzip", no_argument, nullptr, kGzip},
      {"help", no_argument, nullptr, 'h'},
      {nullptr, 0, nullptr, 0},
  };
  ExportOptions options;
  ResetGetopt();
  int c;
  while ((c = getopt_long(argc, argv, ":h", kLong, nullptr)) != -1) {
    switch (c) {
      case kPerfetto:
        if (!*optarg) {
          PrintUsageError("export", "--perfetto needs a file name");
          return kExitUsage;
        }
        options.perfetto_path = optarg;
        break;
      case kGzip:
        options.gzip = true;
        break;
      case 'h':
        std::fputs(kExportUsage, stdout);
        return 0;
      default:
        PrintGetoptError("export", c, argv);
        return kExitUsage;
    }
  }
  if (options.perfetto_path.empty()) {
    PrintUsageError("export", "say which format to write: --perfetto FILE");
    return kExitUsage;
  }
  if (optind >= argc) {
    PrintUsageError("export", "no run folder given (pinscope export --perfetto FILE RUN)");
    return kExitUsage;
  }
  if (argc - optind > 1) {
    PrintUsageError("export",
                    std::string("one run folder at a time; unexpected '") + argv[optind + 1] + "'");
    return kExitUsage;
  }
  options.run_dir = argv[optind];
  if (!CheckRunFolder("export", options.run_dir)) return kExitUsage;
  CommandProgress progress("pinscope export");
  options.progress = progress.progress();
  return RunExport(options, progress.out(), progress.err());
}

}  // namespace pinscope::cli
