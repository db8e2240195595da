// Large host allocations of a run (those at or above PINSCOPE_TRACE_MIN), a
// replay consumer: count, bytes, peak live bytes, a size histogram, the APIs
// that made them, and how many of them fed host<->device copies.
#pragma once

#include <cstdint>
#include <map>
#include <unordered_map>
#include <vector>

#include "analyzer/replay/replay.h"

namespace pinscope {

struct AllocBucket {
  uint64_t min_bytes = 0;  // inclusive
  uint64_t max_bytes = 0;  // exclusive; 0 = no upper bound
  uint64_t count = 0;
  uint64_t bytes = 0;
  uint64_t fed_copies = 0;  // allocations in the bucket that fed >= 1 copy
};

struct AllocApiStats {
  uint64_t count = 0;
  uint64_t bytes = 0;
};

class AllocAnalysis : public Analysis {
 public:
  AllocAnalysis();

  void OnCopy(const CopyContext& copy) override;
  void OnAlloc(const Event& event, const LiveAlloc& alloc) override;
  void OnFree(const Event& event, const LiveAlloc& freed, bool by_realloc) override;
  void OnProcessEnd(const ProcessState& process) override;
  void Finish(const RunInfo& run) override;

  uint64_t count() const { return count_; }
  uint64_t bytes() const { return bytes_; }
  uint64_t freed() const { return freed_; }
  // Largest sum of live recorded allocations over all processes at once.
  uint64_t peak_live_bytes() const { return peak_live_bytes_; }
  // Allocations that fed at least one copy, the copies they fed, their bytes.
  uint64_t fed_allocations() const { return fed_allocations_; }
  uint64_t copies_fed() const { return copies_fed_; }
  uint64_t pageable_copies_fed() const { return pageable_copies_fed_; }
  uint64_t bytes_fed() const { return bytes_fed_; }
  // Allocations the program pinned itself (cudaHostAlloc).
  const std::map<trace::AllocApi, AllocApiStats>& by_api() const { return by_api_; }
  const std::vector<AllocBucket>& histogram() const { return histogram_; }

 private:
  struct Fed {
    uint64_t size = 0;
    uint64_t copies = 0;
  };
  void Retire(uint64_t id);
  AllocBucket& BucketFor(uint64_t size);

  uint64_t count_ = 0;
  uint64_t bytes_ = 0;
  uint64_t freed_ = 0;
  uint64_t live_bytes_ = 0;
  uint64_t peak_live_bytes_ = 0;
  uint64_t fed_allocations_ = 0;
  uint64_t copies_fed_ = 0;
  uint64_t pageable_copies_fed_ = 0;
  uint64_t bytes_fed_ = 0;
  std::map<trace::AllocApi, AllocApiStats> by_api_;
  std::vector<AllocBucket> histogram_;
  // Live allocations that fed copies, by LiveAlloc::id.
  std::unordered_map<uint64_t, Fed> fed_;
};

}  // namespace pinscope
