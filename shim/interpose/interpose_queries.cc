// Exported hooks of the program's memory queries (the runtime's and the
// driver's) and of the routes by which it gets driver entry points, so that
// memory pinscope registered answers as the pageable memory it is to the
// program (core/pin_queries.h; the list and why it is complete:
// docs/pinning.md). pinscope's own classification calls the real functions
// (cuda/real_runtime.cc), never these.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include "shim/base/guard.h"
#include "shim/core/pin_queries.h"
#include "shim/cuda/real_runtime.h"

#define PINSCOPE_EXPORT extern "C" __attribute__((visibility("default")))

using namespace pinscope::shim;

namespace {

// The driver's functions, resolved once each (without a driver loaded:
// the program could not have called them through the linker either).
template <typename Fn>
class DriverFn {
 public:
  explicit constexpr DriverFn(const char* name) : name_(name) {}
  Fn get() {
    Fn f = __atomic_load_n(&fn_, __ATOMIC_ACQUIRE);
    if (!f) {
      f = reinterpret_cast<Fn>(ResolveDriver(name_));
      __atomic_store_n(&fn_, f, __ATOMIC_RELEASE);
    }
    return f;
  }

 private:
  const char* name_;
  Fn fn_ = nullptr;
};

}  // namespace

// ---------------------------------------------------------------------------
// The runtime's queries

PINSCOPE_EXPORT cudaError_t ps_cudaPointerGetAttributes(
    cudaPointerAttributes* attr, const void* p) __asm__("cudaPointerGetAttributes");
cudaError_t ps_cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* p) {
  static RealFn<PointerAttributesFn> real("cudaPointerGetAttributes");
  auto fn = real.get();
  if (!fn) return cudaErrorInitializationError;
  if (InHook()) return fn(attr, p);
  HookScope scope;
  return QueryPointerAttributes(fn, attr, p);
}

PINSCOPE_EXPORT cudaError_t ps_cudaHostGetFlags(unsigned int* flags,
                                                void* p) __asm__("cudaHostGetFlags");
cudaError_t ps_cudaHostGetFlags(unsigned int* flags, void* p) {
  static RealFn<HostGetFlagsFn> real("cudaHostGetFlags");
  auto fn = real.get();
  if (!fn) return cudaErrorInitializationError;
  if (InHook()) return fn(flags, p);
  HookScope scope;
  return QueryHostGetFlags(fn, flags, p);
}

PINSCOPE_EXPORT cudaError_t ps_cudaHostGetDevicePointer(
    void** dev, void* p, unsigned int flags) __asm__("cudaHostGetDevicePointer");
cudaError_t ps_cudaHostGetDevicePointer(void** dev, void* p, unsigned int flags) {
  static RealFn<HostGetDevicePointerFn> real("cudaHostGetDevicePointer");
  auto fn = real.get();
  if (!fn) return cudaErrorInitializationError;
  if (InHook()) return fn(dev, p, flags);
  HookScope scope;
  return QueryHostGetDevicePointer(fn, dev, p, flags);
}

// ---------------------------------------------------------------------------
// The driver's queries (a program or library linked with -lcuda binds to
// these; one that dlsym's them from its own handle gets them through
// cuGetProcAddress, below, or not at all: docs/pinning.md)

PINSCOPE_EXPORT CUresult ps_cuPointerGetAttribute(void* data, CUpointer_attribute a,
                                                  CUdeviceptr p) __asm__("cuPointerGetAttribute");
CUresult ps_cuPointerGetAttribute(void* data, CUpointer_attribute a, CUdeviceptr p) {
  static DriverFn<DrvPointerGetAttributeFn> real("cuPointerGetAttribute");
  auto fn = real.get();
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  if (InHook()) return fn(data, a, p);
  HookScope scope;
  return QueryDrvPointerGetAttribute(fn, data, a, p);
}

PINSCOPE_EXPORT CUresult ps_cuPointerGetAttributes(unsigned int n, CUpointer_attribute* a,
                                                   void** data,
                                                   CUdeviceptr p) __asm__("cuPointerGetAttributes");
CUresult ps_cuPointerGetAttributes(unsigned int n, CUpointer_attribute* a, void** data,
                                   CUdeviceptr p) {
  static DriverFn<DrvPointerGetAttributesFn> real("cuPointerGetAttributes");
  auto fn = real.get();
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  if (InHook()) return fn(n, a, data, p);
  HookScope scope;
  return QueryDrvPointerGetAttributes(fn, n, a, data, p);
}

PINSCOPE_EXPORT CUresult ps_cuMemHostGetFlags(unsigned int* flags,
                                              void* p) __asm__("cuMemHostGetFlags");
CUresult ps_cuMemHostGetFlags(unsigned int* flags, void* p) {
  static DriverFn<DrvHostGetFlagsFn> real("cuMemHostGetFlags");
  auto fn = real.get();
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  if (InHook()) return fn(flags, p);
  HookScope scope;
  return QueryDrvHostGetFlags(fn, flags, p);
}

