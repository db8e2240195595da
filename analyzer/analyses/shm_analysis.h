// Shared memory of a run, a replay consumer: the peak of /dev/shm bytes the
// job held (sum of live segment sizes over time), each process's share, the
// headroom against the capacity, the --shm-size to use, leaked segments and
// SIGBUS diagnoses.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "analyzer/replay/replay.h"

namespace pinscope {

struct ShmShare {
  int process_index = -1;  // -1: segments made by an untraced process
  uint32_t pid = 0;
  uint64_t segments_created = 0;
  uint64_t bytes_created = 0;
  uint64_t maps = 0;           // SHM_MAP calls
  uint64_t bytes_mapped = 0;   // sum of mapped lengths
  uint64_t bytes_at_peak = 0;  // bytes of its segments alive at the peak
};

struct ShmSigbus {
  uint32_t pid = 0;
  uint64_t time_ns = 0;
  uint64_t address = 0;
  std::string segment;    // name of the mapping's segment, if resolved
  std::string diagnosis;  // the shim's "sigbus_shm" notice text, if any
  // The fault's offset into the segment, and the segment's size then: its
  // last successful ftruncate (or fallocate past it) before the fault.
  uint64_t offset = 0;
  bool size_known = false;
  uint64_t segment_size = 0;
  // The access lies at or past the end of the segment (it was shrunk, or
  // never sized that far): the kernel's SIGBUS for a page past EOF, which
  // no amount of /dev/shm would have avoided.
  bool past_end() const { return size_known && offset >= segment_size; }
};

class ShmAnalysis : public Analysis {
 public:
  ShmAnalysis();
  void OnProcess(const ProcessState& process) override;
  void OnShm(const ShmContext& shm) override;
  void OnNotice(const Event& event, const trace::Notice& notice) override;
  void OnShmForgotten(const ShmSegment& segment) override;
  void Finish(const RunInfo& run) override;

  // /dev/shm at the root process's start (0 when unknown).
  uint64_t capacity_bytes() const { return capacity_bytes_; }
  uint64_t free_bytes_at_start() const { return free_bytes_at_start_; }
  // Job segments: not memfd, not the CUDA driver's own.
  uint64_t segments() const { return segments_; }
  uint64_t bytes_created() const { return bytes_created_; }
  uint64_t peak_bytes() const { return peak_bytes_; }
  uint64_t peak_time_ns() const { return peak_time_ns_; }
  uint64_t peak_segments() const { return peak_segments_; }
  // Never unlinked: still in /dev/shm when the run ended.
  uint64_t leaked_segments() const { return leaked_segments_; }
  uint64_t leaked_bytes() const { return leaked_bytes_; }
  uint64_t driver_segments() const { return driver_segments_; }
  uint64_t memfd_segments() const { return memfd_segments_; }
  uint64_t memfd_bytes() const { return memfd_bytes_; }
  // shm calls that failed (ENOSPC from fallocate and friends).
  uint64_t failed_calls() const { return failed_calls_; }
  // Of those, the ones that found /dev/shm full (ENOSPC, ENOMEM from a
  // truncate, fallocate or map of a segment): the job could not get the
  // shared memory it asked for.
  uint64_t space_failures() const { return space_failures_; }
  // Peak passes half the capacity.
  bool warning() const { return capacity_bytes_ > 0 && peak_bytes_ * 2 > capacity_bytes_; }
  // peak x 2 rounded up to a power-of-two MiB, at least 64 MiB.
  uint64_t RecommendedShmSize() const;
  // Processes with shm activity (creators first by bytes), then untraced.
  const std::vector<ShmShare>& shares() const { return shares_; }
  const std::vector<ShmSigbus>& sigbus() const { return sigbus_; }
  // What it keeps during the replay: the segments the engine may still
  // report on and the pieces of the peak's timeline (at most two cuts per
  // such segment). Bounded by the live segments and the engine's closed-
  // segment cache, never by the run's length.
  size_t open_segments() const { return open_.size(); }
  size_t timeline_pieces() const { return pieces_.size(); }

 private:
  // A segment the engine may still report on: from its first event until
  // the engine forgets it (closed and out of its closed-segment cache) or
  // the run ends. Only these are kept, never the run's finished segments.
  struct Open {
    uint64_t start_ns = 0;  // first sized; 0 until then
    uint64_t end_ns = 0;    // its latest event so far
    uint64_t size = 0;      // largest extent so far
    // Its size now: the last truncate, or a fallocate past it (a SIGBUS past
    // it is an access past the end, not /dev/shm running out).
    uint64_t current_size = 0;
    bool size_known = false;
    int creator = -1;
    bool unlinked = false;
    bool memfd = false;
    bool driver = false;
    // On the timeline: a job segment with a size.
    bool timed() const { return start_ns != 0 && !memfd && !driver; }
  };
  // The timeline of the job's /dev/shm bytes, cut at the start of each open
  // timed segment and, once it is unlinked, at its latest event (where it
  // ends unless another event comes). Between two cuts every open segment
  // holds the same bytes whatever its final size and end, so a piece only
  // keeps the most bytes the finished segments held in it, the earliest time
  // of that, and who held them. A segment that finishes (the engine forgot
  // it) adds its bytes to the pieces of its life; a cut no open segment
  // needs any more joins two pieces, keeping the larger (the earlier on a
  // tie). Finish() adds the segments still open and takes the largest.
  struct Piece {
    int cuts = 0;           // open segments that start or end here
    uint64_t bytes = 0;     // the most the finished segments held in the piece
    uint64_t time_ns = 0;   // the earliest time they held it
    uint64_t segments = 0;  // finished segments alive then
    std::vector<std::pair<int, uint64_t>> by_creator;  // (process index, bytes) then
  };
  ShmShare& ShareOf(int process_index, uint32_t pid);
  // Adds a segment the engine will not report on again to the counts.
  void Count(const Open& segment);
  // Cuts the timeline at `time_ns`, the latest event time or later.
  void Cut(uint64_t time_ns);
  // Drops one cut at `time_ns`; the last one joins the piece to the one before.
  void Uncut(uint64_t time_ns);

  std::vector<uint32_t> pids_;               // by process index
  std::unordered_map<uint64_t, Open> open_;  // by ShmSegment::id
  // By start time; the piece at 0 (before any segment) is never joined.
  std::map<uint64_t, Piece> pieces_;
  std::vector<ShmShare> shares_;
  std::unordered_map<int, size_t> share_index_;
  std::vector<ShmSigbus> sigbus_;
  uint64_t capacity_bytes_ = 0;
  uint64_t free_bytes_at_start_ = 0;
  bool capacity_from_root_ = false;
  uint64_t segments_ = 0;
  uint64_t bytes_created_ = 0;
  uint64_t peak_bytes_ = 0;
  uint64_t peak_time_ns_ = 0;
  uint64_t peak_segments_ = 0;
  uint64_t leaked_segments_ = 0;
  uint64_t leaked_bytes_ = 0;
  uint64_t driver_segments_ = 0;
  uint64_t memfd_segments_ = 0;
  uint64_t memfd_bytes_ = 0;
  uint64_t failed_calls_ = 0;
  uint64_t space_failures_ = 0;
};

}  // namespace pinscope
