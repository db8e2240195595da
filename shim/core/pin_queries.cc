// The program's memory queries answered as without pinscope; see
// pin_queries.h. The wrappers handed out for driver entry points are here
// too (they are not exported: the program gets their address from
// cuGetProcAddress or cudaGetDriverEntryPoint*, through interpose/).
#include "shim/core/pin_queries.h"

#include <string.h>

#include <atomic>
#include <cstdint>

#include "shim/base/guard.h"
#include "shim/pin/pinning.h"

namespace pinscope::shim {
namespace {

uintptr_t Surrogate() { return reinterpret_cast<uintptr_t>(NeverRegisteredAddress()); }

// An answer about the surrogate names the surrogate where an answer about
// the program's address would name that address.
template <typename T>
void PutBack(T* value, uintptr_t p) {
  if (value && static_cast<uintptr_t>(*value) == Surrogate()) *value = static_cast<T>(p);
}
void PutBackPtr(void** value, const void* p) {
  if (value && reinterpret_cast<uintptr_t>(*value) == Surrogate()) *value = const_cast<void*>(p);
}

// The attributes whose value is an address (cuPointerGetAttribute).
void PutBackAttribute(CUpointer_attribute a, void* data, uintptr_t p) {
  if (!data) return;
  if (a == CU_POINTER_ATTRIBUTE_DEVICE_POINTER || a == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR) {
    PutBack(static_cast<CUdeviceptr*>(data), p);
  } else if (a == CU_POINTER_ATTRIBUTE_HOST_POINTER) {
    PutBackPtr(static_cast<void**>(data), reinterpret_cast<void*>(p));
  }
}

const void* AsPtr(CUdeviceptr p) {
  return reinterpret_cast<const void*>(static_cast<uintptr_t>(p));
}
CUdeviceptr AsDev(const void* p) {
  return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p));
}

// --- the wrappers handed out for driver entry points ----------------------------

// The real function handed out for each wrapped name (the first one seen).
enum Slot { kGetAttr, kGetAttrs, kHostFlags, kHostDevPtr, kGetProc, kSlots };
std::atomic<void*> g_handed[kSlots];

template <typename Fn>
Fn Handed(Slot s) {
  return reinterpret_cast<Fn>(g_handed[s].load(std::memory_order_acquire));
}

CUresult HandedGetAttr(void* data, CUpointer_attribute a, CUdeviceptr p) {
  auto real = Handed<DrvPointerGetAttributeFn>(kGetAttr);
  if (InHook()) return real(data, a, p);
  HookScope scope;
  return QueryDrvPointerGetAttribute(real, data, a, p);
}

CUresult HandedGetAttrs(unsigned n, CUpointer_attribute* a, void** data, CUdeviceptr p) {
  auto real = Handed<DrvPointerGetAttributesFn>(kGetAttrs);
  if (InHook()) return real(n, a, data, p);
  HookScope scope;
  return QueryDrvPointerGetAttributes(real, n, a, data, p);
}

CUresult HandedHostFlags(unsigned* flags, void* p) {
  auto real = Handed<DrvHostGetFlagsFn>(kHostFlags);
  if (InHook()) return real(flags, p);
  HookScope scope;
  return QueryDrvHostGetFlags(real, flags, p);
}

CUresult HandedHostDevPtr(CUdeviceptr* dev, void* p, unsigned flags) {
  auto real = Handed<DrvHostGetDevicePointerFn>(kHostDevPtr);
  if (InHook()) return real(dev, p, flags);
  HookScope scope;
  return QueryDrvHostGetDevicePointer(real, dev, p, flags);
}

CUresult HandedGetProc(const char* symbol, void** pfn, int version, cuuint64_t flags,
                       CUdriverProcAddressQueryResult* status) {
  auto real = Handed<DrvGetProcAddressFn>(kGetProc);
  CUresult rc = real(symbol, pfn, version, flags, status);
  if (rc == CUDA_SUCCESS) WrapDriverEntryPoint(symbol, pfn, version);
  return rc;
}

struct Wrapped {
  const char* name;  // as cuGetProcAddress takes it (no _v2)
  int min_version;   // the ABI the wrapper has starts here
  Slot slot;
  void* wrapper;
};

