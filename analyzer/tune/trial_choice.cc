// The choice of trials; the rules are in trial_choice.h.
#include "analyzer/tune/trial_choice.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>

namespace pinscope::tune {
namespace {

bool IsWorkers(const Predicted& p) { return p.change.rfind("num_workers=", 0) == 0; }

int WorkersOf(const Predicted& p) { return std::atoi(p.change.c_str() + 12); }

// A change of pin_memory or of pinscope's pinning.
bool IsPinning(const Predicted& p) {
  for (const auto& [key, value] : p.env)
    if (key == "PINSCOPE_SET_PIN_MEMORY" || key == "PINSCOPE_PIN") return true;
  return false;
}

std::string Speedup(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2fx", x);
  return text;
}

// The settings other than the worker count (prefetch follows the workers).
// Without workers a loader has neither a prefetch factor nor persistent
// workers: those compare only between loaders with workers.
bool SameBesidesWorkers(const Settings& a, const Settings& b) {
  const bool both = a.num_workers > 0 && b.num_workers > 0;
  return a.pin_memory == b.pin_memory && a.pinscope_pin == b.pinscope_pin &&
         a.pin_budget == b.pin_budget &&
         (!both || (EffectivePrefetch(a) == EffectivePrefetch(b) &&
                    a.persistent_workers == b.persistent_workers));
}

class Chooser {
 public:
  explicit Chooser(const ChoiceInput& in) : in_(in) {}

  // Adds `s` unless it was measured, refused or is already chosen. Counts
  // above max_workers are dropped unless `uncapped` (the model's own pick:
  // the guards then refuse it, and the result lists it with the reason).
  void Add(const Settings& s, std::string why, double predicted = 0, bool uncapped = false) {
    if (Known(s)) return;
    for (const Candidate& c : out_)
      if (c.settings == s) return;
    if (!uncapped && in_.max_workers > 0 && s.num_workers > in_.max_workers) return;
    out_.push_back({s, std::move(why), predicted});
  }

  bool Known(const Settings& s) const {
    for (const Measured& m : in_.measured)
      if (m.settings == s) return true;
    for (const Settings& r : in_.refused)
      if (r == s) return true;
    return false;
  }

  // The worker counts the reports re-timed, the baseline's own and those
  // measured: the ladder neighbours are taken on.
  std::vector<int> Ladder() const {
    std::set<int> counts = {in_.baseline->settings.num_workers};
    for (const RunModel* m : {in_.baseline, in_.best_model}) {
      if (m == nullptr) continue;
      counts.insert(m->settings.num_workers);
      for (const Predicted& p : m->all_predictions)
        if (IsWorkers(p)) counts.insert(WorkersOf(p));
    }
    for (const Measured& m : in_.measured) counts.insert(m.settings.num_workers);
    std::vector<int> out;
    for (int k : counts)
      if (in_.max_workers <= 0 || k <= in_.max_workers) out.push_back(k);
    return out;
  }

  void FirstRound() {
    const RunModel& base = *in_.baseline;
    std::vector<const Predicted*> picks;
    for (const Predicted& p : base.predictions)
      if (p.Applicable()) picks.push_back(&p);
    if (picks.empty()) {
      std::vector<const Predicted*> rest;
      for (const Predicted& p : base.all_predictions)
        if (p.Applicable() && p.speedup > 1.0) rest.push_back(&p);
      std::stable_sort(rest.begin(), rest.end(), [](const Predicted* a, const Predicted* b) {
        return a->speedup > b->speedup;
      });
      if (rest.size() > 2) rest.resize(2);
      picks = rest;
    }
    const std::vector<int> ladder = Ladder();
    for (const Predicted* p : picks) {
      Add(Apply(base.settings, p->env),
          "the model's pick: " + p->change + " (" + Speedup(p->speedup) + " predicted)", p->speedup,
          /*uncapped=*/true);
      if (IsWorkers(*p)) {
        int k = WorkersOf(*p);
        if (in_.max_workers > 0 && k > in_.max_workers &&
            in_.max_workers > base.settings.num_workers) {
          // The pick needs more cores than the job may use (the guards
          // refuse it): the most the cores run instead, and its neighbours.
          Settings s = base.settings;
          s.num_workers = in_.max_workers;
          Add(Apply(s, {}),
              "the most workers the cores run (the model's pick, num_workers=" + std::to_string(k) +
                  ", needs more)",
              PredictedFor(base, "num_workers=" + std::to_string(in_.max_workers)));
          k = in_.max_workers;
        }
        std::vector<int> around = ladder;
        if (std::find(around.begin(), around.end(), k) == around.end()) {
          around.push_back(k);
          std::sort(around.begin(), around.end());
        }
        auto it = std::find(around.begin(), around.end(), k);
        for (auto n : {it == around.begin() ? around.end() : it - 1, it + 1}) {
          if (n == around.end() || *n == base.settings.num_workers) continue;
          Settings s = base.settings;
          s.num_workers = *n;
          Add(Apply(s, {}), "a neighbour of num_workers=" + std::to_string(k),
              PredictedFor(base, "num_workers=" + std::to_string(*n)));
        }
      }
      if (IsPinning(*p)) {
        for (const Predicted& q : base.all_predictions) {
          if (&q == p || !q.Applicable() || !IsPinning(q)) continue;
          Add(Apply(base.settings, q.env),
              "the other pinning choice: " + q.change + " (" + Speedup(q.speedup) + " predicted)",
              q.speedup);
        }
      }
    }
    // A DataLoader made anew every epoch keeps no workers whatever it is
    // told: persistent_workers=True is no trial there (a code change).
    if (base.epochs > 1 && base.settings.num_workers > 0 && !base.settings.persistent_workers &&
        !base.remade) {
      Settings s = base.settings;
      s.persistent_workers = true;
      Add(s, "workers restarted " + std::to_string(base.epochs) + " times in the trial window");
    }
  }

