// Large host allocations: totals, live-bytes peak, histogram by size
// (powers of four from 1 MiB), and the link to the copies they fed, counted
// while the allocation is live and settled when it is freed.
#include "analyzer/analyses/alloc_analysis.h"

#include <algorithm>

#include "analyzer/common/format.h"
#include "analyzer/common/trace_names.h"

namespace pinscope {

AllocAnalysis::AllocAnalysis() {
  // < 1 MiB (a lowered PINSCOPE_TRACE_MIN), then 1-4, 4-16, ... MiB, >= 1 GiB.
  histogram_.push_back({0, kMiB});
  for (uint64_t low = kMiB; low < kGiB; low *= 4) histogram_.push_back({low, low * 4});
  histogram_.push_back({kGiB, 0});
}

AllocBucket& AllocAnalysis::BucketFor(uint64_t size) {
  for (AllocBucket& bucket : histogram_) {
    if (size >= bucket.min_bytes && (bucket.max_bytes == 0 || size < bucket.max_bytes))
      return bucket;
  }
  return histogram_.back();
}

void AllocAnalysis::OnCopy(const CopyContext& copy) {
  if (copy.buffer.kind != HostBuffer::Kind::kAlloc || copy.buffer.alloc == nullptr) return;
  Fed& fed = fed_[copy.buffer.alloc->id];
  fed.size = copy.buffer.alloc->size;
  ++fed.copies;
  ++copies_fed_;
  bytes_fed_ += copy.copy.bytes();
  if (IsPageableHostCopy(copy.copy)) ++pageable_copies_fed_;
}

void AllocAnalysis::OnAlloc(const Event& event, const LiveAlloc& alloc) {
  ++count_;
  bytes_ += alloc.size;
  AllocApiStats& api = by_api_[alloc.api];
  ++api.count;
  api.bytes += alloc.size;
  AllocBucket& bucket = BucketFor(alloc.size);
  ++bucket.count;
  bucket.bytes += alloc.size;
  live_bytes_ += alloc.size;
  peak_live_bytes_ = std::max(peak_live_bytes_, live_bytes_);
}

void AllocAnalysis::Retire(uint64_t id) {
  auto it = fed_.find(id);
  if (it == fed_.end()) return;
  ++fed_allocations_;
  ++BucketFor(it->second.size).fed_copies;
  fed_.erase(it);
}

void AllocAnalysis::OnFree(const Event& event, const LiveAlloc& freed, bool by_realloc) {
  ++freed_;
  live_bytes_ -= std::min(live_bytes_, freed.size);
  Retire(freed.id);
}

void AllocAnalysis::OnProcessEnd(const ProcessState& process) {
  for (const auto& [start, entry] : process.allocations().entries()) {
    live_bytes_ -= std::min(live_bytes_, entry.value.size);
    Retire(entry.value.id);
  }
}

void AllocAnalysis::Finish(const RunInfo& run) {
  // Every process has ended by now; anything left was never matched.
  std::vector<uint64_t> left;
  for (const auto& [id, fed] : fed_) left.push_back(id);
  for (uint64_t id : left) Retire(id);
}

}  // namespace pinscope
