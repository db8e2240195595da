// Placeholder until transparent pinning lands: records only whether the
// program pinned the memory itself.
#include "pinning.h"

#include "trace_fields.h"

namespace pinscope::shim {

PinTicket PinBeforeCopy(CopyRecord* r) {
  uint32_t host = r->direction == fields::kH2D ? r->src_kind
                  : r->direction == fields::kD2H ? r->dst_kind : 0;
  r->pin = host == fields::kPinned ? fields::kPinByProgram : fields::kPinNone;
  return {};
}
void PinAfterCopy(CopyRecord*, PinTicket*, int) {}
void PinReleaseRange(void*, size_t, const char*) {}
bool PinProgramUnregister(void*, int*) { return false; }
void PinOnFree(void*) {}
void PinOnUnmap(void*, size_t) {}
void PinForkPrepare() {}
void PinForkChild() {}

}  // namespace pinscope::shim
