// Unpinning (pin_unpin.h) and the hooks that trigger it: PinOnFree,
// PinOnUnmap, PinReleaseRange, PinProgramUnregister. While nothing is
// pinned each returns after a relaxed load (two for munmap), no lock.
#include "shim/pin/pin_unpin.h"

#include <stdio.h>

#include "shim/cuda/real_runtime.h"
#include "shim/pin/pin_ahead.h"
#include "shim/pin/pin_cuda.h"
#include "shim/pin/pin_keep.h"
#include "shim/pin/pinning.h"
#include "shim/pin/pool.h"
#include "shim/record/recorder.h"
#include "shim/record/trace_fields.h"

namespace pinscope::shim {

namespace f = fields;

namespace pinning {
namespace {

// Unregisters block i, which the caller marked kUnpinning: waits until no
// copy holds it and its async copies are done, then frees the slot and
// records the UNREGISTER. If CUDA refuses, the driver may still hold the
// registration: the block goes back to kPinned (its queries stay masked, a
// later release tries again, the program's register of the range makes
// pinscope try first), the UNREGISTER carries the error and pinning turns
// off (NoteUnpinFailed). Returns false then.
bool UnpinBusy(int i, const char* reason) {
  PinState& s = Pins();
  Block b = WaitIdle(i);
  uint64_t t0, t1;
  cudaError_t rc = UnregisterRange(b.base, &t0, &t1);
  if (rc != cudaSuccess) {
    pthread_mutex_lock(&s.mu);
    s.blocks[i].state = kPinned;
    uint64_t held = s.pinned_bytes.load(std::memory_order_relaxed);
    pthread_mutex_unlock(&s.mu);
    NoteUnpinFailed(rc, b.size, reason);
    Emit(f::kUnregister, b.base, b.size, t1 - t0, rc, reason, held, t0);
    return false;
  }
  pthread_mutex_lock(&s.mu);
  FreeSlotLocked(i);
  uint64_t after = GiveBackLocked(b.size);
  bool dropped = b.ahead && AheadOutcomeLocked(b.size, b.used);
  pthread_mutex_unlock(&s.mu);
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
  return true;
}

}  // namespace

Block WaitIdle(int i) {
  PinState& s = Pins();
  // Copies that took the block before it went kUnpinning finish first (the
  // window is one copy call, plus its wait under PINSCOPE_PIN=1).
  for (;;) {
    pthread_mutex_lock(&s.mu);
    uint32_t in_use = s.blocks[i].in_use;
    pthread_mutex_unlock(&s.mu);
    if (in_use == 0) break;
    ShortSleep();
  }
  pthread_mutex_lock(&s.mu);
  Block b = s.blocks[i];  // stable now: nobody else touches a kUnpinning block
  for (int k = 0; k < kEvents; ++k) s.blocks[i].ev[k] = nullptr;
  pthread_mutex_unlock(&s.mu);
  RelaxedCapture relaxed;
  for (int k = 0; k < kEvents; ++k) {
    if (!b.ev[k]) continue;
    QuietEventSynchronize(b.ev[k]);
    QuietEventDestroy(b.ev[k]);
  }
  return b;
}

void WaitBlockQuiet(int i) {
  PinState& s = Pins();
  cudaEvent_t ev[kEvents] = {};
  for (;;) {
    pthread_mutex_lock(&s.mu);
    uint32_t in_use = s.blocks[i].in_use;
    if (in_use == 0) {
      for (int k = 0; k < kEvents; ++k) {
        ev[k] = s.blocks[i].ev[k];
        s.blocks[i].ev[k] = nullptr;
      }
    }
    pthread_mutex_unlock(&s.mu);
    if (in_use == 0) break;
    ShortSleep();
  }
  bool any = false;
  for (cudaEvent_t e : ev) any = any || e;
  if (!any) return;
  RelaxedCapture relaxed;
  for (cudaEvent_t e : ev) {
    if (!e) continue;
    QuietEventSynchronize(e);
    QuietEventDestroy(e);
  }
}

bool UnpinWhere(uintptr_t p, size_t n, bool only_private, const char* reason) {
  PinState& s = Pins();
  if (s.count.load(std::memory_order_relaxed) == 0) return true;
  // Blocks CUDA refused to unregister in this call: not tried again here.
  uint64_t refused[kMaxBlocks / 64] = {};
  bool all_released = true;
  for (;;) {
    int victim = -1;
    bool pending = false;
    pthread_mutex_lock(&s.mu);
    for (int i = 0; i < s.high; ++i) {
      Block& b = s.blocks[i];
      // A pool slot's mapping leaves the pool (pin_pool.cc) before it is unpinned.
      if (b.state == kEmpty || b.pool) continue;
      bool hit = only_private ? !b.shm
                 : n == 0     ? b.base == p
                              : (b.base < p + n && p < b.base + b.size);
      if (!hit || (refused[i / 64] >> (i % 64) & 1)) continue;
      if (b.state == kFailed) {
        if (!only_private) FreeSlotLocked(i);  // nothing to unregister
      } else if (b.state != kPinned) {
        pending = true;
      } else if (victim < 0) {
        b.state = kUnpinning;
        victim = i;
      }
    }
    pthread_mutex_unlock(&s.mu);
    if (victim >= 0) {
      if (!UnpinBusy(victim, reason)) {
        refused[victim / 64] |= uint64_t{1} << (victim % 64);
        all_released = false;
      }
    } else if (pending) {
      ShortSleep();
    } else {
      return all_released;
    }
  }
}

}  // namespace pinning

using pinning::AheadCancelLocked;
using pinning::FindLocked;
using pinning::FreeSlotLocked;
using pinning::kFailed;
using pinning::Pins;
using pinning::PinState;
using pinning::Registered;
using pinning::TryKeep;
using pinning::UnpinWhere;
using pinning::UnregisterNeverRegistered;

void PinReleaseRange(void* p, size_t n, const char* reason) {
  if (PoolOn()) PoolDetachRange(reinterpret_cast<uintptr_t>(p), n ? n : 1);
  UnpinWhere(reinterpret_cast<uintptr_t>(p), n ? n : 1, false, reason);
}

bool PinProgramUnregister(void* p, int* rc) {
  PinState& s = Pins();
  if (s.count.load(std::memory_order_relaxed) == 0) return false;
  pthread_mutex_lock(&s.mu);
  int i = FindLocked(reinterpret_cast<uintptr_t>(p));
  bool ours = i >= 0 && Registered(s.blocks[i].state);
  // The program changes what is registered there: a refusal remembered
  // for this buffer may not hold any more.
  if (i >= 0 && s.blocks[i].state == kFailed) FreeSlotLocked(i);
  pthread_mutex_unlock(&s.mu);
  if (!ours) return false;
  // The program never registered this range: answer as CUDA answers for
  // unregistered memory, by asking it about memory that surely is not
  // registered, so the last-error state matches too.
  *rc = UnregisterNeverRegistered();
  return true;
}

bool PinOnFree(void* p, const char* reason, bool may_keep) {
  if (Pins().count.load(std::memory_order_relaxed) == 0 || !p) return false;
  if (may_keep && TryKeep(reinterpret_cast<uintptr_t>(p))) return true;
  // A block CUDA would not unregister stays registered and so may not go
  // back to glibc: reused by another allocation, or unmapped by glibc and
  // mapped anew, its pages could differ from those the driver pinned. It
  // stays allocated (pinning is off from here on, so this is bounded by
  // what was pinned).
  return !UnpinWhere(reinterpret_cast<uintptr_t>(p), 0, false, reason);
}

void PinOnUnmap(void* p, size_t n) {
  PinState& s = Pins();
  if (!p) return;
  if (s.ahead_pending.load(std::memory_order_relaxed) > 0) {
    pthread_mutex_lock(&s.mu);
    AheadCancelLocked(reinterpret_cast<uintptr_t>(p), n ? n : 1);
    pthread_mutex_unlock(&s.mu);
  }
  if (s.count.load(std::memory_order_relaxed) == 0) return;
  UnpinWhere(reinterpret_cast<uintptr_t>(p), n ? n : 1, false, "munmap");
}

}  // namespace pinscope::shim
