// A TEST DOUBLE of NVIDIA's libcupti.so.13 (activity API subset) for
// pinscope's CPU-only CI; behaviour and test-only helpers in fake_cupti.h.
// Thread-safe with one mutex; callbacks are called without it held, as the
// real CUPTI does, so a client may call back into the library.
#include "fake_cupti.h"

#include <cupti_activity.h>
#include <cupti_version.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cstddef>
#include <vector>

#define FAKE_API extern "C" __attribute__((visibility("default")))

namespace {

enum class Mode { kOk, kTaken, kFailEnable, kOldVersion };

Mode GetMode() {
  const char* m = getenv("FAKECUPTI_MODE");
  if (!m || !*m || !strcmp(m, "ok")) return Mode::kOk;
  if (!strcmp(m, "taken")) return Mode::kTaken;
  if (!strcmp(m, "fail_enable")) return Mode::kFailEnable;
  if (!strcmp(m, "old_version")) return Mode::kOldVersion;
  return Mode::kOk;
}

pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
CUpti_BuffersCallbackRequestFunc g_request = nullptr;
CUpti_BuffersCallbackCompleteFunc g_complete = nullptr;
CUpti_TimestampCallbackFunc g_clock = nullptr;
uint64_t g_enabled = 0;
uint32_t g_next_correlation = 100;
unsigned long g_kernel_count = 0;
size_t g_dropped = 0;
fakecupti_stats g_stats{};
// Runtime callback ids switched off one by one (cuptiActivityEnableRuntimeApi).
bool g_runtime_cbid_off[1024];
// Finalized and not registered again since (fakecupti_stats::calls_while_finalized).
bool g_finalized = false;
void NoteCall() {  // g_mu held
  if (g_finalized) ++g_stats.calls_while_finalized;
}
// Records waiting for a flush; each kept as its own byte string.
std::vector<std::vector<uint8_t>>* g_queue = nullptr;

// Per-thread external correlation stacks, by kind, with the time of push.
constexpr int kKinds = 8, kDepth = 16;
thread_local uint64_t t_ids[kKinds][kDepth];
thread_local uint64_t t_since[kKinds][kDepth];
thread_local int t_depth[kKinds];

uint64_t ClockNs(clockid_t id) {
  timespec ts;
  clock_gettime(id, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// CUPTI's clock is CLOCK_REALTIME. The double's is CLOCK_MONOTONIC plus the
// offset to CLOCK_REALTIME read once, at load: as far from the host timeline
// as CUPTI's, but a step of the CI machine's wall clock cannot move the
// records of a test that asserts where they lie (one CI run found six of
// CuptiWindows' device records outside every window, as steps would place
// them; the development machine never reproduced it). No test steps it.
const uint64_t g_wall_offset = ClockNs(CLOCK_REALTIME) - ClockNs(CLOCK_MONOTONIC);

uint64_t Now() {
  if (g_clock) return g_clock();
  return ClockNs(CLOCK_MONOTONIC) + g_wall_offset;
}

bool On(CUpti_ActivityKind k) { return g_enabled >> static_cast<int>(k) & 1; }

template <typename T>
void Queue(const T& rec) {  // g_mu held
  if (!g_queue) g_queue = new std::vector<std::vector<uint8_t>>();
  const uint8_t* p = reinterpret_cast<const uint8_t*>(&rec);
  g_queue->emplace_back(p, p + sizeof rec);
}

// As measured with CUDA 13.0's CUPTI: external correlation records come
// only with the RUNTIME kind on (single callback ids alone give none). The
// simulated calls are copies, whose ids pinscope keeps on.
bool RuntimeRecordsOn() { return On(CUPTI_ACTIVITY_KIND_RUNTIME); }

// One simulated API call: `start` is when its region opened.
void MakeApiCall(uint64_t start) {  // g_mu held
  uint64_t end = Now();
  if (start == 0 || start > end) start = end;
  uint32_t corr = ++g_next_correlation;
  ++g_stats.api_calls;
  if (On(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) && RuntimeRecordsOn()) {
    for (int k = 0; k < kKinds; ++k) {
      if (t_depth[k] == 0) continue;
      CUpti_ActivityExternalCorrelation r;
      memset(&r, 0, sizeof r);
      r.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
      r.externalKind = static_cast<CUpti_ExternalCorrelationKind>(k);
      r.externalId = t_ids[k][t_depth[k] - 1];
      r.correlationId = corr;
      Queue(r);
    }
  }
  if (On(CUPTI_ACTIVITY_KIND_MEMCPY)) {
    CUpti_ActivityMemcpy6 r;
    memset(&r, 0, sizeof r);
    r.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
    r.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
    r.srcKind = CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE;
    r.dstKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
    const char* b = getenv("FAKECUPTI_BYTES");
    r.bytes = b && *b ? strtoull(b, nullptr, 10) : 4096;
    r.start = start;
    r.end = end;
    r.deviceId = 0;
    r.streamId = 7;
    r.correlationId = corr;
    Queue(r);
  }
  if (On(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)) {
    CUpti_ActivityKernel10 r;
    memset(&r, 0, sizeof r);
    r.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    r.start = start;
    r.end = end;
    r.deviceId = 0;
    r.streamId = 7;
    r.correlationId = corr;
    r.name = (g_kernel_count++ % 2 == 0) ? "fake_kernel_a" : "fake_kernel_b";
    Queue(r);
  }
}

// Record framing inside a delivered buffer: an 8-byte size header, then the
// record, padded to 8 bytes (only cuptiActivityGetNextRecord reads it).
constexpr size_t kHeader = 8;

size_t Padded(size_t n) { return (n + 7) & ~size_t{7}; }

__attribute__((constructor)) void Loaded() { ++g_stats.loads; }

}  // namespace

// --- version, errors, time -----------------------------------------------------

FAKE_API CUptiResult cuptiGetVersion(uint32_t* version) {
  if (!version) return CUPTI_ERROR_INVALID_PARAMETER;
  *version = GetMode() == Mode::kOldVersion ? 18 : CUPTI_API_VERSION;
  return CUPTI_SUCCESS;
}

FAKE_API CUptiResult cuptiGetResultString(CUptiResult rc, const char** str) {
  if (!str) return CUPTI_ERROR_INVALID_PARAMETER;
  switch (rc) {
    case CUPTI_SUCCESS: *str = "CUPTI_SUCCESS"; break;
    case CUPTI_ERROR_NOT_INITIALIZED: *str = "CUPTI_ERROR_NOT_INITIALIZED"; break;
    case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
      *str = "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED";
      break;
    case CUPTI_ERROR_INVALID_OPERATION: *str = "CUPTI_ERROR_INVALID_OPERATION"; break;
    default: *str = "CUPTI_ERROR_UNKNOWN"; break;
  }
  return CUPTI_SUCCESS;
}

FAKE_API CUptiResult cuptiGetTimestamp(uint64_t* ts) {
  if (!ts) return CUPTI_ERROR_INVALID_PARAMETER;
  pthread_mutex_lock(&g_mu);
  NoteCall();
  pthread_mutex_unlock(&g_mu);
  *ts = Now();
  return CUPTI_SUCCESS;
}

FAKE_API CUptiResult cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc fn) {
  if (!fn) return CUPTI_ERROR_INVALID_PARAMETER;
  pthread_mutex_lock(&g_mu);
  g_clock = fn;
  pthread_mutex_unlock(&g_mu);
  return CUPTI_SUCCESS;
}

// --- activity control ------------------------------------------------------------

FAKE_API CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc req,
                                                    CUpti_BuffersCallbackCompleteFunc done) {
  if (!req || !done) return CUPTI_ERROR_INVALID_PARAMETER;
  if (GetMode() == Mode::kTaken) return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  pthread_mutex_lock(&g_mu);
  g_request = req;
  g_complete = done;
  g_finalized = false;
  ++g_stats.registrations;
  pthread_mutex_unlock(&g_mu);
  return CUPTI_SUCCESS;
}

