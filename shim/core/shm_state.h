// Internal to shim/core/shm_*.cc: the state those files share (one object,
// defined in shm_core.cc), an object's identity as the hooks see it, and
// the ShmEvent recorder. Nothing here allocates through malloc.
#pragma once

#include <unistd.h>

#include <cstdint>

#include "shim/core/shm_core.h"
#include "shim/memory/block_registry.h"
#include "shim/record/recorder.h"

namespace pinscope::shim::shm {

// Written by InitShm (the library constructor), read by the hooks' slow
// paths; constant-initialized, since a hook may run before any constructor.
struct ShmState {
  uint64_t shm_dev = 0;    // st_dev of /dev/shm when it is a tmpfs
  uint64_t memfd_dev = 0;  // st_dev of memfd files
  JobTable job;
};
extern ShmState g_state;
inline ShmState& State() { return g_state; }

// A vfork()ed child shares our memory: it must not edit our tables or write
// into our trace (it is about to exec).
inline bool InForeignChild() { return static_cast<uint32_t>(getpid()) != ProcessId(); }

struct Identity {
  uint64_t device = 0, inode = 0, size = 0;
  uint32_t flags = 0;
  bool pool = false;  // a pool slot (recorded as ShmEvent.pool)
  char name[ShmMapping::kNameCap] = {};
};

// Records one ShmEvent (`op`: fields::kShm*) if the recorder is on.
void Record(uint32_t op, const Identity& id, int fd, uint64_t size, uint64_t offset,
            uint64_t address, int flags, int prot, int error, uint64_t t0);

}  // namespace pinscope::shim::shm
