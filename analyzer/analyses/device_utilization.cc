// NVML utilization samples as busy figures; see device_utilization.h.
#include "analyzer/analyses/device_utilization.h"

#include <algorithm>

namespace pinscope::device {

namespace {

uint64_t Overlap(uint64_t a0, uint64_t a1, uint64_t b0, uint64_t b1) {
  const uint64_t lo = std::max(a0, b0), hi = std::min(a1, b1);
  return hi > lo ? hi - lo : 0;
}

}  // namespace

void UtilizationSeries::Add(uint32_t device_id, uint64_t sample_ns, uint32_t percent) {
  Series& s = by_device_[device_id];
  if (sample_ns <= s.last_ns) return;
  percent = std::min<uint32_t>(percent, 100);
  if (s.last_ns == 0) {
    s.samples.push_back({sample_ns, sample_ns, percent});  // period filled in at Apply
  } else {
    if (s.periods.size() < 15) s.periods.push_back(sample_ns - s.last_ns);
    s.samples.push_back({s.last_ns, sample_ns, percent});
  }
  s.last_ns = sample_ns;
  ++total_;
  if (s.samples.size() >= kMaxSamples) Compact(&s);
}

void UtilizationSeries::Compact(Series* s) {
  std::vector<Sample>& v = s->samples;
  size_t out = 0;
  for (size_t i = 0; i + 1 < v.size(); i += 2) {
    Sample a = v[i];
    const Sample& b = v[i + 1];
    // The first sample has no period yet: give it its successor's.
    if (a.start_ns == a.end_ns) a.start_ns = a.end_ns - std::min(a.end_ns, b.end_ns - b.start_ns);
    const uint64_t la = a.end_ns - a.start_ns, lb = b.end_ns - b.start_ns;
    const uint64_t len = la + lb;
    const uint32_t pct =
        len ? static_cast<uint32_t>((a.percent * la + b.percent * lb + len / 2) / len) : b.percent;
    v[out++] = {a.start_ns, b.end_ns, pct};
  }
  if (v.size() % 2) v[out++] = v.back();
  v.resize(out);
}

void UtilizationSeries::Apply(Interval window, uint32_t chunks,
                              const std::vector<uint32_t>& with_kernels,
                              std::vector<DeviceBusy>* devices) const {
  if (window.end_ns <= window.start_ns) return;
  for (const auto& [device_id, s] : by_device_) {
    const uint32_t id = device_id;
    if (s.samples.empty()) continue;
    uint64_t first_period = 0;
    if (!s.periods.empty()) {
      std::vector<uint64_t> p = s.periods;
      std::nth_element(p.begin(), p.begin() + p.size() / 2, p.end());
      first_period = p[p.size() / 2];
    }
    auto bounds = [&](const Sample& x) {
      uint64_t start = x.start_ns;
      if (start == x.end_ns) start = x.end_ns > first_period ? x.end_ns - first_period : 0;
      return std::pair<uint64_t, uint64_t>{start, x.end_ns};
    };
    // Over the window, and over the active span: first to last sample with
    // any kernel time (start-up and teardown do not dilute a busy loop, as
    // DeviceBusy::active_busy_fraction).
    double busy = 0;
    uint64_t covered = 0, count = 0;
    uint64_t active_start = 0, active_end = 0;
    for (const Sample& x : s.samples) {
      auto [a, b] = bounds(x);
      const uint64_t in = Overlap(a, b, window.start_ns, window.end_ns);
      if (!in) continue;
      ++count;
      covered += in;
      busy += in * (x.percent / 100.0);
      if (x.percent > 0) {
        if (!active_start) active_start = std::max(a, window.start_ns);
        active_end = std::min(b, window.end_ns);
      }
    }
    if (!count) continue;
    auto it = std::find_if(devices->begin(), devices->end(),
                           [&](const DeviceBusy& d) { return d.device_id == id; });
    if (it == devices->end()) {
      DeviceBusy d;
      d.device_id = id;
      d.window = window;
      d.blind_ns = window.length();  // no kernel records: all blind
      d.chunk_busy_fraction.assign(chunks, kUnknownFraction);
      devices->push_back(d);
      it = devices->end() - 1;
    }
    DeviceBusy& d = *it;
    d.utilization_samples = count;
    d.utilization_period_ns = first_period;
    d.utilization_covered_ns = covered;
    d.utilization_busy_fraction = busy / static_cast<double>(covered);
    if (std::find(with_kernels.begin(), with_kernels.end(), id) != with_kernels.end())
      continue;  // kernels were recorded: their figures stand
    d.source = BusySource::kUtilization;
    d.busy_ns = static_cast<uint64_t>(busy);
    d.busy_fraction = busy / static_cast<double>(covered);
    double active_busy = 0;
    uint64_t active_covered = 0;
    std::vector<double> chunk_busy(chunks, 0.0);
    std::vector<uint64_t> chunk_cov(chunks, 0);
    const uint64_t len = window.length();
    for (const Sample& x : s.samples) {
      auto [a, b] = bounds(x);
      const double f = x.percent / 100.0;
      if (uint64_t in = Overlap(a, b, active_start, active_end)) {
        active_covered += in;
        active_busy += in * f;
      }
      for (uint32_t c = 0; c < chunks; ++c) {
        const uint64_t c0 = window.start_ns + len * c / chunks;
        const uint64_t c1 = window.start_ns + len * (c + 1) / chunks;
        if (uint64_t in = Overlap(a, b, c0, c1)) {
          chunk_cov[c] += in;
          chunk_busy[c] += in * f;
        }
      }
    }
    d.active_busy_fraction = active_covered ? active_busy / active_covered : 0.0;
    d.chunk_busy_fraction.assign(chunks, kUnknownFraction);
    for (uint32_t c = 0; c < chunks; ++c)
      if (chunk_cov[c]) d.chunk_busy_fraction[c] = std::min(1.0, chunk_busy[c] / chunk_cov[c]);
  }
}

}  // namespace pinscope::device
