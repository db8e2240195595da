// The pool's state machine (pool_table.h): one CAS loop per transition.
#include "shim/pin/pool_table.h"

namespace pinscope::shim::pool {
namespace {

constexpr uint8_t kAllDone = kWorkerDone | kMainMapped | kMainDone;

// Applies f to slot i's word until the CAS holds or f declines (returns
// false). Returns whether the word was changed.
template <typename F>
bool Update(Table& t, int i, F f) {
  std::atomic<uint64_t>& a = t.slots[i].word;
  uint64_t cur = a.load(std::memory_order_acquire);
  for (;;) {
    Word w = Unpack(cur);
    if (!f(&w)) return false;
    if (a.compare_exchange_weak(cur, Pack(w), std::memory_order_acq_rel, std::memory_order_acquire))
      return true;
  }
}

// A taken slot done on every side and not escaped becomes free; true then.
bool FreeIfDone(Word* x) {
  if ((x->flags & kAllDone) != kAllDone || (x->flags & kEscaped)) return false;
  x->state = kFree;
  x->flags = 0;
  x->pid = 0;
  return true;
}

}  // namespace

int TryTake(Table& t, uint64_t size, uint32_t pid, uint16_t* gen) {
  for (int i = 0, n = Scanned(t); i < n; ++i) {
    Word w = Load(t, i);
    if (w.state != kFree || t.slots[i].size != size) continue;
    uint16_t g = 0;
    bool took = Update(t, i, [&](Word* x) {
      if (x->state != kFree) return false;
      x->state = kTaken;
      x->flags = 0;
      x->gen = static_cast<uint16_t>(x->gen + 1);
      x->pid = pid;
      g = x->gen;
      return true;
    });
    if (took) {
      t.takes.fetch_add(1, std::memory_order_relaxed);
      *gen = g;
      return i;
    }
  }
  return -1;
}

void NoteNoSlot(Table& t, uint64_t size) {
  uint32_t alive = 1;
  for (int i = 0, n = Scanned(t); i < n; ++i)
    if (Load(t, i).state == kTaken && t.slots[i].size == size) ++alive;
  t.misses.fetch_add(1, std::memory_order_relaxed);
  if (t.need_size.load(std::memory_order_relaxed) != size) {
    t.need_size.store(size, std::memory_order_relaxed);
    t.need.store(alive, std::memory_order_relaxed);
    return;
  }
  uint32_t cur = t.need.load(std::memory_order_relaxed);
  while (cur < alive && !t.need.compare_exchange_weak(cur, alive, std::memory_order_relaxed)) {
  }
}

bool Untake(Table& t, int i, uint16_t gen) {
  return Update(t, i, [&](Word* x) {
    if (x->state != kTaken || x->gen != gen || x->flags != 0) return false;
    x->state = kFree;
    x->pid = 0;
    return true;
  });
}

bool SetFlag(Table& t, int i, uint16_t gen, bool gen_any, uint8_t flag) {
  bool freed = false;
  Update(t, i, [&](Word* x) {
    freed = false;
    if (x->state != kTaken || (!gen_any && x->gen != gen)) return false;
    x->flags |= flag;
    freed = FreeIfDone(x);
    return true;
  });
  return freed;
}

bool Serve(Table& t, int i) {
  return Update(t, i, [&](Word* x) {
    if (x->state != kTaken || (x->flags & (kMainMapped | kEscaped))) return false;
    x->flags |= kMainMapped;
    return true;
  });
}

bool Escape(Table& t, int i) {
  bool retire = false;
  bool changed = Update(t, i, [&](Word* x) {
    retire = false;
    if (x->state == kFree) {
      x->state = kRetiring;
      retire = true;
      return true;
    }
    if (x->state != kTaken || (x->flags & kEscaped)) return false;
    x->flags |= kEscaped;
    return true;
  });
  if (changed) t.escapes.fetch_add(1, std::memory_order_relaxed);
  return retire;
}

bool EscapeHandedOut(Table& t, int i) {
  bool changed = Update(t, i, [&](Word* x) {
    const bool handed_out = (x->flags & kMainMapped) && !(x->flags & kMainDone);
    if (x->state != kTaken || !handed_out || (x->flags & kEscaped)) return false;
    x->flags |= kEscaped;
    return true;
  });
  if (changed) t.escapes.fetch_add(1, std::memory_order_relaxed);
  return changed;
}

bool BeginRetire(Table& t, int i, bool only_if_free) {
  return Update(t, i, [&](Word* x) {
    if (x->state == kFree) {
      x->state = kRetiring;
      return true;
    }
    if (only_if_free || x->state != kTaken || !(x->flags & kEscaped)) return false;
    bool handed_out = (x->flags & kMainMapped) && !(x->flags & kMainDone);
    if (handed_out) return false;
    x->state = kRetiring;
    return true;
  });
}

bool WorkerDied(Table& t, int i, uint32_t pid) {
  bool freed = false;
  Update(t, i, [&](Word* x) {
    freed = false;
    if (x->state != kTaken || x->pid != pid || (x->flags & kWorkerDone)) return false;
    x->flags |= kWorkerDone;
    if (!(x->flags & kMainMapped)) x->flags |= kEscaped;
    freed = FreeIfDone(x);
    return true;
  });
  return freed;
}

void NoteSent(Table& t, int i) {
  bool escaped = false;
  Update(t, i, [&](Word* x) {
    escaped = false;
    if (x->state != kTaken || (x->flags & kEscaped)) return false;
    if (x->flags & kSent) {
      x->flags |= kEscaped;
      escaped = true;
    } else {
      x->flags |= kSent;
    }
    return true;
  });
  if (escaped) t.escapes.fetch_add(1, std::memory_order_relaxed);
}

int FindByInode(const Table& t, uint64_t device, uint64_t inode) {
  for (int i = 0, n = Scanned(t); i < n; ++i) {
    Word w = Load(t, i);
    if (w.state == kEmpty || w.state == kMaking) continue;
    if (t.slots[i].inode == inode && t.slots[i].device == device) return i;
  }
  return -1;
}

}  // namespace pinscope::shim::pool
