// What each run of a diff did, and the comparison put on the same footing:
// the work (batches, copies, bytes, steps, the command line) and the copy
// figures per batch and per second, so two runs of different length compare.
// Reads only the two reports and main-loop rates (diff.h); no replay.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "analyzer/common/format.h"
#include "analyzer/diff/diff.h"

namespace pinscope {

// One run's amount of work.
struct RunWork {
  uint64_t duration_ns = 0;  // first event to last, all processes
  // The main loop's batches: its H2D copies of the largest recurring size
  // (MainLoopRate); 0 when none was found.
  uint64_t batches = 0;
  // The pipeline model's steady window: steps and the step; 0 without a model.
  uint64_t steps = 0;
  double step_ns = 0;
  uint64_t batch_bytes = 0;  // H2D bytes per step in that window
  // Every copy of the run.
  uint64_t copies = 0;
  uint64_t bytes = 0;
  uint64_t blocked_ns = 0;
  uint64_t loss_ns = 0;              // pageable staging estimate
  std::vector<std::string> command;  // the root process's argv
};

RunWork WorkOf(const DiffSide& side);

// Two runs' work compared. A difference above kWorkTolerance in batches or
// in bytes copied is "different work".
struct WorkComparison {
  static constexpr double kWorkTolerance = 0.01;
  bool same_command = true;  // identical argv
  bool same_program = true;  // the same program and script (argv[0], argv[1])
  bool same_work = true;
  double batches_ratio = 0;  // B / A; 0 when either has none
  double bytes_ratio = 0;
  double duration_ratio = 0;
  // Plain sentences for the text diff, most important first.
  std::vector<std::string> notes;
};

WorkComparison CompareWork(const RunWork& a, const RunWork& b);

// The text diff's "Work" section (after the header) and its "Per unit of
// work" section (per batch and per second, and the model's step).
void WriteWorkSection(const RunWork& a, const RunWork& b, const WorkComparison& c,
                      const Style& style, std::ostream& out);
void WriteNormalizedSection(const RunWork& a, const RunWork& b, const Style& style,
                            std::ostream& out);

// JSON "work": {a, b, same_command, same_program, same_work, ratios, notes,
// per_batch, per_second}; docs/report.md, "diff JSON schema".
nlohmann::ordered_json WorkJson(const RunWork& a, const RunWork& b, const WorkComparison& c);

}  // namespace pinscope
