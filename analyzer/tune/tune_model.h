// What `pinscope tune` knows about one trial run: the DataLoader settings it
// ran with and what its report (`pinscope report --json`, docs/report.md)
// says - the model's verdict and predictions, the batch's bytes, /dev/shm,
// the host facts the shim recorded. Pure: JSON in, plain structs out.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <utility>
#include <vector>

namespace pinscope::tune {

using EnvList = std::vector<std::pair<std::string, std::string>>;

// The settings a trial runs with, as the job sees them. Tune changes them
// from outside: PINSCOPE_SET_* through the Python hook (docs/python-hook.md),
// PINSCOPE_PIN and PINSCOPE_PIN_BUDGET through the shim.
struct Settings {
  int num_workers = 0;
  bool pin_memory = false;
  int prefetch_factor = 0;  // 0 without workers (DataLoader's default is 2)
  bool persistent_workers = false;
  bool pinscope_pin = false;  // PINSCOPE_PIN=1
  std::string pin_budget;     // PINSCOPE_PIN_BUDGET, empty: the caller's or the default

  bool operator==(const Settings&) const = default;
};

// The prefetch factor DataLoader uses with `workers` (2 by default; none
// without workers).
int EffectivePrefetch(const Settings& s);

// How many batches a run of `s` leaves untimed at its start and how many it
// runs in all: the workers queue num_workers x prefetch batches ahead while
// the job starts, and a rate timed before that queue drains is the main
// loop's, not the supply's (on the H200, 15 workers timed after 6 of 30
// batches ran 3x faster than their supply allows; docs/validation.md). So
// at least twice that queue untimed, and twice it timed.
struct RunLength {
  int warmup = 0;
  int batches = 0;  // in all, the untimed included
};
RunLength TrialRunLength(const Settings& s, int warmup, int batches);

// `s` runs with another prefetch factor than `base` (a loader given workers
// gets DataLoader's default, 2, which is no change to name).
bool PrefetchDiffers(const Settings& base, const Settings& s);

// What differs from `base`, as a person reads it: "baseline" when nothing
// does, else "num_workers=8 pin_memory=False PINSCOPE_PIN=1" (fixed order).
std::string Label(const Settings& base, const Settings& s);

// The environment that turns a run of `base` into a run of `s`: PINSCOPE_SET_*
// for each DataLoader setting that differs, PINSCOPE_PIN (1 or 0) and
// PINSCOPE_PIN_BUDGET when they differ.
EnvList TrialEnv(const Settings& base, const Settings& s);

// `s` with a prediction's environment applied (PINSCOPE_SET_NUM_WORKERS=8,
// PINSCOPE_PIN=1, ...). Unknown variables are ignored.
Settings Apply(Settings s, const EnvList& env);

// One change the model re-timed (report JSON pipeline.predictions[]).
struct Predicted {
  std::string change;  // "num_workers=8", "pin_memory=False+PINSCOPE_PIN=1"
  EnvList env;         // how to apply it from outside; empty for code changes
  bool code_change = false;
  double speedup = 1;
  std::string limit_next;
  bool uncertain = false;

  // A setting tune can apply without the user's code.
  bool Applicable() const { return !code_change && !env.empty(); }
};

// One run as its report describes it.
struct RunModel {
  bool loader_present = false;  // a DataLoader fed the loop (hooked or inferred)
  bool loader_hooked = false;   // the Python hook saw it (LOADER_ITER)
  Settings settings;            // what the loader ran with (pinscope_pin: see ParseRunModel)
  int batch_size = 0;
  uint64_t epochs = 0;
  bool remade = false;  // each epoch a new DataLoader object (report's loader.remade)
  std::string site;     // "train.py:42", where the DataLoader was built
  // The job's line that led there and the framework that built it (the
  // report's loader.user_site and loader.framework).
  std::string user_site, framework;

  bool model_valid = false;
  std::string why_not;  // when the model found no step loop
  std::string verdict_id, verdict_text, critical_stage;
  double step_ns = 0;
  std::vector<Predicted> predictions;      // recommended, most gain first
  std::vector<Predicted> all_predictions;  // every change re-timed

  // One batch's bytes: the workers' shm segments' mean size, else the
  // step's H2D batch bytes. 0 unknown.
  uint64_t batch_bytes = 0;
  uint64_t shm_segments = 0, shm_peak_bytes = 0;
  // The host facts the shim recorded at the run (0 unknown).
  uint32_t logical_cores = 0, physical_cores = 0, affinity_cores = 0;
  uint32_t cgroup_quota_millicores = 0;
  uint64_t ram_bytes = 0, cgroup_memory_limit_bytes = 0;
  uint64_t shm_capacity_bytes = 0, shm_free_bytes = 0;
  int gpus = -1;  // CUDA devices (or GPU names) in the trace; -1 unknown
  // The largest recorded large-allocation total of one worker process.
  uint64_t worker_alloc_bytes = 0;
  // Ranks of a distributed job in the run (the report's "ranks"), 0 for
  // a job of one process: tune does not tune those (docs/cli.md).
  int ranks = 0;
};

// Reads a report (the object `pinscope report --json` prints). The report
// does not say whether the run was under PINSCOPE_PIN: the caller knows
// (`pinscope_pin`). Missing keys leave defaults; never throws.
RunModel ParseRunModel(const nlohmann::json& report, bool pinscope_pin);

}  // namespace pinscope::tune
