// Internal to shim/core/shm_*.cc: how g_real (shm_core.h) gets the C
// library's functions, and the raw system calls behind them. Nothing here
// allocates through malloc or uses stdio (the contract of shm_core.h).
#pragma once

#include <sys/types.h>

#include <cstddef>

namespace pinscope::shim::shm {

// Fills g_real with dlsym(RTLD_NEXT) or the raw equivalents below; racing
// first calls store the same values. Idempotent.
void ResolveAll();

// "/dev/shm/<name>" for a shm_open name, as glibc builds it; 0 for a name
// shm_open rejects.
size_t ShmPath(const char* name, char* path, size_t cap);
// The raw system calls (InitShm's memfd probe).
int RawMemfd(const char* name, unsigned flags);
int RawClose(int fd);

// Anonymous memory from the real mmap for pinscope's own tables (`share`:
// MAP_PRIVATE or MAP_SHARED); null if the mmap failed.
void* MapAnon(size_t bytes, int share);

}  // namespace pinscope::shim::shm
