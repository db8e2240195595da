// Settings, labels and environments (tune_model.h), a report read into a
// RunModel, and the result (tune_result.h): medians, the best, the code
// line, the environment line, the text table and the JSON.
#include "analyzer/tune/tune_result.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "analyzer/tune/tune_model.h"

namespace pinscope::tune {
namespace {

Settings Loader(int workers, bool pin_memory = false) {
  Settings s;
  s.num_workers = workers;
  s.pin_memory = pin_memory;
  s.prefetch_factor = workers > 0 ? 2 : 0;
  return s;
}

TEST(TuneModel, LabelsAndEnvironments) {
  const Settings base = Loader(2);
  EXPECT_EQ(Label(base, base), "baseline");
  Settings s = Apply(
      base,
      {{"PINSCOPE_SET_NUM_WORKERS", "8"}, {"PINSCOPE_SET_PIN_MEMORY", "1"}, {"PINSCOPE_PIN", "1"}});
  EXPECT_EQ(s.num_workers, 8);
  EXPECT_TRUE(s.pin_memory);
  EXPECT_TRUE(s.pinscope_pin);
  EXPECT_EQ(Label(base, s), "num_workers=8 pin_memory=True PINSCOPE_PIN=1");
  EXPECT_EQ(TrialEnv(base, s), (EnvList{{"PINSCOPE_SET_NUM_WORKERS", "8"},
                                        {"PINSCOPE_SET_PIN_MEMORY", "1"},
                                        {"PINSCOPE_PIN", "1"}}));
  // Workers for a loader without them: DataLoader's default prefetch is no
  // change to name or set.
  const Settings none = Loader(0);
  const Settings four = Apply(none, {{"PINSCOPE_SET_NUM_WORKERS", "4"}});
  EXPECT_EQ(four.prefetch_factor, 2);
  EXPECT_EQ(Label(none, four), "num_workers=4");
  EXPECT_EQ(TrialEnv(none, four), (EnvList{{"PINSCOPE_SET_NUM_WORKERS", "4"}}));
  // And back to none: no prefetch, no persistent workers.
  Settings persistent = Loader(4);
  persistent.persistent_workers = true;
  const Settings zero = Apply(persistent, {{"PINSCOPE_SET_NUM_WORKERS", "0"}});
  EXPECT_EQ(zero.prefetch_factor, 0);
  EXPECT_FALSE(zero.persistent_workers);
  Settings more = Apply(base, {{"PINSCOPE_SET_PREFETCH_FACTOR", "4"},
                               {"PINSCOPE_SET_PERSISTENT_WORKERS", "1"},
                               {"PINSCOPE_PIN_BUDGET", "16G"},
                               {"SOMETHING_ELSE", "x"}});
  EXPECT_EQ(Label(base, more), "prefetch_factor=4 persistent_workers=True PINSCOPE_PIN_BUDGET=16G");
  EXPECT_EQ(TrialEnv(base, more), (EnvList{{"PINSCOPE_SET_PREFETCH_FACTOR", "4"},
                                           {"PINSCOPE_SET_PERSISTENT_WORKERS", "1"},
                                           {"PINSCOPE_PIN_BUDGET", "16G"}}));
  Settings unpin = base;
  unpin.pinscope_pin = true;
  EXPECT_EQ(Label(unpin, base), "PINSCOPE_PIN=0");
  EXPECT_EQ(TrialEnv(unpin, base), (EnvList{{"PINSCOPE_PIN", "0"}}));
}

TEST(TuneModel, AReportReadIntoARunModel) {
  const nlohmann::json report = nlohmann::json::parse(R"({
    "verdict": {"id": "input_starvation", "text": "the workers"},
    "cuda": {"device_count": 1},
    "host": {"logical_cores": 16, "affinity_cores": 12, "gpus": []},
    "pipeline": {
      "valid": true, "critical_stage": "producers", "step_ns": 5e7,
      "loader": {"present": true, "hooked": true, "num_workers": 2, "pin_memory": true,
                 "prefetch_factor": 2, "persistent_workers": false, "batch_size": 64,
                 "epochs": 1, "site": "train.py:42"},
      "main": {"batch_bytes": 3145728},
      "predictions": [{"change": "num_workers=8", "env": {"PINSCOPE_SET_NUM_WORKERS": "8"},
                       "code_change": false, "speedup": 4.0, "limit_next": "the workers"}],
      "all_predictions": [{"change": "batch_size_x2", "env": {}, "code_change": true,
                           "speedup": 1.5}]},
    "shm": {"segments": 10, "bytes_created": 20971520, "peak_bytes": 8388608},
    "processes": [{"role": "root", "large_allocations": {"bytes": 999}},
                  {"role": "worker", "large_allocations": {"bytes": 5}},
                  {"role": "worker", "large_allocations": {"bytes": 7}}]})");
  const RunModel m = ParseRunModel(report, true);
  EXPECT_TRUE(m.loader_present && m.loader_hooked && m.model_valid);
  EXPECT_EQ(m.settings, (Settings{2, true, 2, false, true, ""}));
  EXPECT_EQ(m.site, "train.py:42");
  EXPECT_EQ(m.verdict_id, "input_starvation");
  ASSERT_EQ(m.predictions.size(), 1u);
  EXPECT_TRUE(m.predictions[0].Applicable());
  EXPECT_EQ(m.predictions[0].env, (EnvList{{"PINSCOPE_SET_NUM_WORKERS", "8"}}));
  ASSERT_EQ(m.all_predictions.size(), 1u);
  EXPECT_FALSE(m.all_predictions[0].Applicable());
  EXPECT_EQ(m.batch_bytes, 2u << 20);  // the shm segments' mean, not the copy bytes
  EXPECT_EQ(m.shm_peak_bytes, 8u << 20);
  EXPECT_EQ(m.gpus, 1);
  EXPECT_EQ(m.affinity_cores, 12u);
  EXPECT_EQ(m.worker_alloc_bytes, 7u);
  // Nothing at all: defaults, no throw.
  const RunModel empty = ParseRunModel(nlohmann::json(), false);
  EXPECT_FALSE(empty.loader_present);
  EXPECT_EQ(empty.gpus, -1);
}

TEST(TuneResult, MedianAndBest) {
  EXPECT_EQ(Median({}), 0);
  EXPECT_EQ(Median({3, 1, 2}), 2);
  EXPECT_EQ(Median({4, 1, 2, 3}), 2.5);
  std::vector<TrialRecord> trials(3);
  trials[0].samples_per_s = {100, 110, 90};
  trials[1].samples_per_s = {};
  trials[1].failed_reps = 1;
  trials[2].samples_per_s = {104};
  EXPECT_EQ(PickBest(trials), 2);
  trials[2].samples_per_s = {99};
  EXPECT_EQ(PickBest(trials), 0);
  EXPECT_EQ(PickBest({}), -1);
}

TEST(TuneResult, TheLinesToUse) {
  const Settings base = Loader(2, true);
  Settings best = base;
  best.num_workers = 8;
  best.pin_memory = false;
  const std::vector<std::string> cmd = {"python", "train.py", "--lr", "0.1 0.2"};
  EXPECT_EQ(CodeLine(base, best), "DataLoader(..., num_workers=8, pin_memory=False)");
  EXPECT_EQ(EnvLine(base, best, cmd), "");
  EXPECT_EQ(NoEditLine(base, best, cmd),
            "PINSCOPE_SET_NUM_WORKERS=8 PINSCOPE_SET_PIN_MEMORY=0 pinscope run -- python "
            "train.py --lr '0.1 0.2'");
  Settings pin = base;
  pin.pin_memory = false;
  pin.pinscope_pin = true;
  EXPECT_EQ(CodeLine(base, pin), "DataLoader(..., pin_memory=False)");
  EXPECT_EQ(EnvLine(base, pin, cmd),
            "PINSCOPE_PIN=1 pinscope run -- python train.py --lr '0.1 0.2'");
  Settings only_pin = base;
  only_pin.pinscope_pin = true;
  EXPECT_EQ(CodeLine(base, only_pin), "");
  Settings persistent = base;
  persistent.persistent_workers = true;
  EXPECT_EQ(CodeLine(base, persistent), "DataLoader(..., persistent_workers=True)");
  EXPECT_EQ(CodeLine(Loader(0), Apply(Loader(0), {{"PINSCOPE_SET_NUM_WORKERS", "4"}})),
            "DataLoader(..., num_workers=4)");
  // The Hugging Face Trainer builds its DataLoader: TrainingArguments' names.
  EXPECT_EQ(CodeLine(base, best, "transformers"),
            "TrainingArguments(..., dataloader_num_workers=8, dataloader_pin_memory=False)");
  EXPECT_EQ(CodeLine(base, best, "lightning"), "DataLoader(..., num_workers=8, pin_memory=False)");
}

TuneResult Example() {
  TuneResult r;
  r.command = {"python", "train.py"};
  r.out_dir = "runs/tune";
  r.baseline = Loader(2);
  r.site = "train.py:42";
  r.batch_size = 64;
  r.budget_s = 300;
  r.elapsed_s = 61;
  r.warmup = 10;
  r.reps = 3;
  r.explore_reps = 1;
  TrialRecord base;
  base.label = "baseline";
  base.settings = r.baseline;
  base.folders = {"runs/tune/00-baseline-r1", "runs/tune/00-baseline-r2",
                  "runs/tune/00-baseline-r3"};
  base.samples_per_s = {500, 520, 480};
  base.batches_per_s = {7.8125, 8.125, 7.5};
  base.cpu_cores = {2.1, 2.0, 2.2};
  base.verdict_id = "input_starvation";
  base.shm_peak_bytes = 15 << 20;
  TrialRecord w8;
  w8.index = 1;
  w8.round = 1;
  w8.settings = Apply(r.baseline, {{"PINSCOPE_SET_NUM_WORKERS", "8"}});
  w8.label = "num_workers=8";
  w8.folders = {"runs/tune/01-num_workers=8-r1"};
  w8.samples_per_s = {1900, 2050, 2000};
  w8.batches_per_s = {29.6875, 32.03125, 31.25};
  w8.cpu_cores = {8.5};
  w8.verdict_id = "input_starvation";
  w8.shm_peak_bytes = 51 << 20;
  TrialRecord w16;
  w16.index = 2;
  w16.round = 1;
  w16.settings = Apply(r.baseline, {{"PINSCOPE_SET_NUM_WORKERS", "16"}});
  w16.label = "num_workers=16";
  w16.skipped = "cores: 16 workers, more than the 12 cores the job may use";
  r.trials = {base, w8, w16};
  r.best = 1;
  r.stop_reason = "the gain flattened: round 2 did not beat the best so far by more than 3%";
  return r;
}

TEST(TuneResult, TextTable) {
  std::ostringstream out;
  WriteTuneText(Example(), out);
  EXPECT_EQ(out.str(),
            "Trials (samples/s of the training loop after 10 batches, or twice what a trial's "
            "workers queue ahead where that is more; medians over the reps; every folder kept "
            "under runs/tune)\n"
            "  #  setting        reps  samples/s    min-max  batches/s   gain  verdict           "
            "shm peak  CPU\n"
            "  0  baseline          3        500    480-520       7.81  1.00x  input_starvation  "
            "15.0 MiB  2.1\n"
            "  1  num_workers=8     3       2000  1900-2050      31.25  4.00x  input_starvation  "
            "51.0 MiB  8.5\n"
            "  (CPU: cores busy on average, the job and its workers; a rep marked ! failed)\n"
            "\n"
            "Not run\n"
            "  num_workers=16: cores: 16 workers, more than the 12 cores the job may use\n"
            "\n"
            "Best: num_workers=8: 4.00x the baseline (2000 against 500 samples/s, medians of 3 "
            "and 3)\n"
            "  In the code (train.py:42): DataLoader(..., num_workers=8)\n"
            "  Without editing the job: PINSCOPE_SET_NUM_WORKERS=8 pinscope run -- python "
            "train.py\n"
            "Stopped: the gain flattened: round 2 did not beat the best so far by more than 3% "
            "(61 s of the 300 s budget)\n");
}

// The best line says where, for a DataLoader the Trainer builds.
TEST(TuneResult, TheTrainersLoaderIsSetInTrainingArguments) {
  TuneResult r = Example();
  r.site = "/venv/lib/python3.12/site-packages/accelerate/data_loader.py:441";
  r.user_site = "run.py:51";
  r.framework = "transformers";
  std::ostringstream out;
  WriteTuneText(r, out);
  EXPECT_NE(out.str().find("  In the code (the Hugging Face Trainer builds the DataLoader; run "
                           "from run.py:51): TrainingArguments(..., dataloader_num_workers=8)\n"),
            std::string::npos)
      << out.str();
  EXPECT_EQ(TuneJson(r)["best"]["code"], "TrainingArguments(..., dataloader_num_workers=8)");
  EXPECT_EQ(TuneJson(r)["framework"], "transformers");
}

TEST(TuneResult, Json) {
  const nlohmann::ordered_json j = TuneJson(Example());
  EXPECT_EQ(j["unit"], "samples/s");
  ASSERT_EQ(j["trials"].size(), 3u);
  EXPECT_EQ(j["trials"][1]["median"], 2000.0);
  EXPECT_EQ(j["trials"][1]["min"], 1900.0);
  EXPECT_EQ(j["trials"][1]["max"], 2050.0);
  EXPECT_EQ(j["trials"][1]["gain"], 4.0);
  EXPECT_EQ(j["trials"][1]["env"]["PINSCOPE_SET_NUM_WORKERS"], "8");
  EXPECT_EQ(j["trials"][2]["status"], "skipped");
  EXPECT_EQ(j["best"]["label"], "num_workers=8");
  EXPECT_EQ(j["best"]["settings"]["num_workers"], 8);
  EXPECT_EQ(j["best"]["code"], "DataLoader(..., num_workers=8)");
  EXPECT_EQ(j["best"]["run"], "");
}

}  // namespace
}  // namespace pinscope::tune
