// `pinscope tune` end to end: the real binary, the real libpinscope.so and
// Python hook, a real PyTorch DataLoader on the CPU (dataloader_job.py).
// A job whose one worker spins 2 ms per sample is starved: tune must pick
// more workers, keep every trial's folder (each a run whose trace shows the
// worker count the trial set), print the four physical checks and write the
// result as JSON. A job without a DataLoader is told so (exit 3); a job
// that fails passes its status through; Ctrl-C stops after the current run
// and still prints what was measured. Outcomes, never timings, are asserted:
// the chosen setting, not its speed.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "e2e_util.h"

namespace pinscope::e2e {
namespace {

namespace fs = std::filesystem;

bool HasTorch() {
  static const bool torch = [] {
    TempDir d("torch-probe");
    return RunCommand({PINSCOPE_PYTHON, "-c", "import torch"}, {}, d.path()).Exited(0);
  }();
  return torch;
}

// The environment of every tune here: quick traces, no user calibration.
std::vector<std::string> Env(const std::string& dir) {
  return {"PINSCOPE_CUPTI=0", "PINSCOPE_STACKS=0",
          "PINSCOPE_CALIBRATION=" + dir + "/no-calibration.json"};
}

// A starved job: one worker, 2 ms of Python per sample, 16 samples a batch.
std::vector<std::string> StarvedJob() {
  return {PINSCOPE_PYTHON, DATALOADER_JOB, "--workers", "1",       "--batches",
          "400",           "--spin-ms",    "2",         "--shape", "3,128,128"};
}

class Tune : public ::testing::Test {
 protected:
  void TearDown() override {
    if (HasFailure()) {
      dir_.Keep();
      std::cerr << "kept " << dir_.path() << "\n";
    }
  }
  std::vector<std::string> Tuned(std::vector<std::string> options,
                                 const std::vector<std::string>& job) {
    std::vector<std::string> argv = {PINSCOPE_BIN, "tune"};
    argv.insert(argv.end(), options.begin(), options.end());
    argv.push_back("--");
    argv.insert(argv.end(), job.begin(), job.end());
    return argv;
  }
  TempDir dir_{"tune"};
};

int WorkersInTrace(const std::string& folder) {
  std::string error;
  for (const auto& [pid, t] : ReadRun(folder, &error)) {
    if (t.header.origin() != trace::ORIGIN_ROOT) continue;
    for (const auto& p : t.packets)
      if (p.has_loader() && p.loader().kind() == trace::LOADER_ITER)
        return p.loader().num_workers();
  }
  return -1;
}

TEST_F(Tune, AStarvedJobGetsMoreWorkers) {
  if (!HasTorch()) GTEST_SKIP() << PINSCOPE_PYTHON << " has no torch";
  const std::string out = dir_.path() + "/tune";
  RunResult r = RunCommand(Tuned({"--batches", "20", "--warmup", "5", "--reps", "2", "--budget",
                                  "300", "--json", "-o", out},
                                 StarvedJob()),
                           Env(dir_.path()), dir_.path());
  ASSERT_TRUE(r.Exited(0)) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j, nlohmann::json::parse(ReadWholeFile(out + "/tune.json")));

  // The four checks came first, on stderr with --json.
  const size_t checks = r.err.find("Four physical checks");
  ASSERT_NE(checks, std::string::npos) << r.err;
  EXPECT_LT(checks, r.err.find("[1] "));
  for (const char* line : {"  /dev/shm     ", "  cores        ", "  memory       ", "  PCIe   "})
    EXPECT_NE(r.err.find(line), std::string::npos) << line << "\n" << r.err;
  EXPECT_GT(j["checks"]["cores"]["usable"].get<int>(), 0);

