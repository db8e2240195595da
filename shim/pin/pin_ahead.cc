// Pin-ahead (pin_ahead.h): the learned sizes, the queue and the thread
// "pinscope-pin" that registers queued mappings. The thread drops the lock
// around its CUDA call and makes none once process exit or fork began.
//
// A new shared-memory mapping of a size this process has already copied
// from a registered shm buffer (a DataLoader batch) is registered at once
// on pinscope's pin-ahead thread, not on the copying thread at its first
// copy: the main thread maps a batch when it receives it, often long
// before it copies it (batches wait in the loader's reorder buffer), so
// the copy finds it pinned. A munmap or MAP_FIXED over a queued mapping
// cancels it; one being registered is waited for, as for any busy block.
#include "shim/pin/pin_ahead.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>

#include "shim/base/config.h"
#include "shim/base/guard.h"
#include "shim/base/own_cost.h"
#include "shim/cuda/real_runtime.h"
#include "shim/pin/pin_cuda.h"
#include "shim/pin/pin_state.h"
#include "shim/pin/pinning.h"
#include "shim/pin/pool.h"
#include "shim/record/recorder.h"
#include "shim/record/trace_fields.h"

namespace pinscope::shim {

namespace f = fields;

namespace pinning {
namespace {

// Registers one queued mapping, as a copy's first use would (same budget,
// same table, same PinEvent, reason "shm_ahead"). Lock held on entry and
// on return; released around the CUDA call.
void AheadRegisterLocked(const AheadItem& it) {
  PinState& s = Pins();
  if (s.forking.load(std::memory_order_acquire) > 0 || s.forked_from_cuda ||
      s.unpin_failed.load(std::memory_order_relaxed) || FindLocked(it.base) >= 0)
    return;
  uint64_t budget = PinBudget();  // ready: a copy registered before any item was queued
  if (s.pinned_bytes.load(std::memory_order_relaxed) + it.size > budget) return;
  int slot = ReserveLocked(it.base, it.size, true);
  if (slot < 0) return;
  int device = s.ahead_device;
  s.ahead_in_cuda.store(true, std::memory_order_seq_cst);
  pthread_mutex_unlock(&s.mu);
  cudaError_t rc = cudaErrorUnknown;
  uint64_t t0 = 0, t1 = 0;
  bool called = !s.ahead_stop.load(std::memory_order_seq_cst);  // not once exit began
  if (called) {
    UseDeviceOnOwnThread(device);
    rc = RegisterRange(it.base, it.size, it.writable, &t0, &t1);
  }
  s.ahead_in_cuda.store(false, std::memory_order_seq_cst);
  if (rc == cudaSuccess) {
    // Recorded while the block is still busy, so that the UNREGISTER of a
    // munmap racing with it (which waits for kPinned) comes after it.
    BumpPointerGeneration();
    Emit(f::kRegister, it.base, it.size, t1 - t0, rc, "shm_ahead",
         s.pinned_bytes.load(std::memory_order_relaxed), t0);
    pthread_mutex_lock(&s.mu);
    s.blocks[slot].state = kPinned;
    s.blocks[slot].ahead = true;
    return;
  }
  // Not remembered as refused (kFailed): the copy tries again itself, so a
  // failure here never changes what the copy does.
  pthread_mutex_lock(&s.mu);
  FreeSlotLocked(slot);
  uint64_t after = s.pinned_bytes.fetch_sub(it.size, std::memory_order_relaxed) - it.size;
  pthread_mutex_unlock(&s.mu);
  if (called) {
    Emit(f::kRegisterFailed, it.base, it.size, t1 - t0, rc, "shm_ahead", after, t0);
    NoteRegisterFailed(rc, it.size);
  }
  pthread_mutex_lock(&s.mu);
}

void* AheadMain(void*) {
  PinState& s = Pins();
  ++t_hook_depth;  // nothing this thread does is the program's
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  pthread_mutex_lock(&s.mu);
  for (;;) {
    // Counters: pinscope's own threads, noted after each piece of work.
    NoteOwnThreadCpu(OwnThread::kPinAhead);
    while (s.ahead_n == 0 && !PoolRequestsLocked() && !s.ahead_stop.load(std::memory_order_relaxed))
      pthread_cond_wait(&s.ahead_cv, &s.mu);
    if (s.ahead_stop.load(std::memory_order_relaxed)) break;
    // The pool's slots first: a worker waits for one now.
    if (PoolMakeRequestedLocked()) continue;
    if (s.ahead_n == 0) continue;
    AheadItem it = s.ahead_q[s.ahead_head];
    s.ahead_head = (s.ahead_head + 1) % kAheadQueue;
    --s.ahead_n;
    s.ahead_pending.store(s.ahead_n, std::memory_order_relaxed);
    if (it.live) AheadRegisterLocked(it);
  }
  pthread_mutex_unlock(&s.mu);
  return nullptr;
}

// Is `size` one of the learned batch sizes? Lock held.
bool KnownSizeLocked(uint64_t size) {
  PinState& s = Pins();
  for (int k = 0; k < s.ahead_sizes_n; ++k)
    if (s.ahead_sizes[k] == size) return true;
  return false;
}

}  // namespace

bool AheadOutcomeLocked(uint64_t size, bool used) {
  PinState& s = Pins();
  for (int k = 0; k < s.ahead_sizes_n; ++k) {
    if (s.ahead_sizes[k] != size) continue;
    if (used) {
      s.ahead_misses[k] = 0;
      return false;
    }
    if (++s.ahead_misses[k] < kAheadMissLimit) return false;
    s.ahead_sizes[k] = 0;
    s.ahead_misses[k] = 0;
    return true;
  }
  return false;
}

void AheadCancelLocked(uintptr_t p, size_t n) {
  PinState& s = Pins();
  for (int k = 0; k < s.ahead_n; ++k) {
    AheadItem& it = s.ahead_q[(s.ahead_head + k) % kAheadQueue];
    if (it.live && it.base < p + n && p < it.base + it.size) it.live = false;
  }
}

void AheadLearn(uint64_t size) {
  PinState& s = Pins();
  const Config& c = GetConfig();
  if (!c.pin_ahead || c.pin == PinMode::kOff) return;
  int device = 0;
  QuietGetDevice(&device);
  pthread_mutex_lock(&s.mu);
  if (!KnownSizeLocked(size)) {
    int slot = -1;  // a dropped size's slot first, else the oldest
    for (int k = 0; k < s.ahead_sizes_n && slot < 0; ++k)
      if (s.ahead_sizes[k] == 0) slot = k;
    if (slot < 0) {
      slot = s.ahead_sizes_next;
      s.ahead_sizes_next = (s.ahead_sizes_next + 1) % kAheadSizes;
      if (s.ahead_sizes_n < kAheadSizes) ++s.ahead_sizes_n;
    }
    s.ahead_sizes[slot] = size;
    s.ahead_misses[slot] = 0;
  }
  s.ahead_device = device;
  pthread_mutex_unlock(&s.mu);
  if (StartPinThread()) s.ahead_learned.store(true, std::memory_order_release);
}

bool StartPinThread() {
  PinState& s = Pins();
  bool start = false;
  pthread_mutex_lock(&s.mu);
  if (!s.ahead_started) start = s.ahead_started = true;
  pthread_mutex_unlock(&s.mu);
  if (!start) return s.pin_thread.load(std::memory_order_acquire);
  pthread_t th;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  bool ok = pthread_create(&th, &attr, AheadMain, nullptr) == 0;
  pthread_attr_destroy(&attr);
  if (!ok) return false;
  pthread_setname_np(th, "pinscope-pin");
  s.pin_thread.store(true, std::memory_order_release);
  // Registered after the CUDA runtime's own exit handlers (CUDA is in use
  // by now), so it runs before them: no registration is under way while
  // CUDA tears down.
  atexit(PinAheadStop);
  return true;
}

void WaitAheadOutOfCuda() {
  PinState& s = Pins();
  for (int spins = 0; s.ahead_in_cuda.load(std::memory_order_seq_cst) && spins < 40000; ++spins)
    ShortSleep();
}

}  // namespace pinning

using pinning::AheadItem;
using pinning::kAheadQueue;
using pinning::KnownSizeLocked;
using pinning::Pins;
using pinning::PinState;
using pinning::WaitAheadOutOfCuda;

void PinAheadOnMap(void* p, size_t n, bool writable) {
  PinState& s = Pins();
  if (!s.ahead_learned.load(std::memory_order_relaxed) || !p) return;
  if (s.forked_from_cuda || s.forking.load(std::memory_order_acquire) > 0 || !Recording()) return;
  uintptr_t base = reinterpret_cast<uintptr_t>(p);
  pthread_mutex_lock(&s.mu);
  if (KnownSizeLocked(n) && s.ahead_n < kAheadQueue &&
      !s.ahead_stop.load(std::memory_order_relaxed)) {
    s.ahead_q[(s.ahead_head + s.ahead_n) % kAheadQueue] = AheadItem{base, n, writable, true};
    ++s.ahead_n;
    s.ahead_pending.store(s.ahead_n, std::memory_order_relaxed);
    pthread_cond_signal(&s.ahead_cv);
  }
  pthread_mutex_unlock(&s.mu);
}

void PinAheadStop() {
  PinState& s = Pins();
  if (!s.pin_thread.load(std::memory_order_relaxed)) return;
  s.ahead_stop.store(true, std::memory_order_seq_cst);
  pthread_mutex_lock(&s.mu);
  pthread_cond_broadcast(&s.ahead_cv);
  pthread_mutex_unlock(&s.mu);
  // A registration under way finishes before the process goes on exiting
  // (CUDA tears down in exit handlers); bounded, never forever.
  WaitAheadOutOfCuda();
}

}  // namespace pinscope::shim
