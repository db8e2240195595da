// Shared memory behind the exported hooks (interpose_shm.cc): shm_open,
// shm_unlink, memfd_create, ftruncate, posix_fallocate, mmap, munmap and
// close. Records ShmEvent packets with each object's (st_dev, st_ino), so
// the analyzer joins a worker's segment with the main process's mapping of
// the fd it received over a socket; keeps the table of tracked fds, the
// registry's mappings, and a job-wide table of live segments for the
// /dev/shm-full diagnosis. docs/host-memory.md. Implemented in shm_core.cc
// (start-up, shared state), shm_real.cc, shm_fds.cc, shm_map.cc,
// shm_space.cc (the diagnosis) and shm_job.cc.
//
// Contract: no function here allocates through malloc or uses stdio; the
// fast paths (an fd that is not shared memory, an anonymous mmap, a munmap
// far from any recorded mapping) are a few loads and a call of the real
// function. errno: the real function's on failure, the caller's otherwise.
#pragma once

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "shim/base/clock.h"
#include "shim/memory/block_registry.h"

namespace pinscope::shim::shm {

static_assert(sizeof(off_t) == 8, "pinscope supports LP64 targets only (off_t == off64_t)");

// The functions the hooks forward to: dlsym(RTLD_NEXT) on first use, or a
// raw-syscall equivalent if the C library has none (old glibc keeps
// shm_open in librt, which a dlopen'ed module may bring in RTLD_LOCAL).
struct RealShm {
  int (*shm_open)(const char*, int, mode_t);
  int (*shm_unlink)(const char*);
  int (*memfd_create)(const char*, unsigned);
  int (*ftruncate)(int, off_t);
  int (*ftruncate64)(int, off_t);
  int (*posix_fallocate)(int, off_t, off_t);
  int (*posix_fallocate64)(int, off_t, off_t);
  void* (*mmap)(void*, size_t, int, int, int, off_t);
  void* (*mmap64)(void*, size_t, int, int, int, off_t);
  int (*munmap)(void*, size_t);
  int (*close)(int);
  ssize_t (*sendmsg)(int, const struct msghdr*, int);
  int (*sendmmsg)(int, struct mmsghdr*, unsigned int, int);
  int (*dup)(int);
  int (*dup2)(int, int);
  int (*dup3)(int, int, int);
  int (*fcntl)(int, int, ...);
  int (*fcntl64)(int, int, ...);
};
extern RealShm g_real;

// One tracked fd: an object this process opened with shm_open/memfd_create.
struct FdEntry {
  std::atomic<uint32_t> state;  // 0 free, 1 tracked
  uint32_t flags;               // RegistryFlags (kFlagMemfd, kFlagDriverInternal)
  uint64_t device, inode;
  char name[ShmMapping::kNameCap];
};
// An mmap'd array indexed by fd; fds at or above kMaxFds are not tracked.
constexpr int kMaxFds = 1 << 16;
extern std::atomic<FdEntry*> g_fds;

inline bool FdTracked(int fd) {
  FdEntry* t = g_fds.load(std::memory_order_relaxed);
  return t != nullptr && static_cast<unsigned>(fd) < static_cast<unsigned>(kMaxFds) &&
         t[fd].state.load(std::memory_order_relaxed) != 0;
}

// Reads /dev/shm's and the memfd filesystem's device numbers, maps the fd
// table and the job table. Called from the library constructor; idempotent.
void InitShm();
// Tests: the device numbers InitShm found (0 if none).
uint64_t ShmDevice();
uint64_t MemfdDevice();

// pinscope's own time in a shared-memory hook's slow path (own_cost.h):
// all of it but what runs through Aside - the real calls (the program's
// time) and pinning's and the pool's work (pinning's). Each Record counts
// one hook; its time is this scope's. A scope opened inside another (a
// hook reached from pinning's work run aside) leaves its time to the outer
// one, which counts it as aside.
class ShmOwnTime {
 public:
  ShmOwnTime();
  ~ShmOwnTime();
  ShmOwnTime(const ShmOwnTime&) = delete;
  ShmOwnTime& operator=(const ShmOwnTime&) = delete;
  // The open scope of this thread, or nullptr.
  static ShmOwnTime* Current();
  // Its own time so far (the diagnostic build's phases, shim/base/phases.h).
  uint64_t own_ns_so_far() const { return MonoNs() - t0_ - aside_ns_; }
  // Inside Aside: a Record here times itself.
  bool in_aside() const { return in_aside_; }