FAKE_API CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind) {
  Mode m = GetMode();
  if (m == Mode::kTaken) return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  if (m == Mode::kFailEnable) return CUPTI_ERROR_NOT_INITIALIZED;
  if (static_cast<int>(kind) <= 0 || static_cast<int>(kind) >= 64) return CUPTI_ERROR_INVALID_KIND;
  pthread_mutex_lock(&g_mu);
  NoteCall();
  g_enabled |= 1ull << static_cast<int>(kind);
  if (kind == CUPTI_ACTIVITY_KIND_RUNTIME) {  // the kind overrides per-call settings
    for (bool& off : g_runtime_cbid_off) off = false;
    g_stats.runtime_cbids_off = 0;
  }
  pthread_mutex_unlock(&g_mu);
  return CUPTI_SUCCESS;
}

FAKE_API CUptiResult cuptiActivityDisable(CUpti_ActivityKind kind) {
  if (static_cast<int>(kind) <= 0 || static_cast<int>(kind) >= 64) return CUPTI_ERROR_INVALID_KIND;
  pthread_mutex_lock(&g_mu);
  NoteCall();
  g_enabled &= ~(1ull << static_cast<int>(kind));
  pthread_mutex_unlock(&g_mu);
  return CUPTI_SUCCESS;
}