const Wrapped kWrapped[] = {
    {"cuPointerGetAttribute", 4000, kGetAttr, reinterpret_cast<void*>(HandedGetAttr)},
    {"cuPointerGetAttributes", 7000, kGetAttrs, reinterpret_cast<void*>(HandedGetAttrs)},
    {"cuMemHostGetFlags", 2030, kHostFlags, reinterpret_cast<void*>(HandedHostFlags)},
    // Below 3.2 the name means the 32-bit device pointer ABI (v1).
    {"cuMemHostGetDevicePointer", 3020, kHostDevPtr, reinterpret_cast<void*>(HandedHostDevPtr)},
    // Below 12.0 the name means the 4-argument ABI (v1).
    {"cuGetProcAddress", 12000, kGetProc, reinterpret_cast<void*>(HandedGetProc)},
};

}  // namespace

bool HiddenRegistration(const void* p) {
  if (!PinMayOwn() || !p) return false;  // one relaxed load while nothing is pinned
  return PinOwnsRange(reinterpret_cast<uintptr_t>(p), 1);
}

cudaError_t QueryPointerAttributes(PointerAttributesFn real, cudaPointerAttributes* attr,
                                   const void* p) {
  cudaError_t rc =
      AskAsWithoutPinscope(p, cudaSuccess, [&](const void* at) { return real(attr, at); });
  if (rc == cudaSuccess && attr && p != NeverRegisteredAddress()) {
    PutBackPtr(&attr->hostPointer, p);
    PutBackPtr(&attr->devicePointer, p);
  }
  return rc;
}

cudaError_t QueryHostGetFlags(HostGetFlagsFn real, unsigned int* flags, void* p) {
  return AskAsWithoutPinscope(p, cudaSuccess,
                              [&](const void* at) { return real(flags, const_cast<void*>(at)); });
}

cudaError_t QueryHostGetDevicePointer(HostGetDevicePointerFn real, void** dev, void* p,
                                      unsigned int flags) {
  cudaError_t rc = AskAsWithoutPinscope(
      p, cudaSuccess, [&](const void* at) { return real(dev, const_cast<void*>(at), flags); });
  if (rc == cudaSuccess) PutBackPtr(dev, p);
  return rc;
}

CUresult QueryDrvPointerGetAttribute(DrvPointerGetAttributeFn real, void* data,
                                     CUpointer_attribute attribute, CUdeviceptr p) {
  bool hidden = false;
  CUresult rc = AskAsWithoutPinscope(AsPtr(p), CUDA_SUCCESS, [&](const void* at) {
    hidden = at != AsPtr(p);
    return real(data, attribute, AsDev(at));
  });
  if (rc == CUDA_SUCCESS && hidden) PutBackAttribute(attribute, data, p);
  return rc;
}

CUresult QueryDrvPointerGetAttributes(DrvPointerGetAttributesFn real, unsigned int n,
                                      CUpointer_attribute* attributes, void** data, CUdeviceptr p) {
  bool hidden = false;
  CUresult rc = AskAsWithoutPinscope(AsPtr(p), CUDA_SUCCESS, [&](const void* at) {
    hidden = at != AsPtr(p);
    return real(n, attributes, data, AsDev(at));
  });
  if (rc == CUDA_SUCCESS && hidden && attributes && data) {
    for (unsigned i = 0; i < n; ++i) PutBackAttribute(attributes[i], data[i], p);
  }
  return rc;
}

CUresult QueryDrvHostGetFlags(DrvHostGetFlagsFn real, unsigned int* flags, void* p) {
  return AskAsWithoutPinscope(p, CUDA_SUCCESS,
                              [&](const void* at) { return real(flags, const_cast<void*>(at)); });
}

CUresult QueryDrvHostGetDevicePointer(DrvHostGetDevicePointerFn real, CUdeviceptr* dev, void* p,
                                      unsigned int flags) {
  bool hidden = false;
  CUresult rc = AskAsWithoutPinscope(p, CUDA_SUCCESS, [&](const void* at) {
    hidden = at != p;
    return real(dev, const_cast<void*>(at), flags);
  });
  if (rc == CUDA_SUCCESS && hidden) PutBack(dev, reinterpret_cast<uintptr_t>(p));
  return rc;
}

void WrapDriverEntryPoint(const char* symbol, void** pfn, int cuda_version) {
  if (!symbol || !pfn || !*pfn) return;
  for (const Wrapped& w : kWrapped) {
    if (strcmp(symbol, w.name) != 0) continue;
    if (cuda_version < w.min_version || *pfn == w.wrapper) return;
    void* expected = nullptr;
    // The first real function seen for the name is the one the wrapper
    // calls; another one (another driver?) is handed out unwrapped.
    if (!g_handed[w.slot].compare_exchange_strong(expected, *pfn) && expected != *pfn) return;
    *pfn = w.wrapper;
    return;
  }
}

}  // namespace pinscope::shim
