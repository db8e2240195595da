// Transparent pinning: a registration cache filled on a buffer's first
// copy and invalidated on free/realloc/munmap, fork and the program's own
// register calls. Design and measurements: docs/pinning.md.
//
// Locking: one mutex guards the table of pinned blocks; it is never held
// across a CUDA call (a block is marked kBusy while pinscope registers or
// unregisters it outside the lock) and never taken by the allocator hooks
// unless something is pinned.
#include "pinning.h"

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <sys/mman.h>

#include <atomic>
#include <cstring>

#include "clock.h"
#include "cuda_runtime.h"
#include "guard.h"
#include "host_facts.h"
#include "log.h"
#include "trace_fields.h"

namespace pinscope::shim {

// Weak default: no host-memory registry linked (core unit tests).
__attribute__((weak)) bool FindHostBuffer(uintptr_t, HostBuffer*) { return false; }

namespace {

namespace f = fields;

enum BlockState : uint8_t { kEmpty = 0, kBusy = 1, kPinned = 2 };

struct Block {
  uintptr_t base;
  size_t size;
  uint8_t state;
  bool shm;
  uint32_t in_use;       // copies between PinBeforeCopy and PinAfterCopy
  cudaEvent_t last_copy; // async mode: completes when the last copy did
};

constexpr int kMaxBlocks = 1024;
Block g_blocks[kMaxBlocks];
int g_high = 0;  // blocks [0, g_high) may be in use
pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
std::atomic<int> g_count{0};  // blocks not kEmpty
std::atomic<uint64_t> g_pinned_bytes{0};
uint64_t g_budget = 0;
bool g_allowed = true;  // false in a forked child of a CUDA process
std::atomic<bool> g_said_budget{false};
std::atomic<bool> g_said_init{false};
bool g_initialized = false;

RealFn<cudaError_t (*)(void*, size_t, unsigned int)> g_register("cudaHostRegister");
RealFn<cudaError_t (*)(void*)> g_unregister("cudaHostUnregister");
RealFn<cudaError_t (*)(cudaEvent_t*, unsigned int)> g_event_create("cudaEventCreateWithFlags");
RealFn<cudaError_t (*)(cudaEvent_t, cudaStream_t)> g_event_record("cudaEventRecord");
RealFn<cudaError_t (*)(cudaEvent_t)> g_event_sync("cudaEventSynchronize");
RealFn<cudaError_t (*)(cudaEvent_t)> g_event_destroy("cudaEventDestroy");
RealFn<cudaError_t (*)(cudaStream_t)> g_stream_sync("cudaStreamSynchronize");
RealFn<cudaError_t (*)(cudaStream_t, cudaStreamCaptureStatus*)> g_is_capturing(
    "cudaStreamIsCapturing");
RealFn<cudaError_t (*)(int*)> g_get_device("cudaGetDevice");
RealFn<cudaError_t (*)()> g_peek("cudaPeekAtLastError");
RealFn<cudaError_t (*)()> g_get_last("cudaGetLastError");

PINSCOPE_TLS cudaEvent_t t_events[16];

bool Enabled() { return GetConfig().pin != PinMode::kOff; }

void InitOnce() {
  if (g_initialized) return;
  g_initialized = true;
  const Config& c = GetConfig();
  if (c.pin_budget_explicit) {
    g_budget = c.pin_budget;
  } else {
    // A quarter of the memory this process may use: RAM, or the cgroup
    // limit when lower.
    uint64_t ram = MeminfoBytes("MemTotal:");
    uint64_t cg = CgroupMemoryLimit();
    uint64_t base = cg && cg < ram ? cg : ram;
    g_budget = base / 4;
  }
}

// Runs a CUDA call that may fail without leaving its error in the
// program's sticky last-error slot (unless one was already pending).
template <typename Call>
cudaError_t Quiet(Call&& call) {
  auto peek = g_peek.get();
  auto get_last = g_get_last.get();
  bool clean = peek && peek() == cudaSuccess;
  cudaError_t rc = call();
  if (rc != cudaSuccess && clean && get_last) get_last();
  return rc;
}

void Emit(uint32_t op, uintptr_t addr, size_t size, uint64_t dur, int rc, const char* reason,
          uint64_t t) {
  PinRecord r;
  r.op = op;
  r.address = addr;
  r.size = size;
  r.duration_ns = dur;
  r.result = rc;
  r.pinned_bytes = g_pinned_bytes.load(std::memory_order_relaxed);
  r.reason = reason;
  r.t = t;
  RecordPin(r);
}

// Index of the kPinned/kBusy block containing p, or -1. Lock held.
int FindLocked(uintptr_t p) {
  for (int i = 0; i < g_high; ++i) {
    const Block& b = g_blocks[i];
    if (b.state != kEmpty && p >= b.base && p < b.base + b.size) return i;
  }
  return -1;
}

int AllocSlotLocked() {
  for (int i = 0; i < kMaxBlocks; ++i) {
    if (g_blocks[i].state == kEmpty) {
      if (i >= g_high) g_high = i + 1;
      return i;
    }
  }
  return -1;
}

void FreeSlotLocked(int i) {
  g_blocks[i] = Block{};
  g_count.fetch_sub(1, std::memory_order_relaxed);
  while (g_high > 0 && g_blocks[g_high - 1].state == kEmpty) --g_high;
}

// Unregisters block i, which the caller marked kBusy; then frees the slot.
void UnpinBusy(int i, const char* reason) {
  Block b = g_blocks[i];  // stable: kBusy blocks are only touched by us
  if (b.last_copy) {
    if (auto sync = g_event_sync.get()) Quiet([&] { return sync(b.last_copy); });
    if (auto destroy = g_event_destroy.get()) Quiet([&] { return destroy(b.last_copy); });
  }
  uint64_t t0 = MonoNs();
  cudaError_t rc = cudaErrorUnknown;
  if (auto unreg = g_unregister.get())
    rc = Quiet([&] { return unreg(reinterpret_cast<void*>(b.base)); });
  uint64_t t1 = MonoNs();
  pthread_mutex_lock(&g_mu);
  FreeSlotLocked(i);
  g_pinned_bytes.fetch_sub(b.size, std::memory_order_relaxed);
  pthread_mutex_unlock(&g_mu);
  BumpPointerGeneration();
  Emit(f::kUnregister, b.base, b.size, t1 - t0, rc, reason, t0);
}

// Unpins every block overlapping [p, p+n) (n == 0: the block starting at p).
void UnpinRange(uintptr_t p, size_t n, const char* reason) {
  if (g_count.load(std::memory_order_relaxed) == 0) return;
  for (;;) {
    int victim = -1;
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < g_high && victim < 0; ++i) {
      Block& b = g_blocks[i];
      if (b.state != kPinned) continue;
      bool hit = n == 0 ? b.base == p : (b.base < p + n && p < b.base + b.size);
      if (hit) {
        b.state = kBusy;
        victim = i;
      }
    }
    pthread_mutex_unlock(&g_mu);
    if (victim < 0) return;
    UnpinBusy(victim, reason);
  }
}

cudaEvent_t ThreadEvent() {
  int dev = 0;
  if (auto gd = g_get_device.get()) gd(&dev);
  if (dev < 0 || dev >= 16) return nullptr;
  if (!t_events[dev]) {
    if (auto create = g_event_create.get())
      Quiet([&] { return create(&t_events[dev], cudaEventDisableTiming); });
  }
  return t_events[dev];
}

bool IsAsyncApi(uint32_t api) {
  return api == f::kMemcpyAsync || api == f::kMemcpy2DAsync || api == f::kMemcpy3DAsync ||
         api == f::kMemcpyBatchAsync;
}

}  // namespace