FAKE_API CUptiResult cuptiActivityEnableRuntimeApi(CUpti_CallbackId cbid, uint8_t enable) {
  if (GetMode() == Mode::kFailEnable) return CUPTI_ERROR_NOT_INITIALIZED;
  if (cbid >= 1024) return CUPTI_ERROR_INVALID_PARAMETER;
  pthread_mutex_lock(&g_mu);
  if (g_runtime_cbid_off[cbid] != (enable == 0)) {
    g_runtime_cbid_off[cbid] = enable == 0;
    if (enable) {
      --g_stats.runtime_cbids_off;
    } else {
      ++g_stats.runtime_cbids_off;
    }
  }
  pthread_mutex_unlock(&g_mu);
  return CUPTI_SUCCESS;
}

FAKE_API CUptiResult cuptiFinalize() {
  pthread_mutex_lock(&g_mu);
  g_request = nullptr;
  g_complete = nullptr;
  g_enabled = 0;
  g_finalized = true;
  ++g_stats.finalizes;
  if (g_queue) g_queue->clear();
  pthread_mutex_unlock(&g_mu);
  return CUPTI_SUCCESS;
}

// --- external correlation ----------------------------------------------------------

FAKE_API CUptiResult cuptiActivityPushExternalCorrelationId(CUpti_ExternalCorrelationKind kind,
                                                            uint64_t id) {
  int k = static_cast<int>(kind);
  if (k <= 0 || k >= kKinds || t_depth[k] >= kDepth) return CUPTI_ERROR_INVALID_PARAMETER;
  t_ids[k][t_depth[k]] = id;
  t_since[k][t_depth[k]] = Now();
  ++t_depth[k];
  pthread_mutex_lock(&g_mu);
  NoteCall();
  ++g_stats.pushes[k];
  pthread_mutex_unlock(&g_mu);
  return CUPTI_SUCCESS;
}

FAKE_API CUptiResult cuptiActivityPopExternalCorrelationId(CUpti_ExternalCorrelationKind kind,
                                                           uint64_t* last) {
  int k = static_cast<int>(kind);
  if (k <= 0 || k >= kKinds) return CUPTI_ERROR_INVALID_PARAMETER;
  if (t_depth[k] == 0) return CUPTI_ERROR_QUEUE_EMPTY;
  pthread_mutex_lock(&g_mu);
  NoteCall();
  MakeApiCall(t_since[k][t_depth[k] - 1]);  // the region's one CUDA call
  ++g_stats.pops[k];
  pthread_mutex_unlock(&g_mu);
  --t_depth[k];
  if (last) *last = t_ids[k][t_depth[k]];
  return CUPTI_SUCCESS;
}

