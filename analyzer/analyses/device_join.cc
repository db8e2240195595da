// The correlation join; see device_join.h.
#include "analyzer/analyses/device_join.h"

#include <algorithm>

namespace pinscope::device {

void CorrelationJoiner::AddHostCall(const HostCall& call) {
  HostEntry& h = hosts_[call.call_id];
  h.calls.push_back(call);
  h.time_ns = std::max(h.time_ns, call.end_ns);
  // A correlation for this call may have come first, with its records.
  auto r = corr_by_call_.find(call.call_id);
  if (r == corr_by_call_.end()) return;
  std::vector<uint32_t> corrs = r->second;
  for (uint32_t corr : corrs)
    if (pending_.count(corr)) Resolve(corr);
}

void CorrelationJoiner::AddCorrelation(uint32_t correlation_id, uint64_t call_id,
                                       uint64_t now_ns) {
  ++stats_.correlations;
  correlations_[correlation_id] = {call_id, now_ns};
  corr_by_call_[call_id].push_back(correlation_id);
  if (pending_.count(correlation_id)) Resolve(correlation_id);
}

void CorrelationJoiner::AddDevice(const DeviceRecord& record) {
  if (!Joinable(record.kind)) {
    out_.push_back({record, std::nullopt});
    return;
  }
  pending_[record.correlation_id].push_back(record);
  Resolve(record.correlation_id);
}

void CorrelationJoiner::Resolve(uint32_t correlation_id) {
  auto c = correlations_.find(correlation_id);
  if (c == correlations_.end()) return;
  auto h = hosts_.find(c->second.call_id);
  if (h == hosts_.end()) return;
  auto p = pending_.find(correlation_id);
  if (p == pending_.end()) return;
  for (const DeviceRecord& r : p->second) Emit(r, &h->second);
  pending_.erase(p);
}

void CorrelationJoiner::Emit(const DeviceRecord& record, HostEntry* host) {
  if (!host) {
    ++stats_.device_unmatched;
    out_.push_back({record, std::nullopt});
    return;
  }
  // Records of one call are matched to its copies in order (batches); a
  // sync record to the call itself.
  size_t i = std::min(host->next, host->calls.size() - 1);
  if (host->next < host->calls.size()) ++host->next;
  host->matched = true;
  ++stats_.joined;
  out_.push_back({record, host->calls[i]});
}

void CorrelationJoiner::Advance(uint64_t now_ns) {
  if (now_ns < horizon_ns_) return;
  uint64_t cut = now_ns - horizon_ns_;
  for (auto it = pending_.begin(); it != pending_.end();) {
    bool old = true;
    for (const DeviceRecord& r : it->second) old = old && r.end_ns < cut;
    if (!old) {
      ++it;
      continue;
    }
    for (const DeviceRecord& r : it->second) Emit(r, nullptr);
    it = pending_.erase(it);
  }
  for (auto it = hosts_.begin(); it != hosts_.end();) {
    if (it->second.time_ns >= cut) {
      ++it;
      continue;
    }
    if (!it->second.matched)
      for (const HostCall& c : it->second.calls)
        if (c.type == HostCall::Type::kCopy) ++stats_.host_copies_unmatched;
    it = hosts_.erase(it);
  }
  for (auto it = correlations_.begin(); it != correlations_.end();) {
    if (it->second.time_ns >= cut) {
      ++it;
      continue;
    }
    auto r = corr_by_call_.find(it->second.call_id);
    if (r != corr_by_call_.end()) {
      std::erase(r->second, it->first);
      if (r->second.empty()) corr_by_call_.erase(r);
    }
    it = correlations_.erase(it);
  }
}

void CorrelationJoiner::Finish() {
  for (auto& [corr, records] : pending_)
    for (const DeviceRecord& r : records) Emit(r, nullptr);
  pending_.clear();
  for (auto& [id, h] : hosts_)
    if (!h.matched)
      for (const HostCall& c : h.calls)
        if (c.type == HostCall::Type::kCopy) ++stats_.host_copies_unmatched;
  hosts_.clear();
  correlations_.clear();
  corr_by_call_.clear();
}

std::vector<Joined> CorrelationJoiner::Take() {
  std::vector<Joined> out;
  out.swap(out_);
  return out;
}

std::optional<uint64_t> CorrelationJoiner::CallIdFor(uint32_t correlation_id) const {
  auto it = correlations_.find(correlation_id);
  if (it == correlations_.end()) return std::nullopt;
  return it->second.call_id;
}

}  // namespace pinscope::device
