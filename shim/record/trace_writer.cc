// Trace file writer; see trace_writer.h.
#include "shim/record/trace_writer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "shim/base/log.h"

namespace pinscope::shim {
namespace {
constexpr size_t kBufferSize = 1u << 20;
}

int TraceWriter::Open(int dir_fd, const char* dir, uint32_t pid) {
  pthread_mutex_lock(&mu_);
  int err = 0;
  if (fd_ < 0) {
    char pidbuf[24];
    FormatU64(pidbuf, sizeof pidbuf, pid);
    for (unsigned n = 0; n < 1000; ++n) {
      size_t len = CopyString(path_, sizeof path_, dir);
      len += CopyString(path_ + len, sizeof path_ - len, "/");
      const size_t name_at = len;
      len += CopyString(path_ + len, sizeof path_ - len, pidbuf);
      if (n) {
        char nbuf[24];
        FormatU64(nbuf, sizeof nbuf, n);
        len += CopyString(path_ + len, sizeof path_ - len, ".");
        len += CopyString(path_ + len, sizeof path_ - len, nbuf);
      }
      CopyString(path_ + len, sizeof path_ - len, ".pstrace");
      // Relative to the folder the process layer opened and checked (owner,
      // mode, no symlink): a link planted in the folder is never followed.
      const char* name = path_ + name_at;
      // If the program closed or reused that fd (EBADF, ENOTDIR), the path
      // the process layer checked at start, still without following a link.
      constexpr int kFlags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
      int fd = dir_fd >= 0 ? openat(dir_fd, name, kFlags, 0600) : -1;
      if (fd < 0 && (dir_fd < 0 || errno == EBADF || errno == ENOTDIR))
        fd = open(path_, kFlags, 0600);
      if (fd >= 0) {
        fd_ = fd;
        err = 0;
        break;
      }
      err = errno;
      if (err != EEXIST) break;
    }
    if (fd_ >= 0 && !EnsureBufferLocked()) {
      err = ENOMEM;
      close(fd_);
      unlink(path_);
      fd_ = -1;
    }
  }
  pthread_mutex_unlock(&mu_);
  return err;
}

bool TraceWriter::EnsureBufferLocked() {
  if (buf_) return true;
  void* p = mmap(nullptr, kBufferSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return false;
  buf_ = static_cast<uint8_t*>(p);
  return true;
}

bool TraceWriter::WriteAllLocked(const uint8_t* data, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd_, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      int expected = 0;
      failure_.compare_exchange_strong(expected, errno);
      return false;
    }
    data += w;
    n -= static_cast<size_t>(w);
    bytes_written_.fetch_add(static_cast<uint64_t>(w), std::memory_order_relaxed);
  }
  return true;
}

bool TraceWriter::Append(const uint8_t* data, size_t n) {
  if (failure_.load(std::memory_order_relaxed)) return false;
  pthread_mutex_lock(&mu_);
  bool ok = fd_ >= 0;
  if (ok) {
    if (len_ + n > kBufferSize) {
      ok = WriteAllLocked(buf_, len_);
      len_ = 0;
    }
    if (ok) {
      if (n > kBufferSize) {
        ok = WriteAllLocked(data, n);
      } else {
        memcpy(buf_ + len_, data, n);
        len_ += n;
      }
    }
  }
  pthread_mutex_unlock(&mu_);
  return ok;
}

bool TraceWriter::Flush() {
  pthread_mutex_lock(&mu_);
  bool ok = true;
  if (fd_ >= 0 && len_ > 0 && !failure_.load(std::memory_order_relaxed)) {
    ok = WriteAllLocked(buf_, len_);
    len_ = 0;
  }
  pthread_mutex_unlock(&mu_);
  return ok && !failure_.load(std::memory_order_relaxed);
}

bool TraceWriter::TryAppendAndFlush(const uint8_t* data, size_t n) {
  if (failure_.load(std::memory_order_relaxed)) return false;
  if (pthread_mutex_trylock(&mu_) != 0) return false;
  bool ok = fd_ >= 0;
  if (ok && len_ > 0) {
    ok = WriteAllLocked(buf_, len_);
    len_ = 0;
  }
  if (ok) ok = WriteAllLocked(data, n);
  pthread_mutex_unlock(&mu_);
  return ok;
}

void TraceWriter::ResetInChild() {
  // The parent's fd and buffered bytes belong to the parent, which still
  // flushes them; the child starts a file of its own on its first event.
  pthread_mutex_init(&mu_, nullptr);
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  len_ = 0;
  bytes_written_.store(0, std::memory_order_relaxed);
  failure_.store(0, std::memory_order_relaxed);
  path_[0] = '\0';
}

void TraceWriter::CloseFile() {
  pthread_mutex_lock(&mu_);
  if (fd_ >= 0) {
    if (len_ > 0 && !failure_.load(std::memory_order_relaxed)) WriteAllLocked(buf_, len_);
    len_ = 0;
    close(fd_);
    fd_ = -1;
  }
  pthread_mutex_unlock(&mu_);
}

}  // namespace pinscope::shim
