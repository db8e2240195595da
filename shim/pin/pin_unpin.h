// Unpinning: a block leaves the cache because its memory goes away (free,
// realloc, munmap), the program registers it itself, or fork. Waits for
// the copies that hold the block; the lock is dropped for every CUDA call.
#pragma once

#include <cstddef>
#include <cstdint>

#include "shim/pin/pin_state.h"

namespace pinscope::shim::pinning {

// Block i, which the caller marked kUnpinning, once no copy holds it and
// its async copies are done (its events are destroyed). Outside the lock.
Block WaitIdle(int i);

// Unpins every block overlapping [p, p+n) (n == 0: the block starting at
// p), or with only_private every private (non-shm) block. Returns once none
// is left: a block another thread is registering or unregistering right now
// is waited for (the caller may be about to give the memory back). Returns
// false if CUDA refused to unregister one of them: that block stays
// registered and in the table (UnpinBusy in pin_unpin.cc), and the memory
// must not go back to the allocator.
// Waits until no copy holds block i and its async copies are done (its
// events synchronized and dropped); the block stays registered. For a pool
// slot returned by the program's munmap (pin_pool.cc).
void WaitBlockQuiet(int i);

bool UnpinWhere(uintptr_t p, size_t n, bool only_private, const char* reason);

}  // namespace pinscope::shim::pinning
