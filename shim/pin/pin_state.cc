// The one PinState (pin_state.h), the helpers every file of shim/pin
// shares, and the layer's queries of the table: pinned bytes, budget,
// ownership. No CUDA call here; the lock is held only around table scans.
#include "shim/pin/pin_state.h"

#include <time.h>

#include "shim/base/config.h"
#include "shim/base/log.h"
#include "shim/pin/pinning.h"
#include "shim/record/host_facts.h"
#include "shim/record/recorder.h"

namespace pinscope::shim {
namespace pinning {

// Constant-initialized (all zeros: it lives in .bss): ready for the first
// malloc hook, before any constructor runs.
constinit PinState g_pin_state;

namespace {

uint64_t DerivedBudget() {
  // A quarter of the memory this process may use: RAM, or the cgroup limit
  // when lower. Without /proc/meminfo: 1 GiB.
  uint64_t ram = MeminfoBytes("MemTotal:");
  uint64_t cg = CgroupMemoryLimit();
  uint64_t base = cg && (cg < ram || !ram) ? cg : ram;
  return base ? base / 4 : uint64_t{1} << 30;
}

}  // namespace

void ShortSleep() {
  timespec ts{0, 50 * 1000};
  nanosleep(&ts, nullptr);
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

void NoteRegisterFailed(cudaError_t rc, size_t size) {
  if (rc == cudaErrorHostMemoryAlreadyRegistered) return;
  LogOnce(&Pins().said_register_failed,
          "cudaHostRegister failed (CUDA error %d) for a %llu-byte buffer: buffers it refuses "
          "are copied pageable (said once)",
          static_cast<int>(rc), static_cast<unsigned long long>(size));
}

void NoteUnpinFailed(cudaError_t rc, size_t size, const char* reason) {
  PinState& s = Pins();
  s.unpin_failed.store(true, std::memory_order_relaxed);
  LogOnce(&s.said_unpin_failed,
          "cudaHostUnregister failed (CUDA error %d) releasing a %llu-byte buffer (%s): "
          "pinning off; what pinscope pinned stays registered, freed memory it still holds "
          "registered is not given back",
          static_cast<int>(rc), static_cast<unsigned long long>(size), reason);
}

}  // namespace pinning

using pinning::Block;
using pinning::DerivedBudget;
using pinning::Pins;
using pinning::PinState;
using pinning::Registered;

uint64_t PinnedBytes() { return Pins().pinned_bytes.load(std::memory_order_relaxed); }

uint64_t PinBudget() {
  PinState& s = Pins();
  if (s.budget_ready.load(std::memory_order_acquire))
    return s.budget.load(std::memory_order_relaxed);
  const Config& c = GetConfig();
  uint64_t b = c.pin_budget_explicit ? c.pin_budget : DerivedBudget();
  s.budget.store(b, std::memory_order_relaxed);  // racing threads store the same value
  s.budget_ready.store(true, std::memory_order_release);
  return b;
}

bool PinMayOwn() { return Pins().count.load(std::memory_order_relaxed) > 0; }

bool PinOwnsRange(uintptr_t p, size_t n) {
  PinState& s = Pins();
  if (s.count.load(std::memory_order_relaxed) == 0) return false;
  bool hit = false;
  pthread_mutex_lock(&s.mu);
  for (int i = 0; i < s.high && !hit; ++i) {
    const Block& b = s.blocks[i];
    hit = Registered(b.state) && b.base < p + (n ? n : 1) && p < b.base + b.size;
  }
  pthread_mutex_unlock(&s.mu);
  return hit;
}

}  // namespace pinscope::shim
