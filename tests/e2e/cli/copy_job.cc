// A job for cli_process_test, linked against the CUDA runtime test double:
// one 4 MiB pageable H2D copy and one D2H copy, so `pinscope run` has a
// trace to report. Exits with the status given as argv[1] (default 0).
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

int main(int argc, char** argv) {
  const size_t bytes = 4u << 20;
  std::vector<char> host(bytes, 1);
  void* device = nullptr;
  if (cudaMalloc(&device, bytes) != cudaSuccess) return 90;
  if (cudaMemcpy(device, host.data(), bytes, cudaMemcpyHostToDevice) != cudaSuccess) return 91;
  if (cudaMemcpy(host.data(), device, bytes, cudaMemcpyDeviceToHost) != cudaSuccess) return 92;
  cudaFree(device);
  return argc > 1 ? std::atoi(argv[1]) : 0;
}
