// The step model's steady window; see steady_window.h.
#include "analyzer/analyses/steady_window.h"

#include <algorithm>

namespace pinscope {

bool ChooseSteadyWindow(const std::vector<StepGroup>& groups, const std::vector<uint64_t>& epochs,
                        const std::vector<uint64_t>& breaks, SteadyWindow* out) {
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
  // The window's end: the start of step `last`, or a break's start.
  uint64_t end = start_of(lo + last);
  bool cut = false;  // the window was cut to leave breaks out
  out->breaks_avoided = 0;
  {
    // The longest stretch of steps from `skip` to `last` with no break
    // inside: steps [a, b), ending at the break after step b - 1.
    const uint64_t from = start_of(lo + skip);
    auto it = std::upper_bound(breaks.begin(), breaks.end(), from);
    const auto stop = std::lower_bound(breaks.begin(), breaks.end(), end);
    if (it != stop) {
      uint64_t best_a = 0, best_b = 0, best_end = 0, a = skip, avoided = 0;
      for (; it != stop; ++it, ++avoided) {
        const uint64_t b = std::max(steps_before(*it), lo) - lo;  // steps before the break
        if (b > a && b - a > best_b - best_a) best_a = a, best_b = b, best_end = *it;
        a = std::max(a, b);
      }
      if (last > a && last - a > best_b - best_a) best_a = a, best_b = last, best_end = end;
      // Long enough to stand for the loop: half the steps, or 16.
      const uint64_t best = best_b - best_a;
      if (best >= 4 && (2 * best >= last - skip || best >= 16)) {
        skip = best_a, last = best_b, end = best_end, cut = true;
        out->breaks_avoided = avoided;
      }
    }
  }
  {
    // The first and the last step from `skip` to `last` that found the
    // queue empty.
    const uint64_t from = start_of(lo + skip);
    const StepGroup* first = nullptr;
    const StepGroup* final = nullptr;
    for (const StepGroup& g : groups) {
      // Up to the last step itself; before a break that ends the window.
      if (g.waits == 0 || g.start < from || g.start > end || (cut && g.start == end))
        continue;
      if (first == nullptr) first = &g;
      final = &g;
    }
    if (first != nullptr) {
      const uint64_t a = std::max(steps_before(first->start), lo) - lo;
      const uint64_t b = std::max(steps_before(final->start), lo) - lo;
      if (b >= a + 3 && 2 * (b - a) >= last - skip) skip = a, last = b, end = start_of(lo + last);
    }
  }
  out->window = {start_of(lo + skip), end};
  out->steps = 0;
  for (const StepGroup& g : groups)
    if (g.start >= out->window.start_ns && g.start < out->window.end_ns) out->steps += g.count;
  out->breaks_inside =
      static_cast<uint64_t>(std::lower_bound(breaks.begin(), breaks.end(), out->window.end_ns) -
                            std::lower_bound(breaks.begin(), breaks.end(), out->window.start_ns));
  return out->steps > 0;
}

}  // namespace pinscope