 private:
  template <typename F>
  friend auto Aside(F&& f);
  uint64_t t0_;
  uint64_t aside_ns_ = 0;
  bool outer_;
  bool in_aside_ = false;
};

// Runs f() outside this thread's ShmOwnTime (the real call, pinning's or the
// pool's work) and returns what it returns. errno is f's.
template <typename F>
auto Aside(F&& f) {
  struct Timed {
    ShmOwnTime* scope;
    uint64_t t0;
    bool was;
    ~Timed() {
      if (!scope) return;
      scope->aside_ns_ += MonoNs() - t0;
      scope->in_aside_ = was;
    }
  };
  ShmOwnTime* scope = ShmOwnTime::Current();
  Timed timed{scope, scope ? MonoNs() : 0, scope && scope->in_aside_};
  if (scope) scope->in_aside_ = true;
  return f();
}

// --- entry points -------------------------------------------------------------
int ShmOpen(const char* name, int oflag, mode_t mode);
int ShmUnlink(const char* name);
int MemfdCreate(const char* name, unsigned flags);
// `is64` picks the real function (the same one on LP64 glibc).
int FtruncateSlow(int fd, off_t length, bool is64);
int PosixFallocateSlow(int fd, off_t offset, off_t length, bool is64);
void* MmapSlow(void* addr, size_t length, int prot, int flags, int fd, off_t offset, bool is64);
int MunmapSlow(void* addr, size_t length);
int CloseSlow(int fd);

inline int Ftruncate(int fd, off_t length, bool is64) {
  if (__builtin_expect(!FdTracked(fd), 1))
    return is64 ? g_real.ftruncate64(fd, length) : g_real.ftruncate(fd, length);
  return FtruncateSlow(fd, length, is64);
}
inline int PosixFallocate(int fd, off_t offset, off_t length, bool is64) {
  if (__builtin_expect(!FdTracked(fd), 1))
    return is64 ? g_real.posix_fallocate64(fd, offset, length)
                : g_real.posix_fallocate(fd, offset, length);
  return PosixFallocateSlow(fd, offset, length, is64);
}
// Anonymous memory (Python's arenas, thread stacks) passes straight through;
// only a mapping of an fd is checked (one fstat), and MAP_FIXED, which may
// replace a recorded mapping.
inline void* Mmap(void* addr, size_t length, int prot, int flags, int fd, off_t offset, bool is64) {
  if (__builtin_expect((fd < 0 || (flags & MAP_ANONYMOUS)) && !(flags & MAP_FIXED), 1))
    return is64 ? g_real.mmap64(addr, length, prot, flags, fd, offset)
                : g_real.mmap(addr, length, prot, flags, fd, offset);
  return MmapSlow(addr, length, prot, flags, fd, offset, is64);
}
inline int Munmap(void* addr, size_t length) {
  if (__builtin_expect(!Registry().MayOverlapMappings(reinterpret_cast<uintptr_t>(addr), length),
                       1))
    return g_real.munmap(addr, length);
  return MunmapSlow(addr, length);
}
inline int Close(int fd) {
  if (__builtin_expect(!FdTracked(fd), 1)) return g_real.close(fd);
  return CloseSlow(fd);
}
// sendmsg / sendmmsg: the pool (PINSCOPE_PIN_POOL) must see a slot's fd
// leave with SCM_RIGHTS; otherwise one relaxed load (shm_pool.cc).
ssize_t Sendmsg(int fd, const struct msghdr* msg, int flags);
int Sendmmsg(int fd, struct mmsghdr* vec, unsigned int n, int flags);
// dup, dup2, dup3, fcntl(F_DUPFD, F_DUPFD_CLOEXEC): the pool must see the
// owner copy a slot's fd while its program holds the slot's mapping (the
// copy may be sent on after the munmap); otherwise one relaxed load, and
// for fcntl one compare of cmd first (shm_pool.cc). `arg` is fcntl's
// third argument as the C library reads it (a word; unused by some cmds).
int Dup(int fd);
int Dup2(int fd, int to);
int Dup3(int fd, int to, int flags);
int Fcntl(int fd, int cmd, void* arg, bool is64);

// --- pieces with no side effects (unit-tested) -------------------------------

// The CUDA driver's own segments ("/cuda_injection_path_shm", "/cuda.shm.*").
bool IsDriverInternalName(const char* name);
// From a /proc/self/fd/N link target, the name the creator used:
// "/dev/shm/torch_1_2 (deleted)" -> "/torch_1_2" (shm, *memfd false);
// "/memfd:label (deleted)" -> "label" (*memfd true). False otherwise.
bool NameFromFdLink(const char* link, char* out, size_t cap, bool* memfd);

// Inputs of the /dev/shm-full diagnosis.
struct ShmSpace {
  bool known = false;       // statfs of /dev/shm worked
  uint64_t capacity = 0;    // bytes
  uint64_t free_bytes = 0;  // bytes available
};
struct JobUsage {
  uint64_t segments = 0;  // distinct live segments mapped by the job's processes
  uint64_t bytes = 0;     // their mapped sizes
};
// What the failure was: a SIGBUS inside a mapping, or a call that failed
// with ENOSPC (`call` = "posix_fallocate", "ftruncate").
struct ShmFailure {
  const char* call = nullptr;  // null: SIGBUS
  uint64_t fault_address = 0;
  const char* segment = "";    // name, may be empty
  uint64_t segment_bytes = 0;  // mapping size (SIGBUS) or bytes requested (call)
  bool on_dev_shm = true;      // false: a memfd or another tmpfs
};
// Formats the one-line diagnosis (with "pinscope: " and a newline) into
// buf; returns its length. Async-signal-safe (no stdio, no locale, no malloc).
size_t FormatShmDiagnosis(char* buf, size_t cap, const ShmFailure& failure, const ShmSpace& space,
                          const JobUsage& job);
// --shm-size to suggest: twice what the job needs, rounded up to a power
// of two MiB, at least 64 MiB (the analyzer's RecommendedShmSize rule).
uint64_t SuggestShmSize(uint64_t needed_bytes);
// True when /dev/shm is effectively full (less than 1 MiB or 2% free).
bool LooksFull(const ShmSpace& space);

// /dev/shm space now (statfs: async-signal-safe).
ShmSpace ReadShmSpace();

// --- the job's live segments ---------------------------------------------------
// A table in MAP_SHARED anonymous memory made by each process that InitShm
// runs in (the root, exec'd programs) and inherited by its forked children,
// so a worker's diagnosis counts the segments the main process and the other
// workers hold. Lock-free: slots are claimed with a CAS; a slot whose process
// died is reused. Signal-safe readers.
class JobTable {
 public:
  static constexpr size_t kSlots = 2048;
  // Maps the shared table; false if mmap failed (then every method is a no-op).
  bool Create();
  void Add(uint32_t pid, uint64_t address, uint64_t device, uint64_t inode, uint64_t size);
  // Drops one slot of this process for the object (a mapping of it went
  // away entirely; trims leave the slot, whatever its address became).
  void Remove(uint32_t pid, uint64_t device, uint64_t inode);
  // Distinct live (device, inode) pairs of live processes, and their sizes
  // (the largest mapping of each). Signal-safe.
  JobUsage Usage() const;
  // True for the first caller in the whole job (per process without a
  // table): the /dev/shm-full diagnosis is printed once, not by every worker.
  bool FirstDiagnosis();
  void ResetForTest();

