// The recycle list (PINSCOPE_PIN_KEEP): freed malloc blocks pinscope
// registered whole, kept registered for the next allocation that fits.
// Kept blocks are released outside the lock (unregistered, then freed).
#pragma once

#include <cstdint>

namespace pinscope::shim::pinning {

// Free of p: keeps it registered on the recycle list if it is a private
// block pinscope registered whole and it fits the caps (evicting the
// oldest kept blocks for room). False: the caller unpins it as usual.
bool TryKeep(uintptr_t p);

// Releases kept blocks, oldest first: all of them (need == 0 and
// idle_before == 0), those idle since before idle_before, or as many as it
// takes for pinned + need to fit `budget`. `own_thread`: the caller's
// thread is pinscope's (the flusher), whose current device may be set to
// each block's.
void ReleaseKeptWhere(uint64_t need, uint64_t budget, uint64_t idle_before, const char* reason,
                      bool own_thread);

}  // namespace pinscope::shim::pinning
