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
void PinOnFree(void* p);
void PinOnUnmap(void* p, size_t n);

// fork(): prepare unpins idle blocks so fork does not copy pinned pages;
// the child forgets every block (they belong to the parent's CUDA context).
void PinForkPrepare();
void PinForkChild();

}  // namespace pinscope::shim
