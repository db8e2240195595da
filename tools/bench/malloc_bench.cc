// Benchmark (not a test) of the malloc family's fast path: small blocks,
// which pinscope never records. Run it twice, with and without
// LD_PRELOAD=libpinscope.so, and compare; docs/benchmarks.md has the numbers.
//   malloc_bench [iterations_per_size]
// Prints ns per call for: malloc+free of one block (a pair), a batch of 64
// mallocs then 64 frees, posix_memalign(64)+free, and realloc growing a
// small block. Sizes stay at or below 4 KiB: bigger blocks make glibc move
// its heap top with brk, and whether it does depends on the heap's layout
// (what else was allocated before), not on the hooks. Best of 7 runs each: on a shared machine the
// fastest run is the one least disturbed by other processes. Built with -fno-builtin so the
// compiler keeps every call.
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <algorithm>
#include <vector>

namespace {

double NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

void* volatile g_sink;

template <typename Body>
double Best(int reps, long calls, Body body) {
  std::vector<double> v;
  for (int r = 0; r < reps; ++r) {
    double t0 = NowNs();
    body();
    v.push_back((NowNs() - t0) / static_cast<double>(calls));
  }
  return *std::min_element(v.begin(), v.end());
}

}  // namespace

int main(int argc, char** argv) {
  long iters = argc > 1 ? atol(argv[1]) : 2000000;
  const size_t sizes[] = {16, 64, 256, 1024, 4096};
  const char* preload = getenv("LD_PRELOAD");
  printf("LD_PRELOAD=%s, %ld iterations per size, best of 7\n", preload ? preload : "(none)",
         iters);
  printf("%8s %16s %16s %16s %16s\n", "size", "malloc+free/2", "batch ns/call", "memalign+free/2",
         "realloc ns/call");
  for (size_t n : sizes) {
    double pair = Best(7, iters * 2, [&] {
      for (long i = 0; i < iters; ++i) {
        void* p = malloc(n);
        g_sink = p;
        free(p);
      }
    });
    static void* batch[64];
    long rounds = std::max(1L, iters / 64);
    double b = Best(7, rounds * 64 * 2, [&] {
      for (long r = 0; r < rounds; ++r) {
        for (int i = 0; i < 64; ++i) batch[i] = malloc(n);
        g_sink = batch[r & 63];
        for (int i = 0; i < 64; ++i) free(batch[i]);
      }
    });
    double al = Best(7, iters * 2, [&] {
      for (long i = 0; i < iters; ++i) {
        void* p = nullptr;
        if (posix_memalign(&p, 64, n) != 0) abort();
        g_sink = p;
        free(p);
      }
    });
    double re = Best(7, iters / 4 * 5, [&] {
      for (long i = 0; i < iters / 4; ++i) {
        void* p = malloc(n / 4 + 1);
        p = realloc(p, n / 2 + 1);
        p = realloc(p, n);
        p = realloc(p, n / 2 + 1);
        g_sink = p;
        free(p);
      }
    });
    printf("%8zu %16.2f %16.2f %16.2f %16.2f\n", n, pair, b, al, re);
  }
  return 0;
}
