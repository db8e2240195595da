// Placeholder until call-stack capture lands: no stacks.
#include "stacks.h"

namespace pinscope::shim {

uint64_t CaptureStack(StackSite) { return 0; }
void StacksResetInChild() {}

}  // namespace pinscope::shim
