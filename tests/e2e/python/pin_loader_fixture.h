// The fixture of pin_loader_test and pin_pool_test (tests/e2e/python): runs
// pin_loader_job.py without pinscope and under PINSCOPE_PIN=1 (plus
// extra_env_), both against the CUDA runtime double.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "e2e_util.h"
#include "torch_fixture.h"

namespace pinscope::e2e {

// The lines of `text` that start with `prefix`.
inline std::vector<std::string> Lines(const std::string& text, const std::string& prefix) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(prefix, 0) == 0) out.push_back(line);
  return out;
}

// N from the job's "register_calls N" line; -1 if missing.
inline long RegisterCalls(const std::string& out) {
  auto lines = Lines(out, "register_calls ");
  return lines.size() == 1 ? std::stol(lines[0].substr(15)) : -1;
}

class PinLoaderTest : public TorchJobTest {
 protected:
  PinLoaderTest() : TorchJobTest("pin-loader") {}
  RunResult Job(const std::vector<std::string>& args, bool pinscope) {
    std::vector<std::string> argv = {PINSCOPE_PYTHON, PIN_LOADER_JOB, "--cudart", FAKE_CUDART};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<std::string> env;
    if (pinscope) {
      env = {PreloadPinscope(PINSCOPE_LIB, ""), "PINSCOPE_OUT=" + dir_.path() + "/run",
             "PINSCOPE_PIN=1", "PINSCOPE_STACKS=0", "PINSCOPE_CUPTI=0"};
      // Pinning without the pool (it comes with PINSCOPE_PIN) unless the
      // test names PINSCOPE_PIN_POOL itself.
      bool pool_named = false;
      for (const std::string& e : extra_env_) pool_named |= e.rfind("PINSCOPE_PIN_POOL=", 0) == 0;
      if (!pool_named && !pool_default_) env.push_back("PINSCOPE_PIN_POOL=0");
      env.insert(env.end(), extra_env_.begin(), extra_env_.end());
    }
    const std::string sub = dir_.path() + (pinscope ? "/pinned" : "/plain");
    mkdir(sub.c_str(), 0700);
    if (!prefix_.empty()) {
      // In a private mount namespace (a small /dev/shm): both runs.
      argv.insert(argv.begin(), {"unshare", "-m", "sh", "-c", prefix_ + " && exec \"$0\" \"$@\""});
    }
    return RunCommand(argv, env, sub);
  }
  // `pinscope report --json` of the pinscope run (discarded: it failed).
  nlohmann::json ReportJson() {
    RunResult r =
        RunCommand({PINSCOPE_BIN, "report", "--json", dir_.path() + "/run"}, {}, dir_.path());
    EXPECT_TRUE(r.Exited(0)) << r.err;
    return nlohmann::json::parse(r.out, nullptr, false);
  }
  // Runs the job both ways; both must succeed with equal batches. Returns
  // the pinscope run's registrations.
  long RunBoth(const std::vector<std::string>& args, size_t batches) {
    RunResult plain = Job(args, false);
    EXPECT_TRUE(plain.Exited(0)) << plain.out << plain.err;
    pinned_ = Job(args, true);
    EXPECT_TRUE(pinned_.Exited(0)) << pinned_.out << pinned_.err;
    EXPECT_EQ(Lines(pinned_.out, "WRONG"), std::vector<std::string>{});
    const auto want = Lines(plain.out, "batch ");
    EXPECT_EQ(want.size(), batches);
    EXPECT_EQ(Lines(pinned_.out, "batch "), want);
    EXPECT_EQ(Lines(pinned_.out, "held "), Lines(plain.out, "held "));
    EXPECT_EQ(RegisterCalls(plain.out), 0);
    return RegisterCalls(pinned_.out);
  }

  // A job whose worker is killed (--kill-after): both runs end with the
  // loader's error, nothing wrong, and the same first `intact` batches.
  void ExpectLoaderFailsAlike(const std::vector<std::string>& args, size_t intact) {
    RunResult plain = Job(args, false);
    pinned_ = Job(args, true);
    EXPECT_TRUE(plain.Exited(0)) << plain.out << plain.err;
    EXPECT_TRUE(pinned_.Exited(0)) << pinned_.out << pinned_.err;
    EXPECT_EQ(Lines(plain.out, "loader error"), std::vector<std::string>{"loader error"});
    EXPECT_EQ(Lines(pinned_.out, "loader error"), std::vector<std::string>{"loader error"});
    EXPECT_EQ(Lines(pinned_.out, "WRONG"), std::vector<std::string>{});
    auto want = Lines(plain.out, "batch "), got = Lines(pinned_.out, "batch ");
    ASSERT_GE(want.size(), intact);
    ASSERT_GE(got.size(), intact);
    want.resize(intact);
    got.resize(intact);
    EXPECT_EQ(got, want);
  }

  RunResult pinned_;
  std::vector<std::string> extra_env_;  // for the pinscope run
  bool pool_default_ = false;           // PINSCOPE_PIN_POOL left unset (the default)
  std::string prefix_;                  // shell commands before both runs (unshare -m)
};
}  // namespace pinscope::e2e
