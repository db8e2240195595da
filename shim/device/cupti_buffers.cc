// CUPTI's activity buffers -> DeviceActivity, Correlation and kernel-name
// packets, in CLOCK_MONOTONIC. The callbacks run on CUPTI's worker thread or
// on the thread in cuptiActivityFlushAll: they never take mu.
#include <cupti_activity.h>
#include <string.h>
#include <sys/mman.h>

#include <cstddef>

#include "shim/base/clock.h"
#include "shim/base/guard.h"
#include "shim/device/cupti_state.h"
#include "shim/record/recorder.h"
#include "shim/record/trace_fields.h"

namespace pinscope::shim::cupti_internal {

namespace {

namespace f = fields;

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

}  // namespace

// --- clock ------------------------------------------------------------------

// CUPTI's clock is CLOCK_REALTIME on Linux unless some client registered a
// timestamp callback. pinscope does not register one: the callback is
// process-wide and would move torch.profiler's device times off its host
// times. Instead the offset to CLOCK_MONOTONIC is measured around one
// cuptiGetTimestamp call at start and again at every flush, so a clock step
// misplaces at most the records of one flush period (ToMono applies it).
void MeasureOffset() {
  CuptiState& s = Cupti();
  // Best of three: the narrowest bracket, so a preemption in between does
  // not skew the offset.
  uint64_t best_width = UINT64_MAX;
  int64_t offset = 0;
  for (int i = 0; i < 3; ++i) {
    uint64_t c = 0;
    uint64_t m0 = MonoNs();
    if (s.api.GetTimestamp(&c) != CUPTI_SUCCESS || c == 0) return;
    uint64_t m1 = MonoNs();
    if (m1 - m0 < best_width) {
      best_width = m1 - m0;
      offset = static_cast<int64_t>(c - (m0 + (m1 - m0) / 2));
    }
  }
  s.offset.store(offset, std::memory_order_relaxed);
}

namespace {

uint64_t ToMono(uint64_t cupti_ns) {
  if (cupti_ns == 0) return 0;
  return static_cast<uint64_t>(static_cast<int64_t>(cupti_ns) -
                               Cupti().offset.load(std::memory_order_relaxed));
}

}  // namespace

// --- buffers ----------------------------------------------------------------

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  HookScope scope;
  *buffer = nullptr;
  *size = 0;
  *max_records = 0;
  CuptiState& s = Cupti();
  pthread_mutex_lock(&s.pool_mu);
  uint8_t* b = nullptr;
  if (s.free_count > 0) {
    b = s.free_buffers[--s.free_count];
  } else if (s.live_buffers < kMaxBuffers) {
    void* p = mmap(nullptr, kBufferBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (p != MAP_FAILED) {
      b = static_cast<uint8_t*>(p);
      ++s.live_buffers;
    }
  }
  pthread_mutex_unlock(&s.pool_mu);
  if (b) {
    *buffer = b;
    *size = kBufferBytes;
  }
}

namespace {

void ReleaseBuffer(uint8_t* b) {
  CuptiState& s = Cupti();
  pthread_mutex_lock(&s.pool_mu);
  if (s.free_count < kFreeKept) {
    s.free_buffers[s.free_count++] = b;
    b = nullptr;
  } else {
    --s.live_buffers;
  }
  pthread_mutex_unlock(&s.pool_mu);
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
  CuptiState& s = Cupti();
  std::atomic<uint64_t>* table = __atomic_load_n(&s.name_ids, __ATOMIC_ACQUIRE);
  if (!table) {
    if (s.name_table_failed.load(std::memory_order_relaxed)) return true;
    void* p = mmap(nullptr, kNameSlots * sizeof(uint64_t), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      s.name_table_failed.store(true);
      return true;
    }
    std::atomic<uint64_t>* expected = nullptr;
    table = static_cast<std::atomic<uint64_t>*>(p);
    if (!__atomic_compare_exchange_n(&s.name_ids, &expected, table, false, __ATOMIC_ACQ_REL,
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

}  // namespace

// One record -> its packet (declared in cupti_state.h, so that
// tools/bench/device_cost_bench.cc can time it on synthesized records).
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
      Cupti().kernels.records.fetch_add(1, std::memory_order_relaxed);
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
  CuptiState& s = Cupti();
  if (buffer && valid > 0 && s.api.GetNextRecord) {
    CUpti_Activity* rec = nullptr;
    while (s.api.GetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS && rec) HandleRecord(rec);
  }
  size_t dropped = 0;
  if (s.api.GetNumDropped && s.api.GetNumDropped(ctx, stream, &dropped) == CUPTI_SUCCESS)
    s.dropped.fetch_add(dropped, std::memory_order_relaxed);
  if (buffer) ReleaseBuffer(buffer);
}

}  // namespace pinscope::shim::cupti_internal
