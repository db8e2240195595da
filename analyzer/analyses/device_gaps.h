// GPU idle gaps and their attribution to what the host was doing: a copy,
// a synchronize, or waiting for the DataLoader (device_activity.h). Pure:
// one gap and the host intervals in, its cause out.
#pragma once

#include <cstdint>
#include <vector>

#include "analyzer/analyses/device_intervals.h"

namespace pinscope::device {

// What the host was doing during a GPU idle gap.
enum class GapCause : uint32_t {
  kCopy = 0,        // inside a copy call (the host blocked on a copy)
  kSync = 1,        // inside a synchronize call
  kDataLoader = 2,  // waiting for the next batch (caller-supplied intervals)
  kUnknown = 3,
};
constexpr int kGapCauses = 4;
const char* GapCauseName(GapCause cause);  // "copy", "sync", "dataloader", "unknown"

struct Gap {
  uint32_t device_id = 0;
  uint64_t start_ns = 0, end_ns = 0;
  GapCause cause = GapCause::kUnknown;
  // Host time inside the gap spent in each cause (union per cause), ns.
  uint64_t overlap_ns[kGapCauses] = {};
  uint64_t length() const { return end_ns > start_ns ? end_ns - start_ns : 0; }
};

// Attributes one gap from the host intervals of each cause (each list sorted
// by start, or not: any order). The cause is the one whose union covers the
// most of the gap, if it covers at least `min_share` of it; ties go to copy,
// then sync, then dataloader. Otherwise kUnknown.
void AttributeGap(Gap* gap, const std::vector<Interval>& copy, const std::vector<Interval>& sync,
                  const std::vector<Interval>& loader, double min_share);

}  // namespace pinscope::device
