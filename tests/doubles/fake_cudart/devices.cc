// The CUDA runtime double's versions and devices: cudaRuntimeGetVersion,
// cudaGetDevice*/cudaSetDevice*, device properties and attributes (an
// H200-like device; FAKECUDA_DEVICES of them).
#include "fake_cudart_internal.h"

#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace fakecuda {
namespace {

void fill_props(cudaDeviceProp* p, int dev) {
  std::memset(p, 0, sizeof(*p));
  std::snprintf(p->name, sizeof(p->name), "%s",
                "pinscope fake CUDA device (test double)");
  std::memcpy(p->uuid.bytes, "FAKECUDA-DEVICE", 15);
  p->uuid.bytes[15] = static_cast<char>(dev);
  p->totalGlobalMem = size_t{1} << 34;
  p->sharedMemPerBlock = 48 * 1024;
  p->regsPerBlock = 65536;
  p->warpSize = 32;
  p->memPitch = SIZE_MAX >> 1;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = 1024;
  p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = INT_MAX;
  p->maxGridSize[1] = 65535;
  p->maxGridSize[2] = 65535;
  p->totalConstMem = 65536;
  p->major = 9;
  p->minor = 0;
  p->textureAlignment = 512;
  p->texturePitchAlignment = 32;
  p->multiProcessorCount = 132;
  p->integrated = 0;
  p->canMapHostMemory = 1;
  p->concurrentKernels = 1;
  p->pciBusID = 0x10 + dev;
  p->pciDeviceID = 0;
  p->pciDomainID = 0;
  p->asyncEngineCount = 2;
  p->unifiedAddressing = 1;
  p->memoryBusWidth = 5120;
  p->l2CacheSize = 50 * 1024 * 1024;
  p->maxThreadsPerMultiProcessor = 2048;
  p->streamPrioritiesSupported = 1;
  p->sharedMemPerMultiprocessor = 228 * 1024;
  p->regsPerMultiprocessor = 65536;
  p->managedMemory = 1;
  p->concurrentManagedAccess = 1;
  p->canUseHostPointerForRegisteredMem = 1;
  p->maxBlocksPerMultiProcessor = 32;
  p->hostRegisterSupported = 1;
  p->hostRegisterReadOnlySupported = 1;
  p->memoryPoolsSupported = 1;
}

int device_attribute(cudaDeviceAttr a, int dev) {
  switch (a) {
    case cudaDevAttrMaxThreadsPerBlock: return 1024;
    case cudaDevAttrMaxBlockDimX:
    case cudaDevAttrMaxBlockDimY: return 1024;
    case cudaDevAttrMaxBlockDimZ: return 64;
    case cudaDevAttrMaxGridDimX: return INT_MAX;
    case cudaDevAttrMaxGridDimY:
    case cudaDevAttrMaxGridDimZ: return 65535;
    case cudaDevAttrWarpSize: return 32;
    case cudaDevAttrMultiProcessorCount: return 132;
    case cudaDevAttrComputeCapabilityMajor: return 9;
    case cudaDevAttrComputeCapabilityMinor: return 0;
    case cudaDevAttrPciBusId: return 0x10 + dev;
    case cudaDevAttrPciDeviceId: return 0;
    case cudaDevAttrPciDomainId: return 0;
    case cudaDevAttrAsyncEngineCount: return 2;
    case cudaDevAttrUnifiedAddressing: return 1;
    case cudaDevAttrCanMapHostMemory: return 1;
    case cudaDevAttrConcurrentKernels: return 1;
    case cudaDevAttrManagedMemory: return 1;
    case cudaDevAttrConcurrentManagedAccess: return 1;
    case cudaDevAttrPageableMemoryAccess: return 0;
    case cudaDevAttrCanUseHostPointerForRegisteredMem: return 1;
    case cudaDevAttrHostRegisterSupported: return 1;
    case cudaDevAttrHostRegisterReadOnlySupported: return 1;
    case cudaDevAttrMemoryPoolsSupported: return 1;
    case cudaDevAttrIntegrated: return 0;
    case cudaDevAttrL2CacheSize: return 50 * 1024 * 1024;
    case cudaDevAttrMaxThreadsPerMultiProcessor: return 2048;
    case cudaDevAttrGlobalMemoryBusWidth: return 5120;
    default: return 0;
  }
}

cudaError_t get_props(cudaDeviceProp* prop, int d) {
  CHECK_DEVICE();
  if (prop == nullptr) return cudaErrorInvalidValue;
  if (!valid_device(d)) return cudaErrorInvalidDevice;
  fill_props(prop, d);
  return cudaSuccess;
}

}  // namespace
}  // namespace fakecuda

using fakecuda::api;
using fakecuda::device_attribute;
using fakecuda::device_count;
using fakecuda::G;
using fakecuda::get_props;
using fakecuda::Global;
using fakecuda::kCudaVersion;
using fakecuda::sync_device;
using fakecuda::t_device;
using fakecuda::valid_device;

