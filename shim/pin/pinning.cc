// Transparent pinning: a registration cache filled on a buffer's first
// copy and invalidated on free/realloc/munmap, fork and the program's own
// register calls. Design and measurements: docs/pinning.md.
//
// Freed malloc blocks pinscope registered whole may be kept registered in
// a small recycle list (PINSCOPE_PIN_KEEP) and handed to the next
// allocation that fits, so a buffer allocated anew for every batch is
// registered once, not once per batch. Kept blocks count in the pinned
// bytes (and so against the budget), are released (unregistered, then
// really freed) when the list is full, when the budget needs their room,
// after kKeepIdleNs idle (flusher thread), and before fork.
//
// Pin-ahead (PINSCOPE_PIN_AHEAD): a new shared-memory mapping of a size
// this process has already copied from a registered shm buffer (a
// DataLoader batch) is registered at once on pinscope's pin-ahead thread,
// not on the copying thread at its first copy: the main thread maps a
// batch when it receives it, often long before it copies it (batches wait
// in the loader's reorder buffer), so the copy finds it pinned. A munmap
// or MAP_FIXED over a queued mapping cancels it; one being registered is
// waited for, as for any busy block.
//
// Locking: one mutex guards the table of pinned blocks; it is never held
// across a CUDA call (a block is kRegistering/kUnpinning while pinscope
// calls CUDA for it outside the lock) and never taken by the allocator
// hooks unless something is pinned. A block is unregistered only once no
// copy holds it (in_use == 0) and, in async mode, once its completion
// events have fired.
#include "shim/pin/pinning.h"

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <atomic>
#include <cstring>

#include "shim/base/clock.h"
#include "shim/base/guard.h"
#include "shim/base/log.h"
#include "shim/cuda/real_runtime.h"
#include "shim/memory/block_registry.h"
#include "shim/memory/real_alloc.h"
#include "shim/record/host_facts.h"
#include "shim/record/trace_fields.h"