uint64_t PinnedBytes() { return g_pinned_bytes.load(std::memory_order_relaxed); }

PinTicket PinBeforeCopy(CopyRecord* r) {
  PinTicket t;
  uint64_t host = 0;
  uint32_t* kind = nullptr;
  if (r->direction == f::kH2D) {
    host = r->src_address;
    kind = &r->src_kind;
  } else if (r->direction == f::kD2H) {
    host = r->dst_address;
    kind = &r->dst_kind;
  }
  if (!host) return t;
  // Memory pinscope pinned is the program's pageable memory.
  if (g_count.load(std::memory_order_relaxed) > 0) {
    pthread_mutex_lock(&g_mu);
    int i = FindLocked(host);
    if (i >= 0 && g_blocks[i].state == kPinned) {
      ++g_blocks[i].in_use;
      t.block = static_cast<uint64_t>(i) + 1;
    }
    pthread_mutex_unlock(&g_mu);
    if (t.block) {
      *kind = f::kPageable;
      r->pin = f::kPinCached;
      t.wait_after = GetConfig().pin == PinMode::kOn && IsAsyncApi(r->api);
      t.stream = r->stream;
      return t;
    }
  }
  if (*kind == f::kPinned) {
    r->pin = f::kPinByProgram;
    return t;
  }
  if (!Enabled() || *kind != f::kPageable || !g_allowed) return t;
  InitOnce();
  HostBuffer buf;
  if (!FindHostBuffer(host, &buf) || host + r->bytes > buf.base + buf.size) {
    r->pin = f::kPinSkippedUnknownBuffer;
    return t;
  }
  if (buf.size < GetConfig().pin_min) {
    r->pin = f::kPinSkippedSmall;
    return t;
  }
  if (auto cap = g_is_capturing.get()) {
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    if (Quiet([&] { return cap(reinterpret_cast<cudaStream_t>(r->stream), &st); }) !=
            cudaSuccess ||
        st != cudaStreamCaptureStatusNone) {
      r->pin = f::kPinSkippedCapture;
      return t;
    }
  }
  pthread_mutex_lock(&g_mu);
  int slot = -1;
  bool over_budget = g_pinned_bytes.load(std::memory_order_relaxed) + buf.size > g_budget;
  if (!over_budget && FindLocked(host) < 0) slot = AllocSlotLocked();
  if (slot >= 0) {
    g_blocks[slot] = Block{buf.base, buf.size, kBusy, buf.shm, 0, nullptr};
    g_count.fetch_add(1, std::memory_order_relaxed);
    g_pinned_bytes.fetch_add(buf.size, std::memory_order_relaxed);
  }
  pthread_mutex_unlock(&g_mu);
  if (slot < 0) {
    r->pin = over_budget ? f::kPinSkippedBudget : f::kPinSkippedCapture;
    if (over_budget) {
      LogOnce(&g_said_budget,
              "PINSCOPE_PIN_BUDGET (%llu MiB) is full: further buffers are copied pageable",
              static_cast<unsigned long long>(g_budget >> 20));
      Emit(f::kBudgetFull, buf.base, buf.size, 0, 0, "budget", MonoNs());
    }
    return t;
  }
  unsigned flags = cudaHostRegisterPortable | (buf.writable ? 0u : cudaHostRegisterReadOnly);
  uint64_t t0 = MonoNs();
  cudaError_t rc = cudaErrorUnknown;
  if (auto reg = g_register.get())
    rc = Quiet([&] { return reg(reinterpret_cast<void*>(buf.base), buf.size, flags); });
  uint64_t t1 = MonoNs();
  cudaEvent_t ev = nullptr;
  if (rc == cudaSuccess && GetConfig().pin == PinMode::kAsync) {
    if (auto create = g_event_create.get())
      Quiet([&] { return create(&ev, cudaEventDisableTiming); });
  }
  pthread_mutex_lock(&g_mu);
  if (rc == cudaSuccess) {
    g_blocks[slot].state = kPinned;
    g_blocks[slot].in_use = 1;
    g_blocks[slot].last_copy = ev;
  } else {
    FreeSlotLocked(slot);
    g_pinned_bytes.fetch_sub(buf.size, std::memory_order_relaxed);
  }
  pthread_mutex_unlock(&g_mu);
  if (rc != cudaSuccess) {
    r->pin = f::kPinFailed;
    Emit(f::kRegisterFailed, buf.base, buf.size, t1 - t0, rc, nullptr, t0);
    return t;
  }
  BumpPointerGeneration();
  Emit(f::kRegister, buf.base, buf.size, t1 - t0, rc, buf.shm ? "shm" : "malloc", t0);
  r->pin = f::kPinRegistered;
  t.block = static_cast<uint64_t>(slot) + 1;
  t.wait_after = GetConfig().pin == PinMode::kOn && IsAsyncApi(r->api);
  t.stream = r->stream;
  return t;
}