  // The names of the job's newest segments, by identity: a process that
  // creates or opens one by name (shm_open, memfd_create) publishes it, and
  // a process that maps an fd it received (a DataLoader batch) takes the
  // name from here instead of readlink(/proc/self/fd/N) - 11 us a batch on
  // the H100 machine, the largest part of a received batch's hook (issue
  // 16, docs/benchmarks.md). A ring of kNames; names longer than
  // ShmMapping::kNameCap - 1 are cut as the fd table cuts them.
  static constexpr size_t kNames = 64;
  void PublishName(uint64_t device, uint64_t inode, const char* name);
  // The newest name published for (device, inode), into out (cap bytes,
  // NUL-terminated); false when none of the last kNames is it (or one was
  // being rewritten while read). Lock-free.
  bool FindName(uint64_t device, uint64_t inode, char* out, size_t cap) const;

 private:
  struct Header {
    std::atomic<uint32_t> said;
    std::atomic<uint32_t> names_head;  // names published so far
  };
  // A seqlock each: seq odd while its writer fills it.
  struct Name {
    std::atomic<uint32_t> seq;
    std::atomic<uint64_t> device, inode;
    std::atomic<uint64_t> words[ShmMapping::kNameCap / 8];
  };
  Name* names_ = nullptr;
  struct Slot {
    std::atomic<uint32_t> state;  // 0 free, 1 being written, 2 live
    uint32_t pid;
    uint64_t address, device, inode, size;
  };
  Header* header_ = nullptr;
  Slot* slots_ = nullptr;
  std::atomic<bool> said_locally_{false};
};
JobTable& Job();

// Prints the diagnosis for a shm call that failed with ENOSPC (once per job)
// and records a "shm_full" Notice (in every process where it happens).
void ReportNoSpace(const char* call, const char* name, uint64_t requested);

}  // namespace pinscope::shim::shm