// --- buffers -------------------------------------------------------------------------

FAKE_API CUptiResult cuptiActivityFlushAll(uint32_t flag) {
  pthread_mutex_lock(&g_mu);
  NoteCall();
  ++g_stats.flushes;
  CUpti_BuffersCallbackRequestFunc req = g_request;
  CUpti_BuffersCallbackCompleteFunc done = g_complete;
  if (!req || !done) {
    pthread_mutex_unlock(&g_mu);
    return CUPTI_ERROR_INVALID_OPERATION;
  }
  std::vector<std::vector<uint8_t>> pending;
  if (g_queue) pending.swap(*g_queue);
  pthread_mutex_unlock(&g_mu);
  size_t i = 0;
  while (i < pending.size()) {
    uint8_t* buf = nullptr;
    size_t size = 0, max_records = 0;
    req(&buf, &size, &max_records);
    if (!buf) {  // refused: those records are dropped
      pthread_mutex_lock(&g_mu);
      g_dropped += pending.size() - i;
      pthread_mutex_unlock(&g_mu);
      break;
    }
    size_t used = 0, n = 0;
    while (i < pending.size()) {
      size_t need = kHeader + Padded(pending[i].size());
      if (used + need > size || (max_records && n == max_records)) break;
      uint64_t len = pending[i].size();
      memcpy(buf + used, &len, sizeof len);
      memcpy(buf + used + kHeader, pending[i].data(), len);
      used += need;
      ++n;
      ++i;
    }
    pthread_mutex_lock(&g_mu);
    g_stats.records_delivered += n;
    pthread_mutex_unlock(&g_mu);
    done(nullptr, 0, buf, size, used);
    if (n == 0) break;  // a buffer too small for one record
  }
  return CUPTI_SUCCESS;
}

FAKE_API CUptiResult cuptiActivityGetNextRecord(uint8_t* buffer, size_t valid,
                                                CUpti_Activity** record) {
  if (!buffer || !record) return CUPTI_ERROR_INVALID_PARAMETER;
  size_t off = 0;
  if (*record) {
    uint8_t* cur = reinterpret_cast<uint8_t*>(*record);
    uint64_t len;
    memcpy(&len, cur - kHeader, sizeof len);
    off = static_cast<size_t>(cur - buffer) + Padded(len);
  }
  if (off + kHeader > valid) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  *record = reinterpret_cast<CUpti_Activity*>(buffer + off + kHeader);
  return CUPTI_SUCCESS;
}

FAKE_API CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext, uint32_t, size_t* dropped) {
  if (!dropped) return CUPTI_ERROR_INVALID_PARAMETER;
  pthread_mutex_lock(&g_mu);
  *dropped = g_dropped;
  g_dropped = 0;
  pthread_mutex_unlock(&g_mu);
  return CUPTI_SUCCESS;
}

// --- test-only ---------------------------------------------------------------------

FAKE_API void fakecupti_get_stats(fakecupti_stats* out) {
  pthread_mutex_lock(&g_mu);
  *out = g_stats;
  pthread_mutex_unlock(&g_mu);
}

FAKE_API uint64_t fakecupti_enabled_kinds() {
  pthread_mutex_lock(&g_mu);
  uint64_t v = g_enabled;
  pthread_mutex_unlock(&g_mu);
  return v;
}

FAKE_API void fakecupti_simulate_api() {
  pthread_mutex_lock(&g_mu);
  MakeApiCall(0);
  pthread_mutex_unlock(&g_mu);
}
