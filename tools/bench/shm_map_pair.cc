// A received batch tensor's life in the receiving process, as pinscope's
// hooks see it: mmap of a /dev/shm segment's fd, then munmap, with other
// batches' mappings alive (the registry holds them) and the caches made
// cold in between by a sweep (the loop's own work between batches). Run
// under LD_PRELOAD=libpinscope.so with PINSCOPE_OUT set, against the same
// without pinscope; issue 16, docs/benchmarks.md (twenty-eighth session).
//
//   PINSCOPE_OUT=DIR LD_PRELOAD=build/lib/libpinscope.so
//     build/bin/shm_map_pair [live=40] [pairs=3000] [sweep_kib=4096]
//
// Prints ns per map-and-unmap pair (the mean over the pairs, the sweep
// not counted).
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <vector>

namespace {

uint64_t Now() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<uint64_t>(t.tv_sec) * 1000000000ull + static_cast<uint64_t>(t.tv_nsec);
}

}  // namespace

int main(int argc, char** argv) {
  const int live = argc > 1 ? atoi(argv[1]) : 40;
  const int pairs = argc > 2 ? atoi(argv[2]) : 3000;
  const size_t sweep = static_cast<size_t>(argc > 3 ? atoi(argv[3]) : 4096) * 1024;
  constexpr size_t kBytes = 64 * 1024;
  char name[64];
  snprintf(name, sizeof name, "/pinscope_map_pair_%d", static_cast<int>(getpid()));
  const int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0 || ftruncate(fd, kBytes) != 0) {
    perror("shm_map_pair: segment");
    return 1;
  }
  shm_unlink(name);
  for (int i = 0; i < live; ++i) {
    if (mmap(nullptr, kBytes, PROT_READ, MAP_SHARED, fd, 0) == MAP_FAILED) {
      perror("shm_map_pair: mmap");
      return 1;
    }
  }
  std::vector<char> cold(sweep, 1);
  volatile long sink = 0;
  uint64_t total = 0;
  for (int i = 0; i < pairs; ++i) {
    for (size_t j = 0; j < cold.size(); j += 64) sink = sink + cold[j];
    const uint64_t t0 = Now();
    void* p = mmap(nullptr, kBytes, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED || munmap(p, kBytes) != 0) {
      perror("shm_map_pair: pair");
      return 1;
    }
    total += Now() - t0;
  }
  printf("%.0f ns a map-and-unmap pair (%d live mappings, %zu KiB swept between)\n",
         static_cast<double>(total) / pairs, live, sweep / 1024);
  return 0;
}
