// CUPTI activity recording for the shim; see cupti.h and docs/device-activity.md.
// Only CUPTI's types come from its headers: every function is resolved with
// dlsym from the libcupti this file loads (or finds loaded) at run time.
// Threads: CuptiStart runs on a program thread inside a CUDA hook, the
// buffer callbacks on CUPTI's worker thread or on whichever thread called
// cuptiActivityFlushAll, CuptiFlushPeriodic on the recorder's flusher.
#include "shim/device/cupti.h"

#include <cupti_activity.h>
#include <cupti_runtime_cbid.h>
#include <cupti_version.h>
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>

#include "shim/base/clock.h"
#include "shim/base/guard.h"
#include "shim/base/log.h"
#include "shim/cuda/real_runtime.h"
#include "shim/record/recorder.h"
#include "shim/record/trace_fields.h"

namespace pinscope::shim {

namespace cupti_internal {
std::atomic<bool> g_pushing{false};
PINSCOPE_TLS bool t_pushed = false;
}  // namespace cupti_internal

namespace {

namespace f = fields;
using cupti_internal::g_pushing;
using cupti_internal::t_pushed;

// The record layouts pinscope reads are the current ones (CUDA 13 headers).
// CUDA 12's CUPTI delivers the previous versions of the same records; the
// fields read here sit at the same offsets in both, which these asserts pin.
#define PS_SAME_OFFSET(A, B, FIELD) static_assert(offsetof(A, FIELD) == offsetof(B, FIELD), #FIELD)
PS_SAME_OFFSET(CUpti_ActivityMemcpy6, CUpti_ActivityMemcpy5, copyKind);
PS_SAME_OFFSET(CUpti_ActivityMemcpy6, CUpti_ActivityMemcpy5, srcKind);
PS_SAME_OFFSET(CUpti_ActivityMemcpy6, CUpti_ActivityMemcpy5, dstKind);
PS_SAME_OFFSET(CUpti_ActivityMemcpy6, CUpti_ActivityMemcpy5, bytes);
PS_SAME_OFFSET(CUpti_ActivityMemcpy6, CUpti_ActivityMemcpy5, start);
PS_SAME_OFFSET(CUpti_ActivityMemcpy6, CUpti_ActivityMemcpy5, end);
PS_SAME_OFFSET(CUpti_ActivityMemcpy6, CUpti_ActivityMemcpy5, deviceId);
PS_SAME_OFFSET(CUpti_ActivityMemcpy6, CUpti_ActivityMemcpy5, streamId);
PS_SAME_OFFSET(CUpti_ActivityMemcpy6, CUpti_ActivityMemcpy5, correlationId);
PS_SAME_OFFSET(CUpti_ActivityMemset4, CUpti_ActivityMemset3, bytes);
PS_SAME_OFFSET(CUpti_ActivityMemset4, CUpti_ActivityMemset3, start);
PS_SAME_OFFSET(CUpti_ActivityMemset4, CUpti_ActivityMemset3, end);
PS_SAME_OFFSET(CUpti_ActivityMemset4, CUpti_ActivityMemset3, deviceId);
PS_SAME_OFFSET(CUpti_ActivityMemset4, CUpti_ActivityMemset3, streamId);
PS_SAME_OFFSET(CUpti_ActivityMemset4, CUpti_ActivityMemset3, correlationId);
PS_SAME_OFFSET(CUpti_ActivityMemset4, CUpti_ActivityMemset3, memoryKind);
PS_SAME_OFFSET(CUpti_ActivityKernel10, CUpti_ActivityKernel9, start);
PS_SAME_OFFSET(CUpti_ActivityKernel10, CUpti_ActivityKernel9, end);
PS_SAME_OFFSET(CUpti_ActivityKernel10, CUpti_ActivityKernel9, deviceId);
PS_SAME_OFFSET(CUpti_ActivityKernel10, CUpti_ActivityKernel9, streamId);
PS_SAME_OFFSET(CUpti_ActivityKernel10, CUpti_ActivityKernel9, correlationId);
PS_SAME_OFFSET(CUpti_ActivityKernel10, CUpti_ActivityKernel9, name);
PS_SAME_OFFSET(CUpti_ActivitySynchronization2, CUpti_ActivitySynchronization, start);
PS_SAME_OFFSET(CUpti_ActivitySynchronization2, CUpti_ActivitySynchronization, end);
PS_SAME_OFFSET(CUpti_ActivitySynchronization2, CUpti_ActivitySynchronization, correlationId);
PS_SAME_OFFSET(CUpti_ActivitySynchronization2, CUpti_ActivitySynchronization, streamId);
#undef PS_SAME_OFFSET

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
};

Api g_api;
void* g_handle = nullptr;
char g_lib_path[4096];
std::atomic<int> g_state{kIdle};
// Serializes start, periodic flush, stepping aside and finish. Never held
// by the buffer callbacks (CUPTI may run them while FlushAll waits).
pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
std::atomic<bool> g_said{false};
// The program called cuptiActivityRegisterCallbacks & co itself.
std::atomic<bool> g_program_owns{false};
std::atomic<bool> g_finalized{false};
// Kinds (bit = CUpti_ActivityKind, < 64) the program enabled itself.
std::atomic<uint64_t> g_program_kinds{0};

// What pinscope enabled, to undo exactly that when it steps aside.
CUpti_ActivityKind g_enabled[8];
int g_enabled_count = 0;
// Runtime API records restricted to kRuntimeCbids (cuptiActivityEnableRuntimeApi).
bool g_runtime_restricted = false;

// cupti timestamp - CLOCK_MONOTONIC, ns; re-measured at every flush.
std::atomic<int64_t> g_offset{0};

// Kernel recording (PINSCOPE_CUPTI_KERNELS, shim/config.h). In auto mode the
// flusher measures the kernel record rate over each period while kernels are
// on; above PINSCOPE_CUPTI_KERNEL_RATE it switches the kind off for long
// enough that the average stays near that rate (at least one period, at most
// kMaxBlindPeriods), then records one period again. Each switch is a
// DeviceRecording packet, so the analyzer counts neither busy nor idle time
// where kernels were not recorded. Guarded by g_mu.
std::atomic<uint64_t> g_kernel_records{0};
bool g_kernels_on = false;
uint64_t g_phase_start_ns = 0;     // when kernels went on (or the rate was last measured)
uint64_t g_phase_records = 0;      // g_kernel_records then
uint64_t g_blind_until_ns = 0;     // kernels off until then
uint64_t g_tick_ns = 0;            // the previous sampling tick while kernels were on
uint64_t g_tick_records = 0;       // g_kernel_records then
constexpr uint64_t kMaxBlindPeriods = 30;

// Records CUPTI dropped (no buffer), reported once at exit.
std::atomic<uint64_t> g_dropped{0};

// CUPTI writes EXTERNAL_CORRELATION records only next to runtime (or driver)
// API records, and on CUDA 13.0 only when the RUNTIME kind is on: enabling
// single callback ids without it gives no records (measured on the H200).
// So pinscope enables the kind, then switches off every runtime call but
// these (the calls its hooks push ids around), which keeps the cost of a
// record per kernel launch away. The list is what stays on.
constexpr CUpti_CallbackId kRuntimeCbids[] = {
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2D_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyToSymbol_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyFromSymbol_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DAsync_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyToSymbolAsync_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyFromSymbolAsync_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaEventSynchronize_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3D_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3DAsync_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyPeer_v4000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyPeerAsync_v4000,
    CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_ptds_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2D_ptds_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyToSymbol_ptds_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyFromSymbol_ptds_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DAsync_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyToSymbolAsync_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyFromSymbolAsync_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3D_ptds_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3DAsync_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyBatchAsync_v12080,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyBatchAsync_ptsz_v12080,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyBatchAsync_v13000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyBatchAsync_ptsz_v13000,
};

// --- messages ---------------------------------------------------------------

const char* ResultText(CUptiResult rc) {
  const char* s = nullptr;
  if (g_api.GetResultString && g_api.GetResultString(rc, &s) == CUPTI_SUCCESS && s) return s;
  return "unknown CUPTI error";
}

// Says once per process (stderr and a Notice) that device activity is not
// recorded from now on, and why. The job is never affected.
void SayUnavailable(const char* why) {
  LogOnce(&g_said, "device activity (CUPTI) is not recorded: %s; host-side tracing goes on", why);
  RecordNotice(f::kWarning, "cupti_unavailable", why);
}

// --- clock ------------------------------------------------------------------

// CUPTI's clock is CLOCK_REALTIME on Linux unless some client registered a
// timestamp callback. pinscope does not register one: the callback is
// process-wide and would move torch.profiler's device times off its host
// times. Instead the offset to CLOCK_MONOTONIC is measured around one
// cuptiGetTimestamp call at start and again at every flush, so a clock step
// misplaces at most the records of one flush period.
void MeasureOffset() {
  // Best of three: the narrowest bracket, so a preemption in between does
  // not skew the offset.
  uint64_t best_width = UINT64_MAX;
  int64_t offset = 0;
  for (int i = 0; i < 3; ++i) {
    uint64_t c = 0;
    uint64_t m0 = MonoNs();
    if (g_api.GetTimestamp(&c) != CUPTI_SUCCESS || c == 0) return;
    uint64_t m1 = MonoNs();
    if (m1 - m0 < best_width) {
      best_width = m1 - m0;
      offset = static_cast<int64_t>(c - (m0 + (m1 - m0) / 2));
    }
  }
  g_offset.store(offset, std::memory_order_relaxed);
}

uint64_t ToMono(uint64_t cupti_ns) {
  if (cupti_ns == 0) return 0;
  return static_cast<uint64_t>(static_cast<int64_t>(cupti_ns) -
                               g_offset.load(std::memory_order_relaxed));
}

// --- buffers ----------------------------------------------------------------

pthread_mutex_t g_pool_mu = PTHREAD_MUTEX_INITIALIZER;
uint8_t* g_free[kFreeKept];
int g_free_count = 0;
int g_live_buffers = 0;

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  HookScope scope;
  *buffer = nullptr;
  *size = 0;
  *max_records = 0;
  pthread_mutex_lock(&g_pool_mu);
  uint8_t* b = nullptr;
  if (g_free_count > 0) {
    b = g_free[--g_free_count];
  } else if (g_live_buffers < kMaxBuffers) {
    void* p = mmap(nullptr, kBufferBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (p != MAP_FAILED) {
      b = static_cast<uint8_t*>(p);
      ++g_live_buffers;
    }
  }
  pthread_mutex_unlock(&g_pool_mu);
  if (b) {
    *buffer = b;
    *size = kBufferBytes;
  }
}

void ReleaseBuffer(uint8_t* b) {
  pthread_mutex_lock(&g_pool_mu);
  if (g_free_count < kFreeKept) {
    g_free[g_free_count++] = b;
    b = nullptr;
  } else {
    --g_live_buffers;
  }
  pthread_mutex_unlock(&g_pool_mu);
  if (b) munmap(b, kBufferBytes);
}

// --- kernel names -------------------------------------------------------------

// Kernel names are interned once per process as InternedString packets.
// Their ids are a 62-bit hash with bit 62 set, so they never collide with
// the small sequential ids of stacks.cc; a set of written ids (open
// addressing, mmap'd, lock-free) keeps each name to one packet. When the set
// is full a name is simply written again (same id, same string).
constexpr size_t kNameSlots = 1u << 15;
constexpr uint64_t kNameIdBit = 1ull << 62;
std::atomic<uint64_t>* g_name_ids = nullptr;
std::atomic<bool> g_name_table_failed{false};
constexpr size_t kMaxNameBytes = 3500;  // fits one Packet (4 KiB)

uint64_t NameId(const char* name, size_t n) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (size_t i = 0; i < n; ++i) {
    h ^= static_cast<uint8_t>(name[i]);
    h *= 1099511628211ull;
  }
  return (h & (kNameIdBit - 1)) | kNameIdBit;
}

