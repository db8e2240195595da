// CUPTI's shared state inside shim/device: the one CuptiState (behind
// Cupti()) and what each cupti_*.cc file offers the others. Only the files of
// this layer include it; the other layers see cupti.h alone.
#pragma once

#include <cupti_activity.h>
#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace pinscope::shim::cupti_internal {

// Kineto (torch.profiler) pushes its ids as CUSTOM0 (ops) and CUSTOM1 (user
// annotations); pinscope takes CUSTOM2 so neither tool reads the other's ids.
constexpr CUpti_ExternalCorrelationKind kOurKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2;

// Activity buffers: mmap'd (not malloc'ed) so they stay out of the
// program's heap and out of pinscope's own allocation records, page
// aligned (CUPTI needs 8). Kept in a small free list for reuse; at most
// kMaxBuffers exist at once (beyond that CUPTI is refused a buffer and
// counts the records it drops).
constexpr size_t kBufferBytes = 2u << 20;
constexpr int kMaxBuffers = 32;
constexpr int kFreeKept = 8;

enum State : int { kIdle, kStarting, kActive, kAside, kOff, kFinished };

// Resolved from the loaded libcupti.
struct Api {
  CUptiResult (*GetVersion)(uint32_t*);
  CUptiResult (*GetResultString)(CUptiResult, const char**);
  CUptiResult (*Enable)(CUpti_ActivityKind);
  CUptiResult (*Disable)(CUpti_ActivityKind);
  CUptiResult (*RegisterCallbacks)(CUpti_BuffersCallbackRequestFunc,
                                   CUpti_BuffersCallbackCompleteFunc);
  CUptiResult (*FlushAll)(uint32_t);
  CUptiResult (*GetNextRecord)(uint8_t*, size_t, CUpti_Activity**);
  CUptiResult (*GetNumDropped)(CUcontext, uint32_t, size_t*);
  CUptiResult (*Push)(CUpti_ExternalCorrelationKind, uint64_t);
  CUptiResult (*Pop)(CUpti_ExternalCorrelationKind, uint64_t*);
  CUptiResult (*GetTimestamp)(uint64_t*);
  CUptiResult (*EnableRuntimeApi)(CUpti_CallbackId, uint8_t);  // CUDA >= 12.5, optional
  CUptiResult (*Finalize)();  // optional: without it, no windows (attached throughout)
};

// Everything the CUPTI files share, once per process. Constant-initialized
// and trivially destructible (static_asserts below): usable from the first
// CUDA hook and still intact in the atexit handler that flushes last. The
// per-call correlation flags (g_pushing, t_pushed) are not here but in
// cupti.h, so that CuptiPushCall/CuptiPopCall stay one load.
struct CuptiState {
  Api api = {};
  void* handle = nullptr;
  char lib_path[4096] = {};
  std::atomic<int> state{kIdle};
  // Serializes start, periodic flush, stepping aside and finish. Never held
  // by the buffer callbacks (CUPTI may run them while FlushAll waits).
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  std::atomic<bool> said{false};
  // The program called cuptiActivityRegisterCallbacks & co itself.
  std::atomic<bool> program_owns{false};
  std::atomic<bool> finalized{false};
  // Kinds (bit = CUpti_ActivityKind, < 64) the program enabled itself.
  std::atomic<uint64_t> program_kinds{0};

  // What pinscope enabled, to undo exactly that when it steps aside.
  CUpti_ActivityKind enabled[8] = {};
  int enabled_count = 0;
  // Runtime API records restricted to kRuntimeCbids (cuptiActivityEnableRuntimeApi,
  // cupti_correlation.cc).
  bool runtime_restricted = false;

  // cupti timestamp - CLOCK_MONOTONIC, ns; re-measured at every flush.
  std::atomic<int64_t> offset{0};

  // Kernel recording (PINSCOPE_CUPTI_KERNELS, shim/base/config.h). In auto
  // mode the flusher measures the kernel record rate over each period while
  // kernels are on; above PINSCOPE_CUPTI_KERNEL_RATE it switches the kind off
  // for long enough that the average stays near that rate (at least one
  // period, at most kMaxBlindPeriods), then records one period again. Each
  // switch is a DeviceRecording packet, so the analyzer counts neither busy
  // nor idle time where kernels were not recorded. Guarded by mu (records:
  // atomic, counted by the buffer callbacks).
  struct Kernels {
    std::atomic<uint64_t> records{0};
    bool on = false;
    uint64_t phase_start_ns = 0;  // when kernels went on (or the rate was last measured)
    uint64_t phase_records = 0;   // records then
    uint64_t blind_until_ns = 0;  // kernels off until then
    uint64_t tick_ns = 0;         // the previous sampling tick while kernels were on
    uint64_t tick_records = 0;    // records then
  } kernels;

