// Shared-memory recording; see shm_core.h. Ordering, as for free(): an fd
// or a range that goes away (close, munmap, MAP_FIXED replacement) is
// recorded BEFORE the real call, because another thread may get the same fd
// number or address the moment the call returns, and its event must follow
// ours in the trace.
#include "shim/core/shm_core.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "shim/base/clock.h"
#include "shim/base/guard.h"
#include "shim/base/log.h"
#include "shim/core/sigbus.h"
#include "shim/pin/pinning.h"
#include "shim/record/recorder.h"
#include "shim/record/trace_fields.h"
#include "shim/stacks/stacks.h"

#ifndef TMPFS_MAGIC
#define TMPFS_MAGIC 0x01021994
#endif

namespace pinscope::shim::shm {
namespace {

namespace f = fields;

// --- real functions ------------------------------------------------------------

// Raw equivalents, for a C library that lacks the symbol (see RealShm).
size_t ShmPath(const char* name, char* path, size_t cap) {
  while (*name == '/') ++name;  // glibc: leading slashes are dropped
  if (!*name || strchr(name, '/')) return 0;
  size_t n = CopyString(path, cap, "/dev/shm/");
  n += CopyString(path + n, cap - n, name);
  return n;
}
int RawShmOpen(const char* name, int oflag, mode_t mode) {
  char path[4096];
  if (!ShmPath(name, path, sizeof path)) {
    errno = EINVAL;
    return -1;
  }
  return static_cast<int>(
      syscall(SYS_openat, AT_FDCWD, path, oflag | O_NOFOLLOW | O_CLOEXEC, mode));
}
int RawShmUnlink(const char* name) {
  char path[4096];
  if (!ShmPath(name, path, sizeof path)) {
    errno = ENOENT;
    return -1;
  }
  return static_cast<int>(syscall(SYS_unlinkat, AT_FDCWD, path, 0));
}
int RawMemfd(const char* name, unsigned flags) {
  return static_cast<int>(syscall(SYS_memfd_create, name, flags));
}
int RawFtruncate(int fd, off_t len) { return static_cast<int>(syscall(SYS_ftruncate, fd, len)); }
int RawFallocate(int fd, off_t off, off_t len) {
  int saved = errno;
  int rc = static_cast<int>(syscall(SYS_fallocate, fd, 0, off, len)) == 0 ? 0 : errno;
  errno = saved;
  return rc;
}
void* RawMmap(void* a, size_t l, int p, int fl, int fd, off_t o) {
  return reinterpret_cast<void*>(syscall(SYS_mmap, a, l, p, fl, fd, o));
}
int RawMunmap(void* a, size_t l) { return static_cast<int>(syscall(SYS_munmap, a, l)); }
int RawClose(int fd) { return static_cast<int>(syscall(SYS_close, fd)); }

template <typename Fn>
Fn Next(const char* name, Fn fallback) {
  HookScope scope;  // dlsym may allocate
  void* p = dlsym(RTLD_NEXT, name);
  return p ? reinterpret_cast<Fn>(p) : fallback;
}

// Idempotent plain stores: racing first calls write the same values.
void ResolveAll() {
  static std::atomic<bool> done{false};
  if (done.load(std::memory_order_acquire)) return;
  RealShm r;
  r.shm_open = Next("shm_open", RawShmOpen);
  r.shm_unlink = Next("shm_unlink", RawShmUnlink);
  r.memfd_create = Next("memfd_create", RawMemfd);
  r.ftruncate = Next("ftruncate", RawFtruncate);
  r.ftruncate64 = Next("ftruncate64", RawFtruncate);
  r.posix_fallocate = Next("posix_fallocate", RawFallocate);
  r.posix_fallocate64 = Next("posix_fallocate64", RawFallocate);
  r.mmap = Next("mmap", RawMmap);
  r.mmap64 = Next("mmap64", RawMmap);
  r.munmap = Next("munmap", RawMunmap);
  r.close = Next("close", RawClose);
  g_real = r;
  done.store(true, std::memory_order_release);
}

int BootShmOpen(const char* n, int o, mode_t m) {
  ResolveAll();
  return g_real.shm_open(n, o, m);
}
int BootShmUnlink(const char* n) {
  ResolveAll();
  return g_real.shm_unlink(n);
}
int BootMemfd(const char* n, unsigned f) {
  ResolveAll();
  return g_real.memfd_create(n, f);
}
int BootFtruncate(int fd, off_t l) {
  ResolveAll();
  return g_real.ftruncate(fd, l);
}
int BootFtruncate64(int fd, off_t l) {
  ResolveAll();
  return g_real.ftruncate64(fd, l);
}
int BootFallocate(int fd, off_t o, off_t l) {
  ResolveAll();
  return g_real.posix_fallocate(fd, o, l);
}
int BootFallocate64(int fd, off_t o, off_t l) {
  ResolveAll();
  return g_real.posix_fallocate64(fd, o, l);
}
void* BootMmap(void* a, size_t l, int p, int f, int fd, off_t o) {
  ResolveAll();
  return g_real.mmap(a, l, p, f, fd, o);
}
void* BootMmap64(void* a, size_t l, int p, int f, int fd, off_t o) {
  ResolveAll();
  return g_real.mmap64(a, l, p, f, fd, o);
}
int BootMunmap(void* a, size_t l) {
  ResolveAll();
  return g_real.munmap(a, l);
}
int BootClose(int fd) {
  ResolveAll();
  return g_real.close(fd);
}

// --- state -------------------------------------------------------------------------

uint64_t g_shm_dev = 0;    // st_dev of /dev/shm when it is a tmpfs
uint64_t g_memfd_dev = 0;  // st_dev of memfd files
std::atomic<bool> g_said_full{false};
JobTable g_job;

void* MapAnon(size_t bytes, int share) {
  void* p = g_real.mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                        share | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

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

// A vfork()ed child shares our memory: it must not edit our tables or write
// into our trace (it is about to exec).
bool InForeignChild() { return static_cast<uint32_t>(getpid()) != ProcessId(); }

struct Identity {
  uint64_t device = 0, inode = 0, size = 0;
  uint32_t flags = 0;
  char name[ShmMapping::kNameCap] = {};
};

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

// Is fd a shared-memory object? Tracked fds are checked against their
// recorded identity (dup2 may have put another file under the number);
// others, such as an fd received with SCM_RIGHTS, by their filesystem.
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
  if (dev == 0 || (dev != g_shm_dev && dev != g_memfd_dev)) return false;
  id->device = dev;
  id->inode = st.st_ino;
  id->size = static_cast<uint64_t>(st.st_size);
  id->flags = dev == g_memfd_dev ? static_cast<uint32_t>(kFlagMemfd) : 0u;
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

void Record(uint32_t op, const Identity& id, int fd, uint64_t size, uint64_t offset,
            uint64_t address, int flags, int prot, int error, uint64_t t0) {
  if (!Recording()) return;
  ShmRecord r;
  r.op = op;
  r.name = id.name;
  r.fd = fd;
  r.size = size;
  r.offset = offset;
  r.address = address;
  r.flags = flags;
  r.prot = prot;
  r.error = error;
  r.device = id.device;
  r.inode = id.inode;
  r.driver_internal = (id.flags & kFlagDriverInternal) != 0;
  r.stack_id = CaptureStack(StackSite::kShm);
  r.t_enter = t0;
  r.t_exit = MonoNs();
  RecordShm(r);
}

void NameFrom(const char* name, Identity* id) {
  CopyString(id->name, sizeof id->name, name ? name : "");
}

// Drops recorded mappings in [addr, addr+len) and records their unmaps;
// called before the real munmap / MAP_FIXED mmap.
void ForgetRange(uint64_t addr, uint64_t len, uint64_t t0) {
  constexpr size_t kCap = 64;
  ShmMapping over[kCap];
  size_t n = Registry().OverlappingMappings(addr, len, over, kCap);
  if (n == 0) return;
  // The pinning module unregisters before the pages go away (one relaxed
  // load when it pinned nothing).
  PinOnUnmap(reinterpret_cast<void*>(addr), len);
  RemovedPiece pieces[kCap];
  size_t m = Registry().RemoveMappings(addr, len, pieces, kCap);
  uint32_t epoch = Registry().epoch();
  for (size_t i = 0; i < m && i < kCap; ++i) {
    const RemovedPiece& p = pieces[i];
    if (p.whole) g_job.Remove(ProcessId(), p.mapping.device, p.mapping.inode);
    // A forked child unmapping what it inherited: the parent's mapping, not
    // an event of this process.
    if (p.mapping.epoch != epoch) continue;
    Identity id;
    id.device = p.mapping.device;
    id.inode = p.mapping.inode;
    id.flags = p.mapping.flags;
    memcpy(id.name, p.mapping.name, sizeof id.name);
    Record(f::kShmUnmap, id, -1, p.size, p.mapping.offset + (p.address - p.mapping.address),
           p.address, 0, 0, 0, t0);
  }
}

// --- formatting (async-signal-safe) -------------------------------------------------

struct Out {
  char* buf;
  size_t cap;
  size_t len = 0;
  void S(const char* s) {
    while (*s && len + 1 < cap) buf[len++] = *s++;
    buf[len] = '\0';
  }
  void U(uint64_t v) {
    char tmp[24];
    FormatU64(tmp, sizeof tmp, v);
    S(tmp);
  }
  void Hex(uint64_t v) {
    char tmp[19] = "0x";
    char digits[17];
    int n = 0;
    do {
      digits[n++] = "0123456789abcdef"[v & 15];
      v >>= 4;
    } while (v);
    for (int i = 0; i < n; ++i) tmp[2 + i] = digits[n - 1 - i];
    tmp[2 + n] = '\0';
    S(tmp);
  }
  // "32 MiB", "0.8 MiB", "1536 MiB": one decimal below 10 MiB.
  void MiB(uint64_t bytes) {
    constexpr uint64_t kMiB = 1ull << 20;
    uint64_t tenths = (bytes * 10 + kMiB / 2) / kMiB;
    if (bytes >= 10 * kMiB || tenths % 10 == 0) {
      U((bytes + kMiB / 2) / kMiB);
    } else {
      U(tenths / 10);
      S(".");
      U(tenths % 10);
    }
    S(" MiB");
  }
  // Docker's --shm-size syntax: "128m", "2g".
  void ShmSize(uint64_t bytes) {
    uint64_t mib = bytes >> 20;
    if (mib >= 1024 && mib % 1024 == 0) {
      U(mib / 1024);
      S("g");
    } else {
      U(mib);
      S("m");
    }
  }
};

}  // namespace

RealShm g_real = {BootShmOpen,     BootShmUnlink, BootMemfd,       BootFtruncate,
                  BootFtruncate64, BootFallocate, BootFallocate64, BootMmap,
                  BootMmap64,      BootMunmap,    BootClose};
std::atomic<FdEntry*> g_fds{nullptr};

JobTable& Job() { return g_job; }
uint64_t ShmDevice() { return g_shm_dev; }
uint64_t MemfdDevice() { return g_memfd_dev; }

void InitShm() {
  static std::atomic<bool> done{false};
  if (done.exchange(true)) return;
  HookScope scope;
  ResolveAll();
  InstallRegistryForkHandlers();
  struct stat st;
  struct statfs sf;
  // Only a tmpfs /dev/shm identifies shared memory by device: a plain
  // directory there would share its device with every file of the root fs.
  if (stat("/dev/shm", &st) == 0 && statfs("/dev/shm", &sf) == 0 &&
      static_cast<unsigned long>(sf.f_type) == TMPFS_MAGIC)
    g_shm_dev = st.st_dev;
  int mfd = RawMemfd("pinscope-probe", 1u /* MFD_CLOEXEC */);
  if (mfd >= 0) {
    if (fstat(mfd, &st) == 0) g_memfd_dev = st.st_dev;
    RawClose(mfd);
  }
  FdTable();
  g_job.Create();
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
  uint64_t t0 = MonoNs();
  int fd = -1;
  bool created = false;
  if ((oflag & O_CREAT) && !(oflag & O_EXCL)) {
    // Whether this call made the object is worth knowing (the creator owns
    // the segment in the report): try an exclusive create, then a plain
    // open. Same outcome for the program; a loop covers a racing unlink.
    bool decided = false;
    for (int attempt = 0; attempt < 4 && !decided; ++attempt) {
      fd = g_real.shm_open(name, oflag | O_EXCL, mode);
      if (fd >= 0 || errno != EEXIST) {
        created = fd >= 0;
        decided = true;
        break;
      }
      fd = g_real.shm_open(name, oflag & ~O_CREAT, mode);
      if (fd >= 0 || errno != ENOENT) decided = true;
    }
    if (!decided) fd = g_real.shm_open(name, oflag, mode);
  } else {
    fd = g_real.shm_open(name, oflag, mode);
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
  if (fd >= 0) TrackFd(fd, id);
  Record(created ? f::kShmCreate : f::kShmOpen, id, fd, id.size, 0, 0, oflag, 0, err, t0);
  if (fd < 0) scope.KeepErrno(err);
  return fd;
}

int ShmUnlink(const char* name) {
  if (!Recording()) return g_real.shm_unlink(name);
  HookScope scope;
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
  int rc = g_real.shm_unlink(name);
  int err = rc < 0 ? errno : 0;
  Record(f::kShmUnlink, id, -1, 0, 0, 0, 0, 0, err, t0);
  if (rc < 0) scope.KeepErrno(err);
  return rc;
}

int MemfdCreate(const char* name, unsigned flags) {
  if (!Recording()) return g_real.memfd_create(name, flags);
  HookScope scope;
  uint64_t t0 = MonoNs();
  int fd = g_real.memfd_create(name, flags);
  int err = fd < 0 ? errno : 0;
  Identity id;
  NameFrom(name, &id);
  id.flags = kFlagMemfd;
  struct stat st;
  if (fd >= 0 && fstat(fd, &st) == 0) {
    id.device = st.st_dev;
    id.inode = st.st_ino;
  }
  if (fd >= 0) TrackFd(fd, id);
  Record(f::kMemfdCreate, id, fd, 0, 0, 0, static_cast<int>(flags), 0, err, t0);
  if (fd < 0) scope.KeepErrno(err);
  return fd;
}

int FtruncateSlow(int fd, off_t length, bool is64) {
  auto call = [&] { return is64 ? g_real.ftruncate64(fd, length) : g_real.ftruncate(fd, length); };
  if (!Recording() || InForeignChild()) return call();
  HookScope scope;
  uint64_t t0 = MonoNs();
  Identity id;
  int rc = call();
  int err = rc < 0 ? errno : 0;
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
  uint64_t t0 = MonoNs();
  Identity id;
  int rc = call();  // returns the error number; errno is not part of its contract
  if (TrackedAndValid(fd, &id)) {
    Record(f::kShmFallocate, id, fd, static_cast<uint64_t>(length), static_cast<uint64_t>(offset),
           0, 0, 0, rc, t0);
    if (rc == ENOSPC && !(id.flags & kFlagMemfd))
      ReportNoSpace("posix_fallocate", id.name, static_cast<uint64_t>(length));
  }
  return rc;
}

void* MmapSlow(void* addr, size_t length, int prot, int flags, int fd, off_t offset, bool is64) {
  auto call = [&] {
    return is64 ? g_real.mmap64(addr, length, prot, flags, fd, offset)
                : g_real.mmap(addr, length, prot, flags, fd, offset);
  };
  // Not recording: the registry holds no mapping a MAP_FIXED could replace.
  if (!Recording() || InForeignChild()) return call();
  HookScope scope;
  uint64_t t0 = MonoNs();
  uint64_t a = reinterpret_cast<uintptr_t>(addr);
  // MAP_FIXED replaces whatever lay there: those mappings end now.
  if ((flags & MAP_FIXED) && Registry().MayOverlapMappings(a, length)) ForgetRange(a, length, t0);
  Identity id;
  bool shm = fd >= 0 && !(flags & MAP_ANONYMOUS) && IdentifyShm(fd, &id);
  void* p = call();
  int err = p == MAP_FAILED ? errno : 0;
  if (shm) {
    uint64_t at = p == MAP_FAILED ? 0 : reinterpret_cast<uintptr_t>(p);
    if (at) {
      ShmMapping m;
      m.address = at;
      m.size = length;
      m.offset = static_cast<uint64_t>(offset);
      m.device = id.device;
      m.inode = id.inode;
      m.flags = id.flags;
      m.prot = prot;
      m.map_flags = flags;
      memcpy(m.name, id.name, sizeof m.name);
      if (Registry().AddMapping(m)) {
        if (!(id.flags & kFlagDriverInternal))
          g_job.Add(ProcessId(), at, id.device, id.inode, length);
        EnsureSigbusHandler();
        // A DataLoader batch arriving: registered ahead if its size is one
        // this process copies (docs/pinning.md, pin-ahead).
        if ((flags & MAP_SHARED) && !(id.flags & kFlagDriverInternal))
          PinAheadOnMap(p, length, (prot & PROT_WRITE) != 0);
      }
    }
    Record(f::kShmMap, id, fd, length, static_cast<uint64_t>(offset), at, flags, prot, err, t0);
  }
  if (err) scope.KeepErrno(err);
  return p;
}

int MunmapSlow(void* addr, size_t length) {
  uint64_t a = reinterpret_cast<uintptr_t>(addr);
  static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  // Invalid arguments change nothing: let the real call say EINVAL.
  if (length == 0 || (a & (page - 1)) || InForeignChild()) return g_real.munmap(addr, length);
  HookScope scope;
  uint64_t t0 = MonoNs();
  uint64_t len = (length + page - 1) & ~(page - 1);
  ForgetRange(a, len, t0);
  int rc = g_real.munmap(addr, length);
  if (rc < 0) scope.KeepErrno(errno);
  return rc;
}

int CloseSlow(int fd) {
  if (InForeignChild()) return g_real.close(fd);
  HookScope scope;
  uint64_t t0 = MonoNs();
  Identity id;
  bool tracked = TrackedEntry(fd, &id);
  UntrackFd(fd);
  if (tracked) Record(f::kShmClose, id, fd, 0, 0, 0, 0, 0, 0, t0);
  int rc = g_real.close(fd);
  if (rc < 0) scope.KeepErrno(errno);
  return rc;
}

// --- pure pieces -------------------------------------------------------------------

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

bool LooksFull(const ShmSpace& space) {
  return space.known && (space.free_bytes < (1ull << 20) || space.free_bytes * 50 < space.capacity);
}

uint64_t SuggestShmSize(uint64_t needed) {
  uint64_t want = 2 * needed, size = 64ull << 20;
  while (size < want) size <<= 1;
  return size;
}

ShmSpace ReadShmSpace() {
  ShmSpace s;
  struct statfs sf;
  // The statfs system call itself: glibc's statvfs may read /proc/mounts.
  if (syscall(SYS_statfs, "/dev/shm", &sf) == 0) {
    s.known = true;
    s.capacity = static_cast<uint64_t>(sf.f_blocks) * static_cast<uint64_t>(sf.f_bsize);
    s.free_bytes = static_cast<uint64_t>(sf.f_bavail) * static_cast<uint64_t>(sf.f_bsize);
  }
  return s;
}

size_t FormatShmDiagnosis(char* buf, size_t cap, const ShmFailure& fl, const ShmSpace& space,
                          const JobUsage& job) {
  if (cap == 0) return 0;
  Out o{buf, cap};
  o.S("pinscope: ");
  const char* kind = fl.on_dev_shm ? "shared-memory segment " : "memfd segment ";
  const char* seg = fl.segment && *fl.segment ? fl.segment : "(unnamed)";
  if (fl.call) {
    o.S(fl.call);
    o.S(" of ");
    o.MiB(fl.segment_bytes);
    o.S(" for ");
    o.S(kind);
    o.S(seg);
    o.S(" failed with ENOSPC: ");
  } else {
    o.S("Bus error at ");
    o.Hex(fl.fault_address);
    o.S(" inside ");
    o.S(kind);
    o.S(seg);
    o.S(" (");
    o.MiB(fl.segment_bytes);
    o.S("): ");
  }
  if (!fl.on_dev_shm) {
    o.S("its memory could not be allocated (a memory or cgroup limit), or the access lies past "
        "the end of the segment\n");
    return o.len;
  }
  if (!space.known) {
    o.S("/dev/shm could not be read; this job maps ");
    o.U(job.segments);
    o.S(" segments (");
    o.MiB(job.bytes);
    o.S(")\n");
    return o.len;
  }
  uint64_t used = space.capacity > space.free_bytes ? space.capacity - space.free_bytes : 0;
  if (!fl.call && !LooksFull(space)) {
    o.S("/dev/shm has ");
    o.MiB(space.free_bytes);
    o.S(" free of ");
    o.MiB(space.capacity);
    o.S(", so the access lies past the end of the segment (was it shrunk by ftruncate?)\n");
    return o.len;
  }
  o.S("/dev/shm is full: ");
  o.MiB(space.capacity);
  o.S(" capacity, ");
  o.MiB(used);
  o.S(" in use");
  if (job.segments) {
    o.S(" by ");
    o.U(job.segments);
    o.S(job.segments == 1 ? " segment" : " segments");
    o.S(" of this job (");
    o.MiB(job.bytes);
    o.S(" mapped)");
  }
  uint64_t needed = used > job.bytes ? used : job.bytes;
  if (fl.call) needed += fl.segment_bytes;
  o.S("; start the container with --shm-size of at least ");
  o.ShmSize(SuggestShmSize(needed));
  o.S("\n");
  return o.len;
}

void ReportNoSpace(const char* call, const char* name, uint64_t requested) {
  if (g_said_full.exchange(true)) return;  // once per process in the trace
  ShmFailure fl;
  fl.call = call;
  fl.segment = name;
  fl.segment_bytes = requested;
  char text[768];
  size_t n = FormatShmDiagnosis(text, sizeof text, fl, ReadShmSpace(), g_job.Usage());
  bool first = g_job.FirstDiagnosis();
  for (size_t off = 0; first && off < n;) {
    ssize_t w = write(2, text + off, n - off);
    if (w <= 0) break;
    off += static_cast<size_t>(w);
  }
  if (n > 0 && text[n - 1] == '\n') text[n - 1] = '\0';
  RecordNotice(f::kError, "shm_full", text + 10);  // without "pinscope: "
}

// --- job table ---------------------------------------------------------------------

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