// True if `id` was not written before (the caller writes it now).
bool FirstUse(uint64_t id) {
  std::atomic<uint64_t>* table = __atomic_load_n(&g_name_ids, __ATOMIC_ACQUIRE);
  if (!table) {
    if (g_name_table_failed.load(std::memory_order_relaxed)) return true;
    void* p = mmap(nullptr, kNameSlots * sizeof(uint64_t), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      g_name_table_failed.store(true);
      return true;
    }
    std::atomic<uint64_t>* expected = nullptr;
    table = static_cast<std::atomic<uint64_t>*>(p);
    if (!__atomic_compare_exchange_n(&g_name_ids, &expected, table, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
      munmap(p, kNameSlots * sizeof(uint64_t));
      table = expected;
    }
  }
  size_t slot = static_cast<size_t>(id ^ (id >> 29)) & (kNameSlots - 1);
  for (size_t probe = 0; probe < 64; ++probe, slot = (slot + 1) & (kNameSlots - 1)) {
    uint64_t cur = table[slot].load(std::memory_order_acquire);
    if (cur == id) return false;
    if (cur == 0) {
      uint64_t expected = 0;
      if (table[slot].compare_exchange_strong(expected, id, std::memory_order_acq_rel)) return true;
      if (expected == id) return false;
    }
  }
  return true;
}

uint64_t InternName(const char* name) {
  if (!name || !*name) return 0;
  size_t n = strnlen(name, kMaxNameBytes);
  uint64_t id = NameId(name, n);
  if (FirstUse(id)) {
    Packet p(f::packet::kInternedString, MonoNs());
    p.e().Varint(f::interned_string::kId, id);
    p.e().StringN(f::interned_string::kStr, name, n);
    p.Commit();
  }
  return id;
}

// --- records ------------------------------------------------------------------

uint32_t DirectionOf(uint8_t copy_kind) {
  switch (copy_kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA: return f::kH2D;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH: return f::kD2H;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA: return f::kD2D;
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return f::kH2H;
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return f::kPeer;
    default: return f::kDirUnknown;
  }
}

uint32_t MemKindOf(uint32_t memory_kind) {
  switch (memory_kind) {
    case CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE: return f::kPageable;
    case CUPTI_ACTIVITY_MEMORY_KIND_PINNED: return f::kPinned;
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE:
    case CUPTI_ACTIVITY_MEMORY_KIND_ARRAY: return f::kDevice;
    case CUPTI_ACTIVITY_MEMORY_KIND_MANAGED:
    case CUPTI_ACTIVITY_MEMORY_KIND_MANAGED_STATIC: return f::kManaged;
    // A __device__ variable: what the host side calls a symbol.
    case CUPTI_ACTIVITY_MEMORY_KIND_DEVICE_STATIC: return f::kSymbol;
    default: return f::kMemUnknown;
  }
}

struct DeviceFields {
  uint32_t kind = 0;
  uint64_t start = 0, end = 0, bytes = 0;
  uint32_t direction = 0, src_kind = 0, dst_kind = 0;
  uint32_t device = 0, stream = 0, correlation = 0;
  uint64_t name_id = 0;
};

void WriteDevice(const DeviceFields& d) {
  // CUPTI leaves 0 timestamps where it could not time an activity (forced
  // flush of unfinished work, lack of device memory): nothing to place.
  if (d.start == 0 || d.end < d.start) return;
  namespace dv = f::device;
  Packet p(f::packet::kDevice, d.start);
  Encoder& e = p.e();
  e.Varint(dv::kKind, d.kind);
  e.Varint(dv::kStart, d.start);
  e.Varint(dv::kEnd, d.end);
  e.Varint(dv::kBytes, d.bytes);
  e.Varint(dv::kDirection, d.direction);
  e.Varint(dv::kSrcKind, d.src_kind);
  e.Varint(dv::kDstKind, d.dst_kind);
  e.Varint(dv::kDeviceId, d.device);
  e.Varint(dv::kStreamId, d.stream);
  e.Varint(dv::kCorrelationId, d.correlation);
  e.Varint(dv::kNameId, d.name_id);
  p.Commit();
}

void HandleRecord(const CUpti_Activity* rec) {
  DeviceFields d;
  switch (rec->kind) {
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      auto* r = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
      d.kind = f::kActMemcpy;
      d.start = ToMono(r->start);
      d.end = ToMono(r->end);
      d.bytes = r->bytes;
      d.direction = DirectionOf(r->copyKind);
      d.src_kind = MemKindOf(r->srcKind);
      d.dst_kind = MemKindOf(r->dstKind);
      d.device = r->deviceId;
      d.stream = r->streamId;
      d.correlation = r->correlationId;
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      auto* r = reinterpret_cast<const CUpti_ActivityMemset4*>(rec);
      d.kind = f::kActMemset;
      d.start = ToMono(r->start);
      d.end = ToMono(r->end);
      d.bytes = r->bytes;
      d.dst_kind = MemKindOf(r->memoryKind);
      d.device = r->deviceId;
      d.stream = r->streamId;
      d.correlation = r->correlationId;
      break;
    }
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      auto* r = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
      d.kind = f::kActKernel;
      g_kernel_records.fetch_add(1, std::memory_order_relaxed);
      d.start = ToMono(r->start);
      d.end = ToMono(r->end);
      d.device = r->deviceId;
      d.stream = r->streamId;
      d.correlation = r->correlationId;
      if (d.start && d.end >= d.start) d.name_id = InternName(r->name);
      break;
    }
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
      auto* r = reinterpret_cast<const CUpti_ActivitySynchronization2*>(rec);
      d.kind = f::kActSync;
      d.start = ToMono(r->start);
      d.end = ToMono(r->end);
      d.stream = r->streamId == CUPTI_SYNCHRONIZATION_INVALID_VALUE ? 0 : r->streamId;
      d.correlation = r->correlationId;
      break;
    }
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
      auto* r = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(rec);
      if (r->externalKind != kOurKind) return;  // the program's own ids
      Packet p(f::packet::kCorrelation, MonoNs());
      p.e().Varint(f::correlation::kCorrelationId, r->correlationId);
      p.e().Varint(f::correlation::kCallId, r->externalId);
      p.Commit();
      return;
    }
    default:
      return;  // runtime API records (only asked for to get correlations), others
  }
  WriteDevice(d);
}

