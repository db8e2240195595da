// Pinning's shared state in one object, PinState, reached through Pins():
// the table of pinned blocks, the pinned bytes and budget, the recycle list,
// the pin-ahead queue and the fork flags. Internal to shim/pin.
//
// Transparent pinning is a registration cache filled on a buffer's first
// copy and invalidated on free/realloc/munmap, fork and the program's own
// register calls. Design and measurements: docs/pinning.md. The files:
// pin_copy.cc (the copy hooks fill it), pin_unpin.cc (free, munmap, the
// program's register calls), pin_keep.cc (the recycle list), pin_ahead.cc
// (the pin-ahead thread), pin_fork.cc, pin_cuda.cc (every CUDA call).
//
// Contract. Locking: one mutex (PinState::mu) guards the fields that are
// not atomic; it is never held across a CUDA call (a block is
// kRegistering/kUnpinning while pinscope calls CUDA for it outside the
// lock) and never taken by the allocator hooks unless something is pinned.
// The atomics are the hooks' lock-free filters (one relaxed load each). A
// block is unregistered only once no copy holds it (in_use == 0) and, in
// async mode, once its completion events have fired. Memory: fixed size
// and constant-initialized, so the hooks may use it before any constructor
// has run; nothing here allocates through malloc.
#pragma once

#include <cuda_runtime_api.h>
#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace pinscope::shim::pinning {

// kRegistering and kUnpinning are "busy": pinscope is calling CUDA for the
// block outside the lock. A copy that meets a busy block cannot know whether
// the memory is registered while the copy runs, so it waits (pageable
// semantics whatever happens). kFailed remembers a buffer that
// cudaHostRegister refused, so its later copies do not pay for the attempt
// again (dropped with the buffer: free, realloc, munmap, program register).
enum BlockState : uint8_t {
  kEmpty = 0,
  kRegistering = 1,
  kPinned = 2,
  kUnpinning = 3,
  kFailed = 4
};

// Holds (or is about to hold, or still holds) a registration.
inline bool Registered(uint8_t state) { return state != kEmpty && state != kFailed; }

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
  bool pool;        // the owner's mapping of a pool slot (pin_pool.cc)
  cudaEvent_t ev[kEvents];
  uint64_t ev_stream[kEvents];
};

constexpr int kMaxBlocks = 1024;
constexpr int kPoolSlots = 64;  // pool::kSlots

// The recycle list (pin_keep.cc).
constexpr int kMaxKept = 4;
constexpr uint64_t kKeepIdleNs = 2'000'000'000;
struct Kept {
  uintptr_t base;
  size_t size;     // bytes registered
  uint64_t since;  // MonoNs() when the program freed it
  int device;      // current device of the freeing thread
};

// Pin-ahead (pin_ahead.cc).
constexpr int kAheadSizes = 8;
constexpr int kAheadQueue = 16;
struct AheadItem {
  uintptr_t base;
  size_t size;
  bool writable;
  bool live;  // false: unmapped before its turn
};
// A size whose last kAheadMissLimit ahead registrations were all unmapped
// without a copy is dropped (until a copy registers a buffer of that size
// again): mappings of a batch size that are not batches cost at most that.
constexpr int kAheadMissLimit = 8;

struct PinState {
  // The table of pinned blocks.
  Block blocks[kMaxBlocks]{};
  int high = 0;  // blocks [0, high) may be in use
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  std::atomic<int> count{0};              // blocks not kEmpty
  std::atomic<uint64_t> pinned_bytes{0};  // written under mu (includes kRegistering)
  bool budget_noted = false;              // BUDGET_FULL recorded since the budget last grew

  // fork() (pin_fork.cc).
  std::atomic<int> forking{0};    // fork() in progress: no new registrations
  bool forked_from_cuda = false;  // true in a forked child of a CUDA process: never pins
  bool cuda_at_fork = false;      // CudaSeen() when fork was prepared

  // Failures of pinscope's CUDA calls (pin_state.cc: NoteRegisterFailed,
  // NoteUnpinFailed). unpin_failed: a cudaHostUnregister of pinscope's
  // failed, the driver may keep that registration, so pinscope registers
  // nothing new (each block it holds is memory that might have to be kept
  // from the allocator to stay safe: bounded by what is pinned now).
  std::atomic<bool> unpin_failed{false};
  std::atomic<bool> said_unpin_failed{false};
  std::atomic<bool> said_register_failed{false};

  // The budget (PinBudget), computed once.
  std::atomic<bool> said_budget{false};
  std::atomic<uint64_t> budget{0};
  std::atomic<bool> budget_ready{false};

  // The recycle list, oldest first; under mu (g_pin_kept, pinning.h,
  // mirrors kept_n for the allocation hooks' lock-free filter).
  Kept kept[kMaxKept]{};
  int kept_n = 0;
  uint64_t kept_bytes = 0;

  // Pin-ahead: the sizes of shm buffers this process registered at a copy
  // (a DataLoader's batches have one size), the queue of new mappings of
  // those sizes, and the thread that registers them. Under mu, except the
  // atomics (filters for the mmap/munmap hooks, one relaxed load each).
  AheadItem ahead_q[kAheadQueue]{};
  int ahead_head = 0, ahead_n = 0;
  uint64_t ahead_sizes[kAheadSizes]{};  // 0: a slot whose size was dropped
  int ahead_misses[kAheadSizes]{};      // ahead blocks of that size unmapped unused, in a row
  int ahead_sizes_n = 0, ahead_sizes_next = 0;
  int ahead_device = 0;  // device of the copy that taught a size
  bool ahead_started = false;
  std::atomic<bool> ahead_learned{false};  // some size known
  std::atomic<int> ahead_pending{0};       // mirrors ahead_n
  std::atomic<bool> ahead_stop{false};     // process exit: no new CUDA call
  std::atomic<bool> ahead_in_cuda{false};  // the thread is inside a CUDA call
  pthread_cond_t ahead_cv = PTHREAD_COND_INITIALIZER;
  std::atomic<bool> pin_thread{false};  // the pinscope-pin thread runs (pin-ahead or the pool)

