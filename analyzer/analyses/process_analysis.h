// Per-process summary of a run, a replay consumer: identity and place in the
// process tree, life, copies, large allocations, shm traffic, and the notices
// the shim wrote (deduplicated).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "analyzer/replay/replay.h"

namespace pinscope {

// A kind of recording hook's count and own time (Counters.hook_kinds),
// indexed by trace::HookKind; all zero from shims before 2026-12-06.
struct HookKindTotals {
  uint64_t calls = 0;
  uint64_t ns = 0;
};
using HookKindArray = std::array<HookKindTotals, trace::HookKind_ARRAYSIZE>;

struct ProcessSummary {
  int index = 0;
  int parent_index = -1;
  std::vector<int> children;
  uint32_t pid = 0;
  uint32_t ppid = 0;
  trace::ProcessOrigin origin = trace::ORIGIN_UNKNOWN;
  bool helper = false;
  std::string command;
  std::string exe;
  std::string path;  // its trace file
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  bool has_exit = false;
  trace::ProcessExit::How exit_how = trace::ProcessExit::HOW_UNKNOWN;
  int32_t exit_status = 0;
  uint64_t dropped_events = 0;
  size_t threads = 0;
  // Copies.
  uint64_t copies = 0;
  uint64_t h2d_bytes = 0;
  uint64_t d2h_bytes = 0;
  uint64_t other_bytes = 0;
  uint64_t blocked_ns = 0;
  uint64_t pageable_copies = 0;
  // Large allocations recorded.
  uint64_t allocs = 0;
  uint64_t alloc_bytes = 0;
  // shm: segments created and mappings made. shm_created_bytes is filled by
  // the Report from ShmAnalysis (a size is known only once set).
  uint64_t shm_created = 0;
  uint64_t shm_created_bytes = 0;
  uint64_t shm_maps = 0;
  uint64_t shm_mapped_bytes = 0;
  // pinscope's own cost on the process's threads: call stacks taken and the
  // thread CPU time spent taking them (its last Counters packet; 0 without).
  uint64_t stacks_captured = 0;
  uint64_t stack_capture_ns = 0;
  // The rest of pinscope's own cost (Counters of shims since issue 16's
  // own-cost fields; 0 without): the recording hooks on the job's threads
  // (count, and their time besides the real call and pinning; since the
  // twentieth session allocations and shared-memory events too), and
  // the CPU time of pinscope's own threads.
  uint64_t hook_calls = 0;
  uint64_t hook_ns = 0;
  uint64_t own_threads_cpu_ns = 0;
  // Of the hooks' time: the driver queries classifying pointers (Counters
  // of shims since 2026-12-05; 0 without).
  uint64_t pointer_queries = 0;
  uint64_t pointer_query_ns = 0;
  // Of the hooks' time: CUPTI switched on and off on the program's threads
  // (its start, device-record windows' attach and detach; 0 before).
  uint64_t cupti_switches = 0;
  uint64_t cupti_switch_ns = 0;
  // hook_calls and hook_ns by kind.
  HookKindArray hook_kinds{};
  bool has_own_cost() const { return hook_calls > 0 || own_threads_cpu_ns > 0; }

  // "root", "worker" (forked), "exec", "helper".
  std::string Role() const;
};

struct NoticeRecord {
  uint32_t pid = 0;
  trace::Notice::Severity severity = trace::Notice::INFO;
  std::string code;
  std::string text;
  uint64_t count = 0;
  uint64_t first_time_ns = 0;
};

// pinscope's own-cost counters of one process over a span of its life: the
// difference of two of its Counters packets (cumulative totals, one a flush).
struct OwnCostSpan {
  uint64_t start_ns = 0, end_ns = 0;  // the two packets' times
  uint64_t hook_calls = 0, hook_ns = 0, stack_capture_ns = 0, own_threads_cpu_ns = 0;
  uint64_t pointer_queries = 0, pointer_query_ns = 0;
  uint64_t cupti_switches = 0, cupti_switch_ns = 0;
  HookKindArray hook_kinds{};
  uint64_t length_ns() const { return end_ns - start_ns; }
};

class ProcessAnalysis : public Analysis {
 public:
  void OnProcess(const ProcessState& process) override;
  void OnCopy(const CopyContext& copy) override;
  void OnAlloc(const Event& event, const LiveAlloc& alloc) override;
  void OnShm(const ShmContext& shm) override;
  void OnNotice(const Event& event, const trace::Notice& notice) override;
  void OnCounters(const Event& event, const trace::Counters& counters) override;
  void OnProcessEnd(const ProcessState& process) override;
  void Finish(const RunInfo& run) override;

  // By process index (replay order).
  const std::vector<ProcessSummary>& processes() const { return processes_; }
  // For the Report to add what other analyses know; nullptr if out of range.
  ProcessSummary* mutable_process(int index) {
    return index >= 0 && static_cast<size_t>(index) < processes_.size() ? &processes_[index]
                                                                        : nullptr;
  }
  // Shim notices, first occurrence order, plus one for dropped events.
  const std::vector<NoticeRecord>& notices() const { return notices_; }
  int root_index() const { return root_index_; }
  size_t helpers() const;
  // Call stacks taken and the thread time taking them, over all processes.
  uint64_t stacks_captured() const;
  uint64_t stack_capture_ns() const;
  // Summed over the processes (ProcessSummary's own-cost fields).
  uint64_t hook_calls() const;
  uint64_t hook_ns() const;
  uint64_t pointer_queries() const;
  uint64_t pointer_query_ns() const;
  uint64_t cupti_switches() const;
  uint64_t cupti_switch_ns() const;
  uint64_t own_threads_cpu_ns() const;
  HookKindArray hook_kinds() const;
  // True when a process's shim wrote the own-cost fields.
  bool has_own_cost() const;
  // The own-cost counters of a process (not a forked one: workers' are not
  // kept) between its first Counters packet at or after start_ns and its
  // last at or before end_ns; nullopt without two such packets.
  std::optional<OwnCostSpan> OwnCostBetween(int process_index, uint64_t start_ns,
                                            uint64_t end_ns) const;

 private:
  // A counter of ProcessSummary summed over the processes.
  uint64_t Sum(uint64_t ProcessSummary::*field) const;
  std::vector<ProcessSummary> processes_;
  // Every own-cost Counters packet of the processes not forked, in time
  // order (one a flush, about one a second), for OwnCostBetween.
  std::map<int, std::vector<OwnCostSpan>> counter_samples_;
  std::vector<NoticeRecord> notices_;
  std::map<std::tuple<uint32_t, std::string, std::string>, size_t> notice_index_;
  int root_index_ = -1;
};

}  // namespace pinscope
