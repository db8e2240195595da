// One rep of one `pinscope tune` trial: the job under libpinscope.so (as
// `pinscope run` starts it) in a fresh run folder, with the trial's settings
// in its environment, stopped by the Python hook after N batches; what it
// measured (the hook's throughput line, the job's CPU time) and its report.
// Contract: single-threaded caller (the launcher's).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "cli/launcher.h"

namespace pinscope::cli {

struct RepSpec {
  std::vector<std::string> command;
  std::string folder;  // absolute; created here (0700), must not exist
  std::vector<std::pair<std::string, std::string>> env;  // the trial's settings
  std::string shim, hook_dir;
  int batches = 60, warmup = 10;
  unsigned timeout_s = 0;
};

struct RepResult {
  LaunchResult launch;
  bool folder_ok = false;
  std::string error;  // the folder could not be made
  double wall_s = 0;
  double cpu_s = 0;            // user + system of the job and the children it reaped
  uint64_t max_rss_bytes = 0;  // the largest process among everything the launcher reaped so far
  bool rate = false;           // the hook wrote its line
  double samples_per_s = 0, batches_per_s = 0;
  uint64_t batches = 0;  // taken by the loop
  std::string why;       // the hook's "stop_after" or "exit"
  bool traced = false;   // the folder holds trace files
};

RepResult RunRep(const RepSpec& spec);

// What a rep's failure was, for the table: "exit 1", "killed by SIGSEGV",
// "timed out after 40 s", "no throughput line (the loop took 3 batches)".
std::string RepFailure(const RepResult& r, unsigned timeout_s);

// `pinscope report --json` of a run folder, parsed; null when nothing could
// be reported (`error` says why).
nlohmann::json ReportJson(const std::string& folder, std::string* error);

// The last lines of a file (the job's stderr), for a failure message.
std::string TailOf(const std::string& path, int lines);

}  // namespace pinscope::cli
