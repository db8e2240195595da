// Device-side analyses over CUPTI records; see device_activity.h.
#include "analyzer/analyses/device_activity.h"

#include <algorithm>
#include <limits>
#include <queue>

namespace pinscope::device {

uint64_t Overlap(Interval a, Interval b) {
  uint64_t s = std::max(a.start_ns, b.start_ns), e = std::min(a.end_ns, b.end_ns);
  return e > s ? e - s : 0;
}

std::vector<Interval> Union(std::vector<Interval> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](const Interval& i) { return i.length() == 0; }),
          v.end());
  std::sort(v.begin(), v.end(),
            [](const Interval& a, const Interval& b) { return a.start_ns < b.start_ns; });
  std::vector<Interval> out;
  for (const Interval& i : v) {
    if (!out.empty() && i.start_ns <= out.back().end_ns) {
      out.back().end_ns = std::max(out.back().end_ns, i.end_ns);
    } else {
      out.push_back(i);
    }
  }
  return out;
}

namespace {

uint64_t UnionOverlap(const std::vector<Interval>& intervals, Interval window) {
  std::vector<Interval> clipped;
  for (const Interval& i : intervals) {
    if (Overlap(i, window) == 0) continue;
    clipped.push_back({std::max(i.start_ns, window.start_ns), std::min(i.end_ns, window.end_ns)});
  }
  uint64_t total = 0;
  for (const Interval& i : Union(std::move(clipped))) total += i.length();
  return total;
}

// Edge k of `chunks` equal chunks of `w` (integer arithmetic, no drift).
uint64_t ChunkEdge(Interval w, uint32_t chunks, uint32_t k) {
  unsigned __int128 len = w.length();
  return w.start_ns + static_cast<uint64_t>(len * k / chunks);
}

}  // namespace

double BusyFraction(std::vector<Interval> segments, Interval window) {
  if (window.length() == 0) return 0;
  return static_cast<double>(UnionOverlap(segments, window)) /
         static_cast<double>(window.length());
}

std::vector<double> ChunkBusyFractions(std::vector<Interval> segments, Interval window,
                                       uint32_t chunks) {
  std::vector<double> out;
  if (chunks == 0 || window.length() == 0) return out;
  std::vector<Interval> merged = Union(std::move(segments));
  for (uint32_t k = 0; k < chunks; ++k) {
    Interval c{ChunkEdge(window, chunks, k), ChunkEdge(window, chunks, k + 1)};
    out.push_back(c.length() ? static_cast<double>(UnionOverlap(merged, c)) /
                                   static_cast<double>(c.length())
                             : 0.0);
  }
  return out;
}

// ---------------------------------------------------------------------------
// Join

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

// ---------------------------------------------------------------------------
// Copy classes

CopyClassKey ClassOf(uint32_t direction, uint32_t src_kind, uint32_t dst_kind) {
  switch (direction) {
    case kH2D:
    case kH2H: return {direction, src_kind};
    case kD2H: return {direction, dst_kind};
    case kD2D:
    case kPeer: return {direction, kDevice};
    default: return {direction, src_kind};
  }
}

void CopyClassAccumulator::Add(const Joined& j) {
  if (j.device.kind != kActMemcpy) return;
  CopyClassKey key = j.host ? ClassOf(j.host->direction, j.host->src_kind, j.host->dst_kind)
                            : ClassOf(j.device.direction, j.device.src_kind, j.device.dst_kind);
  CopyClassStats& s = classes_[key];
  s.key = key;
  ++s.count;
  s.bytes += j.device.bytes;
  s.device_ns += j.device.duration_ns();
  if (j.host) {
    ++s.joined;
    s.host_blocked_ns += j.host->blocked_ns();
  }
}

std::vector<CopyClassStats> CopyClassAccumulator::Results() const {
  std::vector<CopyClassStats> out;
  for (const auto& [key, s] : classes_) out.push_back(s);
  return out;
}

// ---------------------------------------------------------------------------
// Gaps

const char* GapCauseName(GapCause cause) {
  switch (cause) {
    case GapCause::kCopy: return "copy";
    case GapCause::kSync: return "sync";
    case GapCause::kDataLoader: return "dataloader";
    case GapCause::kUnknown: return "unknown";
  }
  return "unknown";
}