namespace pinscope::shim {

// FindHostBuffer is defined next to the registry (block_registry.cc).

namespace {

namespace f = fields;

// kRegistering and kUnpinning are "busy": pinscope is calling CUDA for the
// block outside the lock. A copy that meets a busy block cannot know whether
// the memory is registered while the copy runs, so it waits (pageable
// semantics whatever happens). kFailed remembers a buffer that
// cudaHostRegister refused, so its later copies do not pay for the attempt
// again (dropped with the buffer: free, realloc, munmap, program register).
enum BlockState : uint8_t {
  kEmpty = 0, kRegistering = 1, kPinned = 2, kUnpinning = 3, kFailed = 4
};

// Holds (or is about to hold, or still holds) a registration.
bool Registered(uint8_t state) { return state != kEmpty && state != kFailed; }

// Async mode: one completion event per stream that copied the block; a
// copy on a fifth stream waits instead (rare: a block is usually copied on
// one or two streams).
constexpr int kEvents = 4;

struct Block {
  uintptr_t base;
  size_t size;
  uint8_t state;
  bool shm;
  uint32_t in_use;  // copies between PinBefore* and PinAfter*
  bool ahead;       // registered by the pin-ahead thread
  bool used;        // a copy has used the block since it was registered
  cudaEvent_t ev[kEvents];
  uint64_t ev_stream[kEvents];
};

constexpr int kMaxBlocks = 1024;
Block g_blocks[kMaxBlocks];
int g_high = 0;  // blocks [0, g_high) may be in use
pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
std::atomic<int> g_count{0};                // blocks not kEmpty
std::atomic<uint64_t> g_pinned_bytes{0};    // written under g_mu (includes kRegistering)
bool g_budget_noted = false;                // BUDGET_FULL recorded since the budget last grew
std::atomic<int> g_forking{0};              // fork() in progress: no new registrations
bool g_allowed = true;                      // false in a forked child of a CUDA process
bool g_cuda_at_fork = false;                // CudaSeen() when fork was prepared
std::atomic<bool> g_said_budget{false};
std::atomic<uint64_t> g_budget{0};
std::atomic<bool> g_budget_ready{false};

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

// The recycle list, oldest first; under g_mu (g_pin_kept mirrors g_kept_n
// for the allocation hooks' lock-free filter).
constexpr int kMaxKept = 4;
constexpr uint64_t kKeepIdleNs = 2'000'000'000;
struct Kept {
  uintptr_t base;
  size_t size;     // bytes registered
  uint64_t since;  // MonoNs() when the program freed it
  int device;      // current device of the freeing thread
};
Kept g_kept[kMaxKept];
int g_kept_n = 0;
uint64_t g_kept_bytes = 0;

RealFn<cudaError_t (*)(int)> g_set_device("cudaSetDevice");
RealFn<cudaError_t (*)(cudaStreamCaptureMode*)> g_exchange_capture_mode(
    "cudaThreadExchangeStreamCaptureMode");

// One event per thread and device for PinWaitStream.
PINSCOPE_TLS cudaEvent_t t_events[16];

// Pin-ahead: the sizes of shm buffers this process registered at a copy
// (a DataLoader's batches have one size), the queue of new mappings of
// those sizes, and the thread that registers them. Under g_mu, except the
// atomics (filters for the mmap/munmap hooks, one relaxed load each).
constexpr int kAheadSizes = 8;
constexpr int kAheadQueue = 16;
struct AheadItem {
  uintptr_t base;
  size_t size;
  bool writable;
  bool live;  // false: unmapped before its turn
};
AheadItem g_ahead_q[kAheadQueue];
int g_ahead_head = 0, g_ahead_n = 0;
uint64_t g_ahead_sizes[kAheadSizes];  // 0: a slot whose size was dropped
int g_ahead_misses[kAheadSizes];      // ahead blocks of that size unmapped unused, in a row
int g_ahead_sizes_n = 0, g_ahead_sizes_next = 0;
// A size whose last kAheadMissLimit ahead registrations were all unmapped
// without a copy is dropped (until a copy registers a buffer of that size
// again): mappings of a batch size that are not batches cost at most that.
constexpr int kAheadMissLimit = 8;
int g_ahead_device = 0;  // device of the copy that taught a size
bool g_ahead_started = false;
std::atomic<bool> g_ahead_learned{false};  // some size known
std::atomic<int> g_ahead_pending{0};       // mirrors g_ahead_n
std::atomic<bool> g_ahead_stop{false};     // process exit: no new CUDA call
std::atomic<bool> g_ahead_in_cuda{false};  // the thread is inside a CUDA call
pthread_cond_t g_ahead_cv = PTHREAD_COND_INITIALIZER;

// Runs a CUDA call that may fail without leaving its error in the
// program's last-error slot (unless one of the program's was pending).
template <typename Call>
cudaError_t Quiet(Call&& call) {
  auto peek = g_peek.get();
  auto get_last = g_get_last.get();
  bool clean = peek && peek() == cudaSuccess;
  cudaError_t rc = call();
  if (rc != cudaSuccess && clean && get_last) get_last();
  return rc;
}

// pinscope registers and unregisters whenever the program's buffers come
// and go - at a copy, free, munmap or fork, on the pin-ahead and flusher
// threads - perhaps while a program thread captures a CUDA graph in the
// default (global) mode, which prohibits "potentially unsafe" calls in
// every thread: such a call would fail and could cost the program its
// capture. So those calls run in relaxed capture mode, the thread's own
// mode restored after (PyTorch guards its host allocations the same way).
class RelaxedCapture {
 public:
  RelaxedCapture() {
    if (auto exchange = g_exchange_capture_mode.get())
      ok_ = Quiet([&] { return exchange(&mode_); }) == cudaSuccess;
  }
  ~RelaxedCapture() {
    if (!ok_) return;
    if (auto exchange = g_exchange_capture_mode.get()) Quiet([&] { return exchange(&mode_); });
  }
  RelaxedCapture(const RelaxedCapture&) = delete;
  RelaxedCapture& operator=(const RelaxedCapture&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
  bool ok_ = false;
};

// cudaHostRegister of [base, base+size) (read-only for a read-only
// mapping), timed; relaxed capture mode.
cudaError_t RegisterRange(uintptr_t base, size_t size, bool writable, uint64_t* t0, uint64_t* t1) {
  unsigned flags = cudaHostRegisterPortable | (writable ? 0u : cudaHostRegisterReadOnly);
  RelaxedCapture relaxed;
  cudaError_t rc = cudaErrorUnknown;
  *t0 = MonoNs();
  if (auto reg = g_register.get())
    rc = Quiet([&] { return reg(reinterpret_cast<void*>(base), size, flags); });
  *t1 = MonoNs();
  return rc;
}

// cudaHostUnregister of base, timed; relaxed capture mode.
cudaError_t UnregisterRange(uintptr_t base, uint64_t* t0, uint64_t* t1) {
  RelaxedCapture relaxed;
  cudaError_t rc = cudaErrorUnknown;
  *t0 = MonoNs();
  if (auto unreg = g_unregister.get())
    rc = Quiet([&] { return unreg(reinterpret_cast<void*>(base)); });
  *t1 = MonoNs();
  return rc;
}

// On one of pinscope's own threads (flusher, pin-ahead): makes `device`
// current, so that a call for a block lands in the program's context.
void UseDeviceOnOwnThread(int device) {
  if (device < 0) return;
  int cur = -1;
  if (auto gd = g_get_device.get()) Quiet([&] { return gd(&cur); });
  if (cur != device)
    if (auto sd = g_set_device.get()) Quiet([&] { return sd(device); });
}

void Emit(uint32_t op, uintptr_t addr, size_t size, uint64_t dur, int rc, const char* reason,
          uint64_t pinned_after, uint64_t t) {
  PinRecord r;
  r.op = op;
  r.address = addr;
  r.size = size;
  r.duration_ns = dur;
  r.result = rc;
  r.pinned_bytes = pinned_after;
  r.reason = reason;
  r.t = t;
  RecordPin(r);
}

// Index of the non-empty block containing p, or -1. Lock held.
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

// A new block in the table for [base, base+size) in `state`; -1 if the
// table is full. Lock held.
int PlaceLocked(uintptr_t base, size_t size, uint8_t state, bool shm) {
  int slot = AllocSlotLocked();
  if (slot < 0) return -1;
  g_blocks[slot] = Block{};
  g_blocks[slot].base = base;
  g_blocks[slot].size = size;
  g_blocks[slot].state = state;
  g_blocks[slot].shm = shm;
  g_count.fetch_add(1, std::memory_order_relaxed);
  return slot;
}

// A new block, kRegistering, its bytes reserved in the pinned total; -1 if
// the table is full. Lock held.
int ReserveLocked(uintptr_t base, size_t size, bool shm) {
  int slot = PlaceLocked(base, size, kRegistering, shm);
  if (slot >= 0) g_pinned_bytes.fetch_add(size, std::memory_order_relaxed);
  return slot;
}

// size bytes are no longer pinned (an unregistration): returns the pinned
// total after. Lock held.
uint64_t GiveBackLocked(size_t size) {
  g_budget_noted = false;  // room again: the next refusal is news
  return g_pinned_bytes.fetch_sub(size, std::memory_order_relaxed) - size;
}

void FreeSlotLocked(int i) {
  g_blocks[i] = Block{};
  g_count.fetch_sub(1, std::memory_order_relaxed);
  while (g_high > 0 && g_blocks[g_high - 1].state == kEmpty) --g_high;
}

void ShortSleep() {
  timespec ts{0, 50 * 1000};
  nanosleep(&ts, nullptr);
}

// A block registered ahead is being unmapped, used by a copy or not.
// Returns true when that drops its size from pin-ahead. Lock held.
bool AheadOutcomeLocked(uint64_t size, bool used) {
  for (int k = 0; k < g_ahead_sizes_n; ++k) {
    if (g_ahead_sizes[k] != size) continue;
    if (used) {
      g_ahead_misses[k] = 0;
      return false;
    }
    if (++g_ahead_misses[k] < kAheadMissLimit) return false;
    g_ahead_sizes[k] = 0;
    g_ahead_misses[k] = 0;
    return true;
  }
  return false;
}

// Block i, which the caller marked kUnpinning, once no copy holds it and
// its async copies are done (its events are destroyed). Outside the lock.
Block WaitIdle(int i) {
  // Copies that took the block before it went kUnpinning finish first (the
  // window is one copy call, plus its wait under PINSCOPE_PIN=1).
  for (;;) {
    pthread_mutex_lock(&g_mu);
    uint32_t in_use = g_blocks[i].in_use;
    pthread_mutex_unlock(&g_mu);
    if (in_use == 0) break;
    ShortSleep();
  }
  pthread_mutex_lock(&g_mu);
  Block b = g_blocks[i];  // stable now: nobody else touches a kUnpinning block
  for (int k = 0; k < kEvents; ++k) g_blocks[i].ev[k] = nullptr;
  pthread_mutex_unlock(&g_mu);
  RelaxedCapture relaxed;
  for (int k = 0; k < kEvents; ++k) {
    if (!b.ev[k]) continue;
    if (auto sync = g_event_sync.get()) Quiet([&] { return sync(b.ev[k]); });
    if (auto destroy = g_event_destroy.get()) Quiet([&] { return destroy(b.ev[k]); });
  }
  return b;
}

// Unregisters block i, which the caller marked kUnpinning: waits until no
// copy holds it and its async copies are done, then frees the slot and
// records the UNREGISTER.
void UnpinBusy(int i, const char* reason) {
  Block b = WaitIdle(i);
  uint64_t t0, t1;
  cudaError_t rc = UnregisterRange(b.base, &t0, &t1);
  pthread_mutex_lock(&g_mu);
  FreeSlotLocked(i);
  uint64_t after = GiveBackLocked(b.size);
  bool dropped = b.ahead && AheadOutcomeLocked(b.size, b.used);
  pthread_mutex_unlock(&g_mu);
  BumpPointerGeneration();
  Emit(f::kUnregister, b.base, b.size, t1 - t0, rc, reason, after, t0);
  if (dropped) {
    char text[200];
    snprintf(text, sizeof text,
             "pin-ahead stops for %llu-byte mappings: the last %d registered ahead were unmapped "
             "without a copy (a copy of such a buffer starts it again)",
             static_cast<unsigned long long>(b.size), kAheadMissLimit);
    RecordNotice(f::kInfo, "pin_ahead_stopped", text);
  }
}

// Releases a block taken off the recycle list (its bytes already left
// g_kept_bytes): unregisters it, records the UNREGISTER, then gives the
// memory back to glibc (the program's HostFree was recorded when it freed
// the block). No lock held. `own_thread`: the caller's thread is pinscope's
// (the flusher), whose current device may be set to the block's.
void ReleaseKept(const Kept& k, const char* reason, bool own_thread) {
  if (own_thread) UseDeviceOnOwnThread(k.device);
  uint64_t t0, t1;
  cudaError_t rc = UnregisterRange(k.base, &t0, &t1);
  pthread_mutex_lock(&g_mu);
  uint64_t after = GiveBackLocked(k.size);
  pthread_mutex_unlock(&g_mu);
  BumpPointerGeneration();
  // Before the free: once glibc has the memory, another thread may receive
  // it and register it, and that REGISTER must follow this UNREGISTER.
  Emit(f::kUnregister, k.base, k.size, t1 - t0, rc, reason, after, t0);
  alloc::g_real.free(reinterpret_cast<void*>(k.base));
}

// Takes kept block j off the list. Lock held.
Kept PopKeptLocked(int j) {
  Kept k = g_kept[j];
  for (int m = j + 1; m < g_kept_n; ++m) g_kept[m - 1] = g_kept[m];
  --g_kept_n;
  g_kept_bytes -= k.size;
  g_pin_kept.store(g_kept_n, std::memory_order_relaxed);
  return k;
}

// Releases kept blocks, oldest first: all of them (need == 0 and
// idle_before == 0), those idle since before idle_before, or as many as it
// takes for pinned + need to fit `budget`.
void ReleaseKeptWhere(uint64_t need, uint64_t budget, uint64_t idle_before, const char* reason,
                      bool own_thread) {
  for (;;) {
    if (g_pin_kept.load(std::memory_order_relaxed) == 0) return;
    Kept k;
    bool take = false;
    pthread_mutex_lock(&g_mu);
    if (g_kept_n > 0) {
      if (need) {
        take = g_pinned_bytes.load(std::memory_order_relaxed) + need > budget;
      } else if (idle_before) {
        take = g_kept[0].since < idle_before;
      } else {
        take = true;
      }
      if (take) k = PopKeptLocked(0);
    }
    pthread_mutex_unlock(&g_mu);
    if (!take) return;
    ReleaseKept(k, reason, own_thread);
  }
}

// The byte cap of the recycle list: PINSCOPE_PIN_KEEP, at most a quarter
// of the budget.
uint64_t KeepCap() {
  uint64_t keep = GetConfig().pin_keep, quarter = PinBudget() / 4;
  return keep < quarter ? keep : quarter;
}

// Free of p: keeps it registered on the recycle list if it is a private
// block pinscope registered whole and it fits the caps (evicting the
// oldest kept blocks for room). False: the caller unpins it as usual.
bool TryKeep(uintptr_t p) {
  const Config& c = GetConfig();
  // Passive recorder: no allocation is recorded any more, so none could
  // take the block (a reuse must be recorded like a fresh allocation).
  if (c.pin == PinMode::kOff || c.pin_keep == 0 || !g_allowed || !Recording()) return false;
  uint64_t cap = KeepCap();
  int i = -1;
  pthread_mutex_lock(&g_mu);
  if (g_forking.load(std::memory_order_acquire) == 0) {
    for (int j = 0; j < g_high && i < 0; ++j) {
      Block& b = g_blocks[j];
      if (b.state == kPinned && !b.shm && b.base == p && b.size <= cap) i = j;
    }
    // Busy from here: a copy racing with the free (a program bug) waits.
    if (i >= 0) g_blocks[i].state = kUnpinning;
  }
  pthread_mutex_unlock(&g_mu);
  if (i < 0) return false;
  int device = 0;
  if (auto gd = g_get_device.get()) Quiet([&] { return gd(&device); });
  Block b = WaitIdle(i);  // in-flight copies done, async events fired
  Kept evicted[kMaxKept];
  int n_evicted = 0;
  uint64_t now = MonoNs();
  pthread_mutex_lock(&g_mu);
  FreeSlotLocked(i);
  while (g_kept_n > 0 && (g_kept_n == kMaxKept || g_kept_bytes + b.size > cap))
    evicted[n_evicted++] = PopKeptLocked(0);
  g_kept[g_kept_n++] = Kept{b.base, b.size, now, device};
  g_kept_bytes += b.size;
  g_pin_kept.store(g_kept_n, std::memory_order_relaxed);
  uint64_t after = g_pinned_bytes.load(std::memory_order_relaxed);
  pthread_mutex_unlock(&g_mu);
  Emit(f::kRecycle, b.base, b.size, 0, 0, "free", after, now);
  for (int k = 0; k < n_evicted; ++k) ReleaseKept(evicted[k], "evict", false);
  return true;
}

// Unpins every block overlapping [p, p+n) (n == 0: the block starting at
// p), or with only_private every private (non-shm) block. Returns once none
// is left: a block another thread is registering or unregistering right now
// is waited for (the caller may be about to give the memory back).
void UnpinWhere(uintptr_t p, size_t n, bool only_private, const char* reason) {
  if (g_count.load(std::memory_order_relaxed) == 0) return;
  for (;;) {
    int victim = -1;
    bool pending = false;
    pthread_mutex_lock(&g_mu);
    for (int i = 0; i < g_high; ++i) {
      Block& b = g_blocks[i];
      if (b.state == kEmpty) continue;
      bool hit = only_private ? !b.shm
                 : n == 0     ? b.base == p
                              : (b.base < p + n && p < b.base + b.size);
      if (!hit) continue;
      if (b.state == kFailed) {
        if (!only_private) FreeSlotLocked(i);  // nothing to unregister
      } else if (b.state != kPinned) {
        pending = true;
      } else if (victim < 0) {
        b.state = kUnpinning;
        victim = i;
      }
    }
    pthread_mutex_unlock(&g_mu);
    if (victim >= 0) {
      UnpinBusy(victim, reason);
    } else if (pending) {
      ShortSleep();
    } else {
      return;
    }
  }
}

cudaEvent_t ThreadEvent() {
  int dev = 0;
  if (auto gd = g_get_device.get()) Quiet([&] { return gd(&dev); });
  if (dev < 0 || dev >= 16) return nullptr;
  if (!t_events[dev]) {
    if (auto create = g_event_create.get())
      Quiet([&] { return create(&t_events[dev], cudaEventDisableTiming); });
  }
  return t_events[dev];
}

// Calls that may return before the copy is done when the host side is
// pinned; the blocking ones (cudaMemcpy, ...) are synchronous with respect
// to the host for pinned memory already.
bool IsAsyncApi(uint32_t api) {
  return api == f::kMemcpyAsync || api == f::kMemcpy2DAsync || api == f::kMemcpy3DAsync ||
         api == f::kMemcpyToSymbolAsync || api == f::kMemcpyFromSymbolAsync ||
         api == f::kMemcpyBatchAsync;
}

bool Capturing(uint64_t stream) {
  auto cap = g_is_capturing.get();
  if (!cap) return false;
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  cudaError_t rc = Quiet([&] { return cap(reinterpret_cast<cudaStream_t>(stream), &st); });
  return rc != cudaSuccess || st != cudaStreamCaptureStatusNone;
}

uint64_t DerivedBudget() {
  // A quarter of the memory this process may use: RAM, or the cgroup limit
  // when lower. Without /proc/meminfo: 1 GiB.
  uint64_t ram = MeminfoBytes("MemTotal:");
  uint64_t cg = CgroupMemoryLimit();
  uint64_t base = cg && (cg < ram || !ram) ? cg : ram;
  return base ? base / 4 : uint64_t{1} << 30;
}

// Async mode: records the completion of the copy just issued on `stream`
// in block i's event for that stream. Returns false when it could not
// (the caller then waits for the stream instead).
bool RecordBlockEvent(int i, uint64_t stream) {
  cudaEvent_t ev = nullptr;
  int free_k = -1;
  pthread_mutex_lock(&g_mu);
  for (int k = 0; k < kEvents; ++k) {
    if (g_blocks[i].ev[k] && g_blocks[i].ev_stream[k] == stream) ev = g_blocks[i].ev[k];
    if (!g_blocks[i].ev[k] && free_k < 0) free_k = k;
  }
  pthread_mutex_unlock(&g_mu);
  if (!ev) {
    if (free_k < 0) return false;  // a fifth stream
    auto create = g_event_create.get();
    if (!create || Quiet([&] { return create(&ev, cudaEventDisableTiming); }) != cudaSuccess)
      return false;
    // Install it unless another thread did meanwhile (the block is in use,
    // so it stays put; only its event slots may change).
    cudaEvent_t spare = nullptr;
    pthread_mutex_lock(&g_mu);
    int k = -1;
    for (int j = 0; j < kEvents && k < 0; ++j)
      if (g_blocks[i].ev[j] && g_blocks[i].ev_stream[j] == stream) k = j;
    if (k >= 0) {
      spare = ev;
      ev = g_blocks[i].ev[k];
    } else {
      for (int j = 0; j < kEvents && k < 0; ++j)
        if (!g_blocks[i].ev[j]) k = j;
      if (k >= 0) {
        g_blocks[i].ev[k] = ev;
        g_blocks[i].ev_stream[k] = stream;
      } else {
        spare = ev;
        ev = nullptr;
      }
    }
    pthread_mutex_unlock(&g_mu);
    if (spare)
      if (auto destroy = g_event_destroy.get()) Quiet([&] { return destroy(spare); });
    if (!ev) return false;
  }
  auto rec = g_event_record.get();
  return rec && Quiet([&] { return rec(ev, reinterpret_cast<cudaStream_t>(stream)); }) ==
                    cudaSuccess;
}

// After a copy that used block i (ticket held): pageable semantics or, in
// async mode, the block's completion event.
void FinishUse(int i, uint64_t stream, bool wait) {
  if (wait || !RecordBlockEvent(i, stream)) PinWaitStream(stream);
}

void Release(int i) {
  pthread_mutex_lock(&g_mu);
  if (g_blocks[i].in_use) --g_blocks[i].in_use;
  pthread_mutex_unlock(&g_mu);
}

// The host side of a copy record: address and kind slot, or 0.
uint64_t HostSide(CopyCall* r, uint32_t** kind) {
  if (r->direction == f::kH2D) {
    *kind = &r->src_kind;
    return r->src_address;
  }
  if (r->direction == f::kD2H) {
    *kind = &r->dst_kind;
    return r->dst_address;
  }
  return 0;
}

// --- pin-ahead -------------------------------------------------------------

// Marks queued mappings overlapping [p, p+n) dead (they are being unmapped).
// Lock held.
void AheadCancelLocked(uintptr_t p, size_t n) {
  for (int k = 0; k < g_ahead_n; ++k) {
    AheadItem& it = g_ahead_q[(g_ahead_head + k) % kAheadQueue];
    if (it.live && it.base < p + n && p < it.base + it.size) it.live = false;
  }
}

// Registers one queued mapping, as a copy's first use would (same budget,
// same table, same PinEvent, reason "shm_ahead"). Lock held on entry and
// on return; released around the CUDA call.
void AheadRegisterLocked(const AheadItem& it) {
  if (g_forking.load(std::memory_order_acquire) > 0 || !g_allowed || FindLocked(it.base) >= 0)
    return;
  uint64_t budget = PinBudget();  // ready: a copy registered before any item was queued
  if (g_pinned_bytes.load(std::memory_order_relaxed) + it.size > budget) return;
  int slot = ReserveLocked(it.base, it.size, true);
  if (slot < 0) return;
  int device = g_ahead_device;
  g_ahead_in_cuda.store(true, std::memory_order_seq_cst);
  pthread_mutex_unlock(&g_mu);
  cudaError_t rc = cudaErrorUnknown;
  uint64_t t0 = 0, t1 = 0;
  bool called = !g_ahead_stop.load(std::memory_order_seq_cst);  // not once exit began
  if (called) {
    UseDeviceOnOwnThread(device);
    rc = RegisterRange(it.base, it.size, it.writable, &t0, &t1);
  }
  g_ahead_in_cuda.store(false, std::memory_order_seq_cst);
  if (rc == cudaSuccess) {
    // Recorded while the block is still busy, so that the UNREGISTER of a
    // munmap racing with it (which waits for kPinned) comes after it.
    BumpPointerGeneration();
    Emit(f::kRegister, it.base, it.size, t1 - t0, rc, "shm_ahead",
         g_pinned_bytes.load(std::memory_order_relaxed), t0);
    pthread_mutex_lock(&g_mu);
    g_blocks[slot].state = kPinned;
    g_blocks[slot].ahead = true;
    return;
  }
  // Not remembered as refused (kFailed): the copy tries again itself, so a
  // failure here never changes what the copy does.
  pthread_mutex_lock(&g_mu);
  FreeSlotLocked(slot);
  uint64_t after = g_pinned_bytes.fetch_sub(it.size, std::memory_order_relaxed) - it.size;
  pthread_mutex_unlock(&g_mu);
  if (called) Emit(f::kRegisterFailed, it.base, it.size, t1 - t0, rc, "shm_ahead", after, t0);
  pthread_mutex_lock(&g_mu);
}

void* AheadMain(void*) {
  ++t_hook_depth;  // nothing this thread does is the program's
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  pthread_mutex_lock(&g_mu);
  for (;;) {
    while (g_ahead_n == 0 && !g_ahead_stop.load(std::memory_order_relaxed))
      pthread_cond_wait(&g_ahead_cv, &g_mu);
    if (g_ahead_stop.load(std::memory_order_relaxed)) break;
    AheadItem it = g_ahead_q[g_ahead_head];
    g_ahead_head = (g_ahead_head + 1) % kAheadQueue;
    --g_ahead_n;
    g_ahead_pending.store(g_ahead_n, std::memory_order_relaxed);
    if (it.live) AheadRegisterLocked(it);
  }
  pthread_mutex_unlock(&g_mu);
  return nullptr;
}

// Is `size` one of the learned batch sizes? Lock held.
bool KnownSizeLocked(uint64_t size) {
  for (int k = 0; k < g_ahead_sizes_n; ++k)
    if (g_ahead_sizes[k] == size) return true;
  return false;
}

// A copy registered an shm buffer of `size` bytes: later mappings of that
// size are registered ahead. Starts the thread the first time. Called
// from a copy hook (no lock held).
void AheadLearn(uint64_t size) {
  const Config& c = GetConfig();
  if (!c.pin_ahead || c.pin == PinMode::kOff) return;
  int device = 0;
  if (auto gd = g_get_device.get()) Quiet([&] { return gd(&device); });
  bool start = false;
  pthread_mutex_lock(&g_mu);
  if (!KnownSizeLocked(size)) {
    int slot = -1;  // a dropped size's slot first, else the oldest
    for (int k = 0; k < g_ahead_sizes_n && slot < 0; ++k)
      if (g_ahead_sizes[k] == 0) slot = k;
    if (slot < 0) {
      slot = g_ahead_sizes_next;
      g_ahead_sizes_next = (g_ahead_sizes_next + 1) % kAheadSizes;
      if (g_ahead_sizes_n < kAheadSizes) ++g_ahead_sizes_n;
    }
    g_ahead_sizes[slot] = size;
    g_ahead_misses[slot] = 0;
  }
  g_ahead_device = device;
  if (!g_ahead_started) start = g_ahead_started = true;
  pthread_mutex_unlock(&g_mu);
  if (start) {
    pthread_t th;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    if (pthread_create(&th, &attr, AheadMain, nullptr) == 0) {
      pthread_setname_np(th, "pinscope-pin");
      g_ahead_learned.store(true, std::memory_order_release);
      // Registered after the CUDA runtime's own exit handlers (CUDA is in
      // use by now), so it runs before them: no registration is under way
      // while CUDA tears down.
      atexit(PinAheadStop);
    }
    pthread_attr_destroy(&attr);
  }
}

}  // namespace

std::atomic<int> g_pin_kept{0};

uint64_t PinnedBytes() { return g_pinned_bytes.load(std::memory_order_relaxed); }

uint64_t PinBudget() {
  if (g_budget_ready.load(std::memory_order_acquire)) return g_budget.load(std::memory_order_relaxed);
  const Config& c = GetConfig();
  uint64_t b = c.pin_budget_explicit ? c.pin_budget : DerivedBudget();
  g_budget.store(b, std::memory_order_relaxed);  // racing threads store the same value
  g_budget_ready.store(true, std::memory_order_release);
  return b;
}

bool PinMayOwn() { return g_count.load(std::memory_order_relaxed) > 0; }

PinTicket PinBeforeCopy(CopyCall* r) {
  PinTicket t;
  uint32_t* kind = nullptr;
  uint64_t host = HostSide(r, &kind);
  if (!host) return t;
  const PinMode mode = GetConfig().pin;
  bool async_api = IsAsyncApi(r->api);
  t.stream = r->stream;
  // Memory pinscope pinned is the program's pageable memory.
  if (g_count.load(std::memory_order_relaxed) > 0) {
    int found = -1;
    uint8_t state = kEmpty;
    // A block being registered (by the pin-ahead thread, or another
    // thread's copy) is waited for: its registration takes less than the
    // pageable copy would, and the copy then runs pinned.
    for (int spins = 0;; ++spins) {
      pthread_mutex_lock(&g_mu);
      found = FindLocked(host);
      state = found >= 0 ? g_blocks[found].state : static_cast<uint8_t>(kEmpty);
      if (state == kPinned) {
        ++g_blocks[found].in_use;
        g_blocks[found].used = true;
      }
      pthread_mutex_unlock(&g_mu);
      if (state != kRegistering || spins == 100000) break;
      ShortSleep();
    }
    if (found >= 0 && state == kFailed) {
      r->pin = *kind == f::kPinned ? f::kPinByProgram : f::kPinFailed;
      return t;
    }
    if (found >= 0) {
      *kind = f::kPageable;
      if (state != kPinned) {
        // Being registered or unregistered by another thread right now:
        // whether the copy sees it pinned is a race, so wait either way.
        r->pin = f::kPinSkippedCapture;
        t.wait_after = async_api;
        return t;
      }
      t.block = static_cast<uint64_t>(found) + 1;
      r->pin = f::kPinCached;
      if (async_api && mode != PinMode::kAsync) {
        // Waiting on a capturing stream would invalidate the program's
        // capture (cudaEventSynchronize is not allowed there).
        if (Capturing(r->stream)) {
          r->pin = f::kPinSkippedCapture;
        } else {
          t.wait_after = true;
        }
      }
      return t;
    }
  }
  if (*kind == f::kPinned) {
    r->pin = f::kPinByProgram;
    return t;
  }
  if (mode == PinMode::kOff || *kind != f::kPageable || !g_allowed || !Recording()) return t;
  HostBuffer buf;
  if (!FindHostBuffer(host, &buf) || host + r->bytes > buf.base + buf.size) {
    r->pin = f::kPinSkippedUnknownBuffer;
    return t;
  }
  if (buf.size < GetConfig().pin_min) {
    r->pin = f::kPinSkippedSmall;
    return t;
  }
  if (g_forking.load(std::memory_order_acquire) > 0 || Capturing(r->stream)) {
    r->pin = f::kPinSkippedCapture;
    return t;
  }
  uint64_t budget = PinBudget();
  // Idle kept blocks give way to a buffer being copied now.
  if (g_pin_kept.load(std::memory_order_relaxed) > 0 && buf.size <= budget)
    ReleaseKeptWhere(buf.size, budget, 0, "budget", false);
  pthread_mutex_lock(&g_mu);
  int slot = -1;
  bool raced = FindLocked(host) >= 0;  // another thread is registering it
  bool forking = g_forking.load(std::memory_order_acquire) > 0;
  bool over_budget = false, say_full = false;
  uint64_t held = g_pinned_bytes.load(std::memory_order_relaxed);
  if (!raced && !forking) {
    over_budget = held + buf.size > budget;
    if (over_budget) {
      say_full = !g_budget_noted;
      g_budget_noted = true;
    } else {
      slot = ReserveLocked(buf.base, buf.size, buf.shm);
    }
  }
  pthread_mutex_unlock(&g_mu);
  if (slot < 0) {
    if (over_budget) {
      r->pin = f::kPinSkippedBudget;
      if (say_full) {
        LogOnce(&g_said_budget,
                "PINSCOPE_PIN_BUDGET (%llu MiB) is full: further buffers are copied pageable",
                static_cast<unsigned long long>(budget >> 20));
        Emit(f::kBudgetFull, buf.base, buf.size, 0, 0, "budget", held, MonoNs());
      }
    } else {
      // A busy block (raced), a fork under way, or a full table.
      *kind = f::kPageable;
      r->pin = f::kPinSkippedCapture;
      t.wait_after = raced && async_api;
    }
    return t;
  }
  uint64_t t0, t1;
  cudaError_t rc = RegisterRange(buf.base, buf.size, buf.writable, &t0, &t1);
  uint64_t after;
  pthread_mutex_lock(&g_mu);
  if (rc == cudaSuccess) {
    g_blocks[slot].state = kPinned;
    g_blocks[slot].in_use = 1;
    after = g_pinned_bytes.load(std::memory_order_relaxed);
  } else {
    g_blocks[slot].state = kFailed;
    after = g_pinned_bytes.fetch_sub(buf.size, std::memory_order_relaxed) - buf.size;
  }
  pthread_mutex_unlock(&g_mu);
  if (rc != cudaSuccess) {
    r->pin = f::kPinFailed;
    Emit(f::kRegisterFailed, buf.base, buf.size, t1 - t0, rc, buf.shm ? "shm" : "malloc", after,
         t0);
    return t;
  }
  BumpPointerGeneration();
  Emit(f::kRegister, buf.base, buf.size, t1 - t0, rc, buf.shm ? "shm" : "malloc", after, t0);
  if (buf.shm) AheadLearn(buf.size);
  r->pin = f::kPinRegistered;
  t.block = static_cast<uint64_t>(slot) + 1;
  // Capture was checked above: the stream is not capturing.
  t.wait_after = async_api && mode != PinMode::kAsync;
  return t;
}

void PinAfterCopy(CopyCall* r, PinTicket* t, int rc) {
  if (!t->block) {
    if (t->wait_after && rc == cudaSuccess) PinWaitStream(t->stream);
    return;
  }
  int i = static_cast<int>(t->block - 1);
  bool async_mode = GetConfig().pin == PinMode::kAsync;
  // Pageable semantics: the call returns only once the host buffer may be
  // reused (H2D source consumed, D2H destination written). facts section 6.
  // In async mode the block's event says when pinscope may unpin it.
  if (rc == cudaSuccess && IsAsyncApi(r->api) && (t->wait_after || async_mode))
    FinishUse(i, t->stream, t->wait_after);
  Release(i);
}

void PinBeforeBatch(void* const* dsts, const void* const* srcs, const size_t* sizes,
                    size_t count, uint64_t stream, PinBatchTicket* t) {
  t->n = 0;
  t->wait = false;
  t->stream = stream;
  if (g_count.load(std::memory_order_relaxed) == 0 || !dsts || !srcs) return;
  bool touched = false;
  pthread_mutex_lock(&g_mu);
  for (size_t e = 0; e < 2 * count; ++e) {
    uintptr_t p = reinterpret_cast<uintptr_t>(e % 2 ? srcs[e / 2] : dsts[e / 2]);
    int i = p ? FindLocked(p) : -1;
    if (i < 0 || g_blocks[i].state == kFailed) continue;
    touched = true;
    if (g_blocks[i].state != kPinned) {
      t->wait = true;
      continue;
    }
    bool held = false;
    for (int k = 0; k < t->n && !held; ++k) held = t->slot[k] == i;
    if (held) continue;
    if (t->n == PinBatchTicket::kMax) {
      t->wait = true;  // not held: the wait covers it
      continue;
    }
    ++g_blocks[i].in_use;
    g_blocks[i].used = true;
    t->slot[t->n] = i;
    t->base[t->n] = g_blocks[i].base;
    t->size[t->n] = g_blocks[i].size;
    ++t->n;
  }
  pthread_mutex_unlock(&g_mu);
  if (touched && GetConfig().pin != PinMode::kAsync) t->wait = !Capturing(stream);
}

void PinAfterBatch(PinBatchTicket* t, int rc) {
  // Even a failed batch may have issued some of its copies: wait anyway.
  (void)rc;
  bool async_mode = GetConfig().pin == PinMode::kAsync;
  bool waited = false;
  if (t->wait) {
    PinWaitStream(t->stream);
    waited = true;
  }
  for (int k = 0; k < t->n; ++k) {
    if (!waited && async_mode && !RecordBlockEvent(t->slot[k], t->stream)) {
      PinWaitStream(t->stream);
      waited = true;
    }
    Release(t->slot[k]);
  }
}

void PinNoteBatchCopy(const PinBatchTicket* t, CopyCall* r) {
  uint32_t* kind = nullptr;
  uint64_t host = HostSide(r, &kind);
  if (!host) return;
  for (int k = 0; k < t->n; ++k) {
    if (host >= t->base[k] && host < t->base[k] + t->size[k]) {
      *kind = f::kPageable;
      r->pin = f::kPinCached;
      return;
    }
  }
  if (*kind == f::kPinned) r->pin = f::kPinByProgram;
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
    hit = Registered(b.state) && b.base < p + (n ? n : 1) && p < b.base + b.size;
  }
  pthread_mutex_unlock(&g_mu);
  return hit;
}

void PinReleaseRange(void* p, size_t n, const char* reason) {
  UnpinWhere(reinterpret_cast<uintptr_t>(p), n ? n : 1, false, reason);
}

bool PinProgramUnregister(void* p, int* rc) {
  if (g_count.load(std::memory_order_relaxed) == 0) return false;
  pthread_mutex_lock(&g_mu);
  int i = FindLocked(reinterpret_cast<uintptr_t>(p));
  bool ours = i >= 0 && Registered(g_blocks[i].state);
  // The program changes what is registered there: a refusal remembered
  // for this buffer may not hold any more.
  if (i >= 0 && g_blocks[i].state == kFailed) FreeSlotLocked(i);
  pthread_mutex_unlock(&g_mu);
  if (!ours) return false;
  // The program never registered this range: answer as CUDA answers for
  // unregistered memory, by asking it about memory that surely is not
  // registered, so the last-error state matches too.
  static char never_registered;
  auto unreg = g_unregister.get();
  *rc = unreg ? unreg(&never_registered) : cudaErrorHostMemoryNotRegistered;
  return true;
}

bool PinOnFree(void* p, const char* reason, bool may_keep) {
  if (g_count.load(std::memory_order_relaxed) == 0 || !p) return false;
  if (may_keep && TryKeep(reinterpret_cast<uintptr_t>(p))) return true;
  UnpinWhere(reinterpret_cast<uintptr_t>(p), 0, false, reason);
  return false;
}

bool PinTakeKept(size_t n, size_t alignment, KeptTake* out) {
  if (g_pin_kept.load(std::memory_order_relaxed) == 0) return false;
  if (n < GetConfig().pin_min || !g_allowed || g_forking.load(std::memory_order_acquire) > 0)
    return false;
  bool taken = false;
  pthread_mutex_lock(&g_mu);
  int best = -1;
  for (int j = 0; j < g_kept_n; ++j) {
    const Kept& k = g_kept[j];
    if (k.size < n || k.size - n > n / 8) continue;
    if (alignment > 1 && k.base % alignment != 0) continue;
    if (best < 0 || k.size <= g_kept[best].size) best = j;  // tightest, then newest
  }
  if (best >= 0 && g_forking.load(std::memory_order_acquire) == 0) {
    // Kept bytes never left the pinned total: placed, not reserved.
    int slot = PlaceLocked(g_kept[best].base, g_kept[best].size, kPinned, false);
    if (slot >= 0) {
      Kept k = PopKeptLocked(best);
      out->base = k.base;
      out->size = k.size;
      out->pinned_after = g_pinned_bytes.load(std::memory_order_relaxed);
      taken = true;
    }
  }
  pthread_mutex_unlock(&g_mu);
  return taken;
}

void PinNoteReuse(const KeptTake& k) {
  Emit(f::kReuse, k.base, k.size, 0, 0, "malloc", k.pinned_after, MonoNs());
}

void PinPeriodic() {
  if (g_pin_kept.load(std::memory_order_relaxed) == 0) return;
  uint64_t now = MonoNs();
  if (now <= kKeepIdleNs) return;
  ReleaseKeptWhere(0, 0, now - kKeepIdleNs, "idle", true);
}

void PinOnUnmap(void* p, size_t n) {
  if (!p) return;
  if (g_ahead_pending.load(std::memory_order_relaxed) > 0) {
    pthread_mutex_lock(&g_mu);
    AheadCancelLocked(reinterpret_cast<uintptr_t>(p), n ? n : 1);
    pthread_mutex_unlock(&g_mu);
  }
  if (g_count.load(std::memory_order_relaxed) == 0) return;
  UnpinWhere(reinterpret_cast<uintptr_t>(p), n ? n : 1, false, "munmap");
}

void PinAheadOnMap(void* p, size_t n, bool writable) {
  if (!g_ahead_learned.load(std::memory_order_relaxed) || !p) return;
  if (!g_allowed || g_forking.load(std::memory_order_acquire) > 0 || !Recording()) return;
  uintptr_t base = reinterpret_cast<uintptr_t>(p);
  pthread_mutex_lock(&g_mu);
  if (KnownSizeLocked(n) && g_ahead_n < kAheadQueue &&
      !g_ahead_stop.load(std::memory_order_relaxed)) {
    g_ahead_q[(g_ahead_head + g_ahead_n) % kAheadQueue] = AheadItem{base, n, writable, true};
    ++g_ahead_n;
    g_ahead_pending.store(g_ahead_n, std::memory_order_relaxed);
    pthread_cond_signal(&g_ahead_cv);
  }
  pthread_mutex_unlock(&g_mu);
}

namespace {
// Until the pin-ahead thread is out of its CUDA call (at most 2 s).
void WaitAheadOutOfCuda() {
  for (int spins = 0; g_ahead_in_cuda.load(std::memory_order_seq_cst) && spins < 40000; ++spins)
    ShortSleep();
}
}  // namespace

void PinAheadStop() {
  if (!g_ahead_learned.load(std::memory_order_relaxed)) return;
  g_ahead_stop.store(true, std::memory_order_seq_cst);
  pthread_mutex_lock(&g_mu);
  pthread_cond_broadcast(&g_ahead_cv);
  pthread_mutex_unlock(&g_mu);
  // A registration under way finishes before the process goes on exiting
  // (CUDA tears down in exit handlers); bounded, never forever.
  WaitAheadOutOfCuda();
}

void PinBeforeFork() {
  // New registrations are refused from here on (PinBeforeCopy checks under
  // the lock); those already under way finish first and are unpinned too.
  g_forking.fetch_add(1, std::memory_order_acq_rel);
  // The kernel copies pinned private pages at fork (facts section 5: 8 GiB
  // made one fork take 3.4 s): unpin them first. Shared mappings are not
  // copied and stay pinned. The parent pins them again on their next copy.
  UnpinWhere(0, 0, true, "fork");
  // The pin-ahead thread starts no registration now (g_forking); one under
  // way finishes first, so no CUDA call of pinscope's overlaps the fork.
  // The thread checks g_forking and raises g_ahead_in_cuda under g_mu: once
  // this lock/unlock is done, a registration that passed the check shows.
  pthread_mutex_lock(&g_mu);
  pthread_mutex_unlock(&g_mu);
  WaitAheadOutOfCuda();
  // Kept blocks are idle pinned private memory: released (unregistered and
  // freed), so the child neither inherits nor hands one out. After the
  // unpin above, which waited for a free that was moving its block onto
  // the list; no block joins the list while g_forking is set.
  ReleaseKeptWhere(0, 0, 0, "fork", false);
}

void PinAfterForkParent() { g_forking.fetch_sub(1, std::memory_order_acq_rel); }

void PinForkPrepare() {
  // No CUDA call here (see pinning.h): remember whether this process used
  // CUDA, for the child.
  g_cuda_at_fork = CudaSeen();
}

void PinForkChild() {
  // The blocks belong to the parent's CUDA context; the child never
  // unregisters them (its free/munmap of an inherited block is not
  // pinscope's business) and never pins if the parent used CUDA: the
  // parent's context does not survive fork and the child has none.
  pthread_mutex_init(&g_mu, nullptr);
  memset(static_cast<void*>(g_blocks), 0, sizeof g_blocks);
  g_high = 0;
  g_count.store(0);
  g_pinned_bytes.store(0);
  g_budget_noted = false;
  g_forking.store(0);
  // Normally empty (PinBeforeFork released them); after a fork that
  // bypassed the hook the parent's kept blocks stay allocated, unused.
  g_kept_n = 0;
  g_kept_bytes = 0;
  g_pin_kept.store(0);
  memset(static_cast<void*>(t_events), 0, sizeof t_events);
  // The pin-ahead thread is the parent's (threads do not survive fork).
  pthread_cond_init(&g_ahead_cv, nullptr);
  g_ahead_head = g_ahead_n = 0;
  g_ahead_sizes_n = g_ahead_sizes_next = 0;
  g_ahead_started = false;
  g_ahead_learned.store(false);
  g_ahead_pending.store(0);
  g_ahead_stop.store(false);
  g_ahead_in_cuda.store(false);
  if (g_cuda_at_fork || CudaSeen()) g_allowed = false;
}

}  // namespace pinscope::shim
