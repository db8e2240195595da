// Device records in windows (CuptiState::windows, PINSCOPE_CUPTI_WINDOW_MS,
// PINSCOPE_CUPTI_WINDOW_CALLS, PINSCOPE_CUPTI_START and
// PINSCOPE_CUPTI_PERIOD_S; docs/device-activity.md, "Windows"): CUPTI attached
// for a window, then detached with cuptiFinalize - the only way found to take
// its cost off every kernel launch (issue 16) - and attached again a period
// after the window began. The flusher decides (TickWindowsLocked); a program
// thread switches (ServeWindow, from CuptiAfterCall right after a hooked CUDA
// call returned, as NVIDIA documents for cuptiFinalize).
#include <cupti_activity.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>

#include <atomic>

#include "shim/base/clock.h"
#include "shim/base/config.h"
#include "shim/base/guard.h"
#include "shim/base/own_cost.h"
#include "shim/device/cupti.h"
#include "shim/device/cupti_state.h"
#include "shim/record/recorder.h"
#include "shim/record/trace_fields.h"

namespace pinscope::shim::cupti_internal {

std::atomic<int> g_window_request{0};
std::atomic<bool> g_counting{false};
std::atomic<uint64_t> g_hooked_calls{0};
std::atomic<uint64_t> g_window_calls_due{UINT64_MAX};

namespace {

enum Request : int { kNone = 0, kDetach = 1, kAttach = 2 };

// Flush periods with hooked calls before the first window (the loop shows).
constexpr uint32_t kLoopTicks = 3;
// The longest window, whatever its calls: a window waits for
// PINSCOPE_CUPTI_WINDOW_CALLS calls, so that it holds some of the loop's
// copies, but a job with few calls must not stay attached for long.
constexpr uint64_t kMaxWindowNs = 2000000000;

uint64_t WindowNs() { return uint64_t{GetConfig().cupti_window_ms} * 1000000; }
uint64_t MaxWindowNs() { return WindowNs() > kMaxWindowNs ? WindowNs() : kMaxWindowNs; }
uint64_t PeriodNs() { return uint64_t{GetConfig().cupti_period_s} * 1000000000; }
bool Kernels() { return GetConfig().cupti_kernels != KernelRecording::kOff; }
std::atomic<uint64_t> g_window_since_ns{0};  // the open window's start, for WindowDueSlow

// A window has begun at `now`: from its PINSCOPE_CUPTI_WINDOW_CALLS-th call
// on, each hooked call checks whether it has lasted long enough.
void OpenWindow(uint64_t now) {
  CuptiState& s = Cupti();
  s.windows.attached = true;
  s.windows.since_ns = now;
  g_counting.store(true, std::memory_order_relaxed);
  s.windows.calls_at_start = g_hooked_calls.load(std::memory_order_relaxed);
  g_window_since_ns.store(now, std::memory_order_relaxed);
  g_window_calls_due.store(s.windows.calls_at_start + GetConfig().cupti_window_calls,
                           std::memory_order_relaxed);
}

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
  g_window_calls_due.store(UINT64_MAX, std::memory_order_relaxed);
  // Between windows nothing is counted; before the first, the loop is looked for.
  g_counting.store(s.windows.awaiting_loop, std::memory_order_relaxed);
  if (s.windows.awaiting_loop) {  // the start's check: no window yet
    WriteRecording(false, "awaiting_loop", 0, 0, now, true);
    return;
  }
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
  OpenWindow(now);
  s.windows.awaiting_loop = false;
  ++s.windows.count;
  s.kernels.on = Kernels();
  g_pushing.store(true);
  WriteRecording(s.kernels.on, "attached", 0, WindowNs(), now);
}

}  // namespace

bool WindowsWanted() {
  const Config& cfg = GetConfig();
  // PINSCOPE_CUPTI_KERNELS=all asks for every kernel: attached throughout.
  return cfg.cupti_window_ms > 0 && Cupti().api.Finalize != nullptr &&
         cfg.cupti_kernels != KernelRecording::kAll;
}