void AttributeGap(Gap* gap, const std::vector<Interval>& copy, const std::vector<Interval>& sync,
                  const std::vector<Interval>& loader, double min_share) {
  Interval g{gap->start_ns, gap->end_ns};
  const std::vector<Interval>* lists[3] = {&copy, &sync, &loader};
  int best = -1;
  uint64_t best_ns = 0;
  for (int c = 0; c < 3; ++c) {
    gap->overlap_ns[c] = UnionOverlap(*lists[c], g);
    if (gap->overlap_ns[c] > best_ns) {  // strict: ties keep the earlier cause
      best = c;
      best_ns = gap->overlap_ns[c];
    }
  }
  // Gap time covered by no cause at all.
  std::vector<Interval> all(copy);
  all.insert(all.end(), sync.begin(), sync.end());
  all.insert(all.end(), loader.begin(), loader.end());
  gap->overlap_ns[static_cast<int>(GapCause::kUnknown)] = g.length() - UnionOverlap(all, g);
  bool enough = best >= 0 && static_cast<double>(best_ns) >= min_share * static_cast<double>(g.length());
  gap->cause = enough ? static_cast<GapCause>(best) : GapCause::kUnknown;
}

// ---------------------------------------------------------------------------
// Busy tracker

namespace {
struct ByStart {
  bool operator()(const Interval& a, const Interval& b) const { return a.start_ns > b.start_ns; }
};
struct ByLength {
  bool operator()(const Gap& a, const Gap& b) const { return a.length() > b.length(); }
};
}  // namespace

struct GpuBusyTracker::PerDevice {
  uint32_t id = 0;
  std::priority_queue<Interval, std::vector<Interval>, ByStart> pending;
  bool has_cur = false;  // the merged run being extended
  Interval cur;
  bool has_last = false;  // the last closed run
  uint64_t last_end = 0;
  uint64_t first_start = std::numeric_limits<uint64_t>::max();
  uint64_t max_end = 0;
  uint64_t busy_total = 0;
  uint64_t records = 0, late = 0;
  // Bins of busy ns for the chunk figures.
  bool bins_init = false;
  uint64_t origin = 0, width = 0;
  std::vector<uint64_t> bins;
  // Gaps.
  uint64_t gap_count = 0, gap_ns = 0;
  CauseTotals by_cause[kGapCauses];
  std::priority_queue<Gap, std::vector<Gap>, ByLength> longest;  // min-heap by length
};

GpuBusyTracker::GpuBusyTracker(BusyOptions options) : options_(options) {
  if (options_.bin_ns == 0) options_.bin_ns = 1;
  if (options_.max_bins < 2) options_.max_bins = 2;
}

GpuBusyTracker::~GpuBusyTracker() {
  for (auto& [id, d] : devices_) delete d;
}

GpuBusyTracker::PerDevice& GpuBusyTracker::Device(uint32_t id) {
  PerDevice*& d = devices_[id];
  if (!d) {
    d = new PerDevice;
    d->id = id;
  }
  return *d;
}

void GpuBusyTracker::AddDevice(const DeviceRecord& r) {
  if (r.kind != kActKernel && r.kind != kActMemcpy && r.kind != kActMemset) return;
  if (r.end_ns <= r.start_ns) return;
  PerDevice& d = Device(r.device_id);
  ++d.records;
  d.pending.push({r.start_ns, r.end_ns});
}

void GpuBusyTracker::AddHostInterval(GapCause cause, Interval interval) {
  int c = static_cast<int>(cause);
  if (c < 0 || c > 2 || interval.length() == 0) return;
  host_[c].push_back(interval);
}

void GpuBusyTracker::AddBlind(Interval interval) {
  if (interval.length() == 0) return;
  if (blind_.empty() || interval.start_ns > blind_.back().end_ns) {
    blind_.push_back(interval);  // the usual case: in time order
  } else {
    blind_.push_back(interval);
    blind_ = Union(std::move(blind_));
  }
}

void GpuBusyTracker::BeginBlind(uint64_t start_ns) {
  if (!open_blind_) open_blind_ = start_ns;
}

void GpuBusyTracker::EndBlind(uint64_t end_ns) {
  if (!open_blind_) return;
  AddBlind({*open_blind_, end_ns});
  open_blind_.reset();
}

void GpuBusyTracker::Known(Interval iv, std::vector<Interval>* out) const {
  out->clear();
  // Nothing after the start of an open blind interval is known (yet).
  const uint64_t cap = open_blind_.value_or(std::numeric_limits<uint64_t>::max());
  auto push = [&](uint64_t s, uint64_t e) {
    e = std::min(e, cap);
    if (e > s) out->push_back({s, e});
  };
  uint64_t s = iv.start_ns;
  // The first blind interval that ends after s.
  auto it = std::upper_bound(blind_.begin(), blind_.end(), s,
                             [](uint64_t v, const Interval& b) { return v < b.end_ns; });
  for (; it != blind_.end() && it->start_ns < iv.end_ns; ++it) {
    if (it->start_ns > s) push(s, it->start_ns);
    s = std::max(s, it->end_ns);
  }
  if (s < iv.end_ns) push(s, iv.end_ns);
}

