// pinscope's Python hook (python/sitecustomize.py, python/pinscope_hook.py)
// in a real PyTorch DataLoader on the CPU: dataloader_job.py runs with
// libpinscope.so preloaded and the hook's folder on PYTHONPATH, as
// `pinscope run` starts it, and the trace must hold the loader's settings
// (LOADER_ITER), one NEXT span per __next__ on the main thread, one FETCH
// span per batch in the process that made it, one RECV per batch received
// from the workers, and the END mark; the job's
// output is unchanged, a job's own sitecustomize still runs, and the hook
// does nothing without the shim or with PINSCOPE_PYTHON_HOOK=0.
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "e2e_util.h"

namespace pinscope::e2e {
namespace {

constexpr int kBatches = 8;
constexpr int kBatch = 16;

// "file:LINE" of the line of `file` that holds `marker`.
std::string SiteOf(const std::string& file, const std::string& marker) {
  std::ifstream in(file);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n)
    if (line.find(marker) != std::string::npos) return file + ":" + std::to_string(n);
  ADD_FAILURE() << marker << " not in " << file;
  return "";
}

// The one line PINSCOPE_THROUGHPUT wrote (a second line fails the test).
std::string RateLine(const std::string& path) {
  std::ifstream in(path);
  std::string line, more;
  EXPECT_TRUE(std::getline(in, line)) << path;
  EXPECT_FALSE(std::getline(in, more)) << "a second line: " << more;
  return line;
}

class PythonHook : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    TempDir d("torch-probe");
    RunResult r = RunCommand({PINSCOPE_PYTHON, "-c", "import torch"}, {}, d.path());
    torch_ = r.Exited(0);
  }
  void SetUp() override {
    if (!torch_) GTEST_SKIP() << PINSCOPE_PYTHON << " has no torch";
  }
  void TearDown() override {
    if (HasFailure()) dir_.Keep();
  }
  RunResult RunJob(int workers, std::vector<std::string> extra_env = {}, bool preload = true,
                   std::string python_path = PINSCOPE_HOOK_DIR) {
    std::vector<std::string> env = {"PYTHONPATH=" + python_path,
                                    "PINSCOPE_OUT=" + dir_.path() + "/run", "PINSCOPE_STACKS=0",
                                    "PINSCOPE_CUPTI=0"};
    if (preload) env.push_back(PreloadPinscope(PINSCOPE_LIB, ""));
    env.insert(env.end(), extra_env.begin(), extra_env.end());
    return RunCommand({PINSCOPE_PYTHON, DATALOADER_JOB, "--workers", std::to_string(workers),
                       "--batch", std::to_string(kBatch), "--batches", std::to_string(kBatches)},
                      env, dir_.path());
  }
  std::map<uint32_t, ProcessTrace> Traces() {
    std::string error;
    auto run = ReadRun(dir_.path() + "/run", &error);
    EXPECT_EQ(error, "");
    return run;
  }
  static std::vector<const trace::TracePacket*> Loader(const ProcessTrace& t,
                                                       trace::LoaderEventKind k) {
    return t.Select(
        [k](const trace::TracePacket& p) { return p.has_loader() && p.loader().kind() == k; });
  }

  static bool torch_;
  TempDir dir_{"python-hook"};
};
bool PythonHook::torch_ = false;

// A span that read the thread's CPU time only at both ends (NEXT, RECV,
// PIN: one system call at each; nothing of it but the CPU time is used).
bool CpuOnly(const trace::LoaderEvent& e) {
  for (const trace::ThreadUsage& u : {e.usage_begin(), e.usage_end()})
    if (u.cpu_ns() == 0 || u.user_ns() + u.sys_ns() + u.minor_faults() + u.major_faults() != 0)
      return false;
  return true;
}

