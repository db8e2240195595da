// The program's questions about its memory, answered as without pinscope:
// memory that pinscope registered behind the program's back (shim/pin)
// reads as the plain pageable memory it is to the program, in every query
// PyTorch, CuPy, numba and Triton ask (docs/pinning.md lists them and why
// the list is complete), while pinscope's own copy path and classification
// (cuda/real_runtime.cc) keep calling the real functions and see the truth.
//
// How: a query about such memory is answered by asking CUDA the same
// question about an address that is surely not registered
// (NeverRegisteredAddress), and putting the program's address back where
// the answer holds that one. So the answer, its error code and the
// runtime's last-error state are CUDA's own for pageable memory.
//
// Contract: no allocation; one relaxed load when nothing is pinned, else
// the pinning lock around a table scan (never across a CUDA call). Each
// function takes the real function to call; the hooks (interpose/) and the
// entry points handed out here resolve it.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "shim/cuda/real_runtime.h"

namespace pinscope::shim {

// True if p lies in memory that pinscope registered (the program did not).
bool HiddenRegistration(const void* p);

// Asks `call(address)` about p as the program would without pinscope: about
// the never-registered address instead when pinscope registered p, checked
// before the call and again after a successful one (a registration on
// another thread in between).
template <typename Rc, typename Call>
Rc AskAsWithoutPinscope(const void* p, Rc ok, Call&& call) {
  if (HiddenRegistration(p)) return call(NeverRegisteredAddress());
  Rc rc = call(p);
  if (rc == ok && HiddenRegistration(p)) rc = call(NeverRegisteredAddress());
  return rc;
}

using PointerAttributesFn = cudaError_t (*)(cudaPointerAttributes*, const void*);
using HostGetFlagsFn = cudaError_t (*)(unsigned int*, void*);
using HostGetDevicePointerFn = cudaError_t (*)(void**, void*, unsigned int);
using DrvPointerGetAttributeFn = CUresult (*)(void*, CUpointer_attribute, CUdeviceptr);
using DrvPointerGetAttributesFn = CUresult (*)(unsigned int, CUpointer_attribute*, void**,
                                               CUdeviceptr);
using DrvHostGetFlagsFn = CUresult (*)(unsigned int*, void*);
using DrvHostGetDevicePointerFn = CUresult (*)(CUdeviceptr*, void*, unsigned int);
using DrvGetProcAddressFn = CUresult (*)(const char*, void**, int, cuuint64_t,
                                         CUdriverProcAddressQueryResult*);
using DrvGetProcAddressV1Fn = CUresult (*)(const char*, void**, int, cuuint64_t);

// The runtime's queries.
cudaError_t QueryPointerAttributes(PointerAttributesFn real, cudaPointerAttributes* attr,
                                   const void* p);
cudaError_t QueryHostGetFlags(HostGetFlagsFn real, unsigned int* flags, void* p);
cudaError_t QueryHostGetDevicePointer(HostGetDevicePointerFn real, void** dev, void* p,
                                      unsigned int flags);

// The driver's queries.
CUresult QueryDrvPointerGetAttribute(DrvPointerGetAttributeFn real, void* data,
                                     CUpointer_attribute attribute, CUdeviceptr p);
CUresult QueryDrvPointerGetAttributes(DrvPointerGetAttributesFn real, unsigned int n,
                                      CUpointer_attribute* attributes, void** data, CUdeviceptr p);
CUresult QueryDrvHostGetFlags(DrvHostGetFlagsFn real, unsigned int* flags, void* p);
CUresult QueryDrvHostGetDevicePointer(DrvHostGetDevicePointerFn real, CUdeviceptr* dev, void* p,
                                      unsigned int flags);

// A driver entry point just handed to the program (by cuGetProcAddress or
// the runtime's cudaGetDriverEntryPoint*, for `cuda_version`): if it is one
// of the queries above (or cuGetProcAddress itself) in the ABI pinscope
// wraps, *pfn becomes pinscope's wrapper, which calls the function that was
// handed out. Anything else, or a second, different real function for the
// same name, is left as it was.
void WrapDriverEntryPoint(const char* symbol, void** pfn, int cuda_version);

}  // namespace pinscope::shim
