// Where a recording hook's own time goes, phase by phase: a diagnostic
// build only (cmake -DPINSCOPE_PHASES=ON, docs/benchmarks.md "the hooks'
// phases"). Each PS_PHASE(kName) times the rest of its scope with two
// clock reads; at its exit a process writes one line a phase to stderr.
// In every other build PS_PHASE is nothing, and none of this is compiled.
#pragma once

#include <cstdint>

#ifdef PINSCOPE_PHASES
#include "shim/base/clock.h"

namespace pinscope::shim::phases {

enum Phase : int {
  kCopyOwn,       // the copy hook's own time (as AddHookCost counts it)
  kCopyCupti,     // NoteCuda, CUPTI's push, pop and after-call check
  kCopyClassify,  // the pointers' kinds (cache, driver query)
  kCopyStack,     // CaptureStack
  kCopyPin,       // PinBeforeCopy + PinAfterCopy
  kCopyUsage,     // ThreadUsageNow, twice
  kCopyRecord,    // RecordCopy
  kSyncOwn,
  kSyncUsage,
  kSyncRecord,
  kMapOwn,       // MmapSlow's own time (ShmOwnTime's)
  kMapIdentify,  // IdentifyShm: fstat, the fd table, readlink
  kMapTables,    // the registry's AddMapping and the job table's Add
  kMapRecord,    // Record of SHM_MAP: its stack, its packet
  kUnmapOwn,     // MunmapSlow's own time
  kUnmapForget,  // ForgetRange: lookups, pinning's check, removal, records
  kUnmapRecord,  // Record of SHM_UNMAP (inside kUnmapForget)
  kUnmapDone,    // Record of SHM_UNMAP_DONE
  kShmStack,     // CaptureStack in a shared-memory record
  kShmPacket,    // RecordShm: the packet
  kLoaderBegin,  // LoaderSpanBegin (usage)
  kLoaderEnd,    // LoaderSpanEnd (usage, record)
  kCount
};

void Add(Phase p, uint64_t ns);
// At exit (FinishProcess): one line a phase with calls on stderr.
void Dump();
void ResetInChild();

class Scope {
 public:
  explicit Scope(Phase p) : p_(p), t0_(MonoNs()) {}
  ~Scope() { Add(p_, MonoNs() - t0_); }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  Phase p_;
  uint64_t t0_;
};

}  // namespace pinscope::shim::phases

#define PS_PHASE_CAT2(a, b) a##b
#define PS_PHASE_CAT(a, b) PS_PHASE_CAT2(a, b)
#define PS_PHASE(name) \
  ::pinscope::shim::phases::Scope PS_PHASE_CAT(ps_phase_, __LINE__)(::pinscope::shim::phases::name)
#define PS_PHASE_DUMP() ::pinscope::shim::phases::Dump()
#define PS_PHASE_RESET_IN_CHILD() ::pinscope::shim::phases::ResetInChild()
#else
#define PS_PHASE(name) static_cast<void>(0)
#define PS_PHASE_DUMP() static_cast<void>(0)
#define PS_PHASE_RESET_IN_CHILD() static_cast<void>(0)
#endif
