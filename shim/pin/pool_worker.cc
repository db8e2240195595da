// The pool of registered slots, the worker's side (pool.h): a child of the
// owner swaps the batch segment it just made for a free slot (PoolTake),
// and its munmap of the slot, a fork, or the fds it sends tell the table
// what became of it. No CUDA call here: a worker never registers anything.
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

#include "shim/base/clock.h"
#include "shim/base/log.h"
#include "shim/pin/pool.h"
#include "shim/pin/pool_internal.h"
#include "shim/pin/pool_table.h"
#include "shim/record/recorder.h"

namespace pinscope::shim {
namespace pool {
namespace {

// This process's takes whose mapping is still there.
struct Take {
  uintptr_t addr;
  size_t len;
  int slot;
  uint16_t gen;
  bool live;
};
Take g_takes[kSlots];
pthread_mutex_t g_takes_mu = PTHREAD_MUTEX_INITIALIZER;

void Remember(uintptr_t addr, size_t len, int slot, uint16_t gen) {
  pthread_mutex_lock(&g_takes_mu);
  for (Take& k : g_takes) {
    if (k.live) continue;
    k = Take{addr, len, slot, gen, true};
    break;
  }
  pthread_mutex_unlock(&g_takes_mu);
}

// An fd of slot i in this process: the one inherited from the owner when
// this process was forked after the slot was made, else the owner's fd
// opened through /proc (a new file description of the same memfd). -1 if
// neither refers to the slot. *opened: the caller closes it.
int SlotFd(Table& t, int i, bool* opened) {
  const Slot& s = t.slots[i];
  *opened = false;
  if (FdIs(s.fd, s.device, s.inode)) return s.fd;
  char path[64] = "/proc/";
  size_t n = 6;
  n += FormatU64(path + n, sizeof path - n, t.owner);
  memcpy(path + n, "/fd/", 4);
  n += 4;
  FormatU64(path + n, sizeof path - n, static_cast<uint64_t>(s.fd));
  int fd = static_cast<int>(syscall(SYS_openat, AT_FDCWD, path, O_RDWR | O_CLOEXEC));
  if (fd < 0) {
    // /proc hidden or the owner not dumpable: this worker's batches go the
    // usual way (a worker forked after a slot was made inherits its fd).
    if (t.said_no_fd.exchange(1) == 0)
      Log("PINSCOPE_PIN_POOL: a DataLoader worker cannot open the pool's slot through %s: "
          "its batches are pinned one by one (said once)",
          path);
    return -1;
  }
  if (!FdIs(fd, s.device, s.inode)) {
    RawClose(fd);
    return -1;
  }
  *opened = true;
  return fd;
}

}  // namespace

void WorkerUnmap(Table& t, uintptr_t p, size_t len) {
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t end = p + ((len + page - 1) & ~(page - 1));
  pthread_mutex_lock(&g_takes_mu);
  for (Take& k : g_takes) {
    if (!k.live) continue;
    const uint64_t k_end = k.addr + ((k.len + page - 1) & ~(page - 1));
    if (k.addr >= end || p >= k_end) continue;
    k.live = false;
    if (p <= k.addr && end >= k_end) {
      if (SetFlag(t, k.slot, k.gen, false, kWorkerDone))
        t.slots[k.slot].freed_ns.store(MonoNs(), std::memory_order_relaxed);
    } else {
      // Part of it stays mapped here: never reused.
      Word w = Load(t, k.slot);
      if (w.state == kTaken && w.gen == k.gen) Escape(t, k.slot);
    }
  }
  pthread_mutex_unlock(&g_takes_mu);
}

void WorkerBeforeFork(Table& t) {
  pthread_mutex_lock(&g_takes_mu);
  for (Take& k : g_takes) {
    if (!k.live) continue;
    Word w = Load(t, k.slot);
    if (w.state == kTaken && w.gen == k.gen) Escape(t, k.slot);
  }
  pthread_mutex_unlock(&g_takes_mu);
}

void WorkerForget() {
  pthread_mutex_init(&g_takes_mu, nullptr);
  for (Take& k : g_takes) k.live = false;
}

}  // namespace pool

bool PoolTake(void* addr, size_t len, int fd, PoolTaken* out) {
  pool::Table* t = g_pool.load(std::memory_order_acquire);
  const uint32_t me = ProcessId();
  // Only a child of the owner: the owner serves the program's maps, and a
  // grandchild's batches go to its own parent, not to the owner.
  if (!t || t->owner == me || static_cast<uint32_t>(getppid()) != t->owner) return false;
  uint16_t gen = 0;
  int i = pool::TryTake(*t, len, me, &gen);
  if (i < 0) {
    pool::NoteNoSlot(*t, len);
    return false;
  }
  bool opened = false;
  int sfd = pool::SlotFd(*t, i, &opened);
  if (sfd < 0) {
    pool::Untake(*t, i, gen);
    return false;
  }
  int fd_flags = fcntl(fd, F_GETFD);
  void* p = pool::RawMmap(addr, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | MAP_POPULATE,
                          sfd, 0);
  bool mapped = p == addr;
  // The program's fd now refers to the slot, so what the worker sends is the
  // slot (its close-on-exec flag kept).
  bool swapped = mapped && fd_flags >= 0 &&
                 syscall(SYS_dup3, sfd, fd, (fd_flags & FD_CLOEXEC) ? O_CLOEXEC : 0) == fd;
  if (!swapped) {
    // Put the program's segment back where it was (nothing was written).
    if (mapped || reinterpret_cast<intptr_t>(p) < 0)
      pool::RawMmap(addr, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
    if (opened) pool::RawClose(sfd);
    pool::Untake(*t, i, gen);
    return false;
  }
  if (opened) pool::RawClose(sfd);
  // A new segment reads zeros; the slot holds an old batch.
  memset(addr, 0, len);
  pool::Remember(reinterpret_cast<uintptr_t>(addr), len, i, gen);
  out->slot = i;
  out->device = t->slots[i].device;
  out->inode = t->slots[i].inode;
  return true;
}

namespace {
// The slot whose memfd `fd` refers to, or -1.
int SlotOfFd(const pool::Table& t, int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0) return -1;
  return pool::FindByInode(t, static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino));
}
}  // namespace

void PoolOnDupFd(int fd) {
  pool::Table* t = g_pool.load(std::memory_order_acquire);
  if (!t || t->owner != ProcessId()) return;
  const int i = SlotOfFd(*t, fd);
  if (i >= 0) pool::EscapeHandedOut(*t, i);
}

void PoolOnSendFds(const int* fds, int n) {
  pool::Table* t = g_pool.load(std::memory_order_acquire);
  if (!t) return;
  const bool owner = t->owner == ProcessId();
  for (int k = 0; k < n; ++k) {
    const int i = SlotOfFd(*t, fds[k]);
    if (i < 0) continue;
    if (owner) {
      pool::Escape(*t, i);
    } else {
      pool::NoteSent(*t, i);
    }
  }
}

}  // namespace pinscope::shim
