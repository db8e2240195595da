// The messages every CUPTI file may need: CUPTI's own error text and the
// once-per-process "cupti_unavailable". The state itself is Cupti()
// (cupti_state.h); nothing here runs on a hot path.
#include "shim/device/cupti_state.h"

#include "shim/base/log.h"
#include "shim/record/recorder.h"
#include "shim/record/trace_fields.h"

namespace pinscope::shim::cupti_internal {

const char* ResultText(CUptiResult rc) {
  const Api& api = Cupti().api;
  const char* s = nullptr;
  if (api.GetResultString && api.GetResultString(rc, &s) == CUPTI_SUCCESS && s) return s;
  return "unknown CUPTI error";
}

void SayUnavailable(const char* why) {
  LogOnce(&Cupti().said, "device activity (CUPTI) is not recorded: %s; host-side tracing goes on",
          why);
  RecordNotice(fields::kWarning, "cupti_unavailable", why);
}

}  // namespace pinscope::shim::cupti_internal
