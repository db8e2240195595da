// Trace file writer; see trace_writer.h.
#include "shim/record/trace_writer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#define ZSTD_STATIC_LINKING_ONLY  // ZSTD_initStaticCCtx, ZSTD_estimateCStreamSize
#include <zstd.h>

#include "shim/base/guard.h"
#include "shim/base/log.h"

namespace pinscope::shim {
namespace {

void PutLe32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

// The compressed container's first bytes (trace_writer.h).
void EncodePreamble(uint8_t out[kTracePreambleBytes]) {
  PutLe32(out, kTraceSkippableMagic);
  PutLe32(out + 4, kTracePreambleBytes - 8);
  memcpy(out + 8, "pinscope", 8);
  PutLe32(out + 16, kTraceContainerVersion);
  PutLe32(out + 20, kTraceCompressionZstd);
}

// Which of the writer's locks this thread holds (one writer a process).
constexpr uint8_t kHoldsMu = 1, kHoldsIo = 2;
PINSCOPE_TLS uint8_t t_holds = 0;

void Hold(pthread_mutex_t* mu, uint8_t bit) {
  pthread_mutex_lock(mu);
  t_holds |= bit;
}

void Release(pthread_mutex_t* mu, uint8_t bit) {
  t_holds &= static_cast<uint8_t>(~bit);
  pthread_mutex_unlock(mu);
}

bool TryHold(pthread_mutex_t* mu, uint8_t bit) {
  if (pthread_mutex_trylock(mu) != 0) return false;
  t_holds |= bit;
  return true;
}

void* MapAnonymous(size_t n) {
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

}  // namespace

int TraceWriter::Open(int dir_fd, const char* dir, uint32_t pid, bool compress) {
  LockIo();
  LockMu();
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
    if (fd_ >= 0) {
      compress_ = compress;
      preamble_written_ = false;
      if (!EnsureMemoryLocked()) err = ENOMEM;
      if (err) {
        close(fd_);
        unlink(path_);
        fd_ = -1;
      }
    }
  }
  UnlockMu();
  UnlockIo();
  return err;
}

bool TraceWriter::EnsureMemoryLocked() {
  if (!bufs_[0]) {
    auto* p = static_cast<uint8_t*>(MapAnonymous(2 * kBufferSize));
    if (!p) return false;
    bufs_[0] = p;
    bufs_[1] = p + kBufferSize;
  }
  if (compress_ && !cctx_) {
    // The context first (page aligned), then the frame buffer.
    const size_t ctx_bytes = (ZSTD_estimateCStreamSize(kTraceZstdLevel) + 4095) & ~size_t{4095};
    const size_t zcap = kTracePreambleBytes + ZSTD_compressBound(kBufferSize);
    auto* p = static_cast<uint8_t*>(MapAnonymous(ctx_bytes + zcap));
    if (!p) return false;
    ZSTD_CCtx* cctx = ZSTD_initStaticCCtx(p, ctx_bytes);
    if (!cctx ||
        ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, kTraceZstdLevel)) ||
        ZSTD_isError(ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1))) {
      munmap(p, ctx_bytes + zcap);
      return false;
    }
    cctx_ = cctx;
    zbuf_ = p + ctx_bytes;
    zcap_ = zcap;
  }
  return true;
}

void TraceWriter::Fail(int err) {
  int expected = 0;
  failure_.compare_exchange_strong(expected, err);
}

bool TraceWriter::WriteAllLocked(const uint8_t* data, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd_, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      Fail(errno);
      return false;
    }
    data += w;
    n -= static_cast<size_t>(w);
    bytes_written_.fetch_add(static_cast<uint64_t>(w), std::memory_order_relaxed);
  }
  return true;
}