void PinAfterCopy(CopyRecord* r, PinTicket* t, int rc) {
  if (!t->block) return;
  int i = static_cast<int>(t->block - 1);
  cudaStream_t stream = reinterpret_cast<cudaStream_t>(t->stream);
  if (rc == cudaSuccess && t->wait_after) {
    // Pageable semantics: the call returns only once the host buffer may be
    // reused (H2D source consumed, D2H destination written). facts §6.
    PinWaitStream(t->stream);
  } else if (rc == cudaSuccess && GetConfig().pin == PinMode::kAsync) {
    pthread_mutex_lock(&g_mu);
    cudaEvent_t ev = g_blocks[i].last_copy;
    pthread_mutex_unlock(&g_mu);
    if (ev)
      if (auto rec = g_event_record.get()) Quiet([&] { return rec(ev, stream); });
  }
  pthread_mutex_lock(&g_mu);
  if (g_blocks[i].in_use) --g_blocks[i].in_use;
  pthread_mutex_unlock(&g_mu);
}

void PinWaitStream(uint64_t stream_value) {
  cudaStream_t stream = reinterpret_cast<cudaStream_t>(stream_value);
  cudaEvent_t ev = ThreadEvent();
  auto rec = g_event_record.get();
  auto sync = g_event_sync.get();
  if (ev && rec && sync && Quiet([&] { return rec(ev, stream); }) == cudaSuccess &&
      Quiet([&] { return sync(ev); }) == cudaSuccess)
    return;
  if (auto ss = g_stream_sync.get()) Quiet([&] { return ss(stream); });
}

