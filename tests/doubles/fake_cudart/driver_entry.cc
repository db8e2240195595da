// The CUDA runtime double's routes to the driver API: cudaGetDriverEntryPoint
// and cudaGetDriverEntryPointByVersion ask the driver double (libcuda.so.1,
// fake_cuda_driver.cc) through its cuGetProcAddress_v2, as the real runtime
// asks the driver it loaded (only one already loaded: never a system libcuda).
#include <cuda.h>
#include <dlfcn.h>

#include "fake_cudart_internal.h"

namespace fakecuda {
namespace {

using GetProc = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

cudaError_t entry_point(const char* symbol, void** pfn, int version,
                        cudaDriverEntryPointQueryResult* status) {
  if (symbol == nullptr || pfn == nullptr) return cudaErrorInvalidValue;
  *pfn = nullptr;
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  GetProc get = h ? reinterpret_cast<GetProc>(dlsym(h, "cuGetProcAddress_v2")) : nullptr;
  if (get == nullptr) return cudaErrorInsufficientDriver;
  CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  CUresult rc = get(symbol, pfn, version, 0, &st);
  if (status) {
    *status = st == CU_GET_PROC_ADDRESS_SUCCESS ? cudaDriverEntryPointSuccess
                                                : cudaDriverEntryPointSymbolNotFound;
  }
  return rc == CUDA_SUCCESS ? cudaSuccess : cudaErrorSymbolNotFound;
}

}  // namespace
}  // namespace fakecuda

FAKE_API cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** pfn, unsigned long long,
                                             cudaDriverEntryPointQueryResult* status) {
  return fakecuda::api(
      [&] { return fakecuda::entry_point(symbol, pfn, fakecuda::kCudaVersion, status); });
}

FAKE_API cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** pfn,
                                                      unsigned version, unsigned long long,
                                                      cudaDriverEntryPointQueryResult* status) {
  return fakecuda::api(
      [&] { return fakecuda::entry_point(symbol, pfn, static_cast<int>(version), status); });
}