void CUPTIAPI BufferCompleted(CUcontext ctx, uint32_t stream, uint8_t* buffer, size_t size,
                              size_t valid) {
  HookScope scope;
  if (buffer && valid > 0 && g_api.GetNextRecord) {
    CUpti_Activity* rec = nullptr;
    while (g_api.GetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS && rec) HandleRecord(rec);
  }
  size_t dropped = 0;
  if (g_api.GetNumDropped && g_api.GetNumDropped(ctx, stream, &dropped) == CUPTI_SUCCESS)
    g_dropped.fetch_add(dropped, std::memory_order_relaxed);
  if (buffer) ReleaseBuffer(buffer);
}

// --- loading ------------------------------------------------------------------

int FindLoadedCupti(struct dl_phdr_info* info, size_t, void* out) {
  const char* name = info->dlpi_name;
  const char* base = name ? strrchr(name, '/') : nullptr;
  if (base && !strncmp(base + 1, "libcupti.so", 11)) {
    CopyString(static_cast<char*>(out), 4096, name);
    return 1;
  }
  return 0;
}

// Appends "; path" to the list of places tried (for the message).
void NoteTried(char* tried, size_t cap, const char* path) {
  size_t n = strlen(tried);
  if (n + 4 >= cap) return;
  if (n) n += CopyString(tried + n, cap - n, ", ");
  CopyString(tried + n, cap - n, path);
}

