// Real CUDA runtime lookup and pointer classification; see real_runtime.h.
#include "shim/cuda/real_runtime.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <link.h>
#include <string.h>

#include <atomic>
#include <utility>

#include "shim/base/clock.h"
#include "shim/base/guard.h"
#include "shim/base/log.h"
#include "shim/base/own_cost.h"
#include "shim/record/recorder.h"
#include "shim/record/trace_fields.h"

namespace pinscope::shim {
namespace {

std::atomic<void*> g_cudart_handle{nullptr};
std::atomic<uint32_t> g_generation{1};
std::atomic<int> g_runtime_major{-1};
std::atomic<bool> g_cuda_noted{false};
std::atomic<bool> g_said_no_runtime{false};
std::atomic<bool> g_said_no_gpu{false};

int FindCudart(struct dl_phdr_info* info, size_t, void* out) {
  const char* name = info->dlpi_name;
  if (name && strstr(name, "libcudart.so")) {
    char* dst = static_cast<char*>(out);
    CopyString(dst, 4096, name);
    return 1;
  }
  return 0;
}

void* CudartHandle() {
  void* h = g_cudart_handle.load(std::memory_order_acquire);
  if (h) return h;
  char path[4096] = {};
  dl_iterate_phdr(FindCudart, path);
  if (!path[0]) return nullptr;
  h = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
  if (h) g_cudart_handle.store(h, std::memory_order_release);
  return h;
}

struct CacheEntry {
  uintptr_t ptr;
  uint32_t generation;
  uint32_t kind;
  int32_t device;
};
// Two ways a set, the most recent first: direct-mapped, two pointers of a
// loop that met in one entry evicted each other and were queried at every
// copy (and E2ECopies.HostBlockedTimeOfPageableAndPinnedAsync counted 4
// queries instead of 3 in about one run in 64, as ASLR placed them).
constexpr size_t kCacheSetBits = 6;
constexpr size_t kCacheSets = size_t{1} << kCacheSetBits, kCacheSize = 2 * kCacheSets;
PINSCOPE_TLS CacheEntry t_cache[kCacheSize];

using GetAttrFn = cudaError_t (*)(cudaPointerAttributes*, const void*);
using ErrFn = cudaError_t (*)();
using VersionFn = cudaError_t (*)(int*);
using CountFn = cudaError_t (*)(int*);

RealFn<GetAttrFn> g_get_attr("cudaPointerGetAttributes");
RealFn<ErrFn> g_peek("cudaPeekAtLastError");
RealFn<ErrFn> g_get_last("cudaGetLastError");
RealFn<VersionFn> g_runtime_version("cudaRuntimeGetVersion");
RealFn<VersionFn> g_driver_version("cudaDriverGetVersion");
RealFn<CountFn> g_device_count("cudaGetDeviceCount");

}  // namespace

void* ResolveCuda(const char* name) {
  HookScope scope;  // dlsym may allocate
  void* f = dlsym(RTLD_NEXT, name);
  if (!f) {
    if (void* h = CudartHandle()) f = dlsym(h, name);
  }
  if (!f) LogOnce(&g_said_no_runtime, "%s was called but no CUDA runtime is loaded", name);
  return f;
}

void* ResolveDriver(const char* name) {
  HookScope scope;
  void* f = dlsym(RTLD_NEXT, name);
  if (!f) {
    if (void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD)) {
      f = dlsym(h, name);
      dlclose(h);  // NOLOAD took a reference of its own
    }
  }
  return f;
}

const void* NeverRegisteredAddress() {
  // A whole page, so that no registration of neighbouring memory (CUDA
  // registers whole pages) can cover it.
  alignas(4096) static char page[4096];
  return page;
}

void BumpPointerGeneration() { g_generation.fetch_add(1, std::memory_order_acq_rel); }

size_t PointerCacheSet(const void* p) {
  // Fibonacci hashing: the top bits of the address times 2^64 / phi. The
  // index before, (key >> 6 ^ key >> 17) % 32, sent addresses a power of two
  // apart to few sets: the Hugging Face Trainer's loop copies between 41
  // pointers (device tensors among them 64 KiB apart) and queried the
  // driver 3.5 times a step for them, replayed on call 60's trace
  // (docs/benchmarks.md, twenty-fifth session); this index, with 64 sets of
  // two, queries each once.
  const uint64_t key = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)) >> 4;
  return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> (64 - kCacheSetBits));
}

