// What tools/bench/stack_bench.cc and device_cost_bench.cc share: the
// calling thread's CPU clock, a median, and the loop that captures the same
// call stack again from a chosen depth (CaptureStack, shim/stacks/stacks.h).
// Header-only; the benchmarks link pinscope_shim_process.
#pragma once

#include <time.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "shim/stacks/stacks.h"

namespace pinscope::bench {

// Thread CPU time: the measured work never blocks, and on a shared machine
// wall time would count the time other processes held the CPU.
inline uint64_t ThreadCpuNs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

inline volatile uint64_t g_sink;

// Captures `calls` times from `depth` frames below the caller; returns ns/call.
__attribute__((noinline)) inline double CaptureLoop(int depth, int calls) {
  if (depth > 0) {
    double r = CaptureLoop(depth - 1, calls);
    asm volatile("" ::: "memory");
    return r;
  }
  uint64_t t0 = ThreadCpuNs();
  for (int i = 0; i < calls; ++i) g_sink = shim::CaptureStack(shim::StackSite::kCopy);
  return double(ThreadCpuNs() - t0) / calls;
}

}  // namespace pinscope::bench
