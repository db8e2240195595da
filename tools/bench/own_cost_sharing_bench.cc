// Two threads on two cores counting hooks of different kinds at once
// (AddHookCost, shim/base/own_cost.h), as the training loop's thread
// (copies, waits) and the DataLoader's pin thread (shared memory, spans)
// do in turn: what a counter's cache line moving between the cores costs.
// Issue 16, docs/benchmarks.md (twenty-seventh session).
//
//   own_cost_sharing_bench [--calls N]
//
// Prints ns per call, each thread's calls against the other's at once
// (median of 5 runs).
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "shim/base/own_cost.h"

namespace {

using pinscope::shim::AddHookCost;
using pinscope::shim::HookKind;

void PinTo(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);  // best effort
}

double Run(long calls) {
  const auto t0 = std::chrono::steady_clock::now();
  std::thread loop([&] {
    PinTo(0);
    for (long i = 0; i < calls; ++i) AddHookCost(HookKind::kCopy, static_cast<uint64_t>(i));
  });
  std::thread pin([&] {
    PinTo(1);
    for (long i = 0; i < calls; ++i) AddHookCost(HookKind::kShm, static_cast<uint64_t>(i));
  });
  loop.join();
  pin.join();
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
         static_cast<double>(calls);
}

}  // namespace

int main(int argc, char** argv) {
  long calls = 20000000;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--calls") == 0 && i + 1 < argc) {
      calls = atol(argv[++i]);
    } else {
      fprintf(stderr, "usage: own_cost_sharing_bench [--calls N]\n");
      return 2;
    }
  }
  if (calls <= 0) {
    fprintf(stderr, "own_cost_sharing_bench: --calls must be positive\n");
    return 2;
  }
  std::vector<double> runs;
  for (int r = 0; r < 5; ++r) runs.push_back(Run(calls));
  std::sort(runs.begin(), runs.end());
  printf("AddHookCost, two threads at once, kinds copy and shm: %.1f ns per call (median of 5)\n",
         runs[2]);
  return 0;
}