void StartWindowsLocked(bool kernels) {
  CuptiState& s = Cupti();
  s.windows.on = WindowsWanted();
  s.windows.count = 1;
  if (!s.windows.on) return;
  OpenWindow(MonoNs());
  WriteRecording(kernels, "attached", 0, WindowNs(), s.windows.since_ns);
}

void StartWindowsAwaitingLoopLocked(bool kernels) {
  CuptiState& s = Cupti();
  s.windows.on = true;
  s.windows.awaiting_loop = true;
  s.windows.count = 0;
  s.windows.active_ticks = 0;
  s.windows.calls_at_tick = 0;  // the call that started CUPTI counts at the first tick
  // Attached and checked (a CUPTI that cannot record says so now, once),
  // then detached right after the call that started it returns.
  OpenWindow(MonoNs());
  WriteRecording(kernels, "check", 0, 0, s.windows.since_ns);
  g_window_request.store(kDetach);
}

void TickWindowsLocked(uint64_t now) {
  CuptiState& s = Cupti();
  if (!s.windows.on || s.program_owns.load()) return;
  if (s.windows.attached && s.windows.awaiting_loop) return;  // the check: its end is asked
  if (s.windows.attached) {
    // Past its length and calls (WindowDueSlow ends it at that call), or
    // past the longest a window may last.
    const uint64_t length = now - s.windows.since_ns;
    const uint64_t calls =
        g_hooked_calls.load(std::memory_order_relaxed) - s.windows.calls_at_start;
    if (length >= MaxWindowNs() ||
        (length >= WindowNs() && calls >= GetConfig().cupti_window_calls)) {
      g_window_request.store(kDetach);
    }
  } else if (s.windows.awaiting_loop) {  // detached since the start's check
    const uint64_t calls = g_hooked_calls.load(std::memory_order_relaxed);
    if (calls != s.windows.calls_at_tick) ++s.windows.active_ticks;
    s.windows.calls_at_tick = calls;
    if (s.windows.active_ticks >= kLoopTicks) g_window_request.store(kAttach);
  } else if (PeriodNs() && now - s.windows.since_ns >= PeriodNs()) {
    g_window_request.store(kAttach);
  }
}

void WindowDueSlow() {
  const uint64_t since = g_window_since_ns.load(std::memory_order_relaxed);
  if (MonoNs() - since < WindowNs()) return;
  // Once: the window's end is asked; the switch runs here (ServeWindow).
  g_window_calls_due.store(UINT64_MAX, std::memory_order_relaxed);
  int none = kNone;
  g_window_request.compare_exchange_strong(none, kDetach);
  ServeWindow();
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
    const uint64_t t0 = MonoNs();
    bool switched = false;
    if (request == kDetach && s.windows.attached) {
      DetachLocked();
      switched = true;
    }
    if (request == kAttach && !s.windows.attached) {
      AttachLocked();
      switched = true;
    }
    // On the program's thread, inside its hook: own_cost.h.
    if (switched) AddCuptiSwitchCost(MonoNs() - t0);
  }
  pthread_mutex_unlock(&s.mu);
}

bool EndWindowNow() {
  CuptiState& s = Cupti();
  HookScope scope;
  // The flusher holds the lock for a flush at most: 100 tries 1 ms apart.
  for (int tries = 0; tries < 100; ++tries) {
    if (pthread_mutex_trylock(&s.mu) == 0) {
      if (s.state.load() == kActive && s.windows.on && s.windows.attached &&
          !s.program_owns.load()) {
        const uint64_t t0 = MonoNs();
        DetachLocked();
        AddCuptiSwitchCost(MonoNs() - t0);
      }
      pthread_mutex_unlock(&s.mu);
      return true;
    }
    timespec ts{0, 1000 * 1000};
    nanosleep(&ts, nullptr);
  }
  return false;
}

}  // namespace pinscope::shim::cupti_internal

namespace pinscope::shim {
bool CuptiEndWindow() { return cupti_internal::EndWindowNow(); }
}  // namespace pinscope::shim
