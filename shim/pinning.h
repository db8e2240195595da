// Transparent pinning (PINSCOPE_PIN): large pageable host buffers that the
// program copies to or from the GPU get registered with cudaHostRegister so
// the copy runs at DMA speed, while the copy keeps pageable semantics (the
// call returns only once the host side may be reused). docs/pinning.md.
#pragma once

#include <cstddef>
#include <cstdint>

#include "recorder.h"

namespace pinscope::shim {

// What PinBeforeCopy decided, handed to PinAfterCopy.
struct PinTicket {
  bool wait_after = false;  // synchronize so the copy keeps pageable semantics
  uint64_t stream = 0;
  uint64_t block = 0;       // registry handle of the pinned block, 0 if none
};

// Called before the real copy with the classified record; may register the
// host buffer, and sets r->pin (fields::PinOutcome) and r->src_kind/dst_kind
// stay as the program's memory was (pageable).
PinTicket PinBeforeCopy(CopyRecord* r);
// Called after the real copy returned `rc` (a cudaError_t).
void PinAfterCopy(CopyRecord* r, PinTicket* t, int rc);

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
// is pinned (one relaxed load).
void PinOnFree(void* p, const char* reason);
void PinOnUnmap(void* p, size_t n);

// True if [p, p+n) overlaps memory pinscope pinned (used by hooks that do
// not go through PinBeforeCopy, e.g. cudaMemcpyBatchAsync, to keep
// pageable semantics by synchronizing after the call).
bool PinOwnsRange(uintptr_t p, size_t n);
// Keeps pageable semantics after a call that may have used pinscope's
// pinned memory asynchronously: waits for `stream` (PINSCOPE_PIN=1 only).
void PinWaitStream(uint64_t stream);

// The host buffer (malloc block or shared-memory mapping) containing p, as
// known to the host-memory registry; provided by block_registry.cc.
struct HostBuffer {
  uintptr_t base = 0;
  size_t size = 0;
  bool shm = false;       // a MAP_SHARED mapping (fork does not copy it)
  bool writable = true;   // mapped with PROT_WRITE
};
bool FindHostBuffer(uintptr_t p, HostBuffer* out);

// Bytes pinscope holds pinned now.
uint64_t PinnedBytes();

// fork(): prepare unpins idle blocks so fork does not copy pinned pages;
// the child forgets every block (they belong to the parent's CUDA context).
void PinForkPrepare();
void PinForkChild();

}  // namespace pinscope::shim
