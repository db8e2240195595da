// Device records in windows (CuptiState::windows, PINSCOPE_CUPTI_WINDOW_MS and
// PINSCOPE_CUPTI_PERIOD_S; docs/device-activity.md, "Windows"): CUPTI attached
// for a window, then detached with cuptiFinalize - the only way found to take
// its cost off every kernel launch (issue 16) - and attached again a period
// after the window began. The flusher decides (TickWindowsLocked); a program
// thread switches (ServeWindow, from CuptiAfterCall right after a hooked CUDA
// call returned, as NVIDIA documents for cuptiFinalize).
#include <cupti_activity.h>
#include <pthread.h>
#include <stdio.h>

#include <atomic>

#include "shim/base/clock.h"
#include "shim/base/config.h"
#include "shim/base/guard.h"
#include "shim/device/cupti.h"
#include "shim/device/cupti_state.h"
#include "shim/record/recorder.h"
#include "shim/record/trace_fields.h"

namespace pinscope::shim::cupti_internal {

std::atomic<int> g_window_request{0};

namespace {

enum Request : int { kNone = 0, kDetach = 1, kAttach = 2 };

uint64_t WindowNs() { return uint64_t{GetConfig().cupti_window_ms} * 1000000; }
uint64_t PeriodNs() { return uint64_t{GetConfig().cupti_period_s} * 1000000000; }
bool Kernels() { return GetConfig().cupti_kernels != KernelRecording::kOff; }

// Ends the window: what CUPTI holds is flushed into the trace, then CUPTI is
// finalized. A copy still in flight loses its record (never waited for: the
// program's streams are not touched).
void DetachLocked() {
  CuptiState& s = Cupti();
  g_pushing.store(false);
  MeasureOffset();
  DisableOurKinds();
  s.api.FlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  const uint64_t now = MonoNs();
  if (s.api.Finalize() != CUPTI_SUCCESS) {
    // Still attached, kinds off: record nothing more rather than pay again.
    s.windows.on = false;
    s.state.store(kAside);
    SayUnavailable("cuptiFinalize failed at the end of a device-record window; no device "
                   "records from here on (PINSCOPE_CUPTI_WINDOW_MS=0 keeps CUPTI attached)");
    return;
  }
  s.windows.attached = false;
  const uint64_t period = PeriodNs();
  const uint64_t gap = period ? s.windows.since_ns + period - now : 0;
  WriteRecording(false, "detached", 0, period ? (gap > period ? 0 : gap) : 0, now, true);
}

// Begins a window: callbacks registered again (finalize forgot them), the
// kinds enabled, the clock offset measured anew.
void AttachLocked() {
  CuptiState& s = Cupti();
  CUptiResult rc = s.api.RegisterCallbacks(BufferRequested, BufferCompleted);
  char why[300];
  if (rc != CUPTI_SUCCESS) {
    snprintf(why, sizeof why,
             "cuptiActivityRegisterCallbacks failed at the start of a device-record window: %s "
             "(%d); no device records from here on",
             ResultText(rc), static_cast<int>(rc));
    s.windows.on = false;
    s.state.store(kAside);
    SayUnavailable(why);
    return;
  }
  if (!EnableOurKindsLocked(Kernels(), why, sizeof why)) {
    s.windows.on = false;
    s.state.store(kAside);
    SayUnavailable(why);
    return;
  }
  MeasureOffset();
  const uint64_t now = MonoNs();
  s.windows.attached = true;
  s.windows.since_ns = now;
  ++s.windows.count;
  s.kernels.on = Kernels();
  g_pushing.store(true);
  WriteRecording(s.kernels.on, "attached", 0, WindowNs(), now);
}

}  // namespace

void StartWindowsLocked(bool kernels) {
  const Config& cfg = GetConfig();
  CuptiState& s = Cupti();
  // PINSCOPE_CUPTI_KERNELS=all asks for every kernel: attached throughout.
  s.windows.on = cfg.cupti_window_ms > 0 && s.api.Finalize != nullptr &&
                 cfg.cupti_kernels != KernelRecording::kAll;
  s.windows.attached = true;
  s.windows.since_ns = MonoNs();
  s.windows.count = 1;
  if (s.windows.on) WriteRecording(kernels, "attached", 0, WindowNs(), s.windows.since_ns);
}

void TickWindowsLocked(uint64_t now) {
  CuptiState& s = Cupti();
  if (!s.windows.on || s.program_owns.load()) return;
  if (s.windows.attached) {
    if (now - s.windows.since_ns >= WindowNs()) g_window_request.store(kDetach);
  } else if (PeriodNs() && now - s.windows.since_ns >= PeriodNs()) {
    g_window_request.store(kAttach);
  }
}

bool DetachedLocked() { return Cupti().windows.on && !Cupti().windows.attached; }

void ServeWindow() {
  const int request = g_window_request.exchange(kNone);
  if (request == kNone) return;
  CuptiState& s = Cupti();
  HookScope scope;
  if (pthread_mutex_trylock(&s.mu) != 0) {  // the flusher is flushing: the next call
    int none = kNone;
    g_window_request.compare_exchange_strong(none, request);
    return;
  }
  // The program took CUPTI meanwhile (torch.profiler): never finalize its session.
  if (s.state.load() == kActive && s.windows.on && !s.program_owns.load()) {
    if (request == kDetach && s.windows.attached) DetachLocked();
    if (request == kAttach && !s.windows.attached) AttachLocked();
  }
  pthread_mutex_unlock(&s.mu);
}

}  // namespace pinscope::shim::cupti_internal
