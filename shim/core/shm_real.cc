// The functions the shared-memory hooks forward to (g_real, shm_core.h):
// resolved with dlsym(RTLD_NEXT) on the first call through a boot stub, or
// raw system calls where the C library has none. See shm_real.h.
#include "shim/core/shm_real.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstring>

#include "shim/base/guard.h"
#include "shim/base/log.h"
#include "shim/core/shm_core.h"

namespace pinscope::shim::shm {

// Raw equivalents, for a C library that lacks the symbol (see RealShm).
size_t ShmPath(const char* name, char* path, size_t cap) {
  while (*name == '/') ++name;  // glibc: leading slashes are dropped
  if (!*name || strchr(name, '/')) return 0;
  size_t n = CopyString(path, cap, "/dev/shm/");
  n += CopyString(path + n, cap - n, name);
  return n;
}
int RawMemfd(const char* name, unsigned flags) {
  return static_cast<int>(syscall(SYS_memfd_create, name, flags));
}
int RawClose(int fd) { return static_cast<int>(syscall(SYS_close, fd)); }

namespace {

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
ssize_t RawSendmsg(int fd, const struct msghdr* m, int f) { return syscall(SYS_sendmsg, fd, m, f); }
int RawSendmmsg(int fd, struct mmsghdr* v, unsigned int n, int f) {
  return static_cast<int>(syscall(SYS_sendmmsg, fd, v, n, f));
}
int RawDup(int fd) { return static_cast<int>(syscall(SYS_dup, fd)); }
int RawDup2(int fd, int to) {
  // dup3 refuses fd == to, where dup2 checks fd and returns it.
  if (fd == to) return static_cast<int>(syscall(SYS_fcntl, fd, F_GETFD)) < 0 ? -1 : fd;
  return static_cast<int>(syscall(SYS_dup3, fd, to, 0));
}
int RawDup3(int fd, int to, int flags) {
  return static_cast<int>(syscall(SYS_dup3, fd, to, flags));
}
// As glibc's fcntl: the third argument read as one word.
int RawFcntl(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  return static_cast<int>(syscall(SYS_fcntl, fd, cmd, arg));
}

template <typename Fn>
Fn Next(const char* name, Fn fallback) {
  HookScope scope;  // dlsym may allocate
  void* p = dlsym(RTLD_NEXT, name);
  return p ? reinterpret_cast<Fn>(p) : fallback;
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
ssize_t BootSendmsg(int fd, const struct msghdr* m, int f) {
  ResolveAll();
  return g_real.sendmsg(fd, m, f);
}
int BootSendmmsg(int fd, struct mmsghdr* v, unsigned int n, int f) {
  ResolveAll();
  return g_real.sendmmsg(fd, v, n, f);
}
int BootDup(int fd) {
  ResolveAll();
  return g_real.dup(fd);
}
int BootDup2(int fd, int to) {
  ResolveAll();
  return g_real.dup2(fd, to);
}
int BootDup3(int fd, int to, int flags) {
  ResolveAll();
  return g_real.dup3(fd, to, flags);
}
template <bool k64>
int BootFcntl(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  ResolveAll();
  return k64 ? g_real.fcntl64(fd, cmd, arg) : g_real.fcntl(fd, cmd, arg);
}

}  // namespace

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
  r.sendmsg = Next("sendmsg", RawSendmsg);
  r.sendmmsg = Next("sendmmsg", RawSendmmsg);
  r.dup = Next("dup", RawDup);
  r.dup2 = Next("dup2", RawDup2);
  r.dup3 = Next("dup3", RawDup3);
  r.fcntl = Next("fcntl", RawFcntl);
  // glibc 2.28 added fcntl64 (what _FILE_OFFSET_BITS=64 code calls, CPython
  // among it); before it, fcntl is the 64-bit one on LP64.
  r.fcntl64 = Next("fcntl64", r.fcntl);
  g_real = r;
  done.store(true, std::memory_order_release);
}

void* MapAnon(size_t bytes, int share) {
  void* p = g_real.mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                        share | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

RealShm g_real = {BootShmOpen,   BootShmUnlink,    BootMemfd,      BootFtruncate, BootFtruncate64,
                  BootFallocate, BootFallocate64,  BootMmap,       BootMmap64,    BootMunmap,
                  BootClose,     BootSendmsg,      BootSendmmsg,   BootDup,       BootDup2,
                  BootDup3,      BootFcntl<false>, BootFcntl<true>};

}  // namespace pinscope::shim::shm
