// The allocator the malloc hooks forward to, resolved on first use without
// allocating: glibc's exported __libc_malloc family (no dlsym bootstrap, as
// in Perfetto's malloc_interceptor_glibc_preload.cc) when those names and
// the next `malloc` come from one object, else the next allocator's own
// functions (jemalloc, a sanitizer runtime). docs/host-memory.md.
//
// Contract: async-signal-unsafe like malloc itself; never records, never
// takes a lock; safe to call before the library constructor has run.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pinscope::shim::alloc {

// Where the hooks forward: glibc's exported __libc_malloc family (no dlsym
// bootstrap needed, as in Perfetto's malloc_interceptor_glibc_preload.cc).
// Each pointer starts as a stub that resolves the table on first use.
struct RealAlloc {
  void* (*malloc)(size_t);
  void* (*calloc)(size_t, size_t);
  void* (*realloc)(void*, size_t);
  void (*free)(void*);
  void* (*memalign)(size_t, size_t);
  void* (*valloc)(size_t);
  void* (*pvalloc)(size_t);
  size_t (*usable_size)(void*);
};
extern RealAlloc g_real;

// glibc's chunk header: the size word just below the user pointer (low 3
// bits are flags). Any block glibc handed out, mmapped or not, has it.
inline size_t ChunkSizeOf(const void* p) {
  return reinterpret_cast<const size_t*>(p)[-1] & ~static_cast<size_t>(7);
}

enum class Libc { kUnresolved, kGlibc, kOther };
Libc LibcKind();

// Resolves g_real now (the stubs do it on first use); false while another
// thread resolves it or nothing can be forwarded to.
bool ResolveRealAlloc();
// glibc's version function and a malloc_usable_size of the next allocator
// exist: the prerequisites for recording host allocations at all.
bool NextHasUsableSize();
// glibc's own allocator serves the blocks (not tcmalloc through __libc_*).
bool GlibcItself();
// glibc's chunk header below a block holds its size as expected (probed
// once with one small and one never-touched 64 MiB block).
bool GlibcChunkLayoutOk();
bool GlibcAtLeast(int major, int minor);

}  // namespace pinscope::shim::alloc
