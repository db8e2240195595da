// The root's loader spans (pinscope's Python hook: LOADER_NEXT, FETCH,
// PIN, RECV), its workers' fetches, pinscope's registrations and the root's
// thread samples for the step model (pipeline_analysis.h), folded while the
// run streams into the segments of the root's step clock: the time from
// one possible step boundary to the next. A possible boundary is what it is
// for a thread's calls (step_calls.h), on any thread of the root: every
// DataLoader.__next__ start and every H2D copy of at least
// StepCalls::kBoundaryBytes. The steady window the model chooses at Finish
// starts and ends at a step, hence at a segment's start: its sums over the
// segments inside are the sums over the spans inside, and every span of
// the run counts.
//
// A segment holds, per (thread, loader), the __next__ spans that start in
// it: how many, how many found the queue empty, their wall and CPU time,
// the first one's start and CPU time, the releases after them and the
// hand-over time their receives waited for a busy worker; and per (thread,
// kind) the sums of the other spans and of the registrations that start in
// it. The root's threads' samples are kept per thread, the last in each
// segment and the last at its start: a thread's CPU time at any segment
// start, as the samples give it. The workers' fetch times, whose medians
// the model takes, are kept as they are up to kFetchesExact, then as a
// deterministic uniform sample of the run's (fetches()); their number per
// segment is exact.
//
// Order: a span is written when it ends and the run's files are merged by
// time, so a __next__ arrives after the spans (of its own and other
// threads and processes) that started inside it. What arrives waits, at
// most kWaiting events, and is folded in the order of the starts, a
// boundary before what starts at the same time. What needs that order is
// joined as it is folded: a receive's __next__ (the thread's last to start
// at or before it), and whether the worker that made its batch was inside
// another fetch then; each __next__'s off-CPU time less its receives (the
// queue was empty); each epoch's first __next__. An event that arrives
// after events more than kWaiting later were folded (a __next__ that lasts
// minutes while samples stream) is folded into the segment its start falls
// in: a late __next__ opens no segment, and late events join nothing
// (their sums count all the same).
//
// Memory: at most kSegmentsKept segments with boundaries, merged pairwise
// by the rule StepCalls merges by (step_segments.h), so a root whose
// boundaries are one thread's has the same segments here as that thread's
// calls, and the resolution halves as the run doubles; an entry per thread
// (and loader) active in a segment; kWaiting waiting events; at most two
// samples per segment and thread; kFetchesExact fetch times.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <utility>
#include <vector>

namespace pinscope {

class StepSpans {
 public:
  // A thread's usage at one instant (a span's start or end).
  struct Usage {
    uint64_t cpu = 0, sys = 0, faults = 0;
  };
  // One span of the hook.
  struct Span {
    uint64_t start = 0, end = 0;
    Usage begin, finish;
    uint64_t loader_id = 0, index = 0;
    int32_t worker_id = -1;
  };

  // The __next__ spans of one (thread, loader) that start in a segment.
  struct Steps {
    uint32_t tid = 0;
    uint32_t count = 0;
    uint32_t waits = 0;  // found the queue empty (kQueueEmptyWaitNs)
    bool usage = false;  // a span carried the thread's CPU time
    uint64_t loader_id = 0;
    uint64_t first_start = 0, first_cpu = 0;  // the first one's start and CPU time at it
    uint64_t next_ns = 0, next_cpu_ns = 0;
    uint64_t release_ns = 0;  // from each one's return to the thread's next call
    // Off-CPU time of the receives inside them while the worker of the
    // batch was inside another fetch.
    uint64_t busy_handover_ns = 0;
  };
  // What one thread's spans of one kind that start in a segment add up to.
  enum class Kind : uint8_t {
    kRecv,         // LOADER_RECV: wall, CPU
    kFetch,        // LOADER_FETCH on a root thread (num_workers=0): wall, CPU, sys, faults
    kPin,          // LOADER_PIN: wall, CPU, faults
    kCycle,        // from the thread's previous LOADER_PIN start: wall, CPU
    kRegister,     // pinscope's registrations: wall
    kUnregister,   // and unregistrations: wall
    kUnmap,        // the program's munmap of a recorded shm mapping (SHM_UNMAP_DONE): wall
    kWorkerFetch,  // LOADER_FETCH in a worker process (tid 0): count
  };
  struct Sums {
    uint32_t tid = 0;
    Kind kind = Kind::kRecv;
    uint32_t count = 0;
    uint64_t wall_ns = 0, cpu_ns = 0, sys_ns = 0, faults = 0;
  };
  struct Segment {
    uint64_t start = 0;   // 0: before the first boundary
    uint32_t merged = 1;  // boundaries in it (step_segments.h)
    std::vector<Steps> steps;
    std::vector<Sums> sums;
  };
  // A worker's fetch, for the producers' medians.
  struct Fetch {
    uint64_t start = 0, wall_ns = 0, cpu_ns = 0, faults = 0;
    // Its wall time plus the CPU time since its thread's previous fetch
    // ended (handing that batch over), when it has one (busy).
    uint64_t busy_ns = 0;
    uint64_t seq = 0;  // its place among the run's fetches
    int32_t process = -1;
    bool busy = false;
  };
  // Per (thread, loader): the __next__ spans from the loader's second
  // epoch on (LOADER_ITER), and the latest end among them.
  struct Totals {
    uint64_t after_first_epoch = 0, after_first_epoch_end = 0;
  };
  // An epoch's first __next__ on a thread: the first of its loader to
  // start at or after the epoch's LOADER_ITER.
  struct First {
    uint32_t tid = 0;
    uint64_t start = 0, end = 0;
  };

