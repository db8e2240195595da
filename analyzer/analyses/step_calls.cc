// A root thread's calls as segments; see step_calls.h.
#include "analyzer/analyses/step_calls.h"

#include <algorithm>

#include "analyzer/analyses/step_segments.h"

namespace pinscope {

namespace {

// Sizes below half the largest can be no window's batch copies: their
// time is another copy's.
void DropSmall(StepCalls::Segment& s) {
  if (s.copies.empty()) return;
  const uint64_t largest = s.copies.back().bytes;
  size_t keep = 0;
  while (keep < s.copies.size() && s.copies[keep].bytes * 2 < largest)
    s.other_copy_ns += s.copies[keep++].wall_ns;
  s.copies.erase(s.copies.begin(), s.copies.begin() + static_cast<std::ptrdiff_t>(keep));
}

void AddCopies(StepCalls::Copies& a, const StepCalls::Copies& b) {
  a.count += b.count;
  a.pinned += b.pinned;
  a.pinscope += b.pinscope;
  a.shm += b.shm;
  a.fresh += b.fresh;
  a.skipped += b.skipped;
  a.device += b.device;
  a.wall_ns += b.wall_ns;
  a.cpu_ns += b.cpu_ns;
  a.faults += b.faults;
  a.wait_ns += b.wait_ns;
  a.device_ns += b.device_ns;
}

}  // namespace

void StepCalls::Merge(Segment& a, const Segment& b) {
  a.sync_ns += b.sync_ns;
  a.other_copy_ns += b.other_copy_ns;
  if (a.usage_calls == 0) a.first_cpu = b.first_cpu;
  if (b.usage_calls > 0) a.last_cpu = b.last_cpu;
  a.usage_calls += b.usage_calls;
  a.merged += b.merged;
  for (const Copies& c : b.copies) {
    auto at = std::lower_bound(a.copies.begin(), a.copies.end(), c.bytes,
                               [](const Copies& x, uint64_t v) { return x.bytes < v; });
    if (at != a.copies.end() && at->bytes == c.bytes) {
      AddCopies(*at, c);
    } else {
      a.copies.insert(at, c);
    }
  }
  DropSmall(a);
  // More sizes than kept (a batch of many large tensors of different
  // sizes): the two closest are counted as the larger. A window's largest
  // is then one of the kept sizes, and a copy counted as the larger is a
  // batch copy where the larger is: the only approximation past the first
  // kSizesKept sizes of a segment.
  while (a.copies.size() > kSizesKept) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < a.copies.size(); ++i)
      if (a.copies[i + 1].bytes - a.copies[i].bytes <
          a.copies[best + 1].bytes - a.copies[best].bytes)
        best = i;
    Copies& larger = a.copies[best + 1];
    const uint64_t bytes = larger.bytes;
    AddCopies(larger, a.copies[best]);
    larger.bytes = bytes;
    a.copies.erase(a.copies.begin() + static_cast<std::ptrdiff_t>(best));
  }
}

void StepCalls::Open(uint64_t start) {
  step_segments::Open(segments_, stride_, kSegmentsKept, start, Merge);
}

void StepCalls::Add(const Call& call) {
  ++calls_;
  if (call.copy && call.h2d) largest_h2d_ = std::max(largest_h2d_, call.bytes);
  if (drawn_.size() < kDrawnCalls) {
    drawn_.push_back(call);
  } else {
    drawn_[drawn_next_] = call;
    drawn_next_ = drawn_next_ + 1 == kDrawnCalls ? 0 : drawn_next_ + 1;
    drawn_dropped_ = true;
  }
  ++waiting_;
  // A thread without __next__ spans: the oldest call can wait no longer
  // (a __next__ with more than kBufferedCalls calls inside it would see its
  // first calls counted in the step before).
  if (waiting_ > kBufferedCalls) FoldOldest();
}

