// Stepping aside when the program takes CUPTI itself (torch.profiler or another
// profiler, through interpose_cupti.cc): pinscope flushes its records, undoes
// exactly what it enabled and never touches CUPTI again in this process.
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "shim/base/guard.h"
#include "shim/device/cupti.h"
#include "shim/device/cupti_state.h"

namespace pinscope::shim {

namespace cupti_internal {

// Disables what pinscope enabled and the program did not ask for itself.
void DisableOurKinds() {
  CuptiState& s = Cupti();
  uint64_t program = s.program_kinds.load();
  for (int i = 0; i < s.enabled_count; ++i) {
    int k = static_cast<int>(s.enabled[i]);
    if (k < 64 && (program >> k & 1)) continue;
    s.api.Disable(s.enabled[i]);
  }
  s.enabled_count = 0;
  // The program wants every runtime record: enabling the kind again undoes
  // pinscope's per-call restriction (the kind overrides the per-call setting).
  if (s.runtime_restricted && (program >> CUPTI_ACTIVITY_KIND_RUNTIME & 1))
    s.api.Enable(CUPTI_ACTIVITY_KIND_RUNTIME);
  s.runtime_restricted = false;
}

// Steps aside; mu held. Flushes pinscope's records first so nothing it
// collected lands in the program's buffers or is lost.
void StepAsideLocked(const char* why) {
  CuptiState& s = Cupti();
  if (s.state.load() != kActive) return;
  g_pushing.store(false);
  // Detached between two device-record windows: nothing to flush, nothing
  // enabled, and any CUPTI call would attach it again.
  if (!DetachedLocked()) {
    s.api.FlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    DisableOurKinds();
  }
  s.windows.on = false;
  s.state.store(kAside);
  SayUnavailable(why);
}

}  // namespace cupti_internal

using cupti_internal::Cupti;
using cupti_internal::CuptiState;
using cupti_internal::kActive;
using cupti_internal::StepAsideLocked;

// Both run on the program's thread, outside any pinscope hook. They take
// mu so that a start in progress on another thread completes first (and
// is then undone) rather than registering after the program did.
CuptiFn CuptiProgramTakesOver(const char* fn_name) {
  HookScope scope;
  CuptiState& s = Cupti();
  if (strcmp(fn_name, "cuptiActivityRegisterTimestampCallback") != 0) s.program_owns.store(true);
  pthread_mutex_lock(&s.mu);
  if (s.state.load() == kActive) {
    char why[256];
    snprintf(why, sizeof why,
             "the program called %s (torch.profiler or another profiler): pinscope leaves CUPTI "
             "to it from here on",
             fn_name);
    StepAsideLocked(why);
  }
  pthread_mutex_unlock(&s.mu);
  if (!strcmp(fn_name, "cuptiFinalize")) s.finalized.store(true);
  void* real = dlsym(RTLD_NEXT, fn_name);
  if (!real && s.handle) real = dlsym(s.handle, fn_name);
  return real;
}

CuptiFn CuptiProgramEnables(int kind, bool enable) {
  HookScope scope;
  CuptiState& s = Cupti();
  pthread_mutex_lock(&s.mu);
  if (kind >= 0 && kind < 64) {
    if (enable) {
      s.program_kinds.fetch_or(1ull << kind);
    } else {
      s.program_kinds.fetch_and(~(1ull << kind));
    }
  }
  if (!enable && s.state.load() == kActive) {
    bool ours = false;
    for (int i = 0; i < s.enabled_count; ++i) ours = ours || static_cast<int>(s.enabled[i]) == kind;
    if (ours) StepAsideLocked("the program disabled a CUPTI activity kind pinscope records");
  }
  pthread_mutex_unlock(&s.mu);
  const char* name = enable ? "cuptiActivityEnable" : "cuptiActivityDisable";
  void* real = dlsym(RTLD_NEXT, name);
  if (!real && s.handle) real = dlsym(s.handle, name);
  return real;
}

}  // namespace pinscope::shim
