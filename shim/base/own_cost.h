// pinscope's own cost in this process, written in each Counters packet and
// stated by the report ("pinscope's own cost", docs/report.md): the time
// the recording hooks spend on the job's threads - copies and waits besides
// the real CUDA call and pinning's own work; recorded allocations, frees and
// shared-memory events (their identification, registry work, stack and
// record, besides the real call and pinning's and the pool's work), the
// Python hook's DataLoader spans (their begin and end in the shim; the
// Python wrappers around them are not timed) - and the CPU time of
// pinscope's own threads.
// Call stacks have their own count (shim/stacks: StackCost); the malloc
// family's fast path is about 1 ns a call (docs/benchmarks.md) and is not
// timed per call, which would cost more than it measures.
//
// Relaxed atomics: copies and waits come at most thousands a second, and
// the own threads note their clock once a tick or a registration.
#pragma once

#include <cstdint>

#include "shim/base/clock.h"

namespace pinscope::shim {

// What a recording hook records; its time is counted by kind too
// (Counters.hook_kinds, values of trace.proto's HookKind), so that the
// report can say where the hooks' time went.
enum class HookKind : uint8_t {
  kCopy = 1,    // cudaMemcpy* (batched copies too)
  kSync = 2,    // the synchronize calls
  kAlloc = 3,   // recorded allocations and frees
  kShm = 4,     // shared-memory events
  kLoader = 5,  // the Python hook's DataLoader spans and marks
};
inline constexpr int kHookKinds = 6;  // index 0 unused

// One recording hook of `kind`, and its own time, ns (CLOCK_MONOTONIC on
// the calling thread).
void AddHookCost(HookKind kind, uint64_t ns);

// Times its scope as one recording hook's own time (AddHookCost): the
// recording part of an allocation, free, shared-memory event or DataLoader
// span, which holds no real call.
class HookCostTimer {
 public:
  explicit HookCostTimer(HookKind kind) : kind_(kind), t0_(MonoNs()) {}
  ~HookCostTimer() { AddHookCost(kind_, MonoNs() - t0_); }
  HookCostTimer(const HookCostTimer&) = delete;
  HookCostTimer& operator=(const HookCostTimer&) = delete;

 private:
  HookKind kind_;
  uint64_t t0_;
};

// Time of a recording hook of `kind` counted already (AddHookCost): a
// shared-memory hook's slow path around its records (shm::ShmOwnTime), a
// DataLoader span's begin.
void AddHookTime(HookKind kind, uint64_t ns);

// One driver query classifying a copy's pointer (a cache miss of
// ClassifyPointer, shim/cuda), ns: part of the hook's time.
void AddPointerQueryCost(uint64_t ns);

// CUPTI switched on or off on the program's thread (its start at the first
// CUDA call, a device-record window's attach or detach), ns: part of the
// hook's time.
void AddCuptiSwitchCost(uint64_t ns);

// pinscope's threads, each noting its own CPU time so far.
enum class OwnThread { kFlusher = 0, kPinAhead = 1, kCount = 2 };
// Called by that thread: stores its CLOCK_THREAD_CPUTIME_ID.
void NoteOwnThreadCpu(OwnThread which);

struct HookKindTotals {
  uint64_t calls = 0;
  uint64_t ns = 0;
};
struct OwnCost {
  uint64_t hook_calls = 0;  // the kinds' sums
  uint64_t hook_ns = 0;
  HookKindTotals kinds[kHookKinds];
  uint64_t threads_cpu_ns = 0;  // the own threads' CPU time, as last noted
  uint64_t pointer_queries = 0;
  uint64_t pointer_query_ns = 0;
  uint64_t cupti_switches = 0;
  uint64_t cupti_switch_ns = 0;
};
OwnCost GetOwnCost();

// fork(): the child has none of the parent's threads and made no call yet.
void OwnCostResetInChild();

}  // namespace pinscope::shim