  // The pool (pin_pool.cc, PINSCOPE_PIN_POOL), in the owner: slots the pin
  // thread is asked to make (their table entries are kMaking), the device
  // to register them on, and the slots whose release is under way.
  int pool_req[kPoolSlots]{};
  int pool_req_n = 0;
  int pool_device = 0;
  bool pool_busy[kPoolSlots]{};
  // DataLoader epochs begun (PoolNoteLoader) whose first batch has not
  // missed yet, and the batches in flight the latest of them will keep.
  int pool_armed = 0, pool_hint = 0;
  // The batch sizes a copy of this process read by DMA from a registered
  // shm segment (PoolNoteCopied): the pool registers slots of those sizes
  // only. A miss of another size waits here (its size, the batches alive
  // then) until a copy reads one such batch, or gets plain slots
  // (pool_staged), or waits forever (pin_memory=True without the hook: the
  // program copies from torch's own pinned blocks, never from the batch).
  uint64_t pool_copied[kAheadSizes]{};
  int pool_copied_n = 0;
  uint64_t pool_wait_len = 0;
  int pool_wait_live = 0;
  // The latest epoch begun (the Python hook) runs with pin_memory=True: its
  // batches are read by torch's pin thread with a host copy, so a miss of a
  // size no copy reads gets plain slots (not registered) at once.
  bool pool_staged = false;
  std::atomic<bool> pool_failed{false};  // a slot could not be made: no more (said once)
  std::atomic<bool> said_pool{false};
};

// The one instance (pin_state.cc), never destroyed. Hidden, like every
// symbol of the shim, and declared so: Pins() then compiles to the same
// direct access as a file-local global, and the fast paths stay one load.
extern PinState g_pin_state __attribute__((visibility("hidden")));
inline PinState& Pins() { return g_pin_state; }

// --- the block table (lock held for each) ----------------------------------

// Index of the non-empty block containing p, or -1.
inline int FindLocked(uintptr_t p) {
  PinState& s = Pins();
  for (int i = 0; i < s.high; ++i) {
    const Block& b = s.blocks[i];
    if (b.state != kEmpty && p >= b.base && p < b.base + b.size) return i;
  }
  return -1;
}

// Index of a non-empty block overlapping [p, p+n), or -1.
inline int FindOverlapLocked(uintptr_t p, size_t n) {
  PinState& s = Pins();
  for (int i = 0; i < s.high; ++i) {
    const Block& b = s.blocks[i];
    if (b.state != kEmpty && b.base < p + n && p < b.base + b.size) return i;
  }
  return -1;
}

inline int AllocSlotLocked() {
  PinState& s = Pins();
  for (int i = 0; i < kMaxBlocks; ++i) {
    if (s.blocks[i].state == kEmpty) {
      if (i >= s.high) s.high = i + 1;
      return i;
    }
  }
  return -1;
}

// A new block in the table for [base, base+size) in `state`; -1 if the
// table is full.
inline int PlaceLocked(uintptr_t base, size_t size, uint8_t state, bool shm) {
  PinState& s = Pins();
  int slot = AllocSlotLocked();
  if (slot < 0) return -1;
  s.blocks[slot] = Block{};
  s.blocks[slot].base = base;
  s.blocks[slot].size = size;
  s.blocks[slot].state = state;
  s.blocks[slot].shm = shm;
  s.count.fetch_add(1, std::memory_order_relaxed);
  return slot;
}

// A new block, kRegistering, its bytes reserved in the pinned total; -1 if
// the table is full.
inline int ReserveLocked(uintptr_t base, size_t size, bool shm) {
  int slot = PlaceLocked(base, size, kRegistering, shm);
  if (slot >= 0) Pins().pinned_bytes.fetch_add(size, std::memory_order_relaxed);
  return slot;
}

// size bytes are no longer pinned (an unregistration): returns the pinned
// total after.
inline uint64_t GiveBackLocked(size_t size) {
  PinState& s = Pins();
  s.budget_noted = false;  // room again: the next refusal is news
  return s.pinned_bytes.fetch_sub(size, std::memory_order_relaxed) - size;
}

inline void FreeSlotLocked(int i) {
  PinState& s = Pins();
  s.blocks[i] = Block{};
  s.count.fetch_sub(1, std::memory_order_relaxed);
  while (s.high > 0 && s.blocks[s.high - 1].state == kEmpty) --s.high;
}

// --- shared helpers (pin_state.cc) ------------------------------------------

// Says once per process on stderr that cudaHostRegister refused a buffer
// (rc, its size): that buffer and any other it refuses are copied pageable.
// Not for cudaErrorHostMemoryAlreadyRegistered: the program registered that
// memory itself, and the copy is what it would be without pinscope.
void NoteRegisterFailed(cudaError_t rc, size_t size);
// A cudaHostUnregister of pinscope's failed (rc) while releasing a block of
// `size` bytes for `reason`: turns pinning off (unpin_failed) and says so
// once per process on stderr. The caller keeps the block registered.
void NoteUnpinFailed(cudaError_t rc, size_t size, const char* reason);

// 50 us: the wait for a busy block or a thread inside a CUDA call.
void ShortSleep();

// Records a PinEvent (recorder.h's PinRecord).
void Emit(uint32_t op, uintptr_t addr, size_t size, uint64_t dur, int rc, const char* reason,
          uint64_t pinned_after, uint64_t t);

}  // namespace pinscope::shim::pinning
