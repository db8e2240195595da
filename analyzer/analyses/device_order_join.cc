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
  if (call.type == HostCall::Type::kCopy) {
    if (call.result != 0) {  // a failed copy moves nothing: no record will come
      ++stats_.host_copies_unmatched;
      return;
    }
    std::deque<CopyCall>& q = copies_[{call.direction, call.bytes}];
    auto at = q.end();  // calls arrive at return: nearly in start order
    while (at != q.begin() && std::prev(at)->call.start_ns > call.start_ns) --at;
    q.insert(at, CopyCall{call});
    return;
  }
  if (call.result == 0 && (call.api == kStreamSynchronize || call.api == kDeviceSynchronize)) {
    std::deque<Wait>& w = waits_[call.tid];
    auto at = w.end();
    while (at != w.begin() && std::prev(at)->start_ns > call.start_ns) --at;
    w.insert(at, {call.start_ns, call.end_ns, call.stream, call.api});
  }
  auto at = syncs_.end();
  while (at != syncs_.begin() && std::prev(at)->call.start_ns > call.start_ns) --at;
  SyncCall entry;
  entry.call = call;
  syncs_.insert(at, entry);
}

void OrderJoiner::AddCorrelation(uint32_t, uint64_t, uint64_t) { ++stats_.correlations; }

void OrderJoiner::AddDevice(const DeviceRecord& record) {
  switch (record.kind) {
    case kActMemcpy:
    case kActSync:
      pending_.push_back(record);
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
  return call.start_ns <= record.start_ns + options_.tolerance_ns &&
         record.end_ns <= call.end_ns + options_.tolerance_ns;
}

bool OrderJoiner::DoneBefore(const HostCall& call, uint64_t start_ns) const {
  auto t = waits_.find(call.tid);
  if (t == waits_.end()) return false;
  const std::deque<Wait>& w = t->second;
  auto it = std::lower_bound(w.begin(), w.end(), call.end_ns,
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
       i < q.size() && q[i].call.start_ns <= record.start_ns + options_.tolerance_ns;) {
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
    for (SyncCall& s : syncs_) {
      if (!Contains(s.call, record)) continue;
      const uint64_t fit =
          AbsDiff(record.start_ns, s.call.start_ns) + AbsDiff(s.call.end_ns, record.end_ns);
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
  std::vector<DeviceRecord> settled;
  auto keep = std::partition(pending_.begin(), pending_.end(),
                             [&](const DeviceRecord& r) { return r.end_ns > cut_ns; });
  settled.assign(keep, pending_.end());
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

// A sync call is final once every record that could fit it (ending before
// its end + tolerance) has been matched.
void OrderJoiner::FinalizeSyncs(uint64_t cut_ns, bool all) {
  for (auto it = syncs_.begin(); it != syncs_.end();) {
    if (!all && it->call.end_ns + options_.tolerance_ns >= cut_ns) {
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
  if (now_ns < options_.settle_ns) return;
  const uint64_t settled = now_ns - options_.settle_ns;
  MatchSettled(settled);
  FinalizeSyncs(settled, /*all=*/false);
  if (now_ns < options_.horizon_ns) return;
  const uint64_t cut = now_ns - options_.horizon_ns;
  for (auto cls = copies_.begin(); cls != copies_.end();) {
    std::deque<CopyCall>& q = cls->second;
    const size_t before = q.size();
    std::erase_if(q, [&](const CopyCall& c) { return c.call.end_ns < cut; });
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
