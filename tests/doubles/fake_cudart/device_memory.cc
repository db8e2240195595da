// The CUDA runtime double's device memory: cudaMalloc, cudaMallocManaged,
// cudaMallocPitch and cudaFree ("device" memory is aligned_alloc'ed host
// memory in the range table), cudaMemset*, and the __device__ symbols tests
// declare with fakecuda_register_symbol.
#include "fake_cudart_internal.h"

#include <cstdlib>
#include <cstring>

namespace fakecuda {
namespace {

cudaError_t device_alloc(void** out, size_t size, RK kind) {
  CHECK_DEVICE();
  if (out == nullptr) return cudaErrorInvalidValue;
  *out = nullptr;
  if (size == 0) return cudaSuccess;
  if (size > (size_t{1} << 40)) return cudaErrorMemoryAllocation;
  size_t len = (size + 255) / 256 * 256;
  void* p = std::aligned_alloc(256, len);
  if (p == nullptr) return cudaErrorMemoryAllocation;
  insert_range(p, Range{size, kind, t_device, len});
  *out = p;
  return cudaSuccess;
}

cudaError_t device_free(void* p) {
  CHECK_DEVICE();
  if (p == nullptr) return cudaSuccess;
  auto is_dev = [](const Range& r) {
    return r.kind == RK::Device || r.kind == RK::Managed;
  };
  Global& g = G();
  {
    std::lock_guard<std::mutex> lk(g.rmu);
    auto it = g.ranges.find(reinterpret_cast<uintptr_t>(p));
    if (it == g.ranges.end() || !is_dev(it->second)) return cudaErrorInvalidValue;
  }
  sync_device(-1);  // cudaFree synchronises, like the real one
  {
    std::lock_guard<std::mutex> lk(g.rmu);
    auto it = g.ranges.find(reinterpret_cast<uintptr_t>(p));
    if (it == g.ranges.end() || !is_dev(it->second)) return cudaErrorInvalidValue;
    g.ranges.erase(it);
  }
  std::free(p);
  return cudaSuccess;
}

// cudaMemset*: asynchronous for device/managed memory, synchronous for
// pinned host memory (as documented for the real runtime).
cudaError_t memset_impl(void* p, int value, size_t n, cudaStream_t h) {
  CHECK_DEVICE();
  StreamP st = resolve_stream(h);
  if (!st) return cudaErrorInvalidResourceHandle;
  if (n == 0) return cudaSuccess;
  if (p == nullptr) return cudaErrorInvalidValue;
  Loc l = classify(p, n);
  if (l.mem == Mem::Pageable || !l.fits) return cudaErrorInvalidValue;
  uint64_t seq = enqueue(st, [p, value, n] { std::memset(p, value, n); });
  if (l.mem == Mem::Pinned) wait_done(st, seq);
  return cudaSuccess;
}

}  // namespace
}  // namespace fakecuda

using fakecuda::api;
using fakecuda::device_alloc;
using fakecuda::device_count;
using fakecuda::device_free;
using fakecuda::find_range;
using fakecuda::G;
using fakecuda::Global;
using fakecuda::memset_impl;
using fakecuda::Range;
using fakecuda::RK;
using fakecuda::t_device;

// Names without a prototype in the 13.0 header.
extern "C" {
cudaError_t cudaMemset_ptds(void*, int, size_t);
cudaError_t cudaMemsetAsync_ptsz(void*, int, size_t, cudaStream_t);
}  // extern "C"

// --- Memory -----------------------------------------------------------------

FAKE_API cudaError_t cudaMalloc(void** p, size_t size) {
  return api([&] { return device_alloc(p, size, RK::Device); });
}

FAKE_API cudaError_t cudaMallocManaged(void** p, size_t size, unsigned flags) {
  return api([&]() -> cudaError_t {
    if (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost)
      return device_count() == 0 ? cudaErrorNoDevice : cudaErrorInvalidValue;
    return device_alloc(p, size, RK::Managed);
  });
}

FAKE_API cudaError_t cudaMallocPitch(void** p, size_t* pitch, size_t width, size_t height) {
  return api([&]() -> cudaError_t {
    CHECK_DEVICE();
    if (pitch == nullptr) return cudaErrorInvalidValue;
    size_t w = (width + 511) / 512 * 512;
    cudaError_t e = device_alloc(p, w * height, RK::Device);
    if (e == cudaSuccess) *pitch = w;
    return e;
  });
}

FAKE_API cudaError_t cudaFree(void* p) {
  return api([&] { return device_free(p); });
}

FAKE_API cudaError_t cudaMemset(void* p, int v, size_t n) {
  return api([&] { return memset_impl(p, v, n, nullptr); });
}
FAKE_API cudaError_t cudaMemset_ptds(void* p, int v, size_t n) {
  return api([&] { return memset_impl(p, v, n, cudaStreamPerThread); });
}
FAKE_API cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t s) {
  return api([&] { return memset_impl(p, v, n, s); });
}
FAKE_API cudaError_t cudaMemsetAsync_ptsz(void* p, int v, size_t n, cudaStream_t s) {
  return api([&] { return memset_impl(p, v, n, s); });
}

// --- Test-only extensions (fake_cudart.h) ------------------------------------

FAKE_API cudaError_t fakecuda_register_symbol(const void* sym, size_t size) {
  return api([&]() -> cudaError_t {
    if (sym == nullptr || size == 0) return cudaErrorInvalidValue;
    Global& g = G();
    uintptr_t a = reinterpret_cast<uintptr_t>(sym);
    std::lock_guard<std::mutex> lk(g.rmu);
    auto it = g.ranges.lower_bound(a);
    if (it != g.ranges.end() && it->first < a + size) return cudaErrorInvalidValue;
    if (find_range(a) != g.ranges.end()) return cudaErrorInvalidValue;
    g.ranges[a] = Range{size, RK::Symbol, t_device, 0};
    return cudaSuccess;
  });
}

FAKE_API cudaError_t fakecuda_unregister_symbol(const void* sym) {
  return api([&]() -> cudaError_t {
    Global& g = G();
    std::lock_guard<std::mutex> lk(g.rmu);
    auto it = g.ranges.find(reinterpret_cast<uintptr_t>(sym));
    if (it == g.ranges.end() || it->second.kind != RK::Symbol)
      return cudaErrorInvalidSymbol;
    g.ranges.erase(it);
    return cudaSuccess;
  });
}
