// Where a long command is: the stages report, export and diff go through,
// told to whoever shows it (the CLI's progress line on a terminal,
// cli/progress_line.h). The analyzer only calls these hooks; it never
// decides whether anything is shown, and it calls them rarely (the replay
// every ReplayOptions::kProgressEveryPackets packets), so an implementation
// may read a clock in each call.
#pragma once

#include <cstdint>
#include <string_view>

namespace pinscope {

class Progress {
 public:
  virtual ~Progress() = default;
  // A new stage: "replaying", "analysing", "writing", ... (short, lower
  // case, no trailing punctuation). Bytes reported later belong to it.
  virtual void Stage(std::string_view stage) = 0;
  // Trace bytes consumed so far of `total_bytes` (the files' sizes when
  // listed), and packets replayed so far, in the current stage.
  virtual void Bytes(uint64_t done_bytes, uint64_t total_bytes, uint64_t packets) = 0;
};

}  // namespace pinscope
