// What pinscope's device-record windows cost the job's loop, measured inside
// the process (docs/device-activity.md, "What a window costs the loop").
//
// While CUPTI is attached every kernel launch costs more, and on a job of
// 2,000 kernels a step the steps stay slower for a second or more after the
// detach (H100, 2026-12-05: docs/benchmarks.md). Across processes the GPU
// machine's spread (5-25%) hides a cost of 1%; inside one, the steps before
// a window, in it and after it ran on the same machine. So: the loop's
// step is the interval between consecutive copies from its copy call stack
// (the stack whose copies cover the most time: count x span), and each
// window's cost is the time the loop took from its first copy in the window
// to its first copy after it, and from there over kAfterNs, beyond what as
// many intervals between its copies took around the window: the mean
// interval of the kSideNs before the window and of the kSideNs from kAfterNs
// past its detach (the mean of the sides there are: a loop's step drifts
// over seconds). Intervals, not steps: a loop that copies two tensors a step
// from one line has two intervals a step, and the ratio holds. The time
// from attach to the first copy in the window is not counted (the cost of a
// switch at a call that is not the loop's copy stays in the own-cost line's
// CUPTI switches). tools/bench/window_cost.py
// computes the same from a trace (its test and this one's agree on a trace
// recorded on the H100).
//
// Only the root process (the one that runs the loop; a forked worker copies
// nothing). Memory: the copies of the last kSideNs and those near a window,
// a few bytes each, and one counter per call stack.
#pragma once

#include <cstdint>
#include <deque>
#include <unordered_map>
#include <vector>

#include "analyzer/replay/replay.h"

namespace pinscope {

struct WindowEffect {
  uint64_t attach_ns = 0, detach_ns = 0;  // trace time
  uint64_t baseline_interval_ns = 0;      // between the loop's copies, around the window
  int baseline_sides = 0;                 // 1 or 2
  uint32_t intervals_in = 0, intervals_after = 0;
  uint64_t time_in_ns = 0, time_after_ns = 0;
  int64_t excess_in_ns = 0, excess_after_ns = 0;
  // The loop paused around the window (an evaluation, a checkpoint, the
  // turns of tools/bench/turns.py): its longest interval in a side or after
  // the window was over kPauseTimesMean its side's mean interval and over
  // kPauseShare of the side's span. The figures above then measure the
  // pause, not the window: none is stated.
  bool paused = false;
  uint64_t longest_interval_ns = 0;  // the longest such interval, where paused
  uint64_t length_ns() const { return detach_ns - attach_ns; }
  int64_t excess_ns() const { return excess_in_ns + excess_after_ns; }
  // How much slower the loop ran: time / (intervals x baseline) - 1.
  double SlowdownIn() const { return Slowdown(time_in_ns, intervals_in); }
  double SlowdownAfter() const { return Slowdown(time_after_ns, intervals_after); }

 private:
  double Slowdown(uint64_t t, uint32_t n) const {
    return n && baseline_interval_ns
               ? static_cast<double>(t) / (double(n) * baseline_interval_ns) - 1
               : 0;
  }
};

class WindowCostAnalysis : public Analysis {
 public:
  static constexpr uint64_t kAfterNs = 1500000000;
  static constexpr uint64_t kSideNs = 1500000000;
  // What counts as a pause (WindowEffect::paused). A loop making k copies
  // a step from one line has intervals up to k times its mean, each a step
  // long: a step of a loop that copies once a step is never one.
  static constexpr double kPauseTimesMean = 4;
  static constexpr double kPauseShare = 0.05;

  void OnCopy(const CopyContext& copy) override;
  void OnRecording(const Event& event, const trace::DeviceRecording& recording) override;
  void Finish(const RunInfo& run) override;

  // The root's windows that hold loop steps, in time order.
  const std::vector<WindowEffect>& windows() const { return windows_; }
  // The loop's copies: how many steps, over how long (first to last copy).
  uint32_t loop_steps() const { return loop_steps_; }
  uint64_t loop_ns() const { return loop_ns_; }
  // The gap the last window planned until the next one (its Recording's
  // planned_ns at the detach; 0: none planned).
  uint64_t period_gap_ns() const { return period_gap_ns_; }

 private:
  struct Copy {
    uint64_t t;
    uint64_t stack;
  };
  struct StackSpan {
    uint64_t count = 0, first = 0, last = 0;
  };
  // Copies kept for one window at most (16 MiB): a CUPTI attached
  // throughout (PINSCOPE_CUPTI_WINDOW_MS=0) has no window to measure.
  static constexpr size_t kMaxWindowCopies = size_t{1} << 20;
  struct Window {
    uint64_t attach = 0, detach = 0;  // detach 0 while open
    std::vector<Copy> copies;         // from attach - 2 kSideNs to detach + kAfterNs + 2 kSideNs
    bool overflow = false;
  };
  struct PerProcess {
    std::unordered_map<uint64_t, StackSpan> stacks;
    std::deque<Copy> recent;  // the last 2 kSideNs of copies
    std::vector<Window> windows;
    uint64_t planned_gap = 0;
  };
  PerProcess& Of(const ProcessState& process);

  std::unordered_map<int, PerProcess> processes_;
  std::vector<WindowEffect> windows_;
  uint32_t loop_steps_ = 0;
  uint64_t loop_ns_ = 0;
  uint64_t period_gap_ns_ = 0;
};

}  // namespace pinscope
