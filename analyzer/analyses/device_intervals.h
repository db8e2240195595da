// Time intervals and the busy-fraction math over them, shared by the gap
// attribution and the busy tracker (device_activity.h). Pure functions; the
// exact reference the tracker's bins approximate.
#pragma once

#include <cstdint>
#include <vector>

namespace pinscope::device {

struct Interval {
  uint64_t start_ns = 0, end_ns = 0;
  uint64_t length() const { return end_ns > start_ns ? end_ns - start_ns : 0; }
};

// Length of the overlap of two intervals.
uint64_t Overlap(Interval a, Interval b);

// Length of the union of `intervals` (merged or not) inside `window`.
uint64_t UnionOverlap(const std::vector<Interval>& intervals, Interval window);

// Edge k of `chunks` equal chunks of `w` (integer arithmetic, no drift).
uint64_t ChunkEdge(Interval w, uint32_t chunks, uint32_t k);

// Busy fraction of `segments` (merged or not) within `window`, and per each
// of `chunks` equal chunks of it: the exact reference the tracker's bins
// approximate, for callers that hold all intervals.
double BusyFraction(std::vector<Interval> segments, Interval window);
std::vector<double> ChunkBusyFractions(std::vector<Interval> segments, Interval window,
                                       uint32_t chunks);
// Union of intervals, sorted and merged (touching intervals merge).
std::vector<Interval> Union(std::vector<Interval> intervals);

}  // namespace pinscope::device
