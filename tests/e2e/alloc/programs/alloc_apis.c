/* Every malloc-family entry point, below and at the threshold
   (PINSCOPE_TRACE_MIN=1M): exact sizes and alignments recorded, alignment
   honored, malloc_usable_size consistent, calloc zeroes, realloc across the
   threshold both ways, errno preserved on success and set on failure. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>

#include "expect.h"

#define MiB (1024u * 1024u)

static size_t Page(void) { return (size_t)sysconf(_SC_PAGESIZE); }

static void CheckUsable(void* p, size_t n) {
  size_t u = malloc_usable_size(p);
  CHECK(u >= n);
  CHECK(u <= n + 2 * Page() + 64);
}

static void Free(void* p, int recorded) {
  int e = errno = 4321;
  free(p);
  CHECK(errno == e);
  if (recorded) Expect("free %llu 0", U(p));
}

int main(void) {
  /* pinscope must not change how glibc serves blocks: with its default
     dynamic thresholds a 2 MiB block is mmapped (chunk flag IS_MMAPPED). */
  char* fresh = malloc(2 * MiB);
  CHECK(fresh && (((size_t*)fresh)[-1] & 2) != 0);
  Expect("alloc MALLOC %llu %u 0 0", U(fresh), 2 * MiB);
  Free(fresh, 1);

  /* malloc: just below and at the threshold. */
  errno = 1234;
  char* below = malloc(MiB - 1);
  char* at = malloc(MiB);
  CHECK(errno == 1234);
  CHECK(below && at);
  Expect("alloc MALLOC %llu %u 0 0", U(at), MiB);
  CheckUsable(below, MiB - 1);
  CheckUsable(at, MiB);
  Touch(below, MiB - 1);
  Touch(at, MiB);
  Free(below, 0);
  Free(at, 1);

  /* calloc zeroes, small and large, even over dirty memory. */
  char* dirty = malloc(4000);
  memset(dirty, 0xab, 4000);
  free(dirty);
  unsigned char* zs = calloc(1000, 4);
  CHECK(zs);
  for (int i = 0; i < 4000; ++i) CHECK(zs[i] == 0);
  free(zs);
  errno = 77;
  unsigned char* zl = calloc(1024, 1024 * 2);
  CHECK(errno == 77 && zl);
  Expect("alloc CALLOC %llu %u 0 0", U(zl), 2 * MiB);
  for (size_t i = 0; i < 2 * MiB; i += 509) CHECK(zl[i] == 0);
  Free(zl, 1);
  errno = 0;
  CHECK(calloc(SIZE_MAX / 2, 4) == NULL);
  CHECK(errno == ENOMEM);

  /* malloc failure: errno from glibc, nothing recorded. */
  errno = 0;
  CHECK(malloc(SIZE_MAX - 4096) == NULL);
  CHECK(errno == ENOMEM);

  /* realloc across the threshold, contents kept. */
  char* r0 = malloc(100);
  memset(r0, 7, 100);
  char* r1 = realloc(r0, 2 * MiB); /* small -> large: HostAlloc with old_address */
  CHECK(r1 && r1[99] == 7);
  Expect("alloc REALLOC %llu %u 0 %llu", U(r1), 2 * MiB, U(r0));
  memset(r1, 9, 2 * MiB);
  char* r2 = realloc(r1, 3 * MiB); /* large -> large: free(by_realloc) + alloc */
  CHECK(r2 && r2[2 * MiB - 1] == 9);
  Expect("free %llu 1", U(r1));
  Expect("alloc REALLOC %llu %u 0 %llu", U(r2), 3 * MiB, U(r1));
  char* r3 = realloc(r2, 200); /* large -> small: free(by_realloc) only */
  CHECK(r3 && r3[199] == 9);
  Expect("free %llu 1", U(r2));
  char* r4 = realloc(r3, 300); /* small -> small: nothing */
  CHECK(r4);
  Free(r4, 0);
  char* r5 = realloc(NULL, 2 * MiB); /* realloc(NULL, n) is malloc */
  CHECK(r5);
  Expect("alloc REALLOC %llu %u 0 0", U(r5), 2 * MiB);
  errno = 55;
  CHECK(realloc(r5, 0) == NULL); /* glibc frees the block */
  Expect("free %llu 1", U(r5));
  char* r6 = malloc(2 * MiB);
  Expect("alloc MALLOC %llu %u 0 0", U(r6), 2 * MiB);
  errno = 0;
  CHECK(realloc(r6, SIZE_MAX - 4096) == NULL); /* fails: r6 is still live */
  CHECK(errno == ENOMEM);
  Expect("free %llu 1", U(r6));
  Expect("alloc MALLOC %llu %u 0 0", U(r6), 2 * MiB);
  Free(r6, 1);

  /* reallocarray: overflow is ENOMEM and leaves the block alone. */
  char* ra = reallocarray(NULL, 2, MiB);
  CHECK(ra);
  Expect("alloc REALLOCARRAY %llu %u 0 0", U(ra), 2 * MiB);
  errno = 0;
  CHECK(reallocarray(ra, SIZE_MAX / 2, 3) == NULL);
  CHECK(errno == ENOMEM);
  char* rb = reallocarray(ra, 3, MiB);
  CHECK(rb);
  Expect("free %llu 1", U(ra));
  Expect("alloc REALLOCARRAY %llu %u 0 %llu", U(rb), 3 * MiB, U(ra));
  Free(rb, 1);

  /* posix_memalign: every power-of-two alignment honored; bad ones EINVAL. */
  size_t aligns[] = {8, 16, 64, 4096, 65536, 2 * MiB};
  for (size_t i = 0; i < sizeof aligns / sizeof aligns[0]; ++i) {
    void* small = NULL;
    void* big = NULL;
    errno = 99;
    CHECK(posix_memalign(&small, aligns[i], 100) == 0);
    CHECK(posix_memalign(&big, aligns[i], MiB + 7) == 0);
    CHECK(errno == 99);
    CHECK(((uintptr_t)small % aligns[i]) == 0 && ((uintptr_t)big % aligns[i]) == 0);
    Expect("alloc POSIX_MEMALIGN %llu %u %zu 0", U(big), MiB + 7, aligns[i]);
    CheckUsable(big, MiB + 7);
    Touch(big, MiB + 7);
    Free(small, 0);
    Free(big, 1);
  }
  size_t bad[] = {0, 3, 4, 24, 4096 + 8};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    void* p = (void*)0x1;
    errno = 17;
    CHECK(posix_memalign(&p, bad[i], 2 * MiB) == EINVAL);
    CHECK(p == (void*)0x1 && errno == 17);
  }
  void* huge = (void*)0x1;
  CHECK(posix_memalign(&huge, 64, SIZE_MAX - 8192) == ENOMEM);
  CHECK(huge == (void*)0x1);

  /* aligned_alloc, memalign, valloc, pvalloc. */
  for (size_t a = 16; a <= 2 * MiB; a *= 16) {
    void* p = aligned_alloc(a, 2 * MiB);
    CHECK(p && (uintptr_t)p % a == 0);
    Expect("alloc ALIGNED_ALLOC %llu %u %zu 0", U(p), 2 * MiB, a);
    CheckUsable(p, 2 * MiB);
    Free(p, 1);
  }
  /* A non-power-of-two alignment: EINVAL since glibc 2.38, memalign before.
     Either way the program sees what glibc alone would do. */
  errno = 0;
  void* odd = aligned_alloc(48, 2 * MiB);
  if (odd) {
    CHECK((uintptr_t)odd % 64 == 0); /* rounded up to a power of two */
    Expect("alloc ALIGNED_ALLOC %llu %u 48 0", U(odd), 2 * MiB);
    Free(odd, 1);
  } else {
    CHECK(errno == EINVAL);
  }
  void* m = memalign(256, MiB);
  CHECK(m && (uintptr_t)m % 256 == 0);
  Expect("alloc MEMALIGN %llu %u 256 0", U(m), MiB);
  Free(m, 1);
  void* ms = memalign(4096, 64);
  CHECK(ms && (uintptr_t)ms % 4096 == 0);
  Free(ms, 0);
  void* v = valloc(MiB);
  CHECK(v && (uintptr_t)v % Page() == 0);
  Expect("alloc VALLOC %llu %u %zu 0", U(v), MiB, Page());
  Free(v, 1);
  void* pv = pvalloc(MiB + 1);
  CHECK(pv && (uintptr_t)pv % Page() == 0);
  CHECK(malloc_usable_size(pv) >= ((MiB + 1 + Page() - 1) & ~(Page() - 1)));
  Expect("alloc PVALLOC %llu %u %zu 0", U(pv), MiB + 1, Page());
  Free(pv, 1);

  /* cfree: no longer declared by glibc, still exported (by us too). */
  void (*cfree_fn)(void*) = (void (*)(void*))dlsym(RTLD_DEFAULT, "cfree");
  CHECK(cfree_fn != NULL);
  void* c = malloc(2 * MiB);
  Expect("alloc MALLOC %llu %u 0 0", U(c), 2 * MiB);
  cfree_fn(c);
  Expect("free %llu 0", U(c));

  free(NULL);
  CHECK(malloc_usable_size(NULL) == 0);
  return 0;
}