  // The baseline as it is, measured twice; the best has more workers.
  ASSERT_GE(j["trials"].size(), 2u);
  const nlohmann::json& base = j["trials"][0];
  EXPECT_EQ(base["label"], "baseline");
  EXPECT_EQ(base["settings"]["num_workers"], 1);
  EXPECT_EQ(base["samples_per_s"].size(), 2u);
  EXPECT_EQ(base["verdict"], "input_starvation");
  ASSERT_FALSE(j["best"].is_null()) << r.out;
  const int best = j["best"]["settings"]["num_workers"];
  EXPECT_GT(best, 1) << j["best"];
  EXPECT_EQ(j["best"]["label"], "num_workers=" + std::to_string(best));
  EXPECT_EQ(j["best"]["code"], "DataLoader(..., num_workers=" + std::to_string(best) + ")");
  EXPECT_EQ(j["best"]["run"], "");
  EXPECT_NE(j["best"]["without_editing"].get<std::string>().find(
                "PINSCOPE_SET_NUM_WORKERS=" + std::to_string(best) + " pinscope run -- "),
            std::string::npos);
  EXPECT_EQ(j["trials"][j["best"]["index"].get<int>()]["samples_per_s"].size(), 2u)
      << "the best is measured as often as the baseline";

  // Every trial that ran kept its folders; each is a run of the job with
  // the trial's worker count (the hook applied it), stopped after 20
  // batches, or where its workers queue more ahead (k workers x prefetch 2),
  // twice that untimed and twice it timed.
  int ran = 0;
  for (const auto& t : j["trials"]) {
    if (t["status"] == "skipped") continue;
    ++ran;
    ASSERT_FALSE(t["folders"].empty()) << t;
    for (const auto& f : t["folders"]) {
      const std::string folder = f;
      SCOPED_TRACE(folder);
      EXPECT_EQ(fs::path(folder).parent_path(), fs::path(out));
      EXPECT_TRUE(fs::exists(folder + "/job.out"));
      EXPECT_EQ(WorkersInTrace(folder), t["settings"]["num_workers"].get<int>());
      const std::string rate = ReadWholeFile(folder + "/throughput.jsonl");
      const int queued = 2 * t["settings"]["num_workers"].get<int>();
      const int warmup = std::max(5, 2 * queued);
      const int batches = warmup + std::max(15, 2 * queued);
      EXPECT_NE(rate.find("\"batches\": " + std::to_string(batches) + ","), std::string::npos)
          << rate;
      EXPECT_NE(rate.find("\"timed_batches\": " + std::to_string(batches - warmup - 1) + ","),
                std::string::npos)
          << rate;
    }
  }
  EXPECT_GE(ran, 2);
  EXPECT_FALSE(j["stop_reason"].get<std::string>().empty());
  EXPECT_FALSE(j["interrupted"]);

