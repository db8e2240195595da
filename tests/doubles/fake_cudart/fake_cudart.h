// fake_cudart.h: test-only extensions of pinscope's CUDA runtime TEST DOUBLE.
//
// tests/doubles/fake_cudart builds libcudart.so.13 / libcudart.so.12 look-alikes that
// emulate the CUDA runtime in host memory, so that CI can run pinscope's shim
// without a GPU. The functions below do not exist in the real runtime; only
// tests may call them (they are exported from the fake library next to the
// cuda* entry points, in the same version node).
#ifndef PINSCOPE_TESTS_FAKE_CUDART_H_
#define PINSCOPE_TESTS_FAKE_CUDART_H_

#include <stddef.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

// Enqueues a fake "kernel" on `stream` that keeps the stream busy for `ms`
// milliseconds (0, cudaStreamLegacy and cudaStreamPerThread mean the default
// stream of the current device).
cudaError_t fakecuda_sleep_on_stream(cudaStream_t stream, unsigned ms);

// Declares [sym, sym+size) a __device__ symbol of the current device:
// cudaMemcpy{To,From}Symbol* accept `sym` and treat it as a device address,
// and cudaPointerGetAttributes reports it as cudaMemoryTypeDevice. Returns
// cudaErrorInvalidValue for a null/empty/overlapping range.
cudaError_t fakecuda_register_symbol(const void* sym, size_t size);
// Forgets a symbol registered with fakecuda_register_symbol.
cudaError_t fakecuda_unregister_symbol(const void* sym);

struct fakecuda_stats {
  unsigned long host_register_calls;    // cudaHostRegister calls (all outcomes)
  unsigned long host_unregister_calls;  // cudaHostUnregister calls (all outcomes)
  unsigned long host_alloc_calls;       // cudaHostAlloc + cudaMallocHost calls
  unsigned long free_host_calls;        // cudaFreeHost calls
  unsigned long pointer_attribute_calls;  // cudaPointerGetAttributes calls
  unsigned long memcpy_calls;           // every cudaMemcpy* entry point call
                                        // (a batch call counts once)
  unsigned long registered_bytes;       // bytes currently cudaHostRegister'ed
                                        // (a gauge: fakecuda_reset_stats
                                        // leaves it alone)
};
void fakecuda_get_stats(struct fakecuda_stats* out);
// Zeroes the call counters (not registered_bytes, which is current state).
void fakecuda_reset_stats(void);

// 1 when p lies inside a cudaHostRegister'ed range, else 0 (cudaHostAlloc
// memory is pinned but not "registered": 0).
int fakecuda_is_registered(const void* p);

// What the double knows of p, for the driver API double (libcuda.so.1):
// 0 pageable, 1 pinned (registered or cudaHostAlloc, *flags its flags),
// 2 device, 3 managed; *device its device (-1 for host memory).
int fakecuda_host_query(const void* p, int* device, unsigned* flags);

// Makes every later cudaHostRegister take `ms` milliseconds before it
// registers the range (0: at once, the default), as the real call does for
// large ranges: lets tests catch a registration under way.
void fakecuda_set_register_delay_ms(unsigned ms);

// Fault injection, by environment variable (read at every call, so it
// reaches a program run unmodified under a preloaded shim):
//   FAKE_CUDART_FAIL_REGISTER=SPEC    cudaHostRegister fails with
//                                     cudaErrorMemoryAllocation, nothing registered
//   FAKE_CUDART_FAIL_UNREGISTER=SPEC  cudaHostUnregister fails with
//                                     cudaErrorUnknown, the range stays registered
// SPEC: "all" (every call), or call numbers and ranges counted from 1 over
// the process's calls of that function, whoever makes them ("1", "2-3,5").
// The failed call counts in the statistics and sets the last error like any
// failed call.

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // PINSCOPE_TESTS_FAKE_CUDART_H_
