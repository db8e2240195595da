// Which trials `pinscope tune` runs next: chosen from the pipeline model's
// predictions and from what the trials measured, never a grid. Pure:
// reports (as RunModels) and measured rates in, settings out.
//
// Round 1, from the baseline's report: each recommended change pinscope can
// apply from outside (most gain first); for a worker count k, its
// neighbours among the counts the model re-timed (the next below and above
// k); for a pinning change, the other pinning changes the model re-timed
// (pin_memory and PINSCOPE_PIN are where its terms are calibrated, not
// measured). Without a recommendation, the two applicable changes with the
// most predicted gain above none. persistent_workers=True when the trial
// window restarted workers (more than one epoch).
//
// Later rounds, around the best trial measured so far: its worker count
// bisected against the nearest counts measured with its other settings (or
// the next count the model re-timed where none was measured on that side);
// the changes the best trial's own report recommends, applied on top of it;
// and the best combined with each other trial that beat the baseline by
// more than the flattening threshold in a setting the best leaves as the
// baseline had it. A best that is the baseline itself proposes nothing.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "analyzer/tune/tune_model.h"

namespace pinscope::tune {

// A trial to run.
struct Candidate {
  Settings settings;
  std::string why;       // "the model's pick (7.50x predicted)", ...
  double predicted = 0;  // the model's speedup for it where it has one, else 0
};

// A trial measured: its settings and its rate (median samples/s, or
// batches/s when the batch size is unknown); rate 0 = it failed.
struct Measured {
  Settings settings;
  double rate = 0;
};

struct ChoiceInput {
  const RunModel* baseline = nullptr;    // the baseline's report
  const RunModel* best_model = nullptr;  // the best trial's report (may be null)
  std::vector<Measured> measured;        // every trial so far, the baseline first
  std::vector<Settings> refused;         // refused by a guard: never proposed again
  int round = 1;
  int max_workers = 0;      // worker counts above this are not proposed (0: no cap)
  size_t max_trials = 4;    // per round
  double threshold = 0.03;  // a gain below this is noise (the flattening rule)
};

std::vector<Candidate> ChooseTrials(const ChoiceInput& in);

// Index in `measured` of the highest rate (the first of equals); -1 if none
// has a rate.
int BestMeasured(const std::vector<Measured>& measured);

// True when the best after a round did not beat the best before it by more
// than `threshold` (0.03: 3%): the gain has flattened.
bool Flattened(double best_before, double best_after, double threshold = 0.03);

}  // namespace pinscope::tune