#if FAKE_CUDART_MAJOR == 12
extern "C" cudaError_t cudaGetDeviceProperties_v2(cudaDeviceProp* prop, int device);
#endif

// --- Versions and devices -------------------------------------------------

FAKE_API cudaError_t cudaRuntimeGetVersion(int* v) {
  return api([&]() -> cudaError_t {
    if (v == nullptr) return cudaErrorInvalidValue;
    *v = kCudaVersion;
    return cudaSuccess;
  });
}

FAKE_API cudaError_t cudaDriverGetVersion(int* v) {
  return api([&]() -> cudaError_t {
    if (v == nullptr) return cudaErrorInvalidValue;
    *v = kCudaVersion;
    return cudaSuccess;
  });
}

FAKE_API cudaError_t cudaGetDeviceCount(int* count) {
  return api([&]() -> cudaError_t {
    if (count == nullptr) return cudaErrorInvalidValue;
    *count = device_count();
    return *count == 0 ? cudaErrorNoDevice : cudaSuccess;
  });
}

// Bus 0x17 + ordinal, domain 0: what the NVML double (tests/doubles/fake_nvml)
// answers to as well.
FAKE_API cudaError_t cudaDeviceGetPCIBusId(char* bus, int len, int device) {
  return api([&]() -> cudaError_t {
    if (bus == nullptr || len <= 0 || device < 0 || device >= device_count())
      return cudaErrorInvalidValue;
    std::snprintf(bus, static_cast<size_t>(len), "0000:%02x:00.0", 0x17 + device);
    return cudaSuccess;
  });
}

FAKE_API cudaError_t cudaGetDevice(int* d) {
  return api([&]() -> cudaError_t {
    CHECK_DEVICE();
    if (d == nullptr) return cudaErrorInvalidValue;
    *d = t_device;
    return cudaSuccess;
  });
}

FAKE_API cudaError_t cudaSetDevice(int d) {
  return api([&]() -> cudaError_t {
    CHECK_DEVICE();
    if (!valid_device(d)) return cudaErrorInvalidDevice;
    t_device = d;
    return cudaSuccess;
  });
}

FAKE_API cudaError_t cudaInitDevice(int d, unsigned deviceFlags, unsigned flags) {
  return api([&]() -> cudaError_t {
    CHECK_DEVICE();
    if (!valid_device(d)) return cudaErrorInvalidDevice;
    if (flags != 0 || (deviceFlags & ~static_cast<unsigned>(cudaDeviceMask)))
      return cudaErrorInvalidValue;
    return cudaSuccess;
  });
}

FAKE_API cudaError_t cudaSetDeviceFlags(unsigned flags) {
  return api([&]() -> cudaError_t {
    CHECK_DEVICE();
    if (flags & ~static_cast<unsigned>(cudaDeviceMask)) return cudaErrorInvalidValue;
    Global& g = G();
    std::lock_guard<std::mutex> lk(g.mu);
    g.device_flags.resize(device_count());
    g.device_flags[t_device] = flags;
    return cudaSuccess;
  });
}

FAKE_API cudaError_t cudaGetDeviceFlags(unsigned* flags) {
  return api([&]() -> cudaError_t {
    CHECK_DEVICE();
    if (flags == nullptr) return cudaErrorInvalidValue;
    Global& g = G();
    std::lock_guard<std::mutex> lk(g.mu);
    g.device_flags.resize(device_count());
    *flags = g.device_flags[t_device] | cudaDeviceMapHost;
    return cudaSuccess;
  });
}

FAKE_API cudaError_t cudaDeviceSynchronize(void) {
  return api([&]() -> cudaError_t {
    CHECK_DEVICE();
    sync_device(t_device);
    return cudaSuccess;
  });
}

// In the 12.x double the struct is the 13.0 layout: fields up to maxGridSize
// match the 12.x layout, the rest do not (the 12.x struct is larger, so this
// never writes past the caller's struct).
FAKE_API cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int d) {
  return api([&] { return get_props(prop, d); });
}
#if FAKE_CUDART_MAJOR == 12
FAKE_API cudaError_t cudaGetDeviceProperties_v2(cudaDeviceProp* prop, int d) {
  return api([&] { return get_props(prop, d); });
}
#endif

FAKE_API cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int d) {
  return api([&]() -> cudaError_t {
    CHECK_DEVICE();
    if (value == nullptr || attr < 1 || attr >= cudaDevAttrMax)
      return cudaErrorInvalidValue;
    if (!valid_device(d)) return cudaErrorInvalidDevice;
    *value = device_attribute(attr, d);
    return cudaSuccess;
  });
}

FAKE_API cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  return api([&]() -> cudaError_t {
    CHECK_DEVICE();
    if (least) *least = 0;
    if (greatest) *greatest = -5;
    return cudaSuccess;
  });
}
