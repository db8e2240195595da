// The pool of registered slots for DataLoader worker batches
// (on with PINSCOPE_PIN unless PINSCOPE_PIN_POOL=0; docs/zero-copy-pool.md): the
// calls the shm hooks (shim/core) and the process layer make. The state
// machine is pool_table.h; this is the owner's side (slots made and
// registered on the pinscope-pin thread, the program's mmap of a slot
// answered with the owner's registered mapping, its munmap returning the
// slot, retirement) and the worker's (the swap of a new segment for a slot).
//
// Contract: PoolOn() is one relaxed load; with the switch off every entry
// point returns after it. No CUDA call in a hook: registrations happen on
// the pin thread, unregistrations where pinning makes them anyway (munmap,
// the flusher). A forked child never calls CUDA (it never owns the table).
// Nothing allocates through malloc; pinscope's own memfd, mmap, munmap,
// dup3 and close are raw system calls (not the program's, not recorded).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace pinscope::shim {

namespace pool {
struct Table;
}
extern std::atomic<pool::Table*> g_pool __attribute__((visibility("hidden")));
inline bool PoolOn() { return g_pool.load(std::memory_order_relaxed) != nullptr; }

// The library constructor of every image (root or exec'd; forked children
// share their parent's table): makes a new table, owned by this process,
// when PINSCOPE_PIN is on and PINSCOPE_PIN_POOL is not 0. Says once on stderr if
// it cannot (the pool stays off).
void PoolInit();
// True in the process that owns the table.
bool PoolOwner();

// --- the worker's side ----------------------------------------------------
// A child of the owner is about to unlink the batch segment it just made:
// fd (its only fd of the segment), mapped once at addr for len bytes,
// RW, MAP_SHARED, nothing written yet. Takes a free slot of len bytes, maps
// it over addr (MAP_FIXED), zeroes it and puts it under fd (dup3), so what
// the worker writes and sends is the slot. False (nothing changed) when no
// slot is free, this process may not take, or a step fails.
struct PoolTaken {
  int slot = -1;
  uint64_t device = 0, inode = 0;
};
bool PoolTake(void* addr, size_t len, int fd, PoolTaken* out);

// --- the owner's side -----------------------------------------------------
// The program maps an fd whose object is (device, inode). If that is a
// slot taken by a worker and not yet handed out, returns the owner's
// registered mapping of it (the caller does not map); with other
// arguments (not offset 0, RW, MAP_SHARED, the slot's length) or a second
// time, the slot escapes and this returns null (a real mapping). Any
// process: a slot mapped by a process other than its owner escapes.
void* PoolServeMap(uint64_t device, uint64_t inode, size_t len, int prot, int flags, off_t offset);
// The owner mapped a received batch segment (a /dev/shm object it did not
// open itself) of len bytes that is not a slot: a worker found no free
// slot. live_batches: such mappings of len bytes alive now, this one
// included. Asks the pin thread for slots until the pool (slots free,
// taken or being made) covers those batches and the taken slots, within
// the budget and the table.
void PoolNoteMiss(size_t len, int live_batches);

// A copy read `len` bytes by DMA from a received batch segment it
// registered (pinning's copy path, the first batch of a size): slots of
// that size are worth their registration now, and a miss that waited for
// this grows the pool. Until then the pool makes no registered slot of a
// size: with pin_memory=True the batches are read by torch's pin thread
// with a host copy, the program's DMA reads torch's own pinned blocks, and
// a slot's registration would buy nothing while it competes with torch's
// cudaHostAlloc for the driver (issue 15: 0.75x at 4 workers). Such
// batches get plain slots when the hook says the epoch pins its batches
// (PoolNoteLoader), else none.
void PoolNoteCopied(size_t len);

// pinscope's Python hook saw the owner's DataLoader begin an epoch with
// num_workers workers and prefetch_factor: its batches will be in flight
// num_workers x prefetch_factor + 2 at a time (those prefetched, the one the
// step uses, the one before it, still referenced). The epoch's first miss,
// of a size the pool has no slot of (its first batch, a full one), asks
// for that many slots at once instead of growing batch by batch: the
// workers make their first prefetch_factor x num_workers batches at once,
// before any could take a slot, so growing by misses would leave the
// whole second round of a short job to miss as well. No more slots than
// the epoch has batches (epoch_batches, 0: not known; a short validation
// loader). Without the hook the pool grows by misses alone.
// pin_memory: the epoch's batches go through torch's pin thread (a host
// copy into its own pinned blocks): slots for them are plain (made, mapped
// and recycled, never registered), which spares that thread the batch's
// fresh pages and its munmap.
void PoolNoteLoader(int num_workers, int prefetch_factor, uint64_t epoch_batches, bool pin_memory);

// munmap of [p, p+len) (or a MAP_FIXED mapping over it), before anything
// else. Returns true when the range is exactly a slot mapping the owner
// handed to the program and the slot stays in the pool: the caller records
// the unmap but neither unpins nor unmaps. False: go on as usual (a slot
// that escaped, or was unmapped in part, left the pool first and is an
// ordinary pinned mapping now; in a worker, the slot's mapping is done).
bool PoolOnUnmap(uintptr_t p, size_t len);

// The fds a process sends with SCM_RIGHTS: a slot's fd sent by the owner,
// or sent a second time by anyone, escapes (never reused).
void PoolOnSendFds(const int* fds, int n);

// The owner's program duplicates fd (dup, dup2, dup3, fcntl F_DUPFD*): if
// it is a slot's and the program holds that slot's mapping, the slot
// escapes (the copy may be sent on and mapped after the program's munmap).
void PoolOnDupFd(int fd);

// The program registers [p, p+n) itself: a slot mapping there leaves the
// pool first (pinning's PinReleaseRange then drops the registration).
void PoolDetachRange(uintptr_t p, size_t n);

// fork() (from PinBeforeFork): slots the owner's program holds, and a
// worker's taken slots still mapped, escape (the child inherits them).
void PoolBeforeFork();
// The forked child: forgets this process's takes (the parent's).
void PoolForkChild();
// The owner's flusher (PinPeriodic): slots of dead workers, escaped slots
// retired, free slots idle for kPoolIdleNs released.
void PoolPeriodic();
constexpr uint64_t kPoolIdleNs = 10'000'000'000;

// The pinscope-pin thread (pin_ahead.cc), lock held: makes the slots asked
// for. Returns true if it did any work.
bool PoolMakeRequestedLocked();
bool PoolRequestsLocked();

}  // namespace pinscope::shim
