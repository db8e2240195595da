// The synthetic runs checked in under tests/data/runs/, written by
// make_golden and re-made by golden_test to check the files still match the
// generator. Each run is a scenario with known answers (docs/report.md).
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace pinscope::testing {

struct GoldenRun {
  std::string name;  // folder under tests/data/runs and expected file stem
  void (*write)(const std::string& dir);
};

// "dataloader": a root process, two forked DataLoader workers handing six
// 36.75 MiB batches over /dev/shm (peak 220.5 MiB of 256 MiB), pageable
// copies of model weights and of every batch, a pinned copy, a helper.
// "no_cuda": one process that never loads CUDA: no copies at all.
const std::vector<GoldenRun>& GoldenRuns();

// For gtest's parameter names in messages.
inline void PrintTo(const GoldenRun& run, std::ostream* out) { *out << run.name; }

}  // namespace pinscope::testing
