// `pinscope report [options] RUN`: parses the options and calls the
// analyzer's RunReport (analyzer/report/report_command.h), which owns the report itself.
#include "analyzer/report/report_command.h"

#include <getopt.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "analyzer/html/html_report.h"
#include "cli/cli_common.h"
#include "cli/commands.h"
#include "cli/progress_line.h"

namespace pinscope::cli {

const char kReportUsage[] =
    "Usage: pinscope report [options] RUN\n"
    "\n"
    "Prints the bottleneck report of the run folder RUN (made by `pinscope run`).\n"
    "\n"
    "Options:\n"
    "      --json             the report as JSON (a versioned schema)\n"
    "      --html FILE        write the report as one self-contained HTML page to FILE\n"
    "                         (charts as inline SVG, no network; - for stdout)\n"
    "      --color[=WHEN]     colour: auto (default: only on a terminal), always, never\n"
    "      --no-color         same as --color=never (NO_COLOR=1 in the environment too)\n"
    "      --stacks N         call-stack frames shown per call site (0 to 256; default 6)\n"
    "      --calibration FILE bandwidths to compare against (default: RUN/calibration.json,\n"
    "                         then the one `pinscope calibrate` saved, then built-in)\n"
    "      --all-processes    list helper processes one by one instead of folded\n"
    "      --top N            rows in the \"largest\" tables (1 to 100000; default 10)\n"
    "      --symbols WHERE    names of native frames: auto (default: RUN/symbols.pb, then\n"
    "                         the binaries on this machine), stored (RUN/symbols.pb only),\n"
    "                         off (module+offset)\n"
    "  -h, --help             this help\n"
    "\n"
    "Exit status: 0 report printed; 1 printed, but some trace files had problems\n"
    "(listed at the end); 2 nothing to report (bad usage, no such run folder).\n";

int ReportCommand(int argc, char** argv) {
  enum {
    kJson = 1000,
    kHtml,
    kColor,
    kNoColor,
    kStacks,
    kCalibration,
    kAllProcesses,
    kTop,
    kSymbols,
    kJoin
  };
  static const struct option kLong[] = {
      {"json", no_argument, nullptr, kJson},
      {"html", required_argument, nullptr, kHtml},
      {"color", optional_argument, nullptr, kColor},
      {"colour", optional_argument, nullptr, kColor},
      {"no-color", no_argument, nullptr, kNoColor},
      {"no-colour", no_argument, nullptr, kNoColor},
      {"stacks", required_argument, nullptr, kStacks},
      {"calibration", required_argument, nullptr, kCalibration},
      {"all-processes", no_argument, nullptr, kAllProcesses},
      {"top", required_argument, nullptr, kTop},
      {"symbols", required_argument, nullptr, kSymbols},
      // Hidden, a diagnostic (docs/cli.md): the join that needs no CUPTI
      // correlation records, on a trace that has them, to compare.
      {"join", required_argument, nullptr, kJoin},
      {"help", no_argument, nullptr, 'h'},
      {nullptr, 0, nullptr, 0},
  };
  ReportOptions options;
  ResetGetopt();
  int c;
  long value = 0;
  while ((c = getopt_long(argc, argv, ":h", kLong, nullptr)) != -1) {
    switch (c) {
      case kJson:
        options.json = true;
        break;
      case kHtml:
        if (optarg[0] == '\0') {
          PrintUsageError("report", "--html needs a file name (or - for stdout)");
          return kExitUsage;
        }
        options.html_path = optarg;
        break;
      case kColor:
        if (!ParseColorOption("report", optarg, &options.color)) return kExitUsage;
        break;
      case kNoColor:
        options.color = ColorMode::kNever;
        break;
      case kStacks:
        if (!ParseIntOption("report", "--stacks", optarg, 0, 256, &value)) return kExitUsage;
        options.stack_depth = static_cast<int>(value);
        break;
      case kCalibration:
        options.calibration_path = optarg;
        break;
      case kAllProcesses:
        options.show_helpers = true;
        break;
      case kTop:
        if (!ParseIntOption("report", "--top", optarg, 1, 100000, &value)) return kExitUsage;
        options.top = static_cast<int>(value);
        break;
      case kSymbols:
        if (std::string(optarg) == "auto") {
          options.symbols = SymbolSource::kAuto;
        } else if (std::string(optarg) == "stored") {
          options.symbols = SymbolSource::kStored;
        } else if (std::string(optarg) == "off") {
          options.symbols = SymbolSource::kOff;
        } else {
          PrintUsageError("report",
                          std::string("--symbols takes auto, stored or off, not '") + optarg + "'");
          return kExitUsage;
        }
        break;
      case kJoin:
        if (std::string(optarg) == "order") {
          options.join_by_order = true;
        } else if (std::string(optarg) == "auto") {
          options.join_by_order = false;
        } else {
          PrintUsageError("report",
                          std::string("--join takes auto or order, not '") + optarg + "'");
          return kExitUsage;
        }
        break;
      case 'h':
        std::fputs(kReportUsage, stdout);
        return 0;
      default:
        PrintGetoptError("report", c, argv);
        return kExitUsage;
    }
  }
  if (optind >= argc) {
    PrintUsageError("report", "no run folder given (pinscope report RUN)");
    return kExitUsage;
  }
  if (argc - optind > 1) {
    PrintUsageError("report", std::string("one run folder at a time; unexpected '") +
                                  argv[optind + 1] + "' (to compare two runs: pinscope diff)");
    return kExitUsage;
  }
  options.run_dir = argv[optind];
  if (!CheckRunFolder("report", options.run_dir)) return kExitUsage;
  if (options.json && !options.html_path.empty()) {
    PrintUsageError("report", "--json and --html are two reports: ask for one at a time");
    return kExitUsage;
  }
  CommandProgress progress("pinscope report");
  options.progress = progress.progress();
  if (!options.html_path.empty())
    return html::RunHtmlReport(options, progress.out(), progress.err());
  // JSON is for programs: never coloured, whatever the terminal.
  options.color = options.json ? ColorMode::kNever : ResolveColor(options.color, STDOUT_FILENO);
  return RunReport(options, progress.out(), progress.err());
}

}  // namespace pinscope::cli
