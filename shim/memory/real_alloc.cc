// The real allocator behind the malloc hooks: glibc's __libc_* names when
// they and the next malloc come from one object, else the next allocator's
// own functions; a static arena serves dlsym's own allocations while the
// table resolves. See real_alloc.h. Below pinning (which frees its kept
// blocks here) and the recording core (core/alloc_core.cc).
#include "shim/memory/real_alloc.h"

#include <dlfcn.h>
#include <errno.h>
#include <gnu/libc-version.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

// glibc exports its allocator under these names (weak here: their absence
// means another C library, and then nothing is recorded).
// glibc exports its allocator under these names (weak here: their absence
// means another C library, and then nothing is recorded).
extern "C" {
void* __libc_malloc(size_t) __attribute__((weak));
void* __libc_calloc(size_t, size_t) __attribute__((weak));
void* __libc_realloc(void*, size_t) __attribute__((weak));
void __libc_free(void*) __attribute__((weak));
void* __libc_memalign(size_t, size_t) __attribute__((weak));
void* __libc_valloc(size_t) __attribute__((weak));
void* __libc_pvalloc(size_t) __attribute__((weak));
const char* gnu_get_libc_version() __attribute__((weak));
}

namespace pinscope::shim::alloc {
namespace {

// --- bootstrap ---------------------------------------------------------------
// Stubs that resolve g_real on first use. With glibc that is a few pointer
// copies and never recurses. With another C library we must ask dlsym,
// which may itself call malloc: those calls are served from a static arena.

std::atomic<int> g_resolve{0};  // 0 no, 1 in progress (dlsym path), 2 done
Libc g_libc = Libc::kUnresolved;
RealAlloc g_next{};  // dlsym'd functions in the non-glibc case

constexpr size_t kArenaBytes = 256 * 1024;
alignas(64) uint8_t g_arena[kArenaBytes];
std::atomic<size_t> g_arena_used{0};

bool InArena(const void* p) {
  auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(g_arena);
  return a >= b && a < b + kArenaBytes;
}
void AfterArenaAlloc();

// Arena blocks carry their size in the 16 bytes below the pointer.
void* ArenaAlloc(size_t n, size_t alignment) {
  if (alignment < 16) alignment = 16;
  size_t used = g_arena_used.load();
  for (;;) {
    uintptr_t base = reinterpret_cast<uintptr_t>(g_arena);
    uintptr_t user = (base + used + 16 + alignment - 1) & ~(alignment - 1);
    size_t end = user + n - base;
    if (n > kArenaBytes || end > kArenaBytes) {
      errno = ENOMEM;
      return nullptr;
    }
    if (g_arena_used.compare_exchange_weak(used, end, std::memory_order_seq_cst)) {
      reinterpret_cast<size_t*>(user)[-1] = n;
      AfterArenaAlloc();
      return reinterpret_cast<void*>(user);
    }
  }
}
size_t ArenaSize(const void* p) { return reinterpret_cast<const size_t*>(p)[-1]; }

void* BootMalloc(size_t);
void* BootCalloc(size_t, size_t);
void* BootRealloc(void*, size_t);
void BootFree(void*);
void* BootMemalign(size_t, size_t);
void* BootValloc(size_t);
void* BootPvalloc(size_t);
size_t BootUsable(void*);

// Wrappers for the non-glibc case: arena pointers never reach the real free.
void OtherFree(void* p) {
  if (!InArena(p)) g_next.free(p);
}
void* OtherRealloc(void* p, size_t n) {
  if (!InArena(p)) return g_next.realloc(p, n);
  void* q = g_next.malloc(n);
  if (q) memcpy(q, p, ArenaSize(p) < n ? ArenaSize(p) : n);
  return q;
}
// Both paths: glibc's malloc_usable_size is not exported under a __libc_
// name, so g_next.usable_size serves it too (Resolve checks it lives with
// the other functions).
size_t NextUsable(void* p) {
  if (p && InArena(p)) return ArenaSize(p);
  return g_next.usable_size ? g_next.usable_size(p) : 0;
}
void* OtherPvalloc(size_t n) {
  size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return g_next.memalign(page, (n + page - 1) & ~(page - 1));
}
void* OtherValloc(size_t n) {
  return g_next.memalign(static_cast<size_t>(sysconf(_SC_PAGESIZE)), n);
}

// glibc's functions behind arena-aware wrappers: installed once an arena
// block may be out (one handed to dlsym, or to a thread that called while
// Resolve ran), whose free, realloc or usable size must not reach glibc.
void GlibcFree(void* p) {
  if (!InArena(p)) __libc_free(p);
}
void* GlibcRealloc(void* p, size_t n) {
  if (!InArena(p)) return __libc_realloc(p, n);
  void* q = __libc_malloc(n);
  if (q) memcpy(q, p, ArenaSize(p) < n ? ArenaSize(p) : n);
  return q;
}
void InstallArenaAware() {
  g_real.free = GlibcFree;
  g_real.realloc = GlibcRealloc;
  g_real.usable_size = NextUsable;
}
// After an arena block was handed out: once Resolve chose glibc, switch to
// the wrappers (the resolver checks g_arena_used after its stores, so one
// side or the other installs them; installing twice is harmless).
void AfterArenaAlloc() {
  if (g_resolve.load(std::memory_order_seq_cst) == 2 && g_libc == Libc::kGlibc) InstallArenaAware();
}

// The load address of the object that defines f, or 0.
uintptr_t ObjectOf(const void* f) {
  Dl_info info;
  if (!f || !dladdr(f, &info)) return 0;
  return reinterpret_cast<uintptr_t>(info.dli_fbase);
}

// glibc's seven __libc_* names, the next malloc and the next
// malloc_usable_size all come from one object: glibc, or an allocator that
// replaces all of them (tcmalloc does). A library that defines only some -
// the sanitizer runtimes export __libc_memalign and no other; jemalloc
// defines malloc and none - would make pinscope hand one allocator's blocks
// to the other's free. dladdr neither allocates nor takes a lock a hook
// holds.
bool OneObject() {
  const void* fns[] = {reinterpret_cast<const void*>(__libc_calloc),
                       reinterpret_cast<const void*>(__libc_realloc),
                       reinterpret_cast<const void*>(__libc_free),
                       reinterpret_cast<const void*>(__libc_memalign),
                       reinterpret_cast<const void*>(__libc_valloc),
                       reinterpret_cast<const void*>(__libc_pvalloc),
                       reinterpret_cast<const void*>(g_next.malloc),
                       reinterpret_cast<const void*>(g_next.usable_size)};
  const uintptr_t base = ObjectOf(reinterpret_cast<const void*>(__libc_malloc));
  for (const void* f : fns)
    if (base == 0 || ObjectOf(f) != base) return false;
  return true;
}

// True once g_real is usable; false while another call (dlsym's own
// allocation, or a concurrent first call) is resolving it: that caller is
// served from the arena.
//
// pinscope forwards to the allocator the program would have used without
// it: the next `malloc` after libpinscope.so in the lookup order. When that
// is the one glibc's __libc_* names belong to (glibc, or tcmalloc, which
// replaces them all), allocations are recorded through those names.
// Otherwise (jemalloc preloaded after pinscope defines malloc but no
// __libc_*; a sanitizer runtime replaces part of them) everything goes to
// the next allocator's own functions (InitAlloc records through them):
// taking glibc's malloc there would pair it with that allocator's operator
// new and delete, and the job would free one's blocks with the other.
bool Resolve() {
  if (g_resolve.load(std::memory_order_acquire) == 2) return true;
  int expected = 0;
  if (!g_resolve.compare_exchange_strong(expected, 1)) return g_resolve.load() == 2;
  g_next.malloc = reinterpret_cast<void* (*)(size_t)>(dlsym(RTLD_NEXT, "malloc"));
  g_next.calloc = reinterpret_cast<void* (*)(size_t, size_t)>(dlsym(RTLD_NEXT, "calloc"));
  g_next.realloc = reinterpret_cast<void* (*)(void*, size_t)>(dlsym(RTLD_NEXT, "realloc"));
  g_next.free = reinterpret_cast<void (*)(void*)>(dlsym(RTLD_NEXT, "free"));
  g_next.memalign = reinterpret_cast<void* (*)(size_t, size_t)>(dlsym(RTLD_NEXT, "memalign"));
  g_next.usable_size = reinterpret_cast<size_t (*)(void*)>(dlsym(RTLD_NEXT, "malloc_usable_size"));
  if (__libc_malloc && __libc_calloc && __libc_realloc && __libc_free && __libc_memalign &&
      __libc_valloc && __libc_pvalloc && gnu_get_libc_version && OneObject()) {
    g_real.malloc = __libc_malloc;
    g_real.calloc = __libc_calloc;
    g_real.realloc = __libc_realloc;
    g_real.free = __libc_free;
    g_real.memalign = __libc_memalign;
    g_real.valloc = __libc_valloc;
    g_real.pvalloc = __libc_pvalloc;
    g_real.usable_size = g_next.usable_size;
    g_libc = Libc::kGlibc;
    g_resolve.store(2, std::memory_order_seq_cst);
    if (g_arena_used.load(std::memory_order_seq_cst) > 0) InstallArenaAware();
    return true;
  }
  if (!g_next.malloc || !g_next.calloc || !g_next.realloc || !g_next.free || !g_next.memalign) {
    // Nothing to forward to: keep serving from the arena (it fails with
    // ENOMEM when exhausted) rather than crash.
    g_resolve.store(0);
    return false;
  }
  g_real.malloc = g_next.malloc;
  g_real.calloc = g_next.calloc;
  g_real.realloc = OtherRealloc;
  g_real.free = OtherFree;
  g_real.memalign = g_next.memalign;
  g_real.valloc = OtherValloc;
  g_real.pvalloc = OtherPvalloc;
  g_real.usable_size = NextUsable;
  g_libc = Libc::kOther;
  g_resolve.store(2, std::memory_order_release);
  return true;
}

void* BootMalloc(size_t n) { return Resolve() ? g_real.malloc(n) : ArenaAlloc(n, 16); }
void* BootCalloc(size_t a, size_t b) {
  if (Resolve()) return g_real.calloc(a, b);
  size_t n;
  if (__builtin_mul_overflow(a, b, &n)) {
    errno = ENOMEM;
    return nullptr;
  }
  return ArenaAlloc(n, 16);  // static memory is zero and never reused
}
void* BootRealloc(void* p, size_t n) {
  if (Resolve()) return g_real.realloc(p, n);
  void* q = ArenaAlloc(n, 16);
  if (q && p) memcpy(q, p, InArena(p) && ArenaSize(p) < n ? ArenaSize(p) : n);
  return q;
}
void BootFree(void* p) {
  if (p == nullptr || InArena(p)) return;
  if (Resolve()) g_real.free(p);
}
void* BootMemalign(size_t a, size_t n) {
  return Resolve() ? g_real.memalign(a, n) : ArenaAlloc(n, a);
}
void* BootValloc(size_t n) { return Resolve() ? g_real.valloc(n) : ArenaAlloc(n, 4096); }
void* BootPvalloc(size_t n) {
  return Resolve() ? g_real.pvalloc(n) : ArenaAlloc((n + 4095) & ~size_t{4095}, 4096);
}
size_t BootUsable(void* p) {
  if (p && InArena(p)) return ArenaSize(p);
  return Resolve() ? g_real.usable_size(p) : 0;
}

uint64_t PageSize() {
  static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return page;
}

bool CheckChunkLayout() {
  // glibc puts the chunk size (plus 3 flag bits) in the word below the user
  // pointer: small chunks are request + 8 rounded up to 16, mmapped ones
  // request + 16 rounded up to a page. Anything else: do not trust it.
  // The large probe is above 32 MiB (DEFAULT_MMAP_THRESHOLD_MAX): freeing a
  // smaller mmapped chunk would raise glibc's dynamic mmap and trim
  // thresholds and change how the program's own blocks are served. Its
  // pages are never touched.
  constexpr size_t kLarge = 64u << 20;
  void* small = __libc_malloc(100);
  void* large = __libc_malloc(kLarge);
  bool ok = small && large;
  if (ok) {
    size_t cs = ChunkSizeOf(small), cl = ChunkSizeOf(large);
    ok = cs >= 108 && cs <= 100 + 64 && cl >= kLarge + 16 && cl <= kLarge + 2 * PageSize();
    size_t us = g_real.usable_size(small);
    ok = ok && us >= 100 && us <= cs;
  }
  __libc_free(small);
  __libc_free(large);
  return ok;
}

bool AtLeastGlibc(int major, int minor) {
  const char* v = gnu_get_libc_version ? gnu_get_libc_version() : nullptr;
  if (!v) return false;
  int ma = 0, mi = 0;
  while (*v >= '0' && *v <= '9') ma = ma * 10 + (*v++ - '0');
  if (*v == '.') ++v;
  while (*v >= '0' && *v <= '9') mi = mi * 10 + (*v++ - '0');
  return ma > major || (ma == major && mi >= minor);
}

}  // namespace

RealAlloc g_real = {BootMalloc,   BootCalloc, BootRealloc, BootFree,
                    BootMemalign, BootValloc, BootPvalloc, BootUsable};

Libc LibcKind() { return g_libc; }
bool ResolveRealAlloc() { return Resolve(); }
bool NextHasUsableSize() { return gnu_get_libc_version != nullptr && g_next.usable_size != nullptr; }
bool GlibcItself() {
  return g_libc == Libc::kGlibc &&
         ObjectOf(reinterpret_cast<const void*>(__libc_malloc)) ==
             ObjectOf(reinterpret_cast<const void*>(gnu_get_libc_version));
}
bool GlibcChunkLayoutOk() { return CheckChunkLayout(); }
bool GlibcAtLeast(int major, int minor) { return AtLeastGlibc(major, minor); }

}  // namespace pinscope::shim::alloc
