// `pinscope`: parses the subcommand name and dispatches to its file (see
// commands.h); nothing else lives here. Usage errors exit 2 (`run` uses 125,
// see run_command.cc).
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include <google/protobuf/stubs/logging.h>

#include "analyzer/common/doc_path.h"
#include "cli/cli_common.h"
#include "cli/commands.h"
#include "cli/run_setup.h"

namespace {

using pinscope::cli::kExitUsage;

struct Subcommand {
  const char* name;
  const char* summary;
  const char* usage;
  int (*main)(int, char**);
};

const Subcommand kSubcommands[] = {
    {"run", "run a job with the shim preloaded, then print its report", pinscope::cli::kRunUsage,
     pinscope::cli::RunCommand},
    {"report", "print the bottleneck report of a run folder", pinscope::cli::kReportUsage,
     pinscope::cli::ReportCommand},
    {"export", "write a run as a Perfetto timeline", pinscope::cli::kExportUsage,
     pinscope::cli::ExportCommand},
    {"diff", "compare two runs of the same job", pinscope::cli::kDiffUsage,
     pinscope::cli::DiffCommand},
    {"calibrate", "measure this machine's pageable and pinned copy bandwidth",
     pinscope::cli::kCalibrateUsage, pinscope::cli::CalibrateCommand},
    {"tune", "measure DataLoader settings the model picks; print the fastest",
     pinscope::cli::kTuneUsage, pinscope::cli::TuneCommand},
    {"symbolize", "name a run's native frames from the binaries here (RUN/symbols.pb)",
     pinscope::cli::kSymbolizeUsage, pinscope::cli::SymbolizeCommand},
};

const Subcommand* Find(const char* name) {
  for (const auto& s : kSubcommands) {
    if (!std::strcmp(s.name, name)) return &s;
  }
  return nullptr;
}

void PrintMainUsage(FILE* to) {
  std::fprintf(to,
               "Usage: pinscope COMMAND [options] [args]\n"
               "\n"
               "pinscope finds where a PyTorch job waits on host<->device copies.\n"
               "\n"
               "Commands:\n");
  for (const auto& s : kSubcommands) std::fprintf(to, "  %-10s %s\n", s.name, s.summary);
  std::fprintf(to,
               "  %-10s %s\n"
               "\n"
               "  pinscope --version    print the version\n"
               "\n"
               "Quick start:\n"
               "  pinscope run -- python train.py     # trace the job, report at the end\n"
               "  pinscope report pinscope-20261129-101500\n"
               "\n"
               "See %s for every option, exit status and environment variable.\n",
               "help", "show this help, or a command's: pinscope help COMMAND",
               pinscope::DocPath("cli.md").c_str());
}

int Help(int argc, char** argv) {
  if (argc < 2) {
    PrintMainUsage(stdout);
    return 0;
  }
  if (argc > 2) {
    std::fprintf(stderr, "pinscope help: one command at a time\n");
    return kExitUsage;
  }
  if (!std::strcmp(argv[1], "help")) {
    PrintMainUsage(stdout);
    return 0;
  }
  if (const Subcommand* s = Find(argv[1])) {
    std::fputs(s->usage, stdout);
    return 0;
  }
  std::fprintf(stderr,
               "pinscope help: unknown command '%s' (commands: run, report, export, "
               "diff, calibrate, tune, symbolize, help)\n",
               argv[1]);
  return kExitUsage;
}

int Dispatch(int argc, char** argv) {
  if (argc < 2) {
    PrintMainUsage(stderr);
    return kExitUsage;
  }
  const char* command = argv[1];
  if (!std::strcmp(command, "--version") || !std::strcmp(command, "-V") ||
      !std::strcmp(command, "version")) {
    std::printf("pinscope %s\n", PINSCOPE_VERSION);
    return 0;
  }
  if (!std::strcmp(command, "help") || !std::strcmp(command, "--help") ||
      !std::strcmp(command, "-h")) {
    return Help(argc - 1, argv + 1);
  }
  if (const Subcommand* s = Find(command)) return s->main(argc - 1, argv + 1);
  if (command[0] == '-') {
    std::fprintf(stderr,
                 "pinscope: unknown option '%s'; options come after the command "
                 "(pinscope run -o DIR -- CMD)\nTry 'pinscope help'.\n",
                 command);
  } else {
    std::fprintf(stderr,
                 "pinscope: unknown command '%s'\nTry 'pinscope help'. To trace a "
                 "program: pinscope run -- %s ...\n",
                 command, command);
  }
  return kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  // The trace reader reports a packet that fails to parse itself, naming the
  // file and byte offset; libprotobuf's own stderr lines about it are noise.
  google::protobuf::SetLogHandler([](google::protobuf::LogLevel, const char*, int,
                                     const std::string&) {});
  pinscope::SetInstalledDocDir(pinscope::cli::FindInstalledDocDir());
  try {
    return Dispatch(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pinscope: internal error: %s\n", e.what());
    return kExitUsage;
  }
}