uint64_t GpuBusyTracker::BlindIn(Interval w) const {
  uint64_t total = 0;
  auto it = std::upper_bound(blind_.begin(), blind_.end(), w.start_ns,
                             [](uint64_t v, const Interval& b) { return v < b.end_ns; });
  for (; it != blind_.end() && it->start_ns < w.end_ns; ++it) total += Overlap(*it, w);
  if (open_blind_) total += Overlap({*open_blind_, std::numeric_limits<uint64_t>::max()}, w);
  return total;
}

void GpuBusyTracker::AddToBins(PerDevice& d, uint64_t start, uint64_t end) {
  if (!d.bins_init) {
    d.bins_init = true;
    d.origin = options_.origin_ns.value_or(start);
    d.width = options_.bin_ns;
  }
  if (end <= d.origin) return;
  start = std::max(start, d.origin);
  // Coarsen until the run fits in max_bins.
  while ((end - 1 - d.origin) / d.width >= options_.max_bins) {
    std::vector<uint64_t> merged((d.bins.size() + 1) / 2, 0);
    for (size_t i = 0; i < d.bins.size(); ++i) merged[i / 2] += d.bins[i];
    d.bins.swap(merged);
    d.width *= 2;
  }
  size_t first = (start - d.origin) / d.width, last = (end - 1 - d.origin) / d.width;
  if (d.bins.size() <= last) d.bins.resize(last + 1, 0);
  for (size_t i = first; i <= last; ++i) {
    uint64_t b0 = d.origin + i * d.width;
    d.bins[i] += Overlap({start, end}, {b0, b0 + d.width});
  }
}

void GpuBusyTracker::CloseSegment(PerDevice& d) {
  if (!d.has_cur) return;
  d.busy_total += d.cur.length();
  d.first_start = std::min(d.first_start, d.cur.start_ns);
  d.max_end = std::max(d.max_end, d.cur.end_ns);
  AddToBins(d, d.cur.start_ns, d.cur.end_ns);
  d.has_last = true;
  d.last_end = d.cur.end_ns;
  d.has_cur = false;
}

void GpuBusyTracker::FinishGap(PerDevice& d, Gap gap) {
  // The host intervals that may overlap the gap, per cause.
  std::vector<Interval> lists[3];
  for (int c = 0; c < 3; ++c)
    for (const Interval& i : host_[c])
      if (Overlap(i, {gap.start_ns, gap.end_ns}) > 0) lists[c].push_back(i);
  AttributeGap(&gap, lists[0], lists[1], lists[2], options_.min_share);
  ++d.gap_count;
  d.gap_ns += gap.length();
  CauseTotals& t = d.by_cause[static_cast<int>(gap.cause)];
  ++t.gaps;
  t.idle_ns += gap.length();
  if (options_.max_gaps_kept == 0) return;
  if (d.longest.size() < options_.max_gaps_kept) {
    d.longest.push(gap);
  } else if (gap.length() > d.longest.top().length()) {
    d.longest.pop();
    d.longest.push(gap);
  }
}

