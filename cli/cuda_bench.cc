// Bandwidth measurement for `pinscope calibrate`; see cuda_bench.h.
// Copies are cudaMemcpyAsync on a created stream, bracketed by two events:
// the device-side duration, the same method as ../shared/facts section 3. A
// pageable copy's call also blocks the host for about that long.
#include "cli/cuda_bench.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cli/cli_common.h"

namespace pinscope::cli {
namespace {

// Owns everything MeasureBandwidth allocates, so every exit path frees it.
struct BenchResources {
  const CudaApi& api;
  void* device = nullptr;
  void* pinned = nullptr;
  void* pageable = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  bool have_stream = false;

  explicit BenchResources(const CudaApi& a) : api(a) {}
  ~BenchResources() {
    if (start) api.EventDestroy(start);
    if (stop) api.EventDestroy(stop);
    if (have_stream) api.StreamDestroy(stream);
    if (device) api.Free(device);
    if (pinned) api.FreeHost(pinned);
    std::free(pageable);
  }
};

const char* KindName(cudaMemcpyKind kind) { return kind == cudaMemcpyHostToDevice ? "H2D" : "D2H"; }

}  // namespace

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

double GbPerSecond(uint64_t bytes, double ms) {
  return ms > 0 ? static_cast<double>(bytes) / (ms * 1e-3) / 1e9 : 0;
}

namespace {
double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

void MeasurePageFaults(uint64_t bytes, int repeats, BandwidthPoint* p) {
  // The fault cost is the difference between touching fresh pages and the
  // same work on resident ones; medians over `repeats` fresh mappings.
  std::vector<double> fresh_ms, warm_ms, map_ms, map_warm_ms, release_ms;
  for (int i = 0; i < std::max(repeats, 1); ++i) {
    void* a = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (a == MAP_FAILED) return;
    auto t0 = std::chrono::steady_clock::now();
    std::memset(a, 0x5a, bytes);
    fresh_ms.push_back(MsSince(t0));
    t0 = std::chrono::steady_clock::now();
    std::memset(a, 0x5b, bytes);
    warm_ms.push_back(MsSince(t0));
    munmap(a, bytes);

    // A segment filled by someone (here, this process), then mapped anew and
    // read, as the main process reads a worker's batch.
    int fd = memfd_create("pinscope-calibrate", MFD_CLOEXEC);
    if (fd < 0) continue;
    if (ftruncate(fd, static_cast<off_t>(bytes)) == 0) {
      void* w = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (w != MAP_FAILED) {
        std::memset(w, 0x5c, bytes);
        munmap(w, bytes);
        void* m = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
        if (m != MAP_FAILED) {
          volatile uint64_t sum = 0;
          auto read = [&] {
            const uint64_t* q = static_cast<const uint64_t*>(m);
            uint64_t s = 0;
            for (uint64_t off = 0; off < bytes / 8; off += 512) s += q[off];  // one word a page
            sum = sum + s;
          };
          t0 = std::chrono::steady_clock::now();
          read();
          map_ms.push_back(MsSince(t0));
          t0 = std::chrono::steady_clock::now();
          read();
          map_warm_ms.push_back(MsSince(t0));
          // The release: the mapping goes, then the last reference to the
          // segment, which frees its pages.
          t0 = std::chrono::steady_clock::now();
          munmap(m, bytes);
          close(fd);
          fd = -1;
          release_ms.push_back(MsSince(t0));
        }
      }
    }
    if (fd >= 0) close(fd);
  }
  const double fault = Median(fresh_ms) - Median(warm_ms);
  if (fault > 0) p->first_touch_gbps = GbPerSecond(bytes, fault);
  const double map_fault = Median(map_ms) - Median(map_warm_ms);
  if (map_fault > 0) p->map_touch_gbps = GbPerSecond(bytes, map_fault);
  const double release = Median(release_ms);
  if (release > 0) p->shm_release_gbps = GbPerSecond(bytes, release);
}

bool MeasureBandwidth(const CudaApi& api, const BenchSettings& settings,
                      std::vector<BandwidthPoint>* points, std::string* error,
                      const std::function<void(const BandwidthPoint&)>& on_point) {
  points->clear();
  if (settings.sizes.empty() || settings.repeats < 1) {
    *error = "nothing to measure";
    return false;
  }
  const uint64_t largest = *std::max_element(settings.sizes.begin(), settings.sizes.end());
  BenchResources r(api);
  auto check = [&](cudaError_t status, const std::string& what) {
    if (status == cudaSuccess) return true;
    *error = what + " failed: " + api.ErrorText(status);
    return false;
  };

  if (!check(api.SetDevice(settings.device),
             "cudaSetDevice(" + std::to_string(settings.device) + ")")) {
    return false;
  }
  if (!check(api.Malloc(&r.device, largest), "cudaMalloc(" + FormatBytes(largest) + ")")) {
    return false;
  }
  if (!check(api.HostAlloc(&r.pinned, largest, cudaHostAllocDefault),
             "cudaHostAlloc(" + FormatBytes(largest) + ")")) {
    return false;
  }
  const uint64_t rounded = (largest + 4095) & ~uint64_t{4095};
  if (posix_memalign(&r.pageable, 4096, rounded) != 0) {
    r.pageable = nullptr;
    *error = "cannot allocate " + FormatBytes(largest) + " of pageable host memory";
    return false;
  }
  // Touch (write) every page of both host buffers before any timing: an
  // untouched pageable buffer would add page faults to its first copies.
  std::memset(r.pageable, 0x5a, largest);
  std::memset(r.pinned, 0x5a, largest);
  if (!check(api.StreamCreate(&r.stream), "cudaStreamCreate")) return false;
  r.have_stream = true;
  if (!check(api.EventCreate(&r.start), "cudaEventCreate")) return false;
  if (!check(api.EventCreate(&r.stop), "cudaEventCreate")) return false;

  // Median GB/s of `settings.repeats` copies of `bytes`, after warm-up.
  auto time_copies = [&](void* dst, const void* src, uint64_t bytes, cudaMemcpyKind kind,
                         const char* memory, double* gbps) {
    const std::string what =
        std::string(KindName(kind)) + " " + memory + " copy of " + FormatBytes(bytes);
    std::vector<double> samples;
    for (int i = 0; i < settings.warmup + settings.repeats; ++i) {
      if (!check(api.EventRecord(r.start, r.stream), "cudaEventRecord (" + what + ")") ||
          !check(api.MemcpyAsync(dst, src, bytes, kind, r.stream),
                 "cudaMemcpyAsync (" + what + ")") ||
          !check(api.EventRecord(r.stop, r.stream), "cudaEventRecord (" + what + ")") ||
          !check(api.EventSynchronize(r.stop), "cudaEventSynchronize (" + what + ")")) {
        return false;
      }
      float ms = 0;
      if (!check(api.EventElapsedTime(&ms, r.start, r.stop),
                 "cudaEventElapsedTime (" + what + ")")) {
        return false;
      }
      if (i < settings.warmup) continue;
      if (!(ms > 0)) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%g", static_cast<double>(ms));
        *error = "cudaEventElapsedTime (" + what + ") gave " + buf + " ms, not a duration";
        return false;
      }
      samples.push_back(GbPerSecond(bytes, ms));
    }
    *gbps = Median(samples);
    return true;
  };

