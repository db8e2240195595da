// Clocks used in the trace: CLOCK_MONOTONIC (vDSO, no syscall) for events,
// CLOCK_REALTIME only once, in the process header.
#pragma once

#include <time.h>

#include <cstdint>

namespace pinscope::shim {

inline uint64_t MonoNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

inline uint64_t WallNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace pinscope::shim
