// A TEST DOUBLE of the CUDA driver API's memory queries (libcuda.so.1), for
// CPU-only CI: cuPointerGetAttribute(s), cuMemHostGetFlags,
// cuMemHostGetDevicePointer_v2 and cuGetProcAddress(_v2), answered from the
// runtime double's range table (fakecuda_host_query, fake_cudart.h), with
// the real driver's conventions: an unregistered host pointer is an error
// for the single-attribute query and zeros for the multi-attribute one.
#include <cuda.h>
#include <string.h>

#include "fake_cudart.h"

#define FAKE_DRV extern "C" __attribute__((visibility("default")))

namespace {

struct Info {
  int mem;  // fakecuda_host_query's kinds
  int device;
  unsigned flags;
};

Info Query(CUdeviceptr p) {
  Info i{};
  i.mem = fakecuda_host_query(reinterpret_cast<const void*>(static_cast<uintptr_t>(p)), &i.device,
                              &i.flags);
  return i;
}

// One attribute of a known pointer; false when the driver has no answer.
bool Attribute(const Info& i, CUpointer_attribute a, CUdeviceptr p, void* data) {
  switch (a) {
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<unsigned*>(data) = i.mem == 1 ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
      return true;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      *static_cast<CUdeviceptr*>(data) = p;
      return true;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (i.mem == 2) return false;
      *static_cast<void**>(data) = reinterpret_cast<void*>(static_cast<uintptr_t>(p));
      return true;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
      *static_cast<unsigned*>(data) = i.mem == 3;
      return true;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      *static_cast<int*>(data) = i.device < 0 ? 0 : i.device;
      return true;
    case CU_POINTER_ATTRIBUTE_MAPPED:
      *static_cast<unsigned*>(data) = 1;
      return true;
    default:
      return false;
  }
}

size_t AttributeSize(CUpointer_attribute a) {
  switch (a) {
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      return sizeof(CUdeviceptr);
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      return sizeof(void*);
    default:
      return sizeof(unsigned);
  }
}

}  // namespace

FAKE_DRV CUresult cuPointerGetAttribute(void* data, CUpointer_attribute a, CUdeviceptr p) {
  if (data == nullptr || p == 0) return CUDA_ERROR_INVALID_VALUE;
  Info i = Query(p);
  if (i.mem == 0) return CUDA_ERROR_INVALID_VALUE;  // not memory CUDA knows
  return Attribute(i, a, p, data) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

FAKE_DRV CUresult cuPointerGetAttributes(unsigned n, CUpointer_attribute* a, void** data,
                                         CUdeviceptr p) {
  if (a == nullptr || data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Info i = Query(p);
  for (unsigned k = 0; k < n; ++k) {
    if (data[k] == nullptr) continue;
    memset(data[k], 0, AttributeSize(a[k]));  // the documented default for unknown memory
    if (i.mem != 0) Attribute(i, a[k], p, data[k]);
  }
  return CUDA_SUCCESS;
}

FAKE_DRV CUresult cuMemHostGetFlags(unsigned* flags, void* p) {
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Info i = Query(reinterpret_cast<uintptr_t>(p));
  if (i.mem != 1) return CUDA_ERROR_INVALID_VALUE;
  *flags = i.flags;
  return CUDA_SUCCESS;
}

FAKE_DRV CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* dev, void* p, unsigned flags) {
  if (dev == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Info i = Query(reinterpret_cast<uintptr_t>(p));
  if (i.mem != 1) return CUDA_ERROR_INVALID_VALUE;
  *dev = reinterpret_cast<uintptr_t>(p);
  return CUDA_SUCCESS;
}

FAKE_DRV CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                      CUdriverProcAddressQueryResult* status);

namespace {
CUresult GetProcV1(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  return cuGetProcAddress_v2(symbol, pfn, version, flags, nullptr);
}
}  // namespace

// cuda.h maps cuGetProcAddress to the _v2 name: the 4-argument export
// (CUDA < 12) is defined under its own name.
FAKE_DRV CUresult FakeGetProcAddressV1(const char* symbol, void** pfn, int version,
                                       cuuint64_t flags) __asm__("cuGetProcAddress");
CUresult FakeGetProcAddressV1(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  return GetProcV1(symbol, pfn, version, flags);
}

FAKE_DRV CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t,
                                      CUdriverProcAddressQueryResult* status) {
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  struct Entry {
    const char* name;
    void* fn;
  };
  const Entry table[] = {
      {"cuPointerGetAttribute", reinterpret_cast<void*>(cuPointerGetAttribute)},
      {"cuPointerGetAttributes", reinterpret_cast<void*>(cuPointerGetAttributes)},
      {"cuMemHostGetFlags", reinterpret_cast<void*>(cuMemHostGetFlags)},
      {"cuMemHostGetDevicePointer", reinterpret_cast<void*>(cuMemHostGetDevicePointer_v2)},
      {"cuGetProcAddress", version >= 12000 ? reinterpret_cast<void*>(cuGetProcAddress_v2)
                                            : reinterpret_cast<void*>(GetProcV1)},
  };
  *pfn = nullptr;
  for (const Entry& e : table) {
    if (strcmp(symbol, e.name) == 0) {
      *pfn = e.fn;
      if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
      return CUDA_SUCCESS;
    }
  }
  if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return CUDA_ERROR_NOT_FOUND;
}
