// Shared memory by fd: the table of tracked fds, what an fd refers to, and
// the slow paths of shm_open, shm_unlink, memfd_create, ftruncate,
// posix_fallocate and close (shm_core.h). No malloc, no stdio.
#include "shim/core/shm_fds.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "shim/base/clock.h"
#include "shim/base/guard.h"
#include "shim/base/log.h"
#include "shim/core/shm_core.h"
#include "shim/core/shm_pool.h"
#include "shim/core/shm_real.h"
#include "shim/core/shm_state.h"
#include "shim/memory/block_registry.h"
#include "shim/record/recorder.h"
#include "shim/record/trace_fields.h"

namespace pinscope::shim::shm {
namespace {

namespace f = fields;

void TrackFd(int fd, const Identity& id) {
  if (fd < 0 || fd >= kMaxFds) return;
  FdEntry* t = FdTable();
  if (!t) return;
  FdEntry& e = t[fd];
  e.state.store(0, std::memory_order_relaxed);
  e.flags = id.flags;
  e.device = id.device;
  e.inode = id.inode;
  memcpy(e.name, id.name, sizeof e.name);
  e.state.store(1, std::memory_order_release);
}

bool TrackedEntry(int fd, Identity* id) {
  if (!FdTracked(fd)) return false;
  const FdEntry& e = g_fds.load(std::memory_order_acquire)[fd];
  id->flags = e.flags;
  id->device = e.device;
  id->inode = e.inode;
  memcpy(id->name, e.name, sizeof id->name);
  return true;
}

void UntrackFd(int fd) {
  if (FdTracked(fd))
    g_fds.load(std::memory_order_acquire)[fd].state.store(0, std::memory_order_release);
}

// The tracked entry of fd if the fd still refers to that object (dup2 or
// an unhooked close_range may have put another file under the number).
bool TrackedAndValid(int fd, Identity* id) {
  struct stat st;
  if (TrackedEntry(fd, id) && fstat(fd, &st) == 0 && id->device == st.st_dev &&
      id->inode == st.st_ino)
    return true;
  UntrackFd(fd);
  return false;
}

void NameFrom(const char* name, Identity* id) {
  CopyString(id->name, sizeof id->name, name ? name : "");
}

// Tells the job the name of an object this process made or opened, as
// readlink would give it to a process mapping the object through a
// received fd (NameFromFdLink): "/name" for /dev/shm (glibc drops the
// leading slashes shm_open is given), the label for a memfd.
void PublishName(const Identity& id, const char* name, bool memfd) {
  if (!name || id.inode == 0) return;
  if (memfd) {
    Job().PublishName(id.device, id.inode, name);
    return;
  }
  while (*name == '/') ++name;
  char slashed[ShmMapping::kNameCap];
  slashed[0] = '/';
  CopyString(slashed + 1, sizeof slashed - 1, name);
  Job().PublishName(id.device, id.inode, slashed);
}

}  // namespace

std::atomic<FdEntry*> g_fds{nullptr};

void RetrackFd(int fd, const Identity& id) { TrackFd(fd, id); }

FdEntry* FdTable() {
  FdEntry* t = g_fds.load(std::memory_order_acquire);
  if (t) return t;
  auto* fresh = static_cast<FdEntry*>(MapAnon(sizeof(FdEntry) * kMaxFds, MAP_PRIVATE));
  if (!fresh) return nullptr;
  if (!g_fds.compare_exchange_strong(t, fresh)) {
    g_real.munmap(fresh, sizeof(FdEntry) * kMaxFds);
    return t;
  }
  return fresh;
}

bool IdentifyShm(int fd, Identity* id) {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return false;
  Identity tracked;
  if (TrackedEntry(fd, &tracked) && tracked.device == st.st_dev && tracked.inode == st.st_ino) {
    *id = tracked;
    id->size = static_cast<uint64_t>(st.st_size);
    return true;
  }
  uint64_t dev = st.st_dev;
  if (dev == 0 || (dev != State().shm_dev && dev != State().memfd_dev)) return false;
  id->device = dev;
  id->inode = st.st_ino;
  id->size = static_cast<uint64_t>(st.st_size);
  id->flags = dev == State().memfd_dev ? static_cast<uint32_t>(kFlagMemfd) : 0u;
  // Made or opened by name in this job (a worker's batch): its name is
  // known without a readlink, the slowest part of this path.
  if (Job().FindName(dev, id->inode, id->name, sizeof id->name)) {
    if (dev != State().memfd_dev && IsDriverInternalName(id->name))
      id->flags |= kFlagDriverInternal;
    return true;
  }
  char proc[40] = "/proc/self/fd/";
  FormatU64(proc + 14, sizeof proc - 14, static_cast<uint64_t>(fd));
  char link[512];
  ssize_t n = readlink(proc, link, sizeof link - 1);
  if (n > 0) {
    link[n] = '\0';
    bool memfd = false;
    if (NameFromFdLink(link, id->name, sizeof id->name, &memfd) && !memfd &&
        IsDriverInternalName(id->name))
      id->flags |= kFlagDriverInternal;
  }
  return true;
}

// --- hooks' slow paths ---------------------------------------------------------------
// Unlike the allocator's, these record calls made inside another pinscope
// hook too: the CUDA driver opens its own segment (/cuda_injection_path_shm)
// while it initializes, often inside the program's first hooked CUDA call,
// and that segment is to be recorded (driver_internal). Recording a shm
// event calls nothing that comes back into these paths.

int ShmOpen(const char* name, int oflag, mode_t mode) {
  if (!Recording()) return g_real.shm_open(name, oflag, mode);
  HookScope scope;
  ShmOwnTime own;
  uint64_t t0 = MonoNs();
  auto real = [&](int flags) { return Aside([&] { return g_real.shm_open(name, flags, mode); }); };
  int fd = -1;
  bool created = false;
  if ((oflag & O_CREAT) && !(oflag & O_EXCL)) {
    // Whether this call made the object is worth knowing (the creator owns
    // the segment in the report): try an exclusive create, then a plain
    // open. Same outcome for the program; a loop covers a racing unlink.
    bool decided = false;
    for (int attempt = 0; attempt < 4 && !decided; ++attempt) {
      fd = real(oflag | O_EXCL);
      if (fd >= 0 || errno != EEXIST) {
        created = fd >= 0;
        decided = true;
        break;
      }
      fd = real(oflag & ~O_CREAT);
      if (fd >= 0 || errno != ENOENT) decided = true;
    }
    if (!decided) fd = real(oflag);
  } else {
    fd = real(oflag);
    created = fd >= 0 && (oflag & O_CREAT);
  }
  int err = fd < 0 ? errno : 0;
  Identity id;
  NameFrom(name, &id);
  if (IsDriverInternalName(id.name)) id.flags |= kFlagDriverInternal;
  struct stat st;
  if (fd >= 0 && fstat(fd, &st) == 0) {
    id.device = st.st_dev;
    id.inode = st.st_ino;
    id.size = static_cast<uint64_t>(st.st_size);
  }
  if (fd >= 0) {
    TrackFd(fd, id);
    PublishName(id, name, false);
  }
  if (fd >= 0 && created && (oflag & O_EXCL))
    Aside([&] { PoolSegmentCreated(fd, name, id.device, id.inode); });
  Record(created ? f::kShmCreate : f::kShmOpen, id, fd, id.size, 0, 0, oflag, 0, err, t0);
  if (fd < 0) scope.KeepErrno(err);
  return fd;
}

int ShmUnlink(const char* name) {
  if (!Recording()) return g_real.shm_unlink(name);
  HookScope scope;
  ShmOwnTime own;
  uint64_t t0 = MonoNs();
  Identity id;
  NameFrom(name, &id);
  if (IsDriverInternalName(id.name)) id.flags |= kFlagDriverInternal;
  // The object's identity, for joining with its fds and mappings.
  char path[4096];
  struct stat st;
  if (ShmPath(name, path, sizeof path) && stat(path, &st) == 0) {
    id.device = st.st_dev;
    id.inode = st.st_ino;
  }
  // A worker's new batch segment may become a pool slot first (shm_pool.cc).
  Aside([&] { PoolAtUnlink(name, t0); });
  int rc = Aside([&] { return g_real.shm_unlink(name); });
  int err = rc < 0 ? errno : 0;
  Record(f::kShmUnlink, id, -1, 0, 0, 0, 0, 0, err, t0);
  if (rc < 0) scope.KeepErrno(err);
  return rc;
}

int MemfdCreate(const char* name, unsigned flags) {
  if (!Recording()) return g_real.memfd_create(name, flags);
  HookScope scope;
  ShmOwnTime own;
  uint64_t t0 = MonoNs();
  int fd = Aside([&] { return g_real.memfd_create(name, flags); });
  int err = fd < 0 ? errno : 0;
  Identity id;
  NameFrom(name, &id);
  id.flags = kFlagMemfd;
  struct stat st;
  if (fd >= 0 && fstat(fd, &st) == 0) {
    id.device = st.st_dev;
    id.inode = st.st_ino;
  }
  if (fd >= 0) {
    TrackFd(fd, id);
    PublishName(id, name, true);
  }
  Record(f::kMemfdCreate, id, fd, 0, 0, 0, static_cast<int>(flags), 0, err, t0);
  if (fd < 0) scope.KeepErrno(err);
  return fd;
}

int FtruncateSlow(int fd, off_t length, bool is64) {
  auto call = [&] { return is64 ? g_real.ftruncate64(fd, length) : g_real.ftruncate(fd, length); };
  if (!Recording() || InForeignChild()) return call();
  HookScope scope;
  ShmOwnTime own;
  uint64_t t0 = MonoNs();
  Identity id;
  int rc = Aside(call);
  int err = rc < 0 ? errno : 0;
  if (rc == 0) Aside([&] { PoolSegmentTruncated(fd, static_cast<uint64_t>(length)); });
  if (TrackedAndValid(fd, &id)) {
    Record(f::kShmTruncate, id, fd, static_cast<uint64_t>(length), 0, 0, 0, 0, err, t0);
    if (err == ENOSPC && !(id.flags & kFlagMemfd))
      ReportNoSpace("ftruncate", id.name, static_cast<uint64_t>(length));
  }
  if (rc < 0) scope.KeepErrno(err);
  return rc;
}

int PosixFallocateSlow(int fd, off_t offset, off_t length, bool is64) {
  auto call = [&] {
    return is64 ? g_real.posix_fallocate64(fd, offset, length)
                : g_real.posix_fallocate(fd, offset, length);
  };
  if (!Recording() || InForeignChild()) return call();
  HookScope scope;
  ShmOwnTime own;
  uint64_t t0 = MonoNs();
  Identity id;
  int rc = Aside(call);  // returns the error number; errno is not part of its contract
  if (TrackedAndValid(fd, &id)) {
    Record(f::kShmFallocate, id, fd, static_cast<uint64_t>(length), static_cast<uint64_t>(offset),
           0, 0, 0, rc, t0);
    if (rc == ENOSPC && !(id.flags & kFlagMemfd))
      ReportNoSpace("posix_fallocate", id.name, static_cast<uint64_t>(length));
  }
  return rc;
}

// Ordering, as for free(): an fd that goes away is recorded BEFORE the real
// call, because another thread may get the same fd number the moment the
// call returns, and its event must follow ours in the trace.
int CloseSlow(int fd) {
  if (InForeignChild()) return g_real.close(fd);
  HookScope scope;
  ShmOwnTime own;
  uint64_t t0 = MonoNs();
  Identity id;
  bool tracked = TrackedEntry(fd, &id);
  UntrackFd(fd);
  Aside([&] { PoolSegmentClosed(fd); });
  if (tracked) Record(f::kShmClose, id, fd, 0, 0, 0, 0, 0, 0, t0);
  int rc = Aside([&] { return g_real.close(fd); });
  if (rc < 0) scope.KeepErrno(errno);
  return rc;
}

// --- names (no side effects) --------------------------------------------------------

bool IsDriverInternalName(const char* name) {
  if (!name) return false;
  while (*name == '/') ++name;
  return !strncmp(name, "cuda", 4);
}

bool NameFromFdLink(const char* link, char* out, size_t cap, bool* memfd) {
  static const char kDeleted[] = " (deleted)";
  size_t n = strlen(link);
  if (n >= sizeof kDeleted - 1 && !strcmp(link + n - (sizeof kDeleted - 1), kDeleted))
    n -= sizeof kDeleted - 1;
  const char* start;
  if (!strncmp(link, "/dev/shm/", 9)) {
    start = link + 8;  // keep the slash: "/torch_..." as passed to shm_open
    *memfd = false;
  } else if (!strncmp(link, "/memfd:", 7)) {
    start = link + 7;
    *memfd = true;
  } else {
    return false;
  }
  size_t len = static_cast<size_t>(link + n - start);
  if (cap == 0) return false;
  if (len >= cap) len = cap - 1;
  memcpy(out, start, len);
  out[len] = '\0';
  return true;
}

}  // namespace pinscope::shim::shm
