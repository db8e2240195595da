// Exported shared-memory hooks: shm_open, shm_unlink, memfd_create,
// ftruncate(64), posix_fallocate(64), mmap(64), munmap, close, sendmsg and
// sendmmsg (the pool's SCM_RIGHTS check), dup, dup2, dup3, fcntl and fcntl64
// (the pool's check of a slot fd's copies). Each is the
// inline entry point of shm_core.h (fast path: not a tracked fd, anonymous
// memory, far from any recorded mapping). Both the plain and the 64 names
// are exported: glibc aliases them on x86_64, and libtorch calls the 64 ones.
// glibc's own mmap/munmap inside malloc do not go through these.
#include <sys/socket.h>
#include <sys/types.h>

#include <cstdarg>
#include <cstddef>

#include "shim/core/shm_core.h"
#include "shim/process/process.h"
#include "shim/record/recorder.h"

#define PINSCOPE_EXPORT extern "C" __attribute__((visibility("default")))

namespace s = pinscope::shim::shm;

PINSCOPE_EXPORT int ps_shm_open(const char* name, int oflag, mode_t mode) __asm__("shm_open");
PINSCOPE_EXPORT int ps_shm_unlink(const char* name) __asm__("shm_unlink");
PINSCOPE_EXPORT int ps_memfd_create(const char* name, unsigned flags) __asm__("memfd_create");
PINSCOPE_EXPORT int ps_ftruncate(int fd, off_t length) __asm__("ftruncate");
PINSCOPE_EXPORT int ps_ftruncate64(int fd, off_t length) __asm__("ftruncate64");
PINSCOPE_EXPORT int ps_posix_fallocate(int fd, off_t offset,
                                       off_t length) __asm__("posix_fallocate");
PINSCOPE_EXPORT int ps_posix_fallocate64(int fd, off_t offset,
                                         off_t length) __asm__("posix_fallocate64");
PINSCOPE_EXPORT void* ps_mmap(void* addr, size_t length, int prot, int flags, int fd,
                              off_t offset) __asm__("mmap");
PINSCOPE_EXPORT void* ps_mmap64(void* addr, size_t length, int prot, int flags, int fd,
                                off_t offset) __asm__("mmap64");
PINSCOPE_EXPORT int ps_munmap(void* addr, size_t length) __asm__("munmap");
PINSCOPE_EXPORT int ps_close(int fd) __asm__("close");
// The pool of registered slots (PINSCOPE_PIN_POOL) must know when a slot's
// fd leaves with SCM_RIGHTS: one relaxed load otherwise.
PINSCOPE_EXPORT ssize_t ps_sendmsg(int fd, const struct msghdr* msg, int flags) __asm__("sendmsg");
PINSCOPE_EXPORT int ps_sendmmsg(int fd, struct mmsghdr* vec, unsigned int n,
                                int flags) __asm__("sendmmsg");
PINSCOPE_EXPORT int ps_dup(int fd) __asm__("dup");
PINSCOPE_EXPORT int ps_dup2(int fd, int to) __asm__("dup2");
PINSCOPE_EXPORT int ps_dup3(int fd, int to, int flags) __asm__("dup3");
PINSCOPE_EXPORT int ps_fcntl(int fd, int cmd, ...) __asm__("fcntl");
PINSCOPE_EXPORT int ps_fcntl64(int fd, int cmd, ...) __asm__("fcntl64");

int ps_shm_open(const char* name, int oflag, mode_t mode) { return s::ShmOpen(name, oflag, mode); }
int ps_shm_unlink(const char* name) { return s::ShmUnlink(name); }
int ps_memfd_create(const char* name, unsigned flags) { return s::MemfdCreate(name, flags); }
int ps_ftruncate(int fd, off_t length) { return s::Ftruncate(fd, length, false); }
int ps_ftruncate64(int fd, off_t length) { return s::Ftruncate(fd, length, true); }
int ps_posix_fallocate(int fd, off_t offset, off_t length) {
  return s::PosixFallocate(fd, offset, length, false);
}
int ps_posix_fallocate64(int fd, off_t offset, off_t length) {
  return s::PosixFallocate(fd, offset, length, true);
}
void* ps_mmap(void* addr, size_t length, int prot, int flags, int fd, off_t offset) {
  return s::Mmap(addr, length, prot, flags, fd, offset, false);
}
void* ps_mmap64(void* addr, size_t length, int prot, int flags, int fd, off_t offset) {
  return s::Mmap(addr, length, prot, flags, fd, offset, true);
}
int ps_munmap(void* addr, size_t length) { return s::Munmap(addr, length); }
int ps_close(int fd) { return s::Close(fd); }

ssize_t ps_sendmsg(int fd, const struct msghdr* msg, int flags) {
  return s::Sendmsg(fd, msg, flags);
}
int ps_sendmmsg(int fd, struct mmsghdr* vec, unsigned int n, int flags) {
  return s::Sendmmsg(fd, vec, n, flags);
}
int ps_dup(int fd) { return s::Dup(fd); }
int ps_dup2(int fd, int to) { return s::Dup2(fd, to); }
int ps_dup3(int fd, int to, int flags) { return s::Dup3(fd, to, flags); }
// The third argument read as one word, as the C library's fcntl reads it.
int ps_fcntl(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  return s::Fcntl(fd, cmd, arg, false);
}
int ps_fcntl64(int fd, int cmd, ...) {
  va_list ap;
  va_start(ap, cmd);
  void* arg = va_arg(ap, void*);
  va_end(ap);
  return s::Fcntl(fd, cmd, arg, true);
}

namespace {
__attribute__((constructor)) void InitShmHooks() {
  pinscope::shim::InitProcess();
  s::InitShm();
}
}  // namespace
