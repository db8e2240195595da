// The per-thread state of guard.h (initial-exec TLS: touching it never
// allocates).
#include "shim/base/guard.h"

namespace pinscope::shim {

PINSCOPE_TLS int t_hook_depth = 0;
PINSCOPE_TLS uint32_t t_tid = 0;

}  // namespace pinscope::shim
