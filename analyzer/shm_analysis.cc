// Shared-memory accounting. A segment holds /dev/shm space from the moment it
// gets a size until the later of its unlink and its last unmap (or the exit
// of the last process mapping it); one never unlinked holds it to the end of
// the run. The peak is a sweep over those intervals at Finish().
#include "analyzer/shm_analysis.h"

#include <algorithm>
#include <tuple>

#include "analyzer/format.h"

namespace pinscope {

void ShmAnalysis::OnProcess(const ProcessState& process) {
  if (pids_.size() <= static_cast<size_t>(process.index())) pids_.resize(process.index() + 1);
  pids_[process.index()] = process.pid();
  // Capacity as the root process saw it; the first process otherwise.
  const trace::HostFacts& host = process.header().host();
  const bool root = process.origin() == trace::ORIGIN_ROOT;
  if ((root && !capacity_from_root_) || (capacity_bytes_ == 0 && host.shm_capacity_bytes() != 0)) {
    if (host.shm_capacity_bytes() != 0 || root) {
      capacity_bytes_ = host.shm_capacity_bytes();
      free_bytes_at_start_ = host.shm_free_bytes();
      capacity_from_root_ = root;
    }
  }
}

ShmShare& ShmAnalysis::ShareOf(int process_index, uint32_t pid) {
  auto [it, inserted] = share_index_.try_emplace(process_index, shares_.size());
  if (inserted) {
    ShmShare share;
    share.process_index = process_index;
    share.pid = pid;
    shares_.push_back(share);
  }
  return shares_[it->second];
}

void ShmAnalysis::OnShm(const ShmContext& context) {
  const trace::ShmEvent& shm = context.shm;
  const ProcessState& process = context.event.process;
  const uint64_t now = context.event.time_ns;
  if (shm.op() == trace::SHM_SIGBUS) {
    ShmSigbus bus;
    bus.pid = process.pid();
    bus.time_ns = now;
    bus.address = shm.address();
    if (context.segment != nullptr) bus.segment = context.segment->name;
    sigbus_.push_back(std::move(bus));
  }
  if (shm.error() != 0) {
    ++failed_calls_;
    return;
  }
  const ShmSegment* segment = context.segment;
  if (segment == nullptr) return;
  auto [it, inserted] = lives_.try_emplace(segment->id);
  Life& life = it->second;
  if (inserted) {
    life.creator = segment->creator != nullptr ? segment->creator->index() : -1;
    life.memfd = segment->memfd;
    life.driver = segment->driver_internal;
  }
  life.size = std::max(life.size, segment->size);
  if (life.start_ns == 0 && segment->sized_ns != 0) life.start_ns = segment->sized_ns;
  // Any event on the segment shows it alive at that time.
  life.end_ns = std::max(life.end_ns, now);
  if (shm.op() == trace::SHM_UNLINK) life.unlinked = true;
  if (shm.op() == trace::SHM_MAP && !life.memfd && !life.driver) {
    ShmShare& share = ShareOf(process.index(), process.pid());
    ++share.maps;
    share.bytes_mapped += shm.size();
  }
}

void ShmAnalysis::OnNotice(const Event& event, const trace::Notice& notice) {
  if (notice.code() != "sigbus_shm") return;
  // Attach the diagnosis to this process's SIGBUS event, or stand alone.
  for (auto it = sigbus_.rbegin(); it != sigbus_.rend(); ++it) {
    if (it->pid == event.process.pid() && it->diagnosis.empty()) {
      it->diagnosis = notice.text();
      return;
    }
  }
  ShmSigbus bus;
  bus.pid = event.process.pid();
  bus.time_ns = event.time_ns;
  bus.diagnosis = notice.text();
  sigbus_.push_back(std::move(bus));
}

void ShmAnalysis::Finish(const RunInfo& run) {
  struct Step {
    uint64_t time_ns;
    int delta_sign;  // -1 before +1 at the same instant: no overlap
    uint64_t size;
    int creator;
  };
  std::vector<Step> steps;
  std::vector<uint64_t> ids;
  for (const auto& [id, life] : lives_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());  // deterministic share order
  for (uint64_t id : ids) {
    Life& life = lives_[id];
    // The CUDA driver's own segments are not the job's data, and memfd
    // objects live outside /dev/shm: counted apart, never in the peak.
    if (life.driver) {
      ++driver_segments_;
      continue;
    }
    if (life.memfd) {
      ++memfd_segments_;
      memfd_bytes_ += life.size;
      continue;
    }
    if (life.size == 0 || life.start_ns == 0) continue;
    if (!life.unlinked) {
      life.end_ns = std::max(life.end_ns, run.end_ns);
      ++leaked_segments_;
      leaked_bytes_ += life.size;
    }
    ++segments_;
    bytes_created_ += life.size;
    const uint32_t pid = life.creator >= 0 ? pids_[life.creator] : 0;
    ShmShare& share = ShareOf(life.creator, pid);
    ++share.segments_created;
    share.bytes_created += life.size;
    // A segment gone the instant it got its size held no space over time.
    if (life.end_ns > life.start_ns) {
      steps.push_back({life.start_ns, +1, life.size, life.creator});
      steps.push_back({life.end_ns, -1, life.size, life.creator});
    }
  }
  std::sort(steps.begin(), steps.end(), [](const Step& a, const Step& b) {
    return std::tie(a.time_ns, a.delta_sign) < std::tie(b.time_ns, b.delta_sign);
  });
  uint64_t live = 0;
  uint64_t live_segments = 0;
  size_t peak_index = steps.size();
  for (size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].delta_sign > 0) {
      live += steps[i].size;
      ++live_segments;
    } else {
      live -= std::min(live, steps[i].size);
      --live_segments;
    }
    if (live > peak_bytes_) {
      peak_bytes_ = live;
      peak_time_ns_ = steps[i].time_ns;
      peak_segments_ = live_segments;
      peak_index = i;
    }
  }
  // Second pass up to the peak for each creator's bytes at that instant.
  for (size_t i = 0; peak_index < steps.size() && i <= peak_index; ++i) {
    ShmShare& share =
        ShareOf(steps[i].creator, steps[i].creator >= 0 ? pids_[steps[i].creator] : 0);
    if (steps[i].delta_sign > 0) {
      share.bytes_at_peak += steps[i].size;
    } else {
      share.bytes_at_peak -= std::min(share.bytes_at_peak, steps[i].size);
    }
  }
  std::stable_sort(shares_.begin(), shares_.end(), [](const ShmShare& a, const ShmShare& b) {
    const bool a_known = a.process_index >= 0;
    const bool b_known = b.process_index >= 0;
    return std::make_tuple(!a_known, b.bytes_at_peak, b.bytes_created, a.process_index) <
           std::make_tuple(!b_known, a.bytes_at_peak, a.bytes_created, b.process_index);
  });
}

uint64_t ShmAnalysis::RecommendedShmSize() const {
  uint64_t size = 64 * kMiB;
  while (size < peak_bytes_ * 2) size *= 2;
  return size;
}

}  // namespace pinscope
