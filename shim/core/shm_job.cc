// The job's live segments (JobTable, shm_core.h): a lock-free table in
// MAP_SHARED memory that forked children inherit, for the /dev/shm-full
// diagnosis. Signal-safe readers: atomics, kill(pid, 0), nothing else.
#include <signal.h>
#include <sys/mman.h>

#include <cerrno>

#include "shim/core/shm_core.h"
#include "shim/core/shm_real.h"

namespace pinscope::shim::shm {

bool JobTable::Create() {
  if (slots_) return true;
  // MAP_SHARED: forked children write into the same table. One page of
  // header, then the slots.
  auto* mem = static_cast<uint8_t*>(MapAnon(4096 + sizeof(Slot) * kSlots, MAP_SHARED));
  if (!mem) return false;
  header_ = reinterpret_cast<Header*>(mem);
  slots_ = reinterpret_cast<Slot*>(mem + 4096);
  return true;
}

bool JobTable::FirstDiagnosis() {
  if (!header_) return !said_locally_.exchange(true);
  return header_->said.exchange(1) == 0;
}

namespace {
bool ProcessAlive(uint32_t pid) {
  int saved = errno;
  bool alive = kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM;
  errno = saved;
  return alive;
}
}  // namespace

void JobTable::Add(uint32_t pid, uint64_t address, uint64_t device, uint64_t inode, uint64_t size) {
  if (!slots_) return;
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < kSlots; ++i) {
      Slot& s = slots_[i];
      uint32_t st = s.state.load(std::memory_order_acquire);
      // First pass: free slots; second: slots of processes that died.
      if (pass == 0 ? st != 0 : (st != 2 || ProcessAlive(s.pid))) continue;
      if (!s.state.compare_exchange_strong(st, 1)) continue;
      s.pid = pid;
      s.address = address;
      s.device = device;
      s.inode = inode;
      s.size = size;
      s.state.store(2, std::memory_order_release);
      return;
    }
  }
}

void JobTable::Remove(uint32_t pid, uint64_t device, uint64_t inode) {
  if (!slots_) return;
  for (size_t i = 0; i < kSlots; ++i) {
    Slot& s = slots_[i];
    if (s.state.load(std::memory_order_acquire) != 2 || s.pid != pid || s.device != device ||
        s.inode != inode)
      continue;
    uint32_t live = 2;
    s.state.compare_exchange_strong(live, 0);
    return;
  }
}

JobUsage JobTable::Usage() const {
  JobUsage u;
  if (!slots_) return u;
  for (size_t i = 0; i < kSlots; ++i) {
    const Slot& s = slots_[i];
    if (s.state.load(std::memory_order_acquire) != 2 || !ProcessAlive(s.pid)) continue;
    // Count each segment once, at its first live slot, with its largest mapping.
    bool seen = false;
    uint64_t size = s.size;
    for (size_t j = 0; j < kSlots; ++j) {
      const Slot& o = slots_[j];
      if (j == i || o.state.load(std::memory_order_acquire) != 2 || o.device != s.device ||
          o.inode != s.inode)
        continue;
      if (j < i && ProcessAlive(o.pid)) {
        seen = true;
        break;
      }
      if (o.size > size) size = o.size;
    }
    if (seen) continue;
    ++u.segments;
    u.bytes += size;
  }
  return u;
}

void JobTable::ResetForTest() {
  said_locally_.store(false);
  if (header_) header_->said.store(0);
  if (!slots_) return;
  for (size_t i = 0; i < kSlots; ++i) slots_[i].state.store(0);
}

}  // namespace pinscope::shim::shm
