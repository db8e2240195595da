/* Threads created and destroyed in rounds allocate and free random sizes
   (fixed seed), large ones included, through every allocation API; blocks
   are swapped through a shared table so most are freed by another thread
   (mimalloc test-stress style). Writes the number of allocations at or
   above the threshold to expect.<pid> as "count N"; the checker asserts the
   trace has exactly N HostAlloc and a HostFree for each. */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>

#include "expect.h"

#define MiB (1024u * 1024u)
#define SLOTS 512

static _Atomic(void*) g_slots[SLOTS];
static atomic_ulong g_large;
static size_t g_min;
static int g_ops;

static uint64_t Next(uint64_t* s) { /* splitmix64 */
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static size_t RandomSize(uint64_t* s) {
  uint64_t r = Next(s) % 100;
  if (r < 80) return 1 + Next(s) % 4096;
  if (r < 95) return 4096 + Next(s) % (256 * 1024);
  return MiB / 2 + Next(s) % (3 * MiB); /* about half of these are >= 1 MiB */
}

static void* Allocate(uint64_t* s, size_t n) {
  void* p = NULL;
  switch (Next(s) % 6) {
    case 0: p = malloc(n); break;
    case 1: p = calloc(1, n); break;
    case 2: if (posix_memalign(&p, 64, n) != 0) p = NULL; break;
    case 3: p = aligned_alloc(4096, n); break;
    case 4: p = memalign(128, n); break;
    default: p = realloc(NULL, n); break;
  }
  CHECK(p != NULL);
  if (n >= g_min) atomic_fetch_add(&g_large, 1);
  ((volatile char*)p)[0] = 1;
  ((volatile char*)p)[n - 1] = 2;
  return p;
}

static void* Worker(void* arg) {
  uint64_t s = (uint64_t)(uintptr_t)arg;
  for (int i = 0; i < g_ops; ++i) {
    size_t slot = Next(&s) % SLOTS;
    uint64_t what = Next(&s) % 10;
    void* old = atomic_exchange(&g_slots[slot], NULL);
    if (what < 2 && old) {
      /* realloc a block another thread may have made */
      size_t n = RandomSize(&s);
      void* p = realloc(old, n);
      CHECK(p != NULL);
      if (n >= g_min) atomic_fetch_add(&g_large, 1);
      ((volatile char*)p)[n - 1] = 3;
      old = atomic_exchange(&g_slots[slot], p);
    } else if (what < 8) {
      void* p = Allocate(&s, RandomSize(&s));
      void* prev = atomic_exchange(&g_slots[slot], p);
      free(prev);
    }
    free(old);
  }
  return NULL;
}

int main(int argc, char** argv) {
  uint64_t seed = argc > 1 ? strtoull(argv[1], NULL, 10) : 42;
  int rounds = argc > 2 ? atoi(argv[2]) : 4;
  int threads = argc > 3 ? atoi(argv[3]) : 8;
  g_ops = argc > 4 ? atoi(argv[4]) : 2000;
  g_min = argc > 5 ? strtoull(argv[5], NULL, 10) : MiB;
  for (int r = 0; r < rounds; ++r) {
    pthread_t t[64];
    for (int i = 0; i < threads; ++i)
      CHECK(pthread_create(&t[i], NULL, Worker, (void*)(uintptr_t)(seed * 1000003 + (uint64_t)r * 64 + (uint64_t)i)) == 0);
    for (int i = 0; i < threads; ++i) pthread_join(t[i], NULL);
  }
  for (int i = 0; i < SLOTS; ++i) free(atomic_exchange(&g_slots[i], NULL));
  Expect("count %lu", (unsigned long)atomic_load(&g_large));
  return 0;
}