TEST_F(PythonHook, WorkersFetchAndTheMainThreadWaits) {
  RunResult r = RunJob(2);
  ASSERT_TRUE(r.Exited(0)) << r.err;
  EXPECT_EQ(r.out, "batches 8\n");
  EXPECT_EQ(r.err.find("pinscope"), std::string::npos) << r.err;
  auto run = Traces();
  ASSERT_EQ(run.size(), 3u);
  const ProcessTrace* main = nullptr;
  for (const auto& [pid, t] : run)
    if (t.header.origin() == trace::ORIGIN_ROOT) main = &t;
  ASSERT_NE(main, nullptr);

  auto iters = Loader(*main, trace::LOADER_ITER);
  ASSERT_EQ(iters.size(), 1u);
  const trace::LoaderEvent& it = iters[0]->loader();
  EXPECT_EQ(it.num_workers(), 2);
  EXPECT_EQ(it.batch_size(), kBatch);
  EXPECT_EQ(it.dataset_length(), static_cast<uint64_t>(kBatch * kBatches));
  EXPECT_FALSE(it.pin_memory());
  EXPECT_EQ(it.prefetch_factor(), 2);
  EXPECT_FALSE(it.iterable());
  EXPECT_EQ(it.index(), 0u);
  EXPECT_EQ(it.site(), SiteOf(DATALOADER_JOB, "# LOADER"));
  EXPECT_EQ(it.user_site(), "");  // the job built it itself
  EXPECT_EQ(it.framework(), "");

  // One NEXT per __next__, the last one raising StopIteration, all on the
  // main thread, indices 0..8; then the END mark.
  auto nexts = Loader(*main, trace::LOADER_NEXT);
  ASSERT_EQ(nexts.size(), static_cast<size_t>(kBatches + 1));
  for (size_t i = 0; i < nexts.size(); ++i) {
    EXPECT_EQ(nexts[i]->tid(), main->header.pid());
    EXPECT_EQ(nexts[i]->loader().index(), i);
    EXPECT_EQ(nexts[i]->loader().loader_id(), it.loader_id());
    EXPECT_GE(nexts[i]->loader().end_ns(), nexts[i]->timestamp_ns());
    EXPECT_TRUE(nexts[i]->loader().has_usage_end());
    EXPECT_TRUE(CpuOnly(nexts[i]->loader())) << i;
  }
  auto ends = Loader(*main, trace::LOADER_END);
  ASSERT_EQ(ends.size(), 1u);
  EXPECT_EQ(ends[0]->loader().index(), static_cast<uint64_t>(kBatches));
  EXPECT_TRUE(Loader(*main, trace::LOADER_FETCH).empty());  // the workers make the batches

  // Each worker made its share: 8 FETCH spans in all, 16 samples each.
  int fetches = 0;
  std::set<int> worker_ids;
  for (const auto& [pid, t] : run) {
    if (&t == main) continue;
    for (const auto* p : Loader(t, trace::LOADER_FETCH)) {
      ++fetches;
      worker_ids.insert(p->loader().worker_id());
      EXPECT_EQ(p->loader().batch_samples(), static_cast<uint32_t>(kBatch));
      EXPECT_GT(p->loader().end_ns(), p->timestamp_ns());
      // A batch being made: the whole usage (its faults are priced).
      EXPECT_GT(p->loader().usage_begin().minor_faults(), 0u);
      EXPECT_GT(p->loader().usage_end().user_ns() + p->loader().usage_end().sys_ns(), 0u);
    }
  }
  EXPECT_EQ(fetches, kBatches);
  EXPECT_EQ(worker_ids, (std::set<int>{0, 1}));

  // Receiving each batch from the workers' result queue: one RECV per batch
  // on the main thread, nested in the NEXT that received it and carrying
  // its loader and index; none in the workers.
  auto recvs = Loader(*main, trace::LOADER_RECV);
  ASSERT_EQ(recvs.size(), static_cast<size_t>(kBatches));
  for (const auto* r : recvs) {
    EXPECT_EQ(r->tid(), main->header.pid());
    EXPECT_EQ(r->loader().loader_id(), it.loader_id());
    EXPECT_GE(r->loader().end_ns(), r->timestamp_ns());
    EXPECT_TRUE(r->loader().has_usage_end());
    EXPECT_TRUE(CpuOnly(r->loader()));
    const trace::TracePacket* outer = nullptr;
    for (const auto* n : nexts)
      if (n->timestamp_ns() <= r->timestamp_ns() && r->loader().end_ns() <= n->loader().end_ns())
        outer = n;
    ASSERT_NE(outer, nullptr) << "a RECV outside every NEXT";
    EXPECT_EQ(r->loader().index(), outer->loader().index());
  }
  for (const auto& [pid, t] : run) {
    if (&t != main) {
      EXPECT_TRUE(Loader(t, trace::LOADER_RECV).empty()) << pid;
    }
  }

  // pinscope's own cost: each loader record is one hook of its kind, in
  // every process (stacks are off, and no copy or large allocation here).
  for (const auto& [pid, t] : run) {
    const trace::Counters* last = nullptr;
    for (const auto& p : t.packets)
      if (p.has_counters()) last = &p.counters();
    ASSERT_NE(last, nullptr) << pid;
    uint64_t loader_calls = 0, loader_ns = 0;
    for (const trace::HookKindCost& h : last->hook_kinds()) {
      if (h.kind() != trace::HOOK_LOADER) continue;
      loader_calls += h.calls();
      loader_ns += h.ns();
    }
    const size_t records =
        t.Select([](const trace::TracePacket& p) { return p.has_loader(); }).size();
    EXPECT_EQ(loader_calls, records) << pid;
    EXPECT_GT(loader_ns, 0u) << pid;
    EXPECT_LE(loader_ns, last->hook_ns()) << pid;
  }
}

