// The guards of `pinscope tune`: a trial is never run when the recorded data
// says it will overflow /dev/shm, run more workers than the cores the job may
// use, exceed the memory left, or pin more than pinscope's pinning budget.
// Pure arithmetic over plain numbers; each refusal is a sentence with them.
//
// The estimates (docs/cli.md, "pinscope tune"):
//   shm     = batch x workers x prefetch_factor (the batches the workers
//             may hold made and queued, each an shm segment of the batch's size)
//   pinned  = batch x (workers x prefetch_factor + 2), with pin_memory=True
//             or PINSCOPE_PIN=1 (the queued batches, the one in use, the next)
//   memory  = the baseline's largest process (peak RSS) + workers x one
//             worker's recorded allocations + shm + pinned
//   cores   = workers, against min(affinity, whole cores of the cgroup quota)
#pragma once

#include <cstdint>
#include <string>

#include "analyzer/tune/tune_model.h"

namespace pinscope::tune {

// What a trial is checked against; 0 means unknown, and a guard with an
// unknown limit lets the trial run.
struct Limits {
  uint64_t shm_free_bytes = 0;    // /dev/shm free now (statvfs)
  uint32_t cores = 0;             // cores the job may use
  std::string cores_why;          // "affinity 16, cgroup quota none"
  uint64_t memory_bytes = 0;      // min(MemAvailable, cgroup memory.max - memory.current)
  uint64_t pin_budget_bytes = 0;  // pinscope's budget (PINSCOPE_PIN_BUDGET or RAM/4)
  uint64_t batch_bytes = 0;       // one batch (RunModel::batch_bytes)
  uint64_t main_bytes = 0;        // the baseline's largest process, peak RSS
  uint64_t worker_bytes = 0;      // one worker's own recorded allocations
};

uint64_t ShmNeed(const Limits& limits, const Settings& s);
uint64_t PinnedNeed(const Limits& limits, const Settings& s);
uint64_t MemoryNeed(const Limits& limits, const Settings& s);

// Empty when `s` may run; else why not, e.g. "/dev/shm: 12 workers x
// prefetch 2 x 147.0 MiB = 3.45 GiB, over the 1.00 GiB free". Checks in
// order: cores, /dev/shm, pinning budget, memory.
std::string Guard(const Limits& limits, const Settings& s);

// "16G", "512M", "1024" (bytes), binary multiples, as PINSCOPE_PIN_BUDGET
// takes them. False when not a size.
bool ParseSize(const std::string& text, uint64_t* bytes);

}  // namespace pinscope::tune
