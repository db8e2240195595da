// What every test of a PyTorch job in tests/e2e/python shares: skipped where
// the test Python has no torch (said with the import's error), and its
// folder kept, and named, when the test fails.
#pragma once

#include <gtest/gtest.h>

#include <iostream>
#include <string>

#include "e2e_util.h"

namespace pinscope::e2e {

inline bool TorchAvailable(std::string* why) {
  TempDir d("torch-probe");
  RunResult r = RunCommand({PINSCOPE_PYTHON, "-c", "import torch"}, {}, d.path());
  if (!r.Exited(0)) *why = r.err.empty() ? "cannot run " PINSCOPE_PYTHON : r.err;
  return r.Exited(0);
}

class TorchJobTest : public ::testing::Test {
 protected:
  explicit TorchJobTest(const std::string& tag) : dir_(tag) {}
  static void SetUpTestSuite() { torch_ = TorchAvailable(&why_); }
  void SetUp() override {
    if (!torch_) GTEST_SKIP() << PINSCOPE_PYTHON << " has no torch: " << why_;
  }
  void TearDown() override {
    if (HasFailure()) {
      dir_.Keep();
      std::cerr << "kept " << dir_.path() << "\n";
    }
  }

  static inline bool torch_ = false;
  static inline std::string why_;
  TempDir dir_;
};

}  // namespace pinscope::e2e
