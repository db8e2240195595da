// The pool of registered slots, the owner's side (pool.h): the table made
// at start, slots made and registered on the pinscope-pin thread, the
// program's mmap of a slot answered with the owner's registered mapping,
// its munmap keeping the mapping and returning the slot, and retirement
// (an escaped slot, a dead worker's, an idle one). docs/zero-copy-pool.md.
//
// Locking: the owner's decisions about a slot (serve, release, detach,
// retire) run under PinState::mu, so two of its threads never act on one
// slot at once; the table's words are CAS'ed (workers change them without
// any lock). No CUDA call with the lock held.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "shim/base/clock.h"
#include "shim/base/config.h"
#include "shim/base/log.h"
#include "shim/cuda/real_runtime.h"
#include "shim/pin/pin_ahead.h"
#include "shim/pin/pin_cuda.h"
#include "shim/pin/pin_state.h"
#include "shim/pin/pin_unpin.h"
#include "shim/pin/pinning.h"
#include "shim/pin/pool.h"
#include "shim/pin/pool_internal.h"
#include "shim/pin/pool_table.h"
#include "shim/record/recorder.h"
#include "shim/record/trace_fields.h"

namespace pinscope::shim {

namespace f = fields;

std::atomic<pool::Table*> g_pool{nullptr};

namespace pool {

static_assert(kSlots == pinning::kPoolSlots, "pin_state.h's kPoolSlots is pool::kSlots");

void* RawMmap(void* a, size_t l, int p, int fl, int fd, off_t o) {
  return reinterpret_cast<void*>(syscall(SYS_mmap, a, l, p, fl, fd, o));
}
int RawMunmap(void* a, size_t l) { return static_cast<int>(syscall(SYS_munmap, a, l)); }
int RawClose(int fd) { return static_cast<int>(syscall(SYS_close, fd)); }

bool FdIs(int fd, uint64_t device, uint64_t inode) {
  struct stat st;
  return fd >= 0 && fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_dev) == device &&
         static_cast<uint64_t>(st.st_ino) == inode;
}

uint64_t FdMargin() {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 256;
  return std::max<uint64_t>(256, static_cast<uint64_t>(rl.rlim_cur) / 4);
}

uint64_t FreeFds() {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 0;
  if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= 65536) return UINT64_MAX;
  // Raw calls, no allocation: this runs in the program's mmap hook. The
  // directory's own fd is one of those counted; it is closed again.
  int dir = static_cast<int>(
      syscall(SYS_openat, AT_FDCWD, "/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir < 0) return 0;
  uint64_t open = 0;
  alignas(8) char buf[4096];
  for (;;) {
    long n = syscall(SYS_getdents64, dir, buf, sizeof buf);
    if (n <= 0) break;
    for (long off = 0; off < n;) {
      // struct linux_dirent64: ino (8), off (8), reclen (2), type (1), name.
      uint16_t reclen;
      memcpy(&reclen, buf + off + 16, sizeof reclen);
      const char* name = buf + off + 19;
      if (!(name[0] == '.' && (name[1] == 0 || (name[1] == '.' && name[2] == 0)))) ++open;
      off += reclen;
    }
  }
  RawClose(dir);
  open = open > 0 ? open - 1 : 0;
  const uint64_t limit = static_cast<uint64_t>(rl.rlim_cur);
  return limit > open ? limit - open : 0;
}

bool Alive(uint32_t pid) {
  return pid != 0 && (kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH);
}

}  // namespace pool

namespace pinning {
namespace {

using pool::Load;
using pool::Table;
using pool::Word;

Table* OwnTable() {
  Table* t = g_pool.load(std::memory_order_acquire);
  return t && t->owner == ProcessId() ? t : nullptr;
}

// The pin block of slot i's owner mapping, or -1. Lock held.
int SlotBlockLocked(const Table& t, int i) {
  int b = FindLocked(t.slots[i].owner_addr);
  return b >= 0 && Pins().blocks[b].pool && Pins().blocks[b].base == t.slots[i].owner_addr ? b : -1;
}

// Slot i's owner mapping may be handed to the program, or kept at its
// munmap: a registered slot's pin block is there (*block, its index); a
// plain slot has none (*block -1) and no registration overlaps it (a copy
// that read it by DMA registered it as the program's: it leaves the pool
// at the munmap, whose usual path unpins it). Lock held.
bool SlotReadyLocked(const Table& t, int i, int* block) {
  *block = SlotBlockLocked(t, i);
  if (!t.slots[i].plain) return *block >= 0;
  return FindOverlapLocked(t.slots[i].owner_addr, t.slots[i].size) < 0;
}

// Has a copy read batches of len bytes by DMA (PoolNoteCopied)? Lock held.
bool CopiedLocked(uint64_t len) {
  const PinState& s = Pins();
  for (int k = 0; k < std::min(s.pool_copied_n, kAheadSizes); ++k)
    if (s.pool_copied[k] == len) return true;
  return false;
}

// Sets slot i's word to kEmpty, keeping its generation.
void ClearSlot(Table& t, int i) {
  Word w = Load(t, i);
  Word e;
  e.gen = w.gen;
  t.slots[i].word.store(pool::Pack(e), std::memory_order_release);
}

// Asks the pin thread for a new slot in the empty entry i, of `size` bytes:
// the pool keeps its size when a slot leaves it. Lock held.
void ReplaceLocked(Table& t, int i, uint64_t size) {
  PinState& s = Pins();
  if (!s.pin_thread.load(std::memory_order_relaxed) || s.pool_req_n >= pool::kSlots) return;
  Word w = Load(t, i);
  if (w.state != pool::kEmpty) return;
  w.state = pool::kMaking;
  pool::MarkMaking(t, i);
  t.slots[i].size = size;
  t.slots[i].word.store(pool::Pack(w), std::memory_order_release);
  s.pool_req[s.pool_req_n++] = i;
  pthread_cond_signal(&s.ahead_cv);
}

// Slot i leaves the pool while the program holds its mapping (escaped, cut
// by a partial munmap, registered by the program): the owner's mapping
// becomes an ordinary pinned shm mapping of the program's, which the usual
// munmap path unpins; a new slot replaces it. No CUDA call. Lock held.
void DetachLocked(Table& t, int i) {
  int b = SlotBlockLocked(t, i);
  if (b >= 0) Pins().blocks[b].pool = false;
  if (pool::FdIs(t.slots[i].fd, t.slots[i].device, t.slots[i].inode)) pool::RawClose(t.slots[i].fd);
  ClearSlot(t, i);
  ReplaceLocked(t, i, t.slots[i].size);
}

// Releases slot i, which the caller moved to kRetiring and marked busy:
// unregisters the owner's mapping (a PinEvent UNREGISTER with `reason`),
// unmaps it and closes the fd. The pages live on while a worker or a
// receiver maps them. If CUDA refuses the unregistration, the slot stays
// kRetiring (never reused) and its mapping stays. No lock held.
void RetireSlot(Table& t, int i, const char* reason, bool replace) {
  PinState& s = Pins();
  uintptr_t addr = t.slots[i].owner_addr;
  pthread_mutex_lock(&s.mu);
  int b = SlotBlockLocked(t, i);
  if (b >= 0) s.blocks[b].pool = false;
  int device = s.pool_device;
  pthread_mutex_unlock(&s.mu);
  if (b >= 0) UseDeviceOnOwnThread(device);  // the flusher thread
  bool released = b < 0 || UnpinWhere(addr, 0, false, reason);
  pthread_mutex_lock(&s.mu);
  if (released) {
    pool::RawMunmap(reinterpret_cast<void*>(addr), t.slots[i].size);
    if (pool::FdIs(t.slots[i].fd, t.slots[i].device, t.slots[i].inode))
      pool::RawClose(t.slots[i].fd);
    ClearSlot(t, i);
    s.pool_busy[i] = false;
    if (replace) ReplaceLocked(t, i, t.slots[i].size);
  }
  // Else the driver may still hold it: the slot stays kRetiring and busy,
  // never retried, reused or unmapped (pinning is off from here on).
  pthread_mutex_unlock(&s.mu);
}

// Retires every slot `want` selects (state checks and the CAS inside).
template <typename F>
void RetireWhere(Table& t, const char* reason, bool replace, F want) {
  PinState& s = Pins();
  for (int i = 0, n = pool::Scanned(t); i < n; ++i) {
    pthread_mutex_lock(&s.mu);
    bool mine = !s.pool_busy[i] && want(i);
    if (mine) s.pool_busy[i] = true;
    pthread_mutex_unlock(&s.mu);
    if (mine) RetireSlot(t, i, reason, replace);
  }
}

// Fills the page tables of [p, p+size) a step at a time
// (MADV_POPULATE_WRITE, Linux 5.14), so that the mmap lock is held for one
// step only and the program's own mmap and munmap get in between. Stops at
// the first refusal (an older kernel: the registration faults the pages).
void PopulateInSteps(void* p, uint64_t size) {
#ifndef MADV_POPULATE_WRITE
  constexpr int MADV_POPULATE_WRITE = 23;  // linux/mman.h, Linux 5.14
#endif
  constexpr uint64_t kStep = 4ull << 20;
  auto* base = static_cast<char*>(p);
  for (uint64_t off = 0; off < size; off += kStep)
    if (madvise(base + off, std::min(kStep, size - off), MADV_POPULATE_WRITE) != 0) return;
}

// Makes slot i (kMaking, its size set): memfd, mapping (populated), the
// registration; or, for batches no copy has read by DMA, a plain slot:
// memfd and mapping only, its pages made by the first worker that writes
// a batch there, as a new segment's would be. Lock held on entry and on
// return; dropped around the work.
void MakeSlotLocked(Table& t, int i) {
  PinState& s = Pins();
  const uint64_t size = t.slots[i].size;
  const bool plain = !CopiedLocked(size);
  if (s.forking.load(std::memory_order_acquire) > 0 || s.forked_from_cuda ||
      s.unpin_failed.load(std::memory_order_relaxed) ||
      s.ahead_stop.load(std::memory_order_relaxed) ||
      (!plain && s.pinned_bytes.load(std::memory_order_relaxed) + size > PinBudget())) {
    ClearSlot(t, i);
    return;
  }
  int device = s.pool_device;
  pthread_mutex_unlock(&s.mu);
  int fd = static_cast<int>(syscall(SYS_memfd_create, "pinscope-pool", 1u /* MFD_CLOEXEC */));
  void* p = MAP_FAILED;
  struct stat st;
  if (fd >= 0 && syscall(SYS_ftruncate, fd, static_cast<off_t>(size)) == 0 && fstat(fd, &st) == 0) {
    // A registered slot's pages are made here, on this thread, and not
    // under the program's mmap lock: fallocate makes them in the memfd
    // (zeroing 73.5 MiB takes tens of ms), the mapping's page tables are
    // then filled a few MiB at a time. MAP_POPULATE held the lock for the
    // whole slot, and every munmap and mmap of the training loop waited
    // for it: 35-52 ms each while slots were made, on the H100
    // (docs/validation.md, fifteenth session). Where either is refused
    // (an old kernel), the registration makes the pages.
    if (!plain) syscall(SYS_fallocate, fd, 0, static_cast<off_t>(0), static_cast<off_t>(size));
    p = pool::RawMmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (reinterpret_cast<intptr_t>(p) < 0) p = MAP_FAILED;  // a raw syscall's -errno
    if (!plain && p != MAP_FAILED) PopulateInSteps(p, size);
  }
  if (p == MAP_FAILED) {
    // No memfd (an old kernel, a seccomp filter) or no memory for one: the
    // pool stops; batches go the usual way.
    s.pool_failed.store(true, std::memory_order_relaxed);
    LogOnce(&s.said_pool,
            "PINSCOPE_PIN_POOL: cannot make a %llu-byte slot (memfd_create, ftruncate or mmap "
            "failed): the pool stays off, batches are pinned one by one",
            static_cast<unsigned long long>(size));
  }
  pthread_mutex_lock(&s.mu);
  const auto ready = [&] {
    t.slots[i].device = static_cast<uint64_t>(st.st_dev);
    t.slots[i].inode = static_cast<uint64_t>(st.st_ino);
    t.slots[i].fd = fd;
    t.slots[i].owner_addr = reinterpret_cast<uintptr_t>(p);
    t.slots[i].plain = plain;
    t.slots[i].freed_ns.store(MonoNs(), std::memory_order_relaxed);
    Word w = Load(t, i);
    w.state = pool::kFree;
    w.flags = 0;
    w.pid = 0;
    t.slots[i].word.store(pool::Pack(w), std::memory_order_release);
  };
  if (plain && p != MAP_FAILED && s.forking.load(std::memory_order_acquire) == 0) {
    ready();
    return;
  }
  int b = -1;
  if (!plain && p != MAP_FAILED && s.forking.load(std::memory_order_acquire) == 0 &&
      s.pinned_bytes.load(std::memory_order_relaxed) + size <= PinBudget()) {
    b = ReserveLocked(reinterpret_cast<uintptr_t>(p), size, true);
    if (b >= 0) s.blocks[b].pool = true;
  }
  if (b < 0) {
    ClearSlot(t, i);
    pthread_mutex_unlock(&s.mu);
    if (p != MAP_FAILED) pool::RawMunmap(p, size);
    if (fd >= 0) pool::RawClose(fd);
    pthread_mutex_lock(&s.mu);
    return;
  }
  s.ahead_in_cuda.store(true, std::memory_order_seq_cst);
  pthread_mutex_unlock(&s.mu);
  cudaError_t rc = cudaErrorUnknown;
  uint64_t t0 = 0, t1 = 0;
  bool called = !s.ahead_stop.load(std::memory_order_seq_cst);
  if (called) {
    UseDeviceOnOwnThread(device);
    rc = RegisterRange(reinterpret_cast<uintptr_t>(p), size, true, &t0, &t1);
  }
  s.ahead_in_cuda.store(false, std::memory_order_seq_cst);
  if (rc == cudaSuccess) {
    BumpPointerGeneration();
    Emit(f::kRegister, reinterpret_cast<uintptr_t>(p), size, t1 - t0, rc, "pool",
         s.pinned_bytes.load(std::memory_order_relaxed), t0);
    pthread_mutex_lock(&s.mu);
    s.blocks[b].state = kPinned;
    ready();
    return;
  }
  pthread_mutex_lock(&s.mu);
  FreeSlotLocked(b);
  uint64_t after = GiveBackLocked(size);
  ClearSlot(t, i);
  pthread_mutex_unlock(&s.mu);
  pool::RawMunmap(p, size);
  pool::RawClose(fd);
  if (called) {
    Emit(f::kRegisterFailed, reinterpret_cast<uintptr_t>(p), size, t1 - t0, rc, "pool", after, t0);
    NoteRegisterFailed(rc, size);
    s.pool_failed.store(true, std::memory_order_relaxed);  // not tried again for every batch
  }
  pthread_mutex_lock(&s.mu);
}

}  // namespace
}  // namespace pinning

using pinning::CopiedLocked;
using pinning::DetachLocked;
using pinning::OwnTable;
using pinning::Pins;
using pinning::PinState;
using pinning::RetireWhere;
using pinning::SlotReadyLocked;
using pool::Load;
using pool::Table;
using pool::Word;

void PoolInit() {
  const Config& c = GetConfig();
  if (!c.pin_pool || c.pin == PinMode::kOff || c.disabled) return;
  static std::atomic<bool> said{false};
  void* p = pool::RawMmap(nullptr, sizeof(Table), PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (reinterpret_cast<intptr_t>(p) < 0) {
    LogOnce(&said, "PINSCOPE_PIN_POOL: no memory for the pool's table; the pool stays off");
    return;
  }
  auto* t = new (p) Table();
  t->owner = static_cast<uint32_t>(getpid());
  for (auto& slot : t->slots) slot.fd = -1;
  g_pool.store(t, std::memory_order_release);
}

bool PoolOwner() { return OwnTable() != nullptr; }

void* PoolServeMap(uint64_t device, uint64_t inode, size_t len, int prot, int flags, off_t offset) {
  Table* t = g_pool.load(std::memory_order_acquire);
  if (!t) return nullptr;
  int i = pool::FindByInode(*t, device, inode);
  if (i < 0) return nullptr;
  const bool plain = offset == 0 && len == t->slots[i].size &&
                     (prot & (PROT_READ | PROT_WRITE)) == (PROT_READ | PROT_WRITE) &&
                     !(prot & PROT_EXEC) && (flags & MAP_SHARED) && !(flags & MAP_FIXED);
  if (t->owner != ProcessId() || !plain) {
    pool::Escape(*t, i);
    return nullptr;
  }
  PinState& s = Pins();
  void* out = nullptr;
  int block = -1;
  pthread_mutex_lock(&s.mu);
  if (!s.pool_busy[i] && SlotReadyLocked(*t, i, &block) && pool::Serve(*t, i))
    out = reinterpret_cast<void*>(t->slots[i].owner_addr);
  const bool armed = out && s.pool_armed > 0;
  pthread_mutex_unlock(&s.mu);
  if (!out) pool::Escape(*t, i);
  // An epoch's first batch came from a slot: the pool grows to the epoch's
  // batches in flight now (more workers than the last epoch's), not miss by
  // miss (PoolNoteLoader).
  if (armed) pool::Grow(len, 0);
  return out;
}

void PoolNoteMiss(size_t len, int live_batches) { pool::Grow(len, live_batches); }

void PoolNoteCopied(size_t len) {
  if (!OwnTable()) return;
  PinState& s = Pins();
  pthread_mutex_lock(&s.mu);
  bool known = pinning::CopiedLocked(len);
  if (!known) {
    s.pool_copied[s.pool_copied_n % pinning::kAheadSizes] = len;
    ++s.pool_copied_n;
  }
  int waited = !known && s.pool_wait_len == len ? s.pool_wait_live : -1;
  if (waited >= 0) s.pool_wait_len = 0;
  pthread_mutex_unlock(&s.mu);
  if (waited >= 0) pool::Grow(len, waited);
}

namespace pool {

void Grow(size_t len, int live_batches) {
  Table* t = OwnTable();
  if (!t || len < GetConfig().pin_min || !CudaSeen()) return;
  PinState& s = Pins();
  if (s.forked_from_cuda || !Recording() || s.unpin_failed.load(std::memory_order_relaxed) ||
      s.pool_failed.load(std::memory_order_relaxed))
    return;
  // No registered slot for batches no copy has read by DMA
  // (PoolNoteCopied): plain slots where the epoch runs with pin_memory=True
  // (PoolNoteLoader), else the miss waits for that evidence, the epoch's
  // hint (pool_armed) with it. First, before the fd count.
  pthread_mutex_lock(&s.mu);
  const bool copied = CopiedLocked(len), plain = !copied && s.pool_staged;
  if (!copied && !plain) {
    if (s.pool_wait_len != len) s.pool_wait_live = 0;
    s.pool_wait_len = len;
    s.pool_wait_live = std::max(s.pool_wait_live, live_batches);
  }
  pthread_mutex_unlock(&s.mu);
  if (!copied && !plain) return;
  // Slots to spare the program's fd limit (pool_internal.h).
  const uint64_t free_fds = pool::FreeFds(), margin = pool::FdMargin();
  if (free_fds <= margin) return;
  uint64_t fd_room = free_fds - margin;
  int device = 0;
  pinning::QuietGetDevice(&device);
  bool asked = false;
  pthread_mutex_lock(&s.mu);
  // The batches of that size alive now: those the program maps that are
  // not slots (this one included) and the slots workers hold; or more, as
  // many as a worker saw alive when it found no free slot (need). The pool
  // grows to that (counting slots still being made): to the most batches
  // in flight at once.
  // A slot whose worker died before the program mapped it never comes back
  // (it escaped; the flusher retires it): not supply (a break out of an
  // epoch leaves the prefetched batches' slots so).
  int supply = 0, demand = live_batches;
  for (int i = 0, n = pool::Scanned(*t); i < n; ++i) {
    Word w = Load(*t, i);
    if (t->slots[i].size != len) continue;
    if (w.state == pool::kTaken && !(w.flags & pool::kWorkerDone) && !pool::Alive(w.pid)) {
      pool::WorkerDied(*t, i, w.pid);
      w = Load(*t, i);
    }
    if (w.state == pool::kFree || w.state == pool::kMaking) ++supply;
    if (w.state == pool::kTaken && !(w.flags & pool::kEscaped)) {
      ++supply;
      ++demand;
    }
  }
  if (t->need_size.load(std::memory_order_relaxed) == len)
    demand = std::max<int>(demand, static_cast<int>(t->need.load(std::memory_order_relaxed)));
  // The first batch of an epoch the hook announced, served or missed: as
  // many slots as the epoch keeps batches in flight (PoolNoteLoader). Not a
  // later batch's miss: the last, smaller batch of an epoch is a size of
  // its own, which the epoch's first batch already disarmed.
  if (s.pool_armed > 0) {
    --s.pool_armed;
    demand = std::max(demand, s.pool_hint);
  }
  // Plain slots pin nothing: the budget does not bound them (the batches in
  // flight and the table do).
  uint64_t room =
      plain ? UINT64_MAX
            : PinBudget() - std::min(PinBudget(), s.pinned_bytes.load(std::memory_order_relaxed));
  for (int i = 0; i < pool::kSlots && supply < demand && room >= len && fd_room > 0; ++i) {
    Word w = Load(*t, i);
    if (w.state != pool::kEmpty || s.pool_busy[i]) continue;
    --fd_room;
    w.state = pool::kMaking;
    pool::MarkMaking(*t, i);
    t->slots[i].size = len;
    t->slots[i].word.store(pool::Pack(w), std::memory_order_release);
    s.pool_req[s.pool_req_n++] = i;
    ++supply;
    room -= len;
    asked = true;
  }
  if (asked) {
    s.pool_device = device;
    pthread_cond_signal(&s.ahead_cv);
  }
  pthread_mutex_unlock(&s.mu);
  if (asked) pinning::StartPinThread();
}

}  // namespace pool

void PoolNoteLoader(int num_workers, int prefetch_factor, uint64_t epoch_batches, bool pin_memory) {
  Table* t = OwnTable();
  if (!t || num_workers <= 0) return;
  const int per_worker = prefetch_factor > 0 ? prefetch_factor : 2;  // DataLoader's default
  int hint = std::min(pool::kSlots, num_workers * per_worker + 2);
  if (epoch_batches > 0 && epoch_batches < static_cast<uint64_t>(hint))
    hint = static_cast<int>(epoch_batches);
  PinState& s = Pins();
  pthread_mutex_lock(&s.mu);
  s.pool_hint = hint;
  s.pool_staged = pin_memory;
  // One per epoch begun, as many as loaders can run side by side (a zip of
  // a few), used by the epoch's first batch mapped (served or missed).
  s.pool_armed = std::min(s.pool_armed + 1, 4);
  // The pool holds batches of one size only (a training loop's): the new
  // epoch's are most likely that size too, so its slots are made now,
  // while the workers make their first batches, rather than at its first
  // batch (a sweep of worker counts, each a new DataLoader). With slots of
  // several sizes (a validation loader's besides) the size is not known.
  uint64_t size = 0;
  bool one_size = true;
  for (int i = 0, n = pool::Scanned(*t); i < n && one_size; ++i) {
    Word w = Load(*t, i);
    if (w.state == pool::kEmpty || w.state == pool::kRetiring) continue;
    if (size != 0 && t->slots[i].size != size) one_size = false;
    size = t->slots[i].size;
  }
  pthread_mutex_unlock(&s.mu);
  if (one_size && size != 0) pool::Grow(size, 0);
}

bool PoolRequestsLocked() { return Pins().pool_req_n > 0; }

bool PoolMakeRequestedLocked() {
  PinState& s = Pins();
  Table* t = OwnTable();
  if (s.pool_req_n == 0) return false;
  int i = s.pool_req[--s.pool_req_n];
  if (t) pinning::MakeSlotLocked(*t, i);
  return true;
}

bool PoolOnUnmap(uintptr_t p, size_t len) {
  Table* t = g_pool.load(std::memory_order_acquire);
  if (!t) return false;
  if (t->owner != ProcessId()) {
    pool::WorkerUnmap(*t, p, len);
    return false;
  }
  PinState& s = Pins();
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t end = p + ((len + page - 1) & ~(page - 1));
  int kept = -1, block = -1;
  uint32_t worker = 0;
  pthread_mutex_lock(&s.mu);
  for (int i = 0, n = pool::Scanned(*t); i < n && kept < 0; ++i) {
    Word w = Load(*t, i);
    const uint64_t a = t->slots[i].owner_addr;
    const uint64_t slot_end = a + ((t->slots[i].size + page - 1) & ~(page - 1));
    const bool handed_out =
        w.state == pool::kTaken && (w.flags & pool::kMainMapped) && !(w.flags & pool::kMainDone);
    if (!handed_out || s.pool_busy[i] || a >= end || p >= slot_end) continue;
    if (p == a && end == slot_end && !(w.flags & pool::kEscaped) &&
        SlotReadyLocked(*t, i, &block)) {
      kept = i;
      worker = w.pid;
      s.pool_busy[i] = true;
    } else {
      DetachLocked(*t, i);  // the usual path unpins and unmaps it
    }
  }
  pthread_mutex_unlock(&s.mu);
  if (kept < 0) return false;
  // Copies still using the slot (async mode) finish before it can be reused.
  if (block >= 0) pinning::WaitBlockQuiet(block);
  pthread_mutex_lock(&s.mu);
  s.pool_busy[kept] = false;
  pthread_mutex_unlock(&s.mu);
  bool freed = pool::SetFlag(*t, kept, 0, true, pool::kMainDone);
  if (!freed && !pool::Alive(worker)) freed = pool::WorkerDied(*t, kept, worker);
  if (freed) t->slots[kept].freed_ns.store(MonoNs(), std::memory_order_relaxed);
  return true;
}

void PoolDetachRange(uintptr_t p, size_t n) {
  Table* t = OwnTable();
  if (!t) return;
  PinState& s = Pins();
  pthread_mutex_lock(&s.mu);
  for (int i = 0, n = pool::Scanned(*t); i < n; ++i) {
    Word w = Load(*t, i);
    const uint64_t a = t->slots[i].owner_addr;
    const bool handed_out =
        w.state == pool::kTaken && (w.flags & pool::kMainMapped) && !(w.flags & pool::kMainDone);
    if (handed_out && !s.pool_busy[i] && a < p + (n ? n : 1) && p < a + t->slots[i].size)
      DetachLocked(*t, i);
  }
  pthread_mutex_unlock(&s.mu);
}

void PoolBeforeFork() {
  Table* t = g_pool.load(std::memory_order_acquire);
  if (!t) return;
  if (t->owner != ProcessId()) {
    pool::WorkerBeforeFork(*t);
    return;
  }
  // The child inherits the program's mappings: a slot the program holds now
  // must never be rewritten under the child's copy of its tensors.
  for (int i = 0, n = pool::Scanned(*t); i < n; ++i) {
    Word w = Load(*t, i);
    if (w.state == pool::kTaken && (w.flags & pool::kMainMapped) && !(w.flags & pool::kMainDone))
      pool::Escape(*t, i);
  }
}

void PoolForkChild() { pool::WorkerForget(); }

void PoolPeriodic() {
  Table* t = OwnTable();
  if (!t) return;
  PinState& s = Pins();
  if (s.forking.load(std::memory_order_acquire) > 0) return;
  const uint64_t now = MonoNs();
  for (int i = 0, n = pool::Scanned(*t); i < n; ++i) {
    Word w = Load(*t, i);
    if (w.state == pool::kTaken && !(w.flags & pool::kWorkerDone) && !pool::Alive(w.pid) &&
        pool::WorkerDied(*t, i, w.pid))
      t->slots[i].freed_ns.store(now, std::memory_order_relaxed);
  }
  RetireWhere(*t, "pool_escaped", true, [&](int i) {
    Word w = Load(*t, i);
    if (w.state == pool::kRetiring) return true;  // a free slot's fd was sent on
    return w.state == pool::kTaken && pool::BeginRetire(*t, i, false);
  });
  // The program's fds near its limit: the free slots' fds go back.
  if (pool::FreeFds() < pool::FdMargin() / 2)
    RetireWhere(*t, "pool_fds", false, [&](int i) {
      return Load(*t, i).state == pool::kFree && pool::BeginRetire(*t, i, true);
    });
  // Plain slots of a size copies now read by DMA: replaced by registered
  // ones (a plain slot a copy read while the program held it left the pool
  // at its munmap already).
  RetireWhere(*t, "pool_plain", true, [&](int i) {
    return Load(*t, i).state == pool::kFree && t->slots[i].plain &&
           pinning::CopiedLocked(t->slots[i].size) && pool::BeginRetire(*t, i, true);
  });
  RetireWhere(*t, "pool_idle", false, [&](int i) {
    Word w = Load(*t, i);
    return w.state == pool::kFree &&
           now - t->slots[i].freed_ns.load(std::memory_order_relaxed) > kPoolIdleNs &&
           pool::BeginRetire(*t, i, true);
  });
}

}  // namespace pinscope::shim