bool TraceWriter::EmitLocked(const uint8_t* data, size_t n) {
  if (n == 0) return true;
  if (fd_ < 0 || failure_.load(std::memory_order_relaxed)) return false;
  bool ok;
  if (!compress_) {
    ok = WriteAllLocked(data, n);
  } else {
    // One frame: its header holds the content size, its end a checksum, so
    // a reader tells a cut frame and a damaged one from a good one.
    // The file's first frame carries the preamble in the same write: a
    // process killed before its first flush leaves 0 bytes, as uncompressed.
    auto* cctx = static_cast<ZSTD_CCtx*>(cctx_);
    uint8_t* frame = zbuf_ + kTracePreambleBytes;
    const size_t z = ZSTD_compress2(cctx, frame, zcap_ - kTracePreambleBytes, data, n);
    if (ZSTD_isError(z)) {
      ZSTD_CCtx_reset(cctx, ZSTD_reset_session_only);
      Fail(EIO);
      return false;
    }
    if (preamble_written_) {
      ok = WriteAllLocked(frame, z);
    } else {
      EncodePreamble(zbuf_);
      ok = WriteAllLocked(zbuf_, kTracePreambleBytes + z);
      preamble_written_ = ok;
    }
  }
  if (ok) packet_bytes_written_.fetch_add(n, std::memory_order_relaxed);
  return ok;
}

void TraceWriter::QueueActiveLocked() {
  appends_.queued = true;
  queued_len_ = appends_.len;
  appends_.active ^= 1;
  appends_.len = 0;
}

bool TraceWriter::DrainQueuedLocked() {
  LockMu();
  const bool queued = appends_.queued;
  const uint8_t* data = bufs_[appends_.active ^ 1];
  const size_t n = queued_len_;
  UnlockMu();
  if (!queued) return true;
  // Appends never touch the queued buffer: it is read here without appends_.mu.
  const bool ok = EmitLocked(data, n);
  LockMu();
  appends_.queued = false;
  queued_len_ = 0;
  UnlockMu();
  return ok;
}

void TraceWriter::LockMu() { Hold(&appends_.mu, kHoldsMu); }
void TraceWriter::UnlockMu() { Release(&appends_.mu, kHoldsMu); }
bool TraceWriter::TryLockMu() { return TryHold(&appends_.mu, kHoldsMu); }
void TraceWriter::LockIo() { Hold(&io_mu_, kHoldsIo); }
void TraceWriter::UnlockIo() { Release(&io_mu_, kHoldsIo); }
bool TraceWriter::TryLockIo() { return TryHold(&io_mu_, kHoldsIo); }

bool TraceWriter::Append(const uint8_t* data, size_t n) {
  if (failure_.load(std::memory_order_relaxed)) return false;
  if (n > kBufferSize) return false;  // packets are at most 32 KiB: never
  LockMu();
  for (;;) {
    if (fd_ < 0) break;
    if (appends_.len + n <= kBufferSize) {
      memcpy(bufs_[appends_.active] + appends_.len, data, n);
      appends_.len += n;
      UnlockMu();
      return true;
    }
    if (!appends_.queued) {
      QueueActiveLocked();
      pthread_cond_signal(&full_cv_);
      continue;
    }
    // The flusher is a whole buffer behind (or there is none): this thread
    // writes the older buffer itself, as every append did before issue 18.
    UnlockMu();
    LockIo();
    LockMu();
    const bool still_queued = appends_.queued;
    UnlockMu();
    bool ok = true;
    if (still_queued) {
      inline_writes_.fetch_add(1, std::memory_order_relaxed);
      ok = DrainQueuedLocked();
    }
    UnlockIo();
    if (!ok) return false;
    LockMu();
  }
  UnlockMu();
  return false;
}

bool TraceWriter::Flush() {
  LockIo();
  bool ok = DrainQueuedLocked();
  if (ok) {
    // An append may have queued the active buffer meanwhile: then that one
    // holds what was appended before this call, and is written next.
    LockMu();
    if (!appends_.queued && appends_.len > 0) QueueActiveLocked();
    UnlockMu();
    ok = DrainQueuedLocked();
  }
  UnlockIo();
  return ok && !failure_.load(std::memory_order_relaxed);
}

