// The recycle list (pin_keep.h) and its hooks: PinTakeKept and PinNoteReuse
// on allocation, PinPeriodic's idle release. The list lives in PinState
// under its lock; g_pin_kept mirrors its length for the lock-free filters.
//
// Freed malloc blocks pinscope registered whole may be kept registered in
// a small recycle list (PINSCOPE_PIN_KEEP) and handed to the next
// allocation that fits, so a buffer allocated anew for every batch is
// registered once, not once per batch. Kept blocks count in the pinned
// bytes (and so against the budget), are released (unregistered, then
// really freed) when the list is full, when the budget needs their room,
// after kKeepIdleNs idle (flusher thread), and before fork.
#include "shim/pin/pin_keep.h"

#include "shim/base/clock.h"
#include "shim/base/config.h"
#include "shim/cuda/real_runtime.h"
#include "shim/memory/real_alloc.h"
#include "shim/pin/pin_cuda.h"
#include "shim/pin/pin_state.h"
#include "shim/pin/pin_unpin.h"
#include "shim/pin/pinning.h"
#include "shim/pin/pool.h"
#include "shim/record/recorder.h"
#include "shim/record/trace_fields.h"

namespace pinscope::shim {

namespace f = fields;

std::atomic<int> g_pin_kept{0};

namespace pinning {
namespace {

// Releases a block taken off the recycle list (its bytes already left
// kept_bytes): unregisters it, records the UNREGISTER, then gives the
// memory back to glibc (the program's HostFree was recorded when it freed
// the block). No lock held. `own_thread`: the caller's thread is pinscope's
// (the flusher), whose current device may be set to the block's.
void ReleaseKept(const Kept& k, const char* reason, bool own_thread) {
  PinState& s = Pins();
  if (own_thread) UseDeviceOnOwnThread(k.device);
  uint64_t t0, t1;
  cudaError_t rc = UnregisterRange(k.base, &t0, &t1);
  if (rc != cudaSuccess) {
    // The driver may keep it registered: it stays allocated (never given to
    // glibc, which could reuse or unmap it), back in the table as pinned so
    // that queries stay masked and a program register there tries again.
    pthread_mutex_lock(&s.mu);
    PlaceLocked(k.base, k.size, kPinned, false);  // full table: just kept allocated
    uint64_t held = s.pinned_bytes.load(std::memory_order_relaxed);
    pthread_mutex_unlock(&s.mu);
    NoteUnpinFailed(rc, k.size, reason);
    Emit(f::kUnregister, k.base, k.size, t1 - t0, rc, reason, held, t0);
    return;
  }
  pthread_mutex_lock(&s.mu);
  uint64_t after = GiveBackLocked(k.size);
  pthread_mutex_unlock(&s.mu);
  BumpPointerGeneration();
  // Before the free: once glibc has the memory, another thread may receive
  // it and register it, and that REGISTER must follow this UNREGISTER.
  Emit(f::kUnregister, k.base, k.size, t1 - t0, rc, reason, after, t0);
  alloc::g_real.free(reinterpret_cast<void*>(k.base));
}

// Takes kept block j off the list. Lock held.
Kept PopKeptLocked(int j) {
  PinState& s = Pins();
  Kept k = s.kept[j];
  for (int m = j + 1; m < s.kept_n; ++m) s.kept[m - 1] = s.kept[m];
  --s.kept_n;
  s.kept_bytes -= k.size;
  g_pin_kept.store(s.kept_n, std::memory_order_relaxed);
  return k;
}

// The byte cap of the recycle list: PINSCOPE_PIN_KEEP, at most a quarter
// of the budget.
uint64_t KeepCap() {
  uint64_t keep = GetConfig().pin_keep, quarter = PinBudget() / 4;
  return keep < quarter ? keep : quarter;
}

}  // namespace

void ReleaseKeptWhere(uint64_t need, uint64_t budget, uint64_t idle_before, const char* reason,
                      bool own_thread) {
  PinState& s = Pins();
  for (;;) {
    if (g_pin_kept.load(std::memory_order_relaxed) == 0) return;
    Kept k;
    bool take = false;
    pthread_mutex_lock(&s.mu);
    if (s.kept_n > 0) {
      if (need) {
        take = s.pinned_bytes.load(std::memory_order_relaxed) + need > budget;
      } else if (idle_before) {
        take = s.kept[0].since < idle_before;
      } else {
        take = true;
      }
      if (take) k = PopKeptLocked(0);
    }
    pthread_mutex_unlock(&s.mu);
    if (!take) return;
    ReleaseKept(k, reason, own_thread);
  }
}

bool TryKeep(uintptr_t p) {
  PinState& s = Pins();
  const Config& c = GetConfig();
  // Passive recorder: no allocation is recorded any more, so none could
  // take the block (a reuse must be recorded like a fresh allocation).
  // After a failed unregister nothing is kept: pinning is off.
  if (c.pin == PinMode::kOff || c.pin_keep == 0 || s.forked_from_cuda || !Recording() ||
      s.unpin_failed.load(std::memory_order_relaxed))
    return false;
  uint64_t cap = KeepCap();
  int i = -1;
  pthread_mutex_lock(&s.mu);
  if (s.forking.load(std::memory_order_acquire) == 0) {
    for (int j = 0; j < s.high && i < 0; ++j) {
      Block& b = s.blocks[j];
      if (b.state == kPinned && !b.shm && b.base == p && b.size <= cap) i = j;
    }
    // Busy from here: a copy racing with the free (a program bug) waits.
    if (i >= 0) s.blocks[i].state = kUnpinning;
  }
  pthread_mutex_unlock(&s.mu);
  if (i < 0) return false;
  int device = 0;
  QuietGetDevice(&device);
  Block b = WaitIdle(i);  // in-flight copies done, async events fired
  Kept evicted[kMaxKept];
  int n_evicted = 0;
  uint64_t now = MonoNs();
  pthread_mutex_lock(&s.mu);
  FreeSlotLocked(i);
  while (s.kept_n > 0 && (s.kept_n == kMaxKept || s.kept_bytes + b.size > cap))
    evicted[n_evicted++] = PopKeptLocked(0);
  s.kept[s.kept_n++] = Kept{b.base, b.size, now, device};
  s.kept_bytes += b.size;
  g_pin_kept.store(s.kept_n, std::memory_order_relaxed);
  uint64_t after = s.pinned_bytes.load(std::memory_order_relaxed);
  pthread_mutex_unlock(&s.mu);
  Emit(f::kRecycle, b.base, b.size, 0, 0, "free", after, now);
  for (int k = 0; k < n_evicted; ++k) ReleaseKept(evicted[k], "evict", false);
  return true;
}

}  // namespace pinning

using pinning::Emit;
using pinning::Kept;
using pinning::kKeepIdleNs;
using pinning::kPinned;
using pinning::Pins;
using pinning::PinState;
using pinning::PlaceLocked;
using pinning::PopKeptLocked;
using pinning::ReleaseKeptWhere;

bool PinTakeKept(size_t n, size_t alignment, KeptTake* out) {
  if (g_pin_kept.load(std::memory_order_relaxed) == 0) return false;
  PinState& s = Pins();
  if (n < GetConfig().pin_min || s.forked_from_cuda ||
      s.forking.load(std::memory_order_acquire) > 0)
    return false;
  bool taken = false;
  pthread_mutex_lock(&s.mu);
  int best = -1;
  for (int j = 0; j < s.kept_n; ++j) {
    const Kept& k = s.kept[j];
    if (k.size < n || k.size - n > n / 8) continue;
    if (alignment > 1 && k.base % alignment != 0) continue;
    if (best < 0 || k.size <= s.kept[best].size) best = j;  // tightest, then newest
  }
  if (best >= 0 && s.forking.load(std::memory_order_acquire) == 0) {
    // Kept bytes never left the pinned total: placed, not reserved.
    int slot = PlaceLocked(s.kept[best].base, s.kept[best].size, kPinned, false);
    if (slot >= 0) {
      Kept k = PopKeptLocked(best);
      out->base = k.base;
      out->size = k.size;
      out->pinned_after = s.pinned_bytes.load(std::memory_order_relaxed);
      taken = true;
    }
  }
  pthread_mutex_unlock(&s.mu);
  return taken;
}

void PinNoteReuse(const KeptTake& k) {
  Emit(f::kReuse, k.base, k.size, 0, 0, "malloc", k.pinned_after, MonoNs());
}

void PinPeriodic() {
  if (PoolOn()) PoolPeriodic();
  if (g_pin_kept.load(std::memory_order_relaxed) == 0) return;
  uint64_t now = MonoNs();
  if (now <= kKeepIdleNs) return;
  ReleaseKeptWhere(0, 0, now - kKeepIdleNs, "idle", true);
}

}  // namespace pinscope::shim
