// The copy hooks' side of pinning: PinBeforeCopy registers a buffer on its
// first copy, PinAfterCopy keeps pageable semantics; the batch variants.
// Every copy of the job passes here: while nothing is pinned, one load.
#include <cuda_runtime_api.h>
#include <pthread.h>

#include "shim/base/clock.h"
#include "shim/base/config.h"
#include "shim/base/log.h"
#include "shim/cuda/real_runtime.h"
#include "shim/memory/block_registry.h"
#include "shim/pin/pin_ahead.h"
#include "shim/pin/pin_cuda.h"
#include "shim/pin/pin_keep.h"
#include "shim/pin/pin_state.h"
#include "shim/pin/pinning.h"
#include "shim/pin/pool.h"
#include "shim/record/recorder.h"
#include "shim/record/trace_fields.h"

// FindHostBuffer is defined next to the registry (block_registry.cc).

namespace pinscope::shim {

namespace f = fields;

namespace pinning {
namespace {

// Calls that may return before the copy is done when the host side is
// pinned; the blocking ones (cudaMemcpy, ...) are synchronous with respect
// to the host for pinned memory already.
bool IsAsyncApi(uint32_t api) {
  return api == f::kMemcpyAsync || api == f::kMemcpy2DAsync || api == f::kMemcpy3DAsync ||
         api == f::kMemcpyToSymbolAsync || api == f::kMemcpyFromSymbolAsync ||
         api == f::kMemcpyBatchAsync;
}

// Async mode: records the completion of the copy just issued on `stream`
// in block i's event for that stream. Returns false when it could not
// (the caller then waits for the stream instead).
bool RecordBlockEvent(int i, uint64_t stream) {
  PinState& s = Pins();
  cudaEvent_t ev = nullptr;
  int free_k = -1;
  pthread_mutex_lock(&s.mu);
  for (int k = 0; k < kEvents; ++k) {
    if (s.blocks[i].ev[k] && s.blocks[i].ev_stream[k] == stream) ev = s.blocks[i].ev[k];
    if (!s.blocks[i].ev[k] && free_k < 0) free_k = k;
  }
  pthread_mutex_unlock(&s.mu);
  if (!ev) {
    if (free_k < 0) return false;  // a fifth stream
    if (QuietEventCreate(&ev) != cudaSuccess) return false;
    // Install it unless another thread did meanwhile (the block is in use,
    // so it stays put; only its event slots may change).
    cudaEvent_t spare = nullptr;
    pthread_mutex_lock(&s.mu);
    int k = -1;
    for (int j = 0; j < kEvents && k < 0; ++j)
      if (s.blocks[i].ev[j] && s.blocks[i].ev_stream[j] == stream) k = j;
    if (k >= 0) {
      spare = ev;
      ev = s.blocks[i].ev[k];
    } else {
      for (int j = 0; j < kEvents && k < 0; ++j)
        if (!s.blocks[i].ev[j]) k = j;
      if (k >= 0) {
        s.blocks[i].ev[k] = ev;
        s.blocks[i].ev_stream[k] = stream;
      } else {
        spare = ev;
        ev = nullptr;
      }
    }
    pthread_mutex_unlock(&s.mu);
    if (spare) QuietEventDestroy(spare);
    if (!ev) return false;
  }
  return QuietEventRecord(ev, stream) == cudaSuccess;
}

// After a copy that used block i (ticket held): pageable semantics or, in
// async mode, the block's completion event.
void FinishUse(int i, uint64_t stream, bool wait) {
  if (wait || !RecordBlockEvent(i, stream)) PinWaitStream(stream);
}

void Release(int i) {
  PinState& s = Pins();
  pthread_mutex_lock(&s.mu);
  if (s.blocks[i].in_use) --s.blocks[i].in_use;
  pthread_mutex_unlock(&s.mu);
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

}  // namespace
}  // namespace pinning

using pinning::AheadLearn;
using pinning::Capturing;
using pinning::Emit;
using pinning::FindLocked;
using pinning::FinishUse;
using pinning::HostSide;
using pinning::IsAsyncApi;
using pinning::kEmpty;
using pinning::kFailed;
using pinning::kPinned;
using pinning::kRegistering;
using pinning::NoteRegisterFailed;
using pinning::Pins;
using pinning::PinState;
using pinning::RecordBlockEvent;
using pinning::RegisterRange;
using pinning::Release;
using pinning::ReleaseKeptWhere;
using pinning::ReserveLocked;
using pinning::ShortSleep;

PinTicket PinBeforeCopy(CopyCall* r) {
  PinState& s = Pins();
  PinTicket t;
  uint32_t* kind = nullptr;
  uint64_t host = HostSide(r, &kind);
  if (!host) return t;
  const PinMode mode = GetConfig().pin;
  bool async_api = IsAsyncApi(r->api);
  t.stream = r->stream;
  // Memory pinscope pinned is the program's pageable memory.
  if (s.count.load(std::memory_order_relaxed) > 0) {
    int found = -1;
    uint8_t state = kEmpty;
    // A block being registered (by the pin-ahead thread, or another
    // thread's copy) is waited for: its registration takes less than the
    // pageable copy would, and the copy then runs pinned.
    for (int spins = 0;; ++spins) {
      pthread_mutex_lock(&s.mu);
      found = FindLocked(host);
      state = found >= 0 ? s.blocks[found].state : static_cast<uint8_t>(kEmpty);
      if (state == kPinned) {
        ++s.blocks[found].in_use;
        s.blocks[found].used = true;
      }
      pthread_mutex_unlock(&s.mu);
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
  // After a failed unregister (NoteUnpinFailed) pinning is off: PIN_NONE.
  if (mode == PinMode::kOff || *kind != f::kPageable || s.forked_from_cuda || !Recording() ||
      s.unpin_failed.load(std::memory_order_relaxed))
    return t;
  HostBuffer buf;
  if (!FindHostBuffer(host, &buf) || host + r->bytes > buf.base + buf.size) {
    r->pin = f::kPinSkippedUnknownBuffer;
    return t;
  }
  if (buf.size < GetConfig().pin_min) {
    r->pin = f::kPinSkippedSmall;
    return t;
  }
  if (s.forking.load(std::memory_order_acquire) > 0 || Capturing(r->stream)) {
    r->pin = f::kPinSkippedCapture;
    return t;
  }
  uint64_t budget = PinBudget();
  // Idle kept blocks give way to a buffer being copied now.
  if (g_pin_kept.load(std::memory_order_relaxed) > 0 && buf.size <= budget)
    ReleaseKeptWhere(buf.size, budget, 0, "budget", false);
  pthread_mutex_lock(&s.mu);
  int slot = -1;
  bool raced = FindLocked(host) >= 0;  // another thread is registering it
  bool forking = s.forking.load(std::memory_order_acquire) > 0;
  bool over_budget = false, say_full = false;
  uint64_t held = s.pinned_bytes.load(std::memory_order_relaxed);
  if (!raced && !forking) {
    over_budget = held + buf.size > budget;
    if (over_budget) {
      say_full = !s.budget_noted;
      s.budget_noted = true;
    } else {
      slot = ReserveLocked(buf.base, buf.size, buf.shm);
    }
  }
  pthread_mutex_unlock(&s.mu);
  if (slot < 0) {
    if (over_budget) {
      r->pin = f::kPinSkippedBudget;
      if (say_full) {
        LogOnce(&s.said_budget,
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
  pthread_mutex_lock(&s.mu);
  if (rc == cudaSuccess) {
    s.blocks[slot].state = kPinned;
    s.blocks[slot].in_use = 1;
    after = s.pinned_bytes.load(std::memory_order_relaxed);
  } else {
    s.blocks[slot].state = kFailed;
    after = s.pinned_bytes.fetch_sub(buf.size, std::memory_order_relaxed) - buf.size;
  }
  pthread_mutex_unlock(&s.mu);
  if (rc != cudaSuccess) {
    r->pin = f::kPinFailed;
    Emit(f::kRegisterFailed, buf.base, buf.size, t1 - t0, rc, buf.shm ? "shm" : "malloc", after,
         t0);
    NoteRegisterFailed(rc, buf.size);
    return t;
  }
  BumpPointerGeneration();
  Emit(f::kRegister, buf.base, buf.size, t1 - t0, rc, buf.shm ? "shm" : "malloc", after, t0);
  if (buf.shm) {
    AheadLearn(buf.size);
    PoolNoteCopied(buf.size);
  }
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

void PinBeforeBatch(void* const* dsts, const void* const* srcs, const size_t* sizes, size_t count,
                    uint64_t stream, PinBatchTicket* t) {
  PinState& s = Pins();
  t->n = 0;
  t->wait = false;
  t->stream = stream;
  if (s.count.load(std::memory_order_relaxed) == 0 || !dsts || !srcs) return;
  bool touched = false;
  pthread_mutex_lock(&s.mu);
  for (size_t e = 0; e < 2 * count; ++e) {
    uintptr_t p = reinterpret_cast<uintptr_t>(e % 2 ? srcs[e / 2] : dsts[e / 2]);
    int i = p ? FindLocked(p) : -1;
    if (i < 0 || s.blocks[i].state == kFailed) continue;
    touched = true;
    if (s.blocks[i].state != kPinned) {
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
    ++s.blocks[i].in_use;
    s.blocks[i].used = true;
    t->slot[t->n] = i;
    t->base[t->n] = s.blocks[i].base;
    t->size[t->n] = s.blocks[i].size;
    ++t->n;
  }
  pthread_mutex_unlock(&s.mu);
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

}  // namespace pinscope::shim
