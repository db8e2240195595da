// The malloc family's logic behind the exported hooks (interpose_alloc.cc):
// an inline fast path (a compare and a tail call to glibc's __libc_*) for
// the sizes that are not recorded, and out-of-line slow paths that register
// and record blocks at or above PINSCOPE_TRACE_MIN. Tests call these
// functions directly, without LD_PRELOAD. docs/host-memory.md.
//
// Contract: no function here allocates on its own behalf, uses stdio, or
// takes a lock while calling the real allocator; errno is what the real
// function left on failure and the caller's value on success.
#pragma once

#include <errno.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "shim/memory/real_alloc.h"
#include "shim/record/trace_fields.h"

namespace pinscope::shim::alloc {

// Smallest request recorded; SIZE_MAX while nothing is recorded (before
// InitAlloc, passive process, unknown libc), so every call takes the fast path.
extern std::atomic<size_t> g_trace_min;
// Smallest glibc chunk that can hold a recorded block (== g_trace_min), 0
// when the chunk header cannot be trusted (every free checks the registry),
// or SIZE_MAX when frees are not filtered by a glibc chunk header at all:
// nothing recorded yet, or an allocator other than glibc's serves the
// blocks, whose memory below a block may not even be mapped
// (MaybeRecordedOther).
extern std::atomic<size_t> g_free_min;
// With an allocator other than glibc's: smallest malloc_usable_size of a
// recorded block (== g_trace_min); SIZE_MAX: nothing recorded.
extern std::atomic<size_t> g_free_min_usable;
// aligned_alloc rejects a non-power-of-two alignment with EINVAL (glibc >= 2.38).
extern bool g_aligned_alloc_strict;

// Resolves the real functions, checks the chunk layout and sets the
// thresholds from GetConfig() if the recorder is active. Called from the
// library constructor after InitProcess; idempotent.
void InitAlloc();
// Tests: thresholds as if PINSCOPE_TRACE_MIN were `min` (SIZE_MAX: off).
void SetThresholdForTest(size_t min);

// Slow paths. `api` is a fields::AllocApi. `caller` is the return address
// of the exported hook (nullptr from tests): a call made by libpinscope.so
// itself (the static libstdc++ inside it allocates its exception pool in a
// constructor) is not the program's and is not recorded.
void* MallocSlow(size_t n, const void* caller);
void* CallocSlow(size_t nmemb, size_t size, const void* caller);
void* ReallocSlow(void* p, size_t n, uint32_t api, const void* caller);
void FreeSlow(void* p);
void* AlignedSlow(uint32_t api, size_t alignment, size_t n, const void* caller);
// The preloaded library's own code range (set by interpose_alloc.cc).
void SetShimText(uintptr_t begin, uintptr_t end);

// --- entry points (what the exported hooks call) --------------------------

inline size_t TraceMin() { return g_trace_min.load(std::memory_order_relaxed); }

inline void* Malloc(size_t n, const void* caller = nullptr) {
  if (__builtin_expect(n < TraceMin(), 1)) return g_real.malloc(n);
  return MallocSlow(n, caller);
}

inline void* Calloc(size_t nmemb, size_t size, const void* caller = nullptr) {
  size_t total;
  if (__builtin_expect(__builtin_mul_overflow(nmemb, size, &total) || total < TraceMin(), 1))
    return g_real.calloc(nmemb, size);  // overflow: glibc sets ENOMEM
  return CallocSlow(nmemb, size, caller);
}

bool MaybeRecordedOther(const void* p);

// A block may be recorded only if its chunk is at least the threshold;
// smaller chunks (nearly every free) skip the registry entirely.
inline bool MaybeRecorded(const void* p) {
  const size_t min = g_free_min.load(std::memory_order_relaxed);
  if (__builtin_expect(min != SIZE_MAX, 1)) return ChunkSizeOf(p) >= min;
  return MaybeRecordedOther(p);
}

inline void Free(void* p) {
  if (__builtin_expect(p == nullptr || !MaybeRecorded(p), 1)) return g_real.free(p);
  FreeSlow(p);
}

inline void* Realloc(void* p, size_t n, const void* caller = nullptr) {
  if (__builtin_expect(n < TraceMin() && (p == nullptr || !MaybeRecorded(p)), 1))
    return g_real.realloc(p, n);
  return ReallocSlow(p, n, fields::kRealloc, caller);
}

inline void* Reallocarray(void* p, size_t nmemb, size_t size, const void* caller = nullptr) {
  size_t total;
  if (__builtin_mul_overflow(nmemb, size, &total)) {
    errno = ENOMEM;  // glibc's reallocarray: p is left untouched
    return nullptr;
  }
  if (__builtin_expect(total < TraceMin() && (p == nullptr || !MaybeRecorded(p)), 1))
    return g_real.realloc(p, total);
  return ReallocSlow(p, total, fields::kReallocarray, caller);
}

inline void* Memalign(size_t alignment, size_t n, const void* caller = nullptr) {
  if (__builtin_expect(n < TraceMin(), 1)) return g_real.memalign(alignment, n);
  return AlignedSlow(fields::kMemalign, alignment, n, caller);
}

// POSIX: alignment a power of two and a multiple of sizeof(void*), else
// EINVAL; ENOMEM when out of memory; *out untouched on failure.
inline int PosixMemalign(void** out, size_t alignment, size_t n, const void* caller = nullptr) {
  if (alignment == 0 || alignment % sizeof(void*) != 0 || (alignment & (alignment - 1)) != 0)
    return EINVAL;
  void* p = __builtin_expect(n < TraceMin(), 1)
                ? g_real.memalign(alignment, n)
                : AlignedSlow(fields::kPosixMemalign, alignment, n, caller);
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}

// C11 aligned_alloc as the running glibc implements it: since 2.38 a
// non-power-of-two alignment fails with EINVAL; before, it is memalign.
inline void* AlignedAlloc(size_t alignment, size_t n, const void* caller = nullptr) {
  if (g_aligned_alloc_strict && (alignment == 0 || (alignment & (alignment - 1)) != 0)) {
    errno = EINVAL;
    return nullptr;
  }
  if (__builtin_expect(n < TraceMin(), 1)) return g_real.memalign(alignment, n);
  return AlignedSlow(fields::kAlignedAlloc, alignment, n, caller);
}

inline void* Valloc(size_t n, const void* caller = nullptr) {
  if (__builtin_expect(n < TraceMin(), 1)) return g_real.valloc(n);
  return AlignedSlow(fields::kValloc, 0, n, caller);
}

inline void* Pvalloc(size_t n, const void* caller = nullptr) {
  if (__builtin_expect(n < TraceMin(), 1)) return g_real.pvalloc(n);
  return AlignedSlow(fields::kPvalloc, 0, n, caller);
}

inline size_t UsableSize(void* p) { return g_real.usable_size(p); }

// Counters for tests and the docs: blocks the registry could not hold.
uint64_t DroppedBlocks();

}  // namespace pinscope::shim::alloc
