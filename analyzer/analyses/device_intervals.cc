// Interval math of the device-activity analyses; see device_intervals.h.
#include "analyzer/analyses/device_intervals.h"

#include <algorithm>
#include <utility>

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

uint64_t ChunkEdge(Interval w, uint32_t chunks, uint32_t k) {
  unsigned __int128 len = w.length();
  return w.start_ns + static_cast<uint64_t>(len * k / chunks);
}

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

}  // namespace pinscope::device
