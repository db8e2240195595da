// A shared library for tests/e2e/symbols, built with debug info (-g) and
// without (-g0): its exported function makes a pageable H2D copy through the
// CUDA runtime test double, so the report's call site is this function. The
// marker at the end of the copy line names the line the test expects.
#include <cuda_runtime_api.h>

#include <vector>

namespace symcase {

__attribute__((noinline)) int CopyBatch(int n) {
  std::vector<char> host(1u << 20, static_cast<char>(n));
  void* device = nullptr;
  if (cudaMalloc(&device, host.size()) != cudaSuccess) return 90;
  int rc = cudaMemcpy(device, host.data(), host.size(), cudaMemcpyHostToDevice);  // @copy
  asm volatile("" ::: "memory");  // no tail call: this frame stays on the stack
  cudaFree(device);
  return rc;
}

}  // namespace symcase

extern "C" int symcase_run(int n) { return symcase::CopyBatch(n); }