  void LaterRound() {
    const int b = BestMeasured(in_.measured);
    if (b < 0) return;
    const Settings best = in_.measured[b].settings;
    const Settings& base = in_.baseline->settings;
    if (best == base) return;  // nothing beat the baseline: nothing to refine

    // 1. The best's worker count, bisected.
    if (best.num_workers != base.num_workers) {
      int lower = -1, upper = -1;
      for (const Measured& m : in_.measured) {
        if (m.rate <= 0 || !SameBesidesWorkers(m.settings, best)) continue;
        const int k = m.settings.num_workers;
        if (k < best.num_workers && k > lower) lower = k;
        if (k > best.num_workers && (upper < 0 || k < upper)) upper = k;
      }
      const std::vector<int> ladder = Ladder();
      auto it = std::find(ladder.begin(), ladder.end(), best.num_workers);
      const auto with = [&best](int k) {
        Settings s = best;
        s.num_workers = k;
        return Apply(s, {});
      };
      const std::string near = "between the best (num_workers=" + std::to_string(best.num_workers) +
                               ") and num_workers=";
      if (lower >= 0 && best.num_workers - lower >= 2) {
        const int k = (lower + best.num_workers) / 2;
        Add(with(k), near + std::to_string(lower));
      } else if (lower < 0 && it != ladder.end() && it != ladder.begin()) {
        Add(with(*(it - 1)),
            "the next count below the best (num_workers=" + std::to_string(best.num_workers) + ")");
      }
      if (upper >= 0 && upper - best.num_workers >= 2) {
        const int k = (best.num_workers + upper + 1) / 2;
        Add(with(k), near + std::to_string(upper));
      } else if (upper < 0 && it != ladder.end() && it + 1 != ladder.end()) {
        Add(with(*(it + 1)),
            "the next count above the best (num_workers=" + std::to_string(best.num_workers) + ")");
      }
    }

    // 2. What the best trial's own report recommends, on top of it.
    if (in_.best_model != nullptr && in_.best_model != in_.baseline) {
      for (const Predicted& p : in_.best_model->predictions) {
        if (!p.Applicable()) continue;
        Add(Apply(best, p.env),
            "the best trial's report: " + p.change + " (" + Speedup(p.speedup) + " predicted)", 0);
      }
    }

    // 3. The best with each other gain it does not have.
    const double floor = in_.measured.front().rate * (1 + in_.threshold);
    for (size_t i = 0; i < in_.measured.size(); ++i) {
      const Measured& m = in_.measured[i];
      if (static_cast<int>(i) == b || m.rate <= floor || m.settings == base) continue;
      Settings s = best;
      const Settings& o = m.settings;
      if (o.num_workers != base.num_workers && best.num_workers == base.num_workers)
        s.num_workers = o.num_workers;
      if (o.pin_memory != base.pin_memory && best.pin_memory == base.pin_memory)
        s.pin_memory = o.pin_memory;
      if (o.pinscope_pin != base.pinscope_pin && best.pinscope_pin == base.pinscope_pin)
        s.pinscope_pin = o.pinscope_pin;
      if (o.persistent_workers != base.persistent_workers &&
          best.persistent_workers == base.persistent_workers)
        s.persistent_workers = o.persistent_workers;
      s = Apply(s, {});
      if (s == best) continue;
      Add(s, "the best with what " + Label(base, o) + " gained");
    }
  }

  std::vector<Candidate> Take() {
    if (out_.size() > in_.max_trials) out_.resize(in_.max_trials);
    return std::move(out_);
  }

 private:
  static double PredictedFor(const RunModel& m, const std::string& change) {
    for (const Predicted& p : m.all_predictions)
      if (p.change == change) return p.speedup;
    return 0;
  }

  const ChoiceInput& in_;
  std::vector<Candidate> out_;
};

}  // namespace

std::vector<Candidate> ChooseTrials(const ChoiceInput& in) {
  if (in.baseline == nullptr || in.measured.empty()) return {};
  Chooser chooser(in);
  if (in.round <= 1) {
    chooser.FirstRound();
  } else {
    chooser.LaterRound();
  }
  return chooser.Take();
}

int BestMeasured(const std::vector<Measured>& measured) {
  int best = -1;
  for (size_t i = 0; i < measured.size(); ++i) {
    if (measured[i].rate <= 0) continue;
    if (best < 0 || measured[i].rate > measured[best].rate) best = static_cast<int>(i);
  }
  return best;
}

bool Flattened(double best_before, double best_after, double threshold) {
  return best_after <= best_before * (1 + threshold);
}

}  // namespace pinscope::tune
