// The measurement behind `pinscope calibrate`: host<->device bandwidth of
// pageable and pinned memory, per copy size, timed with CUDA events on one
// stream (median of N after warm-up). Works on any CudaApi, so tests can run
// it on the CUDA runtime test double.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "analyzer/read/calibration.h"
#include "cli/cuda_loader.h"

namespace pinscope::cli {

struct BenchSettings {
  std::vector<uint64_t> sizes;  // bytes per copy, each > 0
  int repeats = 10;             // timed copies per (size, direction, memory kind)
  int warmup = 2;               // untimed copies before them
  int device = 0;
};

// Median of `values` (mean of the middle two for an even count); 0 if empty.
double Median(std::vector<double> values);

// GB/s (1e9 bytes per second) of `bytes` moved in `ms` milliseconds.
double GbPerSecond(uint64_t bytes, double ms);

// Page-fault costs of `bytes` (no GPU needed): first_touch_gbps (writing
// fresh anonymous memory), map_touch_gbps (reading a filled shared-memory
// segment mapped anew) and shm_release_gbps (unmapping and closing it, which
// frees its pages) into *p, left 0 when not positive.
void MeasurePageFaults(uint64_t bytes, int repeats, BandwidthPoint* p);

// Measures every size in settings.sizes, in order, calling `on_point` after
// each. Buffers: one device buffer, one cudaHostAlloc (pinned) buffer and
// one page-aligned malloc (pageable) buffer of the largest size, all written
// once before any timing so no copy pays for first-touch page faults.
// False with *error naming the CUDA call that failed.
bool MeasureBandwidth(const CudaApi& api, const BenchSettings& settings,
                      std::vector<BandwidthPoint>* points, std::string* error,
                      const std::function<void(const BandwidthPoint&)>& on_point = nullptr);

}  // namespace pinscope::cli