  static constexpr size_t kSegmentsKept = 8192;  // as StepCalls' (step_segments.h)
  static constexpr size_t kWaiting = 8192;
  static constexpr size_t kFetchesExact = 1 << 15;
  // Off-CPU time inside one __next__ that means the loop found no batch
  // queued: far above the scheduler's noise (tens of microseconds) and an
  // unpickling's page-cache reads.
  static constexpr double kQueueEmptyWaitNs = 1e6;

  // A root H2D copy of at least StepCalls::kBoundaryBytes starting at `start`.
  void AddBoundary(uint64_t start);
  // The root's spans, as they arrive.
  void AddNext(uint32_t tid, const Span& span);
  void AddRecv(uint32_t tid, const Span& span);
  void AddFetch(uint32_t tid, const Span& span);
  // A pin span; `cycle`: the thread had one before, which started
  // `cycle_ns` and `cycle_cpu_ns` of the thread's CPU time earlier.
  // one_time_ns: pinned host blocks the thread allocated inside the span
  // and keeps (cudaHostAlloc's wall time): start-up, taken out of the
  // span's wall and CPU time.
  void AddPin(uint32_t tid, const Span& span, bool cycle, uint64_t cycle_ns, uint64_t cycle_cpu_ns,
              uint64_t one_time_ns = 0);
  // A worker process's fetch (`process`: its replay index), `busy` as in Fetch.
  void AddWorkerFetch(int process, const Span& span, bool busy, uint64_t busy_ns);
  // The release after the __next__ of (tid, loader) that started at `start`.
  void AddRelease(uint32_t tid, uint64_t loader_id, uint64_t start, uint64_t ns);
  // pinscope's (un)registration on a root thread at `time`, `ns` long.
  void AddRegistration(uint32_t tid, uint64_t time, uint64_t ns, bool unregister);
  // A munmap of a recorded shm mapping on a root thread that took ns.
  void AddUnmap(uint32_t tid, uint64_t time, uint64_t ns);
  // A root thread's CPU time at `time` (ThreadSample).
  void AddSample(uint32_t tid, uint64_t time, uint64_t cpu_ns);
  // A LOADER_ITER of the root, in order; its index here is its index in
  // EpochFirst.
  void AddIter(uint64_t loader_id, uint64_t time, int32_t num_workers);
  // Folds what waits (at Finish).
  void Flush();

  const std::deque<Segment>& segments() const { return segments_; }
  uint32_t stride() const { return stride_; }
  // Per root thread, (time, CPU ns) samples in order: at each segment start,
  // the last before it and the last at it.
  const std::map<uint32_t, std::vector<std::pair<uint64_t, uint64_t>>>& samples() const {
    return samples_;
  }
  // nullptr when no __next__ of the loader on the thread started in its
  // second epoch or later.
  const Totals* totals(uint32_t tid, uint64_t loader_id) const;
  // nullptr when no __next__ of the iterator's loader started after it on the thread.
  const First* EpochFirst(size_t iter, uint32_t tid) const;
  // The workers' fetches: all of them, or when more than kFetchesExact came,
  // those whose hashed sequence number has its low `level` bits zero (a
  // uniform sample of kFetchesExact / 2 to kFetchesExact, the same on every
  // replay).
  const std::vector<Fetch>& fetches() const { return fetches_; }
  bool fetches_sampled() const { return level_ > 0; }