  for (uint64_t bytes : settings.sizes) {
    BandwidthPoint p;
    p.bytes = bytes;
    if (!time_copies(r.device, r.pageable, bytes, cudaMemcpyHostToDevice, "pageable",
                     &p.h2d_pageable_gbps) ||
        !time_copies(r.device, r.pinned, bytes, cudaMemcpyHostToDevice, "pinned",
                     &p.h2d_pinned_gbps) ||
        !time_copies(r.pageable, r.device, bytes, cudaMemcpyDeviceToHost, "pageable",
                     &p.d2h_pageable_gbps) ||
        !time_copies(r.pinned, r.device, bytes, cudaMemcpyDeviceToHost, "pinned",
                     &p.d2h_pinned_gbps)) {
      return false;
    }
    // What DataLoader's pin thread does to each batch: one thread's memcpy
    // from pageable (touched) memory into a pinned buffer.
    std::vector<double> host;
    for (int i = 0; i < settings.warmup + settings.repeats; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      std::memcpy(r.pinned, r.pageable, bytes);
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                      .count();
      if (i >= settings.warmup && ms > 0) host.push_back(GbPerSecond(bytes, ms));
    }
    p.host_copy_gbps = Median(host);
    // What PINSCOPE_PIN=1 pays for a new buffer: registering touched memory.
    if (api.HostRegister && api.HostUnregister) {
      std::vector<double> reg;
      for (int i = 0; i < settings.repeats; ++i) {
        auto t0 = std::chrono::steady_clock::now();
        if (!check(api.HostRegister(r.pageable, bytes, cudaHostRegisterDefault),
                   "cudaHostRegister(" + FormatBytes(bytes) + ")")) {
          return false;
        }
        double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                        .count();
        if (!check(api.HostUnregister(r.pageable), "cudaHostUnregister")) return false;
        if (ms > 0) reg.push_back(GbPerSecond(bytes, ms));
      }
      p.register_gbps = Median(reg);
    }
    MeasurePageFaults(bytes, settings.repeats, &p);
    points->push_back(p);
    if (on_point) on_point(p);
  }
  return check(api.StreamSynchronize(r.stream), "cudaStreamSynchronize");
}

}  // namespace pinscope::cli
