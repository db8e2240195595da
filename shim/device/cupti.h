// Device activity through CUPTI's activity API, loaded at run time (the shim
// never links libcupti). Started lazily by the first CUDA hook, never by the
// constructor; steps aside for good when another CUPTI client shows up or a
// CUPTI call fails, saying so once. docs/device-activity.md.
// Implemented by the cupti_*.cc files of this folder over one CuptiState
// (cupti_state.h, which only they include).
//
// Contract: every function here is thread-safe, never allocates through the
// hooked malloc on the program's threads (the hook guard is set around every
// CUPTI call) and is a no-op once CUPTI is off in this process.
#pragma once

#include <atomic>
#include <cstdint>

#include "shim/base/guard.h"

namespace pinscope::shim {

// Called once per process by NoteCuda (shim/core/copy_path.cc, at the first
// CUDA hook, guard set): finds
// and loads libcupti, registers pinscope's buffer callbacks and enables the
// activity kinds. On failure says "cupti_unavailable" once (stderr + Notice).
void CuptiStart();

namespace cupti_internal {
// True only while pinscope owns CUPTI's activity buffers; the per-call
// push/pop below read it with one relaxed load.
extern std::atomic<bool> g_pushing;
// This thread has pinscope's id on CUPTI's external-correlation stack.
extern PINSCOPE_TLS bool t_pushed;
void PushSlow(uint64_t call_id);
void PopSlow();
// Non-zero when the flusher asks for a device-record window to end or begin
// (cupti_windows.cc); served by the next hooked call's CuptiAfterCall.
extern std::atomic<int> g_window_request;
void ServeWindow();
// Hooked copies and syncs made so far (every thread), counted only while a
// window is open or the first is awaited (g_counting): for where the first
// window goes (the loop: calls in three flush periods) and its length.
extern std::atomic<bool> g_counting;
extern std::atomic<uint64_t> g_hooked_calls;
// While a window is open: the call count from which a call checks whether
// the window has lasted PINSCOPE_CUPTI_WINDOW_MS (UINT64_MAX otherwise).
extern std::atomic<uint64_t> g_window_calls_due;
void WindowDueSlow();
bool EndWindowNow();
}  // namespace cupti_internal

// Ends a device-record window open now, on a program thread after its CUDA
// work (the recording paused: no window spans a pause, pinscope_recording_pause).
// Timed as a CUPTI switch. False when the flusher held CUPTI's lock for
// 100 ms and the window is still open.
bool CuptiEndWindow();

// Around the real copy/sync call: makes the shim's call_id CUPTI's external
// correlation id for the CUDA calls made in between, so device records join
// to CopyEvent/SyncEvent.call_id. Cost with CUPTI off: one relaxed load.
// PopCall pops only what this thread pushed, even if CUPTI went off between.
inline void CuptiPushCall(uint64_t call_id) {
  if (cupti_internal::g_pushing.load(std::memory_order_relaxed)) cupti_internal::PushSlow(call_id);
}
inline void CuptiPopCall() {
  if (cupti_internal::t_pushed) cupti_internal::PopSlow();
}

// Right after a hooked CUDA call returned, on the program's thread, guard
// set: where CUPTI is detached at the end of a device-record window and
// attached again at the next (PINSCOPE_CUPTI_WINDOW_MS). Two relaxed loads
// unless a switch is due or calls are counted (inside a window, or before
// the first): then one relaxed increment more, and a clock read per call
// inside a window past its PINSCOPE_CUPTI_WINDOW_CALLS calls.
inline void CuptiAfterCall() {
  using namespace cupti_internal;
  if (g_counting.load(std::memory_order_relaxed)) {
    const uint64_t calls = g_hooked_calls.fetch_add(1, std::memory_order_relaxed) + 1;
    if (!g_window_request.load(std::memory_order_relaxed) &&
        calls >= g_window_calls_due.load(std::memory_order_relaxed)) {
      WindowDueSlow();  // ends the window here when it has lasted long enough
      return;
    }
  }
  if (g_window_request.load(std::memory_order_relaxed)) ServeWindow();
}

// From the flusher thread (shim/process), every flush period: asks CUPTI for the
// completed buffers (cuptiActivityFlushAll(0)) so a crash loses at most one
// period of device records.
void CuptiFlushPeriodic();

// From FinishProcess (exit, _exit, exec) and from an atexit handler that
// runs before CUDA's and CUPTI's own teardown: forced flush, then off.
void CuptiFinish();

// --- the program's own CUPTI calls (interpose_cupti.cc) -------------------
// Each returns the real function to forward to (nullptr if none is loaded),
// after pinscope stepped aside where the call needs it.
using CuptiFn = void*;
// cuptiActivityRegisterCallbacks / cuptiActivityRegisterTimestampCallback /
// cuptiFinalize by the program: pinscope flushes its records, disables the
// activity kinds it enabled (not those the program enabled), stops pushing
// correlation ids and leaves CUPTI to the program.
CuptiFn CuptiProgramTakesOver(const char* fn_name);
// cuptiActivityEnable / cuptiActivityDisable by the program: remembered so
// that stepping aside never disables a kind the program wants.
CuptiFn CuptiProgramEnables(int kind, bool enable);

}  // namespace pinscope::shim