  // Adds b (the later segment) into a.
  static void Merge(Segment& a, const Segment& b);

 private:
  enum class ItemKind : uint8_t {
    kBoundary,
    kNext,
    kWorkerFetch,
    kRecv,
    kFetch,
    kPin,
    kRelease,
    kRegister,
    kUnregister,
    kUnmap,
    kSample,
  };
  // An event waiting to be folded; the fields each kind uses.
  struct Item {
    uint64_t time = 0;  // the span's start (a release: its __next__'s)
    uint64_t end = 0;
    // CPU time inside the span; a sample's CPU time; a release's or a
    // registration's ns.
    uint64_t cpu_ns = 0;
    uint64_t sys_ns = 0, faults = 0;
    uint64_t begin_cpu = 0;                   // __next__: the thread's CPU time at its start
    uint64_t cycle_ns = 0, cycle_cpu_ns = 0;  // pin: its cycle
    uint64_t loader_id = 0, index = 0;
    uint32_t tid = 0;
    int32_t worker_id = -1;
    ItemKind kind = ItemKind::kBoundary;
    bool usage = false;  // __next__: carried the thread's CPU time
    bool cycle = false;  // pin: cycle_* set
  };
  struct Key {
    uint64_t time = 0;
    uint64_t order = 0;  // rank (boundaries first) then arrival
    uint32_t slot = 0;
  };
  // The thread's last folded __next__: its receives are inside it until it ends.
  struct OpenStep {
    uint64_t start = 0, end = 0, loader_id = 0, index = 0;
    double off_ns = 0;  // off-CPU time less the receives inside it so far
  };
  struct Iter {
    uint64_t loader_id = 0, time = 0;
    int32_t num_workers = 0;
  };

  // The fields every span's item has: its kind, interval, thread, CPU time.
  static Item ItemOf(ItemKind kind, uint32_t tid, const Span& span);
  // An event of the thread at `time` with one figure (a release's,
  // registration's or unmap's ns, a sample's CPU time).
  void AddTimed(ItemKind kind, uint32_t tid, uint64_t time, uint64_t ns, uint64_t loader_id = 0);
  void Push(const Item& item);
  static bool Before(const Key& a, const Key& b) {
    return a.time != b.time ? a.time < b.time : a.order < b.order;
  }
  void FoldOldest();
  void Fold(const Item& item, bool late);
  Segment& Current();
  Segment& SegmentAt(uint64_t time);
  size_t IndexAt(uint64_t time) const;
  static Steps& StepsOf(Segment& s, uint32_t tid, uint64_t loader_id);
  static Sums& SumsOf(Segment& s, uint32_t tid, Kind kind);
  // Adds a span's wall, CPU and system time and faults to x.
  static void AddSpan(Sums& x, const Item& item);
  void FoldNext(const Item& item, Segment& s, bool late);
  void Close(uint32_t tid, const OpenStep& step);
  bool WorkerBusy(uint64_t loader_id, uint64_t index, uint64_t at) const;
  void AddSampleFolded(uint32_t tid, uint64_t time, uint64_t cpu_ns);
  void ThinSamples();
  void KeepFetch(const Fetch& fetch);

  std::deque<Segment> segments_;
  uint32_t stride_ = 1;
  // The waiting events: their keys in order, into slots.
  std::vector<Item> slots_;
  std::vector<uint32_t> free_slots_;
  std::deque<Key> waiting_;
  uint64_t arrivals_ = 0;
  uint64_t frontier_ = 0;  // the start of the last event folded
  bool folded_any_ = false;
  std::map<uint32_t, OpenStep> open_;
  // The last fetch folded per worker id: (start, end).
  std::map<int32_t, std::pair<uint64_t, uint64_t>> last_fetch_;
  std::vector<Iter> iters_;
  std::map<uint64_t, std::vector<size_t>> iters_by_loader_;  // by time
  std::map<uint64_t, int32_t> workers_of_loader_;            // the latest iterator's
  int32_t workers_last_ = 0;
  std::vector<std::vector<First>> firsts_;  // per iterator
  std::map<std::pair<uint32_t, uint64_t>, Totals> totals_;
  std::map<uint32_t, std::vector<std::pair<uint64_t, uint64_t>>> samples_;
  std::vector<Fetch> fetches_;
  uint64_t fetch_seq_ = 0;
  uint32_t level_ = 0;
};

}  // namespace pinscope