void* TryOpen(const char* path, char* tried, size_t cap) {
  NoteTried(tried, cap, path);
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h) CopyString(g_lib_path, sizeof g_lib_path, path);
  return h;
}

// The libcupti that belongs to the loaded runtime: one already in the
// process (torch links it; a second copy would fight the first), else
// PINSCOPE_CUPTI_PATH, else next to libcudart (pip wheels: nvidia/cu13/lib;
// CUDA 12 wheels keep it in the sibling package cuda_cupti), else the
// toolkit's extras/CUPTI/lib64, else the loader's search path.
void* LoadCupti(int major, char* tried, size_t cap) {
  char path[4096] = {};
  dl_iterate_phdr(FindLoadedCupti, path);
  if (path[0]) {
    NoteTried(tried, cap, path);
    void* h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
    if (h) {
      CopyString(g_lib_path, sizeof g_lib_path, path);
      return h;
    }
  }
  const char* explicit_path = GetConfig().cupti_path;
  if (explicit_path[0]) return TryOpen(explicit_path, tried, cap);

  char so[32];
  size_t sn = CopyString(so, sizeof so, "libcupti.so.");
  FormatU64(so + sn, sizeof so - sn, static_cast<uint64_t>(major));

  char dir[4096] = {};
  Dl_info info;
  if (void* fn = ResolveCuda("cudaMemcpy"); fn && dladdr(fn, &info) && info.dli_fname) {
    CopyString(dir, sizeof dir, info.dli_fname);
    if (char* slash = strrchr(dir, '/')) {
      *slash = '\0';
    } else {
      dir[0] = '\0';
    }
  }
  if (dir[0]) {
    static const char* const kRelative[] = {
        "/", "/../extras/CUPTI/lib64/", "/../../../extras/CUPTI/lib64/", "/../../cuda_cupti/lib/"};
    for (const char* rel : kRelative) {
      size_t n = CopyString(path, sizeof path, dir);
      n += CopyString(path + n, sizeof path - n, rel);
      CopyString(path + n, sizeof path - n, so);
      if (access(path, R_OK) != 0) continue;
      if (void* h = TryOpen(path, tried, cap)) return h;
    }
  }
  return TryOpen(so, tried, cap);
}

