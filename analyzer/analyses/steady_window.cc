// The step model's steady window; see steady_window.h.
#include "analyzer/analyses/steady_window.h"

#include <algorithm>

namespace pinscope {

bool ChooseSteadyWindow(const std::vector<StepGroup>& groups, const std::vector<uint64_t>& epochs,
                        device::Interval* window, uint64_t* steps) {
  // before[g]: the steps of the groups before group g.
  std::vector<uint64_t> before(groups.size() + 1, 0);
  for (size_t g = 0; g < groups.size(); ++g) before[g + 1] = before[g] + groups[g].count;
  const uint64_t total = before.back();
  if (total < 4) return false;
  // Where step i starts (its group's start), and how many start before t.
  const auto start_of = [&](uint64_t i) {
    return groups[std::upper_bound(before.begin(), before.end(), i) - before.begin() - 1].start;
  };
  const auto steps_before = [&](uint64_t t) {
    return before[std::lower_bound(groups.begin(), groups.end(), t,
                                   [](const StepGroup& g, uint64_t v) { return g.start < v; }) -
                  groups.begin()];
  };
  uint64_t lo = 0, n = total;  // the steps of the epoch: [lo, lo + n)
  if (epochs.size() >= 2) {
    uint64_t best_a = 0, best_n = 0;
    for (size_t e = 0; e < epochs.size(); ++e) {
      const uint64_t a = steps_before(epochs[e]);
      const uint64_t b = steps_before(e + 1 < epochs.size() ? epochs[e + 1] : UINT64_MAX);
      if (b - a >= best_n) best_n = b - a, best_a = a;
    }
    if (best_n >= 4) lo = best_a, n = best_n;
  }
  uint64_t skip = std::max<uint64_t>(2, n / 8), last = n - 1;
  if (last <= skip + 1) return false;
  {
    // The first and the last step from `skip` to `last` that found the
    // queue empty.
    const uint64_t from = start_of(lo + skip), to = start_of(lo + last);
    const StepGroup* first = nullptr;
    const StepGroup* final = nullptr;
    for (const StepGroup& g : groups) {
      if (g.waits == 0 || g.start < from || g.start > to) continue;
      if (first == nullptr) first = &g;
      final = &g;
    }
    if (first != nullptr) {
      const uint64_t a = std::max(steps_before(first->start), lo) - lo;
      const uint64_t b = std::max(steps_before(final->start), lo) - lo;
      if (b >= a + 3 && 2 * (b - a) >= last - skip) skip = a, last = b;
    }
  }
  *window = {start_of(lo + skip), start_of(lo + last)};
  *steps = 0;
  for (const StepGroup& g : groups)
    if (g.start >= window->start_ns && g.start < window->end_ns) *steps += g.count;
  return *steps > 0;
}

}  // namespace pinscope
