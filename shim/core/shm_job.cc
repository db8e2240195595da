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
  auto* mem = static_cast<uint8_t*>(
      MapAnon(4096 + sizeof(Slot) * kSlots + sizeof(Name) * kNames, MAP_SHARED));
  if (!mem) return false;
  header_ = reinterpret_cast<Header*>(mem);
  slots_ = reinterpret_cast<Slot*>(mem + 4096);
  names_ = reinterpret_cast<Name*>(mem + 4096 + sizeof(Slot) * kSlots);
  return true;
}

void JobTable::PublishName(uint64_t device, uint64_t inode, const char* name) {
  if (!names_ || !name || !*name || inode == 0) return;
  Name& n = names_[header_->names_head.fetch_add(1, std::memory_order_relaxed) % kNames];
  uint32_t seq = n.seq.load(std::memory_order_relaxed);
  // Another writer in this entry (the ring went round meanwhile): leave it.
  if ((seq & 1) || !n.seq.compare_exchange_strong(seq, seq + 1, std::memory_order_acquire)) return;
  std::atomic_thread_fence(std::memory_order_release);
  n.device.store(device, std::memory_order_relaxed);
  n.inode.store(inode, std::memory_order_relaxed);
  constexpr size_t kWords = sizeof n.words / sizeof n.words[0];
  size_t at = 0;
  for (size_t w = 0; w < kWords; ++w) {
    uint64_t word = 0;
    for (size_t b = 0; b < 8; ++b) {
      const size_t i = w * 8 + b;
      // The last byte stays NUL: a name is cut to kNameCap - 1.
      const unsigned char c =
          i + 1 < sizeof n.words && name[at] ? static_cast<unsigned char>(name[at++]) : 0;
      word |= static_cast<uint64_t>(c) << (8 * b);
    }
    n.words[w].store(word, std::memory_order_relaxed);
  }
  n.seq.store(seq + 2, std::memory_order_release);
}

bool JobTable::FindName(uint64_t device, uint64_t inode, char* out, size_t cap) const {
  if (!names_ || cap == 0 || inode == 0) return false;
  const uint32_t head = header_->names_head.load(std::memory_order_acquire);
  const uint32_t back = head < kNames ? head : static_cast<uint32_t>(kNames);
  constexpr size_t kWords = sizeof(Name::words) / sizeof(uint64_t);
  for (uint32_t k = 1; k <= back; ++k) {
    const Name& n = names_[(head - k) % kNames];
    const uint32_t seq = n.seq.load(std::memory_order_acquire);
    if ((seq & 1) || seq == 0 || n.device.load(std::memory_order_relaxed) != device ||
        n.inode.load(std::memory_order_relaxed) != inode)
      continue;
    uint64_t words[kWords];
    for (size_t w = 0; w < kWords; ++w) words[w] = n.words[w].load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (n.seq.load(std::memory_order_relaxed) != seq) continue;  // rewritten meanwhile
    size_t i = 0;
    for (; i + 1 < cap && i < sizeof words; ++i) {
      const char c = static_cast<char>(words[i / 8] >> (8 * (i % 8)));
      if (!c) break;
      out[i] = c;
    }
    out[i] = '\0';
    return true;
  }
  return false;
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
  if (header_) header_->names_head.store(0);
  if (names_)
    for (size_t i = 0; i < kNames; ++i) names_[i].seq.store(0);
  if (!slots_) return;
  for (size_t i = 0; i < kSlots; ++i) slots_[i].state.store(0);
}

}  // namespace pinscope::shim::shm
