// Internal to shim/core/shm_*.cc: the table of tracked fds (g_fds,
// shm_core.h) and what an fd refers to. Signal-safe readers; no malloc.
#pragma once

#include "shim/core/shm_core.h"
#include "shim/core/shm_state.h"

namespace pinscope::shim::shm {

// The fd table, mapped on first use; null if the mmap failed.
FdEntry* FdTable();

// Is fd a shared-memory object? Tracked fds are checked against their
// recorded identity (dup2 may have put another file under the number);
// others, such as an fd received with SCM_RIGHTS, by their filesystem.
bool IdentifyShm(int fd, Identity* id);

// fd now refers to another object (the pool's swap, shm_pool.cc): its
// tracked entry says so.
void RetrackFd(int fd, const Identity& id);

}  // namespace pinscope::shim::shm
