// Input-pipeline facts of a run, a replay consumer for the bottleneck rules:
// the main loop's batch copies (the recurring largest H2D copies of the root's
// main thread, and the intervals between them), pinscope's pinning activity
// (PinEvents and the copies that ran pinned thanks to it), and device
// activity (CUPTI) through analyzer/device_activity.h. Memory: the root main
// thread's large H2D copies (capped) and one device tracker per process.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "analyzer/calibration.h"
#include "analyzer/device_activity.h"
#include "analyzer/replay.h"

namespace pinscope {

// The root main thread's batch copies: H2D copies of at least half the
// largest H2D copy it made, when at least kMinBatches recur.
struct BatchLoop {
  static constexpr size_t kMinBatches = 3;
  bool found = false;
  uint64_t batches = 0;          // batch copies
  uint64_t batch_bytes = 0;      // median bytes per batch copy
  uint64_t median_interval_ns = 0;  // median time between consecutive batch copy starts
  uint64_t median_copy_ns = 0;      // median host-blocked time of a batch copy
  uint64_t total_interval_ns = 0;   // first batch copy start to last batch copy start
  uint64_t total_copy_ns = 0;       // blocked time of the batch copies in that span
  std::vector<uint64_t> intervals_ns;  // each interval (for estimates)
  std::vector<uint64_t> copies_ns;     // the copy that opens each interval
};

struct PinStats {
  uint64_t events = 0;
  uint64_t registers = 0;
  uint64_t register_bytes = 0;
  uint64_t register_ns = 0;
  uint64_t shm_registers = 0, shm_bytes = 0;
  uint64_t alloc_registers = 0, alloc_bytes = 0;
  uint64_t other_registers = 0, other_bytes = 0;
  uint64_t register_failed = 0;
  uint64_t budget_full = 0;
  uint64_t recycles = 0, reuses = 0;
  uint64_t unregisters = 0;
  std::map<std::string, uint64_t> unpin_reasons;  // reason -> count
  uint64_t peak_pinned_bytes = 0;  // sum over processes of each one's peak
  // Copies that ran pinned because pinscope pinned them.
  uint64_t pinned_copies = 0;   // PIN_REGISTERED + PIN_CACHED
  uint64_t pinned_registered = 0, pinned_cached = 0;
  uint64_t pinned_copy_bytes = 0;
  uint64_t pinned_copy_blocked_ns = 0;
  uint64_t pinned_copy_at_pageable_ns = 0;  // same bytes at the calibrated pageable bandwidth
  uint64_t pinned_copy_at_pinned_ns = 0;    // ... at the calibrated pinned bandwidth
  uint64_t skipped_budget = 0;              // copies PIN_SKIPPED_BUDGET
};

// Device activity of one process that had DeviceActivity packets.
struct ProcessDevice {
  int process_index = 0;
  uint32_t pid = 0;
  uint64_t records = 0;
  device::ProcessDeviceResult result;
};

class InputAnalysis : public Analysis {
 public:
  explicit InputAnalysis(const Calibration& calibration);
  ~InputAnalysis() override;

  void OnProcess(const ProcessState& process) override;
  void OnCopy(const CopyContext& copy) override;
  void OnSync(const Event& event, const trace::SyncEvent& sync) override;
  void OnPin(const Event& event, const trace::PinEvent& pin) override;
  void OnDevice(const Event& event, const trace::DeviceActivity& activity) override;
  void OnCorrelation(const Event& event, const trace::ExternalCorrelation& correlation) override;
  void OnRecording(const Event& event, const trace::DeviceRecording& recording) override;
  void OnProcessEnd(const ProcessState& process) override;
  void Finish(const RunInfo& run) override;

  const BatchLoop& loop() const { return loop_; }
  const PinStats& pins() const { return pins_; }
  bool has_pins() const { return pins_.events > 0; }
  // Processes with device records, in end order.
  const std::vector<ProcessDevice>& devices() const { return devices_; }
  // The device figures the verdict uses: the busiest process's first device.
  const device::DeviceBusy* MainDevice() const;
  // Forked worker processes (origin FORK, not helpers) and UNREGISTER "fork".
  uint64_t workers() const { return workers_; }
  uint64_t fork_unpins() const { return fork_unpins_; }

 private:
  struct Copy {
    uint64_t start_ns, end_ns, bytes;
  };
  struct PerProcess {
    std::unique_ptr<device::ProcessDeviceAnalysis> device;
    uint64_t records = 0;
    uint64_t peak_pinned = 0;
    uint64_t last_advance_ns = 0;
    uint64_t last_batch_end_ns = 0;  // end of the last batch-sized H2D copy (root main thread)
  };
  // H2D copies this large on the root's main thread count as batches for
  // gap attribution (labels and indices are smaller).
  static constexpr uint64_t kMinBatchBytes = 1ull << 20;
  PerProcess& Process(int index);

  const Calibration& calibration_;
  int root_pid_ = -1;
  std::vector<Copy> root_copies_;  // root main thread H2D copies
  uint64_t largest_root_copy_ = 0;
  BatchLoop loop_;
  PinStats pins_;
  std::map<int, PerProcess> per_process_;
  std::vector<ProcessDevice> devices_;
  uint64_t workers_ = 0;
  uint64_t fork_unpins_ = 0;
};

}  // namespace pinscope
