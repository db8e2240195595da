// The busy tracker; see device_busy.h.
#include "analyzer/analyses/device_busy.h"

#include <algorithm>
#include <limits>
#include <queue>
#include <utility>

namespace pinscope::device {

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

}  // namespace pinscope::device
