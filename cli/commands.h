// The subcommands of `pinscope`: one entry point and one usage text each.
// main.cc parses the subcommand name and dispatches; every subcommand parses
// its own options (argv[0] is the subcommand name) and returns the exit code.
#pragma once

#include <string>

namespace pinscope::cli {

int RunCommand(int argc, char** argv);        // run_command.cc
int ReportCommand(int argc, char** argv);     // report_command.cc
int ExportCommand(int argc, char** argv);     // export_command.cc
int DiffCommand(int argc, char** argv);       // diff_command.cc
int CalibrateCommand(int argc, char** argv);  // calibrate_command.cc
int TuneCommand(int argc, char** argv);       // tune_command.cc
int SymbolizeCommand(int argc, char** argv);  // symbolize_command.cc

extern const char kRunUsage[];
extern const char kReportUsage[];
extern const char kExportUsage[];
extern const char kDiffUsage[];
extern const char kCalibrateUsage[];
extern const char kTuneUsage[];
extern const char kSymbolizeUsage[];

// Names the native frames of a finished run into RUN/symbols.pb; a failure
// is one line on stderr (the report does without). symbolize_command.cc.
void SymbolizeAfterRun(const std::string& run_dir);

}  // namespace pinscope::cli
