// How long the program's own munmap waits while pinscope's pin thread makes
// a pool slot (shim/pin/pin_pool.cc, MakeSlotLocked), for the two ways of
// making a slot's pages:
//   populate   mmap(MAP_SHARED | MAP_POPULATE) of the memfd: the kernel
//              allocates and zeroes every page while holding the process's
//              mmap lock for the whole slot
//   fallocate  fallocate on the memfd (pages made in the file, no mmap
//              lock), then mmap and MADV_POPULATE_WRITE 4 MiB at a time
// A second thread plays the training loop: it maps and unmaps a 4 KiB
// shared segment over and over (torch unmaps every batch's segments), and
// every munmap is timed. Found on the H100 in a pool run's trace: munmaps of
// 35-52 ms while slots were made, 0 ms otherwise (docs/validation.md,
// fifteenth session).
//
//   slot_populate_bench [slots=10] [MiB=73.5]     (STEP_KIB: the populate
//                                                  step, 4096 as the shim)
//
// Prints, per mode, the time to make the slots and the loop's munmap
// latency (median, p99, max, count) while they were made.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

void* MakeSlot(size_t size, bool fallocate_steps) {
  int fd = static_cast<int>(syscall(SYS_memfd_create, "bench-slot", 1u));
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) std::abort();
  void* p = MAP_FAILED;
  if (fallocate_steps) {
    if (fallocate(fd, 0, 0, static_cast<off_t>(size)) != 0) std::perror("fallocate");
    p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    static const size_t kStep =
        (getenv("STEP_KIB") ? std::atoi(getenv("STEP_KIB")) : 4096) * size_t{1024};
    for (size_t off = 0; p != MAP_FAILED && off < size; off += kStep)
      if (madvise(static_cast<char*>(p) + off, std::min(kStep, size - off), MADV_POPULATE_WRITE)) {
        std::perror("madvise(MADV_POPULATE_WRITE)");
        break;
      }
  } else {
    p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  }
  if (p == MAP_FAILED) std::abort();
  close(fd);
  return p;
}

void Run(const char* name, bool fallocate_steps, int slots, size_t size) {
  std::atomic<bool> done{false};
  std::vector<double> lat;
  std::thread loop([&] {
    int fd = static_cast<int>(syscall(SYS_memfd_create, "bench-batch", 1u));
    if (fd < 0 || ftruncate(fd, 4096) != 0) std::abort();
    while (!done.load(std::memory_order_relaxed)) {
      void* q = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (q == MAP_FAILED) std::abort();
      static_cast<volatile char*>(q)[0] = 1;
      auto t0 = Clock::now();
      munmap(q, 4096);
      lat.push_back(Ms(Clock::now() - t0));
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    close(fd);
  });
  std::vector<void*> made;
  auto t0 = Clock::now();
  for (int i = 0; i < slots; ++i) made.push_back(MakeSlot(size, fallocate_steps));
  const double make_ms = Ms(Clock::now() - t0);
  done = true;
  loop.join();
  for (void* p : made) munmap(p, size);
  std::sort(lat.begin(), lat.end());
  auto at = [&](double q) {
    return lat.empty() ? 0.0 : lat[static_cast<size_t>(q * (lat.size() - 1))];
  };
  std::printf(
      "%-10s %3d slots of %.1f MiB in %8.1f ms | munmap: median %.3f ms, p99 %.3f ms, max %.3f ms, "
      "n %zu\n",
      name, slots, size / 1048576.0, make_ms, at(0.5), at(0.99), lat.empty() ? 0.0 : lat.back(),
      lat.size());
}

}  // namespace

int main(int argc, char** argv) {
  const int slots = argc > 1 ? std::atoi(argv[1]) : 10;
  const double mib = argc > 2 ? std::atof(argv[2]) : 73.5;
  const size_t size = static_cast<size_t>(mib * 1048576.0) / 4096 * 4096;
  for (int round = 0; round < 3; ++round) {
    Run("populate", false, slots, size);
    Run("fallocate", true, slots, size);
  }
  return 0;
}
