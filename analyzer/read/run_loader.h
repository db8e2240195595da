// Finds the process files of a run folder and checks their headers before the
// replay: unreadable, empty, headerless, newer-format, duplicated and
// other-run files become Problems; the rest form the run to replay.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "analyzer/common/status.h"
#include "trace.pb.h"

namespace pinscope {

// One accepted process file and its header.
struct RunFile {
  std::string path;
  trace::ProcessHeader header;
  uint64_t header_timestamp_ns = 0;
  // Process start for ordering: header.start_mono_ns, else the header
  // packet's timestamp.
  uint64_t start_ns = 0;
  // Size of the file when it was listed (the total of a progress line).
  uint64_t bytes = 0;
};

struct RunListing {
  std::string run_dir;
  std::string run_id;
  // Accepted files, ordered by (start_ns, pid, path): the replay's order.
  std::vector<RunFile> files;
  // Problems found while listing, in file-name order.
  std::vector<Problem> problems;
  size_t trace_files_found = 0;
};

// True for `<pid>.pstrace` and `<pid>.<n>.pstrace`-like names (any *.pstrace).
bool IsTraceFileName(const std::string& name);

// Lists `run_dir`. Returns an error Status (code kNoRun) when the folder is
// missing or holds no *.pstrace file; otherwise ok, with problems in
// listing->problems and possibly zero accepted files.
Status ScanRun(const std::string& run_dir, RunListing* listing);

}  // namespace pinscope
