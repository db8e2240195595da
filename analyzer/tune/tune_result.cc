// The result table, the best setting and its code line; see tune_result.h.
#include "analyzer/tune/tune_result.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <ostream>

#include "analyzer/common/format.h"
#include "analyzer/report/loader_knobs.h"

namespace pinscope::tune {
namespace {

using json = nlohmann::ordered_json;

const char* Py(bool b) { return b ? "True" : "False"; }

// Quotes for a POSIX shell when needed (the lines are meant to be pasted).
std::string Quote(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                        "0123456789-_./+=:,@%") == std::string::npos) {
    return s;
  }
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string Command(const std::vector<std::string>& command) {
  std::string text;
  for (const std::string& word : command) text += (text.empty() ? "" : " ") + Quote(word);
  return text;
}

std::string Rate(double r) {
  if (r <= 0) return "-";
  return r >= 100 ? StringPrintf("%.0f", r) : StringPrintf("%.2f", r);
}

std::pair<double, double> Spread(const std::vector<double>& v) {
  if (v.empty()) return {0, 0};
  return {*std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end())};
}

const std::vector<double>& Rates(const TrialRecord& t) {
  return t.RateIsSamples() ? t.samples_per_s : t.batches_per_s;
}

std::string Status(const TrialRecord& t) {
  if (!t.skipped.empty()) return "skipped";
  if (t.folders.empty()) return "not run";
  if (t.Rate() <= 0) return "failed";
  return "measured";
}

}  // namespace