void StepCalls::FoldOldest() {
  Fold(drawn_[Waiting(0)]);
  --waiting_;
}

void StepCalls::AddNext(uint64_t start, uint64_t end, uint64_t finish_cpu, size_t key) {
  while (waiting_ > 0 && drawn_[Waiting(0)].start < start) FoldOldest();
  Open(start);
  // A thread whose __next__ spans no call follows (a loop without CUDA
  // calls): the oldest waits no longer, its release is not measured.
  if (pending_.size() >= kPendingKept) pending_.erase(pending_.begin());
  pending_.push_back({key, end, finish_cpu});
  Flush();
}

std::vector<StepCalls::Call> StepCalls::Drawn() const {
  std::vector<Call> out(drawn_.begin() + static_cast<std::ptrdiff_t>(drawn_next_), drawn_.end());
  out.insert(out.end(), drawn_.begin(), drawn_.begin() + static_cast<std::ptrdiff_t>(drawn_next_));
  return out;
}

void StepCalls::Flush() {
  while (waiting_ > 0) FoldOldest();
}

void StepCalls::Fold(const Call& c) {
  // The first call from a __next__'s return on: the release of the batch
  // before (see pipeline_analysis.cc, BuildInputs).
  if (!pending_.empty()) {
    size_t kept = 0;
    for (const Pending& p : pending_) {
      if (p.end <= c.start) {
        released_.push_back({p.key, c.cpu_begin >= p.finish_cpu ? c.cpu_begin - p.finish_cpu : 0});
      } else {
        pending_[kept++] = p;
      }
    }
    pending_.resize(kept);
  }
  const bool candidate = c.copy && c.h2d && c.bytes >= kBoundaryBytes;
  if (candidate) {
    Open(c.start);
  } else if (segments_.empty()) {
    segments_.emplace_back().merged = 0;  // the calls before the first boundary
  }
  Segment& s = segments_.back();
  if (c.cpu_begin > 0) {
    if (s.usage_calls == 0) s.first_cpu = c.cpu_begin;
    s.last_cpu = c.cpu_begin;
    ++s.usage_calls;
  }
  const uint64_t wall = c.end > c.start ? c.end - c.start : 0;
  if (!c.copy) {
    s.sync_ns += wall;
    return;
  }
  if (!candidate) {
    s.other_copy_ns += wall;
    return;
  }
  Copies one;
  one.bytes = c.bytes;
  one.count = 1;
  one.pinned = c.pinned_by_program;
  one.pinscope = c.pinned_by_pinscope;
  one.shm = c.shm;
  one.fresh = c.fresh;
  one.skipped = c.skipped_budget;
  one.wall_ns = wall;
  one.cpu_ns = c.cpu_ns;
  one.faults = c.faults;
  auto at = std::lower_bound(s.copies.begin(), s.copies.end(), one.bytes,
                             [](const Copies& x, uint64_t v) { return x.bytes < v; });
  if (at != s.copies.end() && at->bytes == one.bytes) {
    AddCopies(*at, one);
  } else {
    s.copies.insert(at, one);
  }
  DropSmall(s);
}

void StepCalls::AddDeviceTime(uint64_t start, uint64_t bytes, uint64_t wait_ns,
                              uint64_t device_ns) {
  auto seg = std::upper_bound(segments_.begin(), segments_.end(), start,
                              [](uint64_t t, const Segment& s) { return t < s.start; });
  if (seg == segments_.begin()) return;
  --seg;
  // The size, or the larger one it was counted as; none: dropped as
  // smaller than the segment's largest (no batch copy).
  auto at = std::lower_bound(seg->copies.begin(), seg->copies.end(), bytes,
                             [](const Copies& x, uint64_t v) { return x.bytes < v; });
  if (at == seg->copies.end()) return;
  ++at->device;
  at->wait_ns += wait_ns;
  at->device_ns += device_ns;
}

}  // namespace pinscope