// Frameworks build DataLoaders in their own files: the site is still the
// construction (a wrapper of __init__ skipped), the job's own line that led
// there is kept beside it, and the framework is named from the stack.
TEST_F(PythonHook, TheSiteNamesTheJobsLineAndTheFrameworkThatBuiltTheLoader) {
  const std::string pkgs = FAKE_SITE_PACKAGES;
  const std::string job = FRAMEWORK_SITES_JOB;
  RunResult r = RunCommand({PINSCOPE_PYTHON, job},
                           {"PYTHONPATH=" + std::string(PINSCOPE_HOOK_DIR) + ":" + pkgs,
                            "PINSCOPE_OUT=" + dir_.path() + "/run", "PINSCOPE_STACKS=0",
                            "PINSCOPE_CUPTI=0", PreloadPinscope(PINSCOPE_LIB, "")},
                           dir_.path());
  ASSERT_TRUE(r.Exited(0)) << r.err;
  EXPECT_EQ(r.out, "loaders 3\n");
  auto run = Traces();
  ASSERT_EQ(run.size(), 1u);
  auto iters = Loader(run.begin()->second, trace::LOADER_ITER);
  ASSERT_EQ(iters.size(), 3u);
  struct Want {
    std::string site, user_site, framework;
  };
  const Want want[] = {
      // The Trainer's DataLoader is rebuilt by accelerate: that one iterates.
      {SiteOf(pkgs + "/accelerate/data_loader.py", "# REBUILD"), SiteOf(job, "# TRAINER"),
       "transformers"},
      // Built by the job under Lightning's __init__ wrapper: the job's line.
      {SiteOf(job, "# USER LOADER"), "", "lightning"},
      // A library's factory, called from the job.
      {SiteOf(pkgs + "/mylib/loaders.py", "# FACTORY"), SiteOf(job, "# FACTORY CALL"), ""},
  };
  for (size_t i = 0; i < 3; ++i) {
    const trace::LoaderEvent& it = iters[i]->loader();
    EXPECT_EQ(it.site(), want[i].site) << i;
    EXPECT_EQ(it.user_site(), want[i].user_site) << i;
    EXPECT_EQ(it.framework(), want[i].framework) << i;
  }
}

TEST_F(PythonHook, WithoutWorkersTheFetchIsInsideTheNext) {
  RunResult r = RunJob(0);
  ASSERT_TRUE(r.Exited(0)) << r.err;
  EXPECT_EQ(r.out, "batches 8\n");
  auto run = Traces();
  ASSERT_EQ(run.size(), 1u);
  const ProcessTrace& main = run.begin()->second;
  auto nexts = Loader(main, trace::LOADER_NEXT);
  auto fetches = Loader(main, trace::LOADER_FETCH);
  ASSERT_EQ(nexts.size(), static_cast<size_t>(kBatches + 1));
  ASSERT_EQ(fetches.size(), static_cast<size_t>(kBatches));
  EXPECT_TRUE(Loader(main, trace::LOADER_RECV).empty());  // no queue without workers
  auto iters = Loader(main, trace::LOADER_ITER);
  ASSERT_EQ(iters.size(), 1u);
  EXPECT_EQ(iters[0]->loader().prefetch_factor(), 0);
  EXPECT_EQ(iters[0]->loader().num_workers(), 0);
  for (int i = 0; i < kBatches; ++i) {
    const auto* f = fetches[i];
    const auto* n = nexts[i];
    EXPECT_EQ(f->loader().worker_id(), -1);
    EXPECT_GE(f->timestamp_ns(), n->timestamp_ns());
    EXPECT_LE(f->loader().end_ns(), n->loader().end_ns());
  }
}

