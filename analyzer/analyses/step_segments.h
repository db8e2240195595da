// How the step model's folded streams open and merge their segments: one
// rule for StepCalls (a root thread's calls, step_calls.h) and StepSpans
// (the root's loader spans, samples and registrations, step_spans.h). A
// root whose possible step boundaries are all on one thread (one training
// loop) then gets the same segments in both, so a window edge at a segment
// start of one is a segment start of the other and both sums are exact
// over the window.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <utility>

namespace pinscope::step_segments {

// Opens the segment of a possible step boundary at `start`: the last
// segment takes it while it holds fewer than `stride` boundaries (a
// segment's `merged`; 0 for the one before the first boundary, which never
// takes one). When `kept` segments with boundaries exist, adjacent pairs
// are merged, the oldest first (`merge(a, b)` adds the later b into a), and
// from then on a segment holds twice as many: the resolution stays the same
// over the whole run. The segment before the first boundary does not count
// toward `kept`, so whether a stream saw something before its first
// boundary does not move its merges. Returns true when it merged.
template <typename Segment, typename Merge>
bool Open(std::deque<Segment>& segments, uint32_t& stride, size_t kept, uint64_t start,
          Merge&& merge) {
  const auto absorbs = [&] {
    const Segment& last = segments.back();
    return last.merged > 0 && last.merged < stride;
  };
  if (!segments.empty() && absorbs()) {
    ++segments.back().merged;
    return false;
  }
  const size_t before = !segments.empty() && segments.front().merged == 0 ? 1 : 0;
  if (segments.size() - before >= kept) {
    std::deque<Segment> merged;
    size_t i = 0;
    if (before > 0) merged.push_back(std::move(segments[i++]));
    for (; i < segments.size(); i += 2) {
      merged.push_back(std::move(segments[i]));
      if (i + 1 < segments.size()) merge(merged.back(), segments[i + 1]);
    }
    segments.swap(merged);
    stride *= 2;
    if (absorbs()) {
      ++segments.back().merged;
      return true;
    }
    Segment s;
    s.start = start;
    segments.push_back(std::move(s));
    return true;
  }
  Segment s;
  s.start = start;
  segments.push_back(std::move(s));
  return false;
}

}  // namespace pinscope::step_segments
