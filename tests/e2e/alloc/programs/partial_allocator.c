/* TEST DOUBLE of a sanitizer runtime's allocator (libtsan, libasan): it
   replaces the malloc family and, like them, exports __libc_memalign but
   none of glibc's other __libc_* names. Preloaded after libpinscope.so
   (e2e_alloc_test, PartialAllocator*): pinscope must not pair this
   library's __libc_memalign with glibc's __libc_free.

   A bump allocator over one 1 GiB reservation: a 16-byte header (the
   request size) below each block, frees of its own blocks are no-ops, a
   free of anything else (allocated before it was loaded) goes to glibc. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define ARENA_BYTES ((size_t)1 << 30)

extern void __libc_free(void*); /* glibc's */

static char* g_base;
static _Atomic size_t g_used;
static _Atomic unsigned long g_blocks;

static int Mine(const void* p) {
  return g_base && (const char*)p >= g_base && (const char*)p < g_base + ARENA_BYTES;
}

static void* Bump(size_t align, size_t n) {
  if (!g_base) {
    void* m = mmap(NULL, ARENA_BYTES, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return NULL;
    char* expected = NULL;
    if (!__atomic_compare_exchange_n(&g_base, &expected, (char*)m, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
      munmap(m, ARENA_BYTES);
  }
  if (align < 16) align = 16;
  if (n > ARENA_BYTES) {
    errno = ENOMEM;
    return NULL;
  }
  for (;;) {
    size_t used = atomic_load(&g_used);
    uintptr_t start = (uintptr_t)g_base + used + 16;
    start = (start + align - 1) & ~(uintptr_t)(align - 1);
    size_t end = start + n - (uintptr_t)g_base;
    if (end > ARENA_BYTES) {
      errno = ENOMEM;
      return NULL;
    }
    if (atomic_compare_exchange_weak(&g_used, &used, end)) {
      ((size_t*)start)[-1] = n;
      atomic_fetch_add(&g_blocks, 1);
      return (void*)start;
    }
  }
}

EXPORT void* malloc(size_t n) { return Bump(16, n); }
EXPORT void* calloc(size_t a, size_t b) {
  size_t n;
  if (__builtin_mul_overflow(a, b, &n)) {
    errno = ENOMEM;
    return NULL;
  }
  return Bump(16, n); /* fresh pages are zero and never reused */
}
EXPORT void* memalign(size_t align, size_t n) { return Bump(align, n); }
EXPORT void* __libc_memalign(size_t align, size_t n) { return Bump(align, n); }
EXPORT void* aligned_alloc(size_t align, size_t n) { return Bump(align, n); }
EXPORT void* valloc(size_t n) { return Bump(4096, n); }
EXPORT void* pvalloc(size_t n) { return Bump(4096, (n + 4095) & ~(size_t)4095); }
EXPORT int posix_memalign(void** out, size_t align, size_t n) {
  void* p = Bump(align, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
EXPORT size_t malloc_usable_size(void* p) { return p && Mine(p) ? ((size_t*)p)[-1] : 0; }
EXPORT void free(void* p) {
  if (p && !Mine(p)) __libc_free(p);
}
EXPORT void* realloc(void* p, size_t n) {
  if (!p) return Bump(16, n);
  if (!Mine(p)) return NULL; /* not expected: everything after start-up is ours */
  void* q = Bump(16, n);
  if (q) {
    size_t old = ((size_t*)p)[-1];
    memcpy(q, p, old < n ? old : n);
  }
  return q;
}
EXPORT void* reallocarray(void* p, size_t a, size_t b) {
  size_t n;
  if (__builtin_mul_overflow(a, b, &n)) {
    errno = ENOMEM;
    return NULL;
  }
  return realloc(p, n);
}
/* How many blocks it served, for the checker. */
EXPORT unsigned long partial_allocator_blocks(void) { return atomic_load(&g_blocks); }
