// `pinscope run [options] [--] CMD ARGS...`: runs the job with libpinscope.so
// preloaded into a fresh run folder, passes its exit status through, then
// prints the report. Exit status: the job's (a job killed by a signal kills
// the launcher with the same signal, after the report); 125 when pinscope
// itself fails before the job starts; 126/127 when CMD cannot be executed.
#include <getopt.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <iostream>
#include <string>

#include "analyzer/report/report_command.h"
#include "cli/cli_common.h"
#include "cli/commands.h"
#include "cli/env_check.h"
#include "cli/launcher.h"
#include "cli/run_setup.h"

namespace pinscope::cli {

// Like env(1), nohup(1) and timeout(1): the launcher's own failures use 125
// so that every status a job commonly returns stays the job's.
constexpr int kRunExitLauncher = 125;
constexpr int kRunExitCannotExecute = 126;
constexpr int kRunExitNotFound = 127;

const char kRunUsage[] =
    "Usage: pinscope run [options] [--] CMD [ARGS...]\n"
    "\n"
    "Runs CMD with libpinscope.so preloaded, records its host<->device copies (and\n"
    "those of every process it starts) into a run folder, and prints the report\n"
    "when it ends.\n"
    "\n"
    "Options:\n"
    "  -o, --output DIR   run folder (created with mode 0700, parents too); default:\n"
    "                     ./pinscope-YYYYmmdd-HHMMSS (-2, -3, ... if taken)\n"
    "      --pin[=MODE]   transparent pinning: MODE 1 (the default: copies keep their\n"
    "                     pageable semantics), async (fully asynchronous copies), or\n"
    "                     0 (off); sets PINSCOPE_PIN for the job\n"
    "      --no-report    do not print the report at the end\n"
    "  -f, --force        use an -o folder that already holds traces (nothing is\n"
    "                     deleted; the new files are added next to the old ones)\n"
    "  -h, --help         this help\n"
    "\n"
    "Exit status: the job's. A job killed by a signal makes pinscope die of the same\n"
    "signal after the report. 125: pinscope failed before starting the job;\n"
    "126: CMD is not executable; 127: CMD was not found.\n"
    "Signals sent to pinscope with kill (TERM, HUP, QUIT, INT, USR1, USR2, CONT,\n"
    "WINCH) are forwarded to the job; Ctrl-C in the terminal reaches the job directly.\n"
    "\n"
    "Examples:\n"
    "  pinscope run -- python train.py\n"
    "  pinscope run -o runs/baseline --pin -- python train.py --epochs 1\n";

namespace {

struct RunOptions {
  std::string output;
  bool pin_set = false;
  std::string pin;
  bool report = true;
  bool force = false;
  std::vector<std::string> command;
};

// Parses argv; returns -1 to go on, else the exit status.
int ParseRunOptions(int argc, char** argv, RunOptions* options) {
  static const struct option kLong[] = {
      {"output", required_argument, nullptr, 'o'}, {"pin", optional_argument, nullptr, 'p'},
      {"no-report", no_argument, nullptr, 'n'},    {"force", no_argument, nullptr, 'f'},
      {"help", no_argument, nullptr, 'h'},         {nullptr, 0, nullptr, 0},
  };
  ResetGetopt();
  int c;
  // '+': stop at the first word that is not an option, so the job's own
  // options (`pinscope run python -u x.py`) are never taken for ours.
  while ((c = getopt_long(argc, argv, "+:o:fh", kLong, nullptr)) != -1) {
    switch (c) {
      case 'o':
        if (!*optarg) {
          PrintUsageError("run", "-o needs a folder name");
          return kRunExitLauncher;
        }
        options->output = optarg;
        break;
      case 'p': {
        std::string mode = optarg ? optarg : "1";
        if (mode == "1" || mode == "on") {
          options->pin = "1";
        } else if (mode == "async") {
          options->pin = "async";
        } else if (mode == "0" || mode == "off") {
          options->pin = "0";
        } else {
          PrintUsageError("run", "--pin expects 1, async or 0, not '" + mode + "'");
          return kRunExitLauncher;
        }
        options->pin_set = true;
        break;
      }
      case 'n':
        options->report = false;
        break;
      case 'f':
        options->force = true;
        break;
      case 'h':
        std::fputs(kRunUsage, stdout);
        return 0;
      default:
        PrintGetoptError("run", c, argv);
        return kRunExitLauncher;
    }
  }
  for (int i = optind; i < argc; ++i) options->command.push_back(argv[i]);
  if (options->command.empty()) {
    PrintUsageError("run", "no command given (pinscope run [options] -- CMD ARGS...)");
    return kRunExitLauncher;
  }
  return -1;
}

std::string CommandText(const std::vector<std::string>& command) {
  std::string text;
  for (const auto& word : command) {
    if (!text.empty()) text += ' ';
    text += ShellQuote(word);
  }
  return text;
}

// The end of a run: the report (unless --no-report) and where the trace is.
void PrintRunSummary(const RunOptions& options, const RunFolder& folder) {
  size_t new_traces = 0;
  for (const auto& name : TraceFileNames(folder.absolute)) {
    if (!std::binary_search(folder.existing_traces.begin(), folder.existing_traces.end(), name)) {
      ++new_traces;
    }
  }
  if (new_traces == 0) {
    // The shim opens a process's file on its first recorded event, so a job
    // that never calls the CUDA runtime leaves the folder without traces.
    std::fprintf(stderr,
                 "pinscope: no trace recorded in %s: the job made no CUDA call that pinscope "
                 "records\n",
                 folder.path.c_str());
    return;
  }
  // Names resolved here, where the binaries are, so a report elsewhere has them.
  SymbolizeAfterRun(folder.path);
  if (options.report) {
    ReportOptions report;
    report.run_dir = folder.path;  // the launcher's cwd is the user's: names read as typed
    report.color = ResolveColor(ColorMode::kAuto, STDERR_FILENO);
    std::cout.flush();
    try {
      RunReport(report, std::cerr, std::cerr);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "pinscope: the report failed: %s\n", e.what());
    }
    std::cerr.flush();
  }
  const std::string quoted = ShellQuote(folder.path);
  std::fprintf(stderr, "pinscope: trace in %s (pinscope report %s)\n", quoted.c_str(),
               quoted.c_str());
}

}  // namespace

