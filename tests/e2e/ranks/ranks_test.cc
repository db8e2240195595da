// A distributed job under `pinscope run` (issue 20): the real binary, the
// real libpinscope.so and Python hook, torchrun (python3 -m
// torch.distributed.run) with two gloo ranks of ddp_job.py, each with one
// DataLoader worker and the CUDA runtime test double standing in for its
// copies. Rank 1's dataset sleeps 40 ms a sample (a planted straggler): its
// worker supplies a batch every 80 ms, rank 0's in well under a
// millisecond, and the gradients' all-reduce makes rank 0 wait for rank 1
// at every step. Outcomes are asserted, never timings: every process of
// each rank labelled, one report with both ranks, rank 1 named the
// straggler for its input, rank 0's wait put on rank 1, not on its input.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "e2e_util.h"

namespace pinscope::e2e {
namespace {

bool HasTorch() {
  static const bool torch = [] {
    TempDir d("torch-probe");
    return RunCommand({PINSCOPE_PYTHON, "-c", "import torch.distributed.run"}, {}, d.path())
        .Exited(0);
  }();
  return torch;
}

std::vector<std::string> Env(const std::string& dir) {
  return {"PINSCOPE_CUPTI=0",
          "PINSCOPE_STACKS=0",
          "PINSCOPE_CALIBRATION=" + dir + "/no-calibration.json",
          std::string("FAKE_CUDART=") + FAKE_CUDART13,
          "FAKECUDA_DEVICES=2",
          "OMP_NUM_THREADS=1"};
}

std::vector<std::string> Torchrun(const std::string& out) {
  return {PINSCOPE_BIN, "run", "-o", out, "--", PINSCOPE_PYTHON, "-m", "torch.distributed.run",
          // --redirects/--tee 1: torch 1.13's parser of their default "0" fails on
          // Python 3.11 (its Std flag enum); each rank's output is teed, prefixed.
          "--standalone", "--nproc_per_node", "2", "--redirects", "1", "--tee", "1", DDP_JOB,
          "--steps", "30", "--batch", "2", "--workers", "1", "--slow-rank", "1", "--slow-ms", "40"};
}

// One torchrun job, checked part by part in one test: ctest runs each test
// in a process of its own, and the job is most of the time.
class Ranks : public ::testing::Test {
 protected:
  void TearDown() override {
    if (HasFailure()) {
      dir_.Keep();
      std::cerr << "kept " << dir_.path() << "\n";
    }
  }
  nlohmann::json ReportJson() {
    RunResult r =
        RunCommand({PINSCOPE_BIN, "report", "--json", run_}, Env(dir_.path()), dir_.path());
    EXPECT_TRUE(r.Exited(0)) << r.err;
    return nlohmann::json::parse(r.out, nullptr, false);
  }
  void Labels();
  void JsonReport();
  void TextReport();
  void Diff();

