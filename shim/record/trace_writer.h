// One process's trace file: two fixed buffers over a raw fd. The program's
// threads append packets to the active buffer; a full buffer is handed to the
// flusher thread of shim/process, which compresses it into one zstd frame
// (PINSCOPE_COMPRESS, on by default) and writes it, while appends go on into
// the other buffer. The hooks never compress or write unless the flusher has
// fallen a whole buffer behind. Never uses the hooked allocator or stdio
// (heaptrack util/linewriter.h does the same); zstd runs in a static context
// over mmap'd memory (ZSTD_initStaticCCtx), so it allocates nothing either.
//
// File layout (docs/trace-format.md, "Compression"): compressed, a 24-byte
// zstd skippable frame naming the container and its version, then one zstd
// frame per flushed buffer, each holding whole packets only; uncompressed,
// the packets as they are (the format before issue 18).
//
// Locks: io_mu_ (the compressor, the fd and the order of the file's frames)
// is taken before appends_.mu (the buffers); appends_.mu is held only for a
// memcpy or a buffer swap, never while compressing or writing, except by
// the signal-handler path, which holds both.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace pinscope::shim {

// The compressed container's preamble: a zstd skippable frame (ignored by
// `zstd -d`) whose 16-byte payload is "pinscope", the container version
// (little endian) and the compression (kTraceCompressionZstd).
inline constexpr uint32_t kTraceSkippableMagic = 0x184D2A5Au;
inline constexpr uint32_t kTraceContainerVersion = 1;
inline constexpr uint32_t kTraceCompressionZstd = 1;
inline constexpr size_t kTracePreambleBytes = 24;
// zstd level: 1, the fastest of the regular levels (docs/benchmarks.md).
inline constexpr int kTraceZstdLevel = 1;

class TraceWriter {
 public:
  // Bytes per buffer, so the most a compressed frame holds.
  static constexpr size_t kBufferSize = 1u << 20;

  // Creates <dir>/<pid>.pstrace with O_EXCL|O_NOFOLLOW and mode 0600; if the
  // name is taken (a pid reused within one run folder) tries <pid>.1.pstrace
  // and so on. Never opens an existing file. `compress`: zstd frames after
  // the preamble, else the plain packet stream. Returns 0 or an errno value.
  int Open(int dir_fd, const char* dir, uint32_t pid, bool compress = true);
  bool is_open() const { return fd_ >= 0; }
  bool compressing() const { return compress_; }
  const char* path() const { return path_; }

  // Appends one already framed packet. Returns false once the writer failed
  // (disk full, I/O error); the caller then goes passive.
  bool Append(const uint8_t* data, size_t n);
  // Writes out everything appended before the call; returns false on failure.
  bool Flush();
  // The flusher thread: waits until a full buffer is waiting to be written
  // or until `deadline_mono_ns` (CLOCK_MONOTONIC) passes; true if one is.
  bool WaitForFullBuffer(uint64_t deadline_mono_ns);
  // Compresses and writes the full buffer waiting, if any (the flusher).
  bool WriteFullBuffer();
  // Async-signal-safe Append + Flush for a signal handler: gives up (false)
  // instead of waiting when a lock is taken, since the interrupted
  // thread may hold it. pthread_mutex_trylock is one atomic exchange.
  bool TryAppendAndFlush(const uint8_t* data, size_t n);
  // The exit packet from a signal handler (RecorderFinishFromSignal): never
  // waits. Where this thread was interrupted inside Append (it holds
  // appends_.mu, the buffers are mid-change and stay so), the packet is written alone,
  // as its own frame after those the file holds, losing what was buffered;
  // where it was interrupted while writing (it holds io_mu_: the compressor
  // is mid-use), nothing can be written. Else TryAppendAndFlush.
  enum class SignalWrite { kWritten, kBusy, kNever };
  SignalWrite TryWriteFromSignal(const uint8_t* data, size_t n);
  // errno of the first failed write, 0 if none.
  int failure() const { return failure_.load(std::memory_order_relaxed); }
  // Read without the lock (the flusher's counters): atomic. Bytes in the
  // file (compressed), and bytes of packets written into it (before).
  uint64_t bytes_written() const { return bytes_written_.load(std::memory_order_relaxed); }
  uint64_t packet_bytes_written() const {
    return packet_bytes_written_.load(std::memory_order_relaxed);
  }
  // Buffers the program's threads had to write themselves because the
  // flusher was a whole buffer behind (0 in a healthy run).
  uint64_t inline_writes() const { return inline_writes_.load(std::memory_order_relaxed); }

  // fork(): the prepare handler takes the locks so no thread is mid-append
  // or mid-write, the parent releases them, the child forgets the parent's
  // file and buffers.
  void LockForFork();
  void UnlockInParent();
  void ResetInChild();
  // After close (exec/exit): everything buffered is written; appends are dropped.
  void CloseFile();

 private:
  // With io_mu_ held: compresses (or not) and writes one chunk of whole packets.
  bool EmitLocked(const uint8_t* data, size_t n);
  bool WriteAllLocked(const uint8_t* data, size_t n);
  // With io_mu_ held, appends_.mu not: writes the queued buffer, if any.
  bool DrainQueuedLocked();
  // With appends_.mu held: makes the active buffer the queued one
  // (appends_.queued false before).
  void QueueActiveLocked();
  bool EnsureMemoryLocked();
  // The locks, noting in the thread's TLS which of them it holds (for
  // TryWriteFromSignal). The flusher's condition wait takes appends_.mu
  // directly: pinscope's threads block every signal.
  void LockMu();
  void UnlockMu();
  bool TryLockMu();
  void LockIo();
  void UnlockIo();
  bool TryLockIo();
  void Fail(int err);

  // What every append writes (the lock and where the bytes go) on one cache
  // line of its own: the training loop's thread and the DataLoader's pin
  // thread append in turn from different cores, and each append takes this
  // line (and the buffer's tail) from the other core; spread over two or
  // three lines, with fields the flusher writes, it took as many.
  struct alignas(64) Appends {
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    int active = 0;       // the buffer appends go into
    bool queued = false;  // the other buffer waits to be written
    size_t len = 0;       // bytes in the active buffer
  } appends_;
  static_assert(sizeof(pthread_mutex_t) + 2 * sizeof(size_t) <= 64);
  pthread_mutex_t io_mu_ = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t full_cv_ = PTHREAD_COND_INITIALIZER;  // waited on with CLOCK_MONOTONIC
  int fd_ = -1;
  bool compress_ = true;
  bool preamble_written_ = false;          // with the file's first frame
  uint8_t* bufs_[2] = {nullptr, nullptr};  // mmap'd, kBufferSize each
  size_t queued_len_ = 0;
  uint8_t* zbuf_ = nullptr;  // ZSTD_compressBound(kBufferSize), mmap'd
  size_t zcap_ = 0;
  void* cctx_ = nullptr;  // ZSTD_CCtx in mmap'd memory (ZSTD_initStaticCCtx)
  std::atomic<uint64_t> bytes_written_{0};
  std::atomic<uint64_t> packet_bytes_written_{0};
  std::atomic<uint64_t> inline_writes_{0};
  std::atomic<int> failure_{0};
  char path_[4200] = {};
};

}  // namespace pinscope::shim
