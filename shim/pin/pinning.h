// Transparent pinning (PINSCOPE_PIN): large pageable host buffers that the
// program copies to or from the GPU get registered with cudaHostRegister so
// the copy runs at DMA speed, while the copy keeps pageable semantics (the
// call returns only once the host side may be reused). docs/pinning.md.
//
// Contract: thread-safe; never allocates through malloc; never holds its
// lock across a CUDA call; never calls CUDA from a pthread_atfork handler
// (fork is prepared by the fork() hook, PinBeforeFork).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "shim/memory/block_registry.h"
#include "shim/record/recorder.h"

namespace pinscope::shim {

// What PinBeforeCopy decided, handed to PinAfterCopy.
struct PinTicket {
  bool wait_after = false;  // synchronize so the copy keeps pageable semantics
  uint64_t stream = 0;
  uint64_t block = 0;  // 1 + slot of the pinned block held in use, 0 if none
};

// Called before the real copy with the classified record; may register the
// host buffer. Sets r->pin (fields::PinOutcome), and reports memory that
// pinscope pinned as the program's kind (PAGEABLE) in r->src_kind/dst_kind.
// A block in the ticket stays registered until PinAfterCopy.
PinTicket PinBeforeCopy(CopyCall* r);
// Called after the real copy returned `rc` (a cudaError_t): waits for the
// stream (PINSCOPE_PIN=1) or records the block's completion event (async).
void PinAfterCopy(CopyCall* r, PinTicket* t, int rc);

// cudaMemcpyBatchAsync: the blocks a batch touches are held in use across
// the call like a single copy's (up to kMax; more makes the batch wait).
struct PinBatchTicket {
  static constexpr int kMax = 16;
  int n = 0;
  int slot[kMax];
  uintptr_t base[kMax];
  size_t size[kMax];
  bool wait = false;  // synchronize the stream after the call
  uint64_t stream = 0;
};
void PinBeforeBatch(void* const* dsts, const void* const* srcs, const size_t* sizes, size_t count,
                    uint64_t stream, PinBatchTicket* t);
void PinAfterBatch(PinBatchTicket* t, int rc);
// Sets the pin outcome and the host side's kind of one recorded element.
void PinNoteBatchCopy(const PinBatchTicket* t, CopyCall* r);

// True when pinscope may hold pinned memory now (one relaxed load): a copy
// hook must then go through PinBeforeCopy even while the recorder is
// passive, or a pinned buffer would be copied asynchronously.
bool PinMayOwn();

// The program is about to register [p, p+n) itself: pinscope drops its own
// registrations overlapping it so the program's call succeeds.
void PinReleaseRange(void* p, size_t n, const char* reason);
// The program unregisters p. If p is a range pinscope registered (so the
// program never did), answer as CUDA would for unregistered memory and
// return true; false: forward to CUDA.
bool PinProgramUnregister(void* p, int* rc);

// Allocator and mapping events (called from the malloc/mmap hooks, outside
// any lock those hooks hold): a block going away must be unpinned first.
// `reason` is recorded ("free", "realloc", "munmap"). Cheap when nothing
// is pinned (one relaxed load). Waits for copies in flight on the block.
// With may_keep (a plain free of a block this process recorded), a malloc
// block pinscope registered whole may be kept registered for reuse instead
// (the recycle list, PINSCOPE_PIN_KEEP): then it returns true and the
// caller must NOT hand the memory back to the allocator. It also returns
// true, whatever may_keep, when CUDA refused to unregister the block: the
// driver still holds it registered, so the memory stays allocated.
bool PinOnFree(void* p, const char* reason, bool may_keep = false);
void PinOnUnmap(void* p, size_t n);

// Pin-ahead (PINSCOPE_PIN_AHEAD): the mmap hook reports every new MAP_SHARED
// shared-memory mapping of the program's; if its size is one this process
// already copied from a registered shm buffer, pinscope's pin-ahead thread
// registers it now, so its first copy finds it pinned. One relaxed load
// until a copy has taught a size; no CUDA call here.
void PinAheadOnMap(void* p, size_t n, bool writable);
// Process exit: the pin-ahead thread starts no new CUDA call; one under
// way is waited for (bounded).
void PinAheadStop();

// The recycle list: freed blocks pinscope keeps registered (at most
// kMaxKept, PINSCOPE_PIN_KEEP bytes). PinHasKept is the allocation hooks'
// filter (one relaxed load); PinTakeKept hands out a kept block whose
// registered size lies in [n, n + n/8] and whose address satisfies
// `alignment` (0: the allocator's default), now pinned again as a block of
// the cache; the caller records the allocation, then calls PinNoteReuse.
// Never from calloc (the memory is not zeroed) or realloc.
extern std::atomic<int> g_pin_kept __attribute__((visibility("hidden")));  // pin_keep.cc
inline bool PinHasKept() { return g_pin_kept.load(std::memory_order_relaxed) > 0; }
struct KeptTake {
  uintptr_t base = 0;
  size_t size = 0;  // bytes registered
  uint64_t pinned_after = 0;
};
bool PinTakeKept(size_t n, size_t alignment, KeptTake* out);
void PinNoteReuse(const KeptTake& k);
// Periodic work (the flusher thread of shim/process, never a signal handler):
// releases kept blocks idle for more than kKeepIdleNs.
void PinPeriodic();

// True if [p, p+n) overlaps memory pinscope pinned.
bool PinOwnsRange(uintptr_t p, size_t n);
// Keeps pageable semantics after a call that may have used pinscope's
// pinned memory asynchronously: waits for `stream`.
void PinWaitStream(uint64_t stream);

// Bytes pinscope holds pinned now.
uint64_t PinnedBytes();
// The budget in force (PINSCOPE_PIN_BUDGET or the derived default).
uint64_t PinBudget();

// fork(). The fork() hook calls PinBeforeFork before the real fork: it
// unpins private blocks (the kernel would copy their pages eagerly, facts
// section 5), releases every kept block (unregister + free) and refuses new
// registrations until PinAfterForkParent (in the parent) or PinForkChild.
// The pthread_atfork handlers (PinForkPrepare from shim/process's prepare,
// PinForkChild from its child handler) make no CUDA call: the child forgets
// every block and the recycle list (they belong to the parent's CUDA
// context) and never pins if the parent had used CUDA.
void PinBeforeFork();
void PinAfterForkParent();
void PinForkPrepare();
void PinForkChild();

}  // namespace pinscope::shim