PointerInfo ClassifyPointer(const void* p) {
  if (!p) return {fields::kMemUnknown, -1};
  uint32_t gen = g_generation.load(std::memory_order_acquire);
  uintptr_t key = reinterpret_cast<uintptr_t>(p);
  CacheEntry* set = &t_cache[2 * PointerCacheSet(p)];
  if (set[0].ptr == key && set[0].generation == gen) return {set[0].kind, set[0].device};
  if (set[1].ptr == key && set[1].generation == gen) {
    std::swap(set[0], set[1]);
    return {set[0].kind, set[0].device};
  }
  GetAttrFn get_attr = g_get_attr.get();
  ErrFn peek = g_peek.get();
  ErrFn get_last = g_get_last.get();
  if (!get_attr || !peek || !get_last) return {fields::kMemUnknown, -1};
  // A failed query sets the sticky last error; clear ours only when none
  // of the program's was pending, and skip the query when one is.
  if (peek() != cudaSuccess) return {fields::kMemUnknown, -1};
  cudaPointerAttributes attr;
  memset(&attr, 0, sizeof attr);
  PointerInfo info{fields::kMemUnknown, -1};
  const uint64_t t0 = MonoNs();
  const cudaError_t rc = get_attr(&attr, p);
  AddPointerQueryCost(MonoNs() - t0);
  if (rc != cudaSuccess) {
    get_last();
    info = {fields::kPageable, -1};  // pre-CUDA-11 answer for unregistered host memory
  } else {
    switch (attr.type) {
      case cudaMemoryTypeUnregistered: info = {fields::kPageable, -1}; break;
      case cudaMemoryTypeHost: info = {fields::kPinned, -1}; break;
      case cudaMemoryTypeDevice: info = {fields::kDevice, attr.device}; break;
      case cudaMemoryTypeManaged: info = {fields::kManaged, attr.device}; break;
      default: break;
    }
  }
  set[1] = set[0];  // the least recent goes
  set[0] = {key, gen, info.kind, info.device};
  return info;
}

int RuntimeMajor() {
  int m = g_runtime_major.load(std::memory_order_relaxed);
  if (m >= 0) return m;
  int v = 0;
  VersionFn fn = g_runtime_version.get();
  if (fn && fn(&v) == cudaSuccess) {
    m = v / 1000;
  } else {
    m = 0;
  }
  g_runtime_major.store(m, std::memory_order_relaxed);
  return m;
}

bool CudaSeen() { return g_cuda_noted.load(std::memory_order_relaxed); }

bool NoteCudaUse() {
  if (g_cuda_noted.load(std::memory_order_relaxed) || g_cuda_noted.exchange(true)) return false;
  int runtime = 0, driver = 0, count = 0;
  if (VersionFn f = g_runtime_version.get()) f(&runtime);
  if (VersionFn f = g_driver_version.get()) f(&driver);
  cudaError_t count_rc = cudaErrorUnknown;
  ErrFn peek = g_peek.get();
  ErrFn get_last = g_get_last.get();
  bool clean = peek && peek() == cudaSuccess;
  if (CountFn f = g_device_count.get()) count_rc = f(&count);
  if (count_rc != cudaSuccess) {
    count = 0;
    if (clean && get_last) get_last();
    LogOnce(&g_said_no_gpu,
            "no GPU is visible to the CUDA runtime (cudaGetDeviceCount returned %d); copies "
            "are recorded as they fail",
            static_cast<int>(count_rc));
  }
  char path[4096] = {};
  Dl_info info;
  if (void* f = ResolveCuda("cudaMemcpy"); f && dladdr(f, &info) && info.dli_fname)
    CopyString(path, sizeof path, info.dli_fname);
  Packet p(fields::packet::kCuda, MonoNs());
  p.e().String(fields::cuda::kPath, path);
  p.e().Int32(fields::cuda::kRuntimeVersion, runtime);
  p.e().Int32(fields::cuda::kDriverVersion, driver);
  p.e().Int32(fields::cuda::kDeviceCount, count);
  p.Commit();
  return count > 0;
}

}  // namespace pinscope::shim