// Recording paused for the first 3 batches (pinscope_recording_pause, as
// tools/bench/turns.py's paired sides pause it): the hook's wrappers call
// the DataLoader straight while paused - its fetch count did not move, so
// the first batch recorded is fetch 0 - and nothing of those batches is
// recorded, not even the epoch's start.
TEST_F(PythonHook, WhilePausedTheHookStepsAside) {
  constexpr int kPaused = 3;
  RunResult r = RunCommand(
      {PINSCOPE_PYTHON, DATALOADER_JOB, "--workers", "0", "--batch", std::to_string(kBatch),
       "--batches", std::to_string(kBatches), "--pause-first", std::to_string(kPaused)},
      {"PYTHONPATH=" PINSCOPE_HOOK_DIR, "PINSCOPE_OUT=" + dir_.path() + "/run", "PINSCOPE_STACKS=0",
       "PINSCOPE_CUPTI=0", PreloadPinscope(PINSCOPE_LIB, "")},
      dir_.path());
  ASSERT_TRUE(r.Exited(0)) << r.err;
  EXPECT_EQ(r.out, "batches 8\n");
  auto run = Traces();
  ASSERT_EQ(run.size(), 1u);
  const ProcessTrace& main = run.begin()->second;
  EXPECT_TRUE(Loader(main, trace::LOADER_ITER).empty());
  auto nexts = Loader(main, trace::LOADER_NEXT);
  auto fetches = Loader(main, trace::LOADER_FETCH);
  ASSERT_EQ(nexts.size(), static_cast<size_t>(kBatches - kPaused + 1));  // and the last, empty
  ASSERT_EQ(fetches.size(), static_cast<size_t>(kBatches - kPaused));
  for (size_t i = 0; i < fetches.size(); ++i) EXPECT_EQ(fetches[i]->loader().index(), i);
  EXPECT_EQ(nexts.front()->loader().index(), static_cast<uint64_t>(kPaused));
}

// A ctypes call that lets the GIL go hands it to any thread waiting for it
// (the pin thread, unpickling the next batch), and the loop's thread waits
// until that thread lets go: the hook's calls keep it (ctypes.PyDLL).
TEST_F(PythonHook, ItsCallsKeepTheGil) {
  RunResult r = RunCommand(
      {PINSCOPE_PYTHON, DATALOADER_JOB, "--workers", "0", "--batches", "2", "--check-gil"},
      {"PYTHONPATH=" PINSCOPE_HOOK_DIR, "PINSCOPE_OUT=" + dir_.path() + "/run", "PINSCOPE_CUPTI=0",
       PreloadPinscope(PINSCOPE_LIB, "")},
      dir_.path());
  ASSERT_TRUE(r.Exited(0)) << r.err;
  EXPECT_EQ(r.out, "batches 2\n");
  auto run = Traces();
  ASSERT_EQ(run.size(), 1u);
  EXPECT_EQ(Loader(run.begin()->second, trace::LOADER_NEXT).size(), 3u);
}

TEST_F(PythonHook, TheJobsOwnSitecustomizeStillRuns) {
  const std::string own = dir_.path() + "/own";
  ASSERT_EQ(system(("mkdir -p " + own).c_str()), 0);
  std::ofstream(own + "/sitecustomize.py")
      << "import sys\nsys.stderr.write('own sitecustomize\\n')\n";
  RunResult r = RunJob(0, {}, true, std::string(PINSCOPE_HOOK_DIR) + ":" + own);
  ASSERT_TRUE(r.Exited(0)) << r.err;
  EXPECT_EQ(r.err, "own sitecustomize\n");
  auto run = Traces();
  ASSERT_EQ(run.size(), 1u);
  EXPECT_EQ(Loader(run.begin()->second, trace::LOADER_NEXT).size(),
            static_cast<size_t>(kBatches + 1));
}

TEST_F(PythonHook, OffWithoutTheShimOrWhenAskedTo) {
  RunResult plain = RunJob(2, {}, /*preload=*/false);
  ASSERT_TRUE(plain.Exited(0)) << plain.err;
  EXPECT_EQ(plain.out, "batches 8\n");
  EXPECT_EQ(plain.err, "");

  RunResult off = RunJob(2, {"PINSCOPE_PYTHON_HOOK=0"});
  ASSERT_TRUE(off.Exited(0)) << off.err;
  size_t loader_events = 0;
  for (const auto& [pid, t] : Traces())
    loader_events += t.Select([](const trace::TracePacket& p) { return p.has_loader(); }).size();
  EXPECT_EQ(loader_events, 0u);
}