void GpuBusyTracker::Drain(PerDevice& d, uint64_t upto_ns) {
  while (!d.pending.empty() && d.pending.top().start_ns < upto_ns) {
    Interval iv = d.pending.top();
    d.pending.pop();
    if (!blind_.empty() || open_blind_) {
      // Only the part outside blind time counts. A record cut in pieces, or
      // starting in blind time, goes back as its pieces, so that runs are
      // still merged in start order.
      Known(iv, &pieces_);
      if (pieces_.empty()) continue;
      if (pieces_.size() > 1 || pieces_[0].start_ns != iv.start_ns) {
        for (const Interval& p : pieces_) d.pending.push(p);
        continue;
      }
      iv = pieces_[0];
    }
    bool late = (d.has_cur && iv.start_ns < d.cur.start_ns) ||
                (!d.has_cur && d.has_last && iv.start_ns < d.last_end);
    if (late) {
      // Its time was merged already: count what lies before the merged run
      // (it may double-count an overlap with closed runs; never expected
      // within the reorder window).
      ++d.late;
      uint64_t limit = d.has_cur ? d.cur.start_ns : d.last_end;
      Interval part{iv.start_ns, std::min(iv.end_ns, limit)};
      if (part.length()) {
        d.busy_total += part.length();
        AddToBins(d, part.start_ns, part.end_ns);
      }
      if (iv.end_ns <= limit) continue;
      iv.start_ns = limit;
    }
    if (d.has_cur && iv.start_ns <= d.cur.end_ns) {
      d.cur.end_ns = std::max(d.cur.end_ns, iv.end_ns);
      continue;
    }
    CloseSegment(d);
    if (d.has_last && iv.start_ns > d.last_end) {
      // A pause: its pieces outside blind time longer than the threshold
      // are gaps (without blind time, the whole pause).
      Interval pause{d.last_end, iv.start_ns};
      if (blind_.empty() && !open_blind_) {
        pieces_.assign(1, pause);
      } else {
        Known(pause, &pieces_);
      }
      std::vector<Interval> settling;
      for (const Interval& p : pieces_) {
        // The piece that opens a sampling window (it starts where blind
        // time ends) up to the window's first activity: kernels launched
        // while recording was off may still be running there, unrecorded,
        // so the GPU only looks idle. It is blind time too, not a gap.
        if (p.start_ns > pause.start_ns) {
          settling.push_back(p);
          continue;
        }
        if (p.length() <= options_.gap_threshold_ns) continue;
        Gap g;
        g.device_id = d.id;
        g.start_ns = p.start_ns;
        g.end_ns = p.end_ns;
        FinishGap(d, g);
      }
      for (const Interval& p : settling) AddBlind(p);
    }
    d.cur = iv;
    d.has_cur = true;
  }
}

void GpuBusyTracker::PruneHost(uint64_t before_ns) {
  for (auto& list : host_) {
    list.erase(std::remove_if(list.begin(), list.end(),
                              [&](const Interval& i) { return i.end_ns < before_ns; }),
               list.end());
  }
}

void GpuBusyTracker::Advance(uint64_t now_ns) {
  if (now_ns < options_.reorder_ns) return;
  uint64_t upto = now_ns - options_.reorder_ns;
  uint64_t keep_from = upto;
  for (auto& [id, d] : devices_) {
    Drain(*d, upto);
    // A future gap starts where the current run ends (or the last one did).
    uint64_t next_gap_start = d->has_cur ? d->cur.start_ns : d->has_last ? d->last_end : upto;
    keep_from = std::min(keep_from, next_gap_start);
  }
  PruneHost(keep_from);
}

std::vector<DeviceBusy> GpuBusyTracker::Finish(Interval window) {
  std::vector<DeviceBusy> out;
  for (auto& [id, dp] : devices_) {
    PerDevice& d = *dp;
    Drain(d, std::numeric_limits<uint64_t>::max());
    CloseSegment(d);
    DeviceBusy b;
    b.device_id = d.id;
    b.window = window;
    b.records = d.records;
    b.late_records = d.late;
    // Exact when every activity lies in the window; else from the bins.
    auto bins_in = [&](Interval w) {
      double sum = 0;
      for (size_t i = 0; i < d.bins.size(); ++i) {
        uint64_t b0 = d.origin + i * d.width;
        uint64_t o = Overlap({b0, b0 + d.width}, w);
        if (o) sum += static_cast<double>(d.bins[i]) * static_cast<double>(o) /
                      static_cast<double>(d.width);
      }
      return sum;
    };
    if (d.busy_total == 0) {
      b.busy_ns = 0;
    } else if (d.first_start >= window.start_ns && d.max_end <= window.end_ns) {
      b.busy_ns = d.busy_total;
    } else {
      b.busy_ns = static_cast<uint64_t>(bins_in(window) + 0.5);
    }
    uint64_t wl = window.length();
    // Known time: the window less blind time (an open blind interval ends
    // at the window's end).
    auto known_in = [&](Interval w) { return w.length() - std::min(w.length(), BlindIn(w)); };
    b.blind_ns = wl - known_in(window);
    const uint64_t known = wl - b.blind_ns;
    b.busy_fraction = known ? static_cast<double>(b.busy_ns) / static_cast<double>(known) : 0.0;
    for (uint32_t k = 0; k < options_.chunks && wl; ++k) {
      Interval c{ChunkEdge(window, options_.chunks, k), ChunkEdge(window, options_.chunks, k + 1)};
      const uint64_t ck = known_in(c);
      double f;
      if (c.length() == 0) {
        f = 0.0;
      } else if (ck == c.length()) {
        f = bins_in(c) / static_cast<double>(c.length());
      } else if (ck == 0) {
        f = kUnknownFraction;
      } else {  // the bins spread busy time evenly over a bin: may exceed the known time
        f = std::min(1.0, bins_in(c) / static_cast<double>(ck));
      }
      b.chunk_busy_fraction.push_back(f);
    }
    if (d.busy_total) {
      if (d.first_start > window.start_ns)
        b.leading_idle_ns = known_in({window.start_ns, std::min(d.first_start, window.end_ns)});
      if (d.max_end < window.end_ns)
        b.trailing_idle_ns = known_in({std::max(d.max_end, window.start_ns), window.end_ns});
    } else {
      b.leading_idle_ns = known;
    }
    uint64_t active = known - std::min(known, b.leading_idle_ns + b.trailing_idle_ns);
    b.active_busy_fraction =
        active ? std::min(1.0, static_cast<double>(b.busy_ns) / static_cast<double>(active)) : 0.0;
    b.gap_count = d.gap_count;
    b.gap_ns = d.gap_ns;
    for (int c = 0; c < kGapCauses; ++c) b.by_cause[c] = d.by_cause[c];
    while (!d.longest.empty()) {
      b.longest_gaps.push_back(d.longest.top());
      d.longest.pop();
    }
    std::reverse(b.longest_gaps.begin(), b.longest_gaps.end());
    out.push_back(std::move(b));
  }
  return out;
}

