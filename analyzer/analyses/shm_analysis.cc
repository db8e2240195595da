// Shared-memory accounting. A segment holds /dev/shm space from the moment it
// gets a size until the later of its unlink and its last unmap (or the exit
// of the last process mapping it); one never unlinked holds it to the end of
// the run. The peak (the most bytes held at once, the earliest such time) is
// computed while the run streams, over a timeline cut only where the segments
// the engine still tracks start and end (shm_analysis.h): memory follows the
// live segments, not the run's length.
#include "analyzer/analyses/shm_analysis.h"

#include <algorithm>
#include <tuple>

#include "analyzer/common/format.h"

namespace pinscope {

namespace {

void AddTo(std::vector<std::pair<int, uint64_t>>* by_creator, int creator, uint64_t bytes) {
  for (auto& [index, held] : *by_creator) {
    if (index == creator) {
      held += bytes;
      return;
    }
  }
  by_creator->emplace_back(creator, bytes);
}

}  // namespace

ShmAnalysis::ShmAnalysis() { pieces_[0].cuts = 1; }

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
    bus.offset = shm.offset();
    if (const ShmMapping* mapping = process.mappings().Find(shm.address())) {
      bus.offset = mapping->offset + (shm.address() - mapping->base_address);
    }
    if (context.segment != nullptr) {
      bus.segment = context.segment->name;
      auto known = open_.find(context.segment->id);
      if (known != open_.end() && known->second.size_known) {
        bus.size_known = true;
        bus.segment_size = known->second.current_size;
      }
    }
    sigbus_.push_back(std::move(bus));
  }
  // The CUDA driver's own probes (its injection-path segment, absent in
  // every job) are not the job's failures.
  if (shm.error() != 0 && shm.driver_internal()) return;
  if (shm.error() != 0) {
    ++failed_calls_;
    const bool sizing = shm.op() == trace::SHM_TRUNCATE || shm.op() == trace::SHM_FALLOCATE ||
                        shm.op() == trace::SHM_MAP;
    if (sizing && (shm.error() == 28 /* ENOSPC */ || shm.error() == 12 /* ENOMEM */))
      ++space_failures_;
    return;
  }
  const ShmSegment* segment = context.segment;
  if (segment == nullptr) return;
  auto [it, inserted] = open_.try_emplace(segment->id);
  Open& open = it->second;
  if (inserted) {
    open.creator = segment->creator != nullptr ? segment->creator->index() : -1;
    open.memfd = segment->memfd;
    open.driver = segment->driver_internal;
  }
  const bool was_timed = open.timed();
  const uint64_t old_end = open.end_ns;
  open.size = std::max(open.size, segment->size);
  if (shm.op() == trace::SHM_TRUNCATE) {
    open.current_size = shm.size();
    open.size_known = true;
  } else if (shm.op() == trace::SHM_FALLOCATE && open.size_known) {
    open.current_size = std::max(open.current_size, shm.offset() + shm.size());
  }
  if (open.start_ns == 0 && segment->sized_ns != 0) open.start_ns = segment->sized_ns;
  // Any event on the segment shows it alive at that time.
  open.end_ns = std::max(open.end_ns, now);
  const bool had_end = was_timed && open.unlinked;
  if (shm.op() == trace::SHM_UNLINK) open.unlinked = true;
  // Both cuts are at this event's time (the size comes with an event), so
  // the timeline only ever grows at its end.
  if (open.timed()) {
    if (!was_timed) Cut(open.start_ns);
    if (open.unlinked && (!had_end || open.end_ns != old_end)) Cut(open.end_ns);
    if (had_end && open.end_ns != old_end) Uncut(old_end);
  }
  if (shm.op() == trace::SHM_MAP && !open.memfd && !open.driver) {
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

void ShmAnalysis::OnShmForgotten(const ShmSegment& segment) {
  auto it = open_.find(segment.id);
  if (it == open_.end()) return;
  const Open& open = it->second;
  // The engine forgets closed segments only, and closed means unlinked; one
  // that is not holds its space to the end of the run: left to Finish().
  if (!open.unlinked) return;
  Count(open);
  if (open.timed()) {
    // Its life is a run of whole pieces: its cuts bound it.
    for (auto piece = pieces_.find(open.start_ns);
         piece != pieces_.end() && piece->first < open.end_ns; ++piece) {
      Piece& p = piece->second;
      p.bytes += open.size;
      ++p.segments;
      AddTo(&p.by_creator, open.creator, open.size);
    }
    Uncut(open.start_ns);
    Uncut(open.end_ns);
  }
  open_.erase(it);
}

void ShmAnalysis::Count(const Open& open) {
  // The CUDA driver's own segments are not the job's data, and memfd
  // objects live outside /dev/shm: counted apart, never in the peak.
  if (open.driver) {
    ++driver_segments_;
    return;
  }
  if (open.memfd) {
    ++memfd_segments_;
    memfd_bytes_ += open.size;
    return;
  }
  if (open.size == 0 || open.start_ns == 0) return;
  if (!open.unlinked) {
    ++leaked_segments_;
    leaked_bytes_ += open.size;
  }
  ++segments_;
  bytes_created_ += open.size;
  ShmShare& share = ShareOf(open.creator, open.creator >= 0 ? pids_[open.creator] : 0);
  ++share.segments_created;
  share.bytes_created += open.size;
}

void ShmAnalysis::Cut(uint64_t time_ns) {
  auto [it, inserted] = pieces_.try_emplace(time_ns);
  // A new last piece: no finished segment holds space from now on.
  if (inserted) it->second.time_ns = time_ns;
  ++it->second.cuts;
}

void ShmAnalysis::Uncut(uint64_t time_ns) {
  auto it = pieces_.find(time_ns);
  if (it == pieces_.end() || --it->second.cuts > 0 || it == pieces_.begin()) return;
  // No open segment starts or ends here: both sides hold the same open
  // bytes, so the joined piece's most is the larger most, the earlier on a
  // tie (as the sweep's strict ">" keeps the first time of the peak).
  Piece& before = std::prev(it)->second;
  Piece& after = it->second;
  if (after.bytes > before.bytes) {
    before.bytes = after.bytes;
    before.time_ns = after.time_ns;
    before.segments = after.segments;
    before.by_creator = std::move(after.by_creator);
  }
  pieces_.erase(it);
}

void ShmAnalysis::Finish(const RunInfo& run) {
  // The segments still open end here: unlinked ones at their latest event,
  // the others (never unlinked: still in /dev/shm) with the run. With a cut
  // at the run's end, each of their lives is again a run of whole pieces;
  // one sweep adds them to each piece's most.
  Cut(run.end_ns);
  struct Step {
    uint64_t time_ns;
    int64_t bytes;
    int64_t segments;
  };
  std::vector<Step> steps;
  std::vector<const Open*> timed;
  for (auto& [id, open] : open_) {
    Count(open);
    if (!open.timed()) continue;
    if (!open.unlinked) open.end_ns = std::max(open.end_ns, run.end_ns);
    // A segment gone the instant it got its size held no space over time.
    if (open.end_ns <= open.start_ns) continue;
    const auto size = static_cast<int64_t>(open.size);
    steps.push_back({open.start_ns, size, 1});
    steps.push_back({open.end_ns, -size, -1});
    timed.push_back(&open);
  }
  std::sort(steps.begin(), steps.end(),
            [](const Step& a, const Step& b) { return a.time_ns < b.time_ns; });
  int64_t open_bytes = 0;
  int64_t open_segments = 0;
  size_t next = 0;
  const Piece* peak = nullptr;
  uint64_t peak_start = 0;
  for (const auto& [start, piece] : pieces_) {
    // Every step is at a cut: the open bytes are those of this whole piece.
    for (; next < steps.size() && steps[next].time_ns <= start; ++next) {
      open_bytes += steps[next].bytes;
      open_segments += steps[next].segments;
    }
    const uint64_t bytes = piece.bytes + static_cast<uint64_t>(open_bytes);
    if (bytes > peak_bytes_) {
      peak_bytes_ = bytes;
      peak_time_ns_ = piece.time_ns;
      peak_segments_ = piece.segments + static_cast<uint64_t>(open_segments);
      peak = &piece;
      peak_start = start;
    }
  }
  // Each creator's bytes at the peak: the finished segments' from the piece,
  // plus the open segments alive over it.
  if (peak != nullptr) {
    std::vector<std::pair<int, uint64_t>> by_creator = peak->by_creator;
    for (const Open* open : timed) {
      if (open->start_ns <= peak_start && peak_start < open->end_ns) {
        AddTo(&by_creator, open->creator, open->size);
      }
    }
    for (const auto& [creator, bytes] : by_creator) {
      ShareOf(creator, creator >= 0 ? pids_[creator] : 0).bytes_at_peak = bytes;
    }
  }
  open_.clear();
  pieces_.clear();
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