bool PinOwnsRange(uintptr_t p, size_t n) {
  if (g_count.load(std::memory_order_relaxed) == 0) return false;
  bool hit = false;
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < g_high && !hit; ++i) {
    const Block& b = g_blocks[i];
    hit = b.state != kEmpty && b.base < p + (n ? n : 1) && p < b.base + b.size;
  }
  pthread_mutex_unlock(&g_mu);
  return hit;
}

void PinReleaseRange(void* p, size_t n, const char* reason) {
  UnpinRange(reinterpret_cast<uintptr_t>(p), n ? n : 1, reason);
}

bool PinProgramUnregister(void* p, int* rc) {
  if (g_count.load(std::memory_order_relaxed) == 0) return false;
  pthread_mutex_lock(&g_mu);
  int i = FindLocked(reinterpret_cast<uintptr_t>(p));
  pthread_mutex_unlock(&g_mu);
  if (i < 0) return false;
  // The program never registered this range: answer as CUDA answers for
  // unregistered memory, by asking it about memory that surely is not
  // registered, so the sticky error state matches too.
  static char never_registered;
  auto unreg = g_unregister.get();
  *rc = unreg ? unreg(&never_registered) : cudaErrorHostMemoryNotRegistered;
  return true;
}

void PinOnFree(void* p, const char* reason) {
  if (g_count.load(std::memory_order_relaxed) == 0 || !p) return;
  UnpinRange(reinterpret_cast<uintptr_t>(p), 0, reason);
}

void PinOnUnmap(void* p, size_t n) {
  if (g_count.load(std::memory_order_relaxed) == 0 || !p) return;
  UnpinRange(reinterpret_cast<uintptr_t>(p), n ? n : 1, "munmap");
}

void PinForkPrepare() {
  if (g_count.load(std::memory_order_relaxed) == 0) return;
  // The kernel copies pinned private pages at fork (facts §5): unpin them
  // first. Shared mappings are not copied and stay pinned.
  for (;;) {
    int victim = -1;
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < g_high && victim < 0; ++i) {
      if (g_blocks[i].state == kPinned && !g_blocks[i].shm) {
        g_blocks[i].state = kBusy;
        victim = i;
      }
    }
    pthread_mutex_unlock(&g_mu);
    if (victim < 0) return;
    UnpinBusy(victim, "fork");
  }
}

void PinForkChild() {
  // The blocks belong to the parent's CUDA context; the child never
  // unregisters them and never pins (it has no context of its own yet, and
  // CUDA does not survive fork).
  pthread_mutex_init(&g_mu, nullptr);
  memset(static_cast<void*>(g_blocks), 0, sizeof g_blocks);
  g_high = 0;
  g_count.store(0);
  g_pinned_bytes.store(0);
  memset(static_cast<void*>(t_events), 0, sizeof t_events);
  if (CudaSeen()) g_allowed = false;
}

}  // namespace pinscope::shim