// ---------------------------------------------------------------------------
// Verdict

InputVerdict JudgeInput(const DeviceBusy& busy, double busy_threshold) {
  InputVerdict v;
  const uint64_t known = busy.known_ns();
  v.measured = known > 0;
  v.busy_fraction = busy.active_busy_fraction;
  v.not_input_bound = v.measured && busy.active_busy_fraction >= busy_threshold;
  uint64_t input = busy.by_cause[static_cast<int>(GapCause::kCopy)].idle_ns +
                   busy.by_cause[static_cast<int>(GapCause::kDataLoader)].idle_ns;
  v.input_idle_fraction = known ? static_cast<double>(input) / static_cast<double>(known) : 0.0;
  return v;
}

// ---------------------------------------------------------------------------
// Per process

ProcessDeviceAnalysis::ProcessDeviceAnalysis(BusyOptions options, uint64_t join_horizon_ns)
    : joiner_(join_horizon_ns), busy_(options) {}

void ProcessDeviceAnalysis::Pump() {
  for (Joined& j : joiner_.Take()) {
    classes_.Add(j);
    if (keep_copies_ && j.host && j.host->type == HostCall::Type::kCopy &&
        j.device.kind == kActMemcpy)
      joined_copies_.push_back(std::move(j));
  }
}

void ProcessDeviceAnalysis::OnHostCall(const HostCall& call) {
  joiner_.AddHostCall(call);
  busy_.AddHostInterval(call.type == HostCall::Type::kCopy ? GapCause::kCopy : GapCause::kSync,
                        {call.start_ns, call.end_ns});
  Pump();
}

void ProcessDeviceAnalysis::OnLoaderWait(Interval wait) {
  busy_.AddHostInterval(GapCause::kDataLoader, wait);
}

void ProcessDeviceAnalysis::OnCorrelation(uint32_t correlation_id, uint64_t call_id,
                                          uint64_t now_ns) {
  joiner_.AddCorrelation(correlation_id, call_id, now_ns);
  Pump();
}

void ProcessDeviceAnalysis::OnDevice(const DeviceRecord& record) {
  joiner_.AddDevice(record);
  busy_.AddDevice(record);
  Pump();
}

void ProcessDeviceAnalysis::OnRecording(const RecordingSwitch& change) {
  ++recording_.switches;
  recording_.peak_kernel_rate = std::max(recording_.peak_kernel_rate, change.kernel_rate);
  if (!change.kernels && !busy_.blind_open()) {
    ++recording_.stops;
    if (recording_.mode.empty()) {
      recording_.mode = change.reason == "sampling"   ? "auto"
                        : change.reason == "disabled" ? "off"
                        : change.reason.empty()       ? "unknown"
                                                      : change.reason;
    }
    busy_.BeginBlind(change.time_ns);
  } else if (change.kernels && busy_.blind_open()) {
    ++recording_.windows;
    busy_.EndBlind(change.time_ns);
  }
}

void ProcessDeviceAnalysis::Advance(uint64_t now_ns) {
  joiner_.Advance(now_ns);
  busy_.Advance(now_ns);
  Pump();
}

ProcessDeviceResult ProcessDeviceAnalysis::Finish(Interval window) {
  joiner_.Finish();
  Pump();
  ProcessDeviceResult r;
  r.join = joiner_.stats();
  r.copy_classes = classes_.Results();
  r.devices = busy_.Finish(window);
  r.recording = recording_;
  return r;
}

}  // namespace pinscope::device
