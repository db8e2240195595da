// One root thread's copies and syncs for the step model
// (pipeline_analysis.h), folded while the run streams into segments: the
// calls from one possible step boundary to the next, each a handful of sums.
// A possible boundary is every DataLoader.__next__ start on the thread (the
// steps when pinscope's Python hook ran) and every H2D copy of at least
// kBoundaryBytes (the steps without it are the copies of at least half the
// thread's largest, at least kMinBatchBytes). The steady window the model
// chooses at Finish always starts and ends at a step, hence at a segment's
// start: its sums over the segments inside are the sums over the calls
// inside, exactly, and every call of the run counts.
//
// Memory: at most kSegmentsKept segments with boundaries per thread. When
// they are full, adjacent segments are merged pairwise and each segment
// holds twice as many boundaries from then on (stride()): the resolution
// halves as the run's length doubles, the same over the whole run. The
// rule is step_segments.h's, which the root's step clock (step_spans.h)
// follows too: a training thread's calls and the root's spans then have
// the same segments. The window is then chosen at the segments'
// resolution: its edges move to a segment's start, by less than one
// segment, the figures stay exact sums over the steps inside it
// (docs/pipeline-model.md, "Memory"). The last kDrawnCalls
// calls are kept as they are for the HTML timeline, and the newest of them
// (at most kBufferedCalls) wait there until the thread's next __next__ span
// arrives: a span is written when it ends, after the calls inside it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

namespace pinscope {

class StepCalls {
 public:
  // A copy or sync: what the step model reads of it.
  struct Call {
    uint64_t start = 0, end = 0;
    uint64_t cpu_begin = 0;  // the thread's CPU time at entry (0: not recorded)
    uint64_t cpu_ns = 0;     // its CPU time inside the call
    uint64_t bytes = 0, call_id = 0;
    uint32_t faults = 0;  // page faults inside the call (saturated)
    bool h2d : 1 = false, copy : 1 = false, pinned_by_program : 1 = false;
    bool pinned_by_pinscope : 1 = false, shm : 1 = false, fresh : 1 = false;
    bool skipped_budget : 1 = false;
  };
  // The H2D copies of one size (at least kBoundaryBytes) in a segment: a
  // batch copy or not depending on the window's largest copy.
  struct Copies {
    uint64_t bytes = 0;
    uint32_t count = 0, pinned = 0, pinscope = 0, shm = 0, fresh = 0, skipped = 0;
    uint32_t device = 0;  // copies with a device record (device_ns, wait_ns)
    uint64_t wall_ns = 0, cpu_ns = 0, faults = 0, wait_ns = 0, device_ns = 0;
  };
  // The calls from one possible boundary (start) to the next.
  struct Segment {
    uint64_t start = 0;  // 0: before the thread's first boundary
    uint64_t sync_ns = 0;
    uint64_t other_copy_ns = 0;            // copies that cannot be batch copies
    uint64_t first_cpu = 0, last_cpu = 0;  // cpu_begin of the first and last call with one
    uint32_t usage_calls = 0;              // calls with a cpu_begin
    // Boundaries in it: 1, stride() once merged, 0 before the first.
    uint32_t merged = 1;
    // Sizes of at least half the largest here (a smaller one is no batch
    // copy in any window this segment is in), ascending, at most kSizesKept.
    std::vector<Copies> copies;
  };

  static constexpr uint64_t kMinBatchBytes = 1ull << 20;
  // A copy of half kMinBatchBytes can be a batch copy (at least half the
  // window's largest): every such copy is a boundary.
  static constexpr uint64_t kBoundaryBytes = kMinBatchBytes / 2;
  static constexpr size_t kSegmentsKept = 8192;
  static constexpr size_t kBufferedCalls = 4096;
  static constexpr size_t kDrawnCalls = 8192;
  static constexpr size_t kSizesKept = 8;
  // __next__ spans waiting for the thread's next call (their release).
  static constexpr size_t kPendingKept = 1024;

  // A copy or sync of the thread, in the thread's order.
  void Add(const Call& call);
  // A __next__ span [start, end) of the thread, when it arrives. `key`
  // names it in released(): the CPU time from its end to the next call's
  // entry (the release of the previous batch).
  void AddNext(uint64_t start, uint64_t end, uint64_t finish_cpu, size_t key);
  // Folds the waiting calls (at Finish).
  void Flush();
  // A batch copy's device times (the stream wait beyond the launch, the
  // transfer), once its records are all joined; the copy must be folded
  // already (its start before frontier()).
  void AddDeviceTime(uint64_t start, uint64_t bytes, uint64_t wait_ns, uint64_t device_ns);
  // Calls that start from here on may still be waiting (not in a segment).
  uint64_t frontier() const { return waiting_ == 0 ? UINT64_MAX : drawn_[Waiting(0)].start; }

  const std::deque<Segment>& segments() const { return segments_; }
  // The largest H2D copy of the thread (any size).
  uint64_t largest_h2d() const { return largest_h2d_; }
  // Boundaries per segment: 1 until the segments were first full.
  uint32_t stride() const { return stride_; }
  // Whether the thread made any call.
  bool empty() const { return calls_ == 0; }
  // (key, release ns) of the __next__ spans whose next call came.
  bool has_released() const { return !released_.empty(); }
  std::vector<std::pair<size_t, uint64_t>> TakeReleased() { return std::exchange(released_, {}); }
  // The last kDrawnCalls calls in order, and whether earlier ones were dropped.
  std::vector<Call> Drawn() const;
  bool drawn_dropped() const { return drawn_dropped_; }

  // Adds b (the later segment) into a.
  static void Merge(Segment& a, const Segment& b);

 private:
  void Fold(const Call& call);
  void Open(uint64_t start);
  struct Pending {
    size_t key;
    uint64_t end, finish_cpu;
  };
  std::deque<Segment> segments_;
  // The last calls, a ring once full (the oldest at drawn_next_); the
  // newest waiting_ of them wait to be folded (kBufferedCalls < kDrawnCalls:
  // a waiting call is never overwritten).
  std::vector<Call> drawn_;
  size_t drawn_next_ = 0;
  size_t waiting_ = 0;
  // Index in drawn_ of the i-th oldest waiting call.
  size_t Waiting(size_t i) const {
    return (drawn_next_ + drawn_.size() - waiting_ + i) % drawn_.size();
  }
  void FoldOldest();
  bool drawn_dropped_ = false;
  std::vector<Pending> pending_;
  std::vector<std::pair<size_t, uint64_t>> released_;
  uint64_t largest_h2d_ = 0;
  uint64_t calls_ = 0;
  uint32_t stride_ = 1;
};

}  // namespace pinscope