  TempDir dir_{"ranks"};
  std::string run_ = dir_.path() + "/run";
  RunResult job_;
};

TEST_F(Ranks, AStragglerRankIsNamedForItsInput) {
  if (!HasTorch()) GTEST_SKIP() << PINSCOPE_PYTHON << " has no torch.distributed";
  job_ = RunCommand(Torchrun(run_), Env(dir_.path()), dir_.path());
  ASSERT_TRUE(job_.Exited(0)) << job_.err;
  {
    SCOPED_TRACE("every rank and its workers labelled");
    Labels();
  }
  {
    SCOPED_TRACE("the JSON report");
    JsonReport();
  }
  {
    SCOPED_TRACE("the text report");
    TextReport();
  }
  {
    SCOPED_TRACE("diff");
    Diff();
  }
}

void Ranks::Labels() {
  EXPECT_NE(job_.out.find(":rank 0 steps 30"), std::string::npos) << job_.out;
  EXPECT_NE(job_.out.find(":rank 1 steps 30"), std::string::npos) << job_.out;
  std::string error;
  const auto run = ReadRun(run_, &error);
  ASSERT_TRUE(error.empty()) << error;
  // rank -> (main processes, forked workers), by the labels in the headers.
  // torchrun's agent makes no CUDA call and writes no file: every file is a rank's.
  std::map<uint32_t, std::pair<int, int>> ranks;
  EXPECT_EQ(run.size(), 4u);
  for (const auto& [pid, t] : run) {
    const trace::ProcessHeader& h = t.header;
    ASSERT_TRUE(h.has_rank()) << pid << ": " << Join({h.cmdline().begin(), h.cmdline().end()});
    EXPECT_EQ(h.rank().world_size(), 2) << pid;
    EXPECT_EQ(h.rank().local_rank(), static_cast<int>(h.rank().rank())) << pid;
    EXPECT_EQ(h.rank().group_rank(), 0) << pid;
    EXPECT_EQ(h.rank().local_world_size(), 2) << pid;
    if (h.origin() == trace::ORIGIN_FORK) {
      ++ranks[h.rank().rank()].second;
      // A worker carries the label of the rank whose process forked it.
      ASSERT_TRUE(run.count(h.parent_pid())) << pid;
      EXPECT_EQ(run.at(h.parent_pid()).header.rank().rank(), h.rank().rank()) << pid;
    } else {
      EXPECT_EQ(h.origin(), trace::ORIGIN_EXEC) << pid << ": a rank is exec'd by the agent";
      ++ranks[h.rank().rank()].first;
    }
  }
  ASSERT_EQ(ranks.size(), 2u);
  for (const auto& [rank, counts] : ranks) {
    EXPECT_EQ(counts.first, 1) << "rank " << rank << ": its main process";
    EXPECT_EQ(counts.second, 1) << "rank " << rank << ": its one DataLoader worker";
  }
}

void Ranks::JsonReport() {
  const nlohmann::json j = ReportJson();
  ASSERT_TRUE(j.contains("ranks")) << j.dump(1);
  const nlohmann::json& ranks = j["ranks"];
  ASSERT_EQ(ranks["count"], 2);
  ASSERT_EQ(ranks["ranks"].size(), 2u);
  EXPECT_EQ(j["verdict"]["id"], "straggler");
  ASSERT_FALSE(ranks["straggler"].is_null()) << ranks.dump(1);
  EXPECT_EQ(ranks["straggler"]["rank"], 1);
  EXPECT_EQ(ranks["straggler"]["reason"], "input");
  EXPECT_EQ(ranks["straggler"]["next_slowest_rank"], 0);
  const nlohmann::json& r0 = ranks["ranks"][0];
  const nlohmann::json& r1 = ranks["ranks"][1];
  EXPECT_EQ(r0["rank"], 0);
  EXPECT_EQ(r1["rank"], 1);
  EXPECT_EQ(r0["device"], 0) << "rank 0 copies to device 0 (cudaSetDevice(LOCAL_RANK))";
  EXPECT_EQ(r1["device"], 1);
  EXPECT_EQ(r0["pids"].size(), 2u);
  EXPECT_EQ(r1["pids"].size(), 2u);
  EXPECT_TRUE(r0["model_valid"]);
  EXPECT_TRUE(r1["model_valid"]);
  EXPECT_EQ(r0["collective_source"], "host_off_cpu");
  // The straggler: its own workers starve it.
  EXPECT_EQ(r1["model_verdict"], "input_starvation");
  EXPECT_EQ(r1["verdict"]["id"], "input_starvation");
  EXPECT_GT(r1["input_wait_ns"].get<double>(), r1["collective_wait_ns"].get<double>());
  EXPECT_FALSE(r1["top_change"].is_null()) << r1.dump(1);
  // The fast rank waits on it in the all-reduce, not for its own input.
  EXPECT_EQ(r0["verdict"]["id"], "waits_on_rank");
  EXPECT_NE(r0["verdict"]["text"].get<std::string>().find("rank 1 (the straggler)"),
            std::string::npos);
  EXPECT_GT(r0["collective_wait_ns"].get<double>(), r0["input_wait_ns"].get<double>());
  EXPECT_GT(r0["collective_wait_ns"].get<double>(), r1["collective_wait_ns"].get<double>());
  EXPECT_LT(r0["own_step_ns"].get<double>(), r1["own_step_ns"].get<double>());
  // Fixing it gains the job up to the next slowest rank's step.
  const double job = ranks["job_step_ns"], fixed = ranks["straggler"]["fixed_job_step_ns"];
  EXPECT_GT(ranks["straggler"]["gain_ns"].get<double>(), 0);
  EXPECT_LT(fixed, job);
  EXPECT_GE(fixed, r0["own_step_ns"].get<double>());
  EXPECT_EQ(ranks["shared"]["workers"], 2);
}

void Ranks::TextReport() {
  RunResult r = RunCommand({PINSCOPE_BIN, "report", run_}, Env(dir_.path()), dir_.path());
  ASSERT_TRUE(r.Exited(0)) << r.err;
  for (const char* line : {"Ranks (2 ranks of a distributed job", "Straggler: rank 1 (input)",
                           "Rank 0 (local rank 0, device 0;", "Rank 1 (local rank 1, device 1;",
                           "Verdict: waits on rank 1 (the straggler)", "Shared by all ranks: "})
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
  // The one-process sections about the agent's (empty) loop are not there.
  EXPECT_EQ(r.out.find("What to change (in order of expected gain)"), std::string::npos);
  // `pinscope run` printed the same report at the end (on stderr).
  EXPECT_NE(job_.err.find("Straggler: rank 1 (input)"), std::string::npos) << job_.err;
}

void Ranks::Diff() {
  RunResult r =
      RunCommand({PINSCOPE_BIN, "diff", "--json", run_, run_}, Env(dir_.path()), dir_.path());
  ASSERT_TRUE(r.Exited(0)) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.contains("ranks")) << r.out;
  EXPECT_EQ(j["ranks"]["ranks"].size(), 2u);
  EXPECT_EQ(j["ranks"]["straggler"]["a"]["rank"], 1);
  EXPECT_EQ(j["ranks"]["straggler"]["b"]["rank"], 1);
  EXPECT_EQ(j["ranks"]["job_step_ns"]["a"], j["ranks"]["job_step_ns"]["b"]);
  EXPECT_FALSE(j["ranks"]["predicted_fix"].is_null());
  RunResult text = RunCommand({PINSCOPE_BIN, "diff", run_, run_}, Env(dir_.path()), dir_.path());
  ASSERT_TRUE(text.Exited(0)) << text.err;
  EXPECT_NE(text.out.find("straggler: rank 1 (input) -> rank 1 (input)"), std::string::npos)
      << text.out;
}

// Refused before anything runs: no torch needed.
TEST_F(Ranks, TuneRefusesADistributedJob) {
  for (const std::vector<std::string>& job :
       {std::vector<std::string>{"torchrun", "--nproc_per_node", "2", DDP_JOB},
        std::vector<std::string>{PINSCOPE_PYTHON, "-m", "torch.distributed.run", DDP_JOB}}) {
    std::vector<std::string> argv = {PINSCOPE_BIN, "tune", "--"};
    argv.insert(argv.end(), job.begin(), job.end());
    RunResult r = RunCommand(argv, Env(dir_.path()), dir_.path());
    EXPECT_TRUE(r.Exited(3)) << r.err;
    EXPECT_NE(r.err.find("pinscope tune: not for a job of several ranks"), std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("names the rank that holds the others back"), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace pinscope::e2e