template <typename Fn>
bool Resolve(Fn* out, const char* name, bool required, const char** missing) {
  *out = reinterpret_cast<Fn>(dlsym(g_handle, name));
  if (!*out && required && !*missing) *missing = name;
  return *out != nullptr;
}

// CUPTI API version -> CUDA major: v19..v28 are CUDA 12.x, then xxyyzz.
int CuptiMajor(uint32_t v) {
  if (v >= 100000) return static_cast<int>(v / 10000);
  if (v >= 19) return 12;
  return 11;
}

// Disables what pinscope enabled and the program did not ask for itself.
void DisableOurKinds() {
  uint64_t program = g_program_kinds.load();
  for (int i = 0; i < g_enabled_count; ++i) {
    int k = static_cast<int>(g_enabled[i]);
    if (k < 64 && (program >> k & 1)) continue;
    g_api.Disable(g_enabled[i]);
  }
  g_enabled_count = 0;
  // The program wants every runtime record: enabling the kind again undoes
  // pinscope's per-call restriction (the kind overrides the per-call setting).
  if (g_runtime_restricted && (program >> CUPTI_ACTIVITY_KIND_RUNTIME & 1))
    g_api.Enable(CUPTI_ACTIVITY_KIND_RUNTIME);
  g_runtime_restricted = false;
}

