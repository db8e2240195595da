// Internal to the pool (pin_pool.cc, the owner's side; pool_worker.cc, the
// worker's side): raw system calls and the worker's record of its takes.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

#include "shim/pin/pool_table.h"

namespace pinscope::shim::pool {

// pinscope's own calls, never the program's hooks (which would record them).
void* RawMmap(void* a, size_t l, int p, int fl, int fd, off_t o);
int RawMunmap(void* a, size_t l);
int RawClose(int fd);
// fd refers to the object (device, inode).
bool FdIs(int fd, uint64_t device, uint64_t inode);
// kill(pid, 0) does not say ESRCH.
bool Alive(uint32_t pid);

// The worker's side (pool_worker.cc): its munmap of [p, p+len) ends the
// mappings of the slots it took there (a partial one escapes the slot); a
// fork escapes the slots it still maps; a forked child forgets them.
void WorkerUnmap(Table& t, uintptr_t p, size_t len);
void WorkerBeforeFork(Table& t);
void WorkerForget();

}  // namespace pinscope::shim::pool
