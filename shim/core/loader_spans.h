// DataLoader spans from pinscope's Python hook (python/pinscope_hook.py):
// the hook brackets DataLoader.__next__, each fetcher's fetch (a batch being
// made) and the pin thread's pin_memory with Begin/End on the calling
// thread; the shim times them and reads the thread's usage at both ends, so
// the pipeline model sees each stage's service time and CPU time per batch.
//
// Contract: thread-safe (a per-thread stack of open spans, initial-exec TLS),
// no allocation; spans nest up to kMaxDepth deep (deeper ones are counted
// and dropped, never mismatched); a no-op while the recorder is passive.
#pragma once

#include <cstdint>

namespace pinscope::shim {

// A DataLoader iterator started an epoch with these settings.
struct LoaderSettings {
  uint64_t loader_id = 0;
  uint64_t epoch = 0;
  int32_t num_workers = 0, prefetch_factor = 0, batch_size = 0;
  bool pin_memory = false, persistent_workers = false, iterable = false;
  uint64_t dataset_length = 0;
  const char* site = nullptr;  // "file.py:LINE" of the DataLoader's construction
  // The job's own line that led there, when a library built the DataLoader
  // ("" when that is the site), and the framework that did
  // ("transformers", "lightning", "accelerate" or "").
  const char* user_site = nullptr;
  const char* framework = nullptr;
};
void LoaderIter(const LoaderSettings& settings);

inline constexpr int kMaxLoaderSpanDepth = 8;
// Opens a span on this thread. `whole`: the thread's whole usage at both
// ends (CPU time, the user/system split, page faults), for a span whose
// faults the pipeline model prices (a batch being made: FETCH); else its
// CPU time only (NEXT, RECV, PIN): one system call at each end, not two.
void LoaderSpanBegin(bool whole);
// Closes the innermost open span as an event of `kind` (fields::LoaderKind).
void LoaderSpanEnd(uint32_t kind, uint64_t loader_id, uint64_t index, int32_t worker_id,
                   uint32_t batch_samples);
// An instant (LOADER_END).
void LoaderMark(uint32_t kind, uint64_t loader_id, uint64_t index);

}  // namespace pinscope::shim
