// Registry of live recorded host blocks and shm mappings; see block_registry.h.
// Host blocks: a std::map whose nodes come from an mmap'd free-list pool, so
// exact and containment lookups are O(log n) and nothing touches malloc.
// Mappings: a fixed mmap'd slot array with a seqlock per slot, so the SIGBUS
// handler can read it without the lock the interrupted thread may hold.
#include "shim/memory/block_registry.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <new>


namespace pinscope::shim {
namespace {

// Anonymous private memory: never the hooked allocator, copied by fork.
void* MapMemory(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

// Fixed-size node pool for the block map. Not thread-safe: used under the
// registry lock. Chunks are never returned (a process holding many large
// blocks once is likely to again).
class NodePool {
 public:
  static constexpr size_t kSlotBytes = 128;
  static constexpr size_t kChunkBytes = 256 * 1024;

  // Makes sure the next Alloc succeeds; false if no memory can be mapped.
  bool Reserve() {
    if (free_) return true;
    auto* chunk = static_cast<uint8_t*>(MapMemory(kChunkBytes));
    if (!chunk) return false;
    for (size_t off = 0; off + kSlotBytes <= kChunkBytes; off += kSlotBytes) {
      auto* n = reinterpret_cast<FreeNode*>(chunk + off);
      n->next = free_;
      free_ = n;
    }
    return true;
  }
  void* Alloc() {
    // The map only allocates inside AddBlock, after Reserve() succeeded.
    FreeNode* n = free_;
    free_ = n->next;
    return n;
  }
  void Free(void* p) {
    auto* n = static_cast<FreeNode*>(p);
    n->next = free_;
    free_ = n;
  }

 private:
  struct FreeNode {
    FreeNode* next;
  };
  FreeNode* free_ = nullptr;
};

template <typename T>
struct PoolAllocator {
  using value_type = T;
  NodePool* pool;
  explicit PoolAllocator(NodePool* p) : pool(p) {}
  template <typename U>
  PoolAllocator(const PoolAllocator<U>& o) : pool(o.pool) {}  // NOLINT: rebind
  T* allocate(size_t n) {
    static_assert(sizeof(T) <= NodePool::kSlotBytes, "map node outgrew the pool slot");
    (void)n;  // std::map allocates one node at a time
    return static_cast<T*>(pool->Alloc());
  }
  void deallocate(T* p, size_t) { pool->Free(p); }
  template <typename U>
  bool operator==(const PoolAllocator<U>& o) const {
    return pool == o.pool;
  }
};

}  // namespace

class BlockRegistry::Blocks {
 public:
  using Map = std::map<uint64_t, HostBlock, std::less<uint64_t>,
                       PoolAllocator<std::pair<const uint64_t, HostBlock>>>;
  Blocks()
      : map(std::less<uint64_t>(), PoolAllocator<std::pair<const uint64_t, HostBlock>>(&pool)) {}
  NodePool pool;
  Map map;
};

struct BlockRegistry::Slot {
  std::atomic<uint32_t> seq;   // odd while a writer rewrites `m`
  std::atomic<uint32_t> live;  // 1 while `m` is a live mapping
  ShmMapping m;
};

constinit BlockRegistry g_registry;

// --- host blocks ------------------------------------------------------------

bool BlockRegistry::AddBlock(const HostBlock& b) {
  pthread_mutex_lock(&mu_);
  bool ok = true;
  if (!blocks_) {
    void* mem = MapMemory(sizeof(Blocks));
    if (mem) {
      blocks_ = new (mem) Blocks();
    } else {
      ok = false;
    }
  }
  if (ok) ok = blocks_->pool.Reserve();
  if (ok) {
    HostBlock copy = b;
    copy.epoch = epoch_.load(std::memory_order_relaxed);
    auto [it, inserted] = blocks_->map.insert_or_assign(b.address, copy);
    (void)it;
    if (inserted) live_blocks_.fetch_add(1, std::memory_order_relaxed);
  }
  pthread_mutex_unlock(&mu_);
  return ok;
}

bool BlockRegistry::FindBlock(uint64_t address, HostBlock* out) const {
  if (live_blocks() == 0) return false;
  pthread_mutex_lock(&mu_);
  bool found = false;
  if (blocks_) {
    auto it = blocks_->map.find(address);
    if (it != blocks_->map.end()) {
      if (out) *out = it->second;
      found = true;
    }
  }
  pthread_mutex_unlock(&mu_);
  return found;
}

bool BlockRegistry::FindBlockContaining(uint64_t ptr, HostBlock* out) const {
  if (live_blocks() == 0) return false;
  pthread_mutex_lock(&mu_);
  bool found = false;
  if (blocks_) {
    auto it = blocks_->map.upper_bound(ptr);  // first block starting after ptr
    if (it != blocks_->map.begin()) {
      --it;
      const HostBlock& b = it->second;
      if (ptr - b.address < std::max<uint64_t>(b.size, 1)) {
        if (out) *out = b;
        found = true;
      }
    }
  }
  pthread_mutex_unlock(&mu_);
  return found;
}

bool BlockRegistry::RemoveBlock(uint64_t address, HostBlock* out) {
  if (live_blocks() == 0) return false;
  pthread_mutex_lock(&mu_);
  bool found = false;
  if (blocks_) {
    auto it = blocks_->map.find(address);
    if (it != blocks_->map.end()) {
      if (out) *out = it->second;
      blocks_->map.erase(it);
      live_blocks_.fetch_sub(1, std::memory_order_relaxed);
      found = true;
    }
  }
  pthread_mutex_unlock(&mu_);
  return found;
}

bool BlockRegistry::UpdateBlock(uint64_t address, uint32_t set, uint32_t clear,
                                const uint64_t* payload) {
  pthread_mutex_lock(&mu_);
  bool found = false;
  if (blocks_) {
    auto it = blocks_->map.find(address);
    if (it != blocks_->map.end()) {
      HostBlock& b = it->second;
      b.flags = (b.flags & ~clear) | set;
      if (payload) memcpy(b.payload, payload, sizeof b.payload);
      found = true;
    }
  }
  pthread_mutex_unlock(&mu_);
  return found;
}

size_t BlockRegistry::CollectBlocks(uint32_t any_flags, HostBlock* out, size_t cap) const {
  pthread_mutex_lock(&mu_);
  size_t n = 0;
  if (blocks_) {
    for (const auto& [addr, b] : blocks_->map) {
      if (any_flags && !(b.flags & any_flags)) continue;
      if (n < cap) out[n] = b;
      ++n;
    }
  }
  pthread_mutex_unlock(&mu_);
  return n;
}

void BlockRegistry::ClearFlagsEverywhere(uint32_t flags) {
  pthread_mutex_lock(&mu_);
  if (blocks_) {
    for (auto& [addr, b] : blocks_->map) b.flags &= ~flags;
  }
  if (Slot* slots = slots_.load(std::memory_order_relaxed)) {
    size_t high = slot_high_.load(std::memory_order_relaxed);
    for (size_t i = 0; i < high; ++i) {
      if (!slots[i].live.load(std::memory_order_relaxed)) continue;
      ShmMapping m = slots[i].m;
      m.flags &= ~flags;
      WriteSlot(&slots[i], m);
    }
  }
  pthread_mutex_unlock(&mu_);
}

// --- mappings -------------------------------------------------------------------

void BlockRegistry::ReadSlot(const Slot& s, ShmMapping* out) { memcpy(out, &s.m, sizeof *out); }

void BlockRegistry::WriteSlot(Slot* s, const ShmMapping& m) {
  // Seqlock writer (under mu_): odd while the fields change, so a reader in
  // a signal handler that interrupted us sees an odd count and skips the slot.
  uint32_t seq = s->seq.load(std::memory_order_relaxed);
  s->seq.store(seq + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  memcpy(&s->m, &m, sizeof m);
  std::atomic_thread_fence(std::memory_order_release);
  s->seq.store(seq + 2, std::memory_order_release);
}

bool BlockRegistry::EnsureSlotsLocked() {
  if (slots_.load(std::memory_order_relaxed)) return true;
  void* mem = MapMemory(kMaxMappings * sizeof(Slot));
  if (!mem) return false;
  slots_.store(static_cast<Slot*>(mem), std::memory_order_release);  // zero pages: all free
  return true;
}

void BlockRegistry::RecomputeBoundsLocked() {
  uint64_t lo = UINT64_MAX, hi = 0;
  Slot* slots = slots_.load(std::memory_order_relaxed);
  size_t high = slot_high_.load(std::memory_order_relaxed);
  size_t last_live = 0;
  for (size_t i = 0; slots && i < high; ++i) {
    if (!slots[i].live.load(std::memory_order_relaxed)) continue;
    lo = std::min(lo, slots[i].m.address);
    hi = std::max(hi, slots[i].m.address + slots[i].m.size);
    last_live = i + 1;
  }
  slot_high_.store(last_live, std::memory_order_release);
  lo_.store(lo, std::memory_order_release);
  hi_.store(hi, std::memory_order_release);
}

bool BlockRegistry::AddMapping(const ShmMapping& m) {
  pthread_mutex_lock(&mu_);
  bool ok = EnsureSlotsLocked();
  if (ok) {
    Slot* slots = slots_.load(std::memory_order_relaxed);
    size_t i = 0;
    while (i < kMaxMappings && slots[i].live.load(std::memory_order_relaxed)) ++i;
    ok = i < kMaxMappings;
    if (ok) {
      ShmMapping copy = m;
      copy.epoch = epoch_.load(std::memory_order_relaxed);
      WriteSlot(&slots[i], copy);
      slots[i].live.store(1, std::memory_order_release);
      if (i + 1 > slot_high_.load(std::memory_order_relaxed))
        slot_high_.store(i + 1, std::memory_order_release);
      live_mappings_.fetch_add(1, std::memory_order_relaxed);
      lo_.store(std::min(lo_.load(std::memory_order_relaxed), m.address),
                std::memory_order_release);
      hi_.store(std::max(hi_.load(std::memory_order_relaxed), m.address + m.size),
                std::memory_order_release);
    }
  }
  pthread_mutex_unlock(&mu_);
  return ok;
}

bool BlockRegistry::FindMappingContaining(uint64_t ptr, ShmMapping* out) const {
  if (live_mappings() == 0) return false;
  pthread_mutex_lock(&mu_);
  bool found = false;
  Slot* slots = slots_.load(std::memory_order_relaxed);
  size_t high = slot_high_.load(std::memory_order_relaxed);
  for (size_t i = 0; slots && i < high && !found; ++i) {
    if (!slots[i].live.load(std::memory_order_relaxed)) continue;
    const ShmMapping& m = slots[i].m;
    if (ptr >= m.address && ptr - m.address < m.size) {
      if (out) ReadSlot(slots[i], out);
      found = true;
    }
  }
  pthread_mutex_unlock(&mu_);
  return found;
}

size_t BlockRegistry::OverlappingMappings(uint64_t address, uint64_t size, ShmMapping* out,
                                          size_t cap) const {
  if (live_mappings() == 0) return 0;
  uint64_t end = address + size < address ? UINT64_MAX : address + size;
  pthread_mutex_lock(&mu_);
  size_t n = 0;
  Slot* slots = slots_.load(std::memory_order_relaxed);
  size_t high = slot_high_.load(std::memory_order_relaxed);
  for (size_t i = 0; slots && i < high; ++i) {
    if (!slots[i].live.load(std::memory_order_relaxed)) continue;
    const ShmMapping& m = slots[i].m;
    if (m.address < end && m.address + m.size > address) {
      if (n < cap) ReadSlot(slots[i], &out[n]);
      ++n;
    }
  }
  pthread_mutex_unlock(&mu_);
  return n;
}

size_t BlockRegistry::RemoveMappings(uint64_t address, uint64_t size, RemovedPiece* out,
                                     size_t cap) {
  if (live_mappings() == 0) return 0;
  uint64_t end = address + size < address ? UINT64_MAX : address + size;
  pthread_mutex_lock(&mu_);
  size_t n = 0;
  Slot* slots = slots_.load(std::memory_order_relaxed);
  size_t high = slot_high_.load(std::memory_order_relaxed);
  for (size_t i = 0; slots && i < high; ++i) {
    if (!slots[i].live.load(std::memory_order_relaxed)) continue;
    ShmMapping m = slots[i].m;
    uint64_t m_end = m.address + m.size;
    if (!(m.address < end && m_end > address)) continue;
    uint64_t cut_lo = std::max(m.address, address), cut_hi = std::min(m_end, end);
    if (n < cap) {
      out[n].mapping = m;
      out[n].address = cut_lo;
      out[n].size = cut_hi - cut_lo;
      out[n].whole = cut_lo == m.address && cut_hi == m_end;
    }
    ++n;
    if (cut_lo == m.address && cut_hi == m_end) {
      slots[i].live.store(0, std::memory_order_release);
      live_mappings_.fetch_sub(1, std::memory_order_relaxed);
      continue;
    }
    // Keep the head [m.address, cut_lo) in place and/or the tail [cut_hi, m_end).
    ShmMapping head = m, tail = m;
    head.size = cut_lo - m.address;
    tail.address = cut_hi;
    tail.size = m_end - cut_hi;
    tail.offset = m.offset + (cut_hi - m.address);
    if (head.size && tail.size) {
      WriteSlot(&slots[i], head);
      // The tail needs a slot of its own; when the table is full it is
      // forgotten (its later unmap then goes unrecorded).
      size_t j = 0;
      while (j < kMaxMappings && slots[j].live.load(std::memory_order_relaxed)) ++j;
      if (j < kMaxMappings) {
        WriteSlot(&slots[j], tail);
        slots[j].live.store(1, std::memory_order_release);
        if (j + 1 > slot_high_.load(std::memory_order_relaxed))
          slot_high_.store(j + 1, std::memory_order_release);
        live_mappings_.fetch_add(1, std::memory_order_relaxed);
      }
    } else {
      WriteSlot(&slots[i], head.size ? head : tail);
    }
  }
  if (n) RecomputeBoundsLocked();
  pthread_mutex_unlock(&mu_);
  return n;
}

bool BlockRegistry::UpdateMapping(uint64_t address, uint32_t set, uint32_t clear,
                                  const uint64_t* payload) {
  pthread_mutex_lock(&mu_);
  bool found = false;
  Slot* slots = slots_.load(std::memory_order_relaxed);
  size_t high = slot_high_.load(std::memory_order_relaxed);
  for (size_t i = 0; slots && i < high && !found; ++i) {
    if (!slots[i].live.load(std::memory_order_relaxed) || slots[i].m.address != address) continue;
    ShmMapping m = slots[i].m;
    m.flags = (m.flags & ~clear) | set;
    if (payload) memcpy(m.payload, payload, sizeof m.payload);
    WriteSlot(&slots[i], m);
    found = true;
  }
  pthread_mutex_unlock(&mu_);
  return found;
}

bool BlockRegistry::FindMappingContainingFromSignal(uint64_t ptr, ShmMapping* out) const {
  Slot* slots = slots_.load(std::memory_order_acquire);
  if (!slots) return false;
  size_t high = slot_high_.load(std::memory_order_acquire);
  for (size_t i = 0; i < high && i < kMaxMappings; ++i) {
    if (!slots[i].live.load(std::memory_order_acquire)) continue;
    for (int attempt = 0; attempt < 3; ++attempt) {
      uint32_t s1 = slots[i].seq.load(std::memory_order_acquire);
      if (s1 & 1) continue;  // being written by the thread we interrupted, maybe
      ShmMapping m;
      ReadSlot(slots[i], &m);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (slots[i].seq.load(std::memory_order_relaxed) != s1) continue;
      if (ptr >= m.address && ptr - m.address < m.size) {
        *out = m;
        return true;
      }
      break;
    }
  }
  return false;
}

void BlockRegistry::SumMappingsFromSignal(uint64_t* count, uint64_t* bytes) const {
  *count = 0;
  *bytes = 0;
  Slot* slots = slots_.load(std::memory_order_acquire);
  if (!slots) return;
  size_t high = slot_high_.load(std::memory_order_acquire);
  for (size_t i = 0; i < high && i < kMaxMappings; ++i) {
    if (!slots[i].live.load(std::memory_order_acquire)) continue;
    uint32_t s1 = slots[i].seq.load(std::memory_order_acquire);
    if (s1 & 1) continue;
    ShmMapping m;
    ReadSlot(slots[i], &m);
    if (m.flags & kFlagDriverInternal) continue;
    ++*count;
    *bytes += m.size;
  }
}

// --- fork -------------------------------------------------------------------------

void BlockRegistry::ForkPrepare() { pthread_mutex_lock(&mu_); }
void BlockRegistry::ForkParent() { pthread_mutex_unlock(&mu_); }
void BlockRegistry::ForkChild() {
  // Only the forking thread exists in the child and it held the lock across
  // fork, so the tables are consistent; start with a fresh lock.
  mu_ = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
  epoch_.fetch_add(1, std::memory_order_relaxed);
}

void BlockRegistry::ResetForTest() {
  pthread_mutex_lock(&mu_);
  if (blocks_) blocks_->map.clear();
  live_blocks_.store(0);
  if (Slot* slots = slots_.load()) {
    for (size_t i = 0; i < kMaxMappings; ++i) slots[i].live.store(0);
  }
  slot_high_.store(0);
  live_mappings_.store(0);
  lo_.store(UINT64_MAX);
  hi_.store(0);
  pthread_mutex_unlock(&mu_);
}

// For the pinning module (pinning.h): the recorded block or mapping that
// holds p. Blocks inherited from a parent count too (their memory is here).
bool FindHostBuffer(uintptr_t p, HostBuffer* out) {
  HostBlock b;
  if (Registry().FindBlockContaining(p, &b)) {
    out->base = b.address;
    out->size = b.size;
    out->shm = false;
    out->writable = true;
    return true;
  }
  ShmMapping m;
  if (Registry().FindMappingContaining(p, &m)) {
    out->base = m.address;
    out->size = m.size;
    out->shm = (m.map_flags & MAP_SHARED) != 0;
    out->writable = (m.prot & PROT_WRITE) != 0;
    return true;
  }
  return false;
}

namespace {
std::atomic<bool> g_fork_handlers{false};
void RegistryPrepare() { Registry().ForkPrepare(); }
void RegistryParent() { Registry().ForkParent(); }
void RegistryChild() { Registry().ForkChild(); }
}  // namespace

void InstallRegistryForkHandlers() {
  if (g_fork_handlers.exchange(true)) return;
  pthread_atfork(RegistryPrepare, RegistryParent, RegistryChild);
}

}  // namespace pinscope::shim
