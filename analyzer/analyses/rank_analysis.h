// What one rank's processes say about the rank as a whole, for the report
// of a distributed job (docs/report.md, "Ranks"): the device its copies go
// to, and the time its GPU spends in NCCL kernels (the collectives, which
// on the GPU include the wait for the slowest rank to arrive). A consumer
// of a replay of that rank's files only (analyzer/report/job_ranks.cc).
//
// Memory: the NCCL kernels' intervals of the replay's root, at most
// kMaxKept; the per-device byte counts.
#pragma once

#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "analyzer/replay/replay.h"

namespace pinscope {

class RankAnalysis : public Analysis {
 public:
  void OnProcess(const ProcessState& process) override;
  void OnCopy(const CopyContext& copy) override;
  void OnDevice(const Event& event, const trace::DeviceActivity& activity) override;

  // The device the rank drives: the device side of most of its copies'
  // bytes (host<->device, every process of the rank); -1 with no copy.
  int device() const;
  // NCCL kernel records of the rank's root process.
  uint64_t nccl_kernels() const { return nccl_kernels_; }
  // The time in [start_ns, end_ns) covered by at least one NCCL kernel.
  uint64_t NcclBusyIn(uint64_t start_ns, uint64_t end_ns) const;

  static constexpr size_t kMaxKept = 1 << 20;
  // True for a kernel name NCCL launches ("ncclKernel_AllReduce_...",
  // "ncclDevKernel_...", in any case).
  static bool IsNcclKernel(const std::string& name);

 private:
  int root_index_ = -1;
  std::map<int, uint64_t> device_bytes_;
  uint64_t nccl_kernels_ = 0;
  std::vector<std::pair<uint64_t, uint64_t>> nccl_;  // (start, end), as recorded
};

}  // namespace pinscope
