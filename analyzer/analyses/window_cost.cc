// What the device-record windows cost the loop; see window_cost.h.
#include "analyzer/analyses/window_cost.h"

#include <algorithm>

namespace pinscope {

WindowCostAnalysis::PerProcess& WindowCostAnalysis::Of(const ProcessState& process) {
  return processes_[process.index()];
}

void WindowCostAnalysis::OnCopy(const CopyContext& copy) {
  if (copy.event.process.origin() == trace::ORIGIN_FORK) return;
  PerProcess& p = Of(copy.event.process);
  const Copy c{copy.event.packet.timestamp_ns(), copy.copy.stack_id()};
  StackSpan& s = p.stacks[c.stack];
  if (s.count++ == 0) s.first = c.t;
  s.last = std::max(s.last, c.t);
  // Near a window (open, or closed less than kAfterNs + 2 kSideNs ago: the
  // last step of the side after it needs the copy that ends it).
  if (!p.windows.empty()) {
    Window& w = p.windows.back();
    if (!w.overflow && (w.detach == 0 || c.t <= w.detach + kAfterNs + 2 * kSideNs)) {
      w.overflow = w.copies.size() >= kMaxWindowCopies;
      if (!w.overflow) w.copies.push_back(c);
    }
  }
  // Two sides' worth, so that every step beginning in the side before a
  // window is whole.
  p.recent.push_back(c);
  while (!p.recent.empty() && p.recent.front().t + 2 * kSideNs < c.t) p.recent.pop_front();
}

void WindowCostAnalysis::OnRecording(const Event& event, const trace::DeviceRecording& recording) {
  if (event.process.origin() == trace::ORIGIN_FORK) return;
  PerProcess& p = Of(event.process);
  const uint64_t t = event.packet.timestamp_ns();
  const bool open = !p.windows.empty() && p.windows.back().detach == 0;
  if (recording.detached()) {
    if (open) {
      p.windows.back().detach = t;
      p.planned_gap = recording.planned_ns();
    }
    return;
  }
  if (open || (recording.reason() != "attached" && recording.reason() != "check")) return;
  Window w;
  w.attach = t;
  w.copies.assign(p.recent.begin(), p.recent.end());
  p.windows.push_back(std::move(w));
}

void WindowCostAnalysis::Finish(const RunInfo& run) {
  if (run.root == nullptr) return;
  auto it = processes_.find(run.root->index());
  if (it == processes_.end() || it->second.stacks.empty()) return;
  PerProcess& p = it->second;
  // The loop's stack: its copies cover the most time.
  uint64_t marker = 0;
  double best = -1;
  for (const auto& [stack, s] : p.stacks) {
    const double score = static_cast<double>(s.count) * static_cast<double>(s.last - s.first);
    if (score > best) {
      best = score;
      marker = stack;
    }
  }
  const StackSpan& loop = p.stacks[marker];
  loop_steps_ = loop.count > 0 ? static_cast<uint32_t>(loop.count - 1) : 0;
  loop_ns_ = loop.last - loop.first;
  period_gap_ns_ = p.planned_gap;
  for (const Window& w : p.windows) {
    if (w.detach == 0 || w.overflow) continue;  // ended inside it, or attached throughout
    std::vector<uint64_t> m;                    // the loop's copies near the window
    for (const Copy& c : w.copies)
      if (c.stack == marker && (m.empty() || c.t >= m.back())) m.push_back(c.t);
    const uint64_t a = w.attach, d = w.detach;
    // The first of m at or after t (strictly after when `after`).
    auto at = [&](uint64_t t, bool after) {
      return static_cast<size_t>((after ? std::upper_bound(m.begin(), m.end(), t)
                                        : std::lower_bound(m.begin(), m.end(), t)) -
                                 m.begin());
    };
    const size_t i0 = at(a, false), i1 = at(d, true), i2 = at(d + kAfterNs, true);
    if (i1 <= i0 || i1 >= m.size()) continue;  // no step in it (the start's check), or none after
    // Each side's mean interval between the loop's copies: the kSideNs
    // before the window, and the kSideNs from kAfterNs past its detach.
    std::vector<double> sides;
    const size_t b0 = at(a > kSideNs ? a - kSideNs : 0, false);
    if (i0 > b0) sides.push_back(static_cast<double>(m[i0] - m[b0]) / static_cast<double>(i0 - b0));
    const size_t c0 = at(d + kAfterNs, false), c1 = at(d + kAfterNs + kSideNs, false);
    if (c1 > c0 && c1 < m.size())
      sides.push_back(static_cast<double>(m[c1] - m[c0]) / static_cast<double>(c1 - c0));
    if (sides.empty()) continue;
    // A pause in a side or after the window: [b0, i0), [i1, i2), [c0, c1).
    uint64_t pause = 0;
    auto look = [&](size_t from, size_t to, size_t side_from, size_t side_to) {
      if (side_to <= side_from || to > m.size()) return;
      const double span = static_cast<double>(m[side_to] - m[side_from]);
      const double mean = span / static_cast<double>(side_to - side_from);
      for (size_t i = from; i + 1 <= to && i + 1 < m.size(); ++i) {
        const double gap = static_cast<double>(m[i + 1] - m[i]);
        if (gap > kPauseTimesMean * mean && gap > kPauseShare * span)
          pause = std::max(pause, m[i + 1] - m[i]);
      }
    };
    look(b0, i0, b0, i0);
    if (c1 > c0 && c1 < m.size()) {
      look(c0, c1, c0, c1);
      look(i1, std::min(i2, m.size() - 1), c0, c1);  // after it, against the side after
    }
    const double base = sides.size() == 2 ? (sides[0] + sides[1]) / 2 : sides[0];
    WindowEffect e;
    e.paused = pause > 0;
    e.longest_interval_ns = pause;
    e.attach_ns = a;
    e.detach_ns = d;
    e.baseline_sides = static_cast<int>(sides.size());
    e.baseline_interval_ns = static_cast<uint64_t>(base);
    e.intervals_in = static_cast<uint32_t>(i1 - i0);
    e.time_in_ns = m[i1] - m[i0];
    e.excess_in_ns =
        static_cast<int64_t>(static_cast<double>(e.time_in_ns) - e.intervals_in * base);
    if (i2 > i1 && i2 < m.size()) {
      e.intervals_after = static_cast<uint32_t>(i2 - i1);
      e.time_after_ns = m[i2] - m[i1];
      e.excess_after_ns =
          static_cast<int64_t>(static_cast<double>(e.time_after_ns) - e.intervals_after * base);
    }
    windows_.push_back(e);
  }
}

}  // namespace pinscope
