/* Runs under LD_PRELOAD=libpinscope.so:libe2e_partial_allocator.so (the
   allocator TEST DOUBLE in partial_allocator.c): every entry point of the
   malloc family, with blocks above the trace threshold, each freed; checks
   contents and alignment; prints "blocks N" (served by the double) and
   exits 0. Before pinscope called the next allocator's own functions
   there, it paired the double's __libc_memalign with glibc's __libc_free
   and the first free of a posix_memalign block aborted ("free(): invalid
   pointer"). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>

#include "expect.h"

#define MiB ((size_t)1 << 20)

int main(void) {
  for (int round = 0; round < 3; ++round) {
    void* a = NULL;
    CHECK(posix_memalign(&a, 4096, 4 * MiB) == 0 && ((uintptr_t)a & 4095) == 0);
    memset(a, 1, 4 * MiB);
    char* m = malloc(2 * MiB);
    CHECK(m != NULL);
    memset(m, 2, 2 * MiB);
    char* c = calloc(1, 3 * MiB);
    CHECK(c != NULL && c[3 * MiB - 1] == 0);
    char* r = realloc(m, 5 * MiB);
    CHECK(r != NULL && r[2 * MiB - 1] == 2);
    void* al = aligned_alloc(64, 2 * MiB);
    CHECK(al != NULL && ((uintptr_t)al & 63) == 0);
    void* me = memalign(256, 2 * MiB);
    CHECK(me != NULL && ((uintptr_t)me & 255) == 0);
    void* v = valloc(2 * MiB);
    CHECK(v != NULL && ((uintptr_t)v & 4095) == 0);
    CHECK(malloc_usable_size(a) >= 4 * MiB);
    char* s = strdup("pinscope");
    CHECK(s != NULL && strcmp(s, "pinscope") == 0);
    free(s);
    free(v);
    free(me);
    free(al);
    free(r);
    free(c);
    free(a);
  }
  unsigned long (*blocks)(void) =
      (unsigned long (*)(void))dlsym(RTLD_DEFAULT, "partial_allocator_blocks");
  CHECK(blocks != NULL);
  printf("blocks %lu\n", blocks());
  return 0;
}
