// The CUDA runtime double's host memory: cudaHostAlloc / cudaMallocHost (a
// MAP_SHARED anonymous mapping, like the real one) and cudaFreeHost,
// cudaHostRegister / cudaHostUnregister of the program's own pages (with
// the real call's errors, an optional delay and injected failures:
// FAKE_CUDART_FAIL_REGISTER / FAKE_CUDART_FAIL_UNREGISTER, fake_cudart.h),
// cudaPointerGetAttributes, and the test-only statistics of fake_cudart.h.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <iterator>
#include <thread>

#include "fake_cudart_internal.h"

namespace fakecuda {
namespace {

cudaError_t host_alloc(void** out, size_t size, unsigned flags) {
  G().host_alloc_calls.fetch_add(1, std::memory_order_relaxed);
  CHECK_DEVICE();
  if (out == nullptr || (flags & ~0x7u)) return cudaErrorInvalidValue;
  *out = nullptr;
  if (size == 0) return cudaSuccess;
  long page = sysconf(_SC_PAGESIZE);
  size_t len = (size + page - 1) / page * page;
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return cudaErrorMemoryAllocation;
  insert_range(p, Range{size, RK::PinnedAlloc, t_device, len, flags});
  *out = p;
  return cudaSuccess;
}

cudaError_t free_host(void* p) {
  G().free_host_calls.fetch_add(1, std::memory_order_relaxed);
  CHECK_DEVICE();
  if (p == nullptr) return cudaSuccess;
  {
    Global& g = G();
    std::lock_guard<std::mutex> lk(g.rmu);
    auto it = g.ranges.find(reinterpret_cast<uintptr_t>(p));
    if (it == g.ranges.end() || it->second.kind != RK::PinnedAlloc) return cudaErrorInvalidValue;
  }
  sync_device(-1);  // like the real call: no pending copy may touch it
  size_t len;
  {
    Global& g = G();
    std::lock_guard<std::mutex> lk(g.rmu);
    auto it = g.ranges.find(reinterpret_cast<uintptr_t>(p));
    if (it == g.ranges.end() || it->second.kind != RK::PinnedAlloc) return cudaErrorInvalidValue;
    len = it->second.map_size;
    g.ranges.erase(it);
  }
  munmap(p, len);
  return cudaSuccess;
}

std::atomic<unsigned> g_register_delay_ms{0};  // fakecuda_set_register_delay_ms

// Fault injection (fake_cudart.h): whether call number `nth` (1-based) of a
// function must fail, by the spec in environment variable `var`: "all", or
// a comma-separated list of call numbers and ranges ("2", "1-3,5"). Read at
// every call, so a test may change it between calls; unset or empty: no
// failure. A malformed spec fails nothing.
bool InjectedFailure(const char* var, unsigned long nth) {
  const char* spec = getenv(var);
  if (spec == nullptr || *spec == '\0') return false;
  if (strcmp(spec, "all") == 0) return true;
  const char* p = spec;
  while (*p) {
    char* end = nullptr;
    unsigned long lo = strtoul(p, &end, 10);
    if (end == p) return false;
    unsigned long hi = lo;
    p = end;
    if (*p == '-') {
      hi = strtoul(p + 1, &end, 10);
      if (end == p + 1) return false;
      p = end;
    }
    if (nth >= lo && nth <= hi) return true;
    if (*p == ',')
      ++p;
    else if (*p)
      return false;
  }
  return false;
}

// Calls counted for fault injection (never reset, unlike the statistics).
std::atomic<unsigned long> g_register_nth{0}, g_unregister_nth{0};

cudaError_t host_register(void* p, size_t size, unsigned flags) {
  Global& g = G();
  g.host_register_calls.fetch_add(1, std::memory_order_relaxed);
  CHECK_DEVICE();
  // The real call's answer when the driver cannot lock the pages (memlock
  // limit, no memory): nothing is registered.
  if (InjectedFailure("FAKE_CUDART_FAIL_REGISTER", g_register_nth.fetch_add(1) + 1))
    return cudaErrorMemoryAllocation;
  // The real call takes milliseconds for a batch-sized range (4-14 ms for
  // 73.5 MiB on the H200); the range is registered only when it returns.
  if (unsigned ms = g_register_delay_ms.load(std::memory_order_relaxed))
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  if (p == nullptr || size == 0 || (flags & ~0xFu)) return cudaErrorInvalidValue;
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (a + size < a) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lk(g.rmu);
  // Scan every range overlapping [a, a+size).
  auto it = g.ranges.upper_bound(a);
  if (it != g.ranges.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second.size > a) it = prev;
  }
  bool registered = false, other = false;
  for (; it != g.ranges.end() && it->first < a + size; ++it) {
    if (it->first + it->second.size <= a) continue;
    if (it->second.kind == RK::Registered)
      registered = true;
    else
      other = true;
  }
  // Measured (facts section 4): overlapping a registered range -> 712;
  // registering cudaHostAlloc (or device) memory -> cudaErrorInvalidValue.
  if (registered) return cudaErrorHostMemoryAlreadyRegistered;
  if (other) return cudaErrorInvalidValue;
  g.ranges[a] = Range{size, RK::Registered, t_device, 0, flags};
  g.registered_bytes += size;
  return cudaSuccess;
}

cudaError_t host_unregister(void* p) {
  Global& g = G();
  g.host_unregister_calls.fetch_add(1, std::memory_order_relaxed);
  CHECK_DEVICE();
  // A failure the driver does not explain: the range stays registered.
  if (InjectedFailure("FAKE_CUDART_FAIL_UNREGISTER", g_unregister_nth.fetch_add(1) + 1))
    return cudaErrorUnknown;
  if (p == nullptr) return cudaErrorInvalidValue;
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  {
    std::lock_guard<std::mutex> lk(g.rmu);
    auto it = find_range(a);
    if (it == g.ranges.end() || it->second.kind != RK::Registered)
      return cudaErrorHostMemoryNotRegistered;
    if (it->first != a) return cudaErrorInvalidValue;  // interior pointer
  }
  sync_device(-1);  // no pending copy may still use the pages
  std::lock_guard<std::mutex> lk(g.rmu);
  auto it = g.ranges.find(a);
  if (it == g.ranges.end() || it->second.kind != RK::Registered)
    return cudaErrorHostMemoryNotRegistered;
  g.registered_bytes -= it->second.size;
  g.ranges.erase(it);
  return cudaSuccess;
}

}  // namespace
}  // namespace fakecuda

