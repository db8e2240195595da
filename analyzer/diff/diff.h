// `pinscope diff RUN_A RUN_B`: the same job before and after a change. Each
// run is replayed once into the report model (report.h) plus the main-loop
// throughput consumer below; the comparison reads only their results (the
// findings' savings, the copy rows, the verdicts), never re-analyses.
// Text (100 columns) and JSON (schema_version 1, docs/report.md "diff").
#pragma once

#include <cstdint>
#include <iosfwd>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "analyzer/diff/diff_command.h"
#include "analyzer/replay/replay.h"

namespace pinscope {

class Report;

// Version of the JSON diff schema (docs/report.md "diff").
inline constexpr int kDiffSchemaVersion = 1;

// Throughput of the main loop: the H2D copies of the largest recurring size
// (at least two copies of exactly that many bytes) made by the root
// process's main thread, per second between the first and the last of them:
// (copies - 1) / (last - first). One such copy per batch is the usual shape
// of a training loop, so this is batches per second.
struct MainLoopRate {
  bool found = false;
  uint32_t pid = 0;
  uint32_t tid = 0;
  uint64_t copy_bytes = 0;  // the size counted
  uint64_t copies = 0;      // copies of that size
  uint64_t first_ns = 0;    // entry time of the first and the last one
  uint64_t last_ns = 0;
  uint64_t span_ns() const { return last_ns - first_ns; }
  // 0 when not found or the span is 0.
  double PerSecond() const;
};

// Replay consumer behind MainLoopRate. Memory: per process main thread, at
// most kMaxSizes distinct copy sizes (the smallest are dropped first: only
// the largest recurring size matters).
class MainLoopAnalysis : public Analysis {
 public:
  static constexpr size_t kMaxSizes = 4096;

  void OnCopy(const CopyContext& copy) override;
  void Finish(const RunInfo& run) override;

  const MainLoopRate& rate() const { return rate_; }

 private:
  struct SizeStats {
    uint64_t copies = 0;
    uint64_t first_ns = 0;
    uint64_t last_ns = 0;
  };
  // Process index -> size -> its copies on that process's main thread.
  std::unordered_map<int, std::map<uint64_t, SizeStats>> sizes_;
  MainLoopRate rate_;
};

// One run of a diff: its report (evaluated) and its main-loop rate.
struct DiffSide {
  const Report* report = nullptr;
  MainLoopRate main_loop;
};

// The verdict's class as a short name: the finding's title ("pageable
// staging"), "not input-bound" or "no copies".
std::string VerdictTitle(const Report& report);

// The comparison for a person (100 columns, colour when `color`).
void WriteTextDiff(const DiffSide& a, const DiffSide& b, bool color, std::ostream& out);
// The comparison as JSON (schema_version 1).
nlohmann::ordered_json JsonDiff(const DiffSide& a, const DiffSide& b);

// `pinscope diff` (diff_command.h): replays both runs and writes the comparison.
int DiffRuns(const DiffOptions& options, bool color, std::ostream& out, std::ostream& err);

}  // namespace pinscope
