// The choice of trials (analyzer/tune/trial_choice.h). Round 1 on the
// traces recorded on the H200 (tests/data/h200/pipeline): the exact trials
// each report's predictions lead to. Later rounds on synthetic
// measurements: the best's worker count bisected, the best trial's own
// report, combinations, the flattening rule.
#include "analyzer/tune/trial_choice.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "analyzer/report/report_command.h"
#include "recorded_report.h"

namespace pinscope::tune {
namespace {

const std::string kData = PINSCOPE_TEST_DATA_DIR;

RunModel Model(const std::string& run) {
  return ParseRunModel(test_util::RecordedReport(kData + "/h200/pipeline/" + run), false);
}

std::vector<std::string> Labels(const RunModel& base, const std::vector<Candidate>& cands) {
  std::vector<std::string> out;
  for (const Candidate& c : cands) out.push_back(Label(base.settings, c.settings));
  return out;
}

std::vector<Candidate> FirstRound(const RunModel& base, int max_workers = 16) {
  ChoiceInput in;
  in.baseline = &base;
  in.measured = {{base.settings, 100}};
  in.round = 1;
  in.max_workers = max_workers;
  return ChooseTrials(in);
}

Settings With(const RunModel& base, const EnvList& env) { return Apply(base.settings, env); }

struct FirstRoundCase {
  const char* run;
  std::vector<std::string> trials;
};

class FirstRoundOnTraces : public ::testing::TestWithParam<FirstRoundCase> {};

TEST_P(FirstRoundOnTraces, ExactTrials) {
  const RunModel base = Model(GetParam().run);
  EXPECT_EQ(Labels(base, FirstRound(base)), GetParam().trials);
}

// The model's pick first, then its neighbours (worker counts the model
// re-timed) or the other pinning choices.
INSTANTIATE_TEST_SUITE_P(
    H200, FirstRoundOnTraces,
    ::testing::Values(
        // 2 workers starve the loop; the model picks the most the cores run.
        FirstRoundCase{"input_starvation", {"num_workers=15", "num_workers=12"}},
        // num_workers=0: 12 workers, then 8 and 15 around it.
        FirstRoundCase{"main_process", {"num_workers=12", "num_workers=8", "num_workers=15"}},
        // the pin thread limits: off with transparent pinning, then off alone.
        FirstRoundCase{"pin_thread", {"pin_memory=False PINSCOPE_PIN=1", "pin_memory=False"}},
        // GPU-bound: the small pinning gain, then the other pinning choice.
        FirstRoundCase{"gpu_bound", {"pin_memory=True", "PINSCOPE_PIN=1"}},
        FirstRoundCase{"imagenet", {"num_workers=12", "num_workers=8", "num_workers=15"}},
        // 15 workers already: nothing the model predicts any gain for.
        FirstRoundCase{"input_starvation_w15", {}}),
    [](const auto& info) { return std::string(info.param.run); });

TEST(FirstRound, APickAboveTheCoresIsKeptAndTheMostTheyRunTried) {
  const RunModel base = Model("input_starvation");
  // 8 cores: the pick (15) stays, for the guard to refuse with its reason;
  // then the most workers the cores run, and its neighbour below. Counts
  // above the cores are not proposed otherwise.
  EXPECT_EQ(Labels(base, FirstRound(base, 8)),
            (std::vector<std::string>{"num_workers=15", "num_workers=8", "num_workers=6"}));
  // 5 cores: a count the model did not re-time; its neighbour is 4.
  EXPECT_EQ(Labels(base, FirstRound(base, 5)),
            (std::vector<std::string>{"num_workers=15", "num_workers=5", "num_workers=4"}));
}

TEST(FirstRound, WorkersRestartedEveryEpochTryPersistentWorkers) {
  RunModel base = Model("input_starvation");
  base.epochs = 3;
  EXPECT_EQ(
      Labels(base, FirstRound(base)),
      (std::vector<std::string>{"num_workers=15", "num_workers=12", "persistent_workers=True"}));
  // Each epoch a new DataLoader: the flag would keep nothing; no trial.
  base.remade = true;
  EXPECT_EQ(Labels(base, FirstRound(base)),
            (std::vector<std::string>{"num_workers=15", "num_workers=12"}));
}

TEST(FirstRound, WithoutARecommendationTheTwoMostPredicted) {
  RunModel base = Model("input_starvation_w15");
  base.all_predictions = {
      {"pin_memory=True", {{"PINSCOPE_SET_PIN_MEMORY", "1"}}, false, 1.05, "", false},
      {"PINSCOPE_PIN=1", {{"PINSCOPE_PIN", "1"}}, false, 1.10, "", false},
      {"no_per_step_sync", {}, true, 1.5, "", false},  // code: never a trial
      {"num_workers=16", {{"PINSCOPE_SET_NUM_WORKERS", "16"}}, false, 1.01, "", false}};
  EXPECT_EQ(Labels(base, FirstRound(base)),
            (std::vector<std::string>{"PINSCOPE_PIN=1", "pin_memory=True"}));
}

// main_process (num_workers=0): round 1 measured 12, 8 and 15 workers; 12
// is the best. Round 2 bisects 8..12 and 12..15.
TEST(LaterRound, TheBestWorkerCountIsBisected) {
  const RunModel base = Model("main_process");
  ChoiceInput in;
  in.baseline = &base;
  in.measured = {{base.settings, 1000},
                 {With(base, {{"PINSCOPE_SET_NUM_WORKERS", "12"}}), 6900},
                 {With(base, {{"PINSCOPE_SET_NUM_WORKERS", "8"}}), 6800},
                 {With(base, {{"PINSCOPE_SET_NUM_WORKERS", "15"}}), 6700}};
  in.round = 2;
  in.max_workers = 16;
  EXPECT_EQ(Labels(base, ChooseTrials(in)),
            (std::vector<std::string>{"num_workers=10", "num_workers=14"}));

  // Round 3: 10 measured better than 12, 14 worse: between 8 and 10, and
  // 10 and 12.
  in.measured.push_back({With(base, {{"PINSCOPE_SET_NUM_WORKERS", "10"}}), 7000});
  in.measured.push_back({With(base, {{"PINSCOPE_SET_NUM_WORKERS", "14"}}), 6800});
  in.round = 3;
  EXPECT_EQ(Labels(base, ChooseTrials(in)),
            (std::vector<std::string>{"num_workers=9", "num_workers=11"}));
  // Round 4 around 11, with 10 and 12 measured on both sides: nothing left.
  in.measured.push_back({With(base, {{"PINSCOPE_SET_NUM_WORKERS", "9"}}), 6950});
  in.measured.push_back({With(base, {{"PINSCOPE_SET_NUM_WORKERS", "11"}}), 7100});
  in.round = 4;
  EXPECT_TRUE(ChooseTrials(in).empty());
}

TEST(LaterRound, TheBestTrialsOwnReportIsAppliedOnTopOfIt) {
  const RunModel base = Model("main_process");
  RunModel best_report;  // what the 8-worker trial's report recommends
  best_report.settings = With(base, {{"PINSCOPE_SET_NUM_WORKERS", "8"}});
  best_report.predictions = {
      {"PINSCOPE_PIN=1", {{"PINSCOPE_PIN", "1"}}, false, 1.3, "the GPU", false},
      {"batch_size_x2", {}, true, 1.4, "", false}};
  ChoiceInput in;
  in.baseline = &base;
  in.best_model = &best_report;
  in.measured = {{base.settings, 1000},
                 {With(base, {{"PINSCOPE_SET_NUM_WORKERS", "12"}}), 6500},
                 {With(base, {{"PINSCOPE_SET_NUM_WORKERS", "8"}}), 6800},
                 {With(base, {{"PINSCOPE_SET_NUM_WORKERS", "15"}}), 6400}};
  in.round = 2;
  in.max_workers = 16;
  // Below 8 the nearest measured count is the baseline's 0: half way, 4.
  EXPECT_EQ(Labels(base, ChooseTrials(in)),
            (std::vector<std::string>{"num_workers=4", "num_workers=10",
                                      "num_workers=8 PINSCOPE_PIN=1"}));
}

TEST(LaterRound, TheBestCombinedWithAnotherGain) {
  const RunModel base = Model("gpu_bound");
  ChoiceInput in;
  in.baseline = &base;
  in.measured = {{base.settings, 100},
                 {With(base, {{"PINSCOPE_SET_PIN_MEMORY", "1"}}), 112},
                 {With(base, {{"PINSCOPE_PIN", "1"}}), 104}};
  in.round = 2;
  in.max_workers = 16;
  EXPECT_EQ(Labels(base, ChooseTrials(in)),
            (std::vector<std::string>{"pin_memory=True PINSCOPE_PIN=1"}));
  // A gain within the 3% threshold is noise: nothing to combine.
  in.measured[2].rate = 102;
  EXPECT_TRUE(ChooseTrials(in).empty());
}

TEST(LaterRound, NothingBeatTheBaselineNothingToRefine) {
  const RunModel base = Model("input_starvation");
  ChoiceInput in;
  in.baseline = &base;
  in.measured = {{base.settings, 500},
                 {With(base, {{"PINSCOPE_SET_NUM_WORKERS", "15"}}), 480},
                 {With(base, {{"PINSCOPE_SET_NUM_WORKERS", "12"}}), 0}};  // failed
  in.round = 2;
  EXPECT_TRUE(ChooseTrials(in).empty());
}

TEST(LaterRound, RefusedAndMeasuredSettingsAreNeverProposedAgain) {
  const RunModel base = Model("input_starvation");
  ChoiceInput in;
  in.baseline = &base;
  in.measured = {{base.settings, 500}, {With(base, {{"PINSCOPE_SET_NUM_WORKERS", "12"}}), 3000}};
  in.refused = {With(base, {{"PINSCOPE_SET_NUM_WORKERS", "15"}})};
  in.round = 2;
  in.max_workers = 16;
  // Below 12: bisected against the baseline's 2; above: 15 was refused.
  EXPECT_EQ(Labels(base, ChooseTrials(in)), (std::vector<std::string>{"num_workers=7"}));
}

TEST(Rules, BestAndFlattening) {
  EXPECT_EQ(BestMeasured({}), -1);
  EXPECT_EQ(BestMeasured({{Settings(), 0}, {Settings(), 0}}), -1);
  EXPECT_EQ(BestMeasured({{Settings(), 10}, {Settings(), 12}, {Settings(), 12}}), 1);
  EXPECT_TRUE(Flattened(100, 103));
  EXPECT_FALSE(Flattened(100, 103.5));
  EXPECT_TRUE(Flattened(100, 90));
  EXPECT_FALSE(Flattened(100, 106, 0.05));
}

}  // namespace
}  // namespace pinscope::tune

namespace pinscope::tune {
namespace {

// A run times the supply only once the batches its workers queued ahead at
// the start have drained: twice that queue untimed and twice it timed.
TEST(TrialRunLength, CoversTheQueueTheWorkersFillAhead) {
  Settings s;
  s.num_workers = 15;  // prefetch 2 by default: 30 batches queued
  RunLength r = TrialRunLength(s, 10, 60);
  EXPECT_EQ(r.warmup, 60);
  EXPECT_EQ(r.batches, 120);
  s.prefetch_factor = 4;
  r = TrialRunLength(s, 10, 60);
  EXPECT_EQ(r.warmup, 120);
  EXPECT_EQ(r.batches, 240);
  s = Settings{};  // no workers: as asked
  r = TrialRunLength(s, 10, 60);
  EXPECT_EQ(r.warmup, 10);
  EXPECT_EQ(r.batches, 60);
  s.num_workers = 2;  // 4 queued: the asked lengths are longer
  r = TrialRunLength(s, 10, 60);
  EXPECT_EQ(r.warmup, 10);
  EXPECT_EQ(r.batches, 60);
}

}  // namespace
}  // namespace pinscope::tune
