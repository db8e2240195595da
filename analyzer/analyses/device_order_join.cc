// The join by time and order; see device_order_join.h.
#include "analyzer/analyses/device_order_join.h"

#include <algorithm>
#include <limits>

namespace pinscope::device {

namespace {

uint64_t AbsDiff(uint64_t a, uint64_t b) { return a > b ? a - b : b - a; }

// Memory kinds: equal, unknown on one side, or a host-side pageable buffer
// that CUPTI saw pinned (pinscope registered it; the host side keeps the
// program's view, docs/device-activity.md).
bool KindFits(uint32_t host, uint32_t device) {
  return host == device || host == kMemUnknown || device == kMemUnknown ||
         (host == kPageable && device == kPinned);
}

}  // namespace

void OrderJoiner::AddHostCall(const HostCall& call) {
  now_ns_ = std::max(now_ns_, call.start_ns);
  if (call.type == HostCall::Type::kCopy) {
    if (call.result != 0) {  // a failed copy moves nothing: no record will come
      ++stats_.host_copies_unmatched;
      return;
    }
    std::deque<CopyCall>& q = copies_[{call.direction, call.bytes}];
    auto at = q.end();  // calls arrive at return: nearly in start order
    while (at != q.begin() && std::prev(at)->call.host_start() > call.host_start()) --at;
    q.insert(at, CopyCall{call});
    return;
  }
  if (call.result == 0 && (call.api == kStreamSynchronize || call.api == kDeviceSynchronize)) {
    std::deque<Wait>& w = waits_[call.tid];
    auto at = w.end();
    while (at != w.begin() && std::prev(at)->start_ns > call.host_start()) --at;
    w.insert(at, {call.host_start(), call.host_end(), call.stream, call.api});
  }
  auto at = syncs_.end();
  while (at != syncs_.begin() && std::prev(at)->call.host_start() > call.host_start()) --at;
  SyncCall entry;
  entry.call = call;
  syncs_.insert(at, entry);
  if (call.host_end() > call.host_start())
    longest_sync_ns_ = std::max(longest_sync_ns_, call.host_end() - call.host_start());
}

void OrderJoiner::AddCorrelation(uint32_t, uint64_t, uint64_t now_ns) {
  now_ns_ = std::max(now_ns_, now_ns);
  ++stats_.correlations;
}

void OrderJoiner::AddDevice(const DeviceRecord& record) {
  switch (record.kind) {
    case kActMemcpy:
    case kActSync:
      pending_.push_back({record, std::max(now_ns_, record.end_ns)});
      return;
    case kActMemset:
      // No host memset calls are recorded: unmatched, as with correlations,
      // but not handed out (nobody reads them, and a process that only
      // makes memsets would otherwise fill out_ until Take).
      ++stats_.device_unmatched;
      return;
    default:
      out_.push_back({record, std::nullopt});
      return;
  }
}

bool OrderJoiner::KindsFit(const HostCall& call, const DeviceRecord& record) const {
  return KindFits(call.src_kind, record.src_kind) && KindFits(call.dst_kind, record.dst_kind);
}

bool OrderJoiner::Contains(const HostCall& call, const DeviceRecord& record) const {
  return call.host_start() <= record.start_ns + options_.tolerance_ns &&
         record.end_ns <= call.host_end() + options_.tolerance_ns;
}

bool OrderJoiner::DoneBefore(const HostCall& call, uint64_t start_ns) const {
  auto t = waits_.find(call.tid);
  if (t == waits_.end()) return false;
  const std::deque<Wait>& w = t->second;
  auto it = std::lower_bound(w.begin(), w.end(), call.host_end(),
                             [](const Wait& a, uint64_t v) { return a.start_ns < v; });
  // One thread's waits follow each other: their ends are in order too.
  for (; it != w.end() && it->end_ns + options_.tolerance_ns < start_ns; ++it) {
    if (it->api == kDeviceSynchronize || it->stream == call.stream) return true;
  }
  return false;
}

void OrderJoiner::MatchCopy(const DeviceRecord& record) {
  auto cls = copies_.find({record.direction, record.bytes});
  if (cls == copies_.end()) {
    Emit(record, nullptr);
    return;
  }
  std::deque<CopyCall>& q = cls->second;
  constexpr size_t kNone = std::numeric_limits<size_t>::max();
  size_t first = kNone, chosen = kNone;
  for (size_t i = 0;
       i < q.size() && q[i].call.host_start() <= record.start_ns + options_.tolerance_ns;) {
    const HostCall& call = q[i].call;
    if (!KindsFit(call, record)) {
      ++i;
      continue;
    }
    if (DoneBefore(call, record.start_ns)) {
      // Records are matched in start order: dead for every later one too.
      // (`first`, if set, is before i and stays valid.)
      ++stats_.host_copies_unmatched;
      q.erase(q.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    if (first == kNone) first = i;
    if (Contains(call, record)) {
      chosen = i;
      break;
    }
    ++i;
  }
  if (chosen == kNone) chosen = first;
  if (chosen == kNone) {
    if (q.empty()) copies_.erase(cls);
    Emit(record, nullptr);
    return;
  }
  const HostCall call = q[chosen].call;
  q.erase(q.begin() + static_cast<std::ptrdiff_t>(chosen));
  if (q.empty()) copies_.erase(cls);
  Emit(record, &call);
}

void OrderJoiner::MatchSync(DeviceRecord record) {
  // Each displacement strictly improves one call's fit: this ends; the
  // bound is only a guard.
  for (size_t round = 0; round <= syncs_.size() + 1; ++round) {
    SyncCall* best = nullptr;
    uint64_t best_fit = std::numeric_limits<uint64_t>::max();
    // Candidates start at most tolerance after the record and, being
    // at most longest_sync_ns_ long, not too long before it: syncs_ is by
    // start, so only that stretch is scanned (syncs_ holds a horizon's).
    auto it =
        std::upper_bound(syncs_.begin(), syncs_.end(), record.start_ns + options_.tolerance_ns,
                         [](uint64_t v, const SyncCall& c) { return v < c.call.host_start(); });
    while (it != syncs_.begin()) {
      SyncCall& s = *--it;
      if (s.call.host_start() + longest_sync_ns_ + options_.tolerance_ns < record.end_ns) break;
      if (!Contains(s.call, record)) continue;
      const uint64_t fit =
          AbsDiff(record.start_ns, s.call.host_start()) + AbsDiff(s.call.host_end(), record.end_ns);
      if (s.has_record && s.fit_ns <= fit) continue;  // it keeps its better record
      if (fit < best_fit) best = &s, best_fit = fit;
    }
    if (best == nullptr) break;
    if (!best->has_record) {
      best->has_record = true;
      best->record = record;
      best->fit_ns = best_fit;
      return;
    }
    std::swap(best->record, record);  // the displaced record tries its next candidate
    best->fit_ns = best_fit;
  }
  Emit(record, nullptr);
}

void OrderJoiner::MatchSettled(uint64_t cut_ns) {
  auto keep = std::partition(pending_.begin(), pending_.end(),
                             [&](const Pending& p) { return p.arrival_ns > cut_ns; });
  std::vector<DeviceRecord> settled;
  for (auto it = keep; it != pending_.end(); ++it) settled.push_back(it->record);
  pending_.erase(keep, pending_.end());
  std::sort(settled.begin(), settled.end(), [](const DeviceRecord& a, const DeviceRecord& b) {
    return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns < b.end_ns;
  });
  for (const DeviceRecord& r : settled) {
    if (r.kind == kActMemcpy) {
      MatchCopy(r);
    } else {
      MatchSync(r);
    }
  }
}

// A sync call's match is final once the call is older than the horizon
// (`all`: at the end): until then a late record that fits it better may
// still take it.
void OrderJoiner::FinalizeSyncs(uint64_t cut_ns, bool all) {
  for (auto it = syncs_.begin(); it != syncs_.end();) {
    if (!all && it->call.host_end() >= cut_ns) {
      ++it;
      continue;
    }
    if (it->has_record) Emit(it->record, &it->call);
    it = syncs_.erase(it);
  }
}

void OrderJoiner::Emit(const DeviceRecord& record, const HostCall* call) {
  if (call == nullptr) {
    ++stats_.device_unmatched;
    out_.push_back({record, std::nullopt});
    return;
  }
  ++stats_.joined;
  out_.push_back({record, *call});
}

void OrderJoiner::Advance(uint64_t now_ns) {
  now_ns_ = std::max(now_ns_, now_ns);
  if (now_ns < options_.settle_ns) return;
  MatchSettled(now_ns - options_.settle_ns);
  if (now_ns < options_.horizon_ns) return;
  const uint64_t cut = now_ns - options_.horizon_ns;
  FinalizeSyncs(cut, /*all=*/false);
  for (auto cls = copies_.begin(); cls != copies_.end();) {
    std::deque<CopyCall>& q = cls->second;
    const size_t before = q.size();
    std::erase_if(q, [&](const CopyCall& c) { return c.call.host_end() < cut; });
    stats_.host_copies_unmatched += before - q.size();
    cls = q.empty() ? copies_.erase(cls) : std::next(cls);
  }
  for (auto t = waits_.begin(); t != waits_.end();) {
    std::deque<Wait>& w = t->second;
    while (!w.empty() && w.front().end_ns < cut) w.pop_front();
    t = w.empty() ? waits_.erase(t) : std::next(t);
  }
}

void OrderJoiner::Finish() {
  MatchSettled(std::numeric_limits<uint64_t>::max());
  FinalizeSyncs(0, /*all=*/true);
  for (const auto& [key, q] : copies_) stats_.host_copies_unmatched += q.size();
  copies_.clear();
  waits_.clear();
}

std::vector<Joined> OrderJoiner::Take() {
  std::vector<Joined> out;
  out.swap(out_);
  return out;
}

}  // namespace pinscope::device