  // Device records in windows (PINSCOPE_CUPTI_WINDOW_MS, PINSCOPE_CUPTI_PERIOD_S;
  // issue 16). On the H200 an enabled activity kind costs a launch-bound loop
  // 15-30% of its step (MEMCPY alone as much as the kernel kind), and the
  // cost stays after the kinds are disabled; only cuptiFinalize takes it
  // away (tools/bench/cupti_kind_bench.cu, docs/benchmarks.md). So CUPTI is
  // attached for a window, detached, and attached again a period after the
  // window began. The flusher asks (g_window_request); the switch itself runs
  // on a program thread right after a hooked CUDA call returned
  // (CuptiAfterCall), where NVIDIA's documentation of cuptiFinalize asks for
  // it. Each switch is a DeviceRecording packet (detached: no device records
  // of any kind until the next one). Guarded by mu.
  //
  // Where the first window goes (PINSCOPE_CUPTI_START=loop, the default):
  // not at the first CUDA call, which in a PyTorch job is often the model's
  // .to("cuda") at start-up, followed by seconds of warm-up (on the H100 the
  // 2 s window recorded 100 weight copies and no copy of the loop), but
  // once hooked calls came in three flush periods: the loop. Until then
  // CUPTI is detached (awaiting_loop), after one check at the first CUDA
  // call: attached, then finalized right after that call returns.
  struct Windows {
    bool on = false;              // windows in use in this process
    bool attached = true;         // CUPTI attached (a window) or finalized (a gap)
    bool awaiting_loop = false;   // no window yet: waiting for the loop
    uint64_t since_ns = 0;        // when the current window began
    uint64_t calls_at_start = 0;  // g_hooked_calls then
    uint32_t count = 0;           // windows so far
    // Awaiting the loop: flush periods that saw hooked calls, and the count
    // at the last tick.
    uint32_t active_ticks = 0;
    uint64_t calls_at_tick = 0;
  } windows;

  // Records CUPTI dropped (no buffer), reported once at exit.
  std::atomic<uint64_t> dropped{0};

  // The activity buffers' free list (see kBufferBytes); guarded by pool_mu.
  pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
  uint8_t* free_buffers[kFreeKept] = {};
  int free_count = 0;
  int live_buffers = 0;

  // Kernel names already written (cupti_buffers.cc): mmap'd on first use.
  std::atomic<uint64_t>* name_ids = nullptr;
  std::atomic<bool> name_table_failed{false};
};
static_assert(std::is_trivially_destructible_v<CuptiState>);

// The one instance. Constant-initialized (no guard), so reading it costs what
// the file-scope globals it replaces did.
inline CuptiState& Cupti() {
  static constinit CuptiState state;
  return state;
}

// --- cupti_state.cc: messages ----------------------------------------------
const char* ResultText(CUptiResult rc);
// Says once per process (stderr and a Notice) that device activity is not
// recorded from now on, and why. The job is never affected.
void SayUnavailable(const char* why);

// --- cupti_load.cc: finding libcupti ---------------------------------------
// Loads the libcupti of the runtime's major version; sets lib_path. `tried`
// collects the places tried, for the message.
void* LoadCupti(int major, char* tried, size_t cap);
// Resolves Api from handle; returns the first required function missing, or
// nullptr.
const char* ResolveApi();
// CUPTI API version -> CUDA major.
int CuptiMajor(uint32_t v);

// --- cupti_buffers.cc: buffers, records, clock ------------------------------
void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records);
void CUPTIAPI BufferCompleted(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t size,
                              size_t valid);
// Measures offset (cupti timestamp - CLOCK_MONOTONIC).
void MeasureOffset();
// One activity record -> its packet (DeviceActivity, Correlation), as
// BufferCompleted does for each record; runtime API records are skipped.
// Reachable on its own for tools/bench/device_cost_bench.cc (issue 16).
void HandleRecord(const CUpti_Activity* rec);

// --- cupti_kernels.cc: kernel recording windows; mu held -------------------
// A DeviceRecording packet (trace.proto).
void WriteRecording(bool kernels, const char* reason, double rate, uint64_t planned_ns,
                    uint64_t now, bool detached = false);
void StartKernelsLocked(bool kernels);
void SampleKernelsLocked();

// --- cupti_lifecycle.cc; mu held -------------------------------------------
// Enables the kinds pinscope records; false (why set, nothing left enabled)
// when a required one fails.
bool EnableOurKindsLocked(bool kernels, char* why, size_t cap);

// --- cupti_windows.cc: device-record windows (CuptiState::windows); mu held -
void StartWindowsLocked(bool kernels);
// From the flusher, attached or not: asks for the next switch when it is due.
void TickWindowsLocked(uint64_t now);
// PINSCOPE_CUPTI_START=loop: CUPTI attached and checked at the first CUDA
// call, detached right after it ("check", then "awaiting_loop"); the first
// window begins once the loop shows (TickWindowsLocked).
void StartWindowsAwaitingLoopLocked(bool kernels);
// True when windows are wanted: a window length, cuptiFinalize to end one,
// and not PINSCOPE_CUPTI_KERNELS=all.
bool WindowsWanted();
// At exit: true when CUPTI is detached (nothing to flush, and any CUPTI call
// would attach it again).
bool DetachedLocked();

// --- cupti_correlation.cc: runtime records for the correlation join --------
void RestrictRuntimeRecordsLocked();

// --- cupti_program.cc: stepping aside; mu held -----------------------------
void DisableOurKinds();
void StepAsideLocked(const char* why);

}  // namespace pinscope::shim::cupti_internal
