// Exported hooks on the program's own CUPTI calls, so that pinscope steps
// aside before torch.profiler (Kineto) or another profiler takes CUPTI's one
// set of activity-buffer callbacks. Each hook lets device/cupti_program.cc react, then
// forwards to the real function unchanged. docs/device-activity.md.
// pinscope's own CUPTI calls go through its dlopen handle, never through
// these symbols; calls made while the hook guard is set (CUPTI calling its
// own exports) are forwarded without reacting.
#include <cupti_activity.h>
#include <dlfcn.h>

#include "shim/base/guard.h"
#include "shim/device/cupti.h"

#define PINSCOPE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using pinscope::shim::CuptiProgramEnables;
using pinscope::shim::CuptiProgramTakesOver;
using pinscope::shim::InHook;

void* Next(const char* name) { return dlsym(RTLD_NEXT, name); }

}  // namespace

PINSCOPE_EXPORT CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc req,
                                                           CUpti_BuffersCallbackCompleteFunc done) {
  using Fn = CUptiResult (*)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc);
  void* real = InHook() ? Next("cuptiActivityRegisterCallbacks")
                        : CuptiProgramTakesOver("cuptiActivityRegisterCallbacks");
  return real ? reinterpret_cast<Fn>(real)(req, done) : CUPTI_ERROR_NOT_INITIALIZED;
}

// Kineto registers its clock (TSC mode) just before its buffer callbacks:
// pinscope's records must be flushed before the clock changes under them.
PINSCOPE_EXPORT CUptiResult cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc fn) {
  using Fn = CUptiResult (*)(CUpti_TimestampCallbackFunc);
  void* real = InHook() ? Next("cuptiActivityRegisterTimestampCallback")
                        : CuptiProgramTakesOver("cuptiActivityRegisterTimestampCallback");
  return real ? reinterpret_cast<Fn>(real)(fn) : CUPTI_ERROR_NOT_INITIALIZED;
}

PINSCOPE_EXPORT CUptiResult cuptiFinalize() {
  using Fn = CUptiResult (*)();
  void* real = InHook() ? Next("cuptiFinalize") : CuptiProgramTakesOver("cuptiFinalize");
  return real ? reinterpret_cast<Fn>(real)() : CUPTI_ERROR_NOT_INITIALIZED;
}

PINSCOPE_EXPORT CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind) {
  using Fn = CUptiResult (*)(CUpti_ActivityKind);
  void* real = InHook() ? Next("cuptiActivityEnable")
                        : CuptiProgramEnables(static_cast<int>(kind), true);
  return real ? reinterpret_cast<Fn>(real)(kind) : CUPTI_ERROR_NOT_INITIALIZED;
}

PINSCOPE_EXPORT CUptiResult cuptiActivityDisable(CUpti_ActivityKind kind) {
  using Fn = CUptiResult (*)(CUpti_ActivityKind);
  void* real = InHook() ? Next("cuptiActivityDisable")
                        : CuptiProgramEnables(static_cast<int>(kind), false);
  return real ? reinterpret_cast<Fn>(real)(kind) : CUPTI_ERROR_NOT_INITIALIZED;
}