int RunCommand(int argc, char** argv) {
  RunOptions options;
  if (int status = ParseRunOptions(argc, argv, &options); status >= 0) return status;
  // A value the shim would replace by its default is a run measuring
  // something else than asked: stop before anything is created or started.
  if (const auto bad = CheckShimEnvironment(options.pin_set); !bad.empty()) {
    for (const std::string& complaint : bad) {
      std::fprintf(stderr, "pinscope run: %s\n", complaint.c_str());
    }
    std::fprintf(stderr, "pinscope run: the job was not started (docs/environment.md)\n");
    return kRunExitLauncher;
  }

  std::string shim, error;
  if (!FindShimLibrary(&shim, &error)) {
    std::fprintf(stderr, "pinscope run: %s\n", error.c_str());
    return kRunExitLauncher;
  }

  RunFolder folder;
  bool ok = options.output.empty()
                ? CreateDefaultRunFolder(std::time(nullptr), &folder, &error)
                : PrepareRunFolder(options.output, options.force, &folder, &error);
  if (!ok) {
    std::fprintf(stderr, "pinscope run: %s\n", error.c_str());
    return kRunExitLauncher;
  }
  if (!folder.existing_traces.empty()) {
    std::fprintf(stderr,
                 "pinscope run: warning: %s already holds %zu trace file(s); they are kept and "
                 "this run's files are added next to them under new names. The report keeps "
                 "the run most files belong to and lists the others as another run's.\n",
                 folder.path.c_str(), folder.existing_traces.size());
  }
  std::string warning;
  const std::string calibration = CopyCalibrationInto(folder.absolute, &warning);
  if (!warning.empty()) std::fprintf(stderr, "pinscope run: warning: %s\n", warning.c_str());

  LaunchSpec spec;
  spec.argv = options.command;
  spec.env.emplace_back("LD_PRELOAD", BuildLdPreload(shim, std::getenv("LD_PRELOAD")));
  spec.env.emplace_back("PINSCOPE_OUT", folder.absolute);
  spec.env.emplace_back("PINSCOPE_RUN_ID", NewRunId());
  if (options.pin_set) spec.env.emplace_back("PINSCOPE_PIN", options.pin);
  // The Python hook times the DataLoader's stages (docs/python-hook.md).
  if (const char* off = std::getenv("PINSCOPE_PYTHON_HOOK"); !(off && !std::strcmp(off, "0"))) {
    const std::string hook = FindPythonHookDir();
    if (!hook.empty()) {
      spec.env.emplace_back("PYTHONPATH", BuildPythonPath(hook, std::getenv("PYTHONPATH")));
    } else {
      std::fprintf(stderr,
                   "pinscope run: warning: the Python hook (share/pinscope/python) is not next "
                   "to this executable: DataLoader stages are inferred, not timed\n");
    }
  }
  spec.set_root_pid = true;

  std::fprintf(stderr, "pinscope: recording %s into %s\n", CommandText(options.command).c_str(),
               folder.path.c_str());
  const LaunchResult result = Launch(spec);

  switch (result.kind) {
    case LaunchResult::Kind::kExecFailed: {
      const bool not_found = result.error == ENOENT || result.error == ENOTDIR;
      const bool bare_name = options.command[0].find('/') == std::string::npos;
      if (not_found && bare_name) {
        std::fprintf(stderr, "pinscope run: %s: command not found\n", options.command[0].c_str());
      } else {
        std::fprintf(stderr, "pinscope run: cannot execute %s: %s\n", options.command[0].c_str(),
                     std::strerror(result.error));
      }
      // Nothing ran: take back what this launcher created (only that).
      if (!calibration.empty()) unlink((folder.absolute + "/calibration.json").c_str());
      if (folder.created) rmdir(folder.absolute.c_str());
      return not_found ? kRunExitNotFound : kRunExitCannotExecute;
    }
    case LaunchResult::Kind::kForkFailed:
      std::fprintf(stderr, "pinscope run: cannot start the job: %s\n", std::strerror(result.error));
      if (!calibration.empty()) unlink((folder.absolute + "/calibration.json").c_str());
      if (folder.created) rmdir(folder.absolute.c_str());
      return kRunExitLauncher;
    case LaunchResult::Kind::kSignaled:
      std::fprintf(stderr, "pinscope: the job was killed by signal %d (%s)%s\n", result.signal,
                   strsignal(result.signal), result.core_dumped ? ", core dumped" : "");
      PrintRunSummary(options, folder);
      DieOfSignal(result.signal);
    case LaunchResult::Kind::kExited:
      break;
  }
  PrintRunSummary(options, folder);
  return result.exit_code;
}

}  // namespace pinscope::cli
