// The step model's steady window (pipeline_analysis.h): which steps of the
// run its per-step figures are over, chosen at Finish from the steps the
// run's segments hold (step_spans.h with the hook, step_calls.h without).
#pragma once

#include <cstdint>
#include <vector>

#include "analyzer/analyses/device_intervals.h"

namespace pinscope {

// The steps that start in one segment, taken to start at its start: one
// step each until the segments merge.
struct StepGroup {
  uint64_t start = 0, count = 0;
  uint64_t waits = 0;  // steps whose __next__ found the queue empty
};

// The steady window over the steps, `groups` in order of their starts.
// With several epochs (`epochs`: their starts, in order) it lies inside
// one, the one with the most steps (the later of equals): an epoch's start
// (its workers forked anew, their first batches) is not the steady step,
// and persistent_workers=True is the change that times it. It leaves out
// the first steps (workers starting, caches warming, prefetched batches
// queued: an eighth, at least 2) and ends at the last (the end of the
// loop). Where the loop waits for batches, it runs from one step that
// found the queue empty to another: the same state at both ends, so the
// steps counted are the batches made in between. From an arbitrary step
// instead, a backlog queued before it (prefetched batches, a burst of
// workers) drains inside the window and the step looks shorter than the
// supply can sustain.
//
// Merged groups give the same rule at their resolution: each edge at the
// start of the group its step falls in, and `steps` those of the groups
// that start inside the window. False when there are too few steps.
//
// `breaks` (in order): where the step thread left the loop for another
// DataLoader's batches (an evaluation pass mid-epoch: the segments whose
// __next__ is another loader's). That time is not the training step's, so
// the window is the longest stretch of the epoch's steps between breaks,
// ending where the next break starts, when it holds at least 4 steps and
// either 16 or half of the steps a window without the breaks would have;
// else the window keeps them. `breaks_inside` gets how many it holds.
struct SteadyWindow {
  device::Interval window;
  uint64_t steps = 0;
  uint64_t breaks_inside = 0;   // other loaders' segments inside the window
  uint64_t breaks_avoided = 0;  // the epoch's breaks the window was cut to leave out
};
bool ChooseSteadyWindow(const std::vector<StepGroup>& groups, const std::vector<uint64_t>& epochs,
                        const std::vector<uint64_t>& breaks, SteadyWindow* out);

}  // namespace pinscope
