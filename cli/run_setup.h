// What `pinscope run` prepares before it starts the job: where libpinscope.so
// is, the run folder (created 0700, never reused silently), the run id and
// the job's LD_PRELOAD. No process is started here (that is launcher.h).
#pragma once

#include <cstddef>
#include <ctime>
#include <string>
#include <vector>

namespace pinscope::cli {

// The running executable (/proc/self/exe), resolved; empty if unknown.
std::string SelfExePath();

// Places bin/pinscope looks for the shim, in order, for an executable at
// `exe_path`: ../<install libdir>/, ../lib/, ../lib64/, ../lib/<multiarch>/.
std::vector<std::string> ShimCandidates(const std::string& exe_path);

// Finds libpinscope.so: $PINSCOPE_LIB if set (it must exist), else the
// first of ShimCandidates(SelfExePath()) that exists. Returns an absolute
// path; on failure false with *error saying what was tried. A path holding a
// space or ':' is refused: LD_PRELOAD cannot carry it.
bool FindShimLibrary(std::string* path, std::string* error);

// The folder holding pinscope's Python hook (sitecustomize.py and
// pinscope_hook.py, python/ in the source tree): $PINSCOPE_PYTHON_DIR if set,
// else ../share/pinscope/python next to this executable (install and build
// trees). Empty when not found: the job then runs without DataLoader timing.
std::string FindPythonHookDir();

// The installed docs, ../share/doc/pinscope next to this executable when it
// holds cli.md (an install: the wheel, the .deb); empty in the build tree,
// whose messages name docs/ (analyzer/common/doc_path.h).
std::string FindInstalledDocDir();

// PYTHONPATH for the job: the hook's folder first, then the user's entries.
std::string BuildPythonPath(const std::string& hook_dir, const char* existing);

// LD_PRELOAD for the job: `shim` first, then the user's entries (in their
// order, minus any earlier copy of `shim`). `existing` may be null.
std::string BuildLdPreload(const std::string& shim, const char* existing);

// A fresh run id: "<host>-<YYYYmmdd-HHMMSS>-<launcher pid>-<8 random hex>".
std::string NewRunId();

// "pinscope-YYYYmmdd-HHMMSS" (local time).
std::string DefaultRunDirName(std::time_t now);

struct RunFolder {
  std::string path;      // as the user would type it (relative if given so)
  std::string absolute;  // for PINSCOPE_OUT
  bool created = false;  // this launcher made the leaf directory
  // *.pstrace files already there (only with --force): a run's own files
  // are those that were not.
  std::vector<std::string> existing_traces;
};

// Creates `<cwd>/pinscope-YYYYmmdd-HHMMSS` (then -2, -3, ... if taken) with
// mode 0700; mkdir's EEXIST makes the choice race-free.
bool CreateDefaultRunFolder(std::time_t now, RunFolder* folder, std::string* error);

// -o DIR: creates DIR (and missing parents) with mode 0700, or accepts an
// existing writable directory. One that already holds *.pstrace files is
// refused unless `force`; nothing in it is ever moved or deleted.
bool PrepareRunFolder(const std::string& dir, bool force, RunFolder* folder, std::string* error);

// Names of the *.pstrace regular files directly in `dir` (empty if
// unreadable), sorted.
std::vector<std::string> TraceFileNames(const std::string& dir);

// Copies the calibration found at DefaultCalibrationPath() (if any, and if it
// parses) to RUN/calibration.json so the run's report is self-contained. An
// existing RUN/calibration.json is kept. Returns the path copied from, empty
// if none; a warning for the user goes to *warning.
std::string CopyCalibrationInto(const std::string& run_dir, std::string* warning);

// Quotes `s` for a POSIX shell if it needs it (for hints the user may paste).
std::string ShellQuote(const std::string& s);

}  // namespace pinscope::cli
