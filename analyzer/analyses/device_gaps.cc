// Gap attribution; see device_gaps.h.
#include "analyzer/analyses/device_gaps.h"

namespace pinscope::device {

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

}  // namespace pinscope::device