  // The report and diff of the kept folders work as for any run.
  const std::string first = j["trials"][0]["folders"][0];
  const std::string chosen = j["trials"][j["best"]["index"].get<int>()]["folders"][0];
  RunResult diff = RunCommand({PINSCOPE_BIN, "diff", first, chosen}, Env(dir_.path()), dir_.path());
  EXPECT_TRUE(diff.Exited(0)) << diff.err;
  EXPECT_NE(diff.out.find("B changes num_workers 1 -> " + std::to_string(best)), std::string::npos)
      << diff.out;
}

TEST_F(Tune, AJobWithoutADataLoaderIsToldSo) {
  if (!HasTorch()) GTEST_SKIP() << PINSCOPE_PYTHON << " has no torch";
  // 16 MiB tensors: recorded allocations, so the job leaves a trace.
  RunResult r = RunCommand(Tuned({"-o", dir_.path() + "/tune"},
                                 {PINSCOPE_PYTHON, "-c",
                                  "import torch; x = torch.zeros(1 << 22); print(float(x.sum()))"}),
                           Env(dir_.path()), dir_.path());
  EXPECT_TRUE(r.Exited(3)) << r.err;
  EXPECT_NE(r.err.find("pinscope tune: no DataLoader to tune: the Python hook saw no DataLoader "
                       "iterate (the baseline's report has no loader events"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_TRUE(fs::exists(dir_.path() + "/tune/00-baseline-r1/job.out"));
  EXPECT_EQ(ReadWholeFile(dir_.path() + "/tune/00-baseline-r1/job.out"), "0.0\n");
}

TEST_F(Tune, StatusesAsPinscopeRun) {
  RunResult fails = RunCommand(Tuned({"-o", dir_.path() + "/a"}, {"/bin/sh", "-c", "exit 7"}),
                               Env(dir_.path()), dir_.path());
  EXPECT_TRUE(fails.Exited(7)) << fails.err;
  EXPECT_NE(fails.err.find("the baseline run failed (exit 7)"), std::string::npos) << fails.err;
  RunResult missing = RunCommand(Tuned({"-o", dir_.path() + "/b"}, {"no-such-command-here"}),
                                 Env(dir_.path()), dir_.path());
  EXPECT_TRUE(missing.Exited(127)) << missing.err;
  EXPECT_NE(missing.err.find("pinscope tune: no-such-command-here: command not found"),
            std::string::npos)
      << missing.err;
  RunResult killed =
      RunCommand(Tuned({"-o", dir_.path() + "/c"}, {"/bin/sh", "-c", "kill -TERM $$; sleep 5"}),
                 Env(dir_.path()), dir_.path());
  ASSERT_TRUE(WIFSIGNALED(killed.status)) << killed.err;
  EXPECT_EQ(WTERMSIG(killed.status), SIGTERM);
  EXPECT_NE(killed.err.find("the baseline was killed by signal 15"), std::string::npos)
      << killed.err;
  RunResult usage =
      RunCommand({PINSCOPE_BIN, "tune", "--batches", "4", "--warmup", "5", "--", "/bin/true"},
                 Env(dir_.path()), dir_.path());
  EXPECT_TRUE(usage.Exited(125)) << usage.err;
  EXPECT_TRUE(RunCommand({PINSCOPE_BIN, "tune", "--budget", "0", "--", "/bin/true"},
                         Env(dir_.path()), dir_.path())
                  .Exited(125));
}

// SIGINT (as a terminal's Ctrl-C sends it, here with kill) while the
// baseline runs: the run finishes, the result is printed, pinscope dies of
// SIGINT.
TEST_F(Tune, CtrlCStopsAfterTheCurrentRunAndPrintsWhatWasMeasured) {
  if (!HasTorch()) GTEST_SKIP() << PINSCOPE_PYTHON << " has no torch";
  const std::string out = dir_.path() + "/tune";
  std::vector<std::string> argv =
      Tuned({"--batches", "40", "--warmup", "5", "--reps", "3", "--json", "-o", out}, StarvedJob());
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  const std::vector<std::string> env = Env(dir_.path());
  const std::string out_path = dir_.path() + "/stdout.txt";
  const pid_t pid = fork();
  if (pid == 0) {
    for (const auto& e : env) putenv(const_cast<char*>(e.c_str()));
    unsetenv("LD_PRELOAD");
    const int fd = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 1);
    const int null_fd = open("/dev/null", O_WRONLY);
    dup2(null_fd, 2);
    execv(cargv[0], cargv.data());
    _exit(99);
  }
  ASSERT_GT(pid, 0);
  // Once the baseline's trace is there, the job is running: interrupt.
  bool started = false;
  for (int i = 0; i < 6000 && !started; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(out + "/00-baseline-r1", ec))
      started |= e.path().extension() == ".pstrace";
  }
  ASSERT_TRUE(started);
  kill(pid, SIGINT);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << status;
  EXPECT_EQ(WTERMSIG(status), SIGINT);
  const nlohmann::json j = nlohmann::json::parse(ReadWholeFile(out_path));
  EXPECT_TRUE(j["interrupted"]);
  EXPECT_EQ(j["stop_reason"], "interrupted by SIGINT after the run it was in");
  ASSERT_GE(j["trials"].size(), 1u);
  // The baseline's run was not cut: it measured.
  EXPECT_EQ(j["trials"][0]["samples_per_s"].size(), 1u) << j["trials"][0];
  EXPECT_EQ(j["trials"][0]["failed_reps"], 0);
}

}  // namespace
}  // namespace pinscope::e2e
