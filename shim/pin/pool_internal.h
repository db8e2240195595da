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

// The pool's fds count against the program's RLIMIT_NOFILE: the owner holds
// one per slot (a worker one more for a moment, at a take). So that no job
// meets its fd limit sooner with the pool than without it, a slot is made
// only while at least FdMargin() fds stay free after it, and free slots are
// retired when fewer than half that are free (PyTorch's
// test_fd_limit_exceeded sets a limit of 100 and fills it: with the pool it
// failed otherwise, 4 runs in 6). FreeFds(): the soft limit minus the fds
// open now, counted in /proc/self/fd; UINT64_MAX for a limit of 65536 or
// more (not counted: a job that opens tens of thousands of files meets its
// limit from its own), 0 when it cannot be told.
uint64_t FreeFds();
uint64_t FdMargin();

// The owner asks the pin thread for slots of len bytes until the pool
// covers the batches of that size in flight: live_batches (mapped by the
// program, not slots), the taken slots, a worker's need, and the hook's
// hint at an epoch's first batch (pool.h, PoolNoteMiss, PoolNoteLoader).
void Grow(size_t len, int live_batches);

// The worker's side (pool_worker.cc): its munmap of [p, p+len) ends the
// mappings of the slots it took there (a partial one escapes the slot); a
// fork escapes the slots it still maps; a forked child forgets them.
void WorkerUnmap(Table& t, uintptr_t p, size_t len);
void WorkerBeforeFork(Table& t);
void WorkerForget();

}  // namespace pinscope::shim::pool