double TrialRecord::Rate() const {
  return RateIsSamples() ? Median(samples_per_s) : Median(batches_per_s);
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int PickBest(const std::vector<TrialRecord>& trials) {
  int best = -1;
  for (size_t i = 0; i < trials.size(); ++i) {
    const double r = trials[i].Rate();
    if (r <= 0) continue;
    if (best < 0 || r > trials[best].Rate()) best = static_cast<int>(i);
  }
  return best;
}

std::string CodeLine(const Settings& base, const Settings& best, const std::string& set_by) {
  std::string args;
  const bool trainer = set_by == "transformers";
  const std::string prefix = trainer ? "dataloader_" : "";
  const auto add = [&args, &prefix](const std::string& a) { args += ", " + prefix + a; };
  if (best.num_workers != base.num_workers) add("num_workers=" + std::to_string(best.num_workers));
  if (best.pin_memory != base.pin_memory) add(std::string("pin_memory=") + Py(best.pin_memory));
  if (PrefetchDiffers(base, best))
    add("prefetch_factor=" + std::to_string(EffectivePrefetch(best)));
  if (best.num_workers > 0 && best.persistent_workers != base.persistent_workers)
    add(std::string("persistent_workers=") + Py(best.persistent_workers));
  if (args.empty()) return "";
  return (trainer ? "TrainingArguments(..." : "DataLoader(...") + args + ")";
}

std::string EnvLine(const Settings& base, const Settings& best,
                    const std::vector<std::string>& command) {
  if (!best.pinscope_pin) return "";
  std::string env = "PINSCOPE_PIN=1 ";
  if (!best.pin_budget.empty()) env += "PINSCOPE_PIN_BUDGET=" + Quote(best.pin_budget) + " ";
  (void)base;
  return env + "pinscope run -- " + Command(command);
}

std::string NoEditLine(const Settings& base, const Settings& best,
                       const std::vector<std::string>& command) {
  const EnvList env = TrialEnv(base, best);
  if (env.empty()) return "";
  std::string text;
  for (const auto& [key, value] : env) text += key + "=" + Quote(value) + " ";
  return text + "pinscope run -- " + Command(command);
}

void WriteTuneText(const TuneResult& r, std::ostream& out) {
  const Style style(false);
  const TrialRecord* base = r.trials.empty() ? nullptr : &r.trials.front();
  const double base_rate = base ? base->Rate() : 0;
  const bool samples = base && base->RateIsSamples();
  out << "Trials (" << (samples ? "samples/s" : "batches/s") << " of the training loop after "
      << r.warmup
      << " batches, or twice what a trial's workers queue ahead where that is more; medians over "
         "the reps; every folder kept under "
      << r.out_dir << ")\n";
  TextTable table({{"#", TextTable::Align::kRight},
                   {"setting", TextTable::Align::kLeft, true},
                   {"reps", TextTable::Align::kRight},
                   {samples ? "samples/s" : "batches/s", TextTable::Align::kRight},
                   {"min-max", TextTable::Align::kRight},
                   {"batches/s", TextTable::Align::kRight},
                   {"gain", TextTable::Align::kRight},
                   {"verdict", TextTable::Align::kLeft},
                   {"shm peak", TextTable::Align::kRight},
                   {"CPU", TextTable::Align::kRight}});
  for (const TrialRecord& t : r.trials) {
    if (!t.skipped.empty()) continue;
    const auto [lo, hi] = Spread(Rates(t));
    const double rate = t.Rate();
    std::string gain = "-";
    if (rate > 0 && base_rate > 0) gain = StringPrintf("%.2fx", rate / base_rate);
    std::string verdict = t.verdict_id.empty() ? "-" : t.verdict_id;
    if (rate <= 0) verdict = t.failure.empty() ? "failed" : t.failure;
    const double cpu = Median(t.cpu_cores);
    table.AddRow({std::to_string(t.index), t.label,
                  std::to_string(Rates(t).size()) +
                      (t.failed_reps ? "+" + std::to_string(t.failed_reps) + "!" : ""),
                  Rate(rate), rate > 0 ? Rate(lo) + "-" + Rate(hi) : "-",
                  Rate(Median(t.batches_per_s)), gain, verdict,
                  t.shm_peak_bytes ? FormatBytes(t.shm_peak_bytes) : "-",
                  cpu > 0 ? StringPrintf("%.1f", cpu) : "-"});
  }
  table.Render(out, style);
  out << "  (CPU: cores busy on average, the job and its workers; a rep marked ! failed)\n";

  bool any_skipped = false;
  for (const TrialRecord& t : r.trials) {
    if (t.skipped.empty()) continue;
    if (!any_skipped) out << "\nNot run\n";
    any_skipped = true;
    out << "  " << t.label << ": " << t.skipped << "\n";
  }

  out << "\n";
  if (r.best < 0 || base_rate <= 0) {
    out << "No result: the baseline did not measure (see its folder).\n";
  } else if (r.best == 0) {
    out << "Best: the baseline (" << Rate(base_rate) << (samples ? " samples/s" : " batches/s")
        << "); no trial beat it. Keep the DataLoader as it is.\n";
  } else {
    const TrialRecord& b = r.trials[r.best];
    out << "Best: " << b.label << ": " << StringPrintf("%.2fx", b.Rate() / base_rate)
        << " the baseline (" << Rate(b.Rate()) << " against " << Rate(base_rate)
        << (samples ? " samples/s" : " batches/s") << ", medians of " << Rates(b).size() << " and "
        << Rates(*base).size() << ")\n";
    const std::string set_by = SetBy(r.site, r.framework);
    const std::string code = CodeLine(r.baseline, b.settings, set_by);
    if (!code.empty()) {
      std::string where = r.site;
      if (set_by == "transformers") {
        where = "the Hugging Face Trainer builds the DataLoader" +
                (r.user_site.empty() ? std::string() : "; run from " + r.user_site);
      } else if (!r.user_site.empty()) {
        where += ", called from " + r.user_site;
      }
      out << "  In the code" << (where.empty() ? "" : " (" + where + ")") << ": " << code << "\n";
    }
    const std::string env = EnvLine(r.baseline, b.settings, r.command);
    if (!env.empty()) out << "  Run it as: " << env << "\n";
    const std::string no_edit = NoEditLine(r.baseline, b.settings, r.command);
    if (!no_edit.empty()) out << "  Without editing the job: " << no_edit << "\n";
  }
  out << "Stopped: " << r.stop_reason
      << StringPrintf(" (%.0f s of the %.0f s budget)", r.elapsed_s, r.budget_s) << "\n";
}

json TuneJson(const TuneResult& r) {
  const auto settings_json = [](const Settings& s) {
    return json{{"num_workers", s.num_workers},
                {"pin_memory", s.pin_memory},
                {"prefetch_factor", EffectivePrefetch(s)},
                {"persistent_workers", s.persistent_workers},
                {"pinscope_pin", s.pinscope_pin},
                {"pin_budget", s.pin_budget}};
  };
  const double base_rate = r.trials.empty() ? 0 : r.trials.front().Rate();
  json trials = json::array();
  for (const TrialRecord& t : r.trials) {
    json env = json::object();
    for (const auto& [k, v] : TrialEnv(r.baseline, t.settings)) env[k] = v;
    const auto [lo, hi] = Spread(Rates(t));
    trials.push_back({{"index", t.index},
                      {"round", t.round},
                      {"label", t.label},
                      {"why", t.why},
                      {"status", Status(t)},
                      {"skipped", t.skipped},
                      {"settings", settings_json(t.settings)},
                      {"env", env},
                      {"folders", t.folders},
                      {"samples_per_s", t.samples_per_s},
                      {"batches_per_s", t.batches_per_s},
                      {"median", t.Rate()},
                      {"min", lo},
                      {"max", hi},
                      {"gain", t.Rate() > 0 && base_rate > 0 ? t.Rate() / base_rate : 0.0},
                      {"cpu_cores", t.cpu_cores},
                      {"wall_s", t.wall_s},
                      {"failed_reps", t.failed_reps},
                      {"failure", t.failure},
                      {"verdict", t.verdict_id},
                      {"verdict_text", t.verdict_text},
                      {"shm_peak_bytes", t.shm_peak_bytes}});
  }
  json best = nullptr;
  if (r.best >= 0) {
    const TrialRecord& b = r.trials[r.best];
    best = {{"index", b.index},
            {"label", b.label},
            {"settings", settings_json(b.settings)},
            {"gain", base_rate > 0 ? b.Rate() / base_rate : 0.0},
            {"code", CodeLine(r.baseline, b.settings, SetBy(r.site, r.framework))},
            {"run", EnvLine(r.baseline, b.settings, r.command)},
            {"without_editing", NoEditLine(r.baseline, b.settings, r.command)}};
  }
  return json{
      {"command", r.command},
      {"out_dir", r.out_dir},
      {"unit", !r.trials.empty() && r.trials.front().RateIsSamples() ? "samples/s" : "batches/s"},
      {"baseline", settings_json(r.baseline)},
      {"site", r.site},
      {"user_site", r.user_site},
      {"framework", r.framework},
      {"batch_size", r.batch_size},
      {"options",
       {{"budget_s", r.budget_s},
        {"batches", r.batches},
        {"warmup", r.warmup},
        {"reps", r.reps},
        {"explore_reps", r.explore_reps}}},
      {"trials", trials},
      {"best", best},
      {"stop_reason", r.stop_reason},
      {"interrupted", r.interrupted},
      {"elapsed_s", r.elapsed_s}};
}

}  // namespace pinscope::tune
