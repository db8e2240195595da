// Input-pipeline facts of a run, a replay consumer for the bottleneck rules:
// the main loop's batch copies (the recurring largest H2D copies of the root's
// main thread, and the intervals between them), pinscope's pinning activity
// (PinEvents and the copies that ran pinned thanks to it), and device
// activity (CUPTI) through analyzer/analyses/device_activity.h. Memory: the root main
// thread's large H2D copies (batch_copies.h: exact up to 65,536, a bounded
// sample beyond) and one device tracker per process.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "analyzer/analyses/batch_copies.h"
#include "analyzer/analyses/device_activity.h"
#include "analyzer/analyses/gbps_memo.h"
#include "analyzer/read/calibration.h"
#include "analyzer/replay/replay.h"

namespace pinscope {

// DataLoader's pin-memory thread, as the trace shows it: a non-main thread
// of the root process that maps the workers' batch shm segments (it
// unpickles each batch, then copies it into pinned memory).
struct PinThread {
  uint32_t tid = 0;       // 0: none seen
  uint64_t shm_maps = 0;  // SHM_MAP calls of that thread
};

// Time the main threads spent waiting for the GPU inside copy and
// synchronize calls (rule sync_copies). Per call: a synchronize waits its
// whole host-blocked time; an H2D/D2H copy waits its blocked time minus its
// transfer (the joined CUPTI device time, else bytes at the calibrated
// pinned bandwidth; a pageable copy without device time is not assessed:
// its excess over the calibration may be slow staging, which the
// pageable_staging rule counts); both less kCallOverheadNs (the call's
// own cost, not a wait). A wait could overlap the host work after it, up to
// the next waiting call: saving = sum of min(wait, host time to the next
// waiting call) - an upper bound (the host work may need the value).
struct SyncSite {
  std::string site;       // innermost Python frame, else native frame; "" unknown
  bool via_copy = false;  // a sync without a stack, named by the copy just before it
  uint64_t calls = 0;     // waiting calls
  uint64_t copies = 0, syncs = 0;
  uint64_t d2h = 0, h2d = 0;
  uint64_t copy_bytes = 0;
  uint64_t wait_ns = 0, saving_ns = 0;
  std::vector<std::string> apis;  // SyncApi names, first seen first
};
struct SyncThread {
  int process_index = 0;
  uint32_t pid = 0, tid = 0;
  uint64_t span_ns = 0;  // first considered call's start to the last one's end
  uint64_t calls = 0;    // copies (H2D/D2H) and syncs considered
  uint64_t waiting_calls = 0;
  uint64_t wait_ns = 0, copy_wait_ns = 0, sync_wait_ns = 0;
  uint64_t saving_ns = 0;
  uint64_t host_ns = 0;  // span minus waits: the host's own time in the span
  uint64_t copies_joined = 0, copies_calibrated = 0;  // transfer time from CUPTI / calibration
  std::vector<SyncSite> sites;                        // most saving first
};
struct SyncWaits {
  static constexpr uint64_t kCallOverheadNs = 20000;  // 20 us
  std::vector<SyncThread> threads;                    // main threads with calls, most saving first
  uint64_t dropped_calls = 0;                         // past the memory cap, not assessed
};

struct PinStats {
  uint64_t events = 0;
  uint64_t registers = 0;
  uint64_t register_bytes = 0;
  uint64_t register_ns = 0;
  // Made ahead by pinscope's pin-ahead thread (reason "shm_ahead"), off the
  // copying thread: counted in registers/register_ns too.
  uint64_t ahead_registers = 0, ahead_register_ns = 0;
  uint64_t shm_registers = 0, shm_bytes = 0;
  uint64_t alloc_registers = 0, alloc_bytes = 0;
  // Slots of pinscope's pool (reason "pool"), registered before any batch.
  uint64_t pool_registers = 0, pool_bytes = 0;
  uint64_t other_registers = 0, other_bytes = 0;
  uint64_t register_failed = 0;
  uint64_t budget_full = 0;
  uint64_t recycles = 0, reuses = 0;
  uint64_t unregisters = 0;                       // successful ones only
  std::map<std::string, uint64_t> unpin_reasons;  // reason -> count, successful ones
  // UNREGISTERs CUDA refused (result != 0): the driver still holds the
  // memory registered, so they unpin nothing. `failed_unregister_errors`
  // counts them by CUDA error; `stayed_pinned_bytes` is what such blocks
  // held at their process's end (a later successful UNREGISTER of the same
  // block, e.g. reason "program_register", gives it back).
  uint64_t failed_unregisters = 0;
  std::map<int32_t, uint64_t> failed_unregister_errors;
  uint64_t stayed_pinned_bytes = 0;
  uint64_t peak_pinned_bytes = 0;  // sum over processes of each one's peak
  // Copies that ran pinned because pinscope pinned them.
  uint64_t pinned_copies = 0;  // PIN_REGISTERED + PIN_CACHED
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
  // `join`: how device records meet their host calls (kOrder: ignore the
  // trace's correlations, `pinscope report --join=order`).
  explicit InputAnalysis(const Calibration& calibration,
                         device::JoinMode join = device::JoinMode::kAuto);
  ~InputAnalysis() override;