bool EnableKind(CUpti_ActivityKind kind, bool required, CUptiResult* rc) {
  *rc = g_api.Enable(kind);
  if (*rc == CUPTI_SUCCESS) {
    g_enabled[g_enabled_count++] = kind;
    return true;
  }
  return !required;
}

void AtExit() { CuptiFinish(); }

void WriteRecording(bool kernels, const char* reason, double rate, uint64_t planned_ns,
                    uint64_t now) {
  namespace r = f::recording;
  Packet p(f::packet::kRecording, now);
  p.e().Bool(r::kKernels, kernels);
  p.e().String(r::kReason, reason);
  p.e().Double(r::kKernelRate, rate);
  p.e().Varint(r::kPlannedNs, planned_ns);
  p.Commit();
}

// Auto kernel recording (see g_kernels_on); g_mu held, state active.
void SampleKernelsLocked() {
  const Config& cfg = GetConfig();
  if (cfg.cupti_kernels != KernelRecording::kAuto) return;
  const uint64_t now = MonoNs();
  const uint64_t period = uint64_t{cfg.flush_ms} * 1000000;
  const uint64_t total = g_kernel_records.load(std::memory_order_relaxed);
  if (g_kernels_on) {
    uint64_t elapsed = now - g_phase_start_ns;
    if (elapsed < period / 2) return;
    // Records arrive when a CUPTI buffer completes, so a low rate is seen
    // late; averaging over up to ten periods smooths that out. A high rate
    // fills buffers several times a period, so the last period alone is
    // trusted when it is well above the limit (a job's start-up, with few
    // kernels, must not delay the first switch).
    double rate = static_cast<double>(total - g_phase_records) * 1e9 / static_cast<double>(elapsed);
    const double limit = cfg.cupti_kernel_rate;
    if (g_tick_ns > g_phase_start_ns && now > g_tick_ns) {
      double recent = static_cast<double>(total - g_tick_records) * 1e9 /
                      static_cast<double>(now - g_tick_ns);
      if (recent > 2 * limit && recent > rate) {
        rate = recent;
        elapsed = now - g_tick_ns;
      }
    }
    g_tick_ns = now;
    g_tick_records = total;
    if (rate <= limit) {
      if (elapsed >= 10 * period) {
        g_phase_start_ns = now;
        g_phase_records = total;
      }
      return;
    }
    double blind = static_cast<double>(elapsed) * (rate / limit - 1.0);
    uint64_t blind_ns = static_cast<uint64_t>(
        std::clamp(blind, static_cast<double>(period), static_cast<double>(kMaxBlindPeriods * period)));
    if (g_api.Disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) return;
    g_kernels_on = false;
    g_blind_until_ns = now + blind_ns;
    WriteRecording(false, "sampling", rate, blind_ns, now);
  } else if (now + period / 2 >= g_blind_until_ns) {
    if (g_api.Enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) return;  // next period
    g_kernels_on = true;
    g_phase_start_ns = now;
    g_phase_records = total;
    WriteRecording(true, "window", 0, period, now);
  }
}

void ChildAfterFork() {
  // A forked child (DataLoader worker) does not inherit CUPTI's threads:
  // it must never touch the parent's half of it. Workers do not use CUDA.
  g_state.store(kOff);
  g_pushing.store(false);
  t_pushed = false;
  pthread_mutex_init(&g_mu, nullptr);
  pthread_mutex_init(&g_pool_mu, nullptr);
}

// Steps aside; g_mu held. Flushes pinscope's records first so nothing it
// collected lands in the program's buffers or is lost.
void StepAsideLocked(const char* why) {
  if (g_state.load() != kActive) return;
  g_pushing.store(false);
  g_api.FlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  DisableOurKinds();
  g_state.store(kAside);
  SayUnavailable(why);
}

