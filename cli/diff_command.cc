// `pinscope diff [options] RUN_A RUN_B`: parses the options and calls the
// analyzer's RunDiff (analyzer/diff/diff_command.h).
#include <getopt.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "analyzer/diff/diff_command.h"
#include "cli/cli_common.h"
#include "cli/commands.h"
#include "cli/progress_line.h"

namespace pinscope::cli {

const char kDiffUsage[] =
    "Usage: pinscope diff [options] RUN_A RUN_B\n"
    "\n"
    "Compares two runs of the same job (before and after a change): time per\n"
    "bottleneck class, throughput of the main loop, and whether the verdict moved.\n"
    "\n"
    "Options:\n"
    "      --json             the comparison as JSON\n"
    "      --color[=WHEN]     colour: auto (default), always, never\n"
    "      --no-color         same as --color=never\n"
    "      --calibration FILE bandwidths to compare against, for both runs\n"
    "  -h, --help             this help\n"
    "\n"
    "Exit status: 0 compared; 1 compared, but some trace files had problems;\n"
    "2 nothing compared (bad usage, a run folder missing).\n";

int DiffCommand(int argc, char** argv) {
  enum { kJson = 1000, kColor, kNoColor, kCalibration };
  static const struct option kLong[] = {
      {"json", no_argument, nullptr, kJson},
      {"color", optional_argument, nullptr, kColor},
      {"colour", optional_argument, nullptr, kColor},
      {"no-color", no_argument, nullptr, kNoColor},
      {"no-colour", no_argument, nullptr, kNoColor},
      {"calibration", required_argument, nullptr, kCalibration},
      {"help", no_argument, nullptr, 'h'},
      {nullptr, 0, nullptr, 0},
  };
  DiffOptions options;
  ResetGetopt();
  int c;
  while ((c = getopt_long(argc, argv, ":h", kLong, nullptr)) != -1) {
    switch (c) {
      case kJson:
        options.json = true;
        break;
      case kColor:
        if (!ParseColorOption("diff", optarg, &options.color)) return kExitUsage;
        break;
      case kNoColor:
        options.color = ColorMode::kNever;
        break;
      case kCalibration:
        options.calibration_path = optarg;
        break;
      case 'h':
        std::fputs(kDiffUsage, stdout);
        return 0;
      default:
        PrintGetoptError("diff", c, argv);
        return kExitUsage;
    }
  }
  if (argc - optind != 2) {
    PrintUsageError("diff", argc - optind < 2 ? "needs two run folders (pinscope diff RUN_A RUN_B)"
                                              : "takes exactly two run folders");
    return kExitUsage;
  }
  options.run_a = argv[optind];
  options.run_b = argv[optind + 1];
  if (!CheckRunFolder("diff", options.run_a) || !CheckRunFolder("diff", options.run_b)) {
    return kExitUsage;
  }
  options.color = options.json ? ColorMode::kNever : ResolveColor(options.color, STDOUT_FILENO);
  CommandProgress progress("pinscope diff");
  options.progress = progress.progress();
  return RunDiff(options, progress.out(), progress.err());
}

}  // namespace pinscope::cli