  void OnProcess(const ProcessState& process) override;
  void OnCopy(const CopyContext& copy) override;
  void OnSync(const Event& event, const trace::SyncEvent& sync) override;
  void OnShm(const ShmContext& shm) override;
  void OnPin(const Event& event, const trace::PinEvent& pin) override;
  void OnDevice(const Event& event, const trace::DeviceActivity& activity) override;
  void OnCorrelation(const Event& event, const trace::ExternalCorrelation& correlation) override;
  void OnRecording(const Event& event, const trace::DeviceRecording& recording) override;
  void OnUtilization(const Event& event, const trace::GpuUtilization& utilization) override;
  void OnNotice(const Event& event, const trace::Notice& notice) override;
  void OnProcessEnd(const ProcessState& process) override;
  void Finish(const RunInfo& run) override;

  const BatchLoop& loop() const { return loop_; }
  const PinStats& pins() const { return pins_; }
  const PinThread& pin_thread() const { return pin_thread_; }
  const SyncWaits& sync_waits() const { return sync_; }
  bool has_pins() const { return pins_.events > 0; }
  // Processes with device records, in end order.
  const std::vector<ProcessDevice>& devices() const { return devices_; }
  // The device figures the verdict uses: the busiest device of the run, or
  // of the process `process_index` when given (nullptr: none recorded).
  const device::DeviceBusy* MainDevice(std::optional<int> process_index = std::nullopt) const;
  // Forked worker processes (origin FORK, not helpers) and UNREGISTER "fork".
  uint64_t workers() const { return workers_; }
  uint64_t fork_unpins() const { return fork_unpins_; }
  // The most main-thread calls SyncWaits held at once, not yet final: what
  // it keeps per call is bounded by the device join's horizon, not by the
  // run (tests/analyzer/pipeline/sync_waits_test.cc).
  uint64_t peak_wait_calls() const { return peak_wait_calls_; }