void StartLocked() {
  const Config& cfg = GetConfig();
  if (!cfg.cupti) {
    g_state.store(kOff);  // PINSCOPE_CUPTI=0: not even loaded
    return;
  }
  char why[1200];
  auto fail = [&](const char* text) {
    g_state.store(kAside);
    SayUnavailable(text);
  };
  if (g_program_owns.load()) {
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
  g_handle = LoadCupti(major ? major : 13, tried, sizeof tried);
  if (!g_handle && major == 0) g_handle = LoadCupti(12, tried, sizeof tried);
  if (!g_handle) {
    snprintf(why, sizeof why, "libcupti.so.%d could not be loaded (tried %s); set "
             "PINSCOPE_CUPTI_PATH to the libcupti of the job's CUDA runtime",
             major ? major : 13, tried);
    fail(why);
    return;
  }
  const char* missing = nullptr;
  Resolve(&g_api.GetVersion, "cuptiGetVersion", true, &missing);
  Resolve(&g_api.GetResultString, "cuptiGetResultString", false, &missing);
  Resolve(&g_api.Enable, "cuptiActivityEnable", true, &missing);
  Resolve(&g_api.Disable, "cuptiActivityDisable", true, &missing);
  Resolve(&g_api.RegisterCallbacks, "cuptiActivityRegisterCallbacks", true, &missing);
  Resolve(&g_api.FlushAll, "cuptiActivityFlushAll", true, &missing);
  Resolve(&g_api.GetNextRecord, "cuptiActivityGetNextRecord", true, &missing);
  Resolve(&g_api.GetNumDropped, "cuptiActivityGetNumDroppedRecords", false, &missing);
  Resolve(&g_api.Push, "cuptiActivityPushExternalCorrelationId", true, &missing);
  Resolve(&g_api.Pop, "cuptiActivityPopExternalCorrelationId", true, &missing);
  Resolve(&g_api.GetTimestamp, "cuptiGetTimestamp", true, &missing);
  Resolve(&g_api.EnableRuntimeApi, "cuptiActivityEnableRuntimeApi", false, &missing);
  if (missing) {
    snprintf(why, sizeof why, "%s lacks %s", g_lib_path, missing);
    fail(why);
    return;
  }
  uint32_t version = 0;
  CUptiResult rc = g_api.GetVersion(&version);
  int cupti_major = CuptiMajor(version);
  if (rc != CUPTI_SUCCESS || cupti_major < 12 || (major && cupti_major != major)) {
    snprintf(why, sizeof why,
             "%s has CUPTI API version %u (CUDA %d), which does not match the CUDA %d runtime "
             "(pinscope needs CUPTI from CUDA 12 or newer, of the runtime's major version)",
             g_lib_path, version, cupti_major, major);
    fail(why);
    return;
  }
  MeasureOffset();
  rc = g_api.RegisterCallbacks(BufferRequested, BufferCompleted);
  if (rc != CUPTI_SUCCESS) {
    snprintf(why, sizeof why, "cuptiActivityRegisterCallbacks failed: %s (%d)", ResultText(rc),
             static_cast<int>(rc));
    fail(why);
    return;
  }
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
  const bool kernels = cfg.cupti_kernels != KernelRecording::kOff;
  for (const auto& k : kKinds) {
    if (k.kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && !kernels) continue;
    if (EnableKind(k.kind, k.required, &rc)) continue;
    snprintf(why, sizeof why, "cuptiActivityEnable(%s) failed: %s (%d)", k.name, ResultText(rc),
             static_cast<int>(rc));
    DisableOurKinds();
    fail(why);
    return;
  }
  // Runtime API records (see kRuntimeCbids), restricted to the hooked calls
  // where the CUPTI can (CUDA >= 12.5) and the program did not ask for all
  // of them itself; otherwise every runtime call makes a record (costlier).
  if (!EnableKind(CUPTI_ACTIVITY_KIND_RUNTIME, true, &rc)) {
    snprintf(why, sizeof why, "cuptiActivityEnable(RUNTIME) failed: %s (%d)", ResultText(rc),
             static_cast<int>(rc));
    DisableOurKinds();
    fail(why);
    return;
  }
  if (g_api.EnableRuntimeApi && !(g_program_kinds.load() >> CUPTI_ACTIVITY_KIND_RUNTIME & 1)) {
    g_runtime_restricted = true;
    for (CUpti_CallbackId cbid = 1; cbid < CUPTI_RUNTIME_TRACE_CBID_SIZE; ++cbid) {
      bool keep = false;
      for (CUpti_CallbackId k : kRuntimeCbids) keep = keep || k == cbid;
      if (!keep) g_api.EnableRuntimeApi(cbid, 0);
    }
  }
  // Runs before CUDA's and CUPTI's own exit handlers (registered earlier),
  // so the last buffers are flushed while CUPTI still works.
  atexit(AtExit);
  pthread_atfork(nullptr, nullptr, ChildAfterFork);
  g_kernels_on = kernels;
  g_phase_start_ns = MonoNs();
  g_phase_records = g_kernel_records.load();
  if (!kernels) WriteRecording(false, "disabled", 0, 0, g_phase_start_ns);
  g_state.store(kActive);
  g_pushing.store(true);
  snprintf(why, sizeof why, "device activity from %s (CUPTI API version %u)", g_lib_path,
           version);
  RecordNotice(f::kInfo, "cupti_started", why);
}

}  // namespace

