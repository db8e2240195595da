// The result of `pinscope tune`: every trial (run, refused by a guard, or
// cut by the budget), its measured rates with their spread, its verdict and
// /dev/shm peak; the best setting with its measured gain over the baseline,
// and the code line or environment that applies it. Text (100 columns) and
// JSON (docs/cli.md, "pinscope tune"). Pure: records in, text out.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "analyzer/tune/tune_model.h"

namespace pinscope::tune {

// One trial.
struct TrialRecord {
  int index = 0;  // 0: the baseline
  int round = 0;  // 0 the baseline, 1.. the rounds of choice
  Settings settings;
  std::string label;                 // Label(baseline, settings)
  std::string why;                   // why it was chosen
  std::string skipped;               // a guard's reason, or "budget": then nothing ran
  std::vector<std::string> folders;  // one run folder per rep, kept
  std::vector<double> samples_per_s, batches_per_s;  // per rep that measured
  std::vector<double> cpu_cores;  // per rep: CPU seconds of the job / wall seconds
  std::vector<double> wall_s;     // per rep
  int failed_reps = 0;
  std::string failure;  // the last failure: "exit 1", "killed by SIGSEGV", "timed out", ...
  std::string verdict_id, verdict_text;  // of its first rep's report
  uint64_t shm_peak_bytes = 0;

  bool Ran() const { return skipped.empty() && !folders.empty(); }
  // Median samples/s, else median batches/s; 0 when nothing measured.
  double Rate() const;
  bool RateIsSamples() const { return !samples_per_s.empty(); }
};

double Median(std::vector<double> values);

struct TuneResult {
  std::vector<std::string> command;
  std::string out_dir;
  Settings baseline;
  std::string site;  // where the DataLoader is built
  std::string user_site, framework;  // the job's line that led there; who built it
  int batch_size = 0;
  std::vector<TrialRecord> trials;  // the baseline first
  int best = -1;                    // index into trials
  std::string stop_reason;
  bool interrupted = false;
  double budget_s = 0, elapsed_s = 0;
  int reps = 0, explore_reps = 0, batches = 0, warmup = 0;
};

// The index of the best trial by median rate (the baseline unless another
// beats it); -1 when not even the baseline measured.
int PickBest(const std::vector<TrialRecord>& trials);

// `DataLoader(..., num_workers=8, pin_memory=False)`: the DataLoader
// arguments of `best` that differ from `baseline`; empty when none do. For
// a DataLoader the Hugging Face Trainer sets (`set_by` "transformers",
// analyzer/report/loader_knobs.h): `TrainingArguments(...,
// dataloader_num_workers=8, ...)`.
std::string CodeLine(const Settings& baseline, const Settings& best,
                     const std::string& set_by = "");

// `PINSCOPE_PIN=1 pinscope run -- CMD`, when the best needs pinscope's own
// pinning (the caller's PINSCOPE_PIN_BUDGET too); empty otherwise.
std::string EnvLine(const Settings& baseline, const Settings& best,
                    const std::vector<std::string>& command);

// `PINSCOPE_SET_NUM_WORKERS=8 ... pinscope run -- CMD`: the same without
// editing the job (the Python hook sets it).
std::string NoEditLine(const Settings& baseline, const Settings& best,
                       const std::vector<std::string>& command);

void WriteTuneText(const TuneResult& result, std::ostream& out);
nlohmann::ordered_json TuneJson(const TuneResult& result);

}  // namespace pinscope::tune