// From outside the job: PINSCOPE_SET_NUM_WORKERS changes the loader (its
// settings and its worker processes), PINSCOPE_STOP_AFTER ends the job after
// N batches with status 0, PINSCOPE_THROUGHPUT writes the loop's rate.
TEST_F(PythonHook, SettingsChangedAndTheJobStoppedFromOutside) {
  const std::string rate = dir_.path() + "/rate.json";
  RunResult r =
      RunJob(0, {"PINSCOPE_SET_NUM_WORKERS=3", "PINSCOPE_SET_PIN_MEMORY=0", "PINSCOPE_STOP_AFTER=5",
                 "PINSCOPE_STOP_WARMUP=1", "PINSCOPE_THROUGHPUT=" + rate});
  ASSERT_TRUE(r.Exited(0)) << r.err;
  EXPECT_EQ(r.out, "");  // stopped before the job's own last line
  auto run = Traces();
  ASSERT_EQ(run.size(), 4u);  // the main process and the 3 workers it was given
  for (const auto& [pid, t] : run) {
    if (t.header.origin() != trace::ORIGIN_ROOT) continue;
    auto iters = Loader(t, trace::LOADER_ITER);
    ASSERT_EQ(iters.size(), 1u);
    EXPECT_EQ(iters[0]->loader().num_workers(), 3);
    EXPECT_EQ(iters[0]->loader().prefetch_factor(), 2);
    EXPECT_EQ(Loader(t, trace::LOADER_NEXT).size(), 5u);
  }
  // One line, not a second at exit.
  const std::string line = RateLine(rate);
  EXPECT_NE(line.find("\"batches\": 5"), std::string::npos) << line;
  EXPECT_NE(line.find("\"timed_batches\": 3"), std::string::npos) << line;
  EXPECT_NE(line.find("\"why\": \"stop_after\""), std::string::npos) << line;
  EXPECT_NE(line.find("\"samples_per_s\""), std::string::npos) << line;
}

// An evaluation DataLoader taken between the training loop's batches is not
// the loop: PINSCOPE_STOP_AFTER and the rate count the loader with the most
// batches (a new evaluation loader every 4 batches, 3 batches each; the
// evaluation loaders are one loader, as the analyzer counts them: one site,
// one dataset). Counting every __next__, the job stopped at the training
// loop's 7th batch.
TEST_F(PythonHook, TheStopAndTheRateCountTheTrainingLoopNotItsEvaluation) {
  const std::string rate = dir_.path() + "/rate.json";
  RunResult r = RunCommand(
      {PINSCOPE_PYTHON, DATALOADER_JOB, "--batches", "16", "--eval-every", "4"},
      {"PYTHONPATH=" + std::string(PINSCOPE_HOOK_DIR), "PINSCOPE_OUT=" + dir_.path() + "/run",
       "PINSCOPE_STACKS=0", "PINSCOPE_CUPTI=0", PreloadPinscope(PINSCOPE_LIB, ""),
       "PINSCOPE_STOP_AFTER=10", "PINSCOPE_STOP_WARMUP=1", "PINSCOPE_THROUGHPUT=" + rate},
      dir_.path());
  ASSERT_TRUE(r.Exited(0)) << r.err;
  EXPECT_EQ(r.out, "");
  auto run = Traces();
  ASSERT_EQ(run.size(), 1u);
  const ProcessTrace& t = run.begin()->second;
  std::map<uint64_t, int> nexts;  // loader id -> __next__ calls
  for (const auto* p : Loader(t, trace::LOADER_NEXT)) ++nexts[p->loader().loader_id()];
  // 10 training batches, and after batches 4 and 8 an evaluation (3
  // batches and the StopIteration): 10 + 2 x 4 calls before the stop.
  int training = 0, evaluation = 0;
  for (const auto& [id, n] : nexts) (n == 10 ? training : evaluation) += n;
  EXPECT_EQ(training, 10) << nexts.size();
  EXPECT_EQ(evaluation, 8);
  const std::string line = RateLine(rate);
  EXPECT_NE(line.find("\"batches\": 10,"), std::string::npos) << line;
  EXPECT_NE(line.find("\"timed_batches\": 8,"), std::string::npos) << line;
  EXPECT_NE(line.find("\"samples_per_s\""), std::string::npos) << line;
}

TEST_F(PythonHook, ABadSettingIsSaidOnceAndIgnored) {
  RunResult r = RunJob(0, {"PINSCOPE_SET_NUM_WORKERS=many"});
  ASSERT_TRUE(r.Exited(0)) << r.err;
  EXPECT_EQ(r.out, "batches 8\n");
  EXPECT_EQ(r.err,
            "pinscope: PINSCOPE_SET_NUM_WORKERS='many' is not a whole number >= 0; ignored\n");
}

}  // namespace
}  // namespace pinscope::e2e
