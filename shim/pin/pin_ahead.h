// Pin-ahead (PINSCOPE_PIN_AHEAD): new shm mappings of a learned batch size
// are registered on pinscope's pin-ahead thread before their first copy.
// The mmap/munmap hooks only queue or cancel under the lock: no CUDA call.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pinscope::shim::pinning {

// A copy registered an shm buffer of `size` bytes: later mappings of that
// size are registered ahead. Starts the thread the first time. Called
// from a copy hook (no lock held).
void AheadLearn(uint64_t size);

// Marks queued mappings overlapping [p, p+n) dead (they are being unmapped).
// Lock held.
void AheadCancelLocked(uintptr_t p, size_t n);

// A block registered ahead is being unmapped, used by a copy or not.
// Returns true when that drops its size from pin-ahead. Lock held.
bool AheadOutcomeLocked(uint64_t size, bool used);

// Until the pin-ahead thread is out of its CUDA call (at most 2 s).
void WaitAheadOutOfCuda();

// Starts the pinscope-pin thread once per process (pin-ahead or the pool);
// true once it runs.
bool StartPinThread();

}  // namespace pinscope::shim::pinning
