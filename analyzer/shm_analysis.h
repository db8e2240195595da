// Shared memory of a run, a replay consumer: the peak of /dev/shm bytes the
// job held (sum of live segment sizes over time), each process's share, the
// headroom against the capacity, the --shm-size to use, leaked segments and
// SIGBUS diagnoses.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "analyzer/replay.h"

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
};

class ShmAnalysis : public Analysis {
 public:
  void OnProcess(const ProcessState& process) override;
  void OnShm(const ShmContext& shm) override;
  void OnNotice(const Event& event, const trace::Notice& notice) override;
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
  // Peak passes half the capacity.
  bool warning() const { return capacity_bytes_ > 0 && peak_bytes_ * 2 > capacity_bytes_; }
  // peak x 2 rounded up to a power-of-two MiB, at least 64 MiB.
  uint64_t RecommendedShmSize() const;
  // Processes with shm activity (creators first by bytes), then untraced.
  const std::vector<ShmShare>& shares() const { return shares_; }
  const std::vector<ShmSigbus>& sigbus() const { return sigbus_; }

 private:
  // One segment's life for the peak sweep: about 40 bytes per segment of the
  // run, the one part of the report's state that grows with the run.
  struct Life {
    uint64_t start_ns = 0;  // first sized
    uint64_t end_ns = 0;    // later of unlink and last unmap / mapper's exit
    uint64_t size = 0;
    int creator = -1;
    bool unlinked = false;
    bool memfd = false;
    bool driver = false;
  };
  ShmShare& ShareOf(int process_index, uint32_t pid);

  std::vector<uint32_t> pids_;                // by process index
  std::unordered_map<uint64_t, Life> lives_;  // by ShmSegment::id
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
};

}  // namespace pinscope
