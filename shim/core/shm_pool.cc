// The shm hooks' side of the pool of registered slots (PINSCOPE_PIN_POOL,
// shim/pin/pool.h, docs/zero-copy-pool.md): which new segment a worker may
// swap for a slot, the swap's bookkeeping (fd table, registry, trace), and
// the fds a process sends or duplicates. Every entry point returns after
// one relaxed load while the pool is off.
#include "shim/core/shm_pool.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>

#include <cstring>

#include "shim/base/config.h"
#include "shim/base/guard.h"
#include "shim/base/log.h"
#include "shim/core/shm_fds.h"
#include "shim/core/shm_state.h"
#include "shim/memory/block_registry.h"
#include "shim/pin/pool.h"
#include "shim/record/recorder.h"
#include "shim/record/trace_fields.h"

namespace pinscope::shim::shm {
namespace {

namespace f = fields;

// The segment this thread created last, as torch's MapAllocator makes a
// file_descriptor batch: shm_open(O_CREAT|O_EXCL), ftruncate, one mmap,
// then shm_unlink at once, nothing written in between. Any other shm call
// on the thread, a second mapping or a close forgets it. file_system
// sharing closes the fd before it unlinks (much later), so it never
// matches: it bypasses the pool.
struct Segment {
  int fd;
  uint64_t device, inode, size;
  uint64_t addr, len, offset;
  int prot, flags, maps;
  char name[64];
};
PINSCOPE_TLS Segment t_seg{-1, 0, 0, 0, 0, 0, 0, 0, 0, 0, {}};

}  // namespace

void PoolSegmentCreated(int fd, const char* name, uint64_t device, uint64_t inode) {
  if (!PoolOn()) return;
  t_seg.fd = -1;
  if (!name || strlen(name) >= sizeof t_seg.name) return;
  t_seg = Segment{fd, device, inode, 0, 0, 0, 0, 0, 0, 0, {}};
  memcpy(t_seg.name, name, strlen(name) + 1);
}

void PoolSegmentTruncated(int fd, uint64_t size) {
  if (!PoolOn() || t_seg.fd < 0) return;
  if (fd == t_seg.fd && t_seg.maps == 0) {
    t_seg.size = size;
  } else {
    t_seg.fd = -1;
  }
}

void PoolSegmentMapped(int fd, uint64_t addr, uint64_t len, uint64_t offset, int prot, int flags) {
  if (!PoolOn() || t_seg.fd < 0) return;
  if (fd != t_seg.fd || t_seg.maps++ > 0) {
    t_seg.fd = -1;
    return;
  }
  t_seg.addr = addr;
  t_seg.len = len;
  t_seg.offset = offset;
  t_seg.prot = prot;
  t_seg.flags = flags;
}

void PoolSegmentClosed(int fd) {
  if (t_seg.fd == fd) t_seg.fd = -1;
}

void PoolAtUnlink(const char* name, uint64_t t0) {
  if (!PoolOn() || t_seg.fd < 0 || !name) return;
  Segment s = t_seg;
  t_seg.fd = -1;
  // torch's segments ("/torch_<pid>_<rand>_<n>"), exactly as it makes them.
  if (strcmp(name, s.name) != 0 || strncmp(name, "/torch_", 7) != 0 || s.maps != 1 ||
      s.len != s.size || s.offset != 0 || !s.addr || s.len < GetConfig().pin_min ||
      !(s.flags & MAP_SHARED) || (s.prot & (PROT_READ | PROT_WRITE)) != (PROT_READ | PROT_WRITE))
    return;
  // The mapping must be the program's one mapping of that object still.
  ShmMapping m;
  if (!Registry().FindMappingContaining(s.addr, &m) || m.address != s.addr || m.size != s.len ||
      m.inode != s.inode || m.device != s.device)
    return;
  PoolTaken taken;
  if (!PoolTake(reinterpret_cast<void*>(s.addr), s.len, s.fd, &taken)) return;
  // The fd, the mapping and the trace now say: this address is the slot.
  Identity old;
  old.device = m.device;
  old.inode = m.inode;
  old.flags = m.flags;
  memcpy(old.name, m.name, sizeof old.name);
  Identity id;
  id.device = taken.device;
  id.inode = taken.inode;
  id.size = s.len;
  id.flags = kFlagMemfd;
  id.pool = true;
  CopyString(id.name, sizeof id.name, name);
  RetrackFd(s.fd, id);
  RemovedPiece pieces[4];
  Registry().RemoveMappings(s.addr, s.len, pieces, 4);
  State().job.Remove(ProcessId(), old.device, old.inode);
  Record(f::kShmUnmap, old, -1, s.len, 0, s.addr, 0, 0, 0, t0);
  ShmMapping slot = m;
  slot.device = id.device;
  slot.inode = id.inode;
  slot.flags = id.flags;
  Registry().AddMapping(slot);
  Record(f::kShmMap, id, s.fd, s.len, 0, s.addr, s.flags | MAP_FIXED, s.prot, 0, t0);
}

namespace {
// Before the real call, so the slot has escaped before the copy exists
// (a failed dup costs at most a slot, replaced).
void NoteDup(int fd) {
  HookScope scope;
  PoolOnDupFd(fd);
}
}  // namespace

void PoolNoteSendmsg(const struct msghdr* msg) {
  if (!msg || !msg->msg_control || msg->msg_controllen < sizeof(struct cmsghdr)) return;
  HookScope scope;
  // The kernel's layout of ancillary data, walked with its own macros.
  for (struct cmsghdr* c = CMSG_FIRSTHDR(const_cast<struct msghdr*>(msg)); c;
       c = CMSG_NXTHDR(const_cast<struct msghdr*>(msg), c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS || c->cmsg_len < CMSG_LEN(0))
      continue;
    const size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    const unsigned char* data = CMSG_DATA(c);
    for (size_t done = 0; done < n;) {  // every fd, 64 at a time (CMSG_DATA may be unaligned)
      int fds[64];
      const size_t k = n - done < 64 ? n - done : 64;
      memcpy(fds, data + done * sizeof(int), k * sizeof(int));
      PoolOnSendFds(fds, static_cast<int>(k));
      done += k;
    }
  }
}

ssize_t Sendmsg(int fd, const struct msghdr* msg, int flags) {
  if (PoolOn()) PoolNoteSendmsg(msg);
  return g_real.sendmsg(fd, msg, flags);
}

int Dup(int fd) {
  if (PoolOn()) NoteDup(fd);
  return g_real.dup(fd);
}

int Dup2(int fd, int to) {
  if (PoolOn() && fd != to) NoteDup(fd);
  return g_real.dup2(fd, to);
}

int Dup3(int fd, int to, int flags) {
  if (PoolOn()) NoteDup(fd);
  return g_real.dup3(fd, to, flags);
}

int Fcntl(int fd, int cmd, void* arg, bool is64) {
  if ((cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) && PoolOn()) NoteDup(fd);
  return is64 ? g_real.fcntl64(fd, cmd, arg) : g_real.fcntl(fd, cmd, arg);
}

int Sendmmsg(int fd, struct mmsghdr* vec, unsigned int n, int flags) {
  if (PoolOn() && vec)
    for (unsigned int k = 0; k < n; ++k) PoolNoteSendmsg(&vec[k].msg_hdr);
  return g_real.sendmmsg(fd, vec, n, flags);
}

}  // namespace pinscope::shim::shm
