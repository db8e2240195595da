// Synthetic runs with known contents for the export and diff tests: a
// two-process run that uses every kind of track the Perfetto export writes,
// and a before/after pair for `pinscope diff` (pageable -> pinned batches).
#pragma once

#include <cstdint>
#include <string>

namespace pinscope::testing {

// CLOCK_MONOTONIC start of the scenarios (1000 s).
inline constexpr uint64_t kScenarioT0 = 1000ull * 1000 * 1000 * 1000;
// One 128x3x224x224 fp32 batch.
inline constexpr uint64_t kBatchBytes = 77070336;

// Root pid 100 (main thread and a "pin_memory" thread) and forked worker
// 101: a pageable H2D copy with a Python call stack, a sync, a pinned D2H
// copy, a pinned H2D copy on the pin thread with pinscope's pin events, an
// shm batch made by the worker and mapped by the main process, and CUPTI
// device activity (a memcpy and a named kernel). Writes <dir>/<pid>.pstrace.
void WriteExportScenario(const std::string& dir);

// The same training loop before and after a fix: `batches` H2D copies of
// kBatchBytes by the main thread, one every `period_ns`, each taking
// `copy_ns` (pageable at 6 GB/s before, pinned after), plus one small D2H
// copy per batch. Writes <dir>/100.pstrace.
void WriteLoopRun(const std::string& dir, const std::string& run_id, bool pinned, int batches,
                  uint64_t period_ns);

}  // namespace pinscope::testing