bool TraceWriter::WaitForFullBuffer(uint64_t deadline_mono_ns) {
  timespec until{static_cast<time_t>(deadline_mono_ns / 1000000000),
                 static_cast<long>(deadline_mono_ns % 1000000000)};
  pthread_mutex_lock(&appends_.mu);
  while (!appends_.queued) {
    const int rc = pthread_cond_clockwait(&full_cv_, &appends_.mu, CLOCK_MONOTONIC, &until);
    if (rc == ETIMEDOUT || rc == EINVAL) break;
  }
  const bool queued = appends_.queued;
  pthread_mutex_unlock(&appends_.mu);
  return queued;
}

bool TraceWriter::WriteFullBuffer() {
  LockIo();
  const bool ok = DrainQueuedLocked();
  UnlockIo();
  return ok;
}

bool TraceWriter::TryAppendAndFlush(const uint8_t* data, size_t n) {
  if (failure_.load(std::memory_order_relaxed)) return false;
  if (!TryLockIo()) return false;
  if (!TryLockMu()) {
    UnlockIo();
    return false;
  }
  // Both locks held: nobody else compresses or writes, nobody appends.
  bool ok = fd_ >= 0;
  if (ok && appends_.queued) ok = EmitLocked(bufs_[appends_.active ^ 1], queued_len_);
  appends_.queued = false;
  queued_len_ = 0;
  if (ok && appends_.len + n <= kBufferSize) {
    memcpy(bufs_[appends_.active] + appends_.len, data, n);
    appends_.len += n;
    ok = EmitLocked(bufs_[appends_.active], appends_.len);
  } else if (ok) {
    ok = EmitLocked(bufs_[appends_.active], appends_.len) && EmitLocked(data, n);
  }
  appends_.len = 0;
  UnlockMu();
  UnlockIo();
  return ok;
}

TraceWriter::SignalWrite TraceWriter::TryWriteFromSignal(const uint8_t* data, size_t n) {
  if (failure_.load(std::memory_order_relaxed)) return SignalWrite::kNever;
  if (t_holds & kHoldsIo) return SignalWrite::kNever;
  if (t_holds & kHoldsMu) {
    if (!TryLockIo()) return SignalWrite::kBusy;
    // A file without its first frame would get a frame without the header
    // (still in the buffer): leave it empty, as a kill there would.
    const bool ok =
        fd_ >= 0 && bytes_written_.load(std::memory_order_relaxed) > 0 && EmitLocked(data, n);
    UnlockIo();
    return ok ? SignalWrite::kWritten : SignalWrite::kNever;
  }
  return TryAppendAndFlush(data, n) ? SignalWrite::kWritten : SignalWrite::kBusy;
}

void TraceWriter::LockForFork() {
  LockIo();
  LockMu();
}

void TraceWriter::UnlockInParent() {
  UnlockMu();
  UnlockIo();
}

void TraceWriter::ResetInChild() {
  // The parent's fd and buffered bytes belong to the parent, which still
  // flushes them; the child starts a file of its own on its first event.
  // The parent's flusher may have been waiting on the condition: a new one.
  pthread_mutex_init(&io_mu_, nullptr);
  pthread_mutex_init(&appends_.mu, nullptr);
  t_holds = 0;  // the forking thread's, from LockForFork
  pthread_cond_init(&full_cv_, nullptr);
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  preamble_written_ = false;
  appends_.len = 0;
  appends_.queued = false;
  queued_len_ = 0;
  if (cctx_) ZSTD_CCtx_reset(static_cast<ZSTD_CCtx*>(cctx_), ZSTD_reset_session_only);
  bytes_written_.store(0, std::memory_order_relaxed);
  packet_bytes_written_.store(0, std::memory_order_relaxed);
  inline_writes_.store(0, std::memory_order_relaxed);
  failure_.store(0, std::memory_order_relaxed);
  path_[0] = '\0';
}

void TraceWriter::CloseFile() {
  LockIo();
  DrainQueuedLocked();
  LockMu();
  if (fd_ >= 0) {
    EmitLocked(bufs_[appends_.active], appends_.len);
    appends_.len = 0;
    close(fd_);
    fd_ = -1;
  }
  UnlockMu();
  UnlockIo();
}

}  // namespace pinscope::shim
