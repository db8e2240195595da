// The batch loop's copies; see batch_copies.h.
#include "analyzer/analyses/batch_copies.h"

#include <algorithm>

#include "trace.pb.h"

namespace pinscope {

namespace {

// The upper median; reorders `values`.
uint64_t MedianInPlace(std::vector<uint64_t>& values) {
  if (values.empty()) return 0;
  std::nth_element(values.begin(), values.begin() + values.size() / 2, values.end());
  return values[values.size() / 2];
}

// splitmix64's finalizer: the sample's choice of a copy, the same on every run.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

void BatchCopies::Add(const Copy& copy) {
  if (sampled_) {
    AddSampled(copy);
    return;
  }
  copies_.push_back(copy);
  if (copy.bytes > largest_) {
    largest_ = copy.bytes;
    std::erase_if(copies_, [&](const Copy& c) { return c.bytes * 2 < largest_; });
  }
  if (copies_.size() >= kExact) EnterSampled();
}

bool BatchCopies::Keeps(uint64_t seq) const {
  return (Mix(seq) & ((uint64_t{1} << level_) - 1)) == 0;
}

void BatchCopies::Offer(uint64_t copy_ns, uint64_t interval_ns) {
  const uint64_t seq = seq_++;
  if (!Keeps(seq)) return;
  sample_.push_back({seq, copy_ns, interval_ns});
  if (sample_.size() < kExact) return;
  ++level_;
  std::erase_if(sample_, [&](const Pair& p) { return !Keeps(p.seq); });
}

void BatchCopies::EnterSampled() {
  const auto by_start = [](const Copy& a, const Copy& b) { return a.start_ns < b.start_ns; };
  if (!std::is_sorted(copies_.begin(), copies_.end(), by_start))
    std::sort(copies_.begin(), copies_.end(), by_start);
  sampled_ = true;
  std::vector<Copy> copies;
  copies.swap(copies_);
  first_start_ = copies.front().start_ns;
  for (const Copy& c : copies) AddSampled(c);
}

void BatchCopies::AddSampled(const Copy& copy) {
  if (copy.bytes > largest_) {
    largest_ = copy.bytes;
    std::erase_if(sizes_, [&](const auto& size) { return size.first * 2 < largest_; });
  }
  Counts& n = sizes_[copy.bytes];
  ++n.count;
  n.pinned += copy.pinned;
  if (copy.pin == trace::PIN_REGISTERED || copy.pin == trace::PIN_CACHED) {
    ++n.pinscope;
    if (copy.pin == trace::PIN_REGISTERED) {
      ++n.registered_at_copy;
    } else {
      ++(copy.ahead    ? n.registered_ahead
         : copy.reused ? n.reused
         : copy.pool   ? n.pool
                       : n.cached);
    }
  }
  n.fresh_mmap += copy.fresh_mmap;
  const uint64_t blocked = copy.end_ns - copy.start_ns;
  n.blocked_ns += blocked;
  if (has_previous_)
    Offer(previous_.end_ns - previous_.start_ns, copy.start_ns - previous_.start_ns);
  previous_ = copy;
  has_previous_ = true;
  last_start_ = copy.start_ns;
  last_blocked_ = blocked;
}

bool BatchCopies::Finish(BatchLoop* loop) {
  if (sampled_) {
    BatchLoop& l = *loop;
    uint64_t blocked = 0;
    for (const auto& [bytes, n] : sizes_) {
      l.batches += n.count;
      l.pinned_batches += n.pinned;
      l.pinscope_batches += n.pinscope;
      l.dma_bytes += bytes * n.pinscope;
      l.registered_at_copy += n.registered_at_copy;
      l.registered_ahead += n.registered_ahead;
      l.reused += n.reused;
      l.pool += n.pool;
      l.cached += n.cached;
      l.fresh_mmap_batches += n.fresh_mmap;
      blocked += n.blocked_ns;
    }
    if (l.batches < BatchLoop::kMinBatches) return false;
    l.found = true;
    // The upper median of the bytes, from the sizes' counts.
    uint64_t below = 0;
    for (const auto& [bytes, n] : sizes_) {
      below += n.count;
      if (below > l.batches / 2) {
        l.batch_bytes = bytes;
        break;
      }
    }
    l.total_interval_ns = last_start_ - first_start_;
    l.total_copy_ns = blocked - last_blocked_;
    l.intervals = l.batches - 1;
    l.intervals_ns.reserve(sample_.size());
    l.copies_ns.reserve(sample_.size());
    for (const Pair& p : sample_) {
      l.intervals_ns.push_back(p.interval_ns);
      l.copies_ns.push_back(p.copy_ns);
    }
    std::vector<uint64_t> values(l.copies_ns);
    l.median_copy_ns = MedianInPlace(values);
    values = l.intervals_ns;
    l.median_interval_ns = MedianInPlace(values);
    sample_ = {};
    sizes_.clear();
    return true;
  }
  BatchLoop& loop_ = *loop;
  std::vector<Copy>& batches = copies_;  // filtered in place: no second list
  std::erase_if(batches, [&](const Copy& c) { return c.bytes * 2 < largest_; });
  if (batches.size() < BatchLoop::kMinBatches) {
    loop_.intervals = loop_.intervals_ns.size();
    batches = {};
    return true;
    return false;
  }
  // Kept in replay order, which is by start within the root's main thread.
  const auto by_start = [](const Copy& a, const Copy& b) { return a.start_ns < b.start_ns; };
  if (!std::is_sorted(batches.begin(), batches.end(), by_start))
    std::sort(batches.begin(), batches.end(), by_start);
  loop_.found = true;
  loop_.batches = batches.size();
  loop_.intervals_ns.reserve(batches.size() - 1);
  loop_.copies_ns.reserve(batches.size() - 1);
  for (size_t i = 0; i < batches.size(); ++i) {
    const Copy& b = batches[i];
    if (b.pinned) ++loop_.pinned_batches;
    if (b.pin == trace::PIN_REGISTERED || b.pin == trace::PIN_CACHED) {
      ++loop_.pinscope_batches;
      loop_.dma_bytes += b.bytes;
      if (b.pin == trace::PIN_REGISTERED) {
        ++loop_.registered_at_copy;
      } else {
        ++(b.ahead    ? loop_.registered_ahead
           : b.reused ? loop_.reused
           : b.pool   ? loop_.pool
                      : loop_.cached);
      }
    }
    if (b.fresh_mmap) ++loop_.fresh_mmap_batches;
    if (i + 1 < batches.size()) {
      loop_.intervals_ns.push_back(batches[i + 1].start_ns - batches[i].start_ns);
      loop_.copies_ns.push_back(batches[i].end_ns - batches[i].start_ns);
      loop_.total_copy_ns += batches[i].end_ns - batches[i].start_ns;
    }
  }
  std::vector<uint64_t> values(batches.size());  // one scratch list for the medians
  for (size_t i = 0; i < batches.size(); ++i) values[i] = batches[i].bytes;
  loop_.batch_bytes = MedianInPlace(values);
  for (size_t i = 0; i < batches.size(); ++i) values[i] = batches[i].end_ns - batches[i].start_ns;
  loop_.median_copy_ns = MedianInPlace(values);
  values.assign(loop_.intervals_ns.begin(), loop_.intervals_ns.end());
  loop_.median_interval_ns = MedianInPlace(values);
  loop_.total_interval_ns = batches.back().start_ns - batches.front().start_ns;
  loop_.intervals = loop_.intervals_ns.size();
  batches = {};
  return true;
}

}  // namespace pinscope
