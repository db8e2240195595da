// The pool of registered slots (PINSCOPE_PIN_POOL, docs/zero-copy-pool.md):
// the table shared by a process (the owner: the root, or an exec'd image)
// and its forked children (DataLoader workers), and the state machine of a
// slot, as plain functions over the table so tests drive it without a
// preload. No syscall, no CUDA, no lock: every transition is one CAS on the
// slot's word, so a worker that dies at any instant leaves a word that
// still says who held the slot.
//
// A slot is a memfd the owner made, mapped and registered. A worker takes
// a free slot for the batch segment it is creating, the owner hands its own
// registered mapping to the program when the program maps the slot's fd,
// and the slot is free again only when the worker has unmapped it (or
// died), the owner's program has unmapped it, and nothing else can reach
// it (not escaped: sent on by the owner, sent twice, mapped elsewhere, or
// held across a fork). An escaped slot is never reused: the owner retires
// it (unregisters, unmaps, closes its fd) and the pages live on as long as
// whoever still maps them, as a normal segment's would.
#pragma once

#include <atomic>
#include <cstdint>

namespace pinscope::shim::pool {

constexpr int kSlots = 64;

enum SlotState : uint8_t {
  kEmpty = 0,     // no slot here
  kMaking = 1,    // the owner is making it (memfd, map, register)
  kFree = 2,      // registered, zero or stale, takeable
  kTaken = 3,     // a worker (pid) writes or wrote a batch into it
  kRetiring = 4,  // the owner is releasing it; never taken again
};

enum SlotFlag : uint8_t {
  kWorkerDone = 1,  // the taking worker unmapped it, or died
  kMainMapped = 2,  // the owner handed its mapping to the program
  kMainDone = 4,    // ... and the program unmapped it
  kEscaped = 8,     // someone else may reach it: never reused
  kSent = 16,       // the worker sent its fd once (a second send escapes it)
};

// The slot's word: state, flags, generation (bumped at each take) and the
// taking worker's pid, in one atomic 64-bit value.
struct Word {
  uint8_t state = kEmpty;
  uint8_t flags = 0;
  uint16_t gen = 0;
  uint32_t pid = 0;
};
inline uint64_t Pack(Word w) {
  return uint64_t{w.state} | uint64_t{w.flags} << 8 | uint64_t{w.gen} << 16 | uint64_t{w.pid} << 32;
}
inline Word Unpack(uint64_t v) {
  Word w;
  w.state = static_cast<uint8_t>(v);
  w.flags = static_cast<uint8_t>(v >> 8);
  w.gen = static_cast<uint16_t>(v >> 16);
  w.pid = static_cast<uint32_t>(v >> 32);
  return w;
}

struct Slot {
  std::atomic<uint64_t> word;
  // Written by the owner while kMaking, read by anyone once kFree.
  uint64_t device, inode, size;
  int32_t fd;           // the owner's fd of the memfd
  uint64_t owner_addr;  // the owner's registered mapping (owner's address space)
  // Not registered: made for batches no copy reads by DMA (pin_memory=True,
  // docs/zero-copy-pool.md, "Plain slots"); its mapping is not populated.
  bool plain;
  std::atomic<uint64_t> freed_ns;  // MonoNs when it last became kFree (idle release)
};

struct Table {
  uint32_t owner = 0;  // pid of the process that made the table
  std::atomic<uint64_t> takes{0}, misses{0}, escapes{0};
  // The most batches of need_size bytes a worker saw alive at once when it
  // found no free slot (the taken ones and its own): what the pool must hold.
  std::atomic<uint64_t> need_size{0};
  std::atomic<uint32_t> need{0};
  std::atomic<uint32_t> said_no_fd{0};  // a worker could not open a slot: said once per job
  // One past the highest entry ever made (MarkMaking): the scans below stop
  // there. The owner makes the lowest empty entries first, so a pool of a
  // few slots is scanned in a few cache lines, not 64 (every map of a
  // received batch, every take, and a dup or send of a batch's fd scan it).
  std::atomic<uint32_t> high{0};
  Slot slots[kSlots];
};

// The slot's word now.
inline Word Load(const Table& t, int i) {
  return Unpack(t.slots[i].word.load(std::memory_order_acquire));
}

// How many entries a scan reads: Table::high (at most kSlots).
inline int Scanned(const Table& t) {
  const uint32_t h = t.high.load(std::memory_order_acquire);
  return h < static_cast<uint32_t>(kSlots) ? static_cast<int>(h) : kSlots;
}

// The owner is making entry i (kEmpty -> kMaking, its word stored after
// this): scans reach it from now on.
inline void MarkMaking(Table& t, int i) {
  uint32_t h = t.high.load(std::memory_order_relaxed);
  while (h < static_cast<uint32_t>(i) + 1 &&
         !t.high.compare_exchange_weak(h, static_cast<uint32_t>(i) + 1, std::memory_order_release,
                                       std::memory_order_relaxed)) {
  }
}

// --- transitions (pool_table.cc); each is one CAS loop ------------------------

// A worker (pid) takes a free slot of exactly `size` bytes: kFree -> kTaken
// with flags cleared and the generation bumped. Returns its index (and
// *gen), or -1 when none is free.
int TryTake(Table& t, uint64_t size, uint32_t pid, uint16_t* gen);
// The taking worker gives the slot back before writing into it (it could
// not map it): kTaken(pid, gen, no flag) -> kFree.
bool Untake(Table& t, int i, uint16_t gen);

// No free slot of `size` bytes for a worker: records in need (for that
// size) the taken slots of that size plus this batch, if more than before.
void NoteNoSlot(Table& t, uint64_t size);

// Sets `flag` on slot i if it is kTaken with generation gen (any generation
// when gen_any). Then, if the slot is done on every side and not escaped,
// makes it kFree. Returns true when this call freed it.
bool SetFlag(Table& t, int i, uint16_t gen, bool gen_any, uint8_t flag);
// The owner's program maps slot i: allowed once per take, while it is
// kTaken, not escaped and not yet handed out; sets kMainMapped.
bool Serve(Table& t, int i);
// Marks slot i escaped (kTaken or kFree); a kFree slot goes straight to
// kRetiring (returns true then: the caller, the owner, retires it).
bool Escape(Table& t, int i);
// The owner may release slot i now: kFree (idle), or kTaken, escaped and not
// handed out to the program (never mapped, or unmapped). -> kRetiring.
bool BeginRetire(Table& t, int i, bool only_if_free);
// A worker that took slot i is dead (`dead`, from kill(pid, 0) by the
// caller): marks it done; if the program never got the slot, it escapes
// (the dead worker may have sent its fd, which the program may still map).
// Returns true when this freed the slot.
bool WorkerDied(Table& t, int i, uint32_t pid);

// The owner's program duplicates slot i's fd (dup, dup2, dup3, fcntl
// F_DUPFD) while it holds the slot's mapping: the copy may outlive the
// mapping (torch.multiprocessing dups it to send the batch on, and the
// receiver takes it whenever it likes), so the slot escapes. A dup before
// the map (torch's receive path) changes nothing. Returns true when it
// escaped now.
bool EscapeHandedOut(Table& t, int i);
// A process other than the owner sends slot i's fd (SCM_RIGHTS): the first
// send (the worker's, to the owner) sets kSent, a second one escapes it.
void NoteSent(Table& t, int i);

// Index of the slot for (device, inode) in a state other than kEmpty and
// kMaking, or -1.
int FindByInode(const Table& t, uint64_t device, uint64_t inode);

}  // namespace pinscope::shim::pool