using fakecuda::api;
using fakecuda::classify;
using fakecuda::find_range;
using fakecuda::free_host;
using fakecuda::G;
using fakecuda::g_register_delay_ms;
using fakecuda::Global;
using fakecuda::host_alloc;
using fakecuda::host_register;
using fakecuda::host_unregister;
using fakecuda::Loc;
using fakecuda::Mem;
using fakecuda::RK;

FAKE_API cudaError_t cudaHostAlloc(void** p, size_t size, unsigned flags) {
  return api([&] { return host_alloc(p, size, flags); });
}

FAKE_API cudaError_t cudaMallocHost(void** p, size_t size) {
  return api([&] { return host_alloc(p, size, cudaHostAllocDefault); });
}

FAKE_API cudaError_t cudaFreeHost(void* p) {
  return api([&] { return free_host(p); });
}

FAKE_API cudaError_t cudaHostRegister(void* p, size_t size, unsigned flags) {
  return api([&] { return host_register(p, size, flags); });
}

FAKE_API cudaError_t cudaHostUnregister(void* p) {
  return api([&] { return host_unregister(p); });
}

FAKE_API cudaError_t cudaHostGetDevicePointer(void** dev, void* host, unsigned flags) {
  return api([&]() -> cudaError_t {
    CHECK_DEVICE();
    if (dev == nullptr || host == nullptr || flags != 0) return cudaErrorInvalidValue;
    Loc l = classify(host, 1);
    if (l.mem != Mem::Pinned) return cudaErrorInvalidValue;
    *dev = host;
    return cudaSuccess;
  });
}