// cuda.h maps cuMemHostGetDevicePointer to the _v2 name; the unsuffixed
// export is the 32-bit ABI of CUDA < 3.2, left alone.
PINSCOPE_EXPORT CUresult ps_cuMemHostGetDevicePointer_v2(
    CUdeviceptr* dev, void* p, unsigned int flags) __asm__("cuMemHostGetDevicePointer_v2");
CUresult ps_cuMemHostGetDevicePointer_v2(CUdeviceptr* dev, void* p, unsigned int flags) {
  static DriverFn<DrvHostGetDevicePointerFn> real("cuMemHostGetDevicePointer_v2");
  auto fn = real.get();
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  if (InHook()) return fn(dev, p, flags);
  HookScope scope;
  return QueryDrvHostGetDevicePointer(fn, dev, p, flags);
}

// ---------------------------------------------------------------------------
// Driver entry points: the real function is looked up, then replaced by
// pinscope's wrapper for the query names (core/pin_queries.cc).

PINSCOPE_EXPORT CUresult
ps_cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                       CUdriverProcAddressQueryResult* status) __asm__("cuGetProcAddress_v2");
CUresult ps_cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                CUdriverProcAddressQueryResult* status) {
  static DriverFn<DrvGetProcAddressFn> real("cuGetProcAddress_v2");
  auto fn = real.get();
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult rc = fn(symbol, pfn, version, flags, status);
  if (rc == CUDA_SUCCESS && !InHook()) {
    HookScope scope;
    WrapDriverEntryPoint(symbol, pfn, version);
  }
  return rc;
}

PINSCOPE_EXPORT CUresult ps_cuGetProcAddress(const char* symbol, void** pfn, int version,
                                             cuuint64_t flags) __asm__("cuGetProcAddress");
CUresult ps_cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  static DriverFn<DrvGetProcAddressV1Fn> real("cuGetProcAddress");
  auto fn = real.get();
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult rc = fn(symbol, pfn, version, flags);
  if (rc == CUDA_SUCCESS && !InHook()) {
    HookScope scope;
    WrapDriverEntryPoint(symbol, pfn, version);
  }
  return rc;
}

namespace {
using EntryPointFn = cudaError_t (*)(const char*, void**, unsigned long long,
                                     cudaDriverEntryPointQueryResult*);
using EntryPointByVersionFn = cudaError_t (*)(const char*, void**, unsigned int, unsigned long long,
                                              cudaDriverEntryPointQueryResult*);

cudaError_t EntryPoint(EntryPointFn fn, const char* symbol, void** pfn, unsigned long long flags,
                       cudaDriverEntryPointQueryResult* status) {
  if (!fn) return cudaErrorInitializationError;
  cudaError_t rc = fn(symbol, pfn, flags, status);
  // Without a version the runtime hands out the ABI of its own version.
  if (rc == cudaSuccess && !InHook()) {
    HookScope scope;
    WrapDriverEntryPoint(symbol, pfn, RuntimeMajor() * 1000);
  }
  return rc;
}

cudaError_t EntryPointByVersion(EntryPointByVersionFn fn, const char* symbol, void** pfn,
                                unsigned int version, unsigned long long flags,
                                cudaDriverEntryPointQueryResult* status) {
  if (!fn) return cudaErrorInitializationError;
  cudaError_t rc = fn(symbol, pfn, version, flags, status);
  if (rc == cudaSuccess && !InHook()) {
    HookScope scope;
    WrapDriverEntryPoint(symbol, pfn, static_cast<int>(version));
  }
  return rc;
}
}  // namespace

#define PS_ENTRY_POINT(NAME)                                                                 \
  PINSCOPE_EXPORT cudaError_t ps_##NAME(const char* s, void** pfn, unsigned long long flags, \
                                        cudaDriverEntryPointQueryResult* st) __asm__(#NAME); \
  cudaError_t ps_##NAME(const char* s, void** pfn, unsigned long long flags,                 \
                        cudaDriverEntryPointQueryResult* st) {                               \
    static RealFn<EntryPointFn> real(#NAME);                                                 \
    return EntryPoint(real.get(), s, pfn, flags, st);                                        \
  }
PS_ENTRY_POINT(cudaGetDriverEntryPoint)
PS_ENTRY_POINT(cudaGetDriverEntryPoint_ptsz)

#define PS_ENTRY_POINT_BY_VERSION(NAME)                                                      \
  PINSCOPE_EXPORT cudaError_t ps_##NAME(const char* s, void** pfn, unsigned int v,           \
                                        unsigned long long flags,                            \
                                        cudaDriverEntryPointQueryResult* st) __asm__(#NAME); \
  cudaError_t ps_##NAME(const char* s, void** pfn, unsigned int v, unsigned long long flags, \
                        cudaDriverEntryPointQueryResult* st) {                               \
    static RealFn<EntryPointByVersionFn> real(#NAME);                                        \
    return EntryPointByVersion(real.get(), s, pfn, v, flags, st);                            \
  }
PS_ENTRY_POINT_BY_VERSION(cudaGetDriverEntryPointByVersion)
PS_ENTRY_POINT_BY_VERSION(cudaGetDriverEntryPointByVersion_ptsz)