 private:
  using Copy = BatchCopies::Copy;
  // A main-thread copy or sync not yet final for SyncWaits: a device record
  // may still join it (its transfer time), or it is the last one seen.
  struct WaitCall {
    uint64_t start_ns, end_ns;
    uint64_t call_id;
    uint64_t transfer_ns;  // calibrated; replaced by the device time when joined
    uint64_t bytes;
    int32_t site;  // index into wait_sites_, -1 unknown
    uint8_t kind;  // 0 sync, 1 H2D, 2 D2H
    uint8_t api;   // SyncApi for syncs
    bool joined;
    bool pageable;  // host side pageable
    bool joinable;  // handed to the process's device analysis (a record may join it)
  };
  // One main thread's SyncWaits, streamed: calls wait in `calls` only until
  // no device record can join them any more (the device analysis gave up on
  // their call id: older than its join horizon at an Advance, or without a
  // device analysis at all), then fold into the sums. Memory: the calls of
  // the last join horizon (60 s) with CUPTI, one call without.
  struct WaitThread {
    int process_index = 0;
    uint32_t pid = 0, tid = 0;
    std::deque<WaitCall> calls;  // in order of start (the replay keeps a file's order)
    uint64_t front_seq = 0;      // sequence number of calls.front()
    std::unordered_map<uint64_t, uint64_t> by_call;  // joinable copies: call id -> first seq
    uint64_t cut_ns = 0;  // calls of a call id that all ended before this are final
    bool has_last = false;
    WaitCall last{};  // the call just before, final or not (names a sync without a stack)
    // Folded so far.
    SyncThread out;
    std::map<int32_t, SyncSite> sites;
    uint64_t first_start_ns = 0, last_end_ns = 0;
    // The last final call that waited: its saving needs the next one's start.
    bool has_waiting = false;
    WaitCall waiting{};
    uint64_t waiting_ns = 0;
  };

  struct PerProcess {
    std::unique_ptr<device::ProcessDeviceAnalysis> device;
    uint64_t records = 0;
    uint64_t peak_pinned = 0;
    // Blocks whose UNREGISTER failed and that no later one gave back:
    // address -> size.
    std::map<uint64_t, uint64_t> stuck_pins;
    uint64_t last_advance_ns = 0;
    uint64_t last_batch_end_ns = 0;  // end of the last batch-sized H2D copy (root main thread)
    int wait_thread = -1;            // index into wait_threads_
  };
  // H2D copies this large on the root's main thread count as batches for
  // gap attribution (labels and indices are smaller).
  static constexpr uint64_t kMinBatchBytes = 1ull << 20;
  PerProcess& Process(int index);
  std::unique_ptr<device::ProcessDeviceAnalysis> NewDevice() const;
  void JoinDevice(PerProcess& state);
  void AdvanceDevice(PerProcess& state, uint64_t now_ns);
  void FinishSyncWaits();
  // The main thread of `process` as a SyncWaits thread, added at first use.
  WaitThread& WaitThreadOf(PerProcess& state, const ProcessState& process);
  void AddWaitCall(WaitThread& thread, const WaitCall& call);
  // Folds the calls that are final (all of them with `all`) into the sums.
  void FoldFinal(WaitThread& thread, bool all);
  void Fold(WaitThread& thread, const WaitCall& call);
  void FoldWaiting(WaitThread& thread, uint64_t saving_ns);
  int32_t WaitSite(const ProcessState& process, uint64_t stack_id);

  const Calibration& calibration_;
  GbpsMemo gbps_;  // the per-copy lookups of OnCopy
  device::JoinMode join_;
  int root_pid_ = -1;
  BatchCopies root_copies_;         // root main thread H2D copies that may be batches
  uint64_t last_root_copy_ns_ = 0;  // start of the latest candidate batch copy
  // Root blocks registered ahead (REGISTER "shm_ahead") and kept blocks
  // handed to an allocation (REUSE), not yet copied since: base addresses.
  std::set<uint64_t> root_ahead_, root_reused_;
  BatchLoop loop_;
  PinStats pins_;
  std::map<int, PerProcess> per_process_;
  PerProcess* last_process_ = nullptr;
  int last_process_index_ = -1;
  std::vector<ProcessDevice> devices_;
  uint64_t workers_ = 0;
  uint64_t fork_unpins_ = 0;
  PinThread pin_thread_;
  std::map<uint32_t, uint64_t> root_shm_maps_;  // root non-main tid -> SHM_MAPs
  std::vector<WaitThread> wait_threads_;
  std::vector<std::string> wait_sites_;
  std::unordered_map<std::string, int32_t> wait_site_index_;
  uint64_t wait_calls_ = 0;       // calls in the threads' `calls`, at most kMaxWaitCalls
  uint64_t peak_wait_calls_ = 0;  // the most at once
  SyncWaits sync_;
};

}  // namespace pinscope
