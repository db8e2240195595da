// `pinscope symbolize RUN`: names the run's native frames from the binaries
// on this machine into RUN/symbols.pb (analyzer/symbols/run_symbols.h), and
// the same step `pinscope run` takes when the job ends (SymbolizeAfterRun).
#include <getopt.h>

#include <cstdio>
#include <string>

#include "analyzer/symbols/run_symbols.h"
#include "cli/cli_common.h"
#include "cli/commands.h"

namespace pinscope::cli {

const char kSymbolizeUsage[] =
    "Usage: pinscope symbolize RUN\n"
    "\n"
    "Names the native frames of the run folder RUN's call stacks (function, and\n"
    "file:line where the binary has debug info) from the binaries at the paths the\n"
    "job loaded them from, and stores them in RUN/symbols.pb, replacing the one\n"
    "there; `pinscope report` and `export` then use them on any machine.\n"
    "`pinscope run` does this when the job ends. A binary rebuilt or replaced\n"
    "since the run (another build id) is not read: its frames stay module+offset.\n"
    "\n"
    "Options:\n"
    "  -h, --help   this help\n"
    "\n"
    "Exit status: 0 written; 2 nothing written (bad usage, no such run folder,\n"
    "RUN not writable).\n";

namespace {

std::string Join(const std::vector<std::string>& items) {
  std::string text;
  for (const std::string& item : items) text += (text.empty() ? "" : ", ") + item;
  return text;
}

void PrintSummary(const char* prefix, const SymbolizeSummary& s) {
  std::fprintf(stderr, "%s%s: %zu native frames in %zu modules, %zu named (%zu with file:line)\n",
               prefix, s.path.c_str(), s.frames, s.modules, s.named, s.with_line);
  if (!s.missing.empty())
    std::fprintf(stderr, "%snot found here: %s\n", prefix, Join(s.missing).c_str());
  if (!s.changed.empty()) {
    std::fprintf(stderr, "%schanged since the run (another build id; not named): %s\n", prefix,
                 Join(s.changed).c_str());
  }
}

}  // namespace

void SymbolizeAfterRun(const std::string& run_dir) {
  SymbolizeSummary summary;
  const Status status = SymbolizeRun(run_dir, &summary);
  // The report still works without the file: say why, and go on.
  if (!status.ok())
    std::fprintf(stderr, "pinscope: native frames not named: %s\n", status.message.c_str());
}

int SymbolizeCommand(int argc, char** argv) {
  static const struct option kLong[] = {
      {"help", no_argument, nullptr, 'h'},
      {nullptr, 0, nullptr, 0},
  };
  ResetGetopt();
  int c;
  while ((c = getopt_long(argc, argv, ":h", kLong, nullptr)) != -1) {
    if (c == 'h') {
      std::fputs(kSymbolizeUsage, stdout);
      return 0;
    }
    PrintGetoptError("symbolize", c, argv);
    return kExitUsage;
  }
  if (optind >= argc) {
    PrintUsageError("symbolize", "no run folder given (pinscope symbolize RUN)");
    return kExitUsage;
  }
  if (argc - optind > 1) {
    PrintUsageError("symbolize",
                    std::string("one run folder at a time; unexpected '") + argv[optind + 1] + "'");
    return kExitUsage;
  }
  const std::string run_dir = argv[optind];
  if (!CheckRunFolder("symbolize", run_dir)) return kExitUsage;
  SymbolizeSummary summary;
  const Status status = SymbolizeRun(run_dir, &summary);
  if (!status.ok()) {
    std::fprintf(stderr, "pinscope symbolize: %s\n", status.message.c_str());
    return 2;
  }
  PrintSummary("pinscope symbolize: ", summary);
  return 0;
}

}  // namespace pinscope::cli
