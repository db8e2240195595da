// CUPTI's lifecycle: CuptiStart (once, inside the first CUDA hook), the
// flusher's CuptiFlushPeriodic and CuptiFinish at exit, serialized by mu.
// CUPTI's functions are all resolved at run time (cupti_load.cc).
#include <cupti_activity.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "shim/base/clock.h"
#include "shim/base/config.h"
#include "shim/base/guard.h"
#include "shim/cuda/real_runtime.h"
#include "shim/device/cupti.h"
#include "shim/device/cupti_state.h"
#include "shim/record/recorder.h"
#include "shim/record/trace_fields.h"

namespace pinscope::shim {

namespace cupti_internal {
namespace {

namespace f = fields;

bool EnableKind(CUpti_ActivityKind kind, bool required, CUptiResult* rc) {
  CuptiState& s = Cupti();
  *rc = s.api.Enable(kind);
  if (*rc == CUPTI_SUCCESS) {
    s.enabled[s.enabled_count++] = kind;
    return true;
  }
  return !required;
}

void AtExit() { CuptiFinish(); }

void ChildAfterFork() {
  // A forked child (DataLoader worker) does not inherit CUPTI's threads:
  // it must never touch the parent's half of it. Workers do not use CUDA.
  CuptiState& s = Cupti();
  s.state.store(kOff);
  g_pushing.store(false);
  g_window_request.store(0);
  g_window_calls_due.store(UINT64_MAX);
  g_counting.store(false);
  t_pushed = false;
  pthread_mutex_init(&s.mu, nullptr);
  pthread_mutex_init(&s.pool_mu, nullptr);
}

}  // namespace

// The activity kinds pinscope records, enabled (at start and at the start of
// every window); false with `why` set if one that is required failed (what
// was enabled is disabled again). mu held.
bool EnableOurKindsLocked(bool kernels, char* why, size_t cap) {
  const Config& cfg = GetConfig();
  CUptiResult rc = CUPTI_SUCCESS;
  // Memcpy, memset and kernels are what the report needs; synchronization
  // records are a bonus where the CUPTI supports them.
  const struct {
    CUpti_ActivityKind kind;
    bool required;
    const char* name;
  } kKinds[] = {{CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION, true, "EXTERNAL_CORRELATION"},
                {CUPTI_ACTIVITY_KIND_MEMCPY, true, "MEMCPY"},
                {CUPTI_ACTIVITY_KIND_MEMSET, true, "MEMSET"},
                {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, true, "CONCURRENT_KERNEL"},
                {CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, false, "SYNCHRONIZATION"}};
  for (const auto& k : kKinds) {
    if (k.kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && !kernels) continue;
    if (EnableKind(k.kind, k.required, &rc)) continue;
    snprintf(why, cap, "cuptiActivityEnable(%s) failed: %s (%d)", k.name, ResultText(rc),
             static_cast<int>(rc));
    DisableOurKinds();
    return false;
  }
  // Runtime API records (see kRuntimeCbids), restricted to the hooked calls
  // where the CUPTI can (CUDA >= 12.5) and the program did not ask for all
  // of them itself; otherwise every runtime call makes a record (costlier).
  // Off by default (PINSCOPE_CUPTI_RUNTIME=1 turns it on): on the H200 the
  // kind costs 13-20% of a launch-bound step even restricted (issue 16).
  // CUDA 13.0's CUPTI then writes no correlations; the analyzer joins device
  // copies to their host calls by time and order instead.
  if (cfg.cupti_runtime) {
    if (!EnableKind(CUPTI_ACTIVITY_KIND_RUNTIME, true, &rc)) {
      snprintf(why, cap, "cuptiActivityEnable(RUNTIME) failed: %s (%d)", ResultText(rc),
               static_cast<int>(rc));
      DisableOurKinds();
      return false;
    }
    RestrictRuntimeRecordsLocked();
  }
  return true;
}

namespace {

void StartLocked() {
  const Config& cfg = GetConfig();
  CuptiState& s = Cupti();
  if (!cfg.cupti) {
    s.state.store(kOff);  // PINSCOPE_CUPTI=0: not even loaded
    return;
  }
  char why[1200];
  auto fail = [&](const char* text) {
    s.state.store(kAside);
    SayUnavailable(text);
  };
  if (s.program_owns.load()) {
    fail("the program already uses CUPTI's activity buffers (torch.profiler or another "
         "profiler started first)");
    return;
  }
  if (const char* inj = getenv("CUDA_INJECTION64_PATH"); inj && *inj) {
    snprintf(why, sizeof why,
             "another CUDA tool is injected (CUDA_INJECTION64_PATH=%.900s, e.g. Nsight Systems) "
             "and holds CUPTI",
             inj);
    fail(why);
    return;
  }
  int major = RuntimeMajor();
  char tried[900] = {};
  s.handle = LoadCupti(major ? major : 13, tried, sizeof tried);
  if (!s.handle && major == 0) s.handle = LoadCupti(12, tried, sizeof tried);
  if (!s.handle) {
    snprintf(why, sizeof why, "libcupti.so.%d could not be loaded (tried %s); set "
             "PINSCOPE_CUPTI_PATH to the libcupti of the job's CUDA runtime",
             major ? major : 13, tried);
    fail(why);
    return;
  }
  if (const char* missing = ResolveApi()) {
    snprintf(why, sizeof why, "%s lacks %s", s.lib_path, missing);
    fail(why);
    return;
  }
  uint32_t version = 0;
  CUptiResult rc = s.api.GetVersion(&version);
  int cupti_major = CuptiMajor(version);
  if (rc != CUPTI_SUCCESS || cupti_major < 12 || (major && cupti_major != major)) {
    snprintf(why, sizeof why,
             "%s has CUPTI API version %u (CUDA %d), which does not match the CUDA %d runtime "
             "(pinscope needs CUPTI from CUDA 12 or newer, of the runtime's major version)",
             s.lib_path, version, cupti_major, major);
    fail(why);
    return;
  }
  MeasureOffset();
  rc = s.api.RegisterCallbacks(BufferRequested, BufferCompleted);
  if (rc != CUPTI_SUCCESS) {
    snprintf(why, sizeof why, "cuptiActivityRegisterCallbacks failed: %s (%d)", ResultText(rc),
             static_cast<int>(rc));
    fail(why);
    return;
  }
  const bool kernels = cfg.cupti_kernels != KernelRecording::kOff;
  if (!EnableOurKindsLocked(kernels, why, sizeof why)) {
    fail(why);
    return;
  }
  // Runs before CUDA's and CUPTI's own exit handlers (registered earlier),
  // so the last buffers are flushed while CUPTI still works.
  atexit(AtExit);
  pthread_atfork(nullptr, nullptr, ChildAfterFork);
  StartKernelsLocked(kernels);
  const bool at_loop = cfg.cupti_start_at_loop && WindowsWanted();
  if (at_loop) {
    StartWindowsAwaitingLoopLocked(kernels);
  } else {
    StartWindowsLocked(kernels);
  }
  s.state.store(kActive);
  g_pushing.store(true);
  char windows[160] = "";
  if (at_loop) {
    snprintf(windows, sizeof windows,
             "; in windows of %u ms, the first once the job's copies and syncs recur "
             "(PINSCOPE_CUPTI_START=loop)",
             cfg.cupti_window_ms);
  }
  snprintf(why, sizeof why, "device activity from %s (CUPTI API version %u)%s%s", s.lib_path,
           version, windows,
           cfg.cupti_runtime ? ""
                             : "; runtime records off (the default; PINSCOPE_CUPTI_RUNTIME=1 "
                               "turns them on): device copies join their host calls by order");
  RecordNotice(f::kInfo, "cupti_started", why);
}

}  // namespace
}  // namespace cupti_internal

// --- public -------------------------------------------------------------------

using cupti_internal::Cupti;
using cupti_internal::CuptiState;
using cupti_internal::g_pushing;
using cupti_internal::kActive;
using cupti_internal::kFinished;
using cupti_internal::kIdle;
using cupti_internal::kStarting;
using cupti_internal::MeasureOffset;

void CuptiStart() {
  CuptiState& s = Cupti();
  int expected = kIdle;
  if (s.state.load(std::memory_order_relaxed) != kIdle) return;
  HookScope scope;
  pthread_mutex_lock(&s.mu);
  if (s.state.compare_exchange_strong(expected, kStarting)) cupti_internal::StartLocked();
  pthread_mutex_unlock(&s.mu);
}

void CuptiFlushPeriodic() {
  CuptiState& s = Cupti();
  if (s.state.load(std::memory_order_relaxed) != kActive) return;
  HookScope scope;
  if (pthread_mutex_trylock(&s.mu) != 0) return;  // starting or stepping aside: next period
  if (s.state.load() == kActive) {
    if (!cupti_internal::DetachedLocked()) {
      MeasureOffset();
      s.api.FlushAll(0);
      if (!s.windows.on) cupti_internal::SampleKernelsLocked();
    }
    cupti_internal::TickWindowsLocked(MonoNs());
  }
  pthread_mutex_unlock(&s.mu);
}

void CuptiFinish() {
  CuptiState& s = Cupti();
  if (s.state.load(std::memory_order_relaxed) != kActive) return;
  HookScope scope;
  pthread_mutex_lock(&s.mu);
  if (s.state.load() == kActive) {
    g_pushing.store(false);
    cupti_internal::g_window_request.store(0);
    if (!cupti_internal::DetachedLocked()) {
      MeasureOffset();
      s.api.FlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    }
    s.state.store(kFinished);
    if (uint64_t dropped = s.dropped.load()) {
      char text[160];
      snprintf(text, sizeof text,
               "CUPTI dropped %llu device records (activity buffers full or refused)",
               static_cast<unsigned long long>(dropped));
      RecordNotice(fields::kWarning, "cupti_dropped", text);
    }
  }
  pthread_mutex_unlock(&s.mu);
}

}  // namespace pinscope::shim