FAKE_API cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* ptr) {
  G().pointer_attribute_calls.fetch_add(1, std::memory_order_relaxed);
  return api([&]() -> cudaError_t {
    CHECK_DEVICE();
    if (attr == nullptr || ptr == nullptr) return cudaErrorInvalidValue;
    std::memset(attr, 0, sizeof(*attr));
    Loc l = classify(ptr, 1);
    void* p = const_cast<void*>(ptr);
    switch (l.mem) {
      case Mem::Pageable:
        attr->type = cudaMemoryTypeUnregistered;
        attr->device = -2;
        attr->devicePointer = nullptr;
        attr->hostPointer = p;
        break;
      case Mem::Device:
        attr->type = cudaMemoryTypeDevice;
        attr->device = l.device;
        attr->devicePointer = p;
        attr->hostPointer = nullptr;
        break;
      case Mem::Managed:
        attr->type = cudaMemoryTypeManaged;
        attr->device = l.device;
        attr->devicePointer = p;
        attr->hostPointer = p;
        break;
      case Mem::Pinned:
        attr->type = cudaMemoryTypeHost;
        attr->device = l.device;
        attr->devicePointer = p;  // unified addressing: same address
        attr->hostPointer = p;
        break;
    }
    return cudaSuccess;
  });
}

FAKE_API cudaError_t cudaHostGetFlags(unsigned* flags, void* p) {
  return api([&]() -> cudaError_t {
    CHECK_DEVICE();
    if (flags == nullptr || p == nullptr) return cudaErrorInvalidValue;
    Global& g = G();
    std::lock_guard<std::mutex> lk(g.rmu);
    auto it = find_range(reinterpret_cast<uintptr_t>(p));
    if (it == g.ranges.end() ||
        (it->second.kind != RK::Registered && it->second.kind != RK::PinnedAlloc))
      return cudaErrorInvalidValue;
    *flags = it->second.flags;
    return cudaSuccess;
  });
}

// --- Test-only extensions (fake_cudart.h) ------------------------------------

FAKE_API int fakecuda_host_query(const void* p, int* device, unsigned* flags) {
  Loc l = classify(p, 1);
  *device = l.device;
  *flags = 0;
  if (l.mem == Mem::Pinned) {
    Global& g = G();
    std::lock_guard<std::mutex> lk(g.rmu);
    auto it = find_range(reinterpret_cast<uintptr_t>(p));
    if (it != g.ranges.end()) *flags = it->second.flags;
  }
  switch (l.mem) {
    case Mem::Pageable:
      return 0;
    case Mem::Pinned:
      return 1;
    case Mem::Device:
      return 2;
    case Mem::Managed:
      return 3;
  }
  return 0;
}

FAKE_API void fakecuda_get_stats(struct fakecuda_stats* out) {
  if (out == nullptr) return;
  Global& g = G();
  out->host_register_calls = g.host_register_calls.load();
  out->host_unregister_calls = g.host_unregister_calls.load();
  out->host_alloc_calls = g.host_alloc_calls.load();
  out->free_host_calls = g.free_host_calls.load();
  out->pointer_attribute_calls = g.pointer_attribute_calls.load();
  out->memcpy_calls = g.memcpy_calls.load();
  std::lock_guard<std::mutex> lk(g.rmu);
  out->registered_bytes = g.registered_bytes;
}

FAKE_API void fakecuda_reset_stats(void) {
  Global& g = G();
  g.host_register_calls = 0;
  g.host_unregister_calls = 0;
  g.host_alloc_calls = 0;
  g.free_host_calls = 0;
  g.pointer_attribute_calls = 0;
  g.memcpy_calls = 0;
}

FAKE_API void fakecuda_set_register_delay_ms(unsigned ms) {
  g_register_delay_ms.store(ms, std::memory_order_relaxed);
}

FAKE_API int fakecuda_is_registered(const void* p) {
  Global& g = G();
  std::lock_guard<std::mutex> lk(g.rmu);
  auto it = find_range(reinterpret_cast<uintptr_t>(p));
  return it != g.ranges.end() && it->second.kind == RK::Registered ? 1 : 0;
}