// --- public -------------------------------------------------------------------

void CuptiStart() {
  int expected = kIdle;
  if (g_state.load(std::memory_order_relaxed) != kIdle) return;
  HookScope scope;
  pthread_mutex_lock(&g_mu);
  if (g_state.compare_exchange_strong(expected, kStarting)) StartLocked();
  pthread_mutex_unlock(&g_mu);
}

namespace cupti_internal {
void PushSlow(uint64_t call_id) {
  if (t_pushed) return;  // nested hook: the outer call's id stays
  HookScope scope;
  if (g_api.Push(kOurKind, call_id) == CUPTI_SUCCESS) t_pushed = true;
}

void PopSlow() {
  t_pushed = false;
  if (g_finalized.load(std::memory_order_relaxed)) return;
  HookScope scope;
  g_api.Pop(kOurKind, nullptr);
}
}  // namespace cupti_internal

void CuptiFlushPeriodic() {
  if (g_state.load(std::memory_order_relaxed) != kActive) return;
  HookScope scope;
  if (pthread_mutex_trylock(&g_mu) != 0) return;  // starting or stepping aside: next period
  if (g_state.load() == kActive) {
    MeasureOffset();
    g_api.FlushAll(0);
    SampleKernelsLocked();
  }
  pthread_mutex_unlock(&g_mu);
}

void CuptiFinish() {
  if (g_state.load(std::memory_order_relaxed) != kActive) return;
  HookScope scope;
  pthread_mutex_lock(&g_mu);
  if (g_state.load() == kActive) {
    g_pushing.store(false);
    MeasureOffset();
    g_api.FlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    g_state.store(kFinished);
    if (uint64_t dropped = g_dropped.load()) {
      char text[160];
      snprintf(text, sizeof text,
               "CUPTI dropped %llu device records (activity buffers full or refused)",
               static_cast<unsigned long long>(dropped));
      RecordNotice(f::kWarning, "cupti_dropped", text);
    }
  }
  pthread_mutex_unlock(&g_mu);
}

// Both run on the program's thread, outside any pinscope hook. They take
// g_mu so that a start in progress on another thread completes first (and
// is then undone) rather than registering after the program did.
CuptiFn CuptiProgramTakesOver(const char* fn_name) {
  HookScope scope;
  if (strcmp(fn_name, "cuptiActivityRegisterTimestampCallback") != 0) g_program_owns.store(true);
  pthread_mutex_lock(&g_mu);
  if (g_state.load() == kActive) {
    char why[256];
    snprintf(why, sizeof why,
             "the program called %s (torch.profiler or another profiler): pinscope leaves CUPTI "
             "to it from here on",
             fn_name);
    StepAsideLocked(why);
  }
  pthread_mutex_unlock(&g_mu);
  if (!strcmp(fn_name, "cuptiFinalize")) g_finalized.store(true);
  void* real = dlsym(RTLD_NEXT, fn_name);
  if (!real && g_handle) real = dlsym(g_handle, fn_name);
  return real;
}

CuptiFn CuptiProgramEnables(int kind, bool enable) {
  HookScope scope;
  pthread_mutex_lock(&g_mu);
  if (kind >= 0 && kind < 64) {
    if (enable) {
      g_program_kinds.fetch_or(1ull << kind);
    } else {
      g_program_kinds.fetch_and(~(1ull << kind));
    }
  }
  if (!enable && g_state.load() == kActive) {
    bool ours = false;
    for (int i = 0; i < g_enabled_count; ++i) ours = ours || static_cast<int>(g_enabled[i]) == kind;
    if (ours) StepAsideLocked("the program disabled a CUPTI activity kind pinscope records");
  }
  pthread_mutex_unlock(&g_mu);
  const char* name = enable ? "cuptiActivityEnable" : "cuptiActivityDisable";
  void* real = dlsym(RTLD_NEXT, name);
  if (!real && g_handle) real = dlsym(g_handle, name);
  return real;
}

}  // namespace pinscope::shim
