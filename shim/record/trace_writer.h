// One process's trace file: a fixed buffer over a raw fd, flushed when full,
// periodically (by the flusher thread of shim/process) and at exit. Never uses
// the hooked allocator or stdio (heaptrack util/linewriter.h does the same).
// Thread-safe: Append/Flush serialize on one mutex that is never held while
// calling anything that allocates.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace pinscope::shim {

class TraceWriter {
 public:
  // Creates <dir>/<pid>.pstrace with O_EXCL|O_NOFOLLOW and mode 0600; if the
  // name is taken (a pid reused within one run folder) tries <pid>.1.pstrace
  // and so on. Never opens an existing file. Returns 0 or an errno value.
  int Open(int dir_fd, const char* dir, uint32_t pid);
  bool is_open() const { return fd_ >= 0; }
  const char* path() const { return path_; }

  // Appends one already framed packet. Returns false once the writer failed
  // (disk full, I/O error); the caller then goes passive.
  bool Append(const uint8_t* data, size_t n);
  // Writes the buffer out; returns false on failure.
  bool Flush();
  // Async-signal-safe Append + Flush for a signal handler: gives up (false)
  // instead of waiting when the lock is taken, since the interrupted
  // thread may hold it. pthread_mutex_trylock is one atomic exchange.
  bool TryAppendAndFlush(const uint8_t* data, size_t n);
  // errno of the first failed write, 0 if none.
  int failure() const { return failure_.load(std::memory_order_relaxed); }
  // Read without the lock (the flusher's counters): atomic.
  uint64_t bytes_written() const { return bytes_written_.load(std::memory_order_relaxed); }

  // fork(): the prepare handler takes the lock so no thread is mid-append,
  // the parent releases it, the child forgets the parent's file and buffer.
  void LockForFork() { pthread_mutex_lock(&mu_); }
  void UnlockInParent() { pthread_mutex_unlock(&mu_); }
  void ResetInChild();
  // After close (exec/exit): appends are dropped.
  void CloseFile();

 private:
  bool WriteAllLocked(const uint8_t* data, size_t n);
  bool EnsureBufferLocked();

  pthread_mutex_t mu_ = PTHREAD_MUTEX_INITIALIZER;
  int fd_ = -1;
  uint8_t* buf_ = nullptr;  // mmap'd, kBufferSize
  size_t len_ = 0;
  std::atomic<uint64_t> bytes_written_{0};
  std::atomic<int> failure_{0};
  char path_[4200] = {};
};

}  // namespace pinscope::shim
